// A fetch by selection, as the manifest sees it: the layout its tensors
// take in the caller's destination, where each byte of a version's image
// (a whole version's, or one part's) lands in it, and which shards hold
// selected bytes. No I/O; the work is bounded by kMaxLandingRuns per image.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/bitfield.hpp"
#include "manifest/sealed_version.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/status.hpp"
#include "tensorhub/tensor_slice.hpp"

namespace tensorhub::manifest {

// The selected tensors laid end to end, in the order of `whole` (a
// version's tensor table with every tensor whole: a whole version's
// manifest, or SealedVersion::tensors()): each a slice of its whole tensor
// (TensorEntry::global_shape and slice_begin; shape is the slice's
// extent), or whole when its selection is. `what` names the version in
// messages. Errors: kInvalidArgument (an empty selection, a tensor `whole`
// does not have, a tensor selected twice, a slice validate_slice refuses:
// each naming the tensor).
Result<std::vector<TensorEntry>> selected_layout(std::span<const TensorEntry> whole,
                                                 std::span<const TensorSelection> selection, std::string_view what);

// "'policy' v3 part 1": how messages name a manifest's image.
std::string image_name(const Manifest& m);
// Where the image of `m` lands in a selection's layout (`selected`, from
// selected_layout over the tensors `m` is a part of): runs tiling [0,
// m.total_size()) in increasing part_offset, whole_offset being the
// selection layout's offset, kNoWholeOffset for bytes the selection does
// not take. Errors: kInvalidArgument (more than kMaxLandingRuns runs).
Result<std::vector<LandingRun>> selection_runs(const Manifest& m, std::span<const TensorEntry> selected);
// The same for an image of `total_size` bytes holding `image_tensors`
// (sorted by offset, as a manifest's); `what` names it in messages.
Result<std::vector<LandingRun>> selection_runs(std::span<const TensorEntry> image_tensors, std::uint64_t total_size,
                                               std::span<const TensorEntry> selected, std::string_view what);
// A selection's entries for the tensors an image holds (a part's own
// tensors, slices or whole), as selected_layout gives them over the whole
// model: the tensors it names that the image does not hold are another
// part's, and left out (an empty result when it names none). Errors: as
// selected_layout (a tensor named twice, a slice that does not fit).
Result<std::vector<TensorEntry>> selection_within(std::span<const TensorEntry> image_tensors,
                                                  std::span<const TensorSelection> selection, std::string_view what);

// The shards of `m` that hold a byte of `runs` that lands somewhere.
core::Bitfield shards_selected(const Manifest& m, std::span<const LandingRun> runs);

// Bytes of `runs` that land (not kNoWholeOffset).
std::uint64_t selected_bytes(std::span<const LandingRun> runs);

// The shards of image `image` whose bytes land in one tensor: [first, last].
struct ShardSpan {
  std::uint32_t image = 0;
  std::uint32_t first = 0;
  std::uint32_t last = 0;
  friend bool operator==(const ShardSpan&, const ShardSpan&) = default;
};
// For each tensor of a destination layout (`tensors`, in increasing
// byte_offset, end to end or with gaps), the span of shards of each image
// that lands bytes in it (one span per image, in image order; none for a
// tensor of no bytes): a tensor is complete once every shard of its spans
// that its fetch wants is verified. `runs[i]` are image i's landing runs
// into the layout, `shard_sizes[i]` its shard size. O(runs + tensors).
// REQUIRES: runs.size() == shard_sizes.size(), each shard size nonzero.
std::vector<std::vector<ShardSpan>> tensor_shard_spans(std::span<const TensorEntry> tensors,
                                                       std::span<const std::vector<LandingRun>> runs,
                                                       std::span<const std::uint64_t> shard_sizes);

}  // namespace tensorhub::manifest
