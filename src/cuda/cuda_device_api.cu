// DeviceApi over the CUDA runtime: one device, chosen by UUID; copies on
// non-blocking streams; tickets are events without timing.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "cuda/cuda_sharing.hpp"
#include "cuda/device_api.hpp"
#include "cuda/rdma_registration.hpp"
#include "cuda/shard_hash_kernel.hpp"

namespace tensorhub::cuda {
namespace {

std::string uuid_text(const cudaUUID_t& uuid) {
  std::array<unsigned char, 16> bytes;
  std::memcpy(bytes.data(), uuid.bytes, 16);
  return gpu_uuid_text(bytes);
}

Status failure(const char* what, cudaError_t e) {
  return Status::unavailable(std::string(what) + ": " + cudaGetErrorString(e));
}

class CudaDevice final : public DeviceApi {
 public:
  CudaDevice(int ordinal, std::string uuid) : ordinal_(ordinal), uuid_(std::move(uuid)) {}
  ~CudaDevice() override {
    cudaSetDevice(ordinal_);
    for (auto& [id, e] : events_) cudaEventDestroy(e);
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
  }

  Status open(int streams) {
    if (cudaError_t e = cudaSetDevice(ordinal_); e != cudaSuccess) return failure("cudaSetDevice", e);
    // A device that orders NICs' writes for its own kernels needs no flush;
    // one that does not, and offers the call, gets it.
    int ordering = 0, flush_options = 0;
    cudaDeviceGetAttribute(&ordering, cudaDevAttrGPUDirectRDMAWritesOrdering, ordinal_);
    cudaDeviceGetAttribute(&flush_options, cudaDevAttrGPUDirectRDMAFlushWritesOptions, ordinal_);
    cudaGetLastError();  // an attribute this driver lacks leaves an error behind
    flush_needed_ = ordering < cudaGPUDirectRDMAWritesOrderingOwner && (flush_options & cudaFlushGPUDirectRDMAWritesOptionHost) != 0;
    rdma_registration_ = std::string(choose_rdma_registration(dma_buf_supported(ordinal_), peermem_loaded()));
    int domain = 0, bus = 0, device = 0;
    if (cudaDeviceGetAttribute(&domain, cudaDevAttrPciDomainId, ordinal_) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, ordinal_) == cudaSuccess &&
        cudaDeviceGetAttribute(&device, cudaDevAttrPciDeviceId, ordinal_) == cudaSuccess) {
      char id[32];
      std::snprintf(id, sizeof id, "%04x:%02x:%02x.0", static_cast<unsigned>(domain) & 0xffff,
                    static_cast<unsigned>(bus) & 0xff, static_cast<unsigned>(device) & 0xff);
      pci_bus_id_ = id;
    }
    for (int i = 0; i < streams; ++i) {
      cudaStream_t s = nullptr;
      if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess) {
        return failure("cudaStreamCreateWithFlags", e);
      }
      streams_.push_back(s);
    }
    return Status::ok();
  }

  std::string name() const override { return "cuda:" + uuid_; }
  std::string pci_bus_id() const override { return pci_bus_id_; }
  std::string rdma_registration() const override { return rdma_registration_; }

  Status allocate_pinned(std::size_t bytes, std::byte*& out) override {
    cudaSetDevice(ordinal_);
    void* p = nullptr;
    if (cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable); e != cudaSuccess) {
      return failure("cudaHostAlloc", e);
    }
    out = static_cast<std::byte*>(p);
    return Status::ok();
  }
  void free_pinned(std::byte* memory) override { cudaFreeHost(memory); }

  Status allocate_device(std::size_t bytes, std::byte*& out) override {
    cudaSetDevice(ordinal_);
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) return failure("cudaMalloc", e);
    out = static_cast<std::byte*>(p);
    return Status::ok();
  }
  void free_device(std::byte* memory) override {
    cudaSetDevice(ordinal_);
    cudaFree(memory);
  }

  int stream_count() const override { return static_cast<int>(streams_.size()); }

  Status copy_async(CopyDirection direction, std::byte* to, const std::byte* from, std::size_t bytes,
                    int stream) override {
    cudaSetDevice(ordinal_);
    const cudaMemcpyKind kind =
        direction == CopyDirection::kHostToDevice ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    if (cudaError_t e = cudaMemcpyAsync(to, from, bytes, kind, streams_[static_cast<std::size_t>(stream)]);
        e != cudaSuccess) {
      return failure("cudaMemcpyAsync", e);
    }
    return Status::ok();
  }

  Status record(int stream, Ticket& out) override {
    cudaSetDevice(ordinal_);
    cudaEvent_t e = nullptr;
    if (cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming); r != cudaSuccess) {
      return failure("cudaEventCreateWithFlags", r);
    }
    if (cudaError_t r = cudaEventRecord(e, streams_[static_cast<std::size_t>(stream)]); r != cudaSuccess) {
      cudaEventDestroy(e);
      return failure("cudaEventRecord", r);
    }
    std::lock_guard lock(mutex_);
    out.id = next_id_++;
    events_[out.id] = e;
    return Status::ok();
  }

  TicketState query(Ticket ticket) override {
    cudaEvent_t e = event(ticket);
    if (e == nullptr) return TicketState::kFailed;
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaErrorNotReady) return TicketState::kPending;
    return r == cudaSuccess ? TicketState::kDone : TicketState::kFailed;
  }

  TicketState wait(Ticket ticket) override {
    cudaEvent_t e = event(ticket);
    if (e == nullptr) return TicketState::kFailed;
    return cudaEventSynchronize(e) == cudaSuccess ? TicketState::kDone : TicketState::kFailed;
  }

  void release(Ticket ticket) override {
    std::lock_guard lock(mutex_);
    auto it = events_.find(ticket.id);
    if (it == events_.end()) return;
    cudaEventDestroy(it->second);
    events_.erase(it);
  }

  Status copy(std::byte* to, const std::byte* from, std::size_t bytes) override {
    cudaSetDevice(ordinal_);
    if (cudaError_t e = cudaMemcpy(to, from, bytes, cudaMemcpyDefault); e != cudaSuccess) return failure("cudaMemcpy", e);
    return Status::ok();
  }

  Status share_ipc(const std::byte* device, std::size_t bytes, peer::SharedRange& out) override {
    return export_ipc_range(device, bytes, out);
  }

  Status open_ipc(const peer::SharedRange& range, const std::byte*& mapped) override {
    std::lock_guard lock(mutex_);
    auto it = opened_.find(range.handle);
    if (it == opened_.end()) {
      cudaSetDevice(ordinal_);
      cudaIpcMemHandle_t handle;
      std::memcpy(&handle, range.handle.data(), sizeof handle);
      void* base = nullptr;
      if (cudaError_t e = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess) {
        return failure("cudaIpcOpenMemHandle", e);
      }
      it = opened_.emplace(range.handle, Opened{static_cast<std::byte*>(base), 0}).first;
    }
    ++it->second.uses;
    mapped = it->second.base + range.offset;
    mapped_[mapped].push_back(range.handle);
    return Status::ok();
  }

  void close_ipc(const std::byte* mapped) override {
    std::lock_guard lock(mutex_);
    auto m = mapped_.find(mapped);
    if (m == mapped_.end() || m->second.empty()) return;
    const auto handle = m->second.back();
    m->second.pop_back();
    if (m->second.empty()) mapped_.erase(m);
    auto it = opened_.find(handle);
    if (it == opened_.end() || --it->second.uses > 0) return;
    cudaSetDevice(ordinal_);
    cudaIpcCloseMemHandle(it->second.base);
    opened_.erase(it);
  }

  Status export_dma_buf(const std::byte* device, std::size_t bytes, peer::DmaBuf& out) override {
    // The driver exports whole pages: those around the region. They lie
    // inside its allocation, whose granularity (2 MiB) is a multiple of the
    // page; the NIC's registration covers the region's bytes only.
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto at = reinterpret_cast<std::uintptr_t>(device);
    const std::uintptr_t first = at & ~(page - 1);
    const std::uintptr_t end = (at + bytes + page - 1) & ~(page - 1);
    cudaSetDevice(ordinal_);
    int fd = -1;
    TENSORHUB_RETURN_IF_ERROR(cuda::export_dma_buf(reinterpret_cast<const void*>(first), end - first, fd));
    out = peer::DmaBuf(fd, at - first);
    return Status::ok();
  }

  void flush_nic_writes() override {
    if (!flush_needed_) return;
    cudaSetDevice(ordinal_);
    if (cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                           cudaFlushGPUDirectRDMAWritesToOwner) != cudaSuccess) {
      cudaGetLastError();
    }
  }

  Status hash_xxh3(const xxh3::Piece* pieces, std::size_t count, std::uint8_t digest[16]) override {
    cudaSetDevice(ordinal_);
    DeviceShard shard;
    shard.piece_count = static_cast<std::uint32_t>(count);
    for (std::size_t i = 0; i < count; ++i) shard.length += pieces[i].length;
    std::uint64_t item_start[2];
    const std::uint64_t slots = shard_hash_plan(&shard, 1, item_start);
    // One allocation holds the batch's tables, its scratch and the digest.
    auto align = [](std::size_t n) { return (n + 255) & ~std::size_t{255}; };
    const std::size_t pieces_at = 0;
    const std::size_t shard_at = pieces_at + align(sizeof(xxh3::Piece) * (count + 1));
    const std::size_t items_at = shard_at + align(sizeof shard);
    const std::size_t terms_at = items_at + align(sizeof item_start);
    const std::size_t digest_at = terms_at + align(sizeof(xxh3::Lanes) * (slots + 1));
    const std::size_t total = digest_at + align(17);
    cudaStream_t s = cudaStreamPerThread;
    std::byte* base = nullptr;
    if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&base), total, s); e != cudaSuccess) {
      return failure("cudaMallocAsync", e);
    }
    cudaError_t e = cudaSuccess;
    auto upload = [&](std::size_t at, const void* from, std::size_t n) {
      if (e == cudaSuccess && n > 0) e = cudaMemcpyAsync(base + at, from, n, cudaMemcpyHostToDevice, s);
    };
    upload(pieces_at, pieces, sizeof(xxh3::Piece) * count);
    upload(shard_at, &shard, sizeof shard);
    upload(items_at, item_start, sizeof item_start);
    const ShardHashBatch batch{reinterpret_cast<const xxh3::Piece*>(base + pieces_at),
                               reinterpret_cast<const DeviceShard*>(base + shard_at),
                               reinterpret_cast<const std::uint64_t*>(base + items_at),
                               1,
                               item_start[1],
                               reinterpret_cast<xxh3::Lanes*>(base + terms_at),
                               reinterpret_cast<std::uint8_t*>(base + digest_at),
                               reinterpret_cast<std::uint8_t*>(base + digest_at + 16)};
    const char* launch = e == cudaSuccess ? launch_shard_hash(batch, s) : nullptr;
    if (e == cudaSuccess && launch == nullptr) e = cudaMemcpyAsync(digest, base + digest_at, 16, cudaMemcpyDeviceToHost, s);
    cudaFreeAsync(base, s);
    const cudaError_t synced = cudaStreamSynchronize(s);
    if (launch != nullptr) return Status::unavailable(std::string("XXH3 kernel: ") + launch);
    if (e != cudaSuccess) return failure("XXH3 on the device", e);
    if (synced != cudaSuccess) return failure("XXH3 on the device", synced);
    return Status::ok();
  }

 private:
  cudaEvent_t event(Ticket ticket) {
    std::lock_guard lock(mutex_);
    auto it = events_.find(ticket.id);
    return it == events_.end() ? nullptr : it->second;
  }

  int ordinal_;
  bool flush_needed_ = false;
  std::string pci_bus_id_;
  std::string rdma_registration_ = "staging";  // NICs' writes need cudaDeviceFlushGPUDirectRDMAWrites before a kernel reads them
  std::string uuid_;
  std::vector<cudaStream_t> streams_;
  std::mutex mutex_;
  std::map<std::uint64_t, cudaEvent_t> events_;
  // Allocations of other processes mapped here (one mapping each, however
  // many ranges of it are open), and the handles behind each mapped range.
  struct Opened {
    std::byte* base;
    int uses;
  };
  std::map<std::array<std::uint8_t, 64>, Opened> opened_;
  std::map<const std::byte*, std::vector<std::array<std::uint8_t, 64>>> mapped_;
  std::uint64_t next_id_ = 1;
};

}  // namespace

Status cuda_ordinal(std::string_view uuid, int& ordinal) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) return failure("no usable CUDA device", e);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    if (!uuid.empty() && uuid_text(prop.uuid) != uuid) continue;
    ordinal = i;
    return Status::ok();
  }
  if (uuid.empty()) return Status::unavailable("no CUDA device on this machine");
  return Status::not_found("no CUDA device with UUID " + std::string(uuid));
}

Status open_cuda_device(std::string_view uuid, int streams, std::unique_ptr<DeviceApi>& out) {
  if (streams < 1) return Status::invalid_argument("a device needs at least one stream");
  int ordinal = 0;
  if (Status s = cuda_ordinal(uuid, ordinal); !s) return s;
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, ordinal); e != cudaSuccess) return failure("cudaGetDeviceProperties", e);
  auto device = std::make_unique<CudaDevice>(ordinal, uuid_text(prop.uuid));
  if (Status s = device->open(streams); !s) return s;
  out = std::move(device);
  return Status::ok();
}

}  // namespace tensorhub::cuda
