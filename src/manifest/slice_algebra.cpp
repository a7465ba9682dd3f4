#include "manifest/slice_algebra.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>
#include <string>

#include "core/quoted.hpp"

namespace tensorhub::manifest {
namespace {

bool covers_whole(const IndexRange& r, std::uint64_t extent) { return r.begin == 0 && r.end == extent; }

// Whether `a` and `b` share an element (intersect's test, without building it).
bool overlap(const TensorSlice& a, const TensorSlice& b) {
  for (std::size_t d = 0; d < a.ranges.size(); ++d) {
    if (std::max(a.ranges[d].begin, b.ranges[d].begin) >= std::min(a.ranges[d].end, b.ranges[d].end)) return false;
  }
  return true;
}

// The first dimension of the longest suffix of dimensions the slice covers
// whole, moved one to the left of it: the dimension whose range each run
// spans. 0 for a scalar.
std::size_t run_dimension(const TensorSlice& slice, std::span<const std::uint64_t> shape) {
  if (shape.empty()) return 0;
  std::size_t k = shape.size() - 1;
  while (k > 0 && covers_whole(slice.ranges[k], shape[k])) --k;
  return k;
}

// The dimension along which the slices' starts differ most: sorting by it
// lets the overlap sweep stop early for the usual splits (rows, columns,
// blocks of experts).
std::size_t sweep_dimension(std::span<const PartSlice> parts, std::size_t rank) {
  std::size_t best = 0, best_distinct = 0;
  for (std::size_t d = 0; d < rank; ++d) {
    std::set<std::uint64_t> begins;
    for (const PartSlice& p : parts) begins.insert(p.slice.ranges[d].begin);
    if (begins.size() > best_distinct) {
      best = d;
      best_distinct = begins.size();
    }
  }
  return best;
}

}  // namespace

std::optional<TensorSlice> intersect(const TensorSlice& a, const TensorSlice& b) {
  TensorSlice both;
  both.ranges.reserve(a.ranges.size());
  for (std::size_t d = 0; d < a.ranges.size(); ++d) {
    const IndexRange r{std::max(a.ranges[d].begin, b.ranges[d].begin), std::min(a.ranges[d].end, b.ranges[d].end)};
    if (r.begin >= r.end) return std::nullopt;
    both.ranges.push_back(r);
  }
  return both;
}

TensorSlice relative_to(const TensorSlice& inner, const TensorSlice& outer) {
  TensorSlice shifted = inner;
  for (std::size_t d = 0; d < shifted.ranges.size(); ++d) {
    shifted.ranges[d].begin -= outer.ranges[d].begin;
    shifted.ranges[d].end -= outer.ranges[d].begin;
  }
  return shifted;
}

std::uint64_t run_count(const TensorSlice& slice, std::span<const std::uint64_t> shape) {
  const std::size_t k = run_dimension(slice, shape);
  std::uint64_t runs = 1;
  for (std::size_t d = 0; d < k; ++d) runs *= slice.ranges[d].size();
  return runs;
}

void byte_runs(const TensorSlice& slice, std::span<const std::uint64_t> shape, std::uint32_t element_size,
               std::vector<ByteRun>& out) {
  const std::size_t rank = shape.size();
  if (rank == 0) {
    out.push_back(ByteRun{0, element_size});
    return;
  }
  // Row-major strides in bytes.
  std::vector<std::uint64_t> stride(rank);
  stride[rank - 1] = element_size;
  for (std::size_t d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * shape[d];
  const std::size_t k = run_dimension(slice, shape);
  const std::uint64_t run_length = slice.ranges[k].size() * stride[k];
  const std::uint64_t run_start = slice.ranges[k].begin * stride[k];
  // An odometer over the dimensions before k.
  std::vector<std::uint64_t> index(k);
  for (std::size_t d = 0; d < k; ++d) index[d] = slice.ranges[d].begin;
  const std::size_t first = out.size();
  while (true) {
    std::uint64_t offset = run_start;
    for (std::size_t d = 0; d < k; ++d) offset += index[d] * stride[d];
    if (out.size() > first && out.back().offset + out.back().length == offset) {
      out.back().length += run_length;
    } else {
      out.push_back(ByteRun{offset, run_length});
    }
    std::size_t d = k;
    while (d > 0) {
      --d;
      if (++index[d] < slice.ranges[d].end) break;
      index[d] = slice.ranges[d].begin;
      if (d == 0) return;
    }
    if (k == 0) return;
  }
}

Status check_exact_cover(std::string_view tensor, std::span<const std::uint64_t> shape,
                         std::span<const PartSlice> parts) {
  const std::string named = "tensor " + core::quoted(tensor) + ": ";
  const std::uint64_t total =
      std::accumulate(shape.begin(), shape.end(), std::uint64_t{1}, std::multiplies<std::uint64_t>());
  std::uint64_t covered = 0;
  for (const PartSlice& p : parts) {
    const std::uint64_t n = p.slice.element_count();
    covered = covered > std::numeric_limits<std::uint64_t>::max() - n ? std::numeric_limits<std::uint64_t>::max()
                                                                       : covered + n;
  }
  if (shape.empty() || total == 0) {  // a scalar, or no elements: exactly one part holds it
    if (parts.size() > 1) {
      const auto [first, second] = std::minmax(parts[0].part, parts[1].part);
      return Status::invalid_argument(named + "parts " + std::to_string(first) + " and " + std::to_string(second) +
                                      " both hold it");
    }
    if (parts.empty()) return Status::invalid_argument(named + "no part holds it");
    return Status::ok();
  }
  if (parts.size() > 1) {
    std::uint64_t budget = kMaxCoverComparisons * parts.size();
    const std::size_t d = sweep_dimension(parts, shape.size());
    std::vector<std::size_t> order(parts.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return parts[a].slice.ranges[d].begin < parts[b].slice.ranges[d].begin;
    });
    for (std::size_t i = 0; i < order.size(); ++i) {
      const PartSlice& a = parts[order[i]];
      for (std::size_t j = i + 1; j < order.size(); ++j) {
        const PartSlice& b = parts[order[j]];
        if (b.slice.ranges[d].begin >= a.slice.ranges[d].end) break;  // sorted: none later overlaps `a`
        if (budget-- == 0) {
          return Status::invalid_argument(named + "its " + std::to_string(parts.size()) +
                                          " slices are too fragmented to check (more than " +
                                          std::to_string(kMaxCoverComparisons) + " comparisons a part)");
        }
        if (overlap(a.slice, b.slice)) {
          const auto [first, second] = std::minmax(a.part, b.part);
          return Status::invalid_argument(named + "parts " + std::to_string(first) + " and " + std::to_string(second) +
                                          " both cover " + intersect(a.slice, b.slice)->to_string());
        }
      }
    }
  }
  if (covered < total) {
    return Status::invalid_argument(named + std::to_string(total - covered) + " of " + std::to_string(total) +
                                    " elements are in no part");
  }
  return Status::ok();
}

}  // namespace tensorhub::manifest
