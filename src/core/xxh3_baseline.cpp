// XXH3-128 compiled for one instruction set; see xxh3_variant.hpp.
#define XXH_INLINE_ALL

#include <xxhash.h>

#include "core/xxh3_variant.hpp"

namespace tensorhub::core::detail {

void xxh3_128_baseline(const void* data, size_t size, uint8_t out[16]) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(data, size));
  for (int i = 0; i < 16; ++i) out[i] = canonical.digest[i];
}

}  // namespace tensorhub::core::detail
