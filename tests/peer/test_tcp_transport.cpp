// The TCP transport's acceptor under a flood from many addresses: at the cap
// on handshakes in flight, a member's handshake is never the one closed.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include "transport/tcp_transport.hpp"
#include "support/gossip_network.hpp"

using namespace tensorhub;
using namespace std::chrono_literals;

namespace {

struct NoEvents final : peer::TransportEvents {
  void on_connected(const PeerId&) override {}
  void on_connect_failed(const PeerId&) override {}
  void on_disconnected(const PeerId&) override {}
  void on_message(const PeerId&, const swarm::SwarmMessage&) override {}
  void piece_destination(const PeerId&, const swarm::SwarmMessage&, std::vector<std::span<std::byte>>&) override {}
  void on_piece_progress(const PeerId&, const swarm::SwarmMessage&) override {}
  void on_piece(const PeerId&, const swarm::SwarmMessage&, bool) override {}
  void on_piece_lost(const PeerId&, const swarm::SwarmMessage&) override {}
};

// A connected TCP socket from `from` (127/8) that sends nothing.
int connect_from(const std::string& from, std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, from.c_str(), &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether the other side closed `fd` (EOF or reset) rather than holding it open.
bool closed_by_peer(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// One member connection, then a flood of `flood` idle connections from 100
// other addresses; whether the member's connection is still open once the
// flood has been shed down to the cap.
bool member_survives(bool prefer_members, int flood) {
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  const Identity identity = testing::GossipNetwork::identity_for(1200);
  const SwarmKey key = SwarmKey::generate();
  NoEvents events;
  peer::TcpTransport transport(io, identity, key, events, 1, [](const PeerId&) { return std::nullopt; });
  if (prefer_members) {
    const auto member = asio::ip::make_address("127.0.0.1");
    transport.set_member_address([member](const asio::ip::address& a) { return a == member; });
  }
  REQUIRE(transport.listen(core::HostPort{"127.0.0.1", 0}).is_ok());
  std::thread runner([&] { io.run(); });
  auto shed = [&] {
    std::promise<std::uint64_t> p;
    asio::post(io, [&] { p.set_value(transport.handshakes_shed()); });
    return p.get_future().get();
  };
  const std::uint16_t port = transport.bound().port;
  const int member = connect_from("127.0.0.1", port);
  REQUIRE(member >= 0);
  std::vector<int> flooders;
  for (int i = 0; i < flood; ++i) {
    const int fd = connect_from("127.0.0." + std::to_string(2 + i % 100), port);
    if (fd >= 0) flooders.push_back(fd);
  }
  // Everything beyond the cap is shed (well inside the 1 s hello deadline).
  const auto deadline = std::chrono::steady_clock::now() + 900ms;
  const std::uint64_t expected = flooders.size() + 1 - peer::TcpTransport::kMaxHandshakes;
  while (shed() < expected && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  CHECK(shed() >= expected);
  const bool survived = !closed_by_peer(member);
  ::close(member);
  for (int fd : flooders) ::close(fd);
  work.reset();
  asio::post(io, [&] {
    transport.close();
    io.stop();
  });
  runner.join();
  return survived;
}

}  // namespace

TEST_CASE("tcp transport: at the handshake cap, a flood from many addresses never pushes out a member's handshake") {
  int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.2", &local.sin_addr);
  const bool loopback_net = ::bind(probe, reinterpret_cast<sockaddr*>(&local), sizeof local) == 0;
  ::close(probe);
  if (!loopback_net) {
    MESSAGE("skipped: 127.0.0.2 cannot be bound here");
    return;
  }
  CHECK(member_survives(/*prefer_members=*/true, 200));
  // Without the preference the oldest handshake goes first: the member's.
  CHECK_FALSE(member_survives(/*prefer_members=*/false, 200));
}
