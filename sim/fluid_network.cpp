#include "sim/fluid_network.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
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

FlowId FluidNetwork::start_flow(TimePoint now, std::span<const LinkId> path, std::uint64_t bytes) {
  assert(bytes > 0 && !path.empty() && path.size() <= kMaxPath);
  const std::uint64_t id = next_flow_++;
  Flow& flow = flows_[id];
  flow.hops = static_cast<std::uint8_t>(path.size());
  std::copy(path.begin(), path.end(), flow.path.begin());
  flow.remaining = static_cast<double>(bytes);
  flow.updated = now;
  for (LinkId l : path) links_[l.value].flows.push_back(id);
  solve(path, now);
  return FlowId{id};
}

void FluidNetwork::settle(Flow& flow, TimePoint now) {
  if (now <= flow.updated) return;
  const double moved = std::min(flow.remaining, flow.rate * to_seconds(now - flow.updated));
  flow.remaining -= moved;
  for (std::size_t h = 0; h < flow.hops; ++h) links_[flow.path[h].value].bytes += moved;
  flow.updated = now;
}

void FluidNetwork::remove_from_links(std::uint64_t id, const Flow& flow) {
  for (std::size_t h = 0; h < flow.hops; ++h) {
    auto& list = links_[flow.path[h].value].flows;
    auto it = std::find(list.begin(), list.end(), id);
    assert(it != list.end());
    *it = list.back();
    list.pop_back();
  }
}

void FluidNetwork::cancel_flow(TimePoint now, FlowId flow_id) {
  auto it = flows_.find(flow_id.value);
  if (it == flows_.end()) return;
  settle(it->second, now);
  const Flow flow = it->second;
  remove_from_links(flow_id.value, flow);
  flows_.erase(it);
  solve(std::span(flow.path.data(), flow.hops), now);
}

void FluidNetwork::set_link_up(TimePoint now, LinkId link, bool up) {
  if (links_[link.value].up == up) return;
  // Flows crossing it move at their old rates until now.
  for (std::uint64_t id : links_[link.value].flows) settle(flows_.at(id), now);
  links_[link.value].up = up;
  const LinkId seeds[] = {link};
  solve(seeds, now);
}

void FluidNetwork::solve(std::span<const LinkId> seeds, TimePoint now) {
  // 1. The component: links and flows reachable from the seeds.
  ++epoch_;
  component_links_.clear();
  component_flows_.clear();
  for (LinkId l : seeds) {
    if (links_[l.value].epoch != epoch_) {
      links_[l.value].epoch = epoch_;
      component_links_.push_back(l);
    }
  }
  for (std::size_t i = 0; i < component_links_.size(); ++i) {
    for (std::uint64_t id : links_[component_links_[i].value].flows) {
      Flow& flow = flows_.at(id);
      if (flow.epoch == epoch_) continue;
      flow.epoch = epoch_;
      component_flows_.push_back(id);
      for (std::size_t h = 0; h < flow.hops; ++h) {
        Link& link = links_[flow.path[h].value];
        if (link.epoch != epoch_) {
          link.epoch = epoch_;
          component_links_.push_back(flow.path[h]);
        }
      }
    }
  }
  // 2. Bytes moved at the old rates until now.
  for (std::uint64_t id : component_flows_) {
    Flow& flow = flows_.at(id);
    settle(flow, now);
    flow.fixed = false;
  }
  // 3. Progressive filling: the link with the smallest fair share fixes its
  // flows at that share; repeat with what is left.
  struct Share {
    double share;
    std::uint32_t link;
    std::uint32_t version;
    bool operator>(const Share& o) const { return share != o.share ? share > o.share : link > o.link; }
  };
  std::priority_queue<Share, std::vector<Share>, std::greater<>> shares;
  for (LinkId l : component_links_) {
    Link& link = links_[l.value];
    link.capacity_left = link.up ? link.capacity : 0;
    link.unfixed = static_cast<std::uint32_t>(link.flows.size());
    ++link.heap_version;
    if (link.unfixed > 0) shares.push(Share{link.capacity_left / link.unfixed, l.value, link.heap_version});
  }
  while (!shares.empty()) {
    const Share top = shares.top();
    shares.pop();
    Link& bottleneck = links_[top.link];
    if (top.version != bottleneck.heap_version || bottleneck.unfixed == 0) continue;
    const double share = std::max(0.0, bottleneck.capacity_left / bottleneck.unfixed);
    for (std::uint64_t id : bottleneck.flows) {
      Flow& flow = flows_.at(id);
      if (flow.fixed) continue;
      flow.fixed = true;
      flow.rate = share;
      ++rate_updates_;
      for (std::size_t h = 0; h < flow.hops; ++h) {
        Link& link = links_[flow.path[h].value];
        link.capacity_left -= share;
        --link.unfixed;
        ++link.heap_version;
        if (&link != &bottleneck && link.unfixed > 0) {
          shares.push(Share{std::max(0.0, link.capacity_left) / link.unfixed, flow.path[h].value, link.heap_version});
        }
      }
    }
  }
  // 4. New completion times.
  for (std::uint64_t id : component_flows_) {
    Flow& flow = flows_.at(id);
    ++flow.generation;
    if (flow.rate <= 0) continue;  // stalled behind a link that is down
    // Rounded up to the clock's microsecond, so a flow is done when collected.
    const double seconds = flow.remaining / flow.rate;
    const auto micros = static_cast<std::int64_t>(std::ceil(seconds * 1e6));
    completions_.push(Completion{now + Duration(micros), id, flow.generation});
  }
#ifdef TENSORHUB_DEBUG_INVARIANTS
  check_invariants();
#endif
}

void FluidNetwork::drop_stale_completions() const {
  while (!completions_.empty()) {
    const Completion& c = completions_.top();
    auto it = flows_.find(c.flow);
    if (it != flows_.end() && it->second.generation == c.generation) return;
    completions_.pop();
  }
}

TimePoint FluidNetwork::next_completion() const {
  drop_stale_completions();
  return completions_.empty() ? kTimeNever : completions_.top().at;
}

void FluidNetwork::advance(TimePoint now, std::vector<FlowId>& completed) {
  std::vector<LinkId> seeds;
  for (drop_stale_completions(); !completions_.empty() && completions_.top().at <= now; drop_stale_completions()) {
    const std::uint64_t id = completions_.top().flow;
    completions_.pop();
    Flow& flow = flows_.at(id);
    settle(flow, now);
    // Whatever rounding left is carried too: the flow is complete.
    for (std::size_t h = 0; h < flow.hops; ++h) links_[flow.path[h].value].bytes += flow.remaining;
    remove_from_links(id, flow);
    seeds.insert(seeds.end(), flow.path.begin(), flow.path.begin() + flow.hops);
    flows_.erase(id);
    completed.push_back(FlowId{id});
  }
  if (!seeds.empty()) solve(seeds, now);
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
  auto it = flows_.find(flow.value);
  return it == flows_.end() ? 0 : it->second.rate;
}

void FluidNetwork::check_invariants() const {
  for (std::size_t l = 0; l < links_.size(); ++l) {
    double sum = 0;
    for (std::uint64_t id : links_[l].flows) {
      const Flow& flow = flows_.at(id);
      bool crosses = false;
      for (std::size_t h = 0; h < flow.hops; ++h) crosses |= flow.path[h].value == l;
      if (!crosses) throw std::logic_error("fluid network: a link lists a flow that does not cross it");
      sum += flow.rate;
    }
    const double limit = links_[l].up ? links_[l].capacity : 0;
    if (sum > limit * (1 + 1e-9) + 1e-6) throw std::logic_error("fluid network: a link is over its capacity");
  }
}

}  // namespace tensorhub::sim
