#include <doctest/doctest.h>

#include <filesystem>

#include "cuda/gpu_memory.hpp"
#include "cuda/rdma_registration.hpp"
#include "support/temp_dir.hpp"
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
    CHECK(cuda::is_gpu_uuid(d.uuid));
    CHECK_FALSE(d.rdma_registration.empty());
  }
}

TEST_CASE("devices: the RDMA registration of GPU memory is the first rung the machine offers") {
  CHECK(cuda::choose_rdma_registration(true, true) == "dma-buf");
  CHECK(cuda::choose_rdma_registration(true, false) == "dma-buf");
  CHECK(cuda::choose_rdma_registration(false, true) == "peermem");
  CHECK(cuda::choose_rdma_registration(false, false) == "staging");
  // nvidia_peermem, looked for in a sysfs tree of the test's own.
  testing::TempDir sys;
  CHECK_FALSE(cuda::peermem_loaded(sys.path().string()));
  std::filesystem::create_directories(sys.path() / "module" / "nvidia_peermem");
  CHECK(cuda::peermem_loaded(sys.path().string()));
}

TEST_CASE("devices: a GPU's UUID is written as nvidia-smi -L writes it, and only that form names a GPU") {
  std::array<unsigned char, 16> bytes{};
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<unsigned char>(0x10 * (i % 16) + i);
  const std::string text = cuda::gpu_uuid_text(bytes);
  CHECK(text == "GPU-00112233-4455-6677-8899-aabbccddeeff");
  CHECK(cuda::is_gpu_uuid(text));
  CHECK(cuda::is_gpu_uuid("GPU-8B2C3A10-1F2E-4D3C-9A8B-7C6D5E4F3A2B"));
  for (const char* bad : {"", "GPU-", "cuda:0", "0", "GPU-00112233-4455-6677-8899-aabbccddeef",
                          "GPU-00112233-4455-6677-8899-aabbccddeeff0", "GPU-00112233_4455-6677-8899-aabbccddeeff",
                          "MIG-00112233-4455-6677-8899-aabbccddeeff", "GPU-0011223g-4455-6677-8899-aabbccddeeff"}) {
    CHECK_MESSAGE(!cuda::is_gpu_uuid(bad), bad);
  }
  std::unique_ptr<cuda::GpuMemory> gpu;
  CHECK(cuda::GpuMemory::open("cuda:0", 1u << 20, gpu).code() == StatusCode::kInvalidArgument);
  CHECK(gpu == nullptr);
}
