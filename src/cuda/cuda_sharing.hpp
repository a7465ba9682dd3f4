// Sharing device memory beyond this process: a CUDA IPC handle for a range
// (another process on this host maps it: a host mate's peer, or the
// inference engine a daemon hands a version to) and a dma-buf file
// descriptor for a range (what a NIC registers for GPUDirect RDMA).
//
// Plain types only: callers built by the host compiler include this.
// Builds without CUDA answer kUnavailable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "seams/shared_range.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::cuda {

// A range of device memory as another process opens it: the IPC handle of
// the allocation that holds it (cudaIpcMemHandle_t's 64 bytes), the range's
// offset inside that allocation, and its length.
using IpcRange = peer::SharedRange;

// The handle of `length` bytes of device memory at `device_ptr`, which may
// lie anywhere inside a cudaMalloc allocation. The range stays valid while
// the allocation lives; whoever hands it out must keep it alive until every
// process that opened it has closed it.
// REQUIRES: length > 0.
// Errors: kInvalidArgument (not device memory, or the range runs past its
// allocation); kUnavailable (no CUDA).
Status export_ipc_range(const void* device_ptr, std::size_t length, IpcRange& out);

// A range opened from another process's handle, mapped until destroyed.
class IpcMapping {
 public:
  // Maps `range` on the GPU named by `gpu_uuid` ("GPU-...").
  // Errors: kNotFound (no such GPU); kUnavailable (the handle does not open
  // here: its process is gone, or it came from this very process).
  static Status open(const IpcRange& range, const std::string& gpu_uuid, std::unique_ptr<IpcMapping>& out);
  ~IpcMapping();
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;

  std::byte* data() const { return base_ + offset_; }
  std::size_t size() const { return length_; }

 private:
  IpcMapping(std::byte* base, std::uint64_t offset, std::uint64_t length, int ordinal)
      : base_(base), offset_(offset), length_(length), ordinal_(ordinal) {}
  std::byte* base_;
  std::uint64_t offset_;
  std::uint64_t length_;
  int ordinal_;
};

// A dma-buf file descriptor for `length` bytes of device memory at
// `device_ptr` (the caller closes it). The driver requires the range to be
// aligned to the host's page size at both ends.
// Errors: kInvalidArgument (misaligned, or not device memory);
// kUnavailable (no CUDA, or the driver or kernel cannot export dma-bufs).
Status export_dma_buf(const void* device_ptr, std::size_t length, int& fd);
// Whether the driver exports dma-bufs of the memory of CUDA device
// `ordinal` (false without CUDA).
bool dma_buf_supported(int ordinal);

}  // namespace tensorhub::cuda
