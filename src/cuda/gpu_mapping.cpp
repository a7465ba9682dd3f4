// tensorhub::GpuMapping over cuda::IpcMapping (which answers kUnavailable
// in builds without CUDA).
#include "tensorhub/gpu_mapping.hpp"

#include <cstring>

#include "cuda/cuda_sharing.hpp"
#include "cuda/gpu_memory.hpp"

namespace tensorhub {

struct GpuMapping::State {
  std::unique_ptr<cuda::IpcMapping> mapping;
};

GpuMapping::GpuMapping(std::unique_ptr<State> state) : state_(std::move(state)) {}
GpuMapping::~GpuMapping() = default;

Result<std::unique_ptr<GpuMapping>> GpuMapping::open(std::span<const std::uint8_t> ipc_handle, std::uint64_t offset,
                                                     std::uint64_t length, const std::string& gpu) {
  cuda::IpcRange range;
  if (ipc_handle.size() != range.handle.size()) {
    return Status::invalid_argument("a CUDA IPC handle is " + std::to_string(range.handle.size()) + " bytes, not " +
                                    std::to_string(ipc_handle.size()));
  }
  if (!cuda::is_gpu_uuid(gpu)) return Status::invalid_argument(gpu + " is not a GPU UUID (GPU-xxxxxxxx-...)");
  if (length == 0) return Status::invalid_argument("a GPU mapping needs at least one byte");
  if (offset + length < offset) return Status::invalid_argument("the range's end is past 2^64");
  std::memcpy(range.handle.data(), ipc_handle.data(), range.handle.size());
  range.offset = offset;
  range.length = length;
  auto state = std::make_unique<State>();
  if (Status s = cuda::IpcMapping::open(range, gpu, state->mapping); !s) return s;
  return std::unique_ptr<GpuMapping>(new GpuMapping(std::move(state)));
}

std::uintptr_t GpuMapping::address() const { return reinterpret_cast<std::uintptr_t>(state_->mapping->data()); }
std::uint64_t GpuMapping::size() const { return state_->mapping->size(); }

}  // namespace tensorhub
