#include <cuda_runtime_api.h>

#include <array>
#include <cstdio>
#include <cstring>

#include "cuda/cuda_sharing.hpp"
#include "cuda/rdma_registration.hpp"
#include "tensorhub/devices.hpp"

namespace tensorhub {
namespace cuda {

// CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (124), asked of the driver through
// the runtime's entry-point lookup, so nothing links libcuda itself.
bool dma_buf_supported(int ordinal) {
  using GetAttribute = int (*)(int*, int, int);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr) {
    return false;
  }
  int value = 0;
  return reinterpret_cast<GetAttribute>(fn)(&value, 124, ordinal) == 0 && value != 0;
}

}  // namespace cuda

CudaDevices list_cuda_devices() {
  CudaDevices out;
  out.built = true;
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    out.note = std::string("no usable CUDA device: ") + cudaGetErrorString(error);
    return out;
  }
  const bool peermem = cuda::peermem_loaded();
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    CudaDeviceInfo d;
    d.index = i;
    d.name = prop.name;
    std::array<unsigned char, 16> uuid;
    std::memcpy(uuid.data(), prop.uuid.bytes, 16);
    d.uuid = cuda::gpu_uuid_text(uuid);
    d.total_memory = prop.totalGlobalMem;
    d.compute_major = prop.major;
    d.compute_minor = prop.minor;
    // As sysfs names it (domain of 4 hex digits): where it sits on the PCIe tree.
    char bus_id[32];
    std::snprintf(bus_id, sizeof bus_id, "%04x:%02x:%02x.0", static_cast<unsigned>(prop.pciDomainID) & 0xffff,
                  static_cast<unsigned>(prop.pciBusID) & 0xff, static_cast<unsigned>(prop.pciDeviceID) & 0xff);
    d.pci_bus_id = bus_id;
    int rdma = 0;
    d.gpudirect_rdma = cudaDeviceGetAttribute(&rdma, cudaDevAttrGPUDirectRDMASupported, i) == cudaSuccess && rdma != 0;
    d.dma_buf = cuda::dma_buf_supported(i);
    d.peermem = peermem;
    d.rdma_registration = std::string(cuda::choose_rdma_registration(d.dma_buf, d.peermem));
    out.devices.push_back(std::move(d));
  }
  if (out.devices.empty()) out.note = "no CUDA device on this machine";
  return out;
}

}  // namespace tensorhub
