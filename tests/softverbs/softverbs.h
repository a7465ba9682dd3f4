// softverbs: a fake of the libibverbs entry points TensorHub's RDMA
// transport uses, linked into test binaries instead of -libverbs, so the
// production verbs code runs unmodified on machines without a NIC.
//
// What it models, as hardware enforces it:
// - devices (SOFTVERBS_DEVICES=N in the environment, or softverbs_configure;
//   none by default), one active RoCE port each, 4096 MTU, read depth 16;
// - the RC queue pair state machine RESET -> INIT -> RTR -> RTS (and ERR,
//   RESET from anywhere) with the attribute masks each transition requires:
//   a missing or extra attribute is EINVAL, as the kernel answers;
// - memory regions: lkeys and rkeys, access flags, bounds; dma-buf
//   regions (ibv_reg_dmabuf_mr) of any file it can map, such as the fake
//   GPU's memfd: keys address the iova, READs copy through softverbs' own
//   mapping of the file, and the iova must sit where the offset sits in
//   its page;
// - RDMA READ as the requester sees it: the responder's queue pair must be
//   connected back to the requester's and allow remote reads, the rkey
//   must name a region of the responder queue pair's protection domain that
//   grants REMOTE_READ and holds the whole range, the local scatter list
//   must lie in LOCAL_WRITE regions of the requester's domain. A remote
//   violation completes with IBV_WC_REM_ACCESS_ERR, a local one with
//   IBV_WC_LOC_PROT_ERR; either moves the queue pair to ERR, and every work
//   request behind it completes with IBV_WC_WR_FLUSH_ERR. A responder
//   whose process is gone, or whose queue pair was destroyed, completes
//   with IBV_WC_RETRY_EXC_ERR;
// - completions in order per queue pair, through a completion channel
//   (an eventfd) when the CQ is armed;
// - async events (port error, device fatal) posted by the test.
//
// READs run on one thread per opened device and copy with
// process_vm_readv from the responder process, whose regions and queue
// pairs are published in a shared-memory table (/dev/shm/softverbs.<pid>,
// removed at exit, and by the next table made once its process is gone):
// the responder runs no code to serve a read. Deregistering a region waits
// for the READs copying from it to finish, as ibv_dereg_mr does on
// hardware, so memory freed after it is never read.
//
// The read depth is not enforced by stalling (the engine copies one READ at
// a time): the fake counts, per queue pair, the most READs posted and not
// yet completed, and how often that exceeded the queue pair's
// max_rd_atomic, so tests assert that the software cap holds.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// 1 in softverbs; 0 in softverbs_absent.cpp, the stand-in that lets the
// contract suite run against a real device (every control is a no-op).
int softverbs_active(void);

// Sets the number of devices ibv_get_device_list reports (0 to 8).
// REQUIRES: no device of this process is open.
void softverbs_configure(int devices);

struct softverbs_stats {
  uint64_t reads_completed;     // READs that copied their bytes
  uint64_t bytes_read;
  uint64_t reads_failed;        // READs completed with an error (flushes excluded)
  uint64_t depth_exceeded;      // posts that took a queue pair past its max_rd_atomic
  uint32_t max_reads_in_flight; // over all queue pairs, the most outstanding on one
  uint64_t dma_buf_registrations; // ibv_reg_dmabuf_mr calls that succeeded
};
struct softverbs_stats softverbs_get_stats(void);
void softverbs_reset_stats(void);

// Each READ takes at least this long (0: as fast as the copy;
// SOFTVERBS_READ_DELAY_US in the environment sets it at start).
void softverbs_set_read_delay_us(uint32_t microseconds);
// The next `count` READs complete with `status` (an ibv_wc_status) without copying.
void softverbs_fail_next_reads(uint32_t count, int status);
// Posts an async event (an ibv_event_type) on device `index` of this
// process; IBV_EVENT_PORT_ERR also takes its port down.
void softverbs_post_async_event(int device_index, int event_type);

#ifdef __cplusplus
}
#endif
