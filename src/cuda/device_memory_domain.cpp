#include "cuda/device_memory_domain.hpp"

#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace tensorhub::cuda {

bool DeviceMemoryDomain::read(const core::ConstRegions& image, std::uint64_t offset, std::span<std::byte> out) const {
  std::size_t at = 0;
  bool ok = true;
  image.for_each(offset, out.size(), [&](std::span<const std::byte> piece) {
    if (ok) ok = device_.copy(out.data() + at, piece.data(), piece.size()).is_ok();
    at += piece.size();
  });
  return ok;
}

Status DeviceMemoryDomain::write(const core::MutableRegions& image, std::uint64_t offset,
                                 std::span<const std::byte> bytes) const {
  std::size_t at = 0;
  Status written;
  image.for_each(offset, bytes.size(), [&](std::span<std::byte> piece) {
    if (written.is_ok()) written = device_.copy(piece.data(), bytes.data() + at, piece.size());
    at += piece.size();
  });
  if (written.is_ok()) return written;
  return Status::io_error("cannot write " + name_ + " memory: " + written.message());
}

bool DeviceMemoryDomain::verify_shard(const Manifest& manifest, ShardIndex index,
                                      const core::ConstRegions& image) const {
  // Blocks may have come by RDMA READ straight into this memory: the NIC's
  // writes must be visible to the hash kernel first. A device that orders
  // them itself makes this cheap.
  device_.flush_nic_writes();
  return peer::verify_shard_by_digest(*this, manifest, index, image);
}

bool DeviceMemoryDomain::digest(ShardHashAlgorithm algorithm, const core::ConstRegions& image, std::uint64_t offset,
                                std::uint64_t length, ShardDigest& out) const {
  if (algorithm == ShardHashAlgorithm::kXxh3_128) {
    std::vector<xxh3::Piece> pieces;
    image.for_each(offset, length, [&](std::span<const std::byte> piece) {
      pieces.push_back(xxh3::Piece{reinterpret_cast<const std::uint8_t*>(piece.data()), piece.size()});
    });
    out = ShardDigest{};
    out.size = 16;
    return device_.hash_xxh3(pieces.data(), pieces.size(), out.bytes.data()).is_ok();
  }
  std::vector<std::byte> bytes(length);
  if (!read(image, offset, bytes)) return false;
  out = compute_shard_digest(algorithm, bytes);
  return true;
}

std::shared_ptr<std::span<std::byte>> DeviceMemoryDomain::allocate_mirror(std::size_t bytes) const {
  struct Pinned {
    DeviceApi* device = nullptr;
    std::span<std::byte> bytes;
    Pinned(DeviceApi* d, std::span<std::byte> b) : device(d), bytes(b) {}
    Pinned(const Pinned&) = delete;
    Pinned& operator=(const Pinned&) = delete;
    ~Pinned() { device->free_pinned(bytes.data()); }
  };
  std::byte* memory = nullptr;
  if (!device_.allocate_pinned(bytes, memory)) return peer::MemoryDomain::allocate_mirror(bytes);
  auto pinned = std::make_shared<Pinned>(&device_, std::span<std::byte>(memory, bytes));
  return std::shared_ptr<std::span<std::byte>>(pinned, &pinned->bytes);
}

Status DeviceMemoryDomain::copy(const core::ConstRegions& from, const core::MutableRegions& to, std::uint64_t offset,
                                std::uint64_t length) const {
  // Walk both layouts at once: each copy lies inside one region of each.
  std::vector<std::span<const std::byte>> sources;
  std::vector<std::span<std::byte>> targets;
  from.pieces(offset, length, sources);
  to.pieces(offset, length, targets);
  std::size_t s = 0, t = 0;
  std::size_t s_at = 0, t_at = 0;
  while (s < sources.size() && t < targets.size()) {
    const std::size_t n = std::min(sources[s].size() - s_at, targets[t].size() - t_at);
    if (Status copied = device_.copy(targets[t].data() + t_at, sources[s].data() + s_at, n); !copied.is_ok()) {
      return Status::io_error("cannot copy into " + name_ + " memory: " + copied.message());
    }
    s_at += n;
    t_at += n;
    if (s_at == sources[s].size()) ++s, s_at = 0;
    if (t_at == targets[t].size()) ++t, t_at = 0;
  }
  return Status::ok();
}

core::Blake2bDigest DeviceMemoryDomain::digest_ranges(std::span<const std::uint8_t> prefix,
                                                      std::span<const peer::ByteRange> ranges,
                                                      const core::ConstRegions& image) const {
  crypto_generichash_state state;
  crypto_generichash_init(&state, nullptr, 0, 32);
  crypto_generichash_update(&state, prefix.data(), prefix.size());
  std::vector<std::byte> bytes;
  for (const peer::ByteRange& r : ranges) {
    bytes.resize(r.length);
    // Bytes that could not be read prove nothing: all zeros matches no digest.
    if (!read(image, r.offset, bytes)) return {};
    crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  }
  core::Blake2bDigest out{};
  crypto_generichash_final(&state, out.data(), out.size());
  return out;
}

Status DeviceMemoryDomain::share(const core::ConstRegions& image, std::vector<peer::SharedRange>& out) const {
  std::vector<std::span<const std::byte>> regions;
  if (image.size() > 0) image.pieces(0, image.size(), regions);
  out.clear();
  for (const auto& region : regions) {
    peer::SharedRange range;
    TENSORHUB_RETURN_IF_ERROR(device_.share_ipc(region.data(), region.size(), range));
    out.push_back(range);
  }
  return Status::ok();
}

peer::MemoryDomain::NicAccess DeviceMemoryDomain::nic_access() const {
  const std::string how = device_.rdma_registration();
  if (how == "dma-buf") return NicAccess::kDmaBuf;
  if (how == "peermem") return NicAccess::kAddress;
  return NicAccess::kNone;
}

Status DeviceMemoryDomain::export_dma_buf(std::span<const std::byte> region, peer::DmaBuf& out) const {
  return device_.export_dma_buf(region.data(), region.size(), out);
}

namespace {

// Ranges mapped through `device`, closed with the mapping.
class DeviceMapping final : public peer::SharedMapping {
 public:
  explicit DeviceMapping(DeviceApi& device) : device_(device) {}
  ~DeviceMapping() override {
    for (const std::byte* p : opened_) device_.close_ipc(p);
  }
  const core::ConstRegions& regions() const override { return regions_; }
  Status add(const peer::SharedRange& range) {
    if (range.length == 0) return Status::invalid_argument("a shared range of no bytes");
    const std::byte* mapped = nullptr;
    TENSORHUB_RETURN_IF_ERROR(device_.open_ipc(range, mapped));
    opened_.push_back(mapped);
    regions_.add(std::span<const std::byte>(mapped, range.length));
    return Status::ok();
  }

 private:
  DeviceApi& device_;
  std::vector<const std::byte*> opened_;
  core::ConstRegions regions_;
};

}  // namespace

Result<std::unique_ptr<peer::SharedMapping>> DeviceMemoryDomain::open_shared(
    std::span<const peer::SharedRange> ranges) const {
  auto mapping = std::make_unique<DeviceMapping>(device_);
  for (const peer::SharedRange& range : ranges) TENSORHUB_RETURN_IF_ERROR(mapping->add(range));
  return std::unique_ptr<peer::SharedMapping>(std::move(mapping));
}

}  // namespace tensorhub::cuda
