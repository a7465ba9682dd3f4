// What the simulator asks of a network: links with a capacity, flows of
// bytes along a path of links, and when each flow completes.
//
// A model does no I/O and reads no clock: time is an input, as for the
// sans-I/O cores. Two implementations: FluidNetwork (ours, incremental
// max-min, for scale) and SimgridNetwork (SimGrid's validated models, the
// reference), where SimGrid is installed.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/time.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::sim {

struct LinkTag {};
struct FlowTag {};
using LinkId = StrongIndex<LinkTag>;
using FlowId = StrongIndex<FlowTag, std::uint64_t>;

// What a link stands for. The report counts bytes per class on the
// sending direction only (NIC up, ToR up), so each byte counts once per class.
enum class LinkClass : std::uint8_t { kNvlink, kNicUp, kNicDown, kTorUp, kTorDown, kWan };
inline constexpr std::size_t kLinkClasses = 6;
std::string_view link_class_name(LinkClass c);

// The side of a run that is not the network: the driver's own events
// (messages, timers) and what happens when flows complete. A model owns the
// clock of a run and calls these in time order.
class FlowDriver {
 public:
  virtual ~FlowDriver() = default;
  // The driver's earliest pending event, or kTimeNever.
  virtual TimePoint next_event() const = 0;
  // Runs every event due by `now` (the model's clock is there).
  virtual void run_events_due(TimePoint now) = 0;
  virtual void on_flows_done(TimePoint now, std::span<const FlowId> flows) = 0;
  virtual bool done() const = 0;
};

struct RunEnd {
  TimePoint at;
  bool hit_limit = false;
};

class NetworkModel {
 public:
  virtual ~NetworkModel() = default;

  // Building the platform: links first, then seal() with every node pair's
  // path. REQUIRES: add_link only before seal(), flows only after.
  virtual LinkId add_link(double bytes_per_second, LinkClass link_class) = 0;
  virtual void seal(std::uint32_t nodes, const std::function<std::vector<LinkId>(std::uint32_t, std::uint32_t)>& path) = 0;

  // A flow of `bytes` from node `from` to node `to` across `path` (the
  // links seal() was given for that pair), starting at `now`.
  // REQUIRES: bytes > 0, now is the current time of the run.
  virtual FlowId start_flow(TimePoint now, std::uint32_t from, std::uint32_t to, std::span<const LinkId> path,
                            std::uint64_t bytes) = 0;
  // Stops a flow (its peer crashed); its bytes so far stay counted.
  virtual void cancel_flow(TimePoint now, FlowId flow) = 0;
  // Runs the link at `fraction` of its capacity from `now`: 1 as built, 0
  // down (its flows stall until it is back), in between slow.
  // REQUIRES: 0 <= fraction <= 1.
  virtual void set_link_rate(TimePoint now, LinkId link, double fraction) = 0;

  // Runs `driver` and the flows it starts, in time order, until
  // driver.done(), nothing is left to happen, or the next thing is past `limit`.
  virtual RunEnd run(FlowDriver& driver, TimePoint limit) = 0;

  // Bytes carried so far by links of each class.
  virtual std::uint64_t bytes_carried(LinkClass link_class) const = 0;
  virtual std::size_t flows_in_progress() const = 0;
  // Model-specific work counter (e.g. flow rate updates), for the report.
  virtual std::uint64_t work() const = 0;
  virtual std::string_view name() const = 0;
};

}  // namespace tensorhub::sim
