// Our flow-level network model: max-min fair rates, recomputed only where a
// change can reach.
//
// Every flow crosses a short path of links; its rate is its max-min fair
// share (progressive filling: the most constrained link fixes the rate of
// its flows, whose rates are then taken off the other links they cross, and
// so on). A change (a flow starts, finishes or is cancelled, a link goes
// down or up) re-solves only a region around it: the new flow, then the
// flows a fill shows to be wrong with the rest held fixed (limited by a link
// that now has capacity to spare, or below its new share; above a link's new
// share; on a link over capacity), ring by ring until none is. That is exact
// max-min (up to a relative slack of 1e-9; a test checks it against a solve
// from scratch), and in a swarm it stays a few flows, far fewer than
// re-solving each connected component would touch. Completions sit in an
// indexed heap keyed by time: a flow whose rate changed moves to its new
// place, so the heap holds one entry per moving flow and no stale ones.
// Flows live in a slot vector; a FlowId is the slot plus a serial number,
// so an id is never reused.
//
// Invariants (checked in debug builds by check_invariants()): each link's
// flow list holds exactly the flows whose path crosses it; the rates on a
// link sum to at most its capacity (or 0 when down).
#pragma once

#include <array>
#include <vector>

#include "sim/network_model.hpp"

namespace tensorhub::sim {

class FluidNetwork final : public NetworkModel {
 public:
  static constexpr std::size_t kMaxPath = 8;

  LinkId add_link(double bytes_per_second, LinkClass link_class) override;
  void seal(std::uint32_t, const std::function<std::vector<LinkId>(std::uint32_t, std::uint32_t)>&) override {}
  FlowId start_flow(TimePoint now, std::uint32_t, std::uint32_t, std::span<const LinkId> path,
                    std::uint64_t bytes) override {
    return start_flow(now, path, bytes);
  }
  void cancel_flow(TimePoint now, FlowId flow) override;
  void set_link_rate(TimePoint now, LinkId link, double fraction) override;
  RunEnd run(FlowDriver& driver, TimePoint limit) override;
  std::uint64_t bytes_carried(LinkClass link_class) const override;
  std::size_t flows_in_progress() const override { return live_flows_; }
  std::uint64_t work() const override { return rate_updates_; }
  std::string_view name() const override { return "fluid"; }

  // The model on its own (tests): flows by path, time moved by the caller.
  FlowId start_flow(TimePoint now, std::span<const LinkId> path, std::uint64_t bytes);
  // The earliest completion of a flow in progress, or kTimeNever.
  TimePoint next_completion() const;
  // Advances to `now` and appends the flows complete by then.
  // REQUIRES: nothing else happened since a time later than `now`.
  void advance(TimePoint now, std::vector<FlowId>& completed);

  // The current rate of a flow in progress (bytes per second), for tests.
  double rate_of(FlowId flow) const;
  void check_invariants() const;

 private:
  struct Link {
    double capacity = 0;
    double fraction = 1;  // of capacity it runs at now: 0 while down, below 1 while slow
    double rate() const { return capacity * fraction; }
    LinkClass link_class = LinkClass::kNicUp;
    std::vector<std::uint32_t> flows;  // slots of the flows crossing it
    double bytes = 0;                  // carried so far
    // Scratch for solve(): which solve saw it last, and what is left.
    std::uint64_t epoch = 0;
    double capacity_left = 0;
    std::uint32_t unfixed = 0;
    std::uint32_t limited = 0;     // live flows whose rate it fixed (their bottleneck)
    std::uint32_t fixed_here = 0;  // scratch: region flows the last fill fixed here
    double frozen_rate = 0;                   // taken by the flows outside the region
    std::vector<std::uint32_t> region_flows;  // the region's flows that cross it
    std::uint32_t heap_version = 0;
    double fill_share = kNoShare;  // the share it fixed in the last fill, if it was a bottleneck
  };
  struct Flow {
    std::array<LinkId, kMaxPath> path{};
    std::uint8_t hops = 0;
    bool live = false;
    bool fixed = false;       // scratch for solve()
    double remaining = 0;  // bytes, as of `updated`
    double rate = 0;       // bytes per second
    TimePoint updated;
    std::uint64_t serial = 0;  // FlowId's upper half; ties in the heap go to the older flow
    std::uint64_t epoch = 0;   // scratch for solve()
    std::uint32_t heap_pos = kNotInHeap;
    LinkId bottleneck = kNoLink;  // the link that fixed its rate
  };
  static constexpr std::uint32_t kNotInHeap = UINT32_MAX;
  static constexpr double kNoShare = -1;
  static constexpr LinkId kNoLink{UINT32_MAX};
  struct Completion {
    TimePoint at;
    std::uint64_t serial;
    std::uint32_t slot;
    bool before(const Completion& o) const { return at != o.at ? at < o.at : serial < o.serial; }
  };

  // The live flow a FlowId names, or nullptr.
  Flow* find(FlowId id);
  const Flow* find(FlowId id) const;
  FlowId id_of(std::uint32_t slot) const { return FlowId{(flows_[slot].serial << 32) | slot}; }
  void release(std::uint32_t slot);
  // Moves the flow's bytes forward to `now` at its current rate.
  void settle(Flow& flow, TimePoint now);
  void remove_from_links(std::uint32_t slot, const Flow& flow);
  // Settles and re-solves the flows around `seeds` (see solve()).
  void solve(std::span<const LinkId> seeds, TimePoint now);
  void add_to_region(std::uint32_t slot, TimePoint now);
  void add_link_to_region(LinkId link);
  // Max-min rates for the region's flows, the others' rates held fixed.
  void fill_region();
  // Adds the flows outside whose rates the last fill made wrong; false if none.
  bool grow_region(TimePoint now);
  // The indexed heap of completions.
  void heap_set(std::uint32_t slot, TimePoint at);
  void heap_remove(std::uint32_t slot);
  void heap_place(std::size_t pos, const Completion& c);
  void heap_up(std::size_t pos);
  void heap_down(std::size_t pos);

  std::vector<Link> links_;
  std::vector<Flow> flows_;                 // by slot
  std::vector<std::uint32_t> free_slots_;
  std::size_t live_flows_ = 0;
  std::uint64_t next_serial_ = 1;
  std::uint64_t epoch_ = 0;
  std::uint64_t rate_updates_ = 0;
  std::vector<Completion> heap_;  // min-heap by (at, serial); flows_[c.slot].heap_pos is c's place
  // solve() scratch, kept to avoid allocating per event.
  std::vector<LinkId> region_links_;
  std::vector<std::uint32_t> region_flows_;
  std::vector<LinkId> completed_paths_;
};

}  // namespace tensorhub::sim
