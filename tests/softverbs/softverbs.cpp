// softverbs: see softverbs.h for what it models.
#include "softverbs.h"

#include <dirent.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::uint64_t kMagic = 0x7362726576746673ull;  // "softverbs"
constexpr std::size_t kMaxMrs = 4096;
constexpr std::size_t kMaxQps = 2048;
constexpr std::uint32_t kQpnBase = 0x100;
constexpr int kMaxDevices = 8;
constexpr std::uint8_t kReadDepth = 16;
constexpr int kMaxSge = 4;
constexpr int kMaxQpWr = 16384;
constexpr int kMaxCqe = 1 << 20;

// The table a process publishes: what a requester in another process
// checks a READ against. Entries are written by their owner only; readers
// counts READs copying from a region, so deregistration can wait for them.
enum MrState : std::uint32_t { kMrFree = 0, kMrValid = 1, kMrDying = 2 };
struct SharedMr {
  std::atomic<std::uint32_t> state;
  std::atomic<std::uint32_t> readers;
  std::uint32_t rkey;
  std::uint32_t pd;
  std::uint32_t access;
  std::uint64_t addr;       // where the keys address it: the iova
  std::uint64_t length;
  std::uint64_t host_addr;  // where its bytes are in its owner's process
  std::uint64_t mapping;    // a dma-buf's: softverbs' own mapping of it, unmapped at deregistration
  std::uint64_t mapping_length;
};
struct SharedQp {
  std::atomic<std::uint32_t> state;  // ibv_qp_state + 1; 0: free
  std::uint32_t qpn;
  std::uint32_t pd;
  std::uint32_t access;
  std::uint32_t remote_qpn;
  std::int32_t remote_pid;
};
struct SharedTable {
  std::uint64_t magic;
  std::int32_t pid;
  SharedMr mrs[kMaxMrs];
  SharedQp qps[kMaxQps];
};

std::string table_path(pid_t pid) { return "/dev/shm/softverbs." + std::to_string(pid); }

struct FakeDevice {
  ibv_device device;  // first: the library hands out &device
  int index = 0;
};

struct FakeContext;

struct FakeChannel {
  ibv_comp_channel channel;
  std::deque<ibv_cq*> events;  // guarded by the context's mutex
};

struct FakeCq {
  ibv_cq cq;
  FakeContext* owner = nullptr;
  std::deque<ibv_wc> entries;
  bool armed = false;
};

struct PostedRead {
  std::uint64_t wr_id = 0;
  bool signaled = false;
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::vector<ibv_sge> sges;
};

struct FakeQp {
  ibv_qp qp;
  FakeContext* owner = nullptr;
  std::size_t slot = 0;
  bool sig_all = false;
  std::uint32_t max_send_wr = 0;
  std::uint8_t max_rd_atomic = 0;
  std::uint8_t max_dest_rd_atomic = 0;
  std::uint8_t port = 0;
  std::uint32_t access = 0;
  std::deque<PostedRead> sq;
  std::uint32_t outstanding = 0;
};

struct FakeContext {
  ibv_context context;  // first
  int index = 0;
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<FakeQp*> qps;
  FakeQp* executing = nullptr;
  std::size_t cursor = 0;
  bool stop = false;
  bool port_active = true;
  std::deque<ibv_async_event> async_events;
  int async_write_fd = -1;
  std::thread engine;
};

struct Process {
  pid_t pid = 0;
  int devices = 0;
  int open_contexts = 0;
  std::vector<FakeDevice*> device_list;
  SharedTable* table = nullptr;
  std::mutex mutex;  // allocations in the table; the remote tables
  std::map<pid_t, SharedTable*> remotes;
  std::uint32_t next_pd = 1;
  std::uint32_t key_salt = 1;
  std::atomic<std::uint64_t> reads_completed{0}, bytes_read{0}, reads_failed{0}, depth_exceeded{0};
  std::atomic<std::uint64_t> dma_buf_registrations{0};
  std::atomic<std::uint32_t> max_in_flight{0};
  std::atomic<std::uint32_t> read_delay_us{0};
  std::atomic<std::uint32_t> fail_count{0};
  std::atomic<int> fail_status{IBV_WC_SUCCESS};
};

void remove_table() {
  // Only the process that made it: a forked child inherits atexit handlers.
  static const pid_t creator = getpid();
  if (creator == getpid()) ::unlink(table_path(creator).c_str());
}

// This process's state; a forked child starts afresh (its parent's
// threads and locks did not come with it).
Process& proc() {
  static Process* p = nullptr;
  if (p == nullptr || p->pid != getpid()) {
    p = new Process;
    p->pid = getpid();
    if (const char* env = std::getenv("SOFTVERBS_DEVICES")) p->devices = std::atoi(env);
    if (p->devices < 0 || p->devices > kMaxDevices) p->devices = 0;
    if (const char* env = std::getenv("SOFTVERBS_READ_DELAY_US")) {
      p->read_delay_us = static_cast<std::uint32_t>(std::strtoul(env, nullptr, 10));
    }
  }
  return *p;
}

// Tables of processes that died without exiting (SIGKILLed daemons of the
// cluster tests) stay in /dev/shm: each new table removes those.
void remove_stale_tables() {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    const std::string prefix = "softverbs.";
    if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) continue;
    if (name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid <= 0 || pid == getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) ::unlink(("/dev/shm/" + name).c_str());
  }
  ::closedir(dir);
}

SharedTable* own_table() {
  Process& p = proc();
  std::lock_guard lock(p.mutex);
  if (p.table != nullptr) return p.table;
  remove_stale_tables();
  const std::string path = table_path(p.pid);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  if (::ftruncate(fd, sizeof(SharedTable)) != 0) {
    ::close(fd);
    return nullptr;
  }
  void* at = ::mmap(nullptr, sizeof(SharedTable), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (at == MAP_FAILED) return nullptr;
  auto* t = static_cast<SharedTable*>(at);
  t->pid = p.pid;
  t->magic = kMagic;
  p.table = t;
  static bool registered = false;
  if (!registered) {
    registered = true;
    std::atexit(remove_table);
  }
  return t;
}

SharedTable* table_of(pid_t pid) {
  Process& p = proc();
  if (pid == p.pid) return own_table();
  std::lock_guard lock(p.mutex);
  if (auto it = p.remotes.find(pid); it != p.remotes.end()) return it->second;
  int fd = ::open(table_path(pid).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  void* at = ::mmap(nullptr, sizeof(SharedTable), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (at == MAP_FAILED) return nullptr;
  auto* t = static_cast<SharedTable*>(at);
  if (t->magic != kMagic || t->pid != pid) {
    ::munmap(at, sizeof(SharedTable));
    return nullptr;
  }
  p.remotes[pid] = t;
  return t;
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

// A GID names the process and device: bytes 8..11 the pid, 12..15 the index.
ibv_gid gid_of(pid_t pid, int index) {
  ibv_gid g{};
  g.raw[0] = 0xfe;
  g.raw[1] = 0x80;
  const auto u = static_cast<std::uint32_t>(pid);
  for (int i = 0; i < 4; ++i) g.raw[8 + i] = static_cast<std::uint8_t>(u >> (24 - 8 * i));
  g.raw[15] = static_cast<std::uint8_t>(index);
  return g;
}
pid_t pid_of(const ibv_gid& g) {
  std::uint32_t u = 0;
  for (int i = 0; i < 4; ++i) u = (u << 8) | g.raw[8 + i];
  return static_cast<pid_t>(u);
}

void note_max(std::atomic<std::uint32_t>& m, std::uint32_t v) {
  std::uint32_t cur = m.load();
  while (v > cur && !m.compare_exchange_weak(cur, v)) {
  }
}

FakeContext* ctx_of(ibv_context* c) { return reinterpret_cast<FakeContext*>(c); }
FakeQp* qp_of(ibv_qp* q) { return reinterpret_cast<FakeQp*>(q); }
FakeCq* cq_of(ibv_cq* c) { return reinterpret_cast<FakeCq*>(c); }

// REQUIRES: the context's mutex is held.
void fire_event(FakeCq* cq) {
  if (!cq->armed || cq->cq.channel == nullptr) return;
  cq->armed = false;
  reinterpret_cast<FakeChannel*>(cq->cq.channel)->events.push_back(&cq->cq);
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(cq->cq.channel->fd, &one, sizeof one);
}

// REQUIRES: the context's mutex is held.
void push_completion(FakeCq* cq, const ibv_wc& wc) {
  cq->entries.push_back(wc);
  fire_event(cq);
}

void set_shared_state(FakeQp* q, ibv_qp_state s) {
  q->qp.state = s;
  own_table()->qps[q->slot].state.store(static_cast<std::uint32_t>(s) + 1);
}

// A local region that holds [addr, addr+length) with `access`, or null;
// on success its readers count is raised (the caller lowers it).
SharedMr* hold_region(SharedTable* t, std::uint32_t key, std::uint32_t pd, std::uint64_t addr, std::uint64_t length,
                      std::uint32_t access) {
  const std::size_t index = key >> 8;
  if (t == nullptr || index >= kMaxMrs) return nullptr;
  SharedMr& mr = t->mrs[index];
  mr.readers.fetch_add(1);
  if (mr.state.load() != kMrValid || mr.rkey != key || mr.pd != pd || (mr.access & access) != access ||
      addr < mr.addr || length > mr.length || addr - mr.addr > mr.length - length) {
    mr.readers.fetch_sub(1);
    return nullptr;
  }
  return &mr;
}

// Runs one READ of `q`; returns its completion status.
ibv_wc_status execute_read(FakeQp* q, const PostedRead& r, std::uint32_t& bytes) {
  Process& p = proc();
  bytes = 0;
  if (std::uint32_t n = p.fail_count.load(); n > 0 && p.fail_count.compare_exchange_strong(n, n - 1)) {
    return static_cast<ibv_wc_status>(p.fail_status.load());
  }
  SharedTable* own = own_table();
  SharedQp& shared = own->qps[q->slot];
  const pid_t remote = shared.remote_pid;
  if (!process_alive(remote)) return IBV_WC_RETRY_EXC_ERR;
  SharedTable* t = table_of(remote);
  if (t == nullptr) return IBV_WC_RETRY_EXC_ERR;
  const std::uint32_t ridx = shared.remote_qpn - kQpnBase;
  if (shared.remote_qpn < kQpnBase || ridx >= kMaxQps) return IBV_WC_RETRY_EXC_ERR;
  SharedQp& responder = t->qps[ridx];
  const std::uint32_t rstate = responder.state.load();
  if ((rstate != IBV_QPS_RTR + 1 && rstate != IBV_QPS_RTS + 1) || responder.qpn != shared.remote_qpn ||
      responder.remote_qpn != q->qp.qp_num || responder.remote_pid != p.pid) {
    return IBV_WC_RETRY_EXC_ERR;  // nobody answers for that queue pair
  }
  if ((responder.access & IBV_ACCESS_REMOTE_READ) == 0) return IBV_WC_REM_ACCESS_ERR;
  std::uint64_t total = 0;
  for (const ibv_sge& s : r.sges) total += s.length;
  if (total > (1ull << 31)) return IBV_WC_LOC_LEN_ERR;
  std::vector<SharedMr*> locals;
  auto release = [&] {
    for (SharedMr* m : locals) m->readers.fetch_sub(1);
  };
  std::vector<iovec> local_iov;
  for (const ibv_sge& s : r.sges) {
    SharedMr* m = hold_region(own, s.lkey, q->qp.pd->handle, s.addr, s.length, IBV_ACCESS_LOCAL_WRITE);
    if (m == nullptr) {
      release();
      return IBV_WC_LOC_PROT_ERR;
    }
    locals.push_back(m);
    if (s.length > 0) local_iov.push_back(iovec{reinterpret_cast<void*>(m->host_addr + (s.addr - m->addr)), s.length});
  }
  SharedMr* region = hold_region(t, r.rkey, responder.pd, r.remote_addr, total, IBV_ACCESS_REMOTE_READ);
  if (region == nullptr) {
    release();
    return IBV_WC_REM_ACCESS_ERR;
  }
  ibv_wc_status status = IBV_WC_SUCCESS;
  if (total > 0) {
    iovec remote_iov{reinterpret_cast<void*>(region->host_addr + (r.remote_addr - region->addr)),
                     static_cast<std::size_t>(total)};
    const ssize_t n = ::process_vm_readv(remote, local_iov.data(), local_iov.size(), &remote_iov, 1, 0);
    if (n < 0) {
      status = errno == ESRCH ? IBV_WC_RETRY_EXC_ERR : IBV_WC_REM_ACCESS_ERR;
    } else if (static_cast<std::uint64_t>(n) != total) {
      status = IBV_WC_REM_ACCESS_ERR;
    }
  }
  region->readers.fetch_sub(1);
  release();
  if (status == IBV_WC_SUCCESS) bytes = static_cast<std::uint32_t>(total);
  return status;
}

void engine_loop(FakeContext* c) {
  Process& p = proc();
  std::unique_lock lock(c->mutex);
  for (;;) {
    c->cv.wait(lock, [&] {
      if (c->stop) return true;
      for (FakeQp* q : c->qps) {
        if (!q->sq.empty()) return true;
      }
      return false;
    });
    if (c->stop) return;
    FakeQp* q = nullptr;
    for (std::size_t i = 0; i < c->qps.size() && q == nullptr; ++i) {
      FakeQp* candidate = c->qps[(c->cursor + i) % c->qps.size()];
      if (!candidate->sq.empty()) {
        q = candidate;
        c->cursor = (c->cursor + i + 1) % c->qps.size();
      }
    }
    if (q == nullptr) continue;
    PostedRead r = std::move(q->sq.front());
    q->sq.pop_front();
    ibv_wc wc{};
    wc.wr_id = r.wr_id;
    wc.opcode = IBV_WC_RDMA_READ;
    wc.qp_num = q->qp.qp_num;
    if (q->qp.state == IBV_QPS_ERR) {
      wc.status = IBV_WC_WR_FLUSH_ERR;
    } else {
      c->executing = q;
      lock.unlock();
      std::uint32_t bytes = 0;
      const auto began = std::chrono::steady_clock::now();
      wc.status = execute_read(q, r, bytes);
      wc.byte_len = bytes;
      if (std::uint32_t delay = p.read_delay_us.load(); delay > 0) {
        std::this_thread::sleep_until(began + std::chrono::microseconds(delay));
      }
      lock.lock();
      c->executing = nullptr;
      c->cv.notify_all();
      if (wc.status == IBV_WC_SUCCESS) {
        p.reads_completed.fetch_add(1);
        p.bytes_read.fetch_add(bytes);
      } else {
        p.reads_failed.fetch_add(1);
        set_shared_state(q, IBV_QPS_ERR);
      }
    }
    --q->outstanding;
    if (wc.status != IBV_WC_SUCCESS || r.signaled || q->sig_all) push_completion(cq_of(q->qp.send_cq), wc);
  }
}

int fake_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  FakeQp* q = qp_of(qp);
  FakeContext* c = q->owner;
  Process& p = proc();
  std::lock_guard lock(c->mutex);
  for (; wr != nullptr; wr = wr->next) {
    int error = 0;
    if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR) error = EINVAL;
    else if (wr->opcode != IBV_WR_RDMA_READ) error = EOPNOTSUPP;
    else if (wr->num_sge < 0 || wr->num_sge > kMaxSge) error = EINVAL;
    else if (q->sq.size() + q->outstanding >= 2 * static_cast<std::size_t>(q->max_send_wr)) error = ENOMEM;
    if (error != 0) {
      if (bad != nullptr) *bad = wr;
      return error;
    }
    PostedRead r;
    r.wr_id = wr->wr_id;
    r.signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0;
    r.remote_addr = wr->wr.rdma.remote_addr;
    r.rkey = wr->wr.rdma.rkey;
    r.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
    q->sq.push_back(std::move(r));
    ++q->outstanding;
    note_max(p.max_in_flight, q->outstanding);
    if (q->outstanding > q->max_rd_atomic) p.depth_exceeded.fetch_add(1);
  }
  c->cv.notify_all();
  return 0;
}

int fake_poll_cq(ibv_cq* cq, int num, ibv_wc* wc) {
  FakeCq* f = cq_of(cq);
  std::lock_guard lock(f->owner->mutex);
  int n = 0;
  while (n < num && !f->entries.empty()) {
    wc[n++] = f->entries.front();
    f->entries.pop_front();
  }
  return n;
}

int fake_req_notify_cq(ibv_cq* cq, int) {
  FakeCq* f = cq_of(cq);
  std::lock_guard lock(f->owner->mutex);
  // As on hardware, only a completion that comes after arming fires the
  // event: a poller must poll once more after arming.
  f->armed = true;
  return 0;
}

int fake_post_recv(ibv_qp*, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  if (bad != nullptr) *bad = wr;
  return EOPNOTSUPP;
}

// The attributes each RC transition must carry, and those it may.
struct Transition {
  ibv_qp_state from, to;
  int required, optional;
};
constexpr Transition kTransitions[] = {
    {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0},
    {IBV_QPS_INIT, IBV_QPS_INIT, IBV_QP_STATE, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS},
    {IBV_QPS_INIT, IBV_QPS_RTR,
     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
         IBV_QP_MIN_RNR_TIMER,
     IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX},
    {IBV_QPS_RTR, IBV_QPS_RTS,
     IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE},
    {IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_STATE,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE},
};

}  // namespace

extern "C" {

int softverbs_active(void) { return 1; }

void softverbs_configure(int devices) { proc().devices = devices < 0 || devices > kMaxDevices ? 0 : devices; }

softverbs_stats softverbs_get_stats(void) {
  Process& p = proc();
  softverbs_stats s{};
  s.reads_completed = p.reads_completed.load();
  s.bytes_read = p.bytes_read.load();
  s.reads_failed = p.reads_failed.load();
  s.depth_exceeded = p.depth_exceeded.load();
  s.dma_buf_registrations = p.dma_buf_registrations.load();
  s.max_reads_in_flight = p.max_in_flight.load();
  return s;
}

void softverbs_reset_stats(void) {
  Process& p = proc();
  p.reads_completed = 0;
  p.bytes_read = 0;
  p.reads_failed = 0;
  p.depth_exceeded = 0;
  p.dma_buf_registrations = 0;
  p.max_in_flight = 0;
}

void softverbs_set_read_delay_us(uint32_t microseconds) { proc().read_delay_us = microseconds; }

void softverbs_fail_next_reads(uint32_t count, int status) {
  proc().fail_status = status;
  proc().fail_count = count;
}

// Contexts open in this process, by device index, for async events.
static std::mutex g_contexts_mutex;
static std::vector<FakeContext*> g_contexts;

void softverbs_post_async_event(int device_index, int event_type) {
  std::lock_guard guard(g_contexts_mutex);
  for (FakeContext* c : g_contexts) {
    if (c->index != device_index) continue;
    std::lock_guard lock(c->mutex);
    ibv_async_event e{};
    e.event_type = static_cast<ibv_event_type>(event_type);
    e.element.port_num = 1;
    if (event_type == IBV_EVENT_PORT_ERR) c->port_active = false;
    if (event_type == IBV_EVENT_PORT_ACTIVE) c->port_active = true;
    if (event_type == IBV_EVENT_PORT_ERR || event_type == IBV_EVENT_DEVICE_FATAL) {
      for (FakeQp* q : c->qps) set_shared_state(q, IBV_QPS_ERR);
    }
    c->async_events.push_back(e);
    const char byte = 1;
    [[maybe_unused]] ssize_t n = ::write(c->async_write_fd, &byte, 1);
  }
}

ibv_device** ibv_get_device_list(int* num_devices) {
  Process& p = proc();
  std::lock_guard lock(p.mutex);
  while (static_cast<int>(p.device_list.size()) < p.devices) {
    auto* d = new FakeDevice{};
    d->index = static_cast<int>(p.device_list.size());
    std::snprintf(d->device.name, sizeof d->device.name, "softverbs%d", d->index);
    std::snprintf(d->device.dev_name, sizeof d->device.dev_name, "uverbs%d", d->index);
    d->device.node_type = IBV_NODE_CA;
    d->device.transport_type = IBV_TRANSPORT_IB;
    p.device_list.push_back(d);
  }
  auto** list = static_cast<ibv_device**>(std::calloc(static_cast<std::size_t>(p.devices) + 1, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (int i = 0; i < p.devices; ++i) list[i] = &p.device_list[static_cast<std::size_t>(i)]->device;
  if (num_devices != nullptr) *num_devices = p.devices;
  return list;
}

void ibv_free_device_list(ibv_device** list) { std::free(list); }

const char* ibv_get_device_name(ibv_device* device) { return device->name; }

__be64 ibv_get_device_guid(ibv_device* device) {
  auto* d = reinterpret_cast<FakeDevice*>(device);
  return htobe64(0x5346560000000000ull | (static_cast<std::uint64_t>(proc().pid) << 8) | static_cast<std::uint64_t>(d->index));
}

ibv_context* ibv_open_device(ibv_device* device) {
  if (own_table() == nullptr) {
    errno = EIO;
    return nullptr;
  }
  auto* c = new FakeContext;
  std::memset(&c->context, 0, sizeof c->context);
  c->context.device = device;
  c->index = reinterpret_cast<FakeDevice*>(device)->index;
  c->context.ops.post_send = fake_post_send;
  c->context.ops.post_recv = fake_post_recv;
  c->context.ops.poll_cq = fake_poll_cq;
  c->context.ops.req_notify_cq = fake_req_notify_cq;
  c->context.num_comp_vectors = 1;
  c->context.cmd_fd = -1;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    delete c;
    return nullptr;
  }
  c->context.async_fd = fds[0];
  c->async_write_fd = fds[1];
  pthread_mutex_init(&c->context.mutex, nullptr);
  c->engine = std::thread(engine_loop, c);
  std::lock_guard guard(g_contexts_mutex);
  g_contexts.push_back(c);
  ++proc().open_contexts;
  return &c->context;
}

int ibv_close_device(ibv_context* context) {
  FakeContext* c = ctx_of(context);
  {
    std::lock_guard guard(g_contexts_mutex);
    std::erase(g_contexts, c);
  }
  {
    std::lock_guard lock(c->mutex);
    c->stop = true;
    c->cv.notify_all();
  }
  c->engine.join();
  ::close(c->context.async_fd);
  ::close(c->async_write_fd);
  --proc().open_contexts;
  delete c;
  return 0;
}

int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  std::memset(attr, 0, sizeof *attr);
  std::snprintf(attr->fw_ver, sizeof attr->fw_ver, "softverbs");
  attr->node_guid = ibv_get_device_guid(context->device);
  attr->max_mr_size = 1ull << 46;
  attr->page_size_cap = 4096;
  attr->vendor_id = 0x5346;
  attr->max_qp = static_cast<int>(kMaxQps);
  attr->max_qp_wr = kMaxQpWr;
  attr->max_sge = kMaxSge;
  attr->max_cq = 1024;
  attr->max_cqe = kMaxCqe;
  attr->max_mr = static_cast<int>(kMaxMrs);
  attr->max_pd = 1024;
  attr->max_qp_rd_atom = kReadDepth;
  attr->max_qp_init_rd_atom = kReadDepth;
  attr->phys_port_cnt = 1;
  return 0;
}

#undef ibv_query_port
// The compatibility entry point the inline ibv_query_port calls for a
// context without the extended ops (the fake's): it fills ibv_port_attr.
int ibv_query_port(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* compat) {
  if (port_num != 1) return EINVAL;
  auto* attr = reinterpret_cast<ibv_port_attr*>(compat);
  FakeContext* c = ctx_of(context);
  std::lock_guard lock(c->mutex);
  attr->state = c->port_active ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = IBV_MTU_4096;
  attr->gid_tbl_len = 1;
  attr->max_msg_sz = 1u << 31;
  attr->pkey_tbl_len = 1;
  attr->link_layer = IBV_LINK_LAYER_ETHERNET;
  attr->active_width = 2;
  attr->active_speed = 64;
  attr->phys_state = c->port_active ? 5 : 3;
  return 0;
}

int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  if (port_num != 1 || index != 0) return EINVAL;
  *gid = gid_of(proc().pid, ctx_of(context)->index);
  return 0;
}

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  auto* pd = new ibv_pd{};
  pd->context = context;
  std::lock_guard lock(proc().mutex);
  pd->handle = proc().next_pd++;
  return pd;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  delete pd;
  return 0;
}

}  // extern "C"

namespace {

// Enters a region in the table: keys address [iova, iova + length); its
// bytes are at `host` in this process.
ibv_mr* register_region(ibv_pd* pd, void* host, size_t length, uint64_t iova, unsigned int access, void* mapping,
                        std::size_t mapping_length) {
  constexpr unsigned kKnown = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_RELAXED_ORDERING;
  const bool needs_local_write = (access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0;
  if ((access & ~kKnown) != 0 || (needs_local_write && (access & IBV_ACCESS_LOCAL_WRITE) == 0) || length == 0 ||
      iova > UINT64_MAX - length) {
    errno = EINVAL;
    return nullptr;
  }
  SharedTable* t = own_table();
  Process& p = proc();
  std::lock_guard lock(p.mutex);
  for (std::size_t i = 0; i < kMaxMrs; ++i) {
    SharedMr& m = t->mrs[i];
    if (m.state.load() != kMrFree) continue;
    const std::uint32_t key = static_cast<std::uint32_t>(i << 8) | (p.key_salt++ & 0xff);
    m.rkey = key;
    m.pd = pd->handle;
    m.access = access;
    m.addr = iova;
    m.length = length;
    m.host_addr = reinterpret_cast<std::uintptr_t>(host);
    m.mapping = reinterpret_cast<std::uintptr_t>(mapping);
    m.mapping_length = mapping_length;
    m.readers.store(0);
    m.state.store(kMrValid);
    auto* mr = new ibv_mr{};
    mr->context = pd->context;
    mr->pd = pd;
    mr->addr = reinterpret_cast<void*>(iova);
    mr->length = length;
    mr->handle = static_cast<std::uint32_t>(i);
    mr->lkey = key;
    mr->rkey = key;
    return mr;
  }
  errno = ENOMEM;
  return nullptr;
}

}  // namespace

extern "C" {

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  if (iova != reinterpret_cast<std::uintptr_t>(addr)) {
    errno = EINVAL;
    return nullptr;
  }
  return register_region(pd, addr, length, iova, access, nullptr, 0);
}

#undef ibv_reg_mr
ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<std::uintptr_t>(addr), static_cast<unsigned>(access));
}

// A dma-buf is any file softverbs can map (the fake GPU's memfd): it maps
// the pages holding [offset, offset + length) and READs copy through that
// mapping, as a NIC reaches a GPU's pages, never through the iova. As the
// hardware requires, the iova lies at the same place in its page as the
// offset; the file is referenced by the mapping, so it may be closed after.
ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access) {
  constexpr std::uint64_t kPage = 4096;
  if (length == 0 || offset % kPage != iova % kPage || offset > UINT64_MAX - length) {
    errno = EINVAL;
    return nullptr;
  }
  const std::uint64_t first = offset - offset % kPage;
  const std::size_t span = (offset + length - first + kPage - 1) / kPage * kPage;
  void* mapping = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(first));
  if (mapping == MAP_FAILED) {
    errno = EINVAL;  // not a dma-buf softverbs knows
    return nullptr;
  }
  ibv_mr* mr = register_region(pd, static_cast<std::byte*>(mapping) + (offset - first), length, iova,
                               static_cast<unsigned>(access), mapping, span);
  if (mr == nullptr) {
    const int e = errno;
    ::munmap(mapping, span);
    errno = e;
    return nullptr;
  }
  proc().dma_buf_registrations.fetch_add(1);
  return mr;
}

int ibv_dereg_mr(ibv_mr* mr) {
  SharedMr& m = own_table()->mrs[mr->handle];
  m.state.store(kMrDying);
  // READs copying from it finish first, as the hardware's do.
  while (m.readers.load() != 0) std::this_thread::yield();
  if (m.mapping != 0) ::munmap(reinterpret_cast<void*>(m.mapping), m.mapping_length);
  m.mapping = 0;
  m.state.store(kMrFree);
  delete mr;
  return 0;
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (fd < 0) return nullptr;
  auto* ch = new FakeChannel{};
  ch->channel.context = context;
  ch->channel.fd = fd;
  return &ch->channel;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  ::close(channel->fd);
  delete reinterpret_cast<FakeChannel*>(channel);
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int) {
  if (cqe < 1 || cqe > kMaxCqe) {
    errno = EINVAL;
    return nullptr;
  }
  auto* f = new FakeCq{};
  f->owner = ctx_of(context);
  f->cq.context = context;
  f->cq.channel = channel;
  f->cq.cq_context = cq_context;
  f->cq.cqe = cqe;
  return &f->cq;
}

int ibv_destroy_cq(ibv_cq* cq) {
  FakeCq* f = cq_of(cq);
  {
    std::lock_guard lock(f->owner->mutex);
    for (FakeQp* q : f->owner->qps) {
      if (q->qp.send_cq == cq || q->qp.recv_cq == cq) return EBUSY;
    }
  }
  delete f;
  return 0;
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  std::uint64_t value = 0;
  if (::read(channel->fd, &value, sizeof value) != static_cast<ssize_t>(sizeof value)) return -1;
  auto* ch = reinterpret_cast<FakeChannel*>(channel);
  FakeContext* c = ctx_of(channel->context);
  std::lock_guard lock(c->mutex);
  if (ch->events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  *cq = ch->events.front();
  ch->events.pop_front();
  *cq_context = (*cq)->cq_context;
  return 0;
}

void ibv_ack_cq_events(ibv_cq*, unsigned int) {}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  if (init->qp_type != IBV_QPT_RC) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (init->send_cq == nullptr || init->recv_cq == nullptr || init->cap.max_send_wr > kMaxQpWr ||
      init->cap.max_send_sge > kMaxSge || init->cap.max_recv_sge > kMaxSge || init->cap.max_recv_wr > kMaxQpWr ||
      init->send_cq->context != pd->context) {
    errno = EINVAL;
    return nullptr;
  }
  SharedTable* t = own_table();
  FakeContext* c = ctx_of(pd->context);
  Process& p = proc();
  std::size_t slot = kMaxQps;
  {
    std::lock_guard lock(p.mutex);
    for (std::size_t i = 0; i < kMaxQps; ++i) {
      if (t->qps[i].state.load() == 0) {
        slot = i;
        t->qps[i].state.store(IBV_QPS_RESET + 1);
        break;
      }
    }
  }
  if (slot == kMaxQps) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* q = new FakeQp{};
  q->owner = c;
  q->slot = slot;
  q->sig_all = init->sq_sig_all != 0;
  q->max_send_wr = init->cap.max_send_wr;
  q->qp.context = pd->context;
  q->qp.qp_context = init->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = init->send_cq;
  q->qp.recv_cq = init->recv_cq;
  q->qp.qp_num = kQpnBase + static_cast<std::uint32_t>(slot);
  q->qp.qp_type = IBV_QPT_RC;
  q->qp.state = IBV_QPS_RESET;
  SharedQp& s = t->qps[slot];
  s.qpn = q->qp.qp_num;
  s.pd = pd->handle;
  s.access = 0;
  s.remote_qpn = 0;
  s.remote_pid = 0;
  std::lock_guard lock(c->mutex);
  c->qps.push_back(q);
  return &q->qp;
}

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  FakeQp* q = qp_of(qp);
  FakeContext* c = q->owner;
  SharedQp& s = own_table()->qps[q->slot];
  std::unique_lock lock(c->mutex);
  if ((mask & IBV_QP_STATE) == 0) return EINVAL;
  const ibv_qp_state to = attr->qp_state;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
    if (mask != IBV_QP_STATE) return EINVAL;
    if (to == IBV_QPS_RESET) {
      // As on hardware: a READ being copied finishes first; the queued ones
      // are gone without completions.
      c->cv.wait(lock, [&] { return c->executing != q; });
      q->outstanding -= static_cast<std::uint32_t>(std::min<std::size_t>(q->outstanding, q->sq.size()));
      q->sq.clear();
      q->max_rd_atomic = 0;
    }
    set_shared_state(q, to);
    return 0;
  }
  const Transition* t = nullptr;
  for (const Transition& candidate : kTransitions) {
    if (candidate.from == q->qp.state && candidate.to == to) t = &candidate;
  }
  if (t == nullptr || (mask & t->required) != t->required || (mask & ~(t->required | t->optional)) != 0) return EINVAL;
  if (mask & IBV_QP_PORT) {
    if (attr->port_num != 1) return EINVAL;
    q->port = attr->port_num;
  }
  if (mask & IBV_QP_ACCESS_FLAGS) {
    q->access = attr->qp_access_flags;
    s.access = attr->qp_access_flags;
  }
  if (to == IBV_QPS_RTR) {
    if (!attr->ah_attr.is_global || attr->path_mtu > IBV_MTU_4096 || attr->max_dest_rd_atomic > kReadDepth) {
      return EINVAL;
    }
    q->max_dest_rd_atomic = attr->max_dest_rd_atomic;
    s.remote_qpn = attr->dest_qp_num;
    s.remote_pid = pid_of(attr->ah_attr.grh.dgid);
  }
  if (to == IBV_QPS_RTS && (mask & IBV_QP_MAX_QP_RD_ATOMIC)) {
    if (attr->max_rd_atomic > kReadDepth) return EINVAL;
    q->max_rd_atomic = attr->max_rd_atomic;
  }
  set_shared_state(q, to);
  return 0;
}

int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  FakeQp* q = qp_of(qp);
  std::lock_guard lock(q->owner->mutex);
  std::memset(attr, 0, sizeof *attr);
  attr->qp_state = q->qp.state;
  attr->cur_qp_state = q->qp.state;
  attr->max_rd_atomic = q->max_rd_atomic;
  attr->max_dest_rd_atomic = q->max_dest_rd_atomic;
  attr->qp_access_flags = q->access;
  attr->port_num = q->port;
  attr->dest_qp_num = own_table()->qps[q->slot].remote_qpn;
  if (init != nullptr) {
    std::memset(init, 0, sizeof *init);
    init->qp_type = IBV_QPT_RC;
    init->send_cq = q->qp.send_cq;
    init->recv_cq = q->qp.recv_cq;
    init->cap.max_send_wr = q->max_send_wr;
  }
  return 0;
}

int ibv_destroy_qp(ibv_qp* qp) {
  FakeQp* q = qp_of(qp);
  FakeContext* c = q->owner;
  {
    std::unique_lock lock(c->mutex);
    // A READ being copied for it finishes first; the rest never run.
    c->cv.wait(lock, [&] { return c->executing != q; });
    std::erase(c->qps, q);
    c->cursor = 0;
  }
  own_table()->qps[q->slot].state.store(0);
  delete q;
  return 0;
}

int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  char byte = 0;
  if (::read(context->async_fd, &byte, 1) != 1) return -1;
  FakeContext* c = ctx_of(context);
  std::lock_guard lock(c->mutex);
  if (c->async_events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  *event = c->async_events.front();
  c->async_events.pop_front();
  return 0;
}

void ibv_ack_async_event(ibv_async_event*) {}

const char* ibv_wc_status_str(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_LEN_ERR: return "local length error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    default: return "unknown";
  }
}

const char* ibv_event_type_str(ibv_event_type event) {
  switch (event) {
    case IBV_EVENT_PORT_ERR: return "port error";
    case IBV_EVENT_PORT_ACTIVE: return "port active";
    case IBV_EVENT_DEVICE_FATAL: return "local catastrophic error";
    default: return "unknown";
  }
}

}  // extern "C"
