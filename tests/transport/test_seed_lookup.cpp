#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "transport/gossip_runtime.hpp"

using namespace tensorhub;
using namespace std::chrono_literals;

namespace {

// Answers "10.0.0.<port % 256>:<port>" after `delay`, or fails for the name "missing".
transport::SeedLookup lookup_after(std::chrono::milliseconds delay) {
  return [delay](const std::string& host, std::uint16_t port, bool) -> Result<std::string> {
    std::this_thread::sleep_for(delay);
    if (host == "missing") return Status::unavailable("cannot resolve \"missing\"");
    return "10.0.0." + std::to_string(port % 256) + ":" + std::to_string(port);
  };
}

}  // namespace

TEST_CASE("seed lookup: IP literals pass as they are, names are looked up, a name that does not resolve is passed over") {
  auto seeds = transport::resolve_seeds({"127.0.0.1:7946", "seed-a:7001", "missing:7002"}, false, 5000ms,
                                        lookup_after(0ms));
  REQUIRE(seeds.is_ok());
  CHECK(*seeds == std::vector<std::string>{"127.0.0.1:7946", "10.0.0.89:7001"});
  auto none = transport::resolve_seeds({"missing:7002"}, false, 5000ms, lookup_after(0ms));
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.status().code() == StatusCode::kUnavailable);
  CHECK(none.status().message().find("missing:7002") != std::string::npos);
  auto bad = transport::resolve_seeds({"no-port"}, false, 5000ms, lookup_after(0ms));
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("seed lookup: a lookup that hangs is left behind at the start's deadline") {
  const auto began = std::chrono::steady_clock::now();
  auto seeds = transport::resolve_seeds({"slow:7001", "127.0.0.1:7946"}, false, 200ms, lookup_after(3000ms));
  const auto took = std::chrono::steady_clock::now() - began;
  REQUIRE(seeds.is_ok());
  CHECK(*seeds == std::vector<std::string>{"127.0.0.1:7946"});
  CHECK(took >= 190ms);
  CHECK(took < 2000ms);  // not the lookup's 3 s
  // With nothing else, the start fails in time and names the seed.
  auto none = transport::resolve_seeds({"slow:7001"}, false, 200ms, lookup_after(3000ms));
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.status().code() == StatusCode::kTimeout);
  CHECK(none.status().message().find("slow:7001") != std::string::npos);
}

TEST_CASE("seed lookup: names are looked up at once, so one that hangs does not take the others' time") {
  transport::SeedLookup lookup = [](const std::string& host, std::uint16_t port, bool) -> Result<std::string> {
    std::this_thread::sleep_for(host == "slow" ? 3000ms : 50ms);
    return "10.0.0.1:" + std::to_string(port);
  };
  const auto began = std::chrono::steady_clock::now();
  auto seeds = transport::resolve_seeds({"slow:7001", "fast:7002"}, false, 300ms, lookup);
  REQUIRE(seeds.is_ok());
  CHECK(*seeds == std::vector<std::string>{"10.0.0.1:7002"});
  CHECK(std::chrono::steady_clock::now() - began < 2000ms);
}
