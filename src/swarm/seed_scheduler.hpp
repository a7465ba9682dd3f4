// The publisher's reveal policy: BitTorrent's super-seeding, for a swarm
// whose members cooperate.
//
// A publisher holds every shard, but at first it is the only holder, and its
// uplink is the scarcest link in the swarm. If it simply advertised all of
// them, fetchers would pick independently and it would upload the same
// shards to several peers. So it
// reveals to each fetcher only a few shards at a time (HAVEs), choosing the
// shards with the fewest copies among its requesters. Its uplink then
// carries distinct shards to different peers first, and the fetchers spread
// them among themselves.
//
// Only requesters the publisher serves now (unchoked) are shown anything.
// Such a requester's quota of revealed shards it does not hold yet is topped
// up whenever it reports a shard (HAVE), so the publisher's connection to it
// does not run dry.
//
// No second copies while first copies are in flight: once every shard has
// been revealed to someone, nothing more is revealed until every shard is
// held somewhere, so the last first copies get the whole uplink instead of
// sharing it with duplicates. If no first copy completes for `stall_timeout` (a stopped
// requester), the rule lapses and second copies go out.
//
// A slow requester (a degraded NIC, a busy host) must not hold first copies
// that everyone else then waits for, each HAVE it sends counting as
// progress while the others wait for its first copies. So a
// requester that has gone `kLapseGaps` times the usual gap between two
// completions of revealed shards without one lags: its first copies in
// flight stop counting as copies (they lapse), so they are revealed to
// others as first copies, and it is shown no first copies while it holds a
// lapsed one. It may still complete them. The requesters served share the
// uplink, so a requester's usual gap grows with their number: the
// scheduler smooths the gaps of the requesters that do not lag, each
// divided by the number served when it ended (the uplink's time per
// revealed shard), and expects a gap of that times the number served now,
// so requesters that join after the first few are not judged by gaps from
// when those few had the uplink to themselves. And no requester lags before
// `min_lapse` without a completion: flows that share an uplink take turns
// at shorter scales (a TCP flow that lost a packet waits a retransmission
// timeout, 200 ms at least on Linux, while the others take its share), and
// every false lapse sends its first copies out twice through the scarcest
// link.
//
// First copies go out in shard order (the lowest-numbered shard without a
// copy): each requester still gets distinct shards, and a fetcher that
// reads the version front to back (a loader streaming tensors as they
// verify) gets its first tensors first instead of at the end. Second copies
// go to the shards with the fewest copies, ties in random order.
//
// Copies are counted over the current requesters: a requester contributes
// one copy of every shard it holds or has been revealed. A requester that
// leaves, or is choked, takes its copies with it, so what only it had is
// revealed to others again. So does one that goes silent with shards
// revealed to it (suspend: a stopped process, a link down), until it is
// heard from again: otherwise the shards shown only to a stopped process
// are never shown to anyone else, and the swarm waits for it.
//
// Sans-I/O: time comes in; the caller turns reveals into messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "core/bitfield.hpp"
#include "core/time.hpp"
#include "core/timer_table.hpp"
#include "swarm/piece_picker.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

struct Reveal {
  PeerId peer;
  ShardIndex shard;
};

class SeedScheduler {
 public:
  // REQUIRES: reveal_ahead >= 1; min_lapse <= stall_timeout.
  SeedScheduler(std::uint32_t shard_count, std::size_t reveal_ahead, std::uint64_t seed,
                Duration stall_timeout = std::chrono::seconds(2),
                Duration min_lapse = std::chrono::milliseconds(500));

  // A requester arrives holding `has` (empty: nothing). Nothing is revealed
  // to it until it is activated.
  void add_requester(const PeerId& peer, const core::Bitfield& has);
  // The seed serves it now (unchoked): returns what to reveal.
  std::vector<Reveal> activate(TimePoint now, const PeerId& peer);
  // The seed stops serving it (choked): what was revealed to it and not yet
  // held stops counting as a copy, so other requesters are shown it instead.
  void deactivate(const PeerId& peer);
  // The seed means to stop serving it once it holds what was revealed to it
  // (its turn is over): nothing more is revealed to it meanwhile.
  void finish(const PeerId& peer);
  // The requester now holds `shard`. Returns what to reveal (to it, or to
  // others when this was the last shard nobody held).
  std::vector<Reveal> on_have(TimePoint now, const PeerId& peer, ShardIndex shard);
  void remove_requester(const PeerId& peer);
  // It has gone silent: what it holds or was shown stops counting as a
  // copy (the shown are forgotten), and it is shown nothing until resumed.
  // Returns what to reveal to the requesters that were waiting for first
  // copies to complete: some of its shards have no copy now.
  std::vector<Reveal> suspend(TimePoint now, const PeerId& peer);
  // Heard from again: what it holds counts again. Returns what to reveal
  // to it (if it is served now).
  std::vector<Reveal> resume(TimePoint now, const PeerId& peer);
  bool suspended(const PeerId& peer) const;

  // When the no-second-copies rule may lapse for a waiting requester, or a
  // requester with first copies in flight comes to lag.
  TimePoint next_timeout() const { return timers().next(); }
  enum class Timer {
    kStall,  // nothing revealed got a copy for stall_timeout: waiting requesters get duplicates
    kLapse,  // a requester with first copies in flight is lagging: they count as no copy
    kCount
  };
  core::TimerTable<Timer> timers() const;
  std::vector<Reveal> handle_timeout(TimePoint now);

  bool knows(const PeerId& peer) const { return requesters_.count(peer) != 0; }
  // Copies of `shard` among the requesters (held or revealed).
  std::uint32_t copies(ShardIndex shard) const { return copies_.availability(shard); }
  // Revealed to `peer` and not yet held by it.
  std::size_t pending(const PeerId& peer) const;
  // Shards no requester holds yet.
  std::uint32_t unheld() const { return unheld_; }
  // Shown to some requester and not yet held by it, over all requesters.
  std::size_t total_pending() const { return total_pending_; }
  // Whether it lags (holds a lapsed first copy).
  bool lagging(const PeerId& peer) const;

  static constexpr int kLapseGaps = 4;

 private:
  struct Requester {
    core::Bitfield has;
    core::Bitfield revealed;
    std::size_t pending = 0;  // revealed, not held; invariant: == count(revealed & ~has)
    bool active = false;
    bool waiting = false;     // has quota left, held back by the no-second-copies rule
    bool finishing = false;   // its turn is over: it gets what was revealed, nothing more
    bool suspended = false;   // silent: counts no copies, is shown nothing
    // First copies shown to it, not yet held and not lapsed.
    std::vector<ShardIndex> first_copies;
    // Shown, not held, and no longer counted as a copy (it lagged).
    // invariant: lapsed is a subset of revealed & ~has; lapsed_count == count(lapsed)
    core::Bitfield lapsed;
    std::size_t lapsed_count = 0;
    // Since when it has completed no revealed shard (set when the first of
    // its pending ones was revealed, and at each completion).
    TimePoint gap_start{};
  };
  // Served and not silent: it shares the uplink.
  static bool shares_uplink(const Requester& r) { return r.active && !r.suspended; }
  // Forgets what was shown to `r` and not yet held.
  void forget_revealed(Requester& r);
  // Ends a suspension: what `r` holds counts again.
  void restore(Requester& r);
  // Reveals to `r` up to `limit` shards, until its quota is full.
  void top_up(TimePoint now, const PeerId& id, Requester& r, std::vector<Reveal>& out, std::size_t limit = SIZE_MAX);
  void top_up_waiting(TimePoint now, std::vector<Reveal>& out);
  // Tops up the requesters `who` picks, one reveal each in turn.
  void top_up_in_turn(TimePoint now, std::vector<Reveal>& out, const std::function<bool(const Requester&)>& who);
  void add_held(const core::Bitfield& has);
  // When `r`'s first copies in flight lapse (kTimeNever: it has none).
  TimePoint lapse_due(const Requester& r) const;
  void lapse(Requester& r);
  void remove_held(const core::Bitfield& has);
  // Every change of a shard's copies goes through these, which keep
  // uncopied_ in step with copies_.
  void count_copy(ShardIndex shard);
  void uncount_copy(ShardIndex shard);
  void count_copies(const core::Bitfield& has);
  // The next shard to reveal to `r`: the lowest-numbered without a copy,
  // else the fewest copies (random ties); none when `r` has or was shown
  // every shard.
  std::optional<ShardIndex> next_for(const Requester& r) const;

  std::uint32_t shard_count_;
  std::size_t reveal_ahead_;
  Duration stall_timeout_;
  Duration min_lapse_;
  PiecePicker copies_;               // availability = copies among requesters
  core::Bitfield uncopied_;          // shards with no copy; invariant: bit s == (copies_.availability(s) == 0)
  core::Bitfield everything_;        // the seed holds every shard
  std::vector<std::uint32_t> held_;  // per shard: requesters holding it
  std::uint32_t unheld_;
  std::size_t total_pending_ = 0;    // invariant: the sum of the requesters' pending
  TimePoint last_progress_{};        // a first copy revealed or completed
  // Smoothed gap between a requester's completions of revealed shards,
  // divided by the requesters sharing the uplink then; 0: none seen.
  Duration uplink_gap_{0};
  std::size_t sharing_ = 0;          // invariant: the requesters for which shares_uplink holds
  std::map<PeerId, Requester> requesters_;
};

}  // namespace tensorhub::swarm
