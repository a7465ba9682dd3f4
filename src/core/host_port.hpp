// "host:port" as people write it: "10.0.0.1:7946", "[::1]:7946", "node-3:7946".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tensorhub/status.hpp"

namespace tensorhub::core {

struct HostPort {
  std::string host;  // without brackets
  std::uint16_t port = 0;
  std::string to_string() const;  // brackets an IPv6 host
  friend bool operator==(const HostPort&, const HostPort&) = default;
};

// Requires a host and a port in 0..65535; IPv6 hosts need brackets.
Result<HostPort> parse_host_port(std::string_view text);

// Whether `host` is an IPv4 (dotted quad) or IPv6 literal, not a name.
bool is_ip_literal(std::string_view host);
// The same as parse_host_port, and the host must be an IP literal: an
// address that takes no name lookup (what arrives from the network does).
Result<HostPort> parse_ip_host_port(std::string_view text);

}  // namespace tensorhub::core
