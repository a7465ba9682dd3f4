#include "cuda/gpu_memory.hpp"

#include <cctype>

namespace tensorhub::cuda {

bool is_gpu_uuid(std::string_view text) {
  // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  if (text.size() != 40 || text.substr(0, 4) != "GPU-") return false;
  for (std::size_t i = 4; i < text.size(); ++i) {
    const bool dash = i == 12 || i == 17 || i == 22 || i == 27;
    if (dash ? text[i] != '-' : !std::isxdigit(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

Status GpuMemory::open(std::string_view uuid, std::size_t block_size, std::unique_ptr<GpuMemory>& out) {
  if (!is_gpu_uuid(uuid)) {
    return Status::invalid_argument("'" + std::string(uuid.substr(0, 64)) +
                                    "' is not a GPU UUID (GPU- and 32 hex digits, as nvidia-smi -L prints)");
  }
  std::unique_ptr<GpuMemory> gpu(new GpuMemory());
  TENSORHUB_RETURN_IF_ERROR(open_cuda_device(uuid, 2, gpu->device_));
  TENSORHUB_RETURN_IF_ERROR(StagingRing::create(*gpu->device_, {block_size, kRingSlots}, gpu->ring_));
  gpu->domain_ = std::make_unique<DeviceMemoryDomain>(*gpu->device_, gpu->ring_.get());
  out = std::move(gpu);
  return Status::ok();
}

}  // namespace tensorhub::cuda
