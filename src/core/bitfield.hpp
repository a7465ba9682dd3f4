// A fixed-size set of bits: which shards a peer holds, which blocks arrived.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tensorhub/status.hpp"

namespace tensorhub::core {

// Invariant: bits beyond size() in the last word are always zero, so counts
// and comparisons never see them, and the wire form is canonical.
class Bitfield {
 public:
  Bitfield() = default;
  explicit Bitfield(std::size_t size, bool value = false);

  std::size_t size() const { return size_; }
  // Inline: the piece picker and the fetch ask a bit per shard considered.
  // REQUIRES: index < size() (all three).
  bool test(std::size_t index) const {
    assert(index < size_);
    return (words_[index / 64] >> (index % 64)) & 1;
  }
  void set(std::size_t index) {
    assert(index < size_);
    words_[index / 64] |= std::uint64_t{1} << (index % 64);
  }
  void reset(std::size_t index) {
    assert(index < size_);
    words_[index / 64] &= ~(std::uint64_t{1} << (index % 64));
  }
  void set_all();
  void reset_all();
  std::size_t count() const;  // set bits, O(size/64)
  bool all() const { return count() == size_; }
  bool none() const { return count() == 0; }
  // The first index >= from whose bit equals `value`, or size() if none.
  std::size_t find_next(std::size_t from, bool value) const;

  // Wire form: ceil(size/8) bytes, bit i in byte i/8 at mask 0x80 >> (i%8)
  // (as BitTorrent's bitfield message), padding bits zero.
  std::vector<std::uint8_t> to_bytes() const;
  // Rejects a wrong length or non-zero padding bits.
  static Result<Bitfield> from_bytes(std::span<const std::uint8_t> bytes, std::size_t size);

  friend bool operator==(const Bitfield&, const Bitfield&) = default;

 private:
  void check_invariants() const;
  std::size_t size_ = 0;
  std::vector<std::uint64_t> words_;
};

}  // namespace tensorhub::core
