// XXH3-128 compiled for AVX2; see xxh3_variant.hpp.
#define XXH_VECTOR XXH_AVX2
#define TENSORHUB_XXH3_NAME(name) name##_avx2
#include "core/xxh3_variant.inc"
