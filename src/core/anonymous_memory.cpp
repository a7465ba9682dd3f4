#include "core/anonymous_memory.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace tensorhub::core {

Result<AnonymousMemory> AnonymousMemory::allocate(std::size_t size) {
  if (size == 0) return AnonymousMemory();
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::unavailable("cannot map " + std::to_string(size) + " bytes: " + std::strerror(errno));
  }
#ifdef MADV_HUGEPAGE
  ::madvise(p, size, MADV_HUGEPAGE);  // advice only: fine if the kernel declines
#endif
  return AnonymousMemory(static_cast<std::byte*>(p), size);
}

Result<AnonymousMemory> AnonymousMemory::reserve_sparse(std::size_t size) {
  if (size == 0) return AnonymousMemory();
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return Status::unavailable("cannot map " + std::to_string(size) + " bytes: " + std::strerror(errno));
  }
  return AnonymousMemory(static_cast<std::byte*>(p), size);
}

AnonymousMemory::AnonymousMemory(AnonymousMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AnonymousMemory& AnonymousMemory::operator=(AnonymousMemory&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

AnonymousMemory::~AnonymousMemory() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace tensorhub::core
