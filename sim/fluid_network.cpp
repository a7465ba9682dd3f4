#include "sim/fluid_network.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <queue>
#include <stdexcept>

namespace tensorhub::sim {

std::string_view link_class_name(LinkClass c) {
  switch (c) {
    case LinkClass::kNvlink: return "nvlink";
    case LinkClass::kNicUp: return "nic";
    case LinkClass::kNicDown: return "nic_down";
    case LinkClass::kTorUp: return "tor_uplink";
    case LinkClass::kTorDown: return "tor_downlink";
    case LinkClass::kWan: return "wan";
  }
  return "?";
}

LinkId FluidNetwork::add_link(double bytes_per_second, LinkClass link_class) {
  if (!(bytes_per_second > 0)) throw std::invalid_argument("a link's capacity must be positive");
  Link link;
  link.capacity = bytes_per_second;
  link.link_class = link_class;
  links_.push_back(std::move(link));
  return LinkId{static_cast<std::uint32_t>(links_.size() - 1)};
}

FluidNetwork::Flow* FluidNetwork::find(FlowId id) {
  return const_cast<Flow*>(static_cast<const FluidNetwork*>(this)->find(id));
}

const FluidNetwork::Flow* FluidNetwork::find(FlowId id) const {
  const auto slot = static_cast<std::uint32_t>(id.value & 0xffffffffu);
  if (slot >= flows_.size()) return nullptr;
  const Flow& flow = flows_[slot];
  return flow.live && flow.serial == id.value >> 32 ? &flow : nullptr;
}

FlowId FluidNetwork::start_flow(TimePoint now, std::span<const LinkId> path, std::uint64_t bytes) {
  assert(bytes > 0 && !path.empty() && path.size() <= kMaxPath);
  std::uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<std::uint32_t>(flows_.size());
    flows_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  Flow& flow = flows_[slot];
  flow = Flow{};
  flow.live = true;
  flow.serial = next_serial_++;
  flow.hops = static_cast<std::uint8_t>(path.size());
  std::copy(path.begin(), path.end(), flow.path.begin());
  flow.remaining = static_cast<double>(bytes);
  flow.updated = now;
  ++live_flows_;
  for (LinkId l : path) links_[l.value].flows.push_back(slot);
  const FlowId id = id_of(slot);
  solve(path, now);
  return id;
}

void FluidNetwork::release(std::uint32_t slot) {
  heap_remove(slot);
  flows_[slot].live = false;
  free_slots_.push_back(slot);
  --live_flows_;
}

void FluidNetwork::settle(Flow& flow, TimePoint now) {
  if (now <= flow.updated) return;
  const double moved = std::min(flow.remaining, flow.rate * to_seconds(now - flow.updated));
  flow.remaining -= moved;
  for (std::size_t h = 0; h < flow.hops; ++h) links_[flow.path[h].value].bytes += moved;
  flow.updated = now;
}

void FluidNetwork::remove_from_links(std::uint32_t slot, const Flow& flow) {
  if (flow.bottleneck != kNoLink) --links_[flow.bottleneck.value].limited;
  for (std::size_t h = 0; h < flow.hops; ++h) {
    auto& list = links_[flow.path[h].value].flows;
    auto it = std::find(list.begin(), list.end(), slot);
    assert(it != list.end());
    *it = list.back();
    list.pop_back();
  }
}

void FluidNetwork::cancel_flow(TimePoint now, FlowId flow_id) {
  Flow* found = find(flow_id);
  if (!found) return;
  const auto slot = static_cast<std::uint32_t>(flow_id.value & 0xffffffffu);
  settle(*found, now);
  const Flow flow = *found;
  remove_from_links(slot, flow);
  release(slot);
  solve(std::span(flow.path.data(), flow.hops), now);
}

void FluidNetwork::set_link_rate(TimePoint now, LinkId link, double fraction) {
  if (!(fraction >= 0 && fraction <= 1)) throw std::invalid_argument("a link's rate fraction must be in [0, 1]");
  if (links_[link.value].fraction == fraction) return;
  // Flows crossing it move at their old rates until now.
  for (std::uint32_t slot : links_[link.value].flows) settle(flows_[slot], now);
  links_[link.value].fraction = fraction;
  const LinkId seeds[] = {link};
  solve(seeds, now);
}

// --------------------------------------------------------------------------
// The completion heap

void FluidNetwork::heap_place(std::size_t pos, const Completion& c) {
  heap_[pos] = c;
  flows_[c.slot].heap_pos = static_cast<std::uint32_t>(pos);
}

void FluidNetwork::heap_up(std::size_t pos) {
  const Completion c = heap_[pos];
  while (pos > 0) {
    const std::size_t parent = (pos - 1) / 2;
    if (!c.before(heap_[parent])) break;
    heap_place(pos, heap_[parent]);
    pos = parent;
  }
  heap_place(pos, c);
}

void FluidNetwork::heap_down(std::size_t pos) {
  const Completion c = heap_[pos];
  const std::size_t n = heap_.size();
  for (;;) {
    std::size_t child = 2 * pos + 1;
    if (child >= n) break;
    if (child + 1 < n && heap_[child + 1].before(heap_[child])) ++child;
    if (!heap_[child].before(c)) break;
    heap_place(pos, heap_[child]);
    pos = child;
  }
  heap_place(pos, c);
}

void FluidNetwork::heap_set(std::uint32_t slot, TimePoint at) {
  Flow& flow = flows_[slot];
  const Completion c{at, flow.serial, slot};
  if (flow.heap_pos == kNotInHeap) {
    heap_.push_back(c);
    flow.heap_pos = static_cast<std::uint32_t>(heap_.size() - 1);
    heap_up(flow.heap_pos);
    return;
  }
  const std::size_t pos = flow.heap_pos;
  const bool earlier = c.before(heap_[pos]);
  heap_[pos] = c;
  if (earlier) {
    heap_up(pos);
  } else {
    heap_down(pos);
  }
}

void FluidNetwork::heap_remove(std::uint32_t slot) {
  Flow& flow = flows_[slot];
  if (flow.heap_pos == kNotInHeap) return;
  const std::size_t pos = flow.heap_pos;
  flow.heap_pos = kNotInHeap;
  const Completion last = heap_.back();
  heap_.pop_back();
  if (pos == heap_.size()) return;
  heap_place(pos, last);
  heap_up(pos);
  heap_down(flows_[last.slot].heap_pos);
}

void FluidNetwork::add_link_to_region(LinkId l) {
  Link& link = links_[l.value];
  if (link.epoch == epoch_) return;
  link.epoch = epoch_;
  region_links_.push_back(l);
  // Once per solve, not per fill: what the frozen flows take stays the same
  // while the region grows, but for the flows that join it (add_to_region).
  link.frozen_rate = 0;
  link.region_flows.clear();
  for (std::uint32_t slot : link.flows) {
    const Flow& flow = flows_[slot];
    if (flow.epoch == epoch_) {
      link.region_flows.push_back(slot);
    } else {
      link.frozen_rate += flow.rate;
    }
  }
}

void FluidNetwork::add_to_region(std::uint32_t slot, TimePoint now) {
  Flow& flow = flows_[slot];
  if (flow.epoch == epoch_) return;
  flow.epoch = epoch_;
  settle(flow, now);  // its bytes so far, at the old rate
  region_flows_.push_back(slot);
  for (std::size_t h = 0; h < flow.hops; ++h) {
    Link& link = links_[flow.path[h].value];
    if (link.epoch != epoch_) {
      add_link_to_region(flow.path[h]);  // its scan finds this flow in the region
    } else {
      link.frozen_rate -= flow.rate;  // its frozen rate, counted when the link joined
      link.region_flows.push_back(slot);
    }
  }
}

void FluidNetwork::fill_region() {
  // Links give the region what the flows outside it (frozen) leave.
  struct Share {
    double share;
    std::uint32_t link;
    std::uint32_t version;
    bool operator>(const Share& o) const { return share != o.share ? share > o.share : link > o.link; }
  };
  std::priority_queue<Share, std::vector<Share>, std::greater<>> shares;
  for (LinkId l : region_links_) {
    Link& link = links_[l.value];
    link.capacity_left = link.rate() - link.frozen_rate;
    link.unfixed = static_cast<std::uint32_t>(link.region_flows.size());
    link.fill_share = kNoShare;
    link.fixed_here = 0;
    ++link.heap_version;
    if (link.unfixed > 0) shares.push(Share{std::max(0.0, link.capacity_left) / link.unfixed, l.value, link.heap_version});
  }
  for (std::uint32_t slot : region_flows_) flows_[slot].fixed = false;
  // Progressive filling: the link with the smallest fair share fixes its
  // region flows at that share; repeat with what is left. Fixing flows at
  // the smallest share never lowers another link's share ((c - s) / (n - 1)
  // >= c / n when s <= c / n), so a link's entry is refreshed only when it
  // comes up: a stale key is a lower bound, and a fresh top is the true
  // minimum. So a link is pushed again only when its stale entry comes up,
  // not at every flow fixed across it.
  while (!shares.empty()) {
    const Share top = shares.top();
    shares.pop();
    Link& bottleneck = links_[top.link];
    if (bottleneck.unfixed == 0) continue;
    if (top.version != bottleneck.heap_version) {
      shares.push(Share{std::max(0.0, bottleneck.capacity_left) / bottleneck.unfixed, top.link, bottleneck.heap_version});
      continue;
    }
    const double share = std::max(0.0, bottleneck.capacity_left / bottleneck.unfixed);
    bottleneck.fill_share = share;
    for (std::uint32_t slot : bottleneck.region_flows) {
      Flow& flow = flows_[slot];
      if (flow.fixed) continue;
      flow.fixed = true;
      flow.rate = share;
      if (flow.bottleneck != kNoLink) --links_[flow.bottleneck.value].limited;
      flow.bottleneck = LinkId{top.link};
      ++bottleneck.limited;
      ++bottleneck.fixed_here;
      ++rate_updates_;
      for (std::size_t h = 0; h < flow.hops; ++h) {
        Link& link = links_[flow.path[h].value];
        link.capacity_left -= share;
        --link.unfixed;
        ++link.heap_version;  // its entry is stale now
      }
    }
  }
}

bool FluidNetwork::grow_region(TimePoint now) {
  // A frozen flow must join the region when the region's new rates would
  // leave it out of max-min: its own bottleneck has capacity to spare, a
  // link is over capacity, or it takes more of a link than the region flows
  // that link limits.
  constexpr double kSlack = 1e-9;
  const std::size_t before = region_flows_.size();
  for (std::size_t i = 0, n = region_links_.size(); i < n; ++i) {
    const LinkId l = region_links_[i];
    const Link& link = links_[l.value];
    const double capacity = link.rate();
    const bool spare = link.capacity_left > kSlack * link.capacity + 1e-6;
    const bool over = link.capacity_left < -(kSlack * link.capacity + 1e-6);
    // Most region links need no look at their flows: not over, not a
    // bottleneck of this fill, and no frozen flow limited here to take the
    // spare. Skipping them keeps the scan to the links that can change.
    const bool frozen_limited_here = link.limited > link.fixed_here;
    if (!over && capacity != 0 && link.fill_share == kNoShare && !(spare && frozen_limited_here)) continue;
    for (std::size_t f = 0; f < link.flows.size(); ++f) {
      const std::uint32_t slot = link.flows[f];
      const Flow& flow = flows_[slot];
      if (flow.epoch == epoch_) continue;
      const bool limited_here = flow.bottleneck == l;
      const bool above_share = link.fill_share != kNoShare && flow.rate > link.fill_share * (1 + kSlack) + 1e-6;
      // Limited here, yet below what this link now gives the region's flows.
      const bool below_share =
          limited_here && link.fill_share != kNoShare && flow.rate < link.fill_share * (1 - kSlack) - 1e-6;
      if (over || (spare && limited_here) || above_share || below_share || capacity == 0) add_to_region(slot, now);
    }
  }
  return region_flows_.size() != before;
}

void FluidNetwork::solve(std::span<const LinkId> seeds, TimePoint now) {
  // The region starts with the flows on the links the change touched, and
  // grows only while its new rates would break max-min for a flow outside.
  // In the worst case it becomes the whole connected component (the exact
  // solution); in a swarm, a few rings of flows around the change.
  ++epoch_;
  region_links_.clear();
  region_flows_.clear();
  for (LinkId l : seeds) add_link_to_region(l);
  // A new flow (limited nowhere yet) starts it; the flows on the touched
  // links join as the fill says: those limited by a link that now has
  // capacity to spare, those above a new share.
  for (std::size_t i = 0, n = region_links_.size(); i < n; ++i) {
    const auto& on_link = links_[region_links_[i].value].flows;
    for (std::size_t f = 0; f < on_link.size(); ++f) {
      if (flows_[on_link[f]].bottleneck == kNoLink) add_to_region(on_link[f], now);
    }
  }
  do {
    fill_region();
  } while (grow_region(now));
  // New completion times.
  for (std::uint32_t slot : region_flows_) {
    Flow& flow = flows_[slot];
    if (flow.rate <= 0) {  // stalled behind a link that is down
      heap_remove(slot);
      continue;
    }
    // Rounded up to the clock's microsecond, so a flow is done when collected.
    const double seconds = flow.remaining / flow.rate;
    const auto micros = static_cast<std::int64_t>(std::ceil(seconds * 1e6));
    heap_set(slot, now + Duration(micros));
  }
#ifdef TENSORHUB_DEBUG_INVARIANTS
  check_invariants();
#endif
}

TimePoint FluidNetwork::next_completion() const {
  return heap_.empty() ? kTimeNever : heap_.front().at;
}

void FluidNetwork::advance(TimePoint now, std::vector<FlowId>& completed) {
  completed_paths_.clear();
  while (!heap_.empty() && heap_.front().at <= now) {
    const std::uint32_t slot = heap_.front().slot;
    Flow& flow = flows_[slot];
    settle(flow, now);
    // Whatever rounding left is carried too: the flow is complete.
    for (std::size_t h = 0; h < flow.hops; ++h) links_[flow.path[h].value].bytes += flow.remaining;
    remove_from_links(slot, flow);
    completed_paths_.insert(completed_paths_.end(), flow.path.begin(), flow.path.begin() + flow.hops);
    completed.push_back(id_of(slot));
    release(slot);
  }
  if (!completed_paths_.empty()) solve(completed_paths_, now);
}

RunEnd FluidNetwork::run(FlowDriver& driver, TimePoint limit) {
  std::vector<FlowId> completed;
  TimePoint now = kTimeZero;
  while (!driver.done()) {
    const TimePoint next_event = driver.next_event();
    const TimePoint next_flow = next_completion();
    const TimePoint next = std::min(next_event, next_flow);
    if (next == kTimeNever) break;
    if (next > limit) return RunEnd{limit, true};
    now = next;
    if (next_flow <= next_event) {
      completed.clear();
      advance(now, completed);
      driver.on_flows_done(now, completed);
    } else {
      driver.run_events_due(now);
    }
  }
  return RunEnd{now, false};
}

std::uint64_t FluidNetwork::bytes_carried(LinkClass link_class) const {
  double total = 0;
  for (const Link& link : links_) {
    if (link.link_class == link_class) total += link.bytes;
  }
  return static_cast<std::uint64_t>(std::llround(total));
}

double FluidNetwork::rate_of(FlowId flow) const {
  const Flow* f = find(flow);
  return f ? f->rate : 0;
}

void FluidNetwork::check_invariants() const {
  for (std::size_t l = 0; l < links_.size(); ++l) {
    double sum = 0;
    for (std::uint32_t slot : links_[l].flows) {
      const Flow& flow = flows_[slot];
      bool crosses = false;
      for (std::size_t h = 0; h < flow.hops; ++h) crosses |= flow.path[h].value == l;
      if (!flow.live || !crosses) throw std::logic_error("fluid network: a link lists a flow that does not cross it");
      sum += flow.rate;
    }
    const double limit = links_[l].rate();
    if (sum > limit * (1 + 1e-9) + 1e-6) throw std::logic_error("fluid network: a link is over its capacity");
  }
  std::vector<std::uint32_t> limited(links_.size(), 0);
  for (const Flow& flow : flows_) {
    if (flow.live && flow.bottleneck != kNoLink) ++limited[flow.bottleneck.value];
  }
  for (std::size_t l = 0; l < links_.size(); ++l) {
    if (limited[l] != links_[l].limited) throw std::logic_error("fluid network: a link's count of the flows it limits is wrong");
  }
  for (std::size_t pos = 0; pos < heap_.size(); ++pos) {
    if (flows_[heap_[pos].slot].heap_pos != pos) throw std::logic_error("fluid network: a heap entry lost its place");
    if (pos > 0 && heap_[pos].before(heap_[(pos - 1) / 2])) throw std::logic_error("fluid network: heap order broken");
  }
}

}  // namespace tensorhub::sim
