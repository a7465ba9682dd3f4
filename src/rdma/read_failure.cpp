#include "rdma/read_failure.hpp"

namespace tensorhub::rdma {

ReadFailure classify_completion(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS: return ReadFailure::kNone;
    case IBV_WC_WR_FLUSH_ERR: return ReadFailure::kFlushed;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
    case IBV_WC_REM_ABORT_ERR: return ReadFailure::kReconnect;
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_QP_OP_ERR:
    case IBV_WC_LOC_EEC_OP_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
    case IBV_WC_MW_BIND_ERR:
    case IBV_WC_LOC_RDD_VIOL_ERR: return ReadFailure::kOtherNic;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_INV_RD_REQ_ERR: return ReadFailure::kOtherHolder;
    default: return ReadFailure::kTcpFallback;  // bad response, remote op error, fatal, general, unknown
  }
}

std::string_view read_failure_name(ReadFailure failure) {
  switch (failure) {
    case ReadFailure::kNone: return "none";
    case ReadFailure::kFlushed: return "flushed";
    case ReadFailure::kReconnect: return "reconnect";
    case ReadFailure::kOtherNic: return "other NIC";
    case ReadFailure::kOtherHolder: return "other holder";
    case ReadFailure::kTcpFallback: return "TCP fallback";
  }
  return "unknown";
}

PathHealth::Verdict PathHealth::on_completion(ReadFailure failure) {
  if (on_tcp_) return Verdict::kUseTcp;
  switch (failure) {
    case ReadFailure::kNone:
      reconnects_in_a_row_ = 0;
      return Verdict::kKeep;
    case ReadFailure::kFlushed:
    case ReadFailure::kOtherHolder:
    case ReadFailure::kOtherNic: return Verdict::kKeep;
    case ReadFailure::kReconnect:
      if (++reconnects_in_a_row_ <= kMaxReconnects) return Verdict::kReconnect;
      on_tcp_ = true;
      return Verdict::kUseTcp;
    case ReadFailure::kTcpFallback:
      on_tcp_ = true;
      return Verdict::kUseTcp;
  }
  return Verdict::kKeep;
}

}  // namespace tensorhub::rdma
