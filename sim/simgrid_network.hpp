// The reference network model: SimGrid's flow-level models (S4U), driven
// without an actor per peer: flows are SimGrid communications between one
// host per node, their completion callbacks feed the driver, and the
// driver's own events run from SimGrid kernel timers.
//
// Configured with network/optim:Full and network/crosstraffic:0 (3-4x
// faster than the defaults), and zero latency on every link: the driver adds
// path latencies itself, as with the fluid model, and any non-zero latency
// doubles SimGrid's cost. `model` picks SimGrid's network model: "CM02" is
// plain max-min sharing (what the fluid model computes: the agreement
// check), "LV08" adds its TCP corrections (bandwidth factor 0.97, RTT-aware
// sharing). A link taken down keeps a billionth of its bandwidth (SimGrid
// fails the flows of a link turned off; ours must stall instead).
//
// SimGrid's engine is one per process: so is this model.
#pragma once

#include <memory>
#include <string>

#include "sim/network_model.hpp"

namespace tensorhub::sim {

class SimgridNetwork final : public NetworkModel {
 public:
  explicit SimgridNetwork(const std::string& model = "CM02");
  ~SimgridNetwork() override;

  LinkId add_link(double bytes_per_second, LinkClass link_class) override;
  void seal(std::uint32_t nodes, const std::function<std::vector<LinkId>(std::uint32_t, std::uint32_t)>& path) override;
  FlowId start_flow(TimePoint now, std::uint32_t from, std::uint32_t to, std::span<const LinkId> path,
                    std::uint64_t bytes) override;
  void cancel_flow(TimePoint now, FlowId flow) override;
  void set_link_rate(TimePoint now, LinkId link, double fraction) override;
  RunEnd run(FlowDriver& driver, TimePoint limit) override;
  std::uint64_t bytes_carried(LinkClass link_class) const override;
  std::size_t flows_in_progress() const override;
  std::uint64_t work() const override;
  std::string_view name() const override { return "simgrid"; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether this build has SimGrid (the model above exists only then).
bool simgrid_available();

}  // namespace tensorhub::sim
