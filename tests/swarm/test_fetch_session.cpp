// The fetch core against scripted holders: a small deterministic driver
// delivers requested blocks after a delay, verifies shards (a shard is bad
// when a corrupting holder sent any of its blocks), and lets holders vanish.
#include <doctest/doctest.h>

#include <map>
#include <queue>
#include <set>

#include "swarm/fetch_session.hpp"
#include "support/gossip_network.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;
using core::Bitfield;

namespace {

PeerId peer(std::uint64_t n) { return testing::GossipNetwork::identity_for(100 + n).public_key(); }

struct Holder {
  Location location;
  Bitfield bits;
  bool corrupt = false;
  bool alive = true;
  bool refuses = false;
  std::set<std::uint32_t> defers{};  // shards it says a mate of ours carries (kDeferred)
  bool super_seed = false;  // says so on connecting; `bits` are what it revealed
  bool named_complete = false;  // gossip names it a holder of everything (true or not)
  Duration block_time = 1ms;
  int connection = 0;  // which connection to it: blocks on a broken one never arrive
  bool stalls_landing = false;  // each payload begins to land and never ends
};

class Driver {
 public:
  Driver(ShardLayout shape, FetchConfig config, Location self = {"dc1", "r1", "h0"}, std::uint64_t seed = 7,
         std::uint32_t last_request_id = 0, Bitfield wanted = {})
      : ids(last_request_id),
        session(shape, Bitfield(shape.shard_count()), self, PeerId{}, config, seed, now, ids, std::move(wanted)),
        layout(shape) {}

  void add_holder(std::uint64_t n, Holder h) {
    holders[peer(n)] = std::move(h);
    session.add_candidate(now, peer(n), holders[peer(n)].location, holders[peer(n)].named_complete);
    pump();
  }

  void kill(std::uint64_t n) {
    holders[peer(n)].alive = false;
    session.on_disconnected(now, peer(n));
    pump();
  }
  // The connection breaks; the holder lives on.
  void break_connection(std::uint64_t n) {
    ++holders[peer(n)].connection;
    session.on_disconnected(now, peer(n));
    pump();
  }

  // Runs until done or `limit` of virtual time.
  void run(Duration limit = 60s) {
    const TimePoint end = now + limit;
    while (!session.done() && now < end) {
      TimePoint next = session.next_timeout();
      if (!deliveries.empty()) next = std::min(next, deliveries.top().at);
      if (next == kTimeNever || next > end) break;
      now = std::max(now, next);
      while (!deliveries.empty() && deliveries.top().at <= now) {
        Delivery d = deliveries.top();
        deliveries.pop();
        const Holder& h = holders[d.from];
        if (!h.alive || h.connection != d.connection || cancelled.count(key(d))) continue;
        session.on_block(now, d.from, d.shard, d.block);
        ++blocks_delivered;
        pump();
      }
      session.handle_timeout(now);
      pump();
    }
  }

  void pump() {
    while (auto action = session.poll()) {
      std::visit([&](auto& a) { handle(a); }, *action);
    }
  }

  TimePoint now = TimePoint(1s);  // before session: it is constructed with it
  RequestIds ids;  // before session: it takes them from here
  FetchSession session;
  ShardLayout layout;
  std::map<PeerId, Holder> holders;
  std::optional<Status> result;
  std::size_t requests = 0, cancels = 0, blocks_delivered = 0;
  std::map<std::pair<std::uint32_t, std::uint32_t>, int> requests_per_block;
  std::vector<std::tuple<TimePoint, PeerId, std::uint32_t>> request_log;  // when, to whom, which shard
  std::map<std::uint32_t, std::set<PeerId>> shard_senders;  // for verification
  std::vector<std::pair<PeerId, std::string>> disconnects;
  std::vector<PeerId> releases;
  std::map<RequestId, std::tuple<PeerId, std::uint32_t, std::uint32_t>> issued;  // request id: peer, shard, block
  std::vector<PeerId> connects;  // in order
  std::set<std::uint32_t> announced;
  std::vector<std::uint32_t> claimed;  // ClaimAction, in order
  std::vector<std::uint32_t> unclaimed;  // UnclaimAction, in order
  std::vector<PeerId> declined, asked_again;  // DeclineSlotAction, AskSlotAgainAction, in order

 private:
  struct Delivery {
    TimePoint at;
    std::uint64_t order;
    PeerId from;
    ShardIndex shard;
    BlockIndex block;
    int connection;
    bool operator>(const Delivery& o) const { return at != o.at ? at > o.at : order > o.order; }
  };
  static std::tuple<PeerId, std::uint32_t, std::uint32_t> key(const Delivery& d) {
    return {d.from, d.shard.value, d.block.value};
  }

  void handle(ConnectAction& a) {
    connects.push_back(a.peer);
    Holder& h = holders[a.peer];
    if (!h.alive) {
      session.on_connect_failed(now, a.peer);
      return;
    }
    session.on_connected(now, a.peer);
    if (h.super_seed) session.on_super_seed(now, a.peer);
    session.on_bitfield(now, a.peer, h.bits);
  }
  void handle(DisconnectAction& a) { disconnects.emplace_back(a.peer, a.reason); }
  void handle(ReleaseAction& a) { releases.push_back(a.peer); }
  void handle(RequestAction& a) {
    ++requests;
    // Every request has its own id, and while it is outstanding the session
    // names its block by it (a neighbour dropped in the same call took its
    // requests along).
    CHECK(a.request_id != RequestId{});
    CHECK(issued.emplace(a.request_id, std::make_tuple(a.peer, a.shard.value, a.block.value)).second);
    if (const auto asked = session.request_of(a.peer, a.request_id)) {
      CHECK(asked->shard == a.shard);
      CHECK(asked->block == a.block);
    }
    ++requests_per_block[{a.shard.value, a.block.value}];
    CHECK(a.length == layout.block_length(a.shard, a.block));
    CHECK(a.offset == layout.shard_offset(a.shard) + std::uint64_t{a.block.value} * layout.block_size);
    Holder& h = holders[a.peer];
    REQUIRE(h.bits.test(a.shard.value));  // never asked for what it does not have
    cancelled.erase({a.peer, a.shard.value, a.block.value});
    request_log.emplace_back(now, a.peer, a.shard.value);
    if (h.defers.count(a.shard.value)) {
      session.on_block_deferred(now, a.peer, a.shard, a.block);
      return;
    }
    if (h.refuses) {
      session.on_block_refused(now, a.peer, a.shard, a.block);
      return;
    }
    if (h.stalls_landing) {
      session.on_block_landing(now, a.peer, a.shard, a.block);
      return;
    }
    if (h.corrupt) shard_senders[a.shard.value].insert(a.peer);
    deliveries.push(Delivery{now + h.block_time, order_++, a.peer, a.shard, a.block, h.connection});
  }
  void handle(CancelAction& a) {
    ++cancels;
    // A cancel names the request it cancels.
    auto it = issued.find(a.request_id);
    REQUIRE(it != issued.end());
    CHECK(it->second == std::make_tuple(a.peer, a.shard.value, a.block.value));
    cancelled.insert({a.peer, a.shard.value, a.block.value});
  }
  void handle(VerifyAction& a) {
    const bool bad = !shard_senders[a.shard.value].empty();
    shard_senders.erase(a.shard.value);
    session.on_verified(now, a.shard, !bad);
  }
  void handle(AnnounceAction& a) { announced.insert(a.shard.value); }
  void handle(ClaimAction& a) { claimed.push_back(a.shard.value); }
  void handle(UnclaimAction& a) { unclaimed.push_back(a.shard.value); }
  void handle(DeclineSlotAction& a) { declined.push_back(a.peer); }
  void handle(AskSlotAgainAction& a) { asked_again.push_back(a.peer); }
  void handle(DoneAction& a) { result = a.status; }

  std::priority_queue<Delivery, std::vector<Delivery>, std::greater<>> deliveries;
  std::set<std::tuple<PeerId, std::uint32_t, std::uint32_t>> cancelled;
  std::uint64_t order_ = 0;
};

ShardLayout layout(std::uint32_t shards, std::uint32_t blocks_per_shard = 4, std::uint32_t block = 1024) {
  return ShardLayout{std::uint64_t{shards} * blocks_per_shard * block - block / 2,  // a short last block
                     std::uint64_t{blocks_per_shard} * block, block};
}

Holder full(std::uint32_t shards, Location where = {"dc1", "r2", "h9"}) {
  Holder h;
  h.location = where;
  h.bits = Bitfield(shards, true);
  return h;
}

// A holder at `where` of the given shards of `shards`.
Holder holding(Location where, std::uint32_t shards, std::initializer_list<std::uint32_t> held) {
  Holder h;
  h.location = std::move(where);
  h.bits = Bitfield(shards);
  for (std::uint32_t s : held) h.bits.set(s);
  return h;
}

// Thirty mates in the fetcher's datacenter (dc1, another rack) fetching the
// same version and holding nothing yet, so almost no shard is the fetcher's
// share to bring across the WAN. REQUIRES: the fetcher's layout has `shards`.
void add_fetching_mates(Driver& d, std::uint32_t shards) {
  for (std::uint64_t n = 1; n <= 30; ++n) d.add_holder(n, Holder{{"dc1", "r2", "h" + std::to_string(n)}, Bitfield(shards)});
}

// A fetcher with room for the mates and a WAN pipeline of `wan_requests`.
FetchConfig wan_share_config(std::size_t wan_requests) {
  FetchConfig config;
  config.max_neighbours = 40;
  config.pipeline_blocks = wan_requests;
  config.max_wan_requests = wan_requests;
  return config;
}

}  // namespace

TEST_CASE("fetch session: one holder, every block requested once, verified, announced") {
  Driver d(layout(10), FetchConfig{});
  d.add_holder(1, full(10));
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
  CHECK(d.session.have().all());
  CHECK(d.announced.size() == 10);
  // Without competition there is no endgame duplication.
  const std::uint32_t blocks = 10 * 4;
  CHECK(d.requests == blocks);
  CHECK(d.session.progress().bytes_verified == d.layout.total_size);
}

TEST_CASE("fetch session: a selection asks for its shards alone and is done once they verify") {
  const Holder selection = holding({"dc1", "r1", "h1"}, 10, {1, 4, 5, 9});
  const Bitfield wanted = selection.bits;
  // The nearest holder has the selection only; nobody holds shard 0 at all.
  Driver d(layout(10), FetchConfig{}, {"dc1", "r1", "h0"}, 7, 0, wanted);
  Holder far = full(10, {"dc1", "r2", "h9"});
  far.bits.reset(0);
  d.add_holder(1, selection);
  d.add_holder(2, far);
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
  for (const auto& [block, asked] : d.requests_per_block) CHECK(wanted.test(block.first));
  CHECK(d.requests == 4 * 4);
  CHECK(d.announced == std::set<std::uint32_t>{1, 4, 5, 9});
  CHECK(d.session.have().count() == 4);
  const FetchProgress p = d.session.progress();
  CHECK(p.shards_total == 4);
  CHECK(p.shards_verified == 4);
  CHECK(p.bytes_verified == 4 * d.layout.shard_size - d.layout.block_size / 2);  // shard 9 is the short last one
}

TEST_CASE("fetch session: a selection whose shard nobody holds fails naming that shard") {
  Driver d(layout(6), FetchConfig{}, {"dc1", "r1", "h0"}, 7, 0, holding({}, 6, {2, 3}).bits);
  d.add_holder(1, holding({"dc1", "r1", "h1"}, 6, {2}));
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->code() == StatusCode::kUnavailable);
  CHECK(d.result->message().find("shard 3") != std::string::npos);
}

TEST_CASE("fetch session: rarest shards first across several partial holders") {
  Driver d(layout(8), FetchConfig{});
  Holder a = full(8);
  Holder b;
  b.location = {"dc1", "r3", "h8"};
  b.bits = Bitfield(8);
  for (int s : {0, 1, 2, 3}) b.bits.set(s);
  Holder c = b;
  c.location = {"dc1", "r4", "h7"};
  d.add_holder(1, a);
  d.add_holder(2, b);
  d.add_holder(3, c);
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
}

TEST_CASE("fetch session: a corrupting holder is detected, dropped and avoided") {
  FetchConfig config;
  config.max_bad_shards = 2;
  Driver d(layout(16), config);
  Holder bad = full(16, {"dc1", "r1", "h1"});  // nearest, so it is used first
  bad.corrupt = true;
  d.add_holder(1, bad);
  d.add_holder(2, full(16, {"dc1", "r5", "h5"}));
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
  CHECK(d.session.progress().bad_shards >= 2);
  REQUIRE_FALSE(d.disconnects.empty());
  CHECK(d.disconnects.front().first == peer(1));
  CHECK(d.disconnects.front().second.find("failed verification") != std::string::npos);
}

TEST_CASE("fetch session: a holder lost mid-transfer, its blocks go elsewhere at once") {
  Driver d(layout(12), FetchConfig{});
  Holder slow = full(12, {"dc1", "r1", "h1"});
  slow.block_time = 50ms;
  d.add_holder(1, slow);
  d.add_holder(2, full(12, {"dc1", "r6", "h6"}));
  d.run(30ms);
  d.kill(1);
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
  CHECK(d.session.have().all());
}

TEST_CASE("fetch session: a connection lost while its holder lives, the holder is connected again") {
  Driver d(layout(12), FetchConfig{.starvation_timeout = 2s});
  Holder only = full(12, {"dc1", "r1", "h1"});
  only.block_time = 20ms;
  d.add_holder(1, only);  // complete, and gossip will not name it again
  d.run(50ms);
  REQUIRE(d.connects.size() == 1);
  REQUIRE_FALSE(d.session.have().all());
  d.break_connection(1);
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
  CHECK(d.session.have().all());
  CHECK(d.connects.size() == 2);
  CHECK(d.now - TimePoint(1s) < 1s);  // not after a starvation
}

TEST_CASE("fetch session: a landing payload is neither timed out nor duplicated, its connection's end frees it") {
  Driver d(layout(8), FetchConfig{.request_timeout = 200ms});
  Holder stalling = full(8, {"dc1", "r1", "h1"});
  stalling.stalls_landing = true;
  d.add_holder(1, stalling);
  d.add_holder(2, full(8, {"dc1", "r2", "h2"}));
  d.run(5s);  // 25 request timeouts
  REQUIRE_FALSE(d.result.has_value());
  std::set<std::uint32_t> landing;
  for (const auto& [when, to, shard] : d.request_log) {
    if (to == peer(1)) landing.insert(shard);
  }
  REQUIRE_FALSE(landing.empty());
  for (const std::uint32_t shard : landing) {
    CHECK(d.requests_per_block[{shard, 0}] == 1);  // nobody else was asked
    CHECK_FALSE(d.session.have().test(shard));
  }
  CHECK(d.cancels == 0);
  d.holders[peer(1)].stalls_landing = false;
  d.break_connection(1);  // what the driver does to a payload stalled too long
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
}

TEST_CASE("fetch session: requests carry ids from the given source, and an answer's id names its block until answered") {
  FetchConfig config;
  config.request_timeout = 200ms;
  Driver d(layout(4), config, {"dc1", "r1", "h0"}, 7, /*last_request_id=*/500);
  Holder slow = full(4, {"dc1", "r1", "h1"});
  slow.block_time = 10s;  // nothing arrives before the timeout
  d.add_holder(1, slow);
  d.run(10ms);
  REQUIRE(d.issued.size() == config.pipeline_blocks);  // one pipeline's worth, asked at connect
  for (const auto& [id, what] : d.issued) CHECK(d.session.request_of(std::get<0>(what), id).has_value());
  CHECK(d.issued.begin()->first == RequestId{501});
  CHECK(d.issued.rbegin()->first == RequestId{static_cast<std::uint32_t>(500 + config.pipeline_blocks)});
  const auto [first_id, first] = *d.issued.begin();
  const auto& [holder, shard, block] = first;
  CHECK_FALSE(d.session.request_of(peer(2), first_id).has_value());  // another peer's id is not this one
  CHECK_FALSE(d.session.request_of(holder, RequestId{999}).has_value());
  // A payload turned away is answered as superseded, not refused.
  d.session.mark_superseded(holder, first_id);
  auto asked = d.session.request_of(holder, first_id);
  REQUIRE(asked.has_value());
  CHECK(asked->superseded);
  d.session.on_block_superseded(d.now, holder, ShardIndex{shard}, BlockIndex{block});
  d.pump();
  CHECK_FALSE(d.session.request_of(holder, first_id).has_value());  // answered: gone
  // The rest time out: each is cancelled by its id (the driver checks that
  // every cancel names the request it cancels), and no longer named.
  d.run(300ms);
  CHECK(d.cancels >= config.pipeline_blocks - 1);
  for (std::uint32_t id = 502; id <= 500 + config.pipeline_blocks; ++id) {
    CHECK_FALSE(d.session.request_of(holder, RequestId{id}).has_value());
  }
}

TEST_CASE("fetch session: a silent holder times out, requests move on") {
  FetchConfig config;
  config.request_timeout = 200ms;
  Driver d(layout(6), config);
  Holder silent = full(6, {"dc1", "r1", "h1"});
  silent.block_time = 10s;  // never in time
  d.add_holder(1, silent);
  d.add_holder(2, full(6, {"dc1", "r7", "h2"}));
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
  CHECK(d.cancels > 0);
}

TEST_CASE("fetch session: when the last holder of a shard dies, the fetch fails cleanly") {
  FetchConfig config;
  config.starvation_timeout = 2s;
  Driver d(layout(6), config);
  Holder partial = full(6, {"dc1", "r1", "h1"});
  partial.block_time = 100ms;
  Holder others;
  others.location = {"dc1", "r2", "h2"};
  others.bits = Bitfield(6, true);
  others.bits.reset(5);  // only holder 1 has shard 5
  d.add_holder(1, partial);
  d.add_holder(2, others);
  d.run(20ms);
  d.kill(1);
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->code() == StatusCode::kUnavailable);
  CHECK(d.result->message().find("shard 5") != std::string::npos);
}

TEST_CASE("fetch session: nothing crosses the WAN that the datacenter has") {
  FetchConfig config;
  Driver d(layout(10), config, Location{"dc1", "r1", "h0"});
  Holder remote = full(10, {"dc2", "r1", "h1"});
  Holder local;
  local.location = {"dc1", "r2", "h2"};
  local.bits = Bitfield(10);
  for (int s = 0; s < 6; ++s) local.bits.set(s);
  // Once an in-datacenter holder of a shard is known, the WAN holder is not asked for it.
  d.add_holder(2, local);
  d.add_holder(1, remote);
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
  const auto p = d.session.progress();
  // Shards 6..9 exist only across the WAN; 0..5 came from the local holder.
  CHECK(p.bytes_from_wan == 4ull * d.layout.shard_size - d.layout.block_size / 2);
}

TEST_CASE("fetch session: a shard deferred to a mate is not asked across the WAN until the deferral ends") {
  FetchConfig config;
  Driver d(layout(2), config, Location{"dc1", "r1", "h0"});
  Holder remote = full(2, {"dc2", "r1", "h1"});
  remote.defers = {0};
  d.add_holder(1, remote);
  // When the WAN holder was last asked for a block of a shard.
  auto last_asked = [&](std::uint64_t who, std::uint32_t shard) {
    std::optional<TimePoint> last;
    for (const auto& [when, to, s] : d.request_log) {
      if (to == peer(who) && s == shard) last = when;
    }
    return last;
  };
  const TimePoint start = d.now;
  d.run(config.request_timeout / 2);
  REQUIRE(last_asked(1, 0).has_value());
  CHECK(*last_asked(1, 0) == start);  // asked once (a pipeline of blocks), deferred, not asked again
  CHECK(d.session.have().test(1));    // the other shard came across meanwhile
  CHECK_FALSE(d.session.have().test(0));

  SUBCASE("the mate shows the shard: it comes from the mate, never again across the WAN") {
    Holder mate;
    mate.location = {"dc1", "r2", "h2"};
    mate.bits = Bitfield(2);
    mate.bits.set(0);
    d.add_holder(2, mate);
    d.run();
    REQUIRE(d.result.has_value());
    CHECK(d.result->is_ok());
    CHECK(*last_asked(1, 0) == start);
    CHECK(last_asked(2, 0).has_value());
  }
  SUBCASE("no mate shows it: once the deferral ends the holder is asked again") {
    d.holders[peer(1)].defers.clear();
    d.run();
    REQUIRE(d.result.has_value());
    CHECK(d.result->is_ok());
    CHECK(*last_asked(1, 0) >= start + config.request_timeout);
  }
}

TEST_CASE("fetch session: a shard begun across the WAN is finished by whoever began it") {
  // Thirty mates in the datacenter fetch the same version, so almost no
  // shard is this fetcher's share to bring across. With nothing in flight
  // it takes one anyway (rather than wait); it must then finish that shard,
  // not leave it begun while it takes another: a shard begun by several
  // fetchers crosses the WAN several times.
  const FetchConfig config = wan_share_config(2);
  Driver d(layout(6, 4), config, Location{"dc1", "r1", "h0"});
  add_fetching_mates(d, 6);
  Holder remote = full(6, {"dc2", "r1", "h99"});
  remote.block_time = 10ms;
  d.add_holder(99, remote);
  d.run(200ms);
  REQUIRE(d.request_log.size() >= 4);
  const std::uint32_t first = std::get<2>(d.request_log.front());
  for (std::size_t i = 0; i < 4; ++i) CHECK(std::get<2>(d.request_log[i]) == first);
}

TEST_CASE("fetch session: a shard that one holder across the WAN alone shows is asked beyond the share") {
  // Thirty fetching mates in the datacenter, so almost no shard is this
  // fetcher's share to bring across. A sole WAN holder that is a complete
  // source (the publisher) defers second copies into the datacenter itself,
  // so the fetcher keeps its WAN pipeline full from it; where two WAN
  // holders show every shard, it keeps to its share
  // while it has something in flight. (The first wave goes out as the first
  // holder's bits arrive, when it is still the only one; the waves after it
  // tell the two apart.)
  const FetchConfig config = wan_share_config(4);
  for (const std::uint64_t wan_holders : {1u, 2u}) {
    CAPTURE(wan_holders);
    Driver d(layout(16, 1), config, Location{"dc1", "r1", "h0"});
    add_fetching_mates(d, 16);
    d.run(1ms);  // the mates are connected
    REQUIRE(d.session.progress().neighbours == 30);
    for (std::uint64_t n = 0; n < wan_holders; ++n) {
      Holder remote = full(16, {"dc2", "r1", "h" + std::to_string(90 + n)});
      remote.block_time = 10ms;
      remote.named_complete = true;
      d.add_holder(90 + n, remote);
    }
    const TimePoint start = d.now;
    d.run(25ms);  // two waves of answers
    std::map<TimePoint, std::set<std::uint32_t>> asked_at;
    for (const auto& [when, to, shard] : d.request_log) {
      if (when > start) asked_at[when].insert(shard);
    }
    std::size_t widest = 0;
    for (const auto& [when, shards] : asked_at) widest = std::max(widest, shards.size());
    if (wan_holders == 1) {
      CHECK(widest == config.max_wan_requests);
    } else {
      CHECK(widest < config.max_wan_requests);
    }
  }
}

TEST_CASE("fetch session: endgame asks a second holder and cancels the loser") {
  FetchConfig config;
  config.pipeline_blocks = 2;
  Driver d(layout(2, 2), config);
  Holder slow = full(2, {"dc1", "r1", "h1"});
  slow.block_time = 300ms;
  Holder fast = full(2, {"dc1", "r2", "h2"});
  fast.block_time = 1ms;
  d.add_holder(1, slow);
  d.add_holder(2, fast);
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
  CHECK(d.session.progress().endgame);
  CHECK(d.cancels > 0);
  bool duplicated = false;
  for (const auto& [block, count] : d.requests_per_block) duplicated |= count > 1;
  CHECK(duplicated);
}

TEST_CASE("fetch session: a refusing holder is not asked again for that shard") {
  Driver d(layout(4), FetchConfig{});
  Holder refuser = full(4, {"dc1", "r1", "h1"});
  refuser.refuses = true;
  d.add_holder(1, refuser);
  d.add_holder(2, full(4, {"dc1", "r3", "h3"}));
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
}

TEST_CASE("fetch session: with no candidate at all, the fetch fails after the starvation timeout") {
  FetchConfig config;
  config.starvation_timeout = 2s;
  Driver d(layout(3), config);
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->code() == StatusCode::kUnavailable);
  CHECK(d.now >= TimePoint(3s));
}

TEST_CASE("fetch session: host mates named after the neighbour limit is reached still become neighbours") {
  // Gossip names holders as their records spread, so the slots can be full
  // of far holders before the mates on this host are known. The limit
  // guards the NIC, which a mate's blocks never cross; mates left out would
  // pull over the NIC what their host already holds.
  FetchConfig config;
  config.max_neighbours = 2;
  config.random_neighbours = 0;
  Driver d(layout(4), config);
  auto settle = [&] {
    d.session.handle_timeout(d.now);
    d.pump();
  };
  d.add_holder(1, full(4, {"dc1", "r2", "h1"}));
  d.add_holder(2, full(4, {"dc1", "r3", "h2"}));
  settle();
  REQUIRE(d.connects.size() == 2);
  for (std::uint64_t n = 3; n <= 5; ++n) d.add_holder(n, full(4, {"dc1", "r1", "h0"}));  // our host
  d.add_holder(6, full(4, {"dc1", "r1", "h6"}));  // our rack: nearer, but not a mate
  settle();
  const std::set<PeerId> connected(d.connects.begin(), d.connects.end());
  for (std::uint64_t n = 3; n <= 5; ++n) CHECK_MESSAGE(connected.count(peer(n)), "host mate " << n << " is not a neighbour");
  CHECK_FALSE(connected.count(peer(6)));  // the limit still holds for the rest
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
}

TEST_CASE("fetch session: a shard a host mate brings across the NIC is left to it") {
  // Eight GPUs' peers share one node's NIC. An idle fetcher takes any shard,
  // and with mates' shards in flight included the NIC would carry some
  // shards twice. A mate's kFetching claim keeps the shard off this NIC
  // while the mate is at it.
  FetchConfig config;
  config.pipeline_blocks = 2;
  Driver d(layout(10), config, Location{"dc1", "r1", "h0"});
  Holder mate;  // fetching too: holds nothing yet
  mate.location = {"dc1", "r1", "h0"};
  mate.bits = Bitfield(10);
  d.add_holder(1, mate);
  d.run(1ms);  // connected (candidates wait for the end of a burst)
  for (std::uint32_t s = 0; s < 9; ++s) d.session.on_mate_fetching(d.now, peer(1), ShardIndex{s});
  Holder far = full(10, {"dc1", "r2", "h9"});
  far.block_time = 5ms;
  d.add_holder(2, far);
  auto asked_far = [&](std::uint32_t shard) {
    return std::any_of(d.request_log.begin(), d.request_log.end(),
                       [&](const auto& r) { return std::get<1>(r) == peer(2) && std::get<2>(r) == shard; });
  };
  d.run(100ms);
  CHECK(asked_far(9));
  for (std::uint32_t s = 0; s < 9; ++s) CHECK_MESSAGE(!asked_far(s), "shard " << s << " crossed the NIC twice");
  CHECK(d.claimed == std::vector<std::uint32_t>{9});  // what it brings across, its mates are told of once

  SUBCASE("the mate's HAVEs: the shards come from the mate") {
    for (std::uint32_t s = 0; s < 9; ++s) {
      d.holders[peer(1)].bits.set(s);
      d.session.on_have(d.now, peer(1), ShardIndex{s});
      d.pump();
    }
    d.run();
    REQUIRE(d.result.has_value());
    CHECK(d.result->is_ok());
    for (std::uint32_t s = 0; s < 9; ++s) CHECK(!asked_far(s));
    CHECK(d.claimed == std::vector<std::uint32_t>{9});
  }
  SUBCASE("the mate stalls: with nothing else to do, its claims lapse after a request timeout") {
    const TimePoint claimed_at = d.now - 100ms;
    d.run();
    REQUIRE(d.result.has_value());
    CHECK(d.result->is_ok());
    for (const auto& [when, to, shard] : d.request_log) {
      if (to == peer(2) && shard < 9) CHECK(when >= claimed_at + config.request_timeout);
    }
  }
  SUBCASE("a mate that goes takes its claims with it") {
    d.kill(1);
    d.run(config.request_timeout / 2);
    REQUIRE(d.result.has_value());
    CHECK(d.result->is_ok());
  }
}

TEST_CASE("fetch session: a claim is withdrawn when no holder beyond the host serves the shard, and mates take it up") {
  // A fetcher choked mid-shard that kept its claim would leave its mates
  // idle until the claim lapsed, a request timeout; with slots changing
  // hands often, most of a host's workers would wait so.
  FetchConfig config;
  config.pipeline_blocks = 1;
  Driver d(layout(1, 8), config, Location{"dc1", "r1", "h0"});
  Holder far = full(1, {"dc1", "r2", "h9"});
  far.block_time = 5ms;
  d.add_holder(2, far);
  d.run(1ms);
  REQUIRE(d.claimed == std::vector<std::uint32_t>{0});

  SUBCASE("choked by the only holder: withdrawn") {
    d.session.on_choked(d.now, peer(2));
    d.pump();
    CHECK(d.unclaimed == std::vector<std::uint32_t>{0});
    d.session.on_unchoked(d.now, peer(2));  // asked again beyond the host: claimed again
    d.pump();
    CHECK(d.claimed == std::vector<std::uint32_t>{0, 0});
  }
  SUBCASE("another holder beyond the host still serves it: kept") {
    Holder other = full(1, {"dc1", "r3", "h8"});
    other.block_time = 5ms;
    d.add_holder(3, other);
    d.run(2ms);
    d.session.on_choked(d.now, peer(2));
    d.pump();
    CHECK(d.unclaimed.empty());
    d.kill(3);  // and when that one goes too
    d.pump();
    CHECK(d.unclaimed == std::vector<std::uint32_t>{0});
  }
}

TEST_CASE("fetch session: a mate's withdrawn claim frees the shard at once") {
  FetchConfig config;
  config.pipeline_blocks = 2;
  Driver d(layout(10), config, Location{"dc1", "r1", "h0"});
  Holder mate;
  mate.location = {"dc1", "r1", "h0"};
  mate.bits = Bitfield(10);
  d.add_holder(1, mate);
  d.run(1ms);
  for (std::uint32_t s = 0; s < 9; ++s) d.session.on_mate_fetching(d.now, peer(1), ShardIndex{s});
  Holder far = full(10, {"dc1", "r2", "h9"});
  far.block_time = 5ms;
  d.add_holder(2, far);
  d.run(100ms);
  auto first_asked_far = [&](std::uint32_t shard) {
    for (const auto& [when, to, asked] : d.request_log) {
      if (to == peer(2) && asked == shard) return when;
    }
    return kTimeNever;
  };
  CHECK(first_asked_far(3) == kTimeNever);
  const TimePoint withdrawn = d.now;
  d.session.on_mate_not_fetching(d.now, peer(3), ShardIndex{3});  // not the claimer: no effect
  d.session.on_mate_not_fetching(d.now, peer(1), ShardIndex{3});
  d.pump();
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
  CHECK(first_asked_far(3) < withdrawn + 50ms);  // not a request timeout later
  CHECK(first_asked_far(4) >= withdrawn + config.request_timeout - 100ms);  // still claimed: the claim lapses
}

TEST_CASE("fetch session: two mates that begin one shard at once: the higher rendezvous score keeps it") {
  // Both began it before either's claim arrived. Each yields to a mate
  // that outranks it for the shard, so exactly one goes on: over thirty
  // mates, some outrank us (we stop) and some do not (we finish it).
  FetchConfig config;
  config.pipeline_blocks = 1;
  std::size_t yielded = 0, kept = 0;
  for (std::uint64_t n = 10; n < 40; ++n) {
    Driver d(layout(1, 8), config, Location{"dc1", "r1", "h0"});
    Holder far = full(1, {"dc1", "r2", "h9"});
    far.block_time = 5ms;
    d.add_holder(n, Holder{{"dc1", "r1", "h0"}, Bitfield(1)});
    d.add_holder(2, far);
    d.run(1ms);  // both connected, block 0 of shard 0 asked of the far holder
    REQUIRE(d.claimed == std::vector<std::uint32_t>{0});
    REQUIRE(d.request_log.size() == 1);
    d.session.on_mate_fetching(d.now, peer(n), ShardIndex{0});
    d.run(30ms);
    const bool goes_on = d.request_log.size() > 1;
    (goes_on ? kept : yielded) += 1;
    if (goes_on) {
      d.run();
      REQUIRE(d.result.has_value());
      CHECK(d.result->is_ok());
    } else {
      CHECK(d.request_log.size() == 1);
    }
  }
  CHECK(yielded > 0);
  CHECK(kept > 0);
}

TEST_CASE("fetch session: past its neighbour limit, a starved fetch trades a useless neighbour for another candidate") {
  // Seven nearby holders have only shard 0; the one that has shard 1 is
  // farther, so nearest-first never picks it, and the extra neighbours a
  // starved fetch may add are spent on the nearby ones. Waiting there was
  // a silent hang (found by the simulator).
  FetchConfig config;
  config.max_neighbours = 2;
  config.random_neighbours = 0;
  Driver d(layout(2), config);
  for (std::uint64_t n = 1; n <= 7; ++n) {
    Holder h;
    h.location = {"dc1", "r1", "h" + std::to_string(n)};
    h.bits = Bitfield(2);
    h.bits.set(0);
    d.add_holder(n, h);
  }
  d.add_holder(9, full(2, {"dc1", "r7", "h9"}));
  d.run(20s);
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
  CHECK_FALSE(d.releases.empty());
  CHECK(std::find(d.releases.begin(), d.releases.end(), peer(9)) == d.releases.end());
  CHECK(d.now < TimePoint(1s) + 10s);
}

TEST_CASE("fetch session: a shard held by a super-seed in the rack and by a holder across the WAN is fetched") {
  // The super-seed rule skipped the seed because a serving holder had the
  // shard; the WAN rule skipped that holder because a nearer one (the seed)
  // had it. Nothing was ever requested, and with a super-seed connected
  // nothing counted as starvation: the namespace cluster's two datacenters
  // left three hosts at 63 of 65 shards for good.
  FetchConfig config;
  config.block_size = 64 << 10;
  config.pipeline_blocks = 1;
  Driver d(ShardLayout{128 << 10, 64 << 10, 64 << 10}, config, Location{"dc1", "r1", "h0"});
  Bitfield revealed(2);
  revealed.set(0);
  Holder seed{{"dc1", "r1", "h1"}, revealed};
  seed.super_seed = true;
  seed.block_time = 100ms;
  d.add_holder(1, seed);
  d.add_holder(2, Holder{{"dc2", "r1", "h2"}, Bitfield(2)});
  d.run(10ms);  // connected; shard 0 asked of the seed, whose pipeline is now full
  REQUIRE(d.requests == 1);
  // Shard 1 appears at both while the fetcher cannot ask anyone for more.
  d.holders[peer(1)].bits.set(1);
  d.holders[peer(2)].bits.set(1);
  d.session.on_have(d.now, peer(1), ShardIndex{1});
  d.session.on_have(d.now, peer(2), ShardIndex{1});
  d.pump();
  d.run(10s);
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
}

TEST_CASE("fetch session: fetchers missing a shard draw which named-complete holder to ask next") {
  // The simulator's trainer ranks each hold an eighth of the version, and
  // gossip cannot say which eighth. Were every fetcher to ask the first in
  // id order, the same ranks would be asked everywhere, one rank would be
  // nobody's neighbour, and every worker would wait for the starvation
  // trade. Forty fetchers, one neighbour each plus
  // the extra ones a starved fetch may add: their second pick is spread.
  std::set<PeerId> second_picks;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    FetchConfig config;
    config.max_neighbours = 1;
    config.random_neighbours = 0;
    Driver d(layout(8), config, {"dc1", "r1", "h0"}, seed);
    for (std::uint64_t rank = 0; rank < 8; ++rank) {
      Holder h;
      h.location = {"dc1", "r2", "t" + std::to_string(rank)};
      h.bits = Bitfield(8);
      h.bits.set(rank);
      h.named_complete = true;
      d.add_holder(rank, h);
    }
    d.run(100ms);
    REQUIRE(d.connects.size() >= 2);
    second_picks.insert(d.connects[1]);
  }
  CHECK(second_picks.size() >= 5);
}

namespace {

// Holders grant slots explicitly (and the tests' holders grant none unless
// told); two neighbours, none drawn at random.
FetchConfig probing_config() {
  FetchConfig config;
  config.starts_choked = true;
  config.max_neighbours = 2;
  config.random_neighbours = 0;
  return config;
}

}  // namespace

TEST_CASE("fetch session: short of its slot share, a fetch probes more candidates and gives up those that keep it waiting") {
  const FetchConfig config = probing_config();
  Driver d(layout(4), config);
  d.session.set_slot_share(d.now, 1);
  for (std::uint64_t n = 1; n <= 8; ++n) d.add_holder(n, full(4, {"dc1", "r1", "h" + std::to_string(n)}));
  d.run(config.slot_probe_after / 2);
  CHECK(d.connects.size() == 2);  // the neighbours, and no probe yet: a wait that short is not starving
  d.run(config.slot_probe_after * 3);
  CHECK(d.connects.size() > 2);
  REQUIRE_FALSE(d.releases.empty());  // probes that never unchoked us went back
  for (const PeerId& released : d.releases) {
    CHECK(std::find(d.connects.begin(), d.connects.begin() + 2, released) == d.connects.begin() + 2);
  }
  // A probe unchokes us: the share is held, and probing stops.
  const PeerId granted = d.connects.back();
  d.session.on_unchoked(d.now, granted);
  d.pump();
  const std::size_t connects = d.connects.size();
  const std::size_t releases = d.releases.size();
  d.run(config.slot_probe_after * 5);
  CHECK(d.connects.size() == connects);
  CHECK(d.releases.size() == releases);
  CHECK(std::find(d.releases.begin(), d.releases.end(), granted) == d.releases.end());
  CHECK(d.blocks_delivered > 0);
}

TEST_CASE("fetch session: short of its slot share, every other probe looks beyond the nearest holders") {
  // The free slots can be a few among many peers, in other racks, which a
  // fetch probing only its own rack never finds.
  const FetchConfig config = probing_config();
  Driver d(layout(4), config);
  d.session.set_slot_share(d.now, 1);
  for (std::uint64_t n = 1; n <= 4; ++n) d.add_holder(n, full(4, {"dc1", "r1", "h" + std::to_string(n)}));
  for (std::uint64_t n = 5; n <= 44; ++n) d.add_holder(n, full(4, {"dc1", "r2", "h" + std::to_string(n)}));
  d.run(config.slot_probe_after * 3 / 2);
  REQUIRE(d.connects.size() == 4);  // two neighbours, then the first two probes
  auto in_rack_r1 = [&](const PeerId& p) { return d.holders.at(p).location.rack == "r1"; };
  CHECK(in_rack_r1(d.connects[0]));  // the neighbours: the nearest
  CHECK(in_rack_r1(d.connects[1]));
  CHECK(in_rack_r1(d.connects[2]));  // a probe among the nearest (two are left)
  CHECK_FALSE(in_rack_r1(d.connects[3]));  // and one drawn from the whole list: another rack
}

TEST_CASE("fetch session: holding more slots than its share, a fetch hands back the one with the fewest requests in flight") {
  FetchConfig config;  // neighbours start unchoked: both holders grant a slot at once
  Driver d(layout(4), config);
  d.session.set_slot_share(d.now, 1);
  d.add_holder(1, full(4, {"dc1", "r1", "h1"}));
  d.add_holder(2, full(4, {"dc1", "r1", "h2"}));
  d.run(60s);
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
  REQUIRE(d.releases.size() == 1);
  CHECK(d.session.slot_sources() <= 1);

  // Without a share, both slots are kept.
  Driver unlimited(layout(4), config);
  unlimited.add_holder(1, full(4, {"dc1", "r1", "h1"}));
  unlimited.add_holder(2, full(4, {"dc1", "r1", "h2"}));
  unlimited.run(60s);
  REQUIRE(unlimited.result.has_value());
  CHECK(unlimited.releases.empty());
}

TEST_CASE("fetch session: a holder across the WAN that fetched the version itself is asked only for our share") {
  // Such a holder defers only its own duplicates into our datacenter, and a
  // datacenter's fetchers each asking it (or one of its many peers) for any
  // shard would send each across many times. Unlike a complete source, it is asked
  // only for this fetcher's share, even when it alone shows the shard and
  // the fetcher is idle, until the fetcher has idled a request timeout.
  const FetchConfig config = wan_share_config(4);
  Driver d(layout(16, 1), config, Location{"dc1", "r1", "h0"});
  add_fetching_mates(d, 16);
  d.run(1ms);  // the mates are connected
  Holder fetched = full(16, {"dc2", "r1", "h90"});
  fetched.block_time = 10ms;
  d.add_holder(90, fetched);
  const TimePoint start = d.now;
  d.run(config.request_timeout / 2);
  std::size_t asked = 0;
  for (const auto& [when, to, shard] : d.request_log) {
    if (when > start && to == peer(90)) ++asked;
  }
  CHECK(asked <= 2);  // its share of 16 shards among 31 fetchers, not a pipeline of 4 and more
  d.run(config.request_timeout * 2);
  std::size_t later = 0;
  for (const auto& [when, to, shard] : d.request_log) {
    if (to == peer(90)) ++later;
  }
  CHECK(later > asked);  // idle a request timeout, it takes the rest rather than wait
}

TEST_CASE("fetch session: its timers are named, and the next timeout is the earliest of them") {
  FetchConfig config;
  config.request_timeout = 200ms;
  config.starvation_timeout = 2s;
  Driver d(layout(6), config);
  // No candidate: only the starvation timer stands.
  d.pump();
  auto timers = d.session.timers();
  CHECK(timers.at(FetchTimer::kStarvation) == d.now + 2s);
  CHECK(timers.at(FetchTimer::kRequest) == kTimeNever);
  CHECK(d.session.next_timeout() == timers.next());
  // A candidate: it is connected when the burst of candidates ends, now.
  Holder silent = full(6, {"dc1", "r1", "h1"});
  silent.block_time = 10s;
  d.add_holder(1, silent);
  timers = d.session.timers();
  CHECK(timers.at(FetchTimer::kStarvation) == kTimeNever);
  CHECK(timers.at(FetchTimer::kConnectBurst) == d.now);
  CHECK(d.session.next_timeout() == d.now);
  // Connected, it never delivers: its requests stand until the request timeout.
  d.session.handle_timeout(d.now);
  d.pump();
  timers = d.session.timers();
  CHECK(timers.at(FetchTimer::kConnectBurst) == kTimeNever);
  CHECK(timers.at(FetchTimer::kRequest) == d.now + 200ms);
  CHECK(d.session.next_timeout() == timers.next());
  CHECK(timers.next() <= d.now + 200ms);
}

TEST_CASE("fetch session: one liar among honest co-senders gets only itself banned") {
  // Multi-block shards pulled from many holders at once: most shards the
  // liar touches have honest co-senders, whom blaming every sender would
  // ban too.
  FetchConfig config;
  config.max_bad_shards = 2;
  config.pipeline_blocks = 2;
  Driver d(layout(64), config);  // 64 shards of 4 blocks
  Holder liar = full(64, {"dc1", "r1", "h1"});
  liar.corrupt = true;
  d.add_holder(1, liar);
  std::size_t honest = 2;
  SUBCASE("two honest co-senders") {}
  SUBCASE("fifteen honest co-senders") { honest = 15; }
  for (std::size_t h = 2; h < 2 + honest; ++h) {
    d.add_holder(h, full(64, {"dc1", "r" + std::to_string(h), "h" + std::to_string(h)}));
  }
  d.run();
  REQUIRE(d.result.has_value());
  CHECK(d.result->is_ok());
  CHECK(d.session.progress().bad_shards >= 2);
  std::set<PeerId> banned;
  for (const auto& [who, why] : d.disconnects) {
    if (why.find("failed verification") != std::string::npos) banned.insert(who);
  }
  CHECK(banned == std::set<PeerId>{peer(1)});
}

TEST_CASE("fetch session: a holder whose connections keep closing before it delivers is retried with a back-off") {
  Driver d(layout(6), FetchConfig{.starvation_timeout = 5s});
  Holder flaky = full(6, {"dc1", "r1", "h1"});
  flaky.block_time = 10s;  // nothing arrives before its connection closes
  d.add_holder(1, flaky);
  const TimePoint end = d.now + 1s;
  std::size_t handled = 0;
  while (d.now < end && !d.result) {
    const TimePoint step = d.now + 1ms;
    d.run(1ms);
    d.now = std::max(d.now, step);
    if (d.connects.size() > handled) {
      handled = d.connects.size();
      d.break_connection(1);
    }
  }
  // Connected at 0, then again at once, then after 100, 200 and 400 ms:
  // a handful in a second, not one per event.
  MESSAGE("connections in 1 s: " << d.connects.size());
  CHECK(d.connects.size() >= 3);
  CHECK(d.connects.size() <= 6);
}

TEST_CASE("fetch session: an unchoke past the slot share is handed back, and asked for again when a slot ends") {
  FetchConfig config;
  config.starts_choked = true;  // holders grant their slots explicitly
  config.slot_probes = 0;
  Driver d(layout(16), config);
  d.session.set_slot_share(d.now, 1);
  Holder slow = full(16, {"dc1", "r2", "h2"});
  slow.block_time = 10s;  // its requests stay in flight
  d.add_holder(1, slow);
  d.add_holder(2, full(16, {"dc1", "r3", "h3"}));
  Holder mate = full(16, {"dc1", "r1", "h0"});  // a host mate: served outside the slots
  mate.bits = Bitfield(16);                       // (holding nothing, it takes no requests from the others)
  d.add_holder(3, mate);
  d.run(100ms);  // connected, choked
  REQUIRE(d.connects.size() == 3);
  d.session.on_unchoked(d.now, peer(1));
  d.pump();
  CHECK(d.session.in_flight_total() > 0);
  // Its share is held: the second holder's slot goes back.
  d.session.on_unchoked(d.now, peer(2));
  d.pump();
  CHECK(d.declined == std::vector<PeerId>{peer(2)});
  CHECK(d.session.slot_sources() == 1);
  // A host mate's unchoke is never handed back.
  d.session.on_unchoked(d.now, peer(3));
  d.pump();
  CHECK(d.declined.size() == 1);
  // The slot held ends: the holder handed back is asked again, and its
  // unchoke then is taken.
  d.session.on_choked(d.now, peer(1));
  d.pump();
  CHECK(d.asked_again == std::vector<PeerId>{peer(2)});
  d.session.on_unchoked(d.now, peer(2));
  d.pump();
  CHECK(d.declined.size() == 1);
  CHECK(d.session.slot_sources() == 1);
}

TEST_CASE("fetch session: a fetch with nothing in flight asks every holder it handed back again") {
  FetchConfig config;
  config.starts_choked = true;
  config.slot_probes = 0;
  Driver d(layout(16), config);
  d.session.set_slot_share(d.now, 1);
  Holder empty = full(16, {"dc1", "r2", "h2"});
  empty.bits = Bitfield(16);  // unchokes, but holds nothing we want
  d.add_holder(1, empty);
  d.add_holder(2, full(16, {"dc1", "r3", "h3"}));
  d.run(100ms);  // connected, choked
  REQUIRE(d.connects.size() == 2);
  d.session.on_unchoked(d.now, peer(1));
  d.pump();
  CHECK(d.session.in_flight_total() == 0);
  // Starving, it may take the slot only once asked again: the unchoke that
  // comes unasked past the share goes back, and is asked again at once.
  d.session.on_unchoked(d.now, peer(2));
  d.pump();
  CHECK(d.declined == std::vector<PeerId>{peer(2)});
  CHECK(d.asked_again == std::vector<PeerId>{peer(2)});
  d.session.on_unchoked(d.now, peer(2));
  d.pump();
  CHECK(d.declined.size() == 1);
  CHECK(d.session.in_flight_total() > 0);
}
