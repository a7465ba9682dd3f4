#include "core/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace tensorhub::core {
Status errno_status(const std::string& what, int error) {
  std::string message = errno_message(what, error);
  switch (error) {
    case ENOENT: return Status::not_found(message);
    case EACCES:
    case EPERM: return Status::permission_denied(message);
    case EEXIST: return Status::already_exists(message);
    default: return Status::io_error(message);
  }
}

std::string errno_message(const std::string& what, int error) { return what + ": " + std::strerror(error); }

Result<std::vector<std::uint8_t>> read_file(const std::string& path, std::size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open " + path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return errno_status("cannot stat " + path, e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::invalid_argument(path + " is not a regular file");
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return Status::invalid_argument(path + " is " + std::to_string(st.st_size) + " bytes, more than the limit of " +
                                    std::to_string(max_bytes));
  }
  std::vector<std::uint8_t> data(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::read(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      ::close(fd);
      return errno_status("cannot read " + path, e);
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return data;
}

Result<AtomicFileWriter> AtomicFileWriter::create(const std::string& path, unsigned mode, bool overwrite) {
  if (!overwrite && ::access(path.c_str(), F_OK) == 0) {
    return Status::already_exists(path + " already exists; refusing to overwrite it");
  }
  AtomicFileWriter writer;
  writer.path_ = path;
  writer.overwrite_ = overwrite;
  std::string pattern = path + ".tmp.XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  writer.fd_ = ::mkostemp(name.data(), O_CLOEXEC);  // created 0600
  if (writer.fd_ < 0) return errno_status("cannot create a file next to " + path, errno);
  writer.temp_path_ = name.data();
  if (::fchmod(writer.fd_, static_cast<mode_t>(mode & 0777)) != 0) {
    return errno_status("cannot set the mode of " + writer.temp_path_, errno);
  }
  return writer;
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(other.fd_),
      overwrite_(other.overwrite_) {
  other.fd_ = -1;
  other.temp_path_.clear();
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

Status AtomicFileWriter::append(std::span<const std::byte> bytes) {
  if (fd_ < 0) return Status::internal("append after commit");
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status("cannot write " + temp_path_, errno);
    done += static_cast<std::size_t>(n);
  }
  return Status::ok();
}

Status AtomicFileWriter::commit() {
  if (fd_ < 0) return Status::internal("commit twice");
  if (::fsync(fd_) != 0) return errno_status("cannot sync " + temp_path_, errno);
  ::close(fd_);
  fd_ = -1;
  int rc = 0;
  if (overwrite_) {
    rc = ::rename(temp_path_.c_str(), path_.c_str());
  } else {
    // Atomic create-if-absent, in case the path appeared since create().
    rc = ::renameat2(AT_FDCWD, temp_path_.c_str(), AT_FDCWD, path_.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && errno == EINVAL) {  // a filesystem without RENAME_NOREPLACE
      rc = ::link(temp_path_.c_str(), path_.c_str());
      if (rc == 0) ::unlink(temp_path_.c_str());
    }
  }
  if (rc != 0) return errno_status("cannot move the new file into place at " + path_, errno);
  temp_path_.clear();
  // The rename is durable once the directory is: a crash must not lose a
  // file (a freshly made key) that the caller was told exists.
  const auto slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);  // best effort: some filesystems refuse it on a directory
    ::close(dir_fd);
  }
  return Status::ok();
}

Status write_file_atomic(const std::string& path, std::span<const std::byte> bytes, unsigned mode, bool overwrite) {
  auto writer = AtomicFileWriter::create(path, mode, overwrite);
  if (!writer) return writer.status();
  TENSORHUB_RETURN_IF_ERROR(writer->append(bytes));
  return writer->commit();
}

}  // namespace tensorhub::core
