// Device memory that another process of this host shares with this one
// through a CUDA IPC handle: how a daemon hands a version it holds in GPU
// memory to an inference engine on that GPU (`tensorhub peer`'s "hold"
// request with "gpu"; docs/gpu.md). The engine maps the range, copies the
// weights into its own parameters, unmaps, and then lets go of the hold:
// the daemon frees or reuses the memory only after that.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tensorhub/status.hpp"

namespace tensorhub {

class GpuMapping {
 public:
  // Maps `length` bytes at `offset` of the allocation that `ipc_handle` (a
  // cudaIpcMemHandle_t's 64 bytes) names, on the GPU `gpu` ("GPU-..." as
  // nvidia-smi -L prints it).
  // Errors: kInvalidArgument (a handle that is not 64 bytes, a malformed
  // UUID, length 0, offset + length past 2^64); kNotFound (no such GPU);
  // kUnavailable (no CUDA in this build or on this machine, or the handle
  // does not open: its process is gone, or it is this process's own).
  static Result<std::unique_ptr<GpuMapping>> open(std::span<const std::uint8_t> ipc_handle, std::uint64_t offset,
                                                  std::uint64_t length, const std::string& gpu);
  // Unmaps: nothing may read through address() afterwards.
  ~GpuMapping();
  GpuMapping(const GpuMapping&) = delete;
  GpuMapping& operator=(const GpuMapping&) = delete;

  // The range's first byte (device memory on `gpu`) and its length.
  std::uintptr_t address() const;
  std::uint64_t size() const;

 private:
  struct State;
  explicit GpuMapping(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tensorhub
