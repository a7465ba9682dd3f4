// Two data connections over loopback: handshake, control messages, and a
// piece whose payload lands straight in the destination.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>

#include "core/random_fill.hpp"
#include "support/gossip_network.hpp"
#include "transport/data_connection.hpp"

using namespace tensorhub;
using namespace tensorhub::transport;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;

namespace {

SwarmKey key(std::uint8_t fill) {
  std::array<std::uint8_t, 32> bytes{};
  bytes.fill(fill);
  return SwarmKey::from_bytes(bytes);
}

struct Recorder : DataConnectionHandler {
  std::vector<SwarmMessage> messages;
  std::vector<std::string> arrivals;  // "piece <request id>" or "message <type>", in order
  std::vector<std::byte>* destination = nullptr;
  std::vector<std::size_t> cuts;  // where piece_destination cuts the destination into pieces
  int pieces_stored = 0, pieces_discarded = 0;
  bool established = false;
  std::optional<Status> closed;
  PeerId remote;

  void on_established(DataConnection& c) override {
    established = true;
    remote = c.remote();
  }
  void on_message(DataConnection&, SwarmMessage m) override {
    arrivals.push_back("message " + std::to_string(static_cast<int>(m.type)));
    messages.push_back(std::move(m));
  }
  void piece_destination(DataConnection&, const SwarmMessage& header, std::vector<std::span<std::byte>>& out) override {
    if (destination == nullptr) return;
    // The destination in pieces cut at `cuts` (a scatter read), or whole.
    std::span<std::byte> whole = std::span(*destination).subspan(0, std::min<std::size_t>(header.length, destination->size()));
    std::size_t at = 0;
    for (std::size_t cut : cuts) {
      if (cut <= at || cut >= whole.size()) continue;
      out.push_back(whole.subspan(at, cut - at));
      at = cut;
    }
    out.push_back(whole.subspan(at));
  }
  void on_piece_progress(DataConnection&, const SwarmMessage& header) override {
    arrivals.push_back("progress " + std::to_string(header.request_id.value));
  }
  void on_piece(DataConnection&, const SwarmMessage& header, bool stored) override {
    arrivals.push_back("piece " + std::to_string(header.request_id.value));
    ++(stored ? pieces_stored : pieces_discarded);
  }
  void on_closed(DataConnection&, const Status& why) override { closed = why; }
};

struct Pair {
  // The keys are copied: the accept handler runs after the constructor.
  explicit Pair(const SwarmKey& client_key, const SwarmKey& server_key_in,
                DataConnectionTimeouts timeouts = {.handshake = 2s})
      : acceptor(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), server_key(server_key_in) {
    acceptor.async_accept([this, timeouts](std::error_code ec, asio::ip::tcp::socket socket) {
      REQUIRE_FALSE(ec);
      server = DataConnection::accept(std::move(socket), server_id, server_key, replays, server_events, timeouts);
    });
    client = DataConnection::connect(io, acceptor.local_endpoint(), server_id.public_key(), client_id, client_key,
                                     client_events, timeouts);
  }
  void run_until(const std::function<bool()>& done) {
    for (int i = 0; i < 2000 && !done(); ++i) io.run_for(std::chrono::milliseconds(5));
  }
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor;
  SwarmKey server_key;
  HelloReplayCache replays;
  Identity client_id = testing::GossipNetwork::identity_for(401);
  Identity server_id = testing::GossipNetwork::identity_for(402);
  Recorder client_events, server_events;
  std::shared_ptr<DataConnection> client, server;
};

// An established pair whose client lands 1 MiB pieces in `destination`,
// and the server's 1 MiB `source` to send them from.
struct MegabytePieces : Pair {
  MegabytePieces(std::uint8_t key_fill, std::uint64_t seed, DataConnectionTimeouts timeouts = {.handshake = 2s})
      : Pair(key(key_fill), key(key_fill), timeouts), source(1u << 20), destination(1u << 20) {
    run_until([&] { return client_events.established && server_events.established; });
    REQUIRE(server_events.established);
    core::fill_pseudo_random(source, seed);
    client_events.destination = &destination;
    version_id.bytes.fill(key_fill);
  }
  SwarmMessage piece(std::uint32_t id, const ManifestId& of) const {
    return SwarmMessage::piece(of, swarm::RequestId{id}, 1u << 20);
  }
  SwarmMessage piece(std::uint32_t id) const { return piece(id, version_id); }
  std::vector<std::byte> source, destination;
  ManifestId version_id;
};

// A piece source that reports what became of its piece.
struct ReportingSource : PieceSource {
  explicit ReportingSource(std::function<void(bool)> on_report) : report(std::move(on_report)) {}
  std::function<void(bool)> report;
  void on_piece_sent(std::uint32_t, bool sent) override { report(sent); }
};

std::shared_ptr<PieceSource> reporting(std::function<void(bool)> report) {
  return std::make_shared<ReportingSource>(std::move(report));
}

}  // namespace

TEST_CASE("data connection: handshake, messages, and a zero-copy piece") {
  const SwarmKey swarm = key(5);
  Pair p(swarm, swarm);
  p.run_until([&] { return p.client_events.established && p.server_events.established; });
  REQUIRE(p.client_events.established);
  REQUIRE(p.server_events.established);
  CHECK(p.client_events.remote == p.server_id.public_key());
  CHECK(p.server_events.remote == p.client_id.public_key());

  ManifestId version_id;
  version_id.bytes.fill(9);
  p.client->send(SwarmMessage::request(version_id, swarm::RequestId{1}, ShardIndex{2}, BlockIndex{3}, 4096, 65536));
  p.run_until([&] { return !p.server_events.messages.empty(); });
  REQUIRE(p.server_events.messages.size() == 1);
  CHECK(p.server_events.messages[0].type == MessageType::kRequest);
  CHECK(p.server_events.messages[0].length == 65536);

  // The server answers from its memory; the payload lands in the client's buffer.
  std::vector<std::byte> source(65536), destination(65536);
  core::fill_pseudo_random(source, 77);
  p.client_events.destination = &destination;
  bool sent = false;
  p.server->send_piece(SwarmMessage::piece(version_id, swarm::RequestId{1}, 65536), source,
                       reporting([&](bool ok) { sent = ok; }));
  p.run_until([&] { return p.client_events.pieces_stored == 1; });
  CHECK(sent);
  CHECK(p.client_events.pieces_stored == 1);
  CHECK(destination == source);

  // Sent from three pieces of memory (one gather write), landed in four
  // (scatter reads): the bytes arrive in order, whatever the cuts.
  std::vector<std::byte> more(65536), landed(65536);
  core::fill_pseudo_random(more, 78);
  const std::span<const std::byte> pieces[] = {std::span<const std::byte>(more).first(1000),
                                               std::span<const std::byte>(more).subspan(1000, 40000),
                                               std::span<const std::byte>(more).subspan(41000)};
  p.client_events.destination = &landed;
  p.client_events.cuts = {1, 4096, 50000};
  p.server->send_piece(SwarmMessage::piece(version_id, swarm::RequestId{3}, 65536), std::span<const std::span<const std::byte>>(pieces),
                       nullptr);
  p.run_until([&] { return p.client_events.pieces_stored == 2; });
  CHECK(p.client_events.pieces_stored == 2);
  CHECK(landed == more);
  p.client_events.cuts.clear();

  // Without a destination the payload is read and discarded; the stream stays in step.
  p.client_events.destination = nullptr;
  p.server->send_piece(SwarmMessage::piece(version_id, swarm::RequestId{2}, 1000),
                       std::span(source).first(1000), nullptr);
  p.server->send(SwarmMessage::about_shard(MessageType::kHave, version_id, ShardIndex{5}));
  p.run_until([&] { return !p.client_events.messages.empty(); });
  CHECK(p.client_events.pieces_discarded == 1);
  REQUIRE(p.client_events.messages.size() == 1);
  CHECK(p.client_events.messages[0].shard == ShardIndex{5});

  p.client->close(Status::cancelled("done"));
  p.run_until([&] { return p.server_events.closed.has_value(); });
  CHECK(p.server_events.closed.has_value());
}

TEST_CASE("data connection: a cancelled piece still queued is never sent, the stream stays in step") {
  MegabytePieces p(6, 78);
  const ManifestId version_id = p.version_id;
  std::vector<int> outcome(3, -1);
  for (std::uint32_t id = 1; id <= 3; ++id) {
    p.server->send_piece(p.piece(id), p.source, reporting([&, id](bool sent) { outcome[id - 1] = sent ? 1 : 0; }));
  }
  CHECK_FALSE(p.server->cancel_piece(swarm::RequestId{1}));  // already being written
  CHECK(p.server->cancel_piece(swarm::RequestId{2}));
  CHECK_FALSE(p.server->cancel_piece(swarm::RequestId{2}));
  CHECK(outcome[1] == 0);
  p.server->send(SwarmMessage::about_shard(MessageType::kHave, version_id, ShardIndex{9}));
  p.run_until([&] { return p.client_events.arrivals.size() == 3; });
  // 1 was on the wire, the HAVE passed 3; every frame decrypted in order.
  CHECK(p.client_events.arrivals == std::vector<std::string>{"piece 1", "message 2", "piece 3"});
  CHECK(p.client_events.pieces_stored == 2);
  REQUIRE(p.client_events.messages.size() == 1);
  CHECK(p.client_events.messages[0].shard == ShardIndex{9});
  CHECK(outcome[0] == 1);
  CHECK(outcome[2] == 1);
}

TEST_CASE("data connection: a peer with another swarm key is refused") {
  Pair p(key(1), key(2));
  p.run_until([&] { return p.client_events.closed.has_value() && p.server_events.closed.has_value(); });
  CHECK_FALSE(p.client_events.established);
  CHECK_FALSE(p.server_events.established);
  REQUIRE(p.server_events.closed.has_value());
  CHECK(p.server_events.closed->message().find("swarm's key") != std::string::npos);
}

TEST_CASE("data connection: garbage instead of a handshake is refused, silence times out") {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const Identity server_id = testing::GossipNetwork::identity_for(403);
  const SwarmKey swarm = key(3);
  HelloReplayCache replays;
  Recorder events[2];
  std::shared_ptr<DataConnection> servers[2];
  int accepted = 0;
  std::function<void()> accept_next = [&] {
    acceptor.async_accept([&](std::error_code ec, asio::ip::tcp::socket socket) {
      if (ec) return;
      servers[accepted] = DataConnection::accept(std::move(socket), server_id, swarm, replays, events[accepted],
                                                   {.handshake = 300ms});
      ++accepted;
      if (accepted < 2) accept_next();
    });
  };
  accept_next();
  asio::ip::tcp::socket garbage(io), silent(io);
  garbage.connect(acceptor.local_endpoint());
  std::vector<std::uint8_t> junk(kHelloBytes, 0x41);
  asio::write(garbage, asio::buffer(junk));
  silent.connect(acceptor.local_endpoint());
  for (int i = 0; i < 400 && !(events[0].closed && events[1].closed); ++i) io.run_for(5ms);
  REQUIRE(events[0].closed.has_value());
  REQUIRE(events[1].closed.has_value());
  int timeouts = 0, refused = 0;
  for (auto& e : events) {
    CHECK_FALSE(e.established);
    timeouts += e.closed->code() == StatusCode::kTimeout;
    refused += e.closed->message().find("not a TensorHub data connection") != std::string::npos;
  }
  CHECK(timeouts == 1);
  CHECK(refused == 1);
}

TEST_CASE("data connection: a choked requester's queued pieces of that version are dropped, others go") {
  MegabytePieces p(7, 79);
  const ManifestId choked = p.version_id;
  ManifestId other;
  other.bytes.fill(5);
  std::vector<int> outcome(4, -1);
  const ManifestId versions[] = {choked, choked, other, choked};
  for (std::uint32_t id = 1; id <= 4; ++id) {
    p.server->send_piece(p.piece(id, versions[id - 1]), p.source,
                         reporting([&, id](bool sent) { outcome[id - 1] = sent ? 1 : 0; }));
  }
  CHECK(p.server->cancel_pieces_of(choked) == 2);  // 2 and 4; 1 is on the wire already
  CHECK(outcome[1] == 0);
  CHECK(outcome[3] == 0);
  p.run_until([&] { return p.client_events.pieces_stored == 2; });
  CHECK(p.client_events.pieces_stored == 2);  // 1 and 3
  CHECK(outcome[0] == 1);
  CHECK(outcome[2] == 1);
}

TEST_CASE("data connection: control messages pass queued pieces, each kind in the order sent") {
  MegabytePieces p(8, 80);
  const ManifestId version_id = p.version_id;
  // A request pipeline's worth of pieces, then a HAVE and a request: the
  // two control messages must not wait behind megabytes of payload.
  for (std::uint32_t id = 1; id <= 4; ++id) p.server->send_piece(p.piece(id), p.source, nullptr);
  p.server->send(SwarmMessage::about_shard(MessageType::kHave, version_id, ShardIndex{7}));
  p.server->send(SwarmMessage::request(version_id, swarm::RequestId{11}, ShardIndex{1}, BlockIndex{0}, 0, 4096));
  p.server->send_piece(p.piece(5), p.source, nullptr);
  p.run_until([&] { return p.client_events.arrivals.size() == 7; });
  CHECK(p.client_events.arrivals == std::vector<std::string>{"piece 1", "message 2", "message 7", "piece 2", "piece 3",
                                                              "piece 4", "piece 5"});
  CHECK(p.client_events.pieces_stored == 5);
  CHECK(p.destination == p.source);
}

TEST_CASE("data connection: an idle connection sends keepalives, which the reader skips in step") {
  Pair p(key(9), key(9), {.handshake = 2s, .keepalive = 20ms});
  p.run_until([&] {
    return p.client_events.established && p.server_events.established && p.client->keepalives_received() >= 3 &&
           p.server->keepalives_received() >= 3;
  });
  CHECK(p.client->keepalives_received() >= 3);
  CHECK(p.server->keepalives_received() >= 3);
  CHECK(p.client->keepalives_received() <= p.server->keepalives_sent());
  CHECK(p.server_events.arrivals.empty());  // no message was made up
  ManifestId version_id;
  p.client->send(SwarmMessage::about_shard(MessageType::kHave, version_id, ShardIndex{5}));
  p.run_until([&] { return !p.server_events.messages.empty(); });
  REQUIRE(p.server_events.messages.size() == 1);  // the frame counters still agree
  CHECK(p.server_events.messages[0].shard == ShardIndex{5});
  CHECK_FALSE(p.client_events.closed.has_value());
  CHECK_FALSE(p.server_events.closed.has_value());
}

namespace {

// Between a client and a server: forwards bytes until cut(). Then it closes
// the server's side and goes silent towards the client, and resets the
// client's connection when anything more arrives from it. That is what the
// client sees when the server closed while the path was down: its FIN or
// reset was lost, and its kernel answers the next segment with a reset
// (measured in the namespace cluster: such a socket stays ESTABLISHED for as
// long as its owner sends nothing).
struct LostResetPath {
  explicit LostResetPath(asio::io_context& io, asio::ip::tcp::endpoint server)
      : acceptor(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), client_side(io), server_side(io) {
    acceptor.async_accept(client_side, [this, server](std::error_code ec) {
      REQUIRE_FALSE(ec);
      server_side.connect(server);
      forward(client_side, server_side, up);
      forward(server_side, client_side, down);
    });
  }
  void forward(asio::ip::tcp::socket& from, asio::ip::tcp::socket& to, std::array<std::uint8_t, 65536>& buffer) {
    from.async_read_some(asio::buffer(buffer), [this, &from, &to, &buffer](std::error_code ec, std::size_t n) {
      if (ec) return;
      if (cut_) {
        if (&from == &client_side) {  // the "dead" server's kernel answers with a reset
          client_side.set_option(asio::socket_base::linger(true, 0));
          client_side.close();
          ++resets;
        }
        return;
      }
      asio::write(to, asio::buffer(buffer.data(), n));
      forward(from, to, buffer);
    });
  }
  void cut() {
    cut_ = true;
    server_side.close();
  }
  asio::ip::tcp::endpoint endpoint() const { return acceptor.local_endpoint(); }
  asio::ip::tcp::acceptor acceptor;
  asio::ip::tcp::socket client_side, server_side;
  std::array<std::uint8_t, 65536> up{}, down{};
  bool cut_ = false;
  int resets = 0;
};

}  // namespace

TEST_CASE("data connection: a keepalive finds a peer whose reset was lost, without one the wait is forever") {
  for (const bool keepalive : {true, false}) {
    CAPTURE(keepalive);
    asio::io_context io;
    asio::ip::tcp::acceptor acceptor(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    const SwarmKey swarm = key(10);
    const Identity client_id = testing::GossipNetwork::identity_for(404), server_id = testing::GossipNetwork::identity_for(405);
    const DataConnectionTimeouts timeouts{.handshake = 2s, .keepalive = keepalive ? 30ms : 3600s};
    Recorder client_events, server_events;
    HelloReplayCache replays;
    std::shared_ptr<DataConnection> server;
    acceptor.async_accept([&](std::error_code ec, asio::ip::tcp::socket socket) {
      REQUIRE_FALSE(ec);
      server = DataConnection::accept(std::move(socket), server_id, swarm, replays, server_events, timeouts);
    });
    LostResetPath path(io, acceptor.local_endpoint());
    auto client =
        DataConnection::connect(io, path.endpoint(), server_id.public_key(), client_id, swarm, client_events, timeouts);
    for (int i = 0; i < 400 && !(client_events.established && server_events.established); ++i) io.run_for(5ms);
    REQUIRE(client_events.established);
    path.cut();
    for (int i = 0; i < 100 && !client_events.closed; ++i) io.run_for(5ms);
    CHECK(server_events.closed.has_value());  // the server's side did close
    if (keepalive) {
      REQUIRE(client_events.closed.has_value());
      CHECK(path.resets == 1);
      CHECK(client_events.closed->message().find("reset") != std::string::npos);
    } else {
      CHECK_FALSE(client_events.closed.has_value());  // half-open: the hang the keepalive prevents
      client->close(Status::cancelled("test over"));
    }
    if (server) server->close(Status::cancelled("test over"));
  }
}

TEST_CASE("data connection: a stored payload reports progress while it arrives, never after it lands") {
  MegabytePieces p(11, 81, {.handshake = 2s, .piece_progress = 0ms});  // every read reports
  p.server->send_piece(p.piece(1), p.source, nullptr);
  p.run_until([&] { return p.client_events.pieces_stored == 1; });
  REQUIRE(p.client_events.pieces_stored == 1);
  const auto& a = p.client_events.arrivals;
  REQUIRE(a.size() >= 2);  // 1 MiB over loopback takes several reads
  CHECK(a.back() == "piece 1");
  for (std::size_t i = 0; i + 1 < a.size(); ++i) CHECK(a[i] == "progress 1");
  CHECK(p.destination == p.source);
}

namespace {

// A member that does the handshake by hand over a plain socket, then writes
// (or withholds) whatever bytes a test wants: a hostile member's side.
struct RawMember {
  RawMember(asio::io_context& io_in, const asio::ip::tcp::endpoint& to, const PeerId& responder, const Identity& identity,
            const SwarmKey& swarm)
      : io(io_in), socket(io_in), initiator(identity, swarm, responder) {
    socket.connect(to);
    const auto now = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::system_clock::now().time_since_epoch());
    asio::write(socket, asio::buffer(initiator.hello(static_cast<std::uint64_t>(now.count()))));
  }
  // Completes the handshake while `server` runs on the same io_context.
  bool finish(const std::function<bool()>& server_established) {
    for (int i = 0; i < 400 && socket.available() < kWelcomeBytes; ++i) io.run_for(std::chrono::milliseconds(5));
    std::vector<std::uint8_t> welcome(kWelcomeBytes);
    asio::read(socket, asio::buffer(welcome));
    auto out = initiator.on_welcome(welcome);
    if (!out) return false;
    asio::write(socket, asio::buffer(*out));
    for (int i = 0; i < 400 && !server_established(); ++i) io.run_for(std::chrono::milliseconds(5));
    return server_established();
  }
  asio::io_context& io;
  asio::ip::tcp::socket socket;
  HandshakeInitiator initiator;
};

// A server connection accepted on loopback, with a RawMember as its client.
struct RawPair {
  explicit RawPair(DataConnectionTimeouts timeouts)
      : acceptor(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    acceptor.async_accept([this, timeouts](std::error_code ec, asio::ip::tcp::socket socket) {
      REQUIRE_FALSE(ec);
      server = DataConnection::accept(std::move(socket), server_id, swarm, replays, events, timeouts);
    });
    member.emplace(io, acceptor.local_endpoint(), server_id.public_key(), member_id, swarm);
    REQUIRE(member->finish([&] { return events.established; }));
  }
  void run_until(const std::function<bool()>& done, int steps = 2000) {
    for (int i = 0; i < steps && !done(); ++i) io.run_for(std::chrono::milliseconds(5));
  }
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor;
  SwarmKey swarm = key(9);
  HelloReplayCache replays;
  Identity member_id = testing::GossipNetwork::identity_for(404);
  Identity server_id = testing::GossipNetwork::identity_for(405);
  Recorder events;
  std::shared_ptr<DataConnection> server;
  std::optional<RawMember> member;
};

}  // namespace

TEST_CASE("data connection: a frame's claimed length costs nothing until its bytes arrive, and must arrive in time") {
  // A member sends a 256 MiB length and then 100 KiB, and stops: the
  // receiver holds about what arrived (not 256 MiB), and closes the
  // connection once the frame's deadline passes.
  RawPair p({.handshake = 2s, .keepalive = 100ms, .frame = 300ms, .min_frame_bytes_per_second = 1u << 30});
  const std::uint32_t claimed = (256u << 20) - 1;
  const std::uint8_t length[4] = {static_cast<std::uint8_t>(claimed >> 24), static_cast<std::uint8_t>(claimed >> 16),
                                  static_cast<std::uint8_t>(claimed >> 8), static_cast<std::uint8_t>(claimed)};
  asio::write(p.member->socket, asio::buffer(length));
  std::vector<std::uint8_t> some(100 * 1024, 0x5a);
  asio::write(p.member->socket, asio::buffer(some));
  p.run_until([&] { return p.server->bytes_received() >= 4 + some.size(); });
  MESSAGE("holding " << p.server->read_buffer_capacity() << " bytes for a frame that claims " << claimed);
  CHECK(p.server->read_buffer_capacity() < (1u << 20));
  const auto start = std::chrono::steady_clock::now();
  p.run_until([&] { return p.events.closed.has_value(); });
  REQUIRE(p.events.closed.has_value());
  CHECK(p.events.closed->code() == StatusCode::kTimeout);
  CHECK(p.events.closed->message().find("did not arrive in time") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
}

TEST_CASE("data connection: a peer that does not read what it asks for is cut off at the control queue's limit") {
  // The server answers with large control messages (as it would answer
  // manifest requests); the member never reads. The queue stays bounded
  // and the connection closes.
  RawPair p({.handshake = 2s, .max_queued_control_bytes = 4u << 20});
  ManifestId id;
  id.bytes.fill(3);
  std::size_t most_queued = 0;
  int sent = 0;
  for (; sent < 10000 && !p.events.closed; ++sent) {
    p.server->send(SwarmMessage::with_bytes(MessageType::kManifest, id, std::vector<std::uint8_t>(300 * 1024, 7)));
    most_queued = std::max(most_queued, p.server->queued_control_bytes());
    p.io.poll();
  }
  p.run_until([&] { return p.events.closed.has_value(); });
  REQUIRE(p.events.closed.has_value());
  MESSAGE("closed after " << sent << " answers; at most " << most_queued << " bytes queued");
  CHECK(p.events.closed->message().find("does not read") != std::string::npos);
  CHECK(most_queued <= (4u << 20) + 400 * 1024);
  CHECK(sent < 10000);
}
