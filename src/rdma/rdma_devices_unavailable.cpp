// list_rdma_devices() for builds without TENSORHUB_RDMA.
#include "tensorhub/devices.hpp"

namespace tensorhub {

RdmaDevices list_rdma_devices() {
  RdmaDevices out;
  out.note = "built without RDMA support (TENSORHUB_RDMA=OFF or libibverbs missing)";
  return out;
}

}  // namespace tensorhub
