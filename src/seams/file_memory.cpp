#include "seams/file_memory.hpp"

#include <cstring>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "core/file_io.hpp"

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

int FileMemory::write_file(std::uint64_t offset, std::span<const std::byte> bytes) const {
  // A file whose last name is gone (removed under the fetch) takes bytes
  // nobody will see: stop, rather than fill a file system for nothing.
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && st.st_nlink == 0) return ENOENT;
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return ENOSPC;  // a regular file takes no bytes only when it has no room
    bytes = bytes.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return 0;
}

Status FileMemory::write_error(int error, std::uint64_t offset) const {
  if (error == ENOENT) return Status::io_error("the output file was removed while it was being written");
  return Status::io_error(core::errno_message("cannot write the output file at byte " + std::to_string(offset), error));
}

std::optional<std::uint64_t> FileMemory::file_offset(std::span<const std::byte> piece) const {
  const auto* begin = mapping_.data();
  if (piece.data() < begin || piece.data() + piece.size() > begin + mapping_.size()) return std::nullopt;
  return static_cast<std::uint64_t>(piece.data() - begin);
}

Status FileMemory::write(const core::MutableRegions& image, std::uint64_t offset,
                         std::span<const std::byte> bytes) const {
  if (is_mapping(image)) {
    const int error = write_file(offset, bytes);
    return error == 0 ? Status::ok() : write_error(error, offset);
  }
  // Pieces of the mapping (a fetch landing in part of the file: a version
  // in parts, a selection) go into the file; others (scratch) are memory.
  int error = 0;
  std::uint64_t done = 0, failed_at = 0;
  image.for_each(offset, bytes.size(), [&](std::span<std::byte> piece) {
    const std::span<const std::byte> from = bytes.subspan(done, piece.size());
    done += piece.size();
    if (error != 0) return;
    if (auto at = file_offset(piece)) {
      error = write_file(*at, from);
      failed_at = *at;
    } else {
      std::memcpy(piece.data(), from.data(), piece.size());
    }
  });
  return error == 0 ? Status::ok() : write_error(error, failed_at);
}

Status FileMemory::copy(const core::ConstRegions& from, const core::MutableRegions& to, std::uint64_t offset,
                        std::uint64_t length) const {
  int error = 0;
  std::uint64_t failed_at = 0;
  if (is_mapping(to)) {
    std::uint64_t at = offset;
    from.for_each(offset, length, [&](std::span<const std::byte> piece) {
      if (error == 0) {
        error = write_file(at, piece);
        failed_at = at;
      }
      at += piece.size();
    });
  } else {
    // As write(): the pieces of `to` in the mapping by pwrite, others as host memory.
    std::uint64_t at = offset;
    Status other = Status::ok();
    to.for_each(offset, length, [&](std::span<std::byte> piece) {
      const std::uint64_t begin = at;
      at += piece.size();
      if (error != 0 || !other.is_ok()) return;
      auto in_file = file_offset(piece);
      if (!in_file) {
        other = host_memory().copy(from, to, begin, piece.size());
        return;
      }
      std::uint64_t within = 0;
      from.for_each(begin, piece.size(), [&](std::span<const std::byte> source) {
        if (error == 0) {
          error = write_file(*in_file + within, source);
          failed_at = *in_file + within;
        }
        within += source.size();
      });
    });
    if (!other.is_ok()) return other;
  }
  if (error == 0) return Status::ok();
  if (error == EFAULT) return Status::unavailable("the bytes to copy could not be read (a mapped file truncated under them)");
  return write_error(error, failed_at);
}

Status FileDestination::commit() {
  std::lock_guard lock(mutex_);
  if (failed_) return Status::cancelled("the fetch failed; its file was removed");
  Status s = file_.commit();  // ok again once in place
  if (!s.is_ok() && released_) return Status::cancelled("released before the file was put in place");
  return s;
}

void FileDestination::release() {
  std::lock_guard lock(mutex_);
  released_ = true;
  file_.discard();
}

void FileDestination::fetch_failed() {
  std::lock_guard lock(mutex_);
  failed_ = true;
  file_.abandon();
}

}  // namespace tensorhub::peer
