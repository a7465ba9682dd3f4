// Builds without SimGrid: the reference model is absent, and says so.
#include "sim/simgrid_network.hpp"

#include <stdexcept>

namespace tensorhub::sim {

bool simgrid_available() { return false; }

// Never constructed (callers check simgrid_available() first); defined so
// that the program links.
struct SimgridNetwork::Impl {};
SimgridNetwork::SimgridNetwork(const std::string&) { throw std::logic_error("this build has no SimGrid"); }
SimgridNetwork::~SimgridNetwork() = default;
LinkId SimgridNetwork::add_link(double, LinkClass) { return {}; }
void SimgridNetwork::seal(std::uint32_t, const std::function<std::vector<LinkId>(std::uint32_t, std::uint32_t)>&) {}
FlowId SimgridNetwork::start_flow(TimePoint, std::uint32_t, std::uint32_t, std::span<const LinkId>, std::uint64_t) {
  return {};
}
void SimgridNetwork::cancel_flow(TimePoint, FlowId) {}
void SimgridNetwork::set_link_rate(TimePoint, LinkId, double) {}
RunEnd SimgridNetwork::run(FlowDriver&, TimePoint) { return {}; }
std::uint64_t SimgridNetwork::bytes_carried(LinkClass) const { return 0; }
std::size_t SimgridNetwork::flows_in_progress() const { return 0; }
std::uint64_t SimgridNetwork::work() const { return 0; }

}  // namespace tensorhub::sim
