#include "core/secret_file.hpp"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "core/file_io.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::core {
namespace {
constexpr std::size_t kMaxSecretFileBytes = 4096;

// Wipes a string's buffer on destruction (it holds the secret in hex).
struct WipedString {
  std::string text;
  ~WipedString() { sodium_memzero(text.data(), text.size()); }
};
}  // namespace

Status write_secret_file(const std::string& path, std::string_view label, std::string_view comment,
                         const Secret32& secret, bool overwrite) {
  WipedString content;
  content.text.reserve(256);
  content.text += "# ";
  content.text += comment;
  content.text += "\n# Keep this file private: TensorHub refuses it when others can read it.\n";
  content.text += label;
  content.text += ' ';
  const WipedString hex{to_hex(secret)};
  content.text += hex.text;
  content.text += '\n';
  return write_file_atomic(path, std::as_bytes(std::span(content.text)), 0600, overwrite);
}

Result<Secret32> read_secret_file(const std::string& path, std::string_view label) {
  // Non-blocking: a FIFO planted at the path must not hang the start (it is
  // refused below as not a regular file).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    return errno_status("cannot open key file " + path, e);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::invalid_argument("key file " + path + " is not a regular file");
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    ::close(fd);
    return Status::permission_denied("key file " + path + " belongs to uid " + std::to_string(st.st_uid) +
                                     ", not to this user (uid " + std::to_string(::geteuid()) +
                                     ") or root; run: chown $(id -u) " + path);
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::permission_denied("key file " + path + " has mode " + mode +
                                     ", so others can access it; run: chmod 600 " + path);
  }
  if (st.st_size > static_cast<off_t>(kMaxSecretFileBytes)) {
    ::close(fd);
    return Status::invalid_argument("key file " + path + " is too large to be a key file");
  }
  WipedString content;
  content.text.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < content.text.size()) {
    ssize_t n = ::read(fd, content.text.data() + done, content.text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  content.text.resize(done);

  std::string_view rest = content.text;
  while (!rest.empty()) {
    std::size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    if (line.size() != label.size() + 1 + 64 || line.substr(0, label.size()) != label ||
        line[label.size()] != ' ') {
      return Status::invalid_argument("key file " + path + " is not a " + std::string(label) +
                                      " file (expected a line '" + std::string(label) + " <64 hex characters>')");
    }
    Secret32 secret{};
    Status s = from_hex(line.substr(label.size() + 1), secret);
    if (!s.is_ok()) return s.with_context("key file " + path);
    return secret;
  }
  return Status::invalid_argument("key file " + path + " holds no " + std::string(label) + " line");
}

}  // namespace tensorhub::core
