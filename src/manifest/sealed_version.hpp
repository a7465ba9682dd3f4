// A version published in parts, as a reader sees it: its seal, the part
// manifests the seal names (checked together by check_sealed_parts), and
// the whole model they describe.
//
// The whole model is laid out as one image of whole tensors, end to end
// without gaps, in the order the parts first name them (part 0's tensors
// in offset order, then the tensors part 1 adds, and so on): what a fetch
// of the whole version writes, and what VersionInfo::bytes counts. Each
// part's bytes land in it through landing_runs(): no part is ever copied
// whole and then unpacked.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/regions.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/seal.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::manifest {

// Bytes [part_offset, part_offset + length) of a part's image belong at
// `whole_offset` of the whole image; `whole_offset` is kNoWholeOffset for
// bytes that belong to no tensor (a gap in the part's image, such as a
// safetensors header), which a fetch must still receive to verify the
// shard that holds them.
struct LandingRun {
  std::uint64_t part_offset = 0;
  std::uint64_t whole_offset = 0;
  std::uint64_t length = 0;
  friend bool operator==(const LandingRun&, const LandingRun&) = default;
};
inline constexpr std::uint64_t kNoWholeOffset = ~std::uint64_t{0};

// Landing runs as they are found, in increasing part offset: a run that
// continues the last one on both sides (or both are gaps) extends it.
class LandingRunList {
 public:
  void add(std::uint64_t part_offset, std::uint64_t whole_offset, std::uint64_t length);
  std::vector<LandingRun> take() { return std::move(runs_); }

 private:
  std::vector<LandingRun> runs_;
};

// At most this many landing runs per part: a part whose slices are more
// fragmented in the whole layout (a column slice of a tall matrix is one
// run per row) is refused by join(), as a seal whose check would cost too
// much is. 16 Mi runs of 24 bytes: 384 MiB at most, for a part of at least
// as many rows.
inline constexpr std::uint64_t kMaxLandingRuns = std::uint64_t{1} << 24;

class SealedVersion {
 public:
  // Joins `seal` and its parts (in part order). Errors: kVerifyFailed (as
  // check_sealed_parts), kInvalidArgument (a part's slices take more than
  // kMaxLandingRuns runs in the whole layout, or the whole image exceeds
  // kMaxImageSize).
  static Result<std::shared_ptr<const SealedVersion>> join(Seal seal,
                                                           std::vector<std::shared_ptr<const Manifest>> parts);

  const Seal& seal() const { return seal_; }
  const ManifestId& id() const { return seal_.id(); }
  const std::string& model() const { return seal_.body().model; }
  std::uint64_t version() const { return seal_.body().version; }
  const ManifestId& parent() const { return seal_.body().parent; }
  const PublicKey& publisher() const { return seal_.publisher(); }
  const std::vector<std::shared_ptr<const Manifest>>& parts() const { return parts_; }
  // The whole model's tensor table: every tensor whole (is_slice() false)
  // at its offset in the whole image.
  std::span<const TensorEntry> tensors() const { return tensors_; }
  std::uint64_t total_size() const { return total_size_; }
  // Where part `part`'s image lands in the whole image: runs in increasing
  // part_offset that tile [0, the part's total size) exactly.
  // REQUIRES: part < parts().size()
  std::vector<LandingRun> landing_runs(std::uint32_t part) const;
  // The bytes of `runs` that belong to no tensor (kNoWholeOffset).
  static std::uint64_t gap_bytes(std::span<const LandingRun> runs);

 private:
  SealedVersion() = default;
  Seal seal_;
  std::vector<std::shared_ptr<const Manifest>> parts_;
  std::vector<TensorEntry> tensors_;
  std::uint64_t total_size_ = 0;
};

// Part `runs`' destination as regions laid end to end: each run's piece of
// `whole` (the whole image's destination), and gaps in `gaps`, in order. A
// fetch of the part into them writes every tensor byte at its place in the
// whole image. REQUIRES: `whole` holds the whole image, and `gaps` holds
// gap_bytes(runs) bytes.
core::MutableRegions landing_regions(std::span<const LandingRun> runs, const core::MutableRegions& whole,
                                     std::span<std::byte> gaps);

}  // namespace tensorhub::manifest
