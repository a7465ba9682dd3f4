// The CUDA entry points for builds without TENSORHUB_CUDA: each answers
// kUnavailable.
#include "cuda/cuda_sharing.hpp"
#include "cuda/device_api.hpp"
#include "tensorhub/devices.hpp"

namespace tensorhub {

CudaDevices list_cuda_devices() {
  CudaDevices out;
  out.note = "built without CUDA support (TENSORHUB_CUDA=OFF or nvcc missing)";
  return out;
}

namespace {
Status no_cuda() { return Status::unavailable("built without CUDA support (TENSORHUB_CUDA=OFF or nvcc missing)"); }
}  // namespace

Status cuda::open_cuda_device(std::string_view, int, std::unique_ptr<DeviceApi>&) { return no_cuda(); }
Status cuda::cuda_ordinal(std::string_view, int&) { return no_cuda(); }
Status cuda::export_ipc_range(const void*, std::size_t, IpcRange&) { return no_cuda(); }
Status cuda::IpcMapping::open(const IpcRange&, const std::string&, std::unique_ptr<IpcMapping>&) { return no_cuda(); }
cuda::IpcMapping::~IpcMapping() = default;
Status cuda::export_dma_buf(const void*, std::size_t, int&) { return no_cuda(); }
bool cuda::dma_buf_supported(int) { return false; }

}  // namespace tensorhub
