// XXH3-128 for any x86-64 (SSE2) or other CPU; see xxh3_variant.hpp.
#define TENSORHUB_XXH3_NAME(name) name##_baseline
#include "core/xxh3_variant.inc"
