// The XXH3-128 variants compiled for each instruction set (internal to hash.cpp).
// Kept free of standard-library includes: a TU compiled with -mavx2 must not
// emit shared inline functions that a plain CPU could later call.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace tensorhub::core::detail {

// Writes the canonical big-endian 16-byte XXH3-128 digest of data[0..size).
using Xxh3Function = void (*)(const void* data, size_t size, uint8_t out[16]);
// The same of the concatenation of `count` pieces (streamed, never copied).
struct Piece {
  const void* data;
  size_t size;
};
using Xxh3PiecesFunction = void (*)(const Piece* pieces, size_t count, uint8_t out[16]);

void xxh3_128_baseline(const void* data, size_t size, uint8_t out[16]);
void xxh3_128_pieces_baseline(const Piece* pieces, size_t count, uint8_t out[16]);
#if defined(__x86_64__)
void xxh3_128_avx2(const void* data, size_t size, uint8_t out[16]);
void xxh3_128_pieces_avx2(const Piece* pieces, size_t count, uint8_t out[16]);
void xxh3_128_avx512(const void* data, size_t size, uint8_t out[16]);
void xxh3_128_pieces_avx512(const Piece* pieces, size_t count, uint8_t out[16]);
#endif

}  // namespace tensorhub::core::detail
