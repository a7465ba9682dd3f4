// libFuzzer target: the manifest decoder. Any accepted input must be canonical
// (re-encode to the same bytes) and structurally valid.
#include <cstdlib>
#include <cstring>

#include "manifest/manifest_codec.hpp"
#include "tensorhub/manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto decoded = tensorhub::decode_manifest({data, size});
  if (!decoded.is_ok()) {
    if (decoded.status().message().empty()) std::abort();
    return 0;
  }
  const auto encoded = decoded->encoded();
  if (encoded.size() != size || std::memcmp(encoded.data(), data, size) != 0) std::abort();
  if (!tensorhub::manifest_detail::validate_body(decoded->body()).is_ok()) std::abort();
  return 0;
}
