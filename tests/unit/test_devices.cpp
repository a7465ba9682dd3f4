#include <doctest/doctest.h>

#include "tensorhub/devices.hpp"

using namespace tensorhub;

TEST_CASE("devices: RDMA listing reports the build and never fails") {
  const RdmaDevices rdma = list_rdma_devices();
  CHECK(rdma.built == (TENSORHUB_TEST_HAVE_RDMA != 0));
  if (rdma.devices.empty()) {
    CHECK_FALSE(rdma.note.empty());
    MESSAGE("skipping RDMA device checks: " << rdma.note);
    return;
  }
  for (const auto& d : rdma.devices) {
    CHECK_FALSE(d.name.empty());
    CHECK(d.node_guid.size() == 16);
  }
}

TEST_CASE("devices: CUDA listing reports the build and never fails") {
  const CudaDevices cuda = list_cuda_devices();
  CHECK(cuda.built == (TENSORHUB_TEST_HAVE_CUDA != 0));
  if (cuda.devices.empty()) {
    CHECK_FALSE(cuda.note.empty());
    MESSAGE("skipping CUDA device checks: " << cuda.note);
    return;
  }
  for (const auto& d : cuda.devices) {
    CHECK(d.total_memory > 0);
    CHECK(d.compute_major >= 3);
  }
}
