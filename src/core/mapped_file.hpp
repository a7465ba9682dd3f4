// A read-only memory map of a whole file. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tensorhub/status.hpp"

namespace tensorhub::core {

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to an empty span.
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  const std::string& path() const { return path_; }
  // OK while the mapped file is as it was when mapped. kIoError, saying what
  // changed, once it was truncated (pages past its new end fault when read)
  // or written since (its bytes are no longer the ones mapped). A file
  // renamed over the path is another file: this one is unchanged.
  Status unchanged() const;

 private:
  void unmap();
  std::string path_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  int fd_ = -1;  // kept open to ask the file (not the path) whether it changed
  std::int64_t mtime_ns_ = 0;
};

}  // namespace tensorhub::core
