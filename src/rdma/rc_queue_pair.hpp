// One reliable-connected queue pair to a neighbour's, used to READ from it.
//
// It is created in INIT allowing remote READs only (the neighbour READs
// through its own end), connected with the neighbour's offer (RTR, then
// RTS) and destroyed to end the neighbour's access: an RC queue pair
// answers only the queue pair it is connected to, so destroying it is the
// revocation. READs in flight are capped at the negotiated read depth,
// min(our requester depth, their responder depth), so the device never
// holds work requests back; work requests go out linked, one post per
// batch.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "rdma/rdma_wire.hpp"
#include "rdma/verbs_nic.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::rdma {

// Starting values from the survey (docs/rdma.md): RC ack timeout 14
// (4.096 us x 2^14, about 67 ms), 7 retries, 4096 MTU where both ports have it.
struct QueuePairSettings {
  std::uint32_t max_send_wr = 256;
  std::uint8_t timeout = 14;
  std::uint8_t retry_count = 7;
  std::uint8_t rnr_retry = 7;
  std::uint8_t min_rnr_timer = 12;
};

struct ReadWork {
  std::uint64_t wr_id = 0;
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::vector<ibv_sge> local;  // at most the NIC's max_sge
};

class RcQueuePair {
 public:
  // Errors: kUnavailable (the device refused), naming the step.
  static Result<std::unique_ptr<RcQueuePair>> create(VerbsNic& nic, std::uint32_t psn,
                                                     QueuePairSettings settings = {});
  ~RcQueuePair();
  RcQueuePair(const RcQueuePair&) = delete;
  RcQueuePair& operator=(const RcQueuePair&) = delete;

  OfferedQueuePair offered(std::uint8_t nic_index) const { return {nic_index, qp_->qp_num, psn_ & 0xffffff}; }
  std::uint32_t qpn() const { return qp_->qp_num; }
  VerbsNic& nic() const { return nic_; }

  // To RTR and RTS towards `remote` on `remote_nic`. Errors:
  // kInvalidArgument (the remote offers no read depth, or no MTU in
  // common); kUnavailable (the device refused a transition).
  Status connect(const OfferedNic& remote_nic, const OfferedQueuePair& remote);
  // Connects anew, to another remote queue pair (the neighbour rebuilt
  // its): through RESET, which discards the READs queued without
  // completions (the caller forgets them), and INIT. Errors: as connect.
  Status reconnect(const OfferedNic& remote_nic, const OfferedQueuePair& remote);
  bool connected() const { return connected_; }
  std::uint8_t read_depth() const { return read_depth_; }
  ibv_mtu path_mtu() const { return path_mtu_; }
  std::uint32_t in_flight() const { return in_flight_; }
  std::uint32_t credits() const { return connected_ && !failed_ ? read_depth_ - in_flight_ : 0; }

  // Posts `reads` as one linked list, every one signaled. REQUIRES:
  // connected(), reads.size() <= credits(). Errors: kUnavailable (the
  // device refused one): `taken` says how many before it were posted
  // (they complete as usual), the rest were not.
  Status post_reads(std::span<const ReadWork> reads, std::size_t* taken = nullptr);
  // A READ of this queue pair completed (either way): its credit returns.
  // A failed one leaves the queue pair in ERR: no credits until rebuilt.
  void on_completion(bool success);
  bool failed() const { return failed_; }

 private:
  RcQueuePair(VerbsNic& nic, ibv_qp* qp, std::uint32_t psn, QueuePairSettings settings)
      : nic_(nic), qp_(qp), psn_(psn), settings_(settings) {}
  // RESET (or a new queue pair) -> INIT, allowing remote READs only.
  Status to_init();

  VerbsNic& nic_;
  ibv_qp* qp_;
  std::uint32_t psn_;
  QueuePairSettings settings_;
  bool connected_ = false;
  bool failed_ = false;
  std::uint8_t read_depth_ = 0;
  ibv_mtu path_mtu_ = IBV_MTU_1024;
  std::uint32_t in_flight_ = 0;
  std::vector<ibv_send_wr> wrs_;  // reused by post_reads
};

}  // namespace tensorhub::rdma
