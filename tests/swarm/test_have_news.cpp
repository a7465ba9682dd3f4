// Who hears that a fetcher now holds a shard (HAVE): the peers that fetch
// from it and have not shown it that shard, and a super-seed it fetches
// from (whose reveals are paced by those HAVEs); not a holder that only
// serves it. Real SwarmCores for the fetcher and its holders; the peer that
// fetches from the fetcher is played by hand.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <vector>

#include "support/gossip_network.hpp"
#include "swarm/swarm_core.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;
using namespace std::chrono_literals;

namespace {

PeerId peer_id(std::uint64_t n) { return testing::GossipNetwork::identity_for(800 + n).public_key(); }

// The version is one shard of one 64 KiB block.
class HaveNews {
 public:
  explicit HaveNews(SwarmCore::ServeMode holder_mode) {
    config.fetch.block_size = kBlock;
    version.bytes[0] = 0x17;
    fetcher = std::make_unique<SwarmCore>(config, Location{"dc1", "r1", "h0"}, f, 1);
    holder = std::make_unique<SwarmCore>(config, Location{"dc1", "r1", "h1"}, h, 2);
    holder->set_location(f, Location{"dc1", "r1", "h0"});  // a super-seed reveals only within its datacenter
    holder->serve(now, version, layout, core::Bitfield(1, true), holder_mode);
    fetcher->fetch(now, version, layout, core::Bitfield(1, false));
    // A peer that fetches the version too connects in and asks the fetcher.
    fetcher->on_connected(now, requester);
    fetcher->on_message(now, requester,
                        SwarmMessage{MessageType::kInterested, version, 0, {}, {}, 0, 0, 1, core::Bitfield(1).to_bytes()});
    fetcher->add_holder(now, version, h, true);
    fetcher->handle_timeout(now);
    pump();
  }

  // Carries messages between the fetcher and the holder; lands every piece
  // served, verifies every shard as good, and notes every HAVE the fetcher
  // sends (to the holder or the requester).
  void pump() {
    for (bool moved = true; moved;) {
      moved = false;
      while (auto action = fetcher->poll()) {
        moved = true;
        if (auto* open = std::get_if<OpenConnection>(&*action)) {
          fetcher->on_connected(now, open->peer);
        } else if (auto* send = std::get_if<SendMessage>(&*action)) {
          if (send->message.type == MessageType::kHave) ++haves_to[send->peer];
          if (send->peer == h) holder->on_message(now, f, send->message);
        } else if (auto* verify = std::get_if<VerifyShard>(&*action)) {
          fetcher->on_verified(now, version, verify->shard, true);
        } else if (std::holds_alternative<FetchFinished>(*action)) {
          finished = true;
        }
      }
      while (auto action = holder->poll()) {
        moved = true;
        if (auto* send = std::get_if<SendMessage>(&*action)) {
          fetcher->on_message(now, h, send->message);
        } else if (auto* serve = std::get_if<ServePiece>(&*action)) {
          REQUIRE(fetcher->begin_piece(now, h, serve->header).has_value());
          fetcher->on_piece(now, h, serve->header, true);
        }
      }
    }
  }

  static constexpr std::uint32_t kBlock = 64u << 10;
  SwarmConfig config;
  ShardLayout layout{kBlock, kBlock, kBlock};
  ManifestId version;
  PeerId f = peer_id(0), h = peer_id(1), requester = peer_id(2);
  TimePoint now{std::chrono::seconds(1)};
  std::unique_ptr<SwarmCore> fetcher, holder;
  std::map<PeerId, int> haves_to;
  bool finished = false;
};

}  // namespace

TEST_CASE("have news: a peer fetching from us hears of the shard; a plain holder that only serves us does not") {
  HaveNews run(SwarmCore::ServeMode::kPlain);
  REQUIRE(run.finished);
  CHECK(run.haves_to[run.requester] == 1);
  CHECK(run.haves_to.count(run.h) == 0);
}

TEST_CASE("have news: a super-seed we fetch from hears of the shard, which paces its reveals") {
  HaveNews run(SwarmCore::ServeMode::kSuperSeed);
  REQUIRE(run.finished);
  CHECK(run.haves_to[run.requester] == 1);
  CHECK(run.haves_to[run.h] == 1);
}
