#include "core/mapped_output_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "core/file_io.hpp"

namespace tensorhub::core {

namespace {

constexpr std::string_view kTemporaryMark = ".partial-";

// What is at `path`, as a refusal: OK when nothing is there or a regular file.
Status replaceable(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Status::ok();
  if (S_ISREG(st.st_mode)) return Status::ok();
  const char* what = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISLNK(st.st_mode)  ? "a symbolic link"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a regular file";
  return Status::invalid_argument("refusing to replace " + path + ": it is " + what +
                                  "; an output replaces only a regular file");
}

// `path` + suffix, the base name cut so the result stays a legal name.
std::string sibling_name(const std::string& path, const std::string& suffix) {
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::size_t base_at = slash == std::string::npos ? 0 : slash + 1;
  long limit = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (limit <= 0) limit = 255;
  std::string base = path.substr(base_at);
  if (base.size() + suffix.size() > static_cast<std::size_t>(limit)) {
    base.resize(static_cast<std::size_t>(limit) > suffix.size() ? static_cast<std::size_t>(limit) - suffix.size() : 0);
  }
  return path.substr(0, base_at) + base + suffix;
}

}  // namespace

std::optional<long> MappedOutputFile::temporary_owner(const std::string& name, const std::string& output) {
  // <base, perhaps cut>.partial-<pid>-<n>
  const std::size_t at = name.rfind(kTemporaryMark);
  if (at == std::string::npos) return std::nullopt;
  const std::string tail = name.substr(at + kTemporaryMark.size());
  const std::size_t dash = tail.find('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == tail.size() || dash > 18) return std::nullopt;
  for (std::size_t i = 0; i < tail.size(); ++i) {
    if (i != dash && (tail[i] < '0' || tail[i] > '9')) return std::nullopt;
  }
  const std::string made = sibling_name(output, name.substr(at));
  const std::size_t slash = made.rfind('/');
  if ((slash == std::string::npos ? made : made.substr(slash + 1)) != name) return std::nullopt;
  return std::stol(tail.substr(0, dash));
}

Result<MappedOutputFile> MappedOutputFile::create(const std::string& path, std::size_t size, unsigned mode,
                                                  bool overwrite) {
  if (size == 0) return Status::invalid_argument("an output file of 0 bytes cannot be mapped: " + path);
  struct stat existing {};
  if (!overwrite && ::lstat(path.c_str(), &existing) == 0) return Status::already_exists(path + " exists");
  TENSORHUB_RETURN_IF_ERROR(replaceable(path));
  MappedOutputFile file;
  file.path_ = path;
  // A name of its own, even for two files of one path in one process: the
  // other's bytes are never truncated under its mapping.
  static std::atomic<std::uint64_t> next{0};
  file.temporary_ = sibling_name(path, std::string(kTemporaryMark) + std::to_string(::getpid()) + "-" +
                                           std::to_string(next++));
  int fd = ::open(file.temporary_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) {
    int e = errno;
    return errno_status("cannot create " + file.temporary_, e);
  }
  // Sized, not allocated: its pages come as the fetch writes them, not all
  // up front before the fetch can start.
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(file.temporary_.c_str());
    return Status::io_error(errno_message("cannot size " + file.temporary_, e));
  }
  void* data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    int e = errno;
    ::close(fd);
    ::unlink(file.temporary_.c_str());
    return Status::io_error(errno_message("cannot map " + file.temporary_, e));
  }
  file.fd_ = fd;  // kept for writes that bypass the mapping (pwrite)
  file.data_ = data;
  file.size_ = size;
  return file;
}

MappedOutputFile::MappedOutputFile(MappedOutputFile&& other) noexcept
    : path_(std::move(other.path_)),
      temporary_(std::move(other.temporary_)),
      fd_(std::exchange(other.fd_, -1)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      committed_(std::exchange(other.committed_, false)),
      discarded_(std::exchange(other.discarded_, false)) {}

MappedOutputFile& MappedOutputFile::operator=(MappedOutputFile&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    temporary_ = std::move(other.temporary_);
    fd_ = std::exchange(other.fd_, -1);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    committed_ = std::exchange(other.committed_, false);
    discarded_ = std::exchange(other.discarded_, false);
  }
  return *this;
}

MappedOutputFile::~MappedOutputFile() { close(); }

Status MappedOutputFile::commit() {
  if (committed_) return Status::ok();
  if (data_ == nullptr) return Status::invalid_argument("no output file to commit");
  if (discarded_) return Status::invalid_argument(temporary_ + " was discarded");
  TENSORHUB_RETURN_IF_ERROR(replaceable(path_));  // something else may have appeared there meanwhile
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0) {
    int e = errno;
    return Status::io_error(errno_message("cannot rename " + temporary_ + " to " + path_, e));
  }
  committed_ = true;
  return Status::ok();
}

void MappedOutputFile::discard() {
  if (data_ == nullptr || committed_ || discarded_) return;
  ::unlink(temporary_.c_str());
  discarded_ = true;
}

void MappedOutputFile::abandon() {
  if (data_ == nullptr || committed_) return;
  discard();
  if (::ftruncate(fd_, 0) != 0) {
    // The name is gone; the blocks go when the descriptor and mapping do.
  }
}

void MappedOutputFile::close() {
  discard();
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace tensorhub::core
