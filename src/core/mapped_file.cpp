#include "core/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "core/file_io.hpp"

namespace tensorhub::core {

Result<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return errno_status("cannot open " + path, e);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::invalid_argument(path + " is not a regular file");
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<std::size_t>(st.st_size);
  file.fd_ = fd;
  file.mtime_ns_ = std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  if (file.size_ > 0) {
    void* data = ::mmap(nullptr, file.size_, PROT_READ, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      int e = errno;
      return Status::io_error(errno_message("cannot map " + path, e));  // `file` closes fd
    }
    file.data_ = data;
  }
  return file;
}

Status MappedFile::unchanged() const {
  if (fd_ < 0) return Status::ok();
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return errno_status("cannot inspect " + path_, errno);
  if (static_cast<std::size_t>(st.st_size) != size_) {
    return Status::io_error(path_ + " changed size under its mapping: " + std::to_string(st.st_size) + " bytes, " +
                            std::to_string(size_) + " when mapped");
  }
  if (std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec != mtime_ns_) {
    return Status::io_error(path_ + " was written since it was mapped");
  }
  return Status::ok();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::exchange(other.fd_, -1)),
      mtime_ns_(other.mtime_ns_) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
    mtime_ns_ = other.mtime_ns_;
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::unmap() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

}  // namespace tensorhub::core
