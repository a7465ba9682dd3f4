#include "transport/mate_channel.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace tensorhub::peer {
namespace {

bool hex_digit(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// The next space- or newline-ended word of `text` from `at`.
std::string_view next_word(std::string_view text, std::size_t& at) {
  const std::size_t end = text.find_first_of(" \n", at);
  if (end == std::string_view::npos) {
    at = text.size();
    return {};
  }
  std::string_view word = text.substr(at, end - at);
  at = end + 1;
  return word;
}

bool parse_u64(std::string_view word, std::uint64_t& out) {
  if (word.empty() || word.size() > 20) return false;
  auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), out);
  return ec == std::errc() && end == word.data() + word.size();
}

}  // namespace

std::string mate_socket_name(const PeerId& peer, const std::string& data_addr) {
  // sun_path holds 108 bytes: the address is cut to fit (a host:port is
  // at most 62 bytes with brackets; longer text comes only from a bad record).
  std::string name = std::string(1, '\0') + "tensorhub-mate-" + peer.hex().substr(0, 32) + "@" + data_addr;
  return name.substr(0, sizeof(sockaddr_un::sun_path));
}

std::string encode_mate_request(const ManifestId& id) { return id.hex() + "\n"; }

Result<ManifestId> decode_mate_request(std::string_view line) {
  if (line.size() != 65 || line.back() != '\n') return Status::corrupt("a mate request is 64 hex digits and a newline");
  for (char c : line.substr(0, 64)) {
    if (!hex_digit(c)) return Status::corrupt("a mate request is 64 lowercase hex digits");
  }
  return ManifestId::from_hex(std::string(line.substr(0, 64)));
}

std::string encode_mate_answer(const std::vector<SharedRange>& ranges) {
  std::string out = "ok " + std::to_string(ranges.size()) + "\n";
  for (const SharedRange& r : ranges) {
    out += to_hex(r.handle) + " " + std::to_string(r.offset) + " " + std::to_string(r.length) + "\n";
  }
  return out;
}

std::string encode_mate_refusal(std::string_view why) {
  std::string out = "error ";
  for (char c : why) out += (c == '\n' || static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  return out + "\n";
}

Status decode_mate_answer(std::string_view text, std::uint64_t total, std::vector<SharedRange>& out) {
  out.clear();
  if (text.substr(0, 6) == "error ") {
    const std::size_t end = text.find('\n');
    return Status::unavailable("the host mate refused: " + std::string(text.substr(6, end == text.npos ? 200 : end - 6)));
  }
  std::size_t at = 0;
  if (next_word(text, at) != "ok") return Status::corrupt("a mate answer starts with \"ok\" or \"error\"");
  std::uint64_t count = 0;
  if (!parse_u64(next_word(text, at), count) || count == 0 || count > kMaxMateRanges || text[at - 1] != '\n') {
    return Status::corrupt("a mate answer names 1 to " + std::to_string(kMaxMateRanges) + " ranges");
  }
  std::uint64_t sum = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    SharedRange r;
    const std::string_view handle = next_word(text, at);
    if (handle.size() != 2 * r.handle.size()) return Status::corrupt("a mate answer's handle is 128 hex digits");
    for (std::size_t k = 0; k < r.handle.size(); ++k) {
      if (!hex_digit(handle[2 * k]) || !hex_digit(handle[2 * k + 1])) return Status::corrupt("a handle is hex");
      auto [end, ec] = std::from_chars(handle.data() + 2 * k, handle.data() + 2 * k + 2, r.handle[k], 16);
      if (ec != std::errc()) return Status::corrupt("a handle is hex");
    }
    if (!parse_u64(next_word(text, at), r.offset) || !parse_u64(next_word(text, at), r.length) ||
        text[at - 1] != '\n') {
      return Status::corrupt("a mate answer's range is HANDLE OFFSET LENGTH");
    }
    if (r.length == 0 || r.length > total - sum || r.offset + r.length < r.offset) {
      return Status::corrupt("a mate answer's ranges do not add up to the version's size");
    }
    sum += r.length;
    out.push_back(r);
  }
  if (sum != total) return Status::corrupt("a mate answer's ranges do not add up to the version's size");
  if (at != text.size()) return Status::corrupt("a mate answer has bytes after its ranges");
  return Status::ok();
}

Status ask_mate(const PeerId& mate, const std::string& data_addr, const ManifestId& id, std::uint64_t total,
                int timeout_ms, std::vector<SharedRange>& ranges, int& connection) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::unavailable(std::string("socket: ") + std::strerror(errno));
  auto fail = [fd](Status s) {
    ::close(fd);
    return s;
  };
  const std::string name = mate_socket_name(mate, data_addr);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, name.data(), name.size());
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    return fail(Status::unavailable("no host mate " + mate.short_hex() + " on this host: " + std::strerror(errno)));
  }
  // The name is first come, first served: the peer that answers must run
  // as this user too (its bytes are verified anyway; this keeps another
  // user's process from answering at all).
  ucred server{};
  socklen_t size = sizeof server;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &server, &size) != 0 || server.uid != ::geteuid()) {
    return fail(Status::unavailable("the host mate's channel is held by another user's process"));
  }
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  const std::string request = encode_mate_request(id);
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    return fail(Status::unavailable(std::string("the host mate did not take the request: ") + std::strerror(errno)));
  }
  // The answer ends with its last range's newline, or the refusal's line.
  const std::size_t limit = 64 + kMaxMateRanges * 200;
  std::string answer;
  std::size_t lines_wanted = 1;
  while (true) {
    char buffer[4096];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return fail(Status::timeout("the host mate did not answer"));
    if (n <= 0) return fail(Status::unavailable("the host mate closed the channel before its answer ended"));
    answer.append(buffer, static_cast<std::size_t>(n));
    if (answer.size() > limit) return fail(Status::corrupt("the host mate's answer is too long"));
    if (lines_wanted == 1 && answer.find('\n') != std::string::npos) {
      if (answer.substr(0, 3) == "ok ") {
        std::uint64_t count = 0;
        std::size_t at = 3;
        if (!parse_u64(next_word(answer, at), count) || count > kMaxMateRanges) {
          return fail(Status::corrupt("a mate answer names 1 to " + std::to_string(kMaxMateRanges) + " ranges"));
        }
        lines_wanted = 1 + count;
      }
    }
    std::size_t lines = 0;
    for (char c : answer) lines += c == '\n';
    if (lines >= lines_wanted) break;
  }
  Status decoded = decode_mate_answer(answer, total, ranges);
  if (!decoded) return fail(decoded);
  connection = fd;
  return Status::ok();
}

}  // namespace tensorhub::peer
