// The verbs contract the RDMA transport relies on, run against softverbs
// in CI (tests/softverbs) and written to run against a real device: what a
// READ moves, what the queue pair state machine demands, how access
// violations, deregistration, a dead holder, the read depth and port errors
// show up. The cases choose devices and inject faults through softverbs'
// control functions (softverbs.h); docs/rdma.md lists which cases need
// none, for a run against a real device.
#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "rdma/rc_queue_pair.hpp"
#include "rdma/read_failure.hpp"
#include "rdma/read_plan.hpp"
#include "rdma/registered_regions.hpp"
#include "rdma/verbs_nic.hpp"
#include "softverbs/softverbs.h"
#include "tensorhub/devices.hpp"

using namespace tensorhub;
using namespace tensorhub::rdma;

namespace {

// `count` NICs: made by softverbs, or the device's own; none (the case
// is skipped) on a device with fewer.
std::vector<std::unique_ptr<VerbsNic>> open_nics(int count) {
  softverbs_configure(count);
  softverbs_reset_stats();
  softverbs_set_read_delay_us(0);
  softverbs_fail_next_reads(0, 0);
  std::string note;
  auto nics = VerbsNic::open_active(note);
  if (softverbs_active()) {
    REQUIRE_MESSAGE(static_cast<int>(nics.size()) == count, note);
  } else if (static_cast<int>(nics.size()) < count) {
    MESSAGE("skipped: needs " << count << " NIC(s) with an active port; " << nics.size() << " here " << note);
    return {};
  } else {
    nics.resize(static_cast<std::size_t>(count));
  }
  return nics;
}

// True (and the case is skipped) on a real device: the case injects
// faults or slows READs through softverbs.
bool softverbs_only() {
  if (softverbs_active()) return false;
  MESSAGE("skipped: needs softverbs' fault injection");
  return true;
}

void fill_pattern(std::vector<std::byte>& v, std::uint32_t seed) {
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x);
  }
}

// Waits up to `seconds` for `n` completions on `nic`.
std::vector<ibv_wc> wait_for(VerbsNic& nic, std::size_t n, double seconds = 10) {
  std::vector<ibv_wc> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  nic.drain(out);
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
    pollfd p{nic.completion_fd(), POLLIN, 0};
    ::poll(&p, 1, 100);
    nic.drain(out);
  }
  return out;
}

// Two queue pairs connected to each other: `fetcher` READs from the memory
// the other end's process registered.
struct Connected {
  std::unique_ptr<RcQueuePair> fetcher, holder;
};
Connected connect_pair(VerbsNic& a, VerbsNic& b) {
  Connected c;
  auto f = RcQueuePair::create(a, 0x1111);
  auto h = RcQueuePair::create(b, 0x2222);
  REQUIRE(f.is_ok());
  REQUIRE(h.is_ok());
  c.fetcher = std::move(*f);
  c.holder = std::move(*h);
  REQUIRE(c.fetcher->connect(b.offered(), c.holder->offered(0)).is_ok());
  REQUIRE(c.holder->connect(a.offered(), c.fetcher->offered(0)).is_ok());
  return c;
}

ReadWork read_of(std::uint64_t id, const MemoryRegistration& local, void* to, std::uint32_t length,
                 std::uint64_t remote, std::uint32_t rkey) {
  ReadWork w;
  w.wr_id = id;
  w.remote_addr = remote;
  w.rkey = rkey;
  w.local.push_back(ibv_sge{reinterpret_cast<std::uintptr_t>(to), length, local.lkey()});
  return w;
}

// A queue pair made with raw verbs, in RESET, for the cases that drive
// verbs directly.
ibv_qp* raw_qp(VerbsNic& nic, std::uint32_t max_send_wr) {
  ibv_qp_init_attr init{};
  init.send_cq = nic.cq();
  init.recv_cq = nic.cq();
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = max_send_wr;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  return ibv_create_qp(nic.pd(), &init);
}

}  // namespace

TEST_CASE("verbs contract: READs copy the holder's bytes, in order per queue pair") {
  auto nics = open_nics(1);
  if (nics.empty()) return;
  VerbsNic& nic = *nics[0];
  Connected c = connect_pair(nic, nic);
  CHECK(c.fetcher->read_depth() == 16);
  CHECK(c.fetcher->path_mtu() == IBV_MTU_4096);
  std::vector<std::byte> source(4 << 20), dest(4 << 20);
  fill_pattern(source, 1);
  auto src = nic.register_memory(source.data(), source.size(), Access::kRemoteRead);
  auto dst = nic.register_memory(dest.data(), dest.size(), Access::kLocalWrite);
  REQUIRE(src.is_ok());
  REQUIRE(dst.is_ok());
  std::vector<ReadWork> reads;
  for (std::uint32_t i = 0; i < 4; ++i) {
    reads.push_back(read_of(i, *dst, dest.data() + (i << 20), 1 << 20,
                            src->begin() + (std::uint64_t{3 - i} << 20), src->rkey()));  // reversed
  }
  REQUIRE(c.fetcher->post_reads(reads).is_ok());
  CHECK(c.fetcher->in_flight() == 4);
  auto done = wait_for(nic, 4);
  REQUIRE(done.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(done[i].status == IBV_WC_SUCCESS);
    CHECK(done[i].wr_id == i);  // in order per queue pair
    CHECK(done[i].opcode == IBV_WC_RDMA_READ);
    CHECK(done[i].byte_len == (1u << 20));
    c.fetcher->on_completion(true);
    CHECK(std::memcmp(dest.data() + (i << 20), source.data() + ((3 - i) << 20), 1 << 20) == 0);
  }
  CHECK(c.fetcher->credits() == 16);
}

TEST_CASE("verbs contract: the device list shows each port's state, MTU and GID") {
  if (softverbs_only()) return;
  softverbs_configure(2);
  const RdmaDevices listed = list_rdma_devices();
  REQUIRE(listed.devices.size() == 2);
  CHECK(listed.devices[1].name == "softverbs1");
  REQUIRE(listed.devices[0].ports.size() == 1);
  const RdmaPortInfo& port = listed.devices[0].ports[0];
  CHECK(port.state == "active");
  CHECK(port.active_mtu == 4096);
  CHECK(port.gid.size() == 39);  // 8 groups of 4 hex digits
  CHECK(port.gid.rfind("fe80:", 0) == 0);
  softverbs_configure(0);
  CHECK(list_rdma_devices().note == "no RDMA device on this machine");
}

TEST_CASE("verbs contract: the queue pair state machine demands each transition's attributes") {
  auto nics = open_nics(1);
  if (nics.empty()) return;
  VerbsNic& nic = *nics[0];
  ibv_qp* qp = raw_qp(nic, 16);
  REQUIRE(qp != nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE) != 0);  // RESET -> RTR skips INIT
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PORT) != 0);  // without access flags and pkey
  attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;
  REQUIRE(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  // Posting before RTS is refused.
  std::vector<std::byte> buf(64);
  auto mr = nic.register_memory(buf.data(), buf.size(), Access::kLocalWrite);
  REQUIRE(mr.is_ok());
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(buf.data()), 64, mr->lkey()};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_READ;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_send_wr* bad = nullptr;
  CHECK(ibv_post_send(qp, &wr, &bad) != 0);
  CHECK(bad == &wr);
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_4096;
  attr.dest_qp_num = qp->qp_num;
  attr.max_dest_rd_atomic = 16;
  attr.min_rnr_timer = 12;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.port_num = 1;
  std::copy(nic.offered().gid.begin(), nic.offered().gid.end(), attr.ah_attr.grh.dgid.raw);
  // Without the address vector, then with an attribute RTR does not take.
  CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0);
  CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN) != 0);
  CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
  ibv_qp_attr got{};
  ibv_qp_init_attr got_init{};
  REQUIRE(ibv_query_qp(qp, &got, IBV_QP_STATE, &got_init) == 0);
  CHECK(got.qp_state == IBV_QPS_RTR);
  attr.qp_state = IBV_QPS_ERR;
  CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE) == 0);  // anything -> ERR takes the state alone
  CHECK(ibv_destroy_qp(qp) == 0);
}

TEST_CASE("verbs contract: access violations fail the READ and flush the queue behind it") {
  auto nics = open_nics(1);
  if (nics.empty()) return;
  VerbsNic& nic = *nics[0];
  std::vector<std::byte> source(1 << 20), dest(1 << 20);
  fill_pattern(source, 2);
  auto readable = nic.register_memory(source.data(), source.size() / 2, Access::kRemoteRead);
  auto local_only = nic.register_memory(source.data() + source.size() / 2, source.size() / 2, Access::kLocalWrite);
  auto dst = nic.register_memory(dest.data(), dest.size(), Access::kLocalWrite);
  REQUIRE(readable.is_ok());
  REQUIRE(local_only.is_ok());
  REQUIRE(dst.is_ok());
  struct Case {
    const char* what;
    std::uint64_t remote;
    std::uint32_t rkey;
    std::uint32_t length;
    ibv_wc_status expect;
  };
  const Case cases[] = {
      {"a wrong rkey", readable->begin(), readable->rkey() ^ 0x5a, 4096, IBV_WC_REM_ACCESS_ERR},
      {"past the region's end", readable->begin() + readable->size() - 100, readable->rkey(), 4096,
       IBV_WC_REM_ACCESS_ERR},
      {"a region without REMOTE_READ", local_only->begin(), local_only->rkey(), 4096, IBV_WC_REM_ACCESS_ERR},
  };
  for (const Case& k : cases) {
    CAPTURE(k.what);
    Connected c = connect_pair(nic, nic);
    const ReadWork reads[] = {read_of(1, *dst, dest.data(), k.length, k.remote, k.rkey),
                              read_of(2, *dst, dest.data(), 4096, readable->begin(), readable->rkey())};
    REQUIRE(c.fetcher->post_reads(reads).is_ok());
    auto done = wait_for(nic, 2);
    REQUIRE(done.size() == 2);
    CHECK(done[0].status == k.expect);
    CHECK(done[1].status == IBV_WC_WR_FLUSH_ERR);  // the queue pair is in ERR now
    CHECK(classify_completion(done[0].status) == ReadFailure::kOtherHolder);
    CHECK(classify_completion(done[1].status) == ReadFailure::kFlushed);
  }
  // A local scatter entry outside any LOCAL_WRITE region is the fetcher's fault.
  Connected c = connect_pair(nic, nic);
  ReadWork bad = read_of(3, *dst, dest.data(), 4096, readable->begin(), readable->rkey());
  bad.local[0].lkey = readable->lkey();  // REMOTE_READ only: the NIC may not write there
  REQUIRE(c.fetcher->post_reads(std::span(&bad, 1)).is_ok());
  auto done = wait_for(nic, 1);
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == IBV_WC_LOC_PROT_ERR);
  CHECK(classify_completion(done[0].status) == ReadFailure::kOtherNic);
}

TEST_CASE("verbs contract: dma-buf regions: READs from and into them, bounded by the region, not its pages") {
  // On hardware a dma-buf comes from a GPU (tests/gpu/run and rdma-bench
  // --gpu check that); here softverbs takes a memfd for one.
  if (softverbs_only()) return;
  auto nics = open_nics(1);
  if (nics.empty()) return;
  VerbsNic& nic = *nics[0];
  constexpr std::size_t kBytes = 4 * 4096;
  // Device-like memory: its addresses (the iova) are reserved PROT_NONE, so
  // a CPU touch would crash; its bytes are reached through the memfd.
  struct DeviceLike {
    int fd = ::memfd_create("contract", MFD_CLOEXEC);
    std::byte* view = nullptr;
    std::byte* iova = nullptr;
    DeviceLike() {
      REQUIRE(::ftruncate(fd, kBytes) == 0);
      view = static_cast<std::byte*>(::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
      iova = static_cast<std::byte*>(::mmap(nullptr, kBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    }
    ~DeviceLike() {
      ::munmap(view, kBytes);
      ::munmap(iova, kBytes);
      ::close(fd);
    }
    peer::DmaBuf buf(std::uint64_t offset) const { return peer::DmaBuf(::dup(fd), offset); }
  } holder, fetcher;
  std::vector<std::byte> pattern(kBytes);
  fill_pattern(pattern, 7);
  std::memcpy(holder.view, pattern.data(), kBytes);
  // Regions 512 bytes into a page, 2 pages long: their pages are 3.
  constexpr std::size_t kRegion = 2 * 4096;
  auto src = nic.register_dma_buf(holder.buf(512), kRegion, reinterpret_cast<std::uintptr_t>(holder.iova + 512),
                                  Access::kRemoteRead);
  auto dst = nic.register_dma_buf(fetcher.buf(512), kRegion, reinterpret_cast<std::uintptr_t>(fetcher.iova + 512),
                                  Access::kLocalWrite);
  REQUIRE(src.is_ok());
  REQUIRE(dst.is_ok());
  CHECK(src->begin() == reinterpret_cast<std::uintptr_t>(holder.iova + 512));  // keys address the iova
  Connected c = connect_pair(nic, nic);
  const ReadWork whole[] = {read_of(1, *dst, fetcher.iova + 512, kRegion, src->begin(), src->rkey())};
  REQUIRE(c.fetcher->post_reads(whole).is_ok());
  auto done = wait_for(nic, 1);
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == IBV_WC_SUCCESS);
  CHECK(std::memcmp(fetcher.view + 512, pattern.data() + 512, kRegion) == 0);
  CHECK(std::to_integer<int>(fetcher.view[511]) == 0);  // nothing outside the region was written
  CHECK(std::to_integer<int>(fetcher.view[512 + kRegion]) == 0);
  // Past the region's end, though still inside its last page: refused.
  Connected d = connect_pair(nic, nic);
  const ReadWork past[] = {read_of(2, *dst, fetcher.iova + 512, 200, src->begin() + kRegion - 100, src->rkey())};
  REQUIRE(d.fetcher->post_reads(past).is_ok());
  done = wait_for(nic, 1);
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == IBV_WC_REM_ACCESS_ERR);
  // An iova placed elsewhere in its page than the offset is refused, as hardware refuses it.
  CHECK_FALSE(nic.register_dma_buf(holder.buf(512), kRegion, reinterpret_cast<std::uintptr_t>(holder.iova),
                                   Access::kRemoteRead)
                  .is_ok());
  // As is a file the device cannot map.
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  ::close(pipe_fds[1]);
  CHECK_FALSE(nic.register_dma_buf(peer::DmaBuf(pipe_fds[0], 0), 4096, reinterpret_cast<std::uintptr_t>(holder.iova),
                                   Access::kRemoteRead)
                  .is_ok());
  CHECK(softverbs_get_stats().dma_buf_registrations == 2);
}

TEST_CASE("verbs contract: a region deregistered while READs are in flight is never read after") {
  if (softverbs_only()) return;
  auto nics = open_nics(1);
  if (nics.empty()) return;
  VerbsNic& nic = *nics[0];
  Connected c = connect_pair(nic, nic);
  auto source = std::make_unique<std::vector<std::byte>>(16 << 20);
  fill_pattern(*source, 3);
  std::vector<std::byte> dest(16 << 20);
  auto src = nic.register_memory(source->data(), source->size(), Access::kRemoteRead);
  auto dst = nic.register_memory(dest.data(), dest.size(), Access::kLocalWrite);
  REQUIRE(src.is_ok());
  REQUIRE(dst.is_ok());
  // One READ at a time, 10 ms each: the deregistration comes once the first
  // has landed, with the other 15 (150 ms of them) still queued, however
  // loaded the machine.
  softverbs_set_read_delay_us(10000);
  std::vector<ReadWork> reads;
  for (std::uint32_t i = 0; i < 16; ++i) {
    reads.push_back(read_of(i, *dst, dest.data() + (i << 20), 1 << 20, src->begin() + (std::uint64_t{i} << 20),
                            src->rkey()));
  }
  REQUIRE(c.fetcher->post_reads(reads).is_ok());
  auto done = wait_for(nic, 1);
  REQUIRE_FALSE(done.empty());
  src->reset();  // returns once no READ copies from it
  std::vector<std::byte> copy = *source;
  source.reset();  // freed: a READ after the deregistration would touch freed memory
  for (const ibv_wc& wc : wait_for(nic, 16 - done.size())) done.push_back(wc);
  softverbs_set_read_delay_us(0);
  REQUIRE(done.size() == 16);
  std::size_t good = 0;
  for (const ibv_wc& wc : done) {
    if (wc.status == IBV_WC_SUCCESS) {
      ++good;
      CHECK(std::memcmp(dest.data() + (wc.wr_id << 20), copy.data() + (wc.wr_id << 20), 1 << 20) == 0);
    } else {
      CHECK((wc.status == IBV_WC_REM_ACCESS_ERR || wc.status == IBV_WC_WR_FLUSH_ERR));
    }
  }
  CHECK(good >= 1);   // those before the deregistration landed
  CHECK(good < 16);   // those after it failed
}

TEST_CASE("verbs contract: the software cap keeps READs within the negotiated depth") {
  if (softverbs_only()) return;
  auto nics = open_nics(1);
  if (nics.empty()) return;
  VerbsNic& nic = *nics[0];
  Connected c = connect_pair(nic, nic);
  std::vector<std::byte> source(64 << 10), dest(64 << 10);
  auto src = nic.register_memory(source.data(), source.size(), Access::kRemoteRead);
  auto dst = nic.register_memory(dest.data(), dest.size(), Access::kLocalWrite);
  REQUIRE(src.is_ok());
  REQUIRE(dst.is_ok());
  softverbs_set_read_delay_us(200);
  // 200 READs through the queue pair's credits: never more than 16 out.
  std::uint64_t posted = 0, completed = 0;
  while (completed < 200) {
    std::vector<ReadWork> batch;
    while (posted < 200 && batch.size() < c.fetcher->credits()) {
      batch.push_back(read_of(posted++, *dst, dest.data(), 4096, src->begin(), src->rkey()));
    }
    REQUIRE(c.fetcher->post_reads(batch).is_ok());
    for (const ibv_wc& wc : wait_for(nic, 1)) {
      CHECK(wc.status == IBV_WC_SUCCESS);
      c.fetcher->on_completion(wc.status == IBV_WC_SUCCESS);
      ++completed;
    }
  }
  softverbs_stats s = softverbs_get_stats();
  CHECK(s.depth_exceeded == 0);
  CHECK(s.max_reads_in_flight == 16);
  // Without the cap the device would hold READs back: softverbs counts it.
  softverbs_reset_stats();
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(dest.data()), 4096, dst->lkey()};
  std::vector<ibv_send_wr> wrs(20);
  for (std::size_t i = 0; i < wrs.size(); ++i) {
    wrs[i].opcode = IBV_WR_RDMA_READ;
    wrs[i].sg_list = &sge;
    wrs[i].num_sge = 1;
    wrs[i].send_flags = IBV_SEND_SIGNALED;
    wrs[i].wr.rdma.remote_addr = src->begin();
    wrs[i].wr.rdma.rkey = src->rkey();
    wrs[i].next = i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  // The uncapped post goes through a queue pair of its own, looped to itself.
  ibv_qp* qp = raw_qp(nic, 64);
  REQUIRE(qp != nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;
  REQUIRE(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_4096;
  attr.dest_qp_num = qp->qp_num;  // looped to itself
  attr.max_dest_rd_atomic = 16;
  attr.min_rnr_timer = 12;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.port_num = 1;
  std::copy(nic.offered().gid.begin(), nic.offered().gid.end(), attr.ah_attr.grh.dgid.raw);
  REQUIRE(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.max_rd_atomic = 16;
  REQUIRE(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
  REQUIRE(ibv_post_send(qp, wrs.data(), &bad) == 0);
  auto done = wait_for(nic, 20);
  CHECK(done.size() == 20);
  CHECK(softverbs_get_stats().depth_exceeded > 0);
  softverbs_set_read_delay_us(0);
  ibv_destroy_qp(qp);
}

TEST_CASE("verbs contract: blocks striped over two NICs and two queue pairs each") {
  auto nics = open_nics(2);
  if (nics.empty()) return;
  std::vector<VerbsNic*> raw = {nics[0].get(), nics[1].get()};
  // The holder's image: three regions, as a version's may be.
  std::vector<std::byte> a(3 << 20), b(1 << 20), c3(4 << 20);
  fill_pattern(a, 4);
  fill_pattern(b, 5);
  fill_pattern(c3, 6);
  const std::span<std::byte> image[] = {a, b, c3};
  auto held = RegisteredRegions::register_on(raw, image, Access::kRemoteRead);
  REQUIRE(held.is_ok());
  const std::vector<GrantRegion> grant = held->grant();
  REQUIRE(grant.size() == 3);
  CHECK(grant[0].rkeys.size() == 2);
  // The fetcher's destination: two regions of its own.
  std::vector<std::byte> d1(5 << 20), d2(3 << 20);
  const std::span<std::byte> dest[] = {d1, d2};
  auto landing = RegisteredRegions::register_on(raw, dest, Access::kLocalWrite);
  REQUIRE(landing.is_ok());
  std::vector<Connected> links;
  for (std::size_t n = 0; n < 2; ++n) {
    for (int q = 0; q < 2; ++q) links.push_back(connect_pair(*nics[n], *nics[n]));
  }
  // 8 blocks of 1 MiB, block k on link k % 4 (NIC k % 4 / 2).
  std::size_t reads_posted = 0;
  for (std::uint64_t k = 0; k < 8; ++k) {
    const std::size_t link = k % 4, nic = link / 2;
    std::vector<std::span<std::byte>> to;
    const std::uint64_t at = k << 20;
    if (at < d1.size()) to.push_back(std::span(d1).subspan(at, 1 << 20));
    else to.push_back(std::span(d2).subspan(at - d1.size(), 1 << 20));
    auto plan = plan_reads(grant, at, 1 << 20, to, nics[nic]->max_sge());
    REQUIRE(plan.is_ok());
    std::vector<ReadWork> work;
    for (const PlannedRead& p : *plan) {
      ReadWork w;
      w.wr_id = k;
      w.remote_addr = p.remote_addr;
      w.rkey = grant[p.region].rkeys[nic];
      for (auto s : p.local) {
        auto lkey = landing->lkey(nic, s.data(), s.size());
        REQUIRE(lkey.has_value());
        w.local.push_back(ibv_sge{reinterpret_cast<std::uintptr_t>(s.data()), static_cast<std::uint32_t>(s.size()), *lkey});
      }
      work.push_back(std::move(w));
    }
    REQUIRE(links[link].fetcher->post_reads(work).is_ok());
    reads_posted += work.size();
  }
  std::size_t got = wait_for(*nics[0], 4).size() + wait_for(*nics[1], 4).size();
  CHECK(got == reads_posted);
  std::vector<std::byte> whole, landed;
  for (auto s : image) whole.insert(whole.end(), s.begin(), s.end());
  landed.insert(landed.end(), d1.begin(), d1.end());
  landed.insert(landed.end(), d2.begin(), d2.end());
  CHECK(landed == whole);
}

TEST_CASE("verbs contract: a port error moves its queue pairs to ERR and says so") {
  if (softverbs_only()) return;
  auto nics = open_nics(1);
  if (nics.empty()) return;
  VerbsNic& nic = *nics[0];
  Connected c = connect_pair(nic, nic);
  CHECK(nic.port_active());
  softverbs_post_async_event(0, IBV_EVENT_PORT_ERR);
  ibv_async_event event{};
  REQUIRE(ibv_get_async_event(nic.context(), &event) == 0);
  CHECK(event.event_type == IBV_EVENT_PORT_ERR);
  ibv_ack_async_event(&event);
  CHECK_FALSE(nic.port_active());
  std::vector<std::byte> buf(4096);
  auto mr = nic.register_memory(buf.data(), buf.size(), Access::kLocalWrite);
  auto src = nic.register_memory(buf.data(), buf.size(), Access::kRemoteRead);
  REQUIRE(mr.is_ok());
  REQUIRE(src.is_ok());
  const ReadWork w = read_of(9, *mr, buf.data(), 64, src->begin(), src->rkey());
  REQUIRE(c.fetcher->post_reads(std::span(&w, 1)).is_ok());
  auto done = wait_for(nic, 1);
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == IBV_WC_WR_FLUSH_ERR);
}

namespace {

// Length-prefixed messages over a pipe, for the cross-process cases.
void put(int fd, const std::vector<std::uint8_t>& bytes) {
  const std::uint32_t n = static_cast<std::uint32_t>(bytes.size());
  REQUIRE(::write(fd, &n, 4) == 4);
  REQUIRE(::write(fd, bytes.data(), n) == static_cast<ssize_t>(n));
}
std::vector<std::uint8_t> get(int fd) {
  std::uint32_t n = 0;
  if (::read(fd, &n, 4) != 4 || n > (1u << 20)) return {};
  std::vector<std::uint8_t> out(n);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t r = ::read(fd, out.data() + done, n - done);
    if (r <= 0) return {};
    done += static_cast<std::size_t>(r);
  }
  return out;
}

// CPU time a process has used, in clock ticks.
long cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = s.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(s.substr(close + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return utime + stime;
}

// The holder: registers 64 MiB, offers a queue pair and grants the memory,
// connects to the fetcher's, then sleeps until killed. It runs no code to
// serve the READs.
[[noreturn]] void run_holder(int to_parent, int from_parent) {
  std::string note;
  auto nics = VerbsNic::open_active(note);
  if (nics.empty()) _exit(2);
  std::vector<std::byte> image(64 << 20);
  fill_pattern(image, 7);
  VerbsNic* raw[] = {nics[0].get()};
  const std::span<std::byte> regions[] = {image};
  auto held = RegisteredRegions::register_on(raw, regions, Access::kRemoteRead);
  auto qp = RcQueuePair::create(*nics[0], 0x3333);
  if (!held || !qp) _exit(3);
  put(to_parent, encode_rdma_message(RdmaMessage::offer({nics[0]->offered()}, {(*qp)->offered(0)})));
  put(to_parent, encode_rdma_message(RdmaMessage::grant(ManifestId{}, held->grant())));
  auto theirs = decode_rdma_message(get(from_parent));
  if (!theirs || (*qp)->connect(theirs->nics[0], theirs->queue_pairs[0]).is_ok() == false) _exit(4);
  put(to_parent, encode_rdma_message(RdmaMessage::ready()));
  for (;;) ::pause();
}

}  // namespace

TEST_CASE("verbs contract: READs from a passive holder process, and its death mid-READ") {
  ::setenv("SOFTVERBS_DEVICES", "1", 1);
  auto nics = open_nics(1);
  if (nics.empty()) return;
  VerbsNic& nic = *nics[0];
  int up[2], down[2];
  REQUIRE(::pipe(up) == 0);
  REQUIRE(::pipe(down) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(up[0]);
    ::close(down[1]);
    run_holder(up[1], down[0]);
  }
  ::close(up[1]);
  ::close(down[0]);
  struct Reap {
    pid_t pid;
    ~Reap() {
      if (pid <= 0) return;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reap{child};
  auto offer = decode_rdma_message(get(up[0]));
  auto grant = decode_rdma_message(get(up[0]));
  REQUIRE(offer.is_ok());
  REQUIRE(grant.is_ok());
  REQUIRE(grant->regions.size() == 1);
  auto qp = RcQueuePair::create(nic, 0x4444);
  REQUIRE(qp.is_ok());
  REQUIRE((*qp)->connect(offer->nics[0], offer->queue_pairs[0]).is_ok());
  put(down[1], encode_rdma_message(RdmaMessage::offer({nic.offered()}, {(*qp)->offered(0)})));
  auto ready = decode_rdma_message(get(up[0]));
  REQUIRE(ready.is_ok());
  CHECK(ready->kind == RdmaMessageKind::kReady);

  std::vector<std::byte> dest(64 << 20), expect(64 << 20);
  fill_pattern(expect, 7);
  auto dst = nic.register_memory(dest.data(), dest.size(), Access::kLocalWrite);
  REQUIRE(dst.is_ok());
  const GrantRegion& g = grant->regions[0];
  const long ticks_before = cpu_ticks(child);
  std::uint64_t next = 0, completed = 0;
  while (completed < 64) {
    std::vector<ReadWork> batch;
    while (next < 64 && batch.size() < (*qp)->credits()) {
      batch.push_back(read_of(next, *dst, dest.data() + (next << 20), 1 << 20, g.addr + (next << 20), g.rkeys[0]));
      ++next;
    }
    REQUIRE((*qp)->post_reads(batch).is_ok());
    for (const ibv_wc& wc : wait_for(nic, 1)) {
      REQUIRE(wc.status == IBV_WC_SUCCESS);
      (*qp)->on_completion(true);
      ++completed;
    }
  }
  const long ticks_after = cpu_ticks(child);
  CHECK(dest == expect);
  // The holder slept through 64 MiB of READs.
  CHECK(ticks_after - ticks_before <= 1);
  MESSAGE("holder CPU ticks during 64 MiB of READs: " << ticks_after - ticks_before);

  // Killed mid-READ: what is queued fails as a path that gave up.
  if (softverbs_only()) return;
  softverbs_set_read_delay_us(3000);
  std::vector<ReadWork> batch;
  for (std::uint64_t i = 0; i < 8; ++i) {
    batch.push_back(read_of(100 + i, *dst, dest.data() + (i << 20), 1 << 20, g.addr + (i << 20), g.rkeys[0]));
  }
  REQUIRE((*qp)->post_reads(batch).is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(4));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  reap.pid = -1;
  auto done = wait_for(nic, 8);
  softverbs_set_read_delay_us(0);
  REQUIRE(done.size() == 8);
  std::size_t retry_exceeded = 0, flushed = 0;
  for (const ibv_wc& wc : done) {
    if (wc.status == IBV_WC_RETRY_EXC_ERR) ++retry_exceeded;
    if (wc.status == IBV_WC_WR_FLUSH_ERR) ++flushed;
  }
  CHECK(retry_exceeded == 1);
  CHECK(flushed >= 1);
  CHECK(classify_completion(IBV_WC_RETRY_EXC_ERR) == ReadFailure::kReconnect);
}
