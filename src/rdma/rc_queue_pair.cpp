#include "rdma/rc_queue_pair.hpp"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>

namespace tensorhub::rdma {
namespace {

Status refused(const VerbsNic& nic, const char* step, int rc) {
  return Status::unavailable(nic.name() + ": " + step + " failed: " + std::strerror(rc));
}

}  // namespace

Result<std::unique_ptr<RcQueuePair>> RcQueuePair::create(VerbsNic& nic, std::uint32_t psn,
                                                         QueuePairSettings settings) {
  ibv_qp_init_attr init{};
  init.send_cq = nic.cq();
  init.recv_cq = nic.cq();
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = settings.max_send_wr;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = nic.max_sge();
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(nic.pd(), &init);
  if (qp == nullptr) return refused(nic, "creating a queue pair", errno);
  std::unique_ptr<RcQueuePair> out(new RcQueuePair(nic, qp, psn & 0xffffff, settings));
  TENSORHUB_RETURN_IF_ERROR(out->to_init());
  return out;
}

Status RcQueuePair::to_init() {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;  // never REMOTE_WRITE
  if (int rc = ibv_modify_qp(qp_, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS); rc != 0) {
    return refused(nic_, "moving a queue pair to INIT", rc);
  }
  return Status::ok();
}

Status RcQueuePair::reconnect(const OfferedNic& remote_nic, const OfferedQueuePair& remote) {
  if (connected_ || failed_) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RESET;
    if (int rc = ibv_modify_qp(qp_, &attr, IBV_QP_STATE); rc != 0) return refused(nic_, "resetting a queue pair", rc);
    connected_ = false;
    failed_ = false;
    in_flight_ = 0;
    TENSORHUB_RETURN_IF_ERROR(to_init());
  }
  return connect(remote_nic, remote);
}

RcQueuePair::~RcQueuePair() { ibv_destroy_qp(qp_); }

Status RcQueuePair::connect(const OfferedNic& remote_nic, const OfferedQueuePair& remote) {
  const OfferedNic& local = nic_.offered();
  read_depth_ = std::min(local.requester_depth, remote_nic.responder_depth);
  const std::uint8_t answers = std::min(local.responder_depth, remote_nic.requester_depth);
  if (read_depth_ == 0) return Status::invalid_argument("the neighbour answers no READs (read depth 0)");
  const std::uint8_t mtu = std::min(local.mtu, remote_nic.mtu);
  if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096) return Status::invalid_argument("no MTU in common");
  path_mtu_ = static_cast<ibv_mtu>(mtu);

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = path_mtu_;
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic = std::max<std::uint8_t>(answers, 1);
  attr.min_rnr_timer = settings_.min_rnr_timer;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.port_num = 1;
  attr.ah_attr.grh.hop_limit = 64;
  attr.ah_attr.grh.sgid_index = 0;
  std::copy(remote_nic.gid.begin(), remote_nic.gid.end(), attr.ah_attr.grh.dgid.raw);
  if (int rc = ibv_modify_qp(qp_, &attr,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
      rc != 0) {
    return refused(nic_, "moving a queue pair to RTR", rc);
  }
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = psn_;
  attr.timeout = settings_.timeout;
  attr.retry_cnt = settings_.retry_count;
  attr.rnr_retry = settings_.rnr_retry;
  attr.max_rd_atomic = read_depth_;
  if (int rc = ibv_modify_qp(qp_, &attr,
                             IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_MAX_QP_RD_ATOMIC);
      rc != 0) {
    return refused(nic_, "moving a queue pair to RTS", rc);
  }
  connected_ = true;
  return Status::ok();
}

Status RcQueuePair::post_reads(std::span<const ReadWork> reads, std::size_t* taken) {
  if (taken != nullptr) *taken = reads.size();
  assert(connected_ && reads.size() <= credits());
  if (reads.empty()) return Status::ok();
  wrs_.assign(reads.size(), ibv_send_wr{});
  for (std::size_t i = 0; i < reads.size(); ++i) {
    ibv_send_wr& wr = wrs_[i];
    wr.wr_id = reads[i].wr_id;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = const_cast<ibv_sge*>(reads[i].local.data());
    wr.num_sge = static_cast<int>(reads[i].local.size());
    wr.wr.rdma.remote_addr = reads[i].remote_addr;
    wr.wr.rdma.rkey = reads[i].rkey;
    wr.next = i + 1 < reads.size() ? &wrs_[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp_, wrs_.data(), &bad); rc != 0) {
    const std::size_t posted = bad == nullptr ? 0 : static_cast<std::size_t>(bad - wrs_.data());
    in_flight_ += static_cast<std::uint32_t>(posted);
    if (taken != nullptr) *taken = posted;
    return refused(nic_, "posting READs", rc);
  }
  in_flight_ += static_cast<std::uint32_t>(reads.size());
  return Status::ok();
}

void RcQueuePair::on_completion(bool success) {
  if (in_flight_ > 0) --in_flight_;
  if (!success) failed_ = true;
}

}  // namespace tensorhub::rdma
