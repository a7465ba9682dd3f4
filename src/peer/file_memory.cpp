#include "peer/file_memory.hpp"

#include <unistd.h>

#include <cerrno>

namespace tensorhub::peer {

bool FileMemory::verify_shard(const Manifest& manifest, ShardIndex index, const core::ConstRegions& image) const {
  return host_memory().verify_shard(manifest, index, image);
}

bool FileMemory::digest(ShardHashAlgorithm algorithm, const core::ConstRegions& image, std::uint64_t offset,
                        std::uint64_t length, ShardDigest& out) const {
  return host_memory().digest(algorithm, image, offset, length, out);
}

core::Blake2bDigest FileMemory::digest_ranges(std::span<const std::uint8_t> prefix, std::span<const ByteRange> ranges,
                                              const core::ConstRegions& image) const {
  return host_memory().digest_ranges(prefix, ranges, image);
}

bool FileMemory::read(const core::ConstRegions& image, std::uint64_t offset, std::span<std::byte> out) const {
  return host_memory().read(image, offset, out);
}

bool FileMemory::is_mapping(const core::MutableRegions& image) const {
  return image.count() == 1 && image.regions()[0].data() == mapping_.data() &&
         image.regions()[0].size() == mapping_.size();
}

bool FileMemory::write_file(std::uint64_t offset, std::span<const std::byte> bytes) const {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes = bytes.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return true;
}

bool FileMemory::write(const core::MutableRegions& image, std::uint64_t offset,
                       std::span<const std::byte> bytes) const {
  if (!is_mapping(image)) return host_memory().write(image, offset, bytes);
  return write_file(offset, bytes);
}

bool FileMemory::copy(const core::ConstRegions& from, const core::MutableRegions& to, std::uint64_t offset,
                      std::uint64_t length) const {
  if (!is_mapping(to)) return host_memory().copy(from, to, offset, length);
  bool ok = true;
  std::uint64_t at = offset;
  from.for_each(offset, length, [&](std::span<const std::byte> piece) {
    if (ok) ok = write_file(at, piece);
    at += piece.size();
  });
  return ok;
}

}  // namespace tensorhub::peer
