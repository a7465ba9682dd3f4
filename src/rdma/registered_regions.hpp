// A version's regions registered on every NIC of the data path: a holder's
// for remote READs (what a grant names), a fetcher's destination for READs
// to land in. Deregistered when destroyed (waiting, as the device does,
// for READs in flight).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "rdma/rdma_wire.hpp"
#include "rdma/verbs_nic.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::rdma {

class RegisteredRegions {
 public:
  // `regions` in image order (region i starts where i-1 ends), registered
  // by address, or, when `dma_bufs` is not empty, each through its dma-buf
  // (dma_bufs[i] for regions[i]; GPU memory). Errors: as
  // VerbsNic::register_memory; nothing stays registered then.
  // REQUIRES: dma_bufs is empty or as long as regions.
  static Result<RegisteredRegions> register_on(std::span<VerbsNic* const> nics,
                                               std::span<const std::span<std::byte>> regions, Access access,
                                               std::span<const peer::DmaBuf> dma_bufs = {});

  // The grant for a neighbour: each region's image offset, address, length
  // and its rkey on each NIC (in the order given to register_on).
  std::vector<GrantRegion> grant() const;
  // The lkey on NIC `nic` of a registration holding [p, p + n); nothing
  // when none does.
  std::optional<std::uint32_t> lkey(std::size_t nic, const void* p, std::size_t n) const;
  std::size_t nic_count() const { return by_nic_.size(); }

 private:
  struct Region {
    std::uint64_t offset = 0;
    std::byte* data = nullptr;
    std::size_t size = 0;
  };
  std::vector<Region> regions_;
  std::vector<std::vector<MemoryRegistration>> by_nic_;  // [nic][region]
};

}  // namespace tensorhub::rdma
