#include <doctest/doctest.h>

#include "core/host_port.hpp"

using namespace tensorhub;

TEST_CASE("host:port: hosts and ports as people write them") {
  auto v4 = core::parse_host_port("10.0.0.1:7946");
  REQUIRE(v4.is_ok());
  CHECK(v4->host == "10.0.0.1");
  CHECK(v4->port == 7946);
  auto v6 = core::parse_host_port("[::1]:7946");
  REQUIRE(v6.is_ok());
  CHECK(v6->host == "::1");
  CHECK(v6->to_string() == "[::1]:7946");
  CHECK(core::parse_host_port("node-3:7946").is_ok());
  for (const char* bad : {"10.0.0.1", ":7946", "::1:7946", "[::1]7946", "h:65536", "h:7x", "h:"}) {
    CHECK_MESSAGE(!core::parse_host_port(bad).is_ok(), bad);
  }
}

TEST_CASE("host:port: IP literals, which take no name lookup") {
  for (const char* ip : {"0.0.0.0", "127.0.0.1", "255.255.255.255", "::", "::1", "fe80::1", "1::", "1:2:3:4:5:6:7:8",
                         "2001:db8::8:800:200c:417a", "::ffff:10.1.2.3", "1:2:3:4:5:6:1.2.3.4"}) {
    CHECK_MESSAGE(core::is_ip_literal(ip), ip);
  }
  for (const char* name : {"", "localhost", "node-3", "10.0.0", "10.0.0.1.2", "256.0.0.1", "1.2.3.04x", "1..2.3",
                           "1:2:3:4:5:6:7:8:9", "1::2::3", ":1", "1:", "12345::", "g::1", "fe80::1%eth0",
                           "1:2:3:4:5:6:7:1.2.3.4", "::1.2.3"}) {
    CHECK_MESSAGE(!core::is_ip_literal(name), name);
  }
  CHECK(core::parse_ip_host_port("[fe80::1]:7946").is_ok());
  auto named = core::parse_ip_host_port("sinkhole.test:7946");
  REQUIRE_FALSE(named.is_ok());
  CHECK(named.status().message().find("IP address") != std::string::npos);
}
