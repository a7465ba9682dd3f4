// What a failed RDMA READ means, and what the fetcher does about it.
//
// Every work-completion status falls in one class; the class names the
// remedy. A queue pair that completes a READ with an error is in ERR: the
// READs queued behind it complete with IBV_WC_WR_FLUSH_ERR, which blames
// nobody (the first error names the cause). The block of every failed READ
// is asked for again, like a block lost with a TCP connection: by READ on a
// healthy path, or over TCP.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string_view>

namespace tensorhub::rdma {

enum class ReadFailure : std::uint8_t {
  kNone,          // success
  kFlushed,       // behind an earlier error on its queue pair: re-issue, blame nobody
  kReconnect,     // the path gave up (retries exceeded, no response): rebuild the neighbour's queue pairs
  kOtherNic,      // a local fault (our registration, our queue pair): use another local NIC
  kOtherHolder,   // the holder refused (stale or wrong key, version released): ask again elsewhere
  kTcpFallback,   // the device or the peer misbehaves: this neighbour moves to TCP
};

ReadFailure classify_completion(ibv_wc_status status);
std::string_view read_failure_name(ReadFailure failure);

// One neighbour's RDMA path: whether READs may go over it, from the
// failures it has had. Rebuilding the queue pairs is tried up to
// kMaxReconnects times in a row; past that, or on a kTcpFallback failure,
// the neighbour uses TCP until its connection is made again. Sans-I/O.
class PathHealth {
 public:
  static constexpr std::uint32_t kMaxReconnects = 2;
  enum class Verdict : std::uint8_t { kKeep, kReconnect, kUseTcp };

  // A READ completed: successes end a run of reconnects.
  Verdict on_completion(ReadFailure failure);
  bool usable() const { return !on_tcp_; }
  std::uint32_t reconnects() const { return reconnects_in_a_row_; }

 private:
  std::uint32_t reconnects_in_a_row_ = 0;
  bool on_tcp_ = false;
};

}  // namespace tensorhub::rdma
