#include "core/bitfield.hpp"

#include <bit>
#include <cassert>

namespace tensorhub::core {

Bitfield::Bitfield(std::size_t size, bool value) : size_(size), words_((size + 63) / 64, 0) {
  if (value) set_all();
}

void Bitfield::set_all() {
  for (auto& w : words_) w = ~std::uint64_t{0};
  if (size_ % 64 != 0) words_.back() = (std::uint64_t{1} << (size_ % 64)) - 1;
  check_invariants();
}

void Bitfield::reset_all() {
  for (auto& w : words_) w = 0;
}

std::size_t Bitfield::count() const {
  std::size_t n = 0;
  for (auto w : words_) n += static_cast<std::size_t>(std::popcount(w));
  return n;
}

std::size_t Bitfield::find_next(std::size_t from, bool value) const {
  if (from >= size_) return size_;
  std::size_t word = from / 64;
  std::uint64_t bits = value ? words_[word] : ~words_[word];
  bits &= ~std::uint64_t{0} << (from % 64);
  while (true) {
    if (bits != 0) {
      std::size_t index = word * 64 + static_cast<std::size_t>(std::countr_zero(bits));
      return index < size_ ? index : size_;
    }
    if (++word >= words_.size()) return size_;
    bits = value ? words_[word] : ~words_[word];
  }
}

std::vector<std::uint8_t> Bitfield::to_bytes() const {
  std::vector<std::uint8_t> out((size_ + 7) / 8, 0);
  for (std::size_t i = find_next(0, true); i < size_; i = find_next(i + 1, true)) {
    out[i / 8] |= static_cast<std::uint8_t>(0x80u >> (i % 8));
  }
  return out;
}

Result<Bitfield> Bitfield::from_bytes(std::span<const std::uint8_t> bytes, std::size_t size) {
  if (bytes.size() != (size + 7) / 8) {
    return Status::corrupt("bitfield of " + std::to_string(size) + " bits needs " + std::to_string((size + 7) / 8) +
                           " bytes, got " + std::to_string(bytes.size()));
  }
  if (size % 8 != 0 && (bytes.back() & (0xffu >> (size % 8))) != 0) {
    return Status::corrupt("bitfield has bits set beyond its size");
  }
  Bitfield out(size);
  for (std::size_t byte = 0; byte < bytes.size(); ++byte) {
    for (std::uint8_t b = bytes[byte]; b != 0; b &= static_cast<std::uint8_t>(b - 1)) {
      int bit = 7 - std::countr_zero(b) % 8;
      out.set(byte * 8 + static_cast<std::size_t>(bit));
    }
  }
  return out;
}

void Bitfield::check_invariants() const {
#if TENSORHUB_DEBUG_INVARIANTS
  assert(words_.size() == (size_ + 63) / 64);
  if (size_ % 64 != 0) assert((words_.back() >> (size_ % 64)) == 0);
#endif
}

}  // namespace tensorhub::core
