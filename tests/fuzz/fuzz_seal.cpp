// libFuzzer target: the seal decoder. Any accepted input must be canonical
// (re-encode to the same bytes).
#include <cstdlib>
#include <cstring>

#include "tensorhub/seal.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto decoded = tensorhub::decode_seal({data, size});
  if (!decoded.is_ok()) {
    if (decoded.status().message().empty()) std::abort();
    return 0;
  }
  const auto encoded = decoded->encoded();
  if (encoded.size() != size || std::memcmp(encoded.data(), data, size) != 0) std::abort();
  return 0;
}
