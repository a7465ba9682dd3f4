#include "rdma/read_plan.hpp"

#include <algorithm>

namespace tensorhub::rdma {

Result<std::vector<PlannedRead>> plan_reads(std::span<const GrantRegion> regions, std::uint64_t offset,
                                            std::uint64_t length, std::span<const std::span<std::byte>> destination,
                                            std::size_t max_sge) {
  if (max_sge == 0) return Status::invalid_argument("a READ needs at least one scatter entry");
  std::uint64_t total = 0;
  for (const auto& d : destination) total += d.size();
  if (total != length) {
    return Status::invalid_argument("the destination holds " + std::to_string(total) + " bytes, the block " +
                                    std::to_string(length));
  }
  std::vector<PlannedRead> out;
  // The first region that ends past `offset`.
  auto region = std::upper_bound(regions.begin(), regions.end(), offset,
                                 [](std::uint64_t at, const GrantRegion& g) { return at < g.offset + g.length; });
  std::size_t piece = 0;      // destination piece being filled
  std::size_t piece_done = 0;  // bytes of it already planned
  std::uint64_t at = offset;
  const std::uint64_t end = offset + length;
  while (at < end) {
    if (region == regions.end() || region->offset > at) {
      return Status::not_found("the grant does not cover byte " + std::to_string(at) + " of the image");
    }
    const std::uint64_t in_region = std::min(end, region->offset + region->length) - at;
    if (in_region > (std::uint64_t{1} << 31)) return Status::invalid_argument("a READ over 2 GiB");
    PlannedRead r;
    r.region = static_cast<std::size_t>(region - regions.begin());
    r.remote_addr = region->addr + (at - region->offset);
    std::uint64_t planned = 0;
    while (planned < in_region && r.local.size() < max_sge) {
      while (destination[piece].size() == piece_done) {
        ++piece;
        piece_done = 0;
      }
      const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(destination[piece].size() - piece_done, in_region - planned));
      r.local.push_back(destination[piece].subspan(piece_done, take));
      piece_done += take;
      planned += take;
    }
    r.length = static_cast<std::uint32_t>(planned);
    at += planned;
    out.push_back(std::move(r));
    if (at == region->offset + region->length) ++region;
  }
  return out;
}

}  // namespace tensorhub::rdma
