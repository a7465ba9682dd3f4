#include "core/host_port.hpp"

#include "core/quoted.hpp"

namespace tensorhub::core {

std::string HostPort::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<HostPort> parse_host_port(std::string_view text) {
  const std::string quoted = core::quoted(text);
  HostPort out;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return Status::invalid_argument("address " + quoted + " is not [ipv6]:port");
    }
    out.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return Status::invalid_argument("address " + quoted + " has no :port");
    out.host = std::string(text.substr(0, colon));
    if (out.host.find(':') != std::string::npos) {
      return Status::invalid_argument("address " + quoted + ": write IPv6 hosts in brackets, [::1]:7946");
    }
    port_text = text.substr(colon + 1);
  }
  if (out.host.empty()) return Status::invalid_argument("address " + quoted + " has no host");
  if (port_text.empty() || port_text.size() > 5) return Status::invalid_argument("address " + quoted + " has no valid port");
  unsigned port = 0;
  for (char c : port_text) {
    if (c < '0' || c > '9') return Status::invalid_argument("address " + quoted + " has a non-numeric port");
    port = port * 10 + static_cast<unsigned>(c - '0');
  }
  if (port > 65535) return Status::invalid_argument("address " + quoted + " has a port above 65535");
  out.port = static_cast<std::uint16_t>(port);
  return out;
}

namespace {

bool is_ipv4(std::string_view host) {
  int parts = 0;
  std::size_t i = 0;
  while (true) {
    std::size_t digits = 0;
    unsigned value = 0;
    while (i < host.size() && host[i] >= '0' && host[i] <= '9' && digits < 4) {
      value = value * 10 + static_cast<unsigned>(host[i] - '0');
      ++i;
      ++digits;
    }
    if (digits == 0 || digits > 3 || value > 255) return false;
    ++parts;
    if (i == host.size()) return parts == 4;
    if (host[i] != '.' || parts == 4) return false;
    ++i;
  }
}

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Groups of 1-4 hex digits split by ':', one '::' at most standing for the
// missing groups, and optionally a dotted quad as the last two groups.
bool is_ipv6(std::string_view host) {
  if (host.size() < 2 || host.size() > 45) return false;
  const std::size_t gap = host.find("::");
  if (gap != std::string_view::npos && host.find("::", gap + 1) != std::string_view::npos) return false;
  std::size_t groups = 0;
  std::size_t i = 0;
  if (gap == 0) i = 2;
  while (i < host.size()) {
    std::size_t end = host.find(':', i);
    const std::string_view group = host.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i);
    if (end == std::string_view::npos && group.find('.') != std::string_view::npos) {
      if (!is_ipv4(group)) return false;
      groups += 2;
      break;
    }
    if (group.empty() || group.size() > 4) return false;
    for (char c : group) {
      if (!is_hex(c)) return false;
    }
    ++groups;
    if (end == std::string_view::npos) break;
    if (end == gap) {
      i = end + 2;
      if (i == host.size()) break;
    } else {
      i = end + 1;
      if (i == host.size()) return false;  // a trailing single ':'
    }
  }
  return gap == std::string_view::npos ? groups == 8 : groups < 8;
}

}  // namespace

bool is_ip_literal(std::string_view host) { return is_ipv4(host) || is_ipv6(host); }

Result<HostPort> parse_ip_host_port(std::string_view text) {
  auto hp = parse_host_port(text);
  if (!hp) return hp;
  if (!is_ip_literal(hp->host)) {
    return Status::invalid_argument("address " + core::quoted(text) + " does not name an IP address");
  }
  return hp;
}

}  // namespace tensorhub::core
