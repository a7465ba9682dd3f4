#include "manifest/sealed_version.hpp"

#include <map>
#include <string_view>

#include "core/quoted.hpp"
#include "manifest/slice_algebra.hpp"

namespace tensorhub::manifest {
namespace {

// The byte runs `t` (a part's tensor) takes in the whole tensor `whole`,
// relative to the whole tensor's first byte, in the order of t's bytes.
void runs_in_whole(const TensorEntry& t, const TensorEntry& whole, std::vector<ByteRun>& out) {
  out.clear();
  if (t.byte_length == 0) return;
  if (!t.is_slice()) {
    out.push_back(ByteRun{0, t.byte_length});
    return;
  }
  byte_runs(t.slice(), whole.shape, dtype_size(t.dtype), out);
}

}  // namespace

Result<std::shared_ptr<const SealedVersion>> SealedVersion::join(Seal seal,
                                                                 std::vector<std::shared_ptr<const Manifest>> parts) {
  std::vector<const Manifest*> given;
  given.reserve(parts.size());
  for (const auto& p : parts) given.push_back(p.get());
  TENSORHUB_RETURN_IF_ERROR(check_sealed_parts(seal, given));

  auto v = std::shared_ptr<SealedVersion>(new SealedVersion());
  std::map<std::string_view, std::size_t> index;
  for (std::uint32_t p = 0; p < parts.size(); ++p) {
    std::uint64_t runs = 0;
    for (const TensorEntry& t : parts[p]->tensors()) {
      runs += t.is_slice() ? run_count(t.slice(), t.global_shape) : 1;
      if (runs > kMaxLandingRuns) {
        return Status::invalid_argument("part " + std::to_string(p) + " of " + core::quoted(seal.body().model) + " v" +
                                        std::to_string(seal.body().version) + " takes more than " +
                                        std::to_string(kMaxLandingRuns) + " byte runs in the whole model (" +
                                        core::quoted(t.name) + " is one of its most fragmented slices)");
      }
      if (!index.try_emplace(t.name, v->tensors_.size()).second) continue;
      // Whole: check_sealed_parts saw the same dtype and shape in every part.
      const std::uint64_t length = *tensor_byte_length(t.dtype, t.whole_shape());
      if (length > kMaxImageSize - v->total_size_) {
        return Status::invalid_argument(core::quoted(seal.body().model) + " v" + std::to_string(seal.body().version) +
                                        ": the whole model exceeds " + std::to_string(kMaxImageSize) + " bytes");
      }
      v->tensors_.push_back(TensorEntry{t.name, t.dtype, t.whole_shape(), v->total_size_, length});
      v->total_size_ += length;
    }
  }
  v->seal_ = std::move(seal);
  v->parts_ = std::move(parts);
  return std::shared_ptr<const SealedVersion>(std::move(v));
}

std::vector<LandingRun> SealedVersion::landing_runs(std::uint32_t part) const {
  const Manifest& m = *parts_.at(part);
  std::map<std::string_view, const TensorEntry*> whole;
  for (const TensorEntry& t : tensors_) whole.emplace(t.name, &t);
  LandingRunList out;
  std::uint64_t at = 0;  // the part's image up to here is in `out`
  std::vector<ByteRun> runs;
  for (const TensorEntry& t : m.tensors()) {  // in offset order, non-overlapping
    out.add(at, kNoWholeOffset, t.byte_offset - at);
    const TensorEntry& w = *whole.at(t.name);
    runs_in_whole(t, w, runs);
    std::uint64_t within = 0;
    for (const ByteRun& r : runs) {
      out.add(t.byte_offset + within, w.byte_offset + r.offset, r.length);
      within += r.length;
    }
    at = t.byte_offset + t.byte_length;
  }
  out.add(at, kNoWholeOffset, m.total_size() - at);
  return out.take();
}

void LandingRunList::add(std::uint64_t part_offset, std::uint64_t whole_offset, std::uint64_t length) {
  if (length == 0) return;
  if (!runs_.empty()) {
    LandingRun& last = runs_.back();
    const bool both_gaps = last.whole_offset == kNoWholeOffset && whole_offset == kNoWholeOffset;
    const bool contiguous = last.whole_offset != kNoWholeOffset && whole_offset == last.whole_offset + last.length;
    if (last.part_offset + last.length == part_offset && (both_gaps || contiguous)) {
      last.length += length;
      return;
    }
  }
  runs_.push_back(LandingRun{part_offset, whole_offset, length});
}

std::uint64_t SealedVersion::gap_bytes(std::span<const LandingRun> runs) {
  std::uint64_t n = 0;
  for (const LandingRun& r : runs) {
    if (r.whole_offset == kNoWholeOffset) n += r.length;
  }
  return n;
}

core::MutableRegions landing_regions(std::span<const LandingRun> runs, const core::MutableRegions& whole,
                                     std::span<std::byte> gaps) {
  core::MutableRegions out;
  std::size_t gap_at = 0;
  for (const LandingRun& r : runs) {
    if (r.whole_offset == kNoWholeOffset) {
      out.add(gaps.subspan(gap_at, static_cast<std::size_t>(r.length)));
      gap_at += static_cast<std::size_t>(r.length);
    } else {
      whole.for_each(r.whole_offset, r.length, [&](std::span<std::byte> piece) { out.add(piece); });
    }
  }
  return out;
}

}  // namespace tensorhub::manifest
