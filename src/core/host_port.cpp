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

}  // namespace tensorhub::core
