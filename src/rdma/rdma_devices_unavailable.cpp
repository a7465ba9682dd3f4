// list_rdma_devices() for builds without TENSORHUB_RDMA.
#include "tensorhub/devices.hpp"

namespace tensorhub {

RdmaDevices list_rdma_devices() {
  RdmaDevices out;
  out.note = "built without RDMA support (TENSORHUB_RDMA=OFF or libibverbs missing)";
  return out;
}

std::vector<std::string> nics_near_gpu(const RdmaDevices&, const std::string&, const std::string&) { return {}; }

}  // namespace tensorhub
