// A file written in place through a shared mapping: created beside its
// final path, sized in advance, and renamed into place only once its bytes
// are complete (commit). A fetch lands its blocks straight into the file's
// pages (written through fd(), seams/file_memory.hpp), so the only memory
// the version touches is the file's.
//
// Until commit() the final path is untouched; destroying an uncommitted
// file removes it. The mapping stays valid after commit (the rename keeps
// the inode), until the object is destroyed.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "tensorhub/status.hpp"

namespace tensorhub::core {

class MappedOutputFile {
 public:
  // Creates `path`'s temporary sibling with `mode`, of `size` bytes, mapped
  // read-write. The temporary name is `path` + ".partial-PID-N", its base
  // name cut short where that would pass the file system's name limit, so
  // any legal `path` works. Only a regular file at `path` is ever replaced
  // (as mv does: whatever its mode); anything else there (a directory, a
  // device, a FIFO, a socket, a symbolic link) is refused.
  // Errors: kAlreadyExists (path exists and !overwrite), kInvalidArgument
  // (size 0; `path` is not a regular file), kNotFound (its directory does
  // not exist), kPermissionDenied (no right to create it), kIoError
  // (cannot create, size or map).
  static Result<MappedOutputFile> create(const std::string& path, std::size_t size, unsigned mode, bool overwrite);
  // When `name` (a base name in `output`'s directory) is a temporary name
  // this class gives `output`: the id of the process that made it (what a
  // restarted process removes, when that one is gone).
  static std::optional<long> temporary_owner(const std::string& name, const std::string& output);

  MappedOutputFile() = default;
  MappedOutputFile(MappedOutputFile&& other) noexcept;
  MappedOutputFile& operator=(MappedOutputFile&& other) noexcept;
  MappedOutputFile(const MappedOutputFile&) = delete;
  MappedOutputFile& operator=(const MappedOutputFile&) = delete;
  ~MappedOutputFile();

  std::span<std::byte> bytes() { return {static_cast<std::byte*>(data_), size_}; }
  // The open file that bytes() maps from offset 0, for writes that bypass
  // the mapping; -1 for an empty object.
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

  // Renames the file into place. REQUIRES: its bytes are complete.
  // Errors: kIoError; kInvalidArgument (an empty object, or discarded; or
  // something other than a regular file appeared at the path meanwhile).
  Status commit();
  // Removes an uncommitted file's name now; its mapping and descriptor stay
  // valid until destruction (a fetch let go whose memory someone may still
  // hold a reference to). No effect once committed.
  void discard();
  // As discard(), and frees the file's blocks now (truncates it to 0 bytes):
  // a failed fetch gives its space back at once. The mapping stays, but
  // reading it faults from now on: only guarded readers may still touch it
  // (core::read_guarded).
  void abandon();
  const std::string& temporary_path() const { return temporary_; }

 private:
  void close();
  std::string path_, temporary_;
  int fd_ = -1;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  bool committed_ = false;
  bool discarded_ = false;
};

}  // namespace tensorhub::core
