#include "manifest/selection.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "core/quoted.hpp"
#include "manifest/slice_algebra.hpp"

namespace tensorhub::manifest {
namespace {

// The byte runs of `inner` within a row-major tensor that holds `outer`
// (shape outer's extents), in the order of inner's elements.
void runs_within(const TensorSlice& inner, const TensorSlice& outer, std::span<const std::uint64_t> outer_shape,
                 std::uint32_t element_size, std::vector<ByteRun>& out) {
  out.clear();
  byte_runs(relative_to(inner, outer), outer_shape, element_size, out);
}

}  // namespace

Result<std::vector<TensorEntry>> selected_layout(std::span<const TensorEntry> whole,
                                                 std::span<const TensorSelection> selection, std::string_view what) {
  if (selection.empty()) return Status::invalid_argument("a selection of " + std::string(what) + " names no tensor");
  std::map<std::string_view, const TensorSelection*> wanted;
  for (const TensorSelection& s : selection) {
    if (!wanted.emplace(s.tensor, &s).second) {
      return Status::invalid_argument("the selection names tensor " + core::quoted(s.tensor) + " twice");
    }
  }
  std::vector<TensorEntry> out;
  std::uint64_t at = 0;
  for (const TensorEntry& t : whole) {
    auto it = wanted.find(t.name);
    if (it == wanted.end()) continue;
    const TensorSelection& s = *it->second;
    wanted.erase(it);
    TensorEntry e{t.name, t.dtype, t.shape, at, t.byte_length};
    if (!s.slice.ranges.empty() && s.slice != TensorSlice::whole(t.shape)) {
      if (Status valid = validate_slice(s.slice, t.shape); !valid) {
        return Status::invalid_argument("the selection of tensor " + core::quoted(t.name) + " " + s.slice.to_string() +
                                        " does not fit its shape: " + valid.message());
      }
      e.global_shape = t.shape;
      e.shape = s.slice.shape();
      e.slice_begin.clear();
      for (const IndexRange& r : s.slice.ranges) e.slice_begin.push_back(r.begin);
      e.byte_length = s.slice.element_count() * dtype_size(t.dtype);
    }
    at += e.byte_length;
    out.push_back(std::move(e));
  }
  if (!wanted.empty()) {
    return Status::invalid_argument(std::string(what) + " has no tensor " + core::quoted(wanted.begin()->first));
  }
  return out;
}

Result<std::vector<TensorEntry>> selection_within(std::span<const TensorEntry> image_tensors,
                                                  std::span<const TensorSelection> selection, std::string_view what) {
  // The image's tensors, whole, in its order: what selected_layout reads.
  std::vector<TensorEntry> whole;
  std::set<std::string_view> held;
  for (const TensorEntry& t : image_tensors) {
    const auto bytes = tensor_byte_length(t.dtype, t.whole_shape());
    if (!bytes) return Status::invalid_argument("tensor " + core::quoted(t.name) + " is too large");
    whole.push_back(TensorEntry{t.name, t.dtype, t.whole_shape(), 0, *bytes});
    held.insert(t.name);
  }
  std::vector<TensorSelection> mine;
  for (const TensorSelection& s : selection) {
    if (held.count(s.tensor)) mine.push_back(s);
  }
  if (mine.empty()) return std::vector<TensorEntry>{};
  return selected_layout(whole, mine, what);
}

std::string image_name(const Manifest& m) {
  return core::quoted(m.model()) + " v" + std::to_string(m.version()) +
         (m.part() ? " part " + std::to_string(m.part()->index) : std::string());
}

Result<std::vector<LandingRun>> selection_runs(const Manifest& m, std::span<const TensorEntry> selected) {
  return selection_runs(m.tensors(), m.total_size(), selected, image_name(m));
}

Result<std::vector<LandingRun>> selection_runs(std::span<const TensorEntry> image_tensors, std::uint64_t total_size,
                                               std::span<const TensorEntry> selected, std::string_view what) {
  std::map<std::string_view, const TensorEntry*> by_name;
  for (const TensorEntry& s : selected) by_name.emplace(s.name, &s);
  // Bound the work first: each selected slice of a tensor of `m` takes at
  // most its run count on both sides (the part's, and the selection's).
  std::uint64_t bound = 0;
  for (const TensorEntry& t : image_tensors) {
    auto it = by_name.find(t.name);
    if (it == by_name.end() || t.byte_length == 0) continue;
    const auto both = intersect(t.slice(), it->second->slice());
    if (!both) continue;
    // Each step of the walk below adds a gap and a run at most.
    bound += 2 * (run_count(relative_to(*both, t.slice()), t.shape) +
                  run_count(relative_to(*both, it->second->slice()), it->second->shape)) + 1;
    if (bound > kMaxLandingRuns) {
      return Status::invalid_argument("the selection takes more than " + std::to_string(kMaxLandingRuns) +
                                      " byte runs of " + std::string(what) + " (" +
                                      core::quoted(t.name) + " is one of its most fragmented slices)");
    }
  }
  LandingRunList out;
  std::uint64_t at = 0;  // the image up to here is in `out`
  std::vector<ByteRun> from, to;
  for (const TensorEntry& t : image_tensors) {  // in offset order, non-overlapping
    auto it = by_name.find(t.name);
    if (it == by_name.end() || t.byte_length == 0) continue;
    const TensorEntry& s = *it->second;
    const auto both = intersect(t.slice(), s.slice());
    if (!both) continue;
    const std::uint32_t element = dtype_size(t.dtype);
    runs_within(*both, t.slice(), t.shape, element, from);  // where its bytes lie in this image's tensor
    runs_within(*both, s.slice(), s.shape, element, to);    // and in the selection's
    // Both enumerate the intersection's elements in row-major order: walk
    // them together, cutting at either side's run ends.
    std::size_t i = 0, j = 0;
    std::uint64_t used_i = 0, used_j = 0;
    while (i < from.size() && j < to.size()) {
      const std::uint64_t length = std::min(from[i].length - used_i, to[j].length - used_j);
      const std::uint64_t part_offset = t.byte_offset + from[i].offset + used_i;
      out.add(at, kNoWholeOffset, part_offset - at);
      out.add(part_offset, s.byte_offset + to[j].offset + used_j, length);
      at = part_offset + length;
      used_i += length;
      used_j += length;
      if (used_i == from[i].length) {
        ++i;
        used_i = 0;
      }
      if (used_j == to[j].length) {
        ++j;
        used_j = 0;
      }
    }
  }
  out.add(at, kNoWholeOffset, total_size - at);
  return out.take();
}

core::Bitfield shards_selected(const Manifest& m, std::span<const LandingRun> runs) {
  core::Bitfield out(m.shard_count());
  const std::uint64_t shard = m.shard_size();
  for (const LandingRun& r : runs) {
    if (r.whole_offset == kNoWholeOffset || r.length == 0) continue;
    for (std::uint64_t s = r.part_offset / shard; s <= (r.part_offset + r.length - 1) / shard; ++s) out.set(s);
  }
  return out;
}

std::uint64_t selected_bytes(std::span<const LandingRun> runs) {
  std::uint64_t n = 0;
  for (const LandingRun& r : runs) {
    if (r.whole_offset != kNoWholeOffset) n += r.length;
  }
  return n;
}

std::vector<std::vector<ShardSpan>> tensor_shard_spans(std::span<const TensorEntry> tensors,
                                                       std::span<const std::vector<LandingRun>> runs,
                                                       std::span<const std::uint64_t> shard_sizes) {
  std::vector<std::vector<ShardSpan>> out(tensors.size());
  auto note = [&](std::size_t tensor, std::uint32_t image, std::uint64_t first, std::uint64_t last) {
    std::vector<ShardSpan>& spans = out[tensor];
    if (spans.empty() || spans.back().image != image) {
      spans.push_back(ShardSpan{image, static_cast<std::uint32_t>(first), static_cast<std::uint32_t>(last)});
      return;
    }
    spans.back().first = std::min<std::uint32_t>(spans.back().first, static_cast<std::uint32_t>(first));
    spans.back().last = std::max<std::uint32_t>(spans.back().last, static_cast<std::uint32_t>(last));
  };
  for (std::uint32_t image = 0; image < runs.size(); ++image) {
    const std::uint64_t shard = shard_sizes[image];
    for (const LandingRun& r : runs[image]) {
      if (r.whole_offset == kNoWholeOffset || r.length == 0) continue;
      // The first tensor that ends after the run begins, then each it overlaps.
      auto it = std::upper_bound(tensors.begin(), tensors.end(), r.whole_offset,
                                 [](std::uint64_t at, const TensorEntry& t) { return at < t.byte_offset + t.byte_length; });
      for (; it != tensors.end() && it->byte_offset < r.whole_offset + r.length; ++it) {
        if (it->byte_length == 0) continue;
        const std::uint64_t from = std::max(r.whole_offset, it->byte_offset) - r.whole_offset + r.part_offset;
        const std::uint64_t to = std::min(r.whole_offset + r.length, it->byte_offset + it->byte_length) -
                                 r.whole_offset + r.part_offset;  // exclusive
        note(static_cast<std::size_t>(it - tensors.begin()), image, from / shard, (to - 1) / shard);
      }
    }
  }
  return out;
}

}  // namespace tensorhub::manifest
