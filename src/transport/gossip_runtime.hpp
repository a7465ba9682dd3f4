// The asio driver of the gossip core: one UDP socket for datagrams, one TCP
// listener for push-pull streams, one steady timer, all on one io_context
// thread. It feeds the core what arrives, sends what the core returns, and
// arms the timer at the core's next deadline.
//
// Thread-compatibility: every method runs on the io_context's thread (use
// asio::post from elsewhere).
#pragma once

#include <asio.hpp>
#include <cstdint>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/host_port.hpp"
#include "gossip/gossip_core.hpp"
#include "tensorhub/identity.hpp"
#include "tensorhub/swarm_key.hpp"

namespace tensorhub::transport {

struct GossipRuntimeOptions {
  gossip::GossipConfig config;
  core::HostPort listen;        // UDP and TCP bind here, and only here
  std::string advertise;        // host:port others reach us at; default: listen
  std::string data_addr;        // the data plane's host:port, if any
  gossip::Topology topology;
  std::vector<std::string> seeds;
  // How long looking up the seeds' names may take, all of them together.
  std::chrono::milliseconds seed_lookup_timeout{10'000};
  std::size_t max_inbound_streams = 64;
  // From one source address: no single host can take every stream slot.
  std::size_t max_inbound_streams_per_address = 8;
  // The admission list in force from the start (GossipCore::set_admitted).
  std::shared_ptr<const gossip::GossipCore::AdmissionList> admitted;
};

// Looks up `host` (a name) for `port`: "IP:port" of the family asked for.
// Errors: kUnavailable (the name does not resolve).
using SeedLookup = std::function<Result<std::string>(const std::string& host, std::uint16_t port, bool ipv6)>;
Result<std::string> system_seed_lookup(const std::string& host, std::uint16_t port, bool ipv6);
// The seeds as IP:port of the listening address's family: IP literals as
// they are, names looked up with `lookup`, once, before the peer runs, all
// at once and within `within` (each on a thread of its own, so a lookup
// that hangs is left behind). A seed that does not resolve in time is skipped with a
// warning. Errors: kInvalidArgument (a seed that is not host:port),
// kUnavailable when no seed resolves, kTimeout when the last one to fail
// ran out of time.
Result<std::vector<std::string>> resolve_seeds(const std::vector<std::string>& seeds, bool ipv6,
                                               std::chrono::milliseconds within,
                                               const SeedLookup& lookup = system_seed_lookup);

// Now on the runtime's clock, as the cores take it.
TimePoint steady_now();
// Milliseconds since the Unix epoch, for what others read as a date
// (incarnations, manifest creation times, status). Never for durations.
std::uint64_t wall_clock_ms();

class GossipRuntime {
 public:
  static Result<std::unique_ptr<GossipRuntime>> start(asio::io_context& io, GossipRuntimeOptions options,
                                                      Identity identity, const SwarmKey& swarm_key);
  ~GossipRuntime();
  GossipRuntime(const GossipRuntime&) = delete;
  GossipRuntime& operator=(const GossipRuntime&) = delete;

  gossip::GossipCore& core() { return *core_; }
  // Call after changing the core directly (set_head, ...): sends what it queued.
  void pump();
  // Leaves gracefully; `done` runs once the leave has spread or after max_wait.
  void leave(Duration max_wait, std::function<void()> done);
  // Receives every member event after it is logged.
  void on_event(std::function<void(const gossip::MemberEvent&)> handler) { event_handler_ = std::move(handler); }
  void close();
  const core::HostPort& bound() const { return bound_; }

 private:
  class Stream;
  GossipRuntime(asio::io_context& io, GossipRuntimeOptions options);

  void receive_datagram();
  void accept_stream();
  void arm_timer();
  void open_stream(const gossip::StreamAction& action);
  void stream_closed(gossip::StreamId id);
  // kInvalidArgument for anything but IP:port: a name is never looked up
  // on this thread.
  static Result<asio::ip::udp::endpoint> resolve_udp(const std::string& address);

  asio::io_context& io_;
  GossipRuntimeOptions options_;
  core::HostPort bound_;
  std::unique_ptr<gossip::GossipCore> core_;
  asio::ip::udp::socket udp_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer timer_;
  std::uint64_t unsigned_logged_ = 0;  // records_unsigned already logged
  TimePoint timer_at_ = kTimeNever;
  std::vector<std::uint8_t> receive_buffer_;
  asio::ip::udp::endpoint receive_from_;
  std::map<gossip::StreamId, std::shared_ptr<Stream>> streams_;
  std::uint64_t next_inbound_ = 1;
  std::function<void(const gossip::MemberEvent&)> event_handler_;
  std::unique_ptr<asio::steady_timer> leave_timer_;
  std::function<void()> leave_done_;
  bool closed_ = false;
};

}  // namespace tensorhub::transport
