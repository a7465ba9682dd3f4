// libFuzzer target: the safetensors parser. Any accepted input must describe
// tensors that tile the data buffer exactly, and must serialize again.
#include <cstdlib>
#include <vector>

#include "tensorhub/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  auto layout = tensorhub::parse_safetensors(file);
  if (!layout.is_ok()) {
    if (layout.status().message().empty()) std::abort();
    return 0;
  }
  std::uint64_t covered = layout->data_offset;
  std::vector<tensorhub::TensorView> views;
  for (const auto& t : layout->tensors) {
    if (t.byte_offset != covered) std::abort();
    covered += t.byte_length;
    views.push_back({t.name, t.dtype, t.shape, file.subspan(t.byte_offset, t.byte_length)});
  }
  if (covered != size) std::abort();
  if (!tensorhub::serialize_safetensors(views, layout->metadata).is_ok()) std::abort();
  return 0;
}
