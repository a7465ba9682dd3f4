// What TensorHub asks of a GPU runtime: page-locked host memory and device
// memory, asynchronous copies in stream order, and tickets (events recorded
// after copies) that say when those copies ended and whether they failed.
//
// Two implementations: the CUDA runtime (cuda_device_api.cu, built where
// nvcc is) and the fake device of the tests (tests/support/fake_device.hpp:
// host memory posing as device memory, whose copies happen only when a
// test completes them), so the staging pipeline's rules are tested in CI.
// No CUDA types appear here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "cuda/xxh3_blocks.hpp"
#include "seams/dma_buf.hpp"
#include "seams/shared_range.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::cuda {

enum class CopyDirection { kHostToDevice, kDeviceToHost };

enum class TicketState {
  kPending,  // some copy before it has not ended
  kDone,     // every copy before it on its stream ended well
  kFailed,   // a copy before it failed: its destination holds unknown bytes
};

// An event recorded on a stream; released by the caller.
struct Ticket {
  std::uint64_t id = 0;
};

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;
  // "cuda:GPU-<uuid>" or "fake".
  virtual std::string name() const = 0;
  // Where the device sits on the PCIe tree, as sysfs names it
  // ("0000:17:00.0"); empty when unknown.
  virtual std::string pci_bus_id() const = 0;

  // Page-locked host memory (the device copies from and to it at full
  // speed, asynchronously). Errors: kUnavailable when none can be had.
  virtual Status allocate_pinned(std::size_t bytes, std::byte*& out) = 0;
  virtual void free_pinned(std::byte* memory) = 0;
  // Device memory. Errors: kUnavailable.
  virtual Status allocate_device(std::size_t bytes, std::byte*& out) = 0;
  virtual void free_device(std::byte* memory) = 0;

  // The streams copies go on, numbered 0 .. stream_count() - 1.
  virtual int stream_count() const = 0;
  // Enqueues a copy of `bytes` bytes on `stream`; it runs after the copies
  // enqueued there before it. REQUIRES: `from` and `to` stay valid and
  // `from` unchanged until a ticket recorded after it is done or failed.
  // Errors: kUnavailable when the runtime refuses it (the device is lost).
  virtual Status copy_async(CopyDirection direction, std::byte* to, const std::byte* from, std::size_t bytes,
                            int stream) = 0;
  // A ticket for the copies enqueued on `stream` so far. Errors: kUnavailable.
  virtual Status record(int stream, Ticket& out) = 0;
  // Never blocks.
  virtual TicketState query(Ticket ticket) = 0;
  // Blocks until the ticket is done or failed, and says which.
  virtual TicketState wait(Ticket ticket) = 0;
  virtual void release(Ticket ticket) = 0;

  // Copies `bytes` bytes between any two places, host (pinned or not) or
  // device, and returns when they are there. Callable from any thread.
  // Errors: kUnavailable.
  virtual Status copy(std::byte* to, const std::byte* from, std::size_t bytes) = 0;
  // XXH3-128 (canonical form) of the concatenation of `count` `pieces` (device
  // memory), computed on the device: only the 16 bytes come back. Callable
  // from any thread. Errors: kUnavailable.
  virtual Status hash_xxh3(const xxh3::Piece* pieces, std::size_t count, std::uint8_t digest[16]) = 0;

  // Shares `bytes` of device memory at `device` with the other processes
  // of this host (CUDA IPC). Callable from any thread.
  // Errors: kInvalidArgument (not device memory of this device); kUnavailable.
  virtual Status share_ipc(const std::byte* device, std::size_t bytes, peer::SharedRange& out) = 0;
  // Maps a range another process shared; `mapped` is its first byte, until
  // close_ipc(mapped). A range of an allocation mapped already shares that
  // mapping. Callable from any thread. Errors: kUnavailable (it does not
  // open here).
  virtual Status open_ipc(const peer::SharedRange& range, const std::byte*& mapped) = 0;
  virtual void close_ipc(const std::byte* mapped) = 0;

  // How a NIC registers this device's memory, as probed when it opened:
  // "dma-buf" (export_dma_buf), "peermem" (nvidia_peermem: by address),
  // or "staging" (not at all). rdma_registration.hpp has the ladder.
  virtual std::string rdma_registration() const = 0;
  // A dma-buf for `bytes` of device memory at `device`, for a NIC to
  // register (GPUDirect RDMA): `out.offset()` is where `device` lies in it.
  // Callable from any thread. Errors: kInvalidArgument (not device memory
  // of this device); kUnavailable (the driver or the kernel exports none).
  virtual Status export_dma_buf(const std::byte* device, std::size_t bytes, peer::DmaBuf& out) = 0;
  // Makes what NICs wrote into this device's memory before the call
  // visible to the work the device runs after it (GPUDirect RDMA's flush:
  // a NIC's writes may still be on their way through PCIe when its
  // completion arrives). Callable from any thread.
  virtual void flush_nic_writes() = 0;
};

// The CUDA runtime on the device whose UUID is `uuid` ("GPU-..." as
// nvidia-smi -L prints it) or, when `uuid` is empty, device 0, with
// `streams` non-blocking streams. Errors: kUnavailable when the build has no
// CUDA or no such device answers; kNotFound for an unknown UUID.
Status open_cuda_device(std::string_view uuid, int streams, std::unique_ptr<DeviceApi>& out);

// The CUDA runtime's ordinal of the device whose UUID is `uuid`, or device
// 0's when `uuid` is empty. Errors as open_cuda_device().
Status cuda_ordinal(std::string_view uuid, int& ordinal);

}  // namespace tensorhub::cuda
