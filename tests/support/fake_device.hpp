// A fake GPU for the deterministic tests: host memory posing as pinned and
// device memory, copies queued per stream that happen only when the test
// runs them (in stream order), and tickets that end when their stream
// reaches them. So a test decides when each copy lands, sees exactly what a
// premature reuse of a buffer would do (the copy reads the bytes that are
// there when it runs, like DMA), and can make copies fail or the device be
// lost. It also checks what the hardware needs: every copy's host side in
// pinned memory and its device side in device memory. Thread-safe, so a
// peer's threads may use it while a test watches; with complete_on_query a
// queued copy runs when its ticket is first asked about (a peer that polls
// then drives the device itself).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <vector>

#include "core/regions.hpp"
#include "cuda/device_api.hpp"

namespace tensorhub::testing {

class FakeDevice final : public cuda::DeviceApi {
 public:
  explicit FakeDevice(int streams = 2) : streams_(static_cast<std::size_t>(streams)) {}
  ~FakeDevice() override;

  std::string name() const override { return "fake"; }
  std::string pci_bus_id() const override { return locked(pci_bus_id_); }
  void set_pci_bus_id(std::string id) { std::lock_guard lock(mutex_); pci_bus_id_ = std::move(id); }
  // "dma-buf" once backed by a memfd, else "staging"; or what a test sets
  // ("peermem": NICs register the fake's memory by address, which softverbs
  // can, the fake's device memory being host memory).
  std::string rdma_registration() const override;
  void set_rdma_registration(std::string how) { std::lock_guard lock(mutex_); rdma_registration_ = std::move(how); }
  Status allocate_pinned(std::size_t bytes, std::byte*& out) override;
  void free_pinned(std::byte* memory) override;
  Status allocate_device(std::size_t bytes, std::byte*& out) override;
  void free_device(std::byte* memory) override;
  int stream_count() const override { return static_cast<int>(streams_.size()); }
  Status copy_async(cuda::CopyDirection direction, std::byte* to, const std::byte* from, std::size_t bytes,
                    int stream) override;
  Status record(int stream, cuda::Ticket& out) override;
  cuda::TicketState query(cuda::Ticket ticket) override;
  cuda::TicketState wait(cuda::Ticket ticket) override;
  void release(cuda::Ticket ticket) override;
  Status copy(std::byte* to, const std::byte* from, std::size_t bytes) override;
  // Runs the kernels' own steps (xxh3_blocks.hpp) on the CPU.
  Status hash_xxh3(const cuda::xxh3::Piece* pieces, std::size_t count, std::uint8_t digest[16]) override;
  // IPC between the "processes" (peers) sharing this fake: a handle names
  // the allocation by its address; opening checks it is still allocated
  // and the range inside it.
  Status share_ipc(const std::byte* device, std::size_t bytes, peer::SharedRange& out) override;
  Status open_ipc(const peer::SharedRange& range, const std::byte*& mapped) override;
  void close_ipc(const std::byte* mapped) override;
  // Every open_ipc fails from now on, as across hosts.
  void refuse_ipc() { std::lock_guard lock(mutex_); refuse_ipc_ = true; }
  std::size_t ipc_opened() const { return locked(ipc_opened_); }
  std::size_t ipc_open_now() const { return locked(ipc_open_now_); }

  // dma-bufs: only for memory allocated after back_with_memfd(): the fake
  // exports the memfd it carves that memory from, and the offset of the
  // range in it (softverbs maps it, as a NIC maps a GPU's pages).
  Status export_dma_buf(const std::byte* device, std::size_t bytes, peer::DmaBuf& out) override;
  void flush_nic_writes() override { std::lock_guard lock(mutex_); ++nic_flushes_; }
  // Device memory allocated from now on comes from one memfd, so it
  // exports dma-bufs; before, it comes from the heap (where ASan watches
  // its bounds) and exports none.
  void back_with_memfd();
  std::size_t dma_bufs_exported() const { return locked(dma_bufs_exported_); }
  std::size_t nic_flushes() const { return locked(nic_flushes_); }

  // ---- What the test drives ----
  // Runs the oldest queued operation of `stream`; false when there is none.
  bool step(int stream);
  // Runs one operation of a stream chosen by `rng`; false when all are idle.
  bool step_any(std::mt19937_64& rng);
  void run_all();
  // The `n`-th copy enqueued from now on (0: the next) fails when it runs:
  // its bytes are not copied and the next ticket on its stream fails.
  void fail_copy(std::size_t n) { fail_at_.push_back(copies_enqueued_ + n); }
  // Every later call that enqueues work is refused (kUnavailable).
  void lose() { lost_ = true; }
  // Pinned bytes the device will hand out in all (allocations past it fail).
  void limit_pinned(std::size_t bytes) { pinned_limit_ = bytes; }
  void complete_on_query(bool on) { complete_on_query_ = on; }

  // ---- What the test checks ----
  std::size_t pinned_bytes() const { return locked(pinned_bytes_); }
  std::size_t peak_pinned_bytes() const { return locked(peak_pinned_bytes_); }
  std::size_t device_bytes() const { return locked(device_bytes_); }
  std::size_t queued(int stream) const { return locked(streams_[static_cast<std::size_t>(stream)].ops).size(); }
  std::size_t copies_run() const { return locked(copies_run_); }
  // Async copies whose host side was not pinned or whose device side was
  // not device memory (or not inside one allocation), and hashes of memory
  // that is not the device's: always a bug.
  std::size_t misplaced_copies() const { return locked(misplaced_copies_); }
  std::size_t live_tickets() const { return locked(tickets_).size(); }
  std::size_t hashes() const { return locked(hashes_); }
  std::uint64_t hashed_bytes() const { return locked(hashed_bytes_); }
  // Bytes that copies (copy() and the async ones that ran) moved out of
  // device memory to the host.
  std::uint64_t bytes_to_host() const { return locked(bytes_to_host_); }

 private:
  struct Op {
    bool is_ticket = false;
    std::uint64_t ticket = 0;
    std::byte* to = nullptr;
    const std::byte* from = nullptr;
    std::size_t bytes = 0;
    bool fails = false;
    bool to_host = false;
  };
  struct Stream {
    std::deque<Op> ops;
    bool failed_since_ticket = false;
    std::size_t size() const { return ops.size(); }
  };
  using Allocations = std::map<const std::byte*, std::size_t>;  // start -> size
  static bool inside(const Allocations& a, const std::byte* p, std::size_t bytes);
  // Frees `memory` if `allocations` holds it, and takes its size off `total`.
  static void forget(Allocations& allocations, std::size_t& total, std::byte* memory);
  template <typename T>
  T locked(const T& field) const {
    std::lock_guard lock(mutex_);
    return field;
  }
  bool step_locked(int stream);  // REQUIRES: mutex_ held

  std::vector<Stream> streams_;
  std::map<std::uint64_t, cuda::TicketState> tickets_;
  std::map<std::uint64_t, int> ticket_stream_;
  std::uint64_t next_ticket_ = 1;
  Allocations pinned_;
  Allocations device_;
  std::size_t pinned_bytes_ = 0;
  std::size_t peak_pinned_bytes_ = 0;
  std::size_t pinned_limit_ = SIZE_MAX;
  std::size_t device_bytes_ = 0;
  std::vector<std::size_t> fail_at_;
  std::size_t copies_enqueued_ = 0;
  std::size_t copies_run_ = 0;
  std::size_t misplaced_copies_ = 0;
  bool lost_ = false;
  bool complete_on_query_ = false;
  mutable std::mutex mutex_;
  std::size_t hashes_ = 0;
  std::uint64_t hashed_bytes_ = 0;
  std::uint64_t bytes_to_host_ = 0;
  bool refuse_ipc_ = false;
  // The memfd device memory comes from after back_with_memfd(): mapped
  // whole, carved from the front, freed pages punched out.
  int arena_fd_ = -1;
  std::byte* arena_ = nullptr;
  std::size_t arena_used_ = 0;
  std::size_t dma_bufs_exported_ = 0;
  std::size_t nic_flushes_ = 0;
  std::string pci_bus_id_;
  std::string rdma_registration_;
  bool in_arena(const std::byte* p) const { return arena_ != nullptr && p >= arena_ && p < arena_ + kArenaBytes; }
  static constexpr std::size_t kArenaBytes = std::size_t{64} << 30;
  std::size_t ipc_opened_ = 0;
  std::size_t ipc_open_now_ = 0;
};

// Regions of `device`'s memory of the given sizes, laid end to end; freed
// with it.
class DeviceRegions {
 public:
  DeviceRegions(FakeDevice& device, const std::vector<std::size_t>& sizes);
  ~DeviceRegions();
  DeviceRegions(const DeviceRegions&) = delete;
  DeviceRegions& operator=(const DeviceRegions&) = delete;

  const std::vector<std::span<std::byte>>& regions() const { return regions_; }
  core::MutableRegions image() const { return core::MutableRegions(std::span<const std::span<std::byte>>(regions_)); }
  // The image's bytes, read straight from the fake's memory.
  std::vector<std::byte> bytes() const;
  // REQUIRES: bytes.size() == image().size().
  void fill_from(const std::vector<std::byte>& bytes);

 private:
  FakeDevice& device_;
  std::vector<std::span<std::byte>> regions_;
};

}  // namespace tensorhub::testing
