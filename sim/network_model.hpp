// What the simulator asks of a network: links with a capacity, flows of
// bytes along a path of links, and when each flow completes.
//
// A model does no I/O and reads no clock: time is an input, as for the
// sans-I/O cores. Two implementations: FluidNetwork (ours, incremental
// max-min, for scale) and the SimGrid one (the reference; not built yet).
#pragma once

#include <cstdint>
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

class NetworkModel {
 public:
  virtual ~NetworkModel() = default;

  // REQUIRES: no flow started yet. Capacity in bytes per second.
  virtual LinkId add_link(double bytes_per_second, LinkClass link_class) = 0;
  // A flow of `bytes` across every link of `path`, starting at `now`.
  // REQUIRES: bytes > 0, path non-empty, now >= the last time given.
  virtual FlowId start_flow(TimePoint now, std::span<const LinkId> path, std::uint64_t bytes) = 0;
  // Stops a flow (its peer crashed); its bytes so far stay counted.
  virtual void cancel_flow(TimePoint now, FlowId flow) = 0;
  // A link down carries nothing; its flows stall until it is up again.
  virtual void set_link_up(TimePoint now, LinkId link, bool up) = 0;

  // The earliest completion of a flow in progress, or kTimeNever.
  virtual TimePoint next_completion() const = 0;
  // Advances to `now` and appends the flows complete by then, in completion
  // order. REQUIRES: now <= next_completion() unless collecting it.
  virtual void advance(TimePoint now, std::vector<FlowId>& completed) = 0;

  // Bytes carried so far by links of each class (as of the last call).
  virtual std::uint64_t bytes_carried(LinkClass link_class) const = 0;
  virtual std::size_t flows_in_progress() const = 0;
  // Model-specific work counter (e.g. flow rate updates), for the report.
  virtual std::uint64_t work() const = 0;
};

}  // namespace tensorhub::sim
