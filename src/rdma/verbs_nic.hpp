// One RDMA device opened for the data path: its context, one protection
// domain shared by every neighbour (so a registration costs O(memory), not
// O(memory x peers)), one completion queue with its completion channel,
// and what its first port offers.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <vector>

#include "seams/dma_buf.hpp"
#include "rdma/rdma_wire.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::rdma {

// A registered range; deregistered when destroyed. Deregistration returns
// once no READ touches the range any more (the device finishes or fails
// the READs in flight), so the memory may be reused after it.
class MemoryRegistration {
 public:
  MemoryRegistration() = default;
  explicit MemoryRegistration(ibv_mr* mr) : mr_(mr) {}
  MemoryRegistration(MemoryRegistration&& other) noexcept : mr_(std::exchange(other.mr_, nullptr)) {}
  MemoryRegistration& operator=(MemoryRegistration&& other) noexcept;
  ~MemoryRegistration() { reset(); }
  void reset();
  std::uint32_t lkey() const { return mr_->lkey; }
  std::uint32_t rkey() const { return mr_->rkey; }
  std::uintptr_t begin() const { return reinterpret_cast<std::uintptr_t>(mr_->addr); }
  std::size_t size() const { return mr_->length; }
  bool holds(const void* p, std::size_t n) const {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    return mr_ != nullptr && at >= begin() && n <= size() && at - begin() <= size() - n;
  }

 private:
  ibv_mr* mr_ = nullptr;
};

enum class Access : std::uint8_t {
  kLocalWrite,  // a fetcher's destination: READs land here; nobody reads it remotely
  kRemoteRead,  // a holder's version: neighbours READ it; nobody writes it remotely
};

class VerbsNic {
 public:
  // Every device whose first port is active, opened; `note` says why there
  // are none (no RDMA subsystem, no device, no active port).
  static std::vector<std::unique_ptr<VerbsNic>> open_active(std::string& note);
  // Errors: kUnavailable (the device cannot be opened or set up), naming the step.
  static Result<std::unique_ptr<VerbsNic>> open(ibv_device* device);
  ~VerbsNic();
  VerbsNic(const VerbsNic&) = delete;
  VerbsNic& operator=(const VerbsNic&) = delete;

  const std::string& name() const { return name_; }
  // What a neighbour needs to connect to this NIC's queue pairs.
  const OfferedNic& offered() const { return offered_; }
  bool port_active() const;
  std::uint32_t max_sge() const { return max_sge_; }
  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  ibv_cq* cq() const { return cq_; }
  // Readable when completions may be waiting (drain them).
  int completion_fd() const { return channel_->fd; }
  int async_fd() const { return context_->async_fd; }

  // Whether later kRemoteRead registrations allow relaxed ordering (on by
  // default; rdma-bench turns it off to measure what it is worth).
  void set_relaxed_ordering(bool on) { relaxed_ordering_ = on; }

  // Errors: kUnavailable (the device refused: the reason from errno).
  // kRemoteRead adds relaxed ordering (the NIC may reorder its PCIe writes
  // and reads; the fetcher verifies whole shards after the completions).
  Result<MemoryRegistration> register_memory(void* data, std::size_t size, Access access);
  // The same for `size` bytes of memory the host cannot address (GPU
  // memory), reached through `buf`: the NIC maps its pages from
  // buf.offset() on; keys and work requests address them at `iova` (their
  // device address). Errors: as register_memory (kernels or NICs without
  // dma-buf support refuse here).
  Result<MemoryRegistration> register_dma_buf(const peer::DmaBuf& buf, std::size_t size, std::uintptr_t iova,
                                              Access access);
  // Consumes the channel's events, re-arms it, and appends every completion
  // waiting to `out`. Call when completion_fd() is readable (or to poll).
  void drain(std::vector<ibv_wc>& out);

 private:
  VerbsNic() = default;

  std::string name_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  OfferedNic offered_;
  std::uint32_t max_sge_ = 1;
  bool relaxed_ordering_ = true;
  unsigned access_flags(Access access) const;
};

}  // namespace tensorhub::rdma
