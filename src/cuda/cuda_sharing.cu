// CUDA IPC and dma-buf export. The driver's calls (an allocation's base, the
// dma-buf export) are reached through the runtime's driver entry points, so
// nothing links libcuda and binaries still start on machines with no driver.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstring>

#include "cuda/cuda_sharing.hpp"
#include "cuda/device_api.hpp"

namespace tensorhub::cuda {
namespace {

Status failure(const char* what, cudaError_t e) {
  return Status::unavailable(std::string(what) + ": " + cudaGetErrorString(e));
}

// A driver entry point by name, or nullptr.
void* driver_function(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return fn;
}

// The device that holds `ptr`, or -1 when it is not device memory.
int device_of(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();  // the query's error is not sticky; clear it
    return -1;
  }
  return attributes.type == cudaMemoryTypeDevice ? attributes.device : -1;
}

}  // namespace

Status export_ipc_range(const void* device_ptr, std::size_t length, IpcRange& out) {
  if (length == 0) return Status::invalid_argument("an IPC range needs at least one byte");
  const int ordinal = device_of(device_ptr);
  if (ordinal < 0) return Status::invalid_argument("an IPC range must be CUDA device memory");
  using GetAddressRange = int (*)(unsigned long long*, std::size_t*, unsigned long long);
  auto range_of = reinterpret_cast<GetAddressRange>(driver_function("cuMemGetAddressRange"));
  if (range_of == nullptr) return Status::unavailable("the CUDA driver has no cuMemGetAddressRange");
  if (cudaError_t e = cudaSetDevice(ordinal); e != cudaSuccess) return failure("cudaSetDevice", e);
  unsigned long long base = 0;
  std::size_t allocation = 0;
  const auto at = reinterpret_cast<unsigned long long>(device_ptr);
  if (range_of(&base, &allocation, at) != 0) return Status::invalid_argument("not inside a CUDA allocation");
  const std::uint64_t offset = at - base;
  if (length > allocation - offset) return Status::invalid_argument("the IPC range runs past its allocation");
  cudaIpcMemHandle_t handle;
  if (cudaError_t e = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base)); e != cudaSuccess) {
    return failure("cudaIpcGetMemHandle", e);
  }
  static_assert(sizeof handle == 64);
  std::memcpy(out.handle.data(), &handle, sizeof handle);
  out.offset = offset;
  out.length = length;
  return Status::ok();
}

Status IpcMapping::open(const IpcRange& range, const std::string& gpu_uuid, std::unique_ptr<IpcMapping>& out) {
  int ordinal = 0;
  if (Status s = cuda_ordinal(gpu_uuid, ordinal); !s) return s;
  if (cudaError_t e = cudaSetDevice(ordinal); e != cudaSuccess) return failure("cudaSetDevice", e);
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, range.handle.data(), sizeof handle);
  void* base = nullptr;
  if (cudaError_t e = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess) {
    return failure("cudaIpcOpenMemHandle", e);
  }
  out.reset(new IpcMapping(static_cast<std::byte*>(base), range.offset, range.length, ordinal));
  return Status::ok();
}

IpcMapping::~IpcMapping() {
  cudaSetDevice(ordinal_);
  cudaIpcCloseMemHandle(base_);
}

Status export_dma_buf(const void* device_ptr, std::size_t length, int& fd) {
  const long page = sysconf(_SC_PAGESIZE);
  const auto at = reinterpret_cast<std::uintptr_t>(device_ptr);
  if (length == 0 || at % static_cast<std::uintptr_t>(page) != 0 || length % static_cast<std::size_t>(page) != 0) {
    return Status::invalid_argument("a dma-buf range must be page-aligned at both ends");
  }
  if (device_of(device_ptr) < 0) return Status::invalid_argument("a dma-buf range must be CUDA device memory");
  using GetHandle = int (*)(void*, unsigned long long, std::size_t, int, unsigned long long);
  auto get = reinterpret_cast<GetHandle>(driver_function("cuMemGetHandleForAddressRange"));
  if (get == nullptr) return Status::unavailable("the CUDA driver cannot export dma-bufs");
  constexpr int kDmaBufFd = 1;  // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
  int out = -1;
  if (const int e = get(&out, static_cast<unsigned long long>(at), length, kDmaBufFd, 0); e != 0) {
    return Status::unavailable("cuMemGetHandleForAddressRange failed (CUresult " + std::to_string(e) + ")");
  }
  fd = out;
  return Status::ok();
}

}  // namespace tensorhub::cuda
