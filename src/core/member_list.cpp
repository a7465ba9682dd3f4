#include "core/member_list.hpp"

#include <set>

#include "core/file_io.hpp"

namespace tensorhub::core {
namespace {

// A line is a key (64 hex digits) at most, plus a comment and blanks.
constexpr std::size_t kMaxLineBytes = 1024;

std::string_view trim(std::string_view s) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<std::vector<PublicKey>> parse_member_list(std::string_view text) {
  std::vector<PublicKey> keys;
  std::set<PublicKey> seen;
  std::size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const std::size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    const std::string where = "member list line " + std::to_string(line_number);
    if (line.size() > kMaxLineBytes) return Status::invalid_argument(where + ": longer than 1024 bytes");
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    auto key = PublicKey::from_hex(line);
    if (!key) return Status::invalid_argument(where + ": not a public key (64 hex digits): " + key.status().message());
    if (!seen.insert(*key).second) continue;
    if (keys.size() >= kMaxMemberListEntries) {
      return Status::invalid_argument(where + ": more than " + std::to_string(kMaxMemberListEntries) + " keys");
    }
    keys.push_back(*key);
  }
  return keys;
}

Result<std::vector<PublicKey>> load_member_list(const std::string& path) {
  // Every key takes at least 65 bytes; comments may add some.
  auto bytes = read_file(path, kMaxMemberListEntries * 128);
  if (!bytes) return bytes.status().with_context(path);
  auto keys = parse_member_list(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
  if (!keys) return keys.status().with_context(path);
  return keys;
}

}  // namespace tensorhub::core
