// A piece's payload lands in the destination between its header
// (begin_piece) and its end (on_piece). Three real SwarmCores, a fetcher
// and two holders, with every message carried at once by hand and every
// payload's start and end scripted, so the interleavings that matter are
// exact: a second copy of a block never writes while the first lands (a
// liar's late bytes would overwrite an honest copy that already verified),
// a request given up while landing keeps its payload, a stalled payload closes its
// connection, and a stopped fetch closes the connections still landing.
#include <doctest/doctest.h>

#include <vector>

#include "support/gossip_network.hpp"
#include "swarm/swarm_core.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;

namespace {

PeerId peer_id(std::uint64_t n) { return testing::GossipNetwork::identity_for(700 + n).public_key(); }

struct Served {
  PeerId from;
  SwarmMessage header;
};

// One fetcher, holders A and B; the version is a single 64 KiB block.
class Trio {
 public:
  explicit Trio(double min_landing_bytes_per_second = FetchConfig{}.min_landing_bytes_per_second) {
    config.fetch.block_size = kBlock;
    config.fetch.request_timeout = 100ms;
    config.fetch.min_landing_bytes_per_second = min_landing_bytes_per_second;
    version_id.bytes[0] = 0x42;
    const Location here{"dc1", "r1", "h0"};
    fetcher = std::make_unique<SwarmCore>(config, here, f, 1);
    holder_a = std::make_unique<SwarmCore>(config, Location{"dc1", "r1", "h1"}, a, 2);
    holder_b = std::make_unique<SwarmCore>(config, Location{"dc1", "r1", "h2"}, b, 3);
    holder_a->serve(now, version_id, layout, core::Bitfield(1, true));
    holder_b->serve(now, version_id, layout, core::Bitfield(1, true));
    fetcher->fetch(now, version_id, layout, core::Bitfield(1, false));
    fetcher->add_holder(now, version_id, a, true);
    fetcher->add_holder(now, version_id, b, true);
    fetcher->handle_timeout(now);  // it connects to the candidates named so far
    pump();
  }

  SwarmCore& holder(const PeerId& id) { return id == a ? *holder_a : *holder_b; }

  // Carries every message at once until all three cores are quiet; piece
  // payloads wait in `served`, the fetcher's other outputs in its lists.
  void pump() {
    for (bool moved = true; moved;) {
      moved = false;
      while (auto action = fetcher->poll()) {
        moved = true;
        if (auto* open = std::get_if<OpenConnection>(&*action)) {
          fetcher->on_connected(now, open->peer);
        } else if (auto* send = std::get_if<SendMessage>(&*action)) {
          holder(send->peer).on_message(now, f, send->message);
        } else if (auto* close = std::get_if<CloseConnection>(&*action)) {
          closed.push_back(close->peer);
        } else if (auto* verify = std::get_if<VerifyShard>(&*action)) {
          verifies.push_back(verify->shard);
          fetch_serial = verify->fetch_serial;
        } else if (std::holds_alternative<FetchFinished>(*action)) {
          finished = true;
        }
      }
      for (const PeerId& id : {a, b}) {
        while (auto action = holder(id).poll()) {
          moved = true;
          if (auto* send = std::get_if<SendMessage>(&*action)) {
            fetcher->on_message(now, id, send->message);
          } else if (auto* serve = std::get_if<ServePiece>(&*action)) {
            served.push_back(Served{id, serve->header});
          }
        }
      }
    }
  }

  // The one piece served at the start, its payload begun (landing).
  Served begin_first() {
    REQUIRE(served.size() == 1);
    const Served first = served[0];
    auto target = fetcher->begin_piece(now, first.from, first.header);
    REQUIRE(target.has_value());
    CHECK(target->length == kBlock);
    return first;
  }

  // A piece from `from` that may not land: turned away, then read for
  // nothing.
  void turn_away(const PeerId& from, const SwarmMessage& header) {
    CHECK_FALSE(fetcher->begin_piece(now, from, header).has_value());
    fetcher->on_piece(now, from, header, false);
    pump();
  }

  // `piece`'s payload, begun earlier, has arrived whole: the block counts
  // and its (one-block) shard goes to verification, once.
  void finish_landing(const Served& piece) {
    fetcher->on_piece(now, piece.from, piece.header, true);
    pump();
    CHECK(verifies.size() == 1);
    auto progress = fetcher->progress(version_id);
    REQUIRE(progress.has_value());
    CHECK(progress->bytes_received == kBlock);
  }

  void advance(Duration d) {
    now += d;
    fetcher->handle_timeout(now);
    pump();
  }

  static constexpr std::uint32_t kBlock = 64u << 10;
  SwarmConfig config;
  ShardLayout layout{kBlock, kBlock, kBlock};
  ManifestId version_id;
  PeerId f = peer_id(0), a = peer_id(1), b = peer_id(2);
  TimePoint now{std::chrono::seconds(1)};
  std::unique_ptr<SwarmCore> fetcher, holder_a, holder_b;
  std::vector<Served> served;
  std::vector<PeerId> closed;
  std::vector<ShardIndex> verifies;
  std::uint64_t fetch_serial = 0;  // of the last VerifyShard
  bool finished = false;
};

}  // namespace

TEST_CASE("piece landing: a payload that lands slowly keeps its request, nobody else is asked meanwhile") {
  Trio t;
  const Served first = t.begin_first();

  // Long past the request timeout: a copy from the other holder could not
  // land while this one does (whichever finished last would win, and a liar
  // finishing last would overwrite good bytes), so asking for it would only
  // carry it for nothing, at link speed, for as long as the first lands.
  for (int step = 0; step < 4; ++step) {  // 4 request timeouts; its bytes keep coming
    t.advance(100ms);
    t.fetcher->on_piece_progress(t.now, first.from, first.header);
  }
  CHECK(t.served.size() == 1);
  CHECK(t.closed.empty());

  // The payload completes; the shard goes to verification once.
  t.finish_landing(first);
  CHECK(t.fetcher->progress(t.version_id)->duplicate_bytes == 0);
  REQUIRE(t.fetch_serial != 0);
  // A result for another fetch of the version (one that ended, its hash
  // still running) verifies nothing.
  t.fetcher->on_verified(t.now, t.version_id, ShardIndex{0}, t.fetch_serial + 1, true);
  t.pump();
  CHECK_FALSE(t.finished);
  t.fetcher->on_verified(t.now, t.version_id, ShardIndex{0}, t.fetch_serial, true);
  t.pump();
  CHECK(t.finished);
}

TEST_CASE("piece landing: an answer counts only under its own version, request id and sender") {
  Trio t;
  REQUIRE(t.served.size() == 1);
  const Served asked = t.served[0];
  const PeerId other = asked.from == t.a ? t.b : t.a;
  ManifestId elsewhere = t.version_id;
  elsewhere.bytes[1] = 0x17;
  const RequestId id = asked.header.request_id;
  // A piece under another version, an id never issued, or from a peer that
  // was not asked: none lands, each is read for nothing, and the request
  // stands.
  const std::pair<PeerId, SwarmMessage> forged[] = {
      {asked.from, SwarmMessage::piece(elsewhere, id, Trio::kBlock)},
      {asked.from, SwarmMessage::piece(t.version_id, RequestId{id.value + 1000}, Trio::kBlock)},
      {other, SwarmMessage::piece(t.version_id, id, Trio::kBlock)},
  };
  for (const auto& [from, header] : forged) t.turn_away(from, header);
  CHECK(t.fetcher->discarded_piece_bytes() == 3ull * Trio::kBlock);
  // Nor does a refusal from a peer that was not asked, or under another
  // version.
  const std::vector<std::uint8_t> why = {'n', 'o'};
  t.fetcher->on_message(t.now, other, SwarmMessage::refuse(t.version_id, id, why));
  t.fetcher->on_message(t.now, asked.from, SwarmMessage::refuse(elsewhere, id, why));
  t.pump();
  CHECK(t.served.size() == 1);  // nobody was asked again
  const Served first = t.begin_first();
  // Once the payload lands, its own holder's refusal changes nothing either.
  t.fetcher->on_message(t.now, first.from, SwarmMessage::refuse(t.version_id, id, why));
  t.pump();
  t.finish_landing(first);
}

TEST_CASE("piece landing: a piece of the wrong length for its request lands nothing and ends the request") {
  Trio t;
  REQUIRE(t.served.size() == 1);
  const Served asked = t.served[0];
  const SwarmMessage wrong = SwarmMessage::piece(t.version_id, asked.header.request_id, Trio::kBlock - 1);
  t.turn_away(asked.from, wrong);
  // Answered, badly: the block is asked for again, and that copy lands.
  REQUIRE(t.served.size() == 2);
  t.served.erase(t.served.begin());
  t.finish_landing(t.begin_first());
}

TEST_CASE("piece landing: an endgame copy is turned away while another lands") {
  Trio t;
  t.advance(50ms);  // overdue (twice the block time): endgame asks the other holder too
  REQUIRE(t.served.size() == 2);
  const Served first = t.served[0], second = t.served[1];
  CHECK_FALSE(second.from == first.from);
  REQUIRE(t.fetcher->begin_piece(t.now, first.from, first.header).has_value());
  // It must not write while the first lands: whichever finished last would
  // win, and a liar finishing last would overwrite good bytes.
  t.turn_away(second.from, second.header);
  CHECK(t.verifies.empty());
  CHECK(t.served.size() == 2);  // and it is not asked again while the first lands
  t.finish_landing(first);
  CHECK(t.fetcher->progress(t.version_id)->duplicate_bytes == Trio::kBlock);  // the copy turned away
  t.fetcher->on_verified(t.now, t.version_id, ShardIndex{0}, t.fetch_serial, true);
  t.pump();
  CHECK(t.finished);
}

TEST_CASE("piece landing: a choke that arrives while a payload lands (another lane) leaves that payload its request") {
  Trio t;
  const Served first = t.begin_first();
  // The choke forgets the requests the holder will not answer, but this
  // payload is arriving: forgotten, its block would stay "landing" for good
  // and every other copy of it would be turned away.
  t.fetcher->on_message(t.now, first.from, SwarmMessage::signal(MessageType::kChoke, t.version_id));
  t.pump();
  t.finish_landing(first);
}

TEST_CASE("piece landing: nothing lands in a block already received, or once its shard is verifying") {
  Trio t;
  REQUIRE(t.served.size() == 1);
  const Served first = t.served[0];
  t.advance(150ms);  // the request times out unanswered and goes to the other holder
  REQUIRE(t.served.size() == 2);
  const Served second = t.served[1];
  // The second copy lands and completes the block ...
  REQUIRE(t.fetcher->begin_piece(t.now, second.from, second.header).has_value());
  t.fetcher->on_piece(t.now, second.from, second.header, true);
  t.pump();
  REQUIRE(t.verifies.size() == 1);
  // ... and the first, late, finds nowhere to write while the shard verifies.
  CHECK_FALSE(t.fetcher->begin_piece(t.now, first.from, first.header).has_value());
  t.fetcher->on_piece(t.now, first.from, first.header, false);
  t.pump();
  CHECK(t.closed.empty());
  CHECK(t.verifies.size() == 1);
}

TEST_CASE("piece landing: a payload stalled mid-way closes its connection, and then another copy may land") {
  Trio t;
  const Served first = t.begin_first();
  const TimePoint deadline = t.now + t.config.fetch.request_timeout * kLandingLimitTimeouts;
  CHECK(t.fetcher->next_timeout() <= deadline);
  // Time passes in request-timeout steps; the block is re-asked elsewhere
  // but every copy is turned away while the stalled one holds it.
  std::size_t handled = 1;
  auto try_to_land = [&](bool expect_landing) {
    bool landed = false;
    for (; handled < t.served.size(); ++handled) {
      const Served s = t.served[handled];
      if (s.from == first.from) continue;  // asked again of the staller: it never answers
      const bool began = t.fetcher->begin_piece(t.now, s.from, s.header).has_value();
      CHECK(began == expect_landing);
      t.fetcher->on_piece(t.now, s.from, s.header, began);
      landed = landed || began;
    }
    t.pump();
    return landed;
  };
  while (t.now + 100ms < deadline) {
    t.advance(100ms);
    try_to_land(false);
    REQUIRE(t.closed.empty());
  }
  t.advance(deadline - t.now);
  REQUIRE(t.closed.size() == 1);
  CHECK(t.closed[0] == first.from);
  // The connection is gone (the driver stopped the write): the copy now
  // asked of the other holder lands.
  bool landed = try_to_land(true);
  for (int step = 0; step < 10 && !landed; ++step) {
    t.advance(100ms);
    landed = try_to_land(true);
  }
  CHECK(landed);
  CHECK(t.verifies.size() == 1);
}

TEST_CASE("piece landing: a payload that keeps moving above the minimum rate is never stalled, the limit counts from its last progress") {
  Trio t(/*min_landing_bytes_per_second=*/1024);  // 64 s for the 64 KiB block
  const Served first = t.begin_first();
  const Duration limit = t.config.fetch.request_timeout * kLandingLimitTimeouts;
  // A slow payload: bytes keep coming, for 4 times the limit.
  const TimePoint slow_until = t.now + limit * 4;
  while (t.now < slow_until) {
    t.advance(50ms);
    t.fetcher->on_piece_progress(t.now, first.from, first.header);
    REQUIRE(t.closed.empty());
  }
  // Then it stops: stalled once the limit has passed since the last bytes.
  const TimePoint stalled_at = t.now + limit;
  CHECK(t.fetcher->next_timeout() <= stalled_at);
  while (t.now + 50ms < stalled_at) {
    t.advance(50ms);
    REQUIRE(t.closed.empty());
  }
  t.advance(stalled_at - t.now);
  REQUIRE(t.closed.size() == 1);
  CHECK(t.closed[0] == first.from);
}

TEST_CASE("piece landing: a payload that drips below the minimum rate is given up with its connection, and another copy lands") {
  Trio t;  // 256 KiB/s: the 64 KiB block is allowed the stall limit + 250 ms
  const Served first = t.begin_first();
  const Duration limit = t.config.fetch.request_timeout * kLandingLimitTimeouts;
  const TimePoint given_up_at = t.now + limit + 250ms;
  CHECK(t.fetcher->next_timeout() <= t.now + limit);
  // A byte now and then: it moves, so the stall limit alone never fires.
  while (t.now + 20ms < given_up_at) {
    t.advance(20ms);
    t.fetcher->on_piece_progress(t.now, first.from, first.header);
    REQUIRE(t.closed.empty());
  }
  t.advance(given_up_at - t.now);
  REQUIRE(t.closed.size() == 1);
  CHECK(t.closed[0] == first.from);
  // The block goes to the other holder.
  bool landed = false;
  for (int step = 0; step < 20 && !landed; ++step) {
    for (std::size_t i = 1; i < t.served.size(); ++i) {
      const Served s = t.served[i];
      if (s.from == first.from) continue;
      const bool began = t.fetcher->begin_piece(t.now, s.from, s.header).has_value();
      t.fetcher->on_piece(t.now, s.from, s.header, began);
      landed = landed || began;
    }
    t.served.erase(t.served.begin() + 1, t.served.end());
    t.pump();
    if (!landed) t.advance(50ms);
  }
  CHECK(landed);
  CHECK(t.verifies.size() == 1);
}

TEST_CASE("piece landing: stopping a fetch closes the connections still landing its payloads") {
  Trio t;
  const Served first = t.begin_first();
  t.fetcher->stop(t.now, t.version_id);
  t.pump();
  // The application may reuse the destination once told the fetch is over:
  // the write into it has to stop first.
  REQUIRE(t.closed.size() == 1);
  CHECK(t.closed[0] == first.from);
  // Nothing is left landing, so nothing is left to time out.
  CHECK(t.fetcher->next_timeout() == kTimeNever);
}

TEST_CASE("landings: one payload per block, each with its deadline (stall or minimum rate), the first found at once") {
  using namespace std::chrono_literals;
  swarm::Landings landing(100ms, 1e6);  // 1 MB/s: 1,000 bytes take 1 ms
  const PeerId p = testing::GossipNetwork::identity_for(61).public_key();
  const PeerId q = testing::GossipNetwork::identity_for(62).public_key();
  const swarm::LandingBlock a1{ShardIndex{0}, BlockIndex{1}}, a2{ShardIndex{0}, BlockIndex{2}};
  const swarm::LandingBlock b1{ShardIndex{1}, BlockIndex{1}};
  const TimePoint t0 = TimePoint(1s);
  CHECK(landing.next_deadline() == kTimeNever);
  CHECK(landing.begin(p, RequestId{7}, a1, 50'000, t0));  // rate allows 100 + 50 ms
  CHECK_FALSE(landing.begin(q, RequestId{9}, a1, 50'000, t0 + 1ms));  // a second copy of that block waits
  CHECK_FALSE(landing.begin(p, RequestId{7}, a2, 50'000, t0 + 1ms));  // one payload per request
  CHECK(landing.begin(q, RequestId{9}, b1, 50'000, t0 + 2ms));        // another shard's block is another block
  CHECK(landing.begin(p, RequestId{8}, a2, 50'000, t0 + 3ms));
  CHECK(landing.size() == 3);
  CHECK(landing.lands(p, RequestId{7}));
  CHECK_FALSE(landing.lands(q, RequestId{7}));  // request ids are the sender's
  CHECK(landing.next_deadline() == t0 + 100ms);
  std::vector<std::pair<TimePoint, PeerId>> stalled;
  landing.stalled(t0 + 99ms, stalled);
  CHECK(stalled.empty());
  landing.stalled(t0 + 100ms, stalled);
  CHECK(stalled == std::vector<std::pair<TimePoint, PeerId>>{{t0 + 100ms, p}});
  landing.moved(p, RequestId{7}, t0 + 10ms);
  CHECK(landing.deadline(p, RequestId{7}) == t0 + 110ms);
  CHECK(landing.next_deadline() == t0 + 102ms);
  landing.moved(p, RequestId{7}, t0 + 90ms);  // moving, but the rate's deadline holds
  CHECK(landing.deadline(p, RequestId{7}) == t0 + 150ms);
  const std::vector<PeerId> senders = landing.senders();  // each once, in their order
  CHECK(senders == (p < q ? std::vector<PeerId>{p, q} : std::vector<PeerId>{q, p}));
  const auto ended = landing.end(q, RequestId{9});
  REQUIRE(ended.has_value());
  CHECK(ended->shard == ShardIndex{1});
  CHECK(ended->block == BlockIndex{1});
  CHECK(landing.next_deadline() == t0 + 103ms);
  CHECK(landing.end(p, RequestId{8}).has_value());
  CHECK_FALSE(landing.end(p, RequestId{8}).has_value());  // twice: harmless
  CHECK(landing.next_deadline() == t0 + 150ms);
  CHECK(landing.begin(q, RequestId{10}, b1, 50'000, t0 + 20ms));
  CHECK(landing.begin(q, RequestId{11}, a2, 50'000, t0 + 20ms));
  landing.end_all_from(q);  // its connection went
  CHECK(landing.size() == 1);
  CHECK(landing.end(p, RequestId{7}).has_value());
  CHECK(landing.empty());
  CHECK(landing.deadline(p, RequestId{7}) == kTimeNever);
  CHECK(landing.next_deadline() == kTimeNever);
}
