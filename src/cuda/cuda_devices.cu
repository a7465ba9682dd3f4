#include <cuda_runtime_api.h>

#include "tensorhub/devices.hpp"

namespace tensorhub {

CudaDevices list_cuda_devices() {
  CudaDevices out;
  out.built = true;
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    out.note = std::string("no usable CUDA device: ") + cudaGetErrorString(error);
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.devices.push_back(CudaDeviceInfo{i, prop.name, prop.totalGlobalMem, prop.major, prop.minor});
  }
  if (out.devices.empty()) out.note = "no CUDA device on this machine";
  return out;
}

}  // namespace tensorhub
