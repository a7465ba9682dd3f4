#include "rdma/registered_regions.hpp"

namespace tensorhub::rdma {

Result<RegisteredRegions> RegisteredRegions::register_on(std::span<VerbsNic* const> nics,
                                                         std::span<const std::span<std::byte>> regions,
                                                         Access access, std::span<const peer::DmaBuf> dma_bufs) {
  RegisteredRegions out;
  std::uint64_t offset = 0;
  for (const auto& r : regions) {
    out.regions_.push_back(Region{offset, r.data(), r.size()});
    offset += r.size();
  }
  for (VerbsNic* nic : nics) {
    auto& mine = out.by_nic_.emplace_back();
    for (std::size_t i = 0; i < out.regions_.size(); ++i) {
      const Region& r = out.regions_[i];
      if (r.size == 0) {
        mine.emplace_back();
        continue;
      }
      auto reg = dma_bufs.empty() ? nic->register_memory(r.data, r.size, access)
                                  : nic->register_dma_buf(dma_bufs[i], r.size, reinterpret_cast<std::uintptr_t>(r.data), access);
      if (!reg) return reg.status();
      mine.push_back(std::move(*reg));
    }
  }
  return out;
}

std::vector<GrantRegion> RegisteredRegions::grant() const {
  std::vector<GrantRegion> out;
  for (std::size_t i = 0; i < regions_.size(); ++i) {
    if (regions_[i].size == 0) continue;
    GrantRegion g;
    g.offset = regions_[i].offset;
    g.addr = reinterpret_cast<std::uintptr_t>(regions_[i].data);
    g.length = regions_[i].size;
    for (const auto& nic : by_nic_) g.rkeys.push_back(nic[i].rkey());
    out.push_back(std::move(g));
  }
  return out;
}

std::optional<std::uint32_t> RegisteredRegions::lkey(std::size_t nic, const void* p, std::size_t n) const {
  if (nic >= by_nic_.size()) return std::nullopt;
  for (const MemoryRegistration& m : by_nic_[nic]) {
    if (m.holds(p, n)) return m.lkey();
  }
  return std::nullopt;
}

}  // namespace tensorhub::rdma
