// XXH3-128 compiled for AVX-512; see xxh3_variant.hpp.
#define XXH_VECTOR XXH_AVX512
#define TENSORHUB_XXH3_NAME(name) name##_avx512
#include "core/xxh3_variant.inc"
