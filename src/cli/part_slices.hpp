// Which slices of larger tensors a trainer rank's safetensors file holds,
// for `tensorhub publish --part I/N`: its "__metadata__" entry
// "tensorhub.slices" maps a tensor name to {"global_shape": [...],
// "begin": [...]} (the whole tensor's shape and the slice's first index
// along each dimension); a tensor it does not name is whole.
#pragma once

#include <string_view>
#include <vector>

#include "tensorhub/safetensors.hpp"
#include "tensorhub/status.hpp"
#include "tensorhub/tensor.hpp"

namespace tensorhub::cli {

inline constexpr std::string_view kSlicesMetadataKey = "tensorhub.slices";

// `layout`'s tensors with the slices its metadata names. Errors:
// kInvalidArgument (the entry is not that JSON shape, or names a tensor the
// file does not hold). Whether each slice fits is build_manifest's check.
Result<std::vector<TensorEntry>> part_tensors(const SafetensorsLayout& layout);

}  // namespace tensorhub::cli
