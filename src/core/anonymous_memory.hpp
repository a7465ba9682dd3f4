// A large, page-aligned, zero-filled buffer straight from the kernel.
//
// Why not std::vector<std::byte>(n): the vector zero-fills every byte with
// memset, and the kernel has already zeroed each page on its first touch,
// so every byte is cleared twice and every page faulted in by the memset,
// before the transfer touches it again. Here pages arrive zeroed
// on first write, straight into the place a transfer writes them, and are
// asked to be transparent huge pages, which cuts the page faults 512-fold
// where the kernel grants them.
//
// Move-only; the memory is unmapped on destruction.
#pragma once

#include <cstddef>
#include <span>

#include "tensorhub/status.hpp"

namespace tensorhub::core {

class AnonymousMemory {
 public:
  AnonymousMemory() = default;
  // Maps `size` bytes (size 0: an empty buffer).
  static Result<AnonymousMemory> allocate(std::size_t size);
  // Maps `size` bytes of which few may ever be touched (a selection's
  // scratch: the bytes of fetched shards it does not select): no swap is
  // reserved for them and no huge pages asked, so only the pages written
  // cost memory.
  static Result<AnonymousMemory> reserve_sparse(std::size_t size);
  AnonymousMemory(AnonymousMemory&& other) noexcept;
  AnonymousMemory& operator=(AnonymousMemory&& other) noexcept;
  AnonymousMemory(const AnonymousMemory&) = delete;
  AnonymousMemory& operator=(const AnonymousMemory&) = delete;
  ~AnonymousMemory();

  std::span<std::byte> bytes() { return {data_, size_}; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }

 private:
  AnonymousMemory(std::byte* data, std::size_t size) : data_(data), size_(size) {}
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tensorhub::core
