// Small, careful file helpers: bounded reads and atomic writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensorhub/status.hpp"

namespace tensorhub::core {

// Reads a whole regular file, refusing one larger than max_bytes.
Result<std::vector<std::uint8_t>> read_file(const std::string& path, std::size_t max_bytes);

// Writes a file so that readers see either the old content or all of the new,
// never a part: data goes to a temporary file in the same directory (created
// with `mode`, never wider), is synced, then renamed into place. Without
// `overwrite`, an existing file is left alone and the write fails.
class AtomicFileWriter {
 public:
  static Result<AtomicFileWriter> create(const std::string& path, unsigned mode, bool overwrite);
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();  // removes the temporary file unless committed

  Status append(std::span<const std::byte> bytes);
  Status commit();

 private:
  AtomicFileWriter() = default;
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool overwrite_ = false;
};

Status write_file_atomic(const std::string& path, std::span<const std::byte> bytes, unsigned mode, bool overwrite);

// "cannot open x: Permission denied", for an errno value.
std::string errno_message(const std::string& what, int error);
// The same as a Status whose code follows errno (not found, permission, ...).
Status errno_status(const std::string& what, int error);

}  // namespace tensorhub::core
