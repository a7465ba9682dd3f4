#include "sim/simgrid_network.hpp"

#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u/Activity.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

namespace sg4 = simgrid::s4u;

namespace tensorhub::sim {
namespace {

double seconds_of(TimePoint t) { return to_seconds(t); }
TimePoint time_of(double seconds) { return TimePoint(Duration(std::llround(seconds * 1e6))); }

}  // namespace

bool simgrid_available() { return true; }

struct SimgridNetwork::Impl {
  struct Flow {
    sg4::CommPtr comm;
    std::vector<LinkId> path;
    std::uint64_t bytes = 0;
  };

  std::unique_ptr<sg4::Engine> engine;
  sg4::NetZone* zone = nullptr;
  std::vector<sg4::Link*> links;
  std::vector<LinkClass> classes;
  std::vector<double> capacity;
  std::vector<sg4::Host*> hosts;
  std::unordered_map<std::uint64_t, Flow> flows;
  std::unordered_map<const sg4::Activity*, std::uint64_t> flow_of;
  std::vector<sg4::CommPtr> retired;  // completed: released only after their callback has returned
  std::array<double, kLinkClasses> bytes{};
  std::uint64_t next_flow = 1;
  std::uint64_t completions = 0;
  FlowDriver* driver = nullptr;
  simgrid::kernel::timer::Timer* timer = nullptr;
  TimePoint timer_at = kTimeNever;
  bool stopped = false;

  void count(const Flow& flow, double carried) {
    for (LinkId l : flow.path) bytes[static_cast<std::size_t>(classes[l.value])] += carried;
  }

  // The driver's next event gets a timer (one at a time: the earliest).
  void arm() {
    if (stopped || driver == nullptr) return;
    const TimePoint next = driver->next_event();
    if (next >= timer_at) return;
    if (timer != nullptr) timer->remove();
    timer_at = next;
    timer = simgrid::kernel::timer::Timer::set(seconds_of(next), [this] {
      timer = nullptr;
      timer_at = kTimeNever;
      if (stopped) return;
      driver->run_events_due(time_of(sg4::Engine::get_clock()));
      after_driver();
    });
  }

  void on_completion(const sg4::Activity& activity) {
    auto it = flow_of.find(&activity);
    if (it == flow_of.end() || stopped) return;
    const std::uint64_t id = it->second;
    flow_of.erase(it);
    auto flow = flows.find(id);
    count(flow->second, static_cast<double>(flow->second.bytes));
    retired.push_back(std::move(flow->second.comm));
    flows.erase(flow);
    ++completions;
    const FlowId done[] = {FlowId{id}};
    driver->on_flows_done(time_of(sg4::Engine::get_clock()), done);
    after_driver();
  }

  void after_driver() {
    if (driver->done()) {
      // Nothing more is wanted: stop every flow and timer, so the engine
      // runs dry and run_until returns.
      stopped = true;
      if (timer != nullptr) timer->remove();
      timer = nullptr;
      for (auto& [id, flow] : flows) {
        flow_of.erase(flow.comm.get());
        flow.comm->cancel();
      }
      return;
    }
    arm();
  }
};

SimgridNetwork::SimgridNetwork(const std::string& model) : impl_(std::make_unique<Impl>()) {
  std::vector<std::string> args = {"tensorhub-sim",
                                   "--cfg=network/model:" + model,
                                   "--cfg=network/optim:Full",
                                   "--cfg=network/crosstraffic:0",
                                   "--log=root.thresh:critical"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  impl_->engine = std::make_unique<sg4::Engine>(&argc, argv.data());
  impl_->zone = sg4::create_full_zone("cluster");
  sg4::Activity::on_completion_cb([impl = impl_.get()](const sg4::Activity& a) { impl->on_completion(a); });
}

SimgridNetwork::~SimgridNetwork() = default;

LinkId SimgridNetwork::add_link(double bytes_per_second, LinkClass link_class) {
  const auto id = static_cast<std::uint32_t>(impl_->links.size());
  sg4::Link* link = impl_->zone->create_link("l" + std::to_string(id), bytes_per_second);
  link->set_latency(0);
  link->seal();
  impl_->links.push_back(link);
  impl_->classes.push_back(link_class);
  impl_->capacity.push_back(bytes_per_second);
  return LinkId{id};
}

void SimgridNetwork::seal(std::uint32_t nodes,
                          const std::function<std::vector<LinkId>(std::uint32_t, std::uint32_t)>& path) {
  for (std::uint32_t n = 0; n < nodes; ++n) {
    impl_->hosts.push_back(impl_->zone->create_host("n" + std::to_string(n), 1e9));
    impl_->hosts.back()->seal();
  }
  for (std::uint32_t a = 0; a < nodes; ++a) {
    for (std::uint32_t b = 0; b < nodes; ++b) {
      std::vector<sg4::LinkInRoute> route;
      for (LinkId l : path(a, b)) route.emplace_back(impl_->links[l.value]);
      impl_->zone->add_route(impl_->hosts[a]->get_netpoint(), impl_->hosts[b]->get_netpoint(), nullptr, nullptr, route,
                             /*symmetrical=*/false);
    }
  }
  impl_->zone->seal();
}

FlowId SimgridNetwork::start_flow(TimePoint, std::uint32_t from, std::uint32_t to, std::span<const LinkId> path,
                                  std::uint64_t bytes) {
  const std::uint64_t id = impl_->next_flow++;
  Impl::Flow flow;
  flow.path.assign(path.begin(), path.end());
  flow.bytes = bytes;
  flow.comm = sg4::Comm::sendto_async(impl_->hosts[from], impl_->hosts[to], bytes);
  impl_->flow_of[flow.comm.get()] = id;
  impl_->flows.emplace(id, std::move(flow));
  return FlowId{id};
}

void SimgridNetwork::cancel_flow(TimePoint, FlowId flow_id) {
  auto it = impl_->flows.find(flow_id.value);
  if (it == impl_->flows.end()) return;
  Impl::Flow& flow = it->second;
  impl_->count(flow, static_cast<double>(flow.bytes) - flow.comm->get_remaining());
  impl_->flow_of.erase(flow.comm.get());
  flow.comm->cancel();
  impl_->retired.push_back(std::move(flow.comm));
  impl_->flows.erase(it);
}

void SimgridNetwork::set_link_rate(TimePoint, LinkId link, double fraction) {
  // SimGrid takes no zero bandwidth; a billionth stalls a flow as well.
  impl_->links[link.value]->set_bandwidth(impl_->capacity[link.value] * std::max(fraction, 1e-9));
}

RunEnd SimgridNetwork::run(FlowDriver& driver, TimePoint limit) {
  impl_->driver = &driver;
  impl_->arm();
  impl_->engine->run_until(seconds_of(limit));
  const TimePoint end = time_of(sg4::Engine::get_clock());
  const bool pending = !impl_->flows.empty() || driver.next_event() != kTimeNever;
  impl_->driver = nullptr;
  return RunEnd{end, !driver.done() && pending};
}

std::uint64_t SimgridNetwork::bytes_carried(LinkClass link_class) const {
  return static_cast<std::uint64_t>(std::llround(impl_->bytes[static_cast<std::size_t>(link_class)]));
}

std::size_t SimgridNetwork::flows_in_progress() const { return impl_->flows.size(); }
std::uint64_t SimgridNetwork::work() const { return impl_->completions; }

}  // namespace tensorhub::sim
