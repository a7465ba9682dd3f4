// list_cuda_devices() for builds without TENSORHUB_CUDA.
#include "tensorhub/devices.hpp"

namespace tensorhub {

CudaDevices list_cuda_devices() {
  CudaDevices out;
  out.note = "built without CUDA support (TENSORHUB_CUDA=OFF or nvcc missing)";
  return out;
}

}  // namespace tensorhub
