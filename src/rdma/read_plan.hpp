// How one block becomes RDMA READ work requests. Sans-I/O.
//
// A READ moves one contiguous range of the holder's memory into a scatter
// list of at most `max_sge` local pieces. A block may span regions on
// either side (a version's image is a list of regions), so it is cut
// wherever the holder's region or the local scatter list ends; each cut is
// one READ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "rdma/rdma_wire.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::rdma {

struct PlannedRead {
  std::size_t region = 0;       // index into the grant's regions (its rkeys)
  std::uint64_t remote_addr = 0;
  std::uint32_t length = 0;
  std::vector<std::span<std::byte>> local;  // filled in order; sizes sum to length
};

// The READs that bring [offset, offset + length) of the holder's image
// (`regions`, by offset) into `destination` (pieces filled in order, whose
// sizes sum to `length`). Errors: kInvalidArgument (the destination's size
// is not `length`, max_sge is 0, or a READ would exceed 2 GiB);
// kNotFound (the grant does not cover the range).
Result<std::vector<PlannedRead>> plan_reads(std::span<const GrantRegion> regions, std::uint64_t offset,
                                            std::uint64_t length, std::span<const std::span<std::byte>> destination,
                                            std::size_t max_sge);

}  // namespace tensorhub::rdma
