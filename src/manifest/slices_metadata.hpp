// Which slices of larger tensors a safetensors file holds: its
// "__metadata__" entry "tensorhub.slices" maps a tensor name to
// {"global_shape": [...], "begin": [...]} (the whole tensor's shape and the
// slice's first index along each dimension); a tensor it does not name is
// whole. A trainer rank's file says so for `tensorhub publish --part I/N`,
// and a fetch of a selection into a file writes it, so the file says what
// it holds (and can be published again as a part).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tensorhub/safetensors.hpp"
#include "tensorhub/status.hpp"
#include "tensorhub/tensor.hpp"

namespace tensorhub::manifest {

inline constexpr std::string_view kSlicesMetadataKey = "tensorhub.slices";

// `layout`'s tensors with the slices its metadata names. Errors:
// kInvalidArgument (the entry is not that JSON shape, or names a tensor the
// file does not hold). Whether each slice fits is build_manifest's check.
Result<std::vector<TensorEntry>> part_tensors(const SafetensorsLayout& layout);

// The metadata entry's value for `tensors`: each slice (TensorEntry::is_slice)
// by name; empty when none is a slice.
std::string slices_metadata(std::span<const TensorEntry> tensors);

}  // namespace tensorhub::manifest
