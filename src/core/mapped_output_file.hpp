// A file written in place through a shared mapping: created beside its
// final path, sized in advance, and renamed into place only once its bytes
// are complete (commit). A fetch lands its blocks straight into the file's
// pages, so the only memory the version touches is the file's.
//
// Until commit() the final path is untouched; destroying an uncommitted
// file removes it. The mapping stays valid after commit (the rename keeps
// the inode), until the object is destroyed.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "tensorhub/status.hpp"

namespace tensorhub::core {

class MappedOutputFile {
 public:
  // Creates `path`'s temporary sibling with `mode`, of `size` bytes, mapped
  // read-write. Errors: kAlreadyExists (path exists and !overwrite),
  // kInvalidArgument (size 0), kIoError (cannot create, size or map).
  static Result<MappedOutputFile> create(const std::string& path, std::size_t size, unsigned mode, bool overwrite);

  MappedOutputFile() = default;
  MappedOutputFile(MappedOutputFile&& other) noexcept;
  MappedOutputFile& operator=(MappedOutputFile&& other) noexcept;
  MappedOutputFile(const MappedOutputFile&) = delete;
  MappedOutputFile& operator=(const MappedOutputFile&) = delete;
  ~MappedOutputFile();

  std::span<std::byte> bytes() { return {static_cast<std::byte*>(data_), size_}; }
  const std::string& path() const { return path_; }

  // Renames the file into place. REQUIRES: its bytes are complete.
  // Errors: kIoError.
  Status commit();

 private:
  void close();
  std::string path_, temporary_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  bool committed_ = false;
};

}  // namespace tensorhub::core
