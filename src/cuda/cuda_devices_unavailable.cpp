// The CUDA entry points for builds without TENSORHUB_CUDA.
#include "cuda/device_api.hpp"
#include "tensorhub/devices.hpp"

namespace tensorhub {

CudaDevices list_cuda_devices() {
  CudaDevices out;
  out.note = "built without CUDA support (TENSORHUB_CUDA=OFF or nvcc missing)";
  return out;
}

Status cuda::open_cuda_device(std::string_view, int, std::unique_ptr<DeviceApi>&) {
  return Status::unavailable("built without CUDA support (TENSORHUB_CUDA=OFF or nvcc missing)");
}

}  // namespace tensorhub
