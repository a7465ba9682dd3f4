// One GPU's memory as a peer uses it: the device (by UUID), its staging
// ring (pinned once, when the GPU is first used) and its memory domain.
// A peer opens one per GPU it fetches into and keeps it while it runs.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "cuda/device_api.hpp"
#include "cuda/device_memory_domain.hpp"
#include "cuda/staging_ring.hpp"

namespace tensorhub::cuda {

class GpuMemory {
 public:
  // The ring's slots: one block each (payloads are blocks), 16 MiB pinned
  // per GPU at the default 1 MiB blocks.
  static constexpr std::size_t kRingSlots = 16;

  // Opens the GPU whose UUID is `uuid` ("GPU-" then 8-4-4-4-12 hex digits,
  // as `nvidia-smi -L` prints it), with ring slots of `block_size` bytes.
  // Errors: kInvalidArgument (not a UUID); kUnavailable (no CUDA in this
  // build, no driver, or no pinned memory); kNotFound (no GPU with that UUID).
  static Status open(std::string_view uuid, std::size_t block_size, std::unique_ptr<GpuMemory>& out);

  const DeviceMemoryDomain& domain() const { return *domain_; }
  DeviceApi& device() { return *device_; }

 private:
  GpuMemory() = default;
  // Declared so that the domain goes first, the device last.
  std::unique_ptr<DeviceApi> device_;
  std::unique_ptr<StagingRing> ring_;
  std::unique_ptr<DeviceMemoryDomain> domain_;
};

// Whether `text` is a GPU UUID as `nvidia-smi -L` prints it.
bool is_gpu_uuid(std::string_view text);

}  // namespace tensorhub::cuda
