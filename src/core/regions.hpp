// A version's image as a list of regions: memory that lies where its owner
// keeps it (one region per tensor, say), laid end to end. Offsets are into
// the image, the regions' concatenation. A range of the image may span
// several regions; readers and writers visit its pieces, one per region
// touched, in order, and never copy the image into one buffer.
//
// A Regions value does not own its memory.
#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace tensorhub::core {

template <typename Byte>  // std::byte or const std::byte
class Regions {
 public:
  using Span = std::span<Byte>;

  Regions() = default;
  // One region (empty: no image).
  explicit Regions(Span image) {
    if (!image.empty()) add(image);
  }
  // REQUIRES: no region is empty.
  explicit Regions(std::span<const Span> regions) {
    for (const Span& r : regions) add(r);
  }

  std::uint64_t size() const { return starts_.empty() ? 0 : starts_.back() + regions_.back().size(); }
  bool empty() const { return regions_.empty(); }
  std::size_t count() const { return regions_.size(); }
  const std::vector<Span>& regions() const { return regions_; }

  // Calls fn(Span) for each piece of [offset, offset + length), in order.
  // REQUIRES: offset + length <= size().
  template <typename Fn>
  void for_each(std::uint64_t offset, std::uint64_t length, Fn&& fn) const {
    assert(offset + length <= size());
    if (length == 0) return;
    std::size_t r = region_at(offset);
    std::uint64_t within = offset - starts_[r];
    while (length > 0) {
      const std::uint64_t take = std::min<std::uint64_t>(length, regions_[r].size() - within);
      fn(regions_[r].subspan(static_cast<std::size_t>(within), static_cast<std::size_t>(take)));
      length -= take;
      within = 0;
      ++r;
    }
  }

  // The pieces of [offset, offset + length), appended to `out`.
  // REQUIRES: offset + length <= size().
  void pieces(std::uint64_t offset, std::uint64_t length, std::vector<Span>& out) const {
    for_each(offset, length, [&](Span piece) { out.push_back(piece); });
  }

  Regions<const std::byte> as_const() const {
    Regions<const std::byte> out;
    for (const Span& r : regions_) out.add(std::span<const std::byte>(r));
    return out;
  }

  // Appends a region at the end of the image. REQUIRES: !region.empty().
  void add(Span region) {
    assert(!region.empty());
    starts_.push_back(size());
    regions_.push_back(region);
  }

 private:
  // The region holding byte `offset`. REQUIRES: offset < size().
  std::size_t region_at(std::uint64_t offset) const {
    auto it = std::upper_bound(starts_.begin(), starts_.end(), offset);
    return static_cast<std::size_t>(it - starts_.begin()) - 1;
  }

  std::vector<Span> regions_;
  std::vector<std::uint64_t> starts_;  // each region's offset in the image
};

using ConstRegions = Regions<const std::byte>;
using MutableRegions = Regions<std::byte>;

// Copies [offset, offset + length) of `from` to the same range of `to`.
// REQUIRES: both hold the range.
inline void copy_range(const ConstRegions& from, const MutableRegions& to, std::uint64_t offset, std::uint64_t length) {
  std::uint64_t at = offset;
  from.for_each(offset, length, [&](std::span<const std::byte> source) {
    std::size_t done = 0;
    to.for_each(at, source.size(), [&](std::span<std::byte> target) {
      std::memcpy(target.data(), source.data() + done, target.size());
      done += target.size();
    });
    at += source.size();
  });
}

}  // namespace tensorhub::core
