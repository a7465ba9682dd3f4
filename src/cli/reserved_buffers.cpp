#include "cli/reserved_buffers.hpp"

#include <cstring>

namespace tensorhub::cli {

Status ReservedBuffers::reserve(std::size_t count, std::size_t size) {
  for (std::size_t i = 0; i < count; ++i) {
    auto memory = core::AnonymousMemory::allocate(size);
    if (!memory) return memory.status().with_context("--reserve");
    std::memset(memory->bytes().data(), 0, size);  // fault every page in now
    buffers_.push_back(Buffer{std::move(*memory), false});
  }
  return Status::ok();
}

Result<std::size_t> ReservedBuffers::add(std::size_t size) {
  auto memory = core::AnonymousMemory::allocate(size);
  if (!memory) return memory.status().with_context("a buffer for a followed model");
  buffers_.push_back(Buffer{std::move(*memory), true});
  return buffers_.size() - 1;
}

std::optional<std::size_t> ReservedBuffers::take(std::size_t size) {
  for (std::size_t i = 0; i < buffers_.size(); ++i) {
    if (!buffers_[i].in_use && buffers_[i].memory.size() >= size) {
      buffers_[i].in_use = true;
      return i;
    }
  }
  return std::nullopt;
}

}  // namespace tensorhub::cli
