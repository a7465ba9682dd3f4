// tensorhub rdma-bench: READ throughput between two machines through the
// transport's own verbs code (the same queue pairs, registrations and
// credits as a peer's), to hold against perftest's ib_read_bw before
// trusting RDMA with weights.
//
//   tensorhub rdma-bench --serve IP:PORT [--size 1GiB] [--gpu UUID] [--strict-ordering]
//   tensorhub rdma-bench --connect IP:PORT [--block 1MiB] [--qps 2] [--seconds 5] [--gpu UUID]
//                        [--no-flush] [--json]
//
// The server registers a buffer holding a known pattern (REMOTE_READ only)
// and waits; the client READs it, checks the first pass against the
// pattern, then READs for --seconds, and reports per NIC and in all.
// --gpu puts either side's buffer in that GPU's memory, registered through
// a dma-buf as a peer's GPU versions are; the client then flushes the
// NICs' writes before it checks a block (as a peer does before hashing),
// unless --no-flush. --strict-ordering registers the server's buffer
// without relaxed ordering, to measure what it is worth. The
// queue pairs and the grant are exchanged over a plain TCP connection, not
// the peers' authenticated one: run it on a network you trust.
#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/cli_common.hpp"
#include "core/byte_size.hpp"
#include "core/host_port.hpp"
#if TENSORHUB_HAVE_RDMA
#include "core/entropy.hpp"
#include "cuda/device_api.hpp"
#include "rdma/rc_queue_pair.hpp"
#include "rdma/rdma_wire.hpp"
#include "rdma/registered_regions.hpp"
#include "rdma/verbs_nic.hpp"
#endif

namespace tensorhub::cli {
namespace {

struct BenchArgs {
  std::string serve, connect;
  std::string size = "1GiB", block = "1MiB";
  std::size_t qps = 2;
  double seconds = 5;
  bool json = false;
  std::string gpu;  // empty: host memory
  bool no_flush = false, strict_ordering = false;
};

#if TENSORHUB_HAVE_RDMA

// The byte at `offset` of the server's buffer.
std::byte pattern_at(std::uint64_t offset) { return static_cast<std::byte>((offset * 131 + (offset >> 20)) & 0xff); }

// The benchmark's buffer: anonymous host memory, or memory of a GPU that a
// NIC reaches through a dma-buf; freed when done.
class BenchMemory {
 public:
  // Errors: those of opening the GPU, allocating, or exporting the dma-buf.
  static Result<std::unique_ptr<BenchMemory>> allocate(std::size_t size, const std::string& gpu) {
    auto m = std::unique_ptr<BenchMemory>(new BenchMemory);
    m->size_ = size;
    if (gpu.empty()) {
      void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return Status::unavailable("cannot map " + core::format_byte_size(size));
      m->data_ = static_cast<std::byte*>(p);
      return m;
    }
    TENSORHUB_RETURN_IF_ERROR(cuda::open_cuda_device(gpu, 1, m->device_));
    TENSORHUB_RETURN_IF_ERROR(m->device_->allocate_device(size, m->data_));
    peer::DmaBuf buf;
    TENSORHUB_RETURN_IF_ERROR(m->device_->export_dma_buf(m->data_, size, buf));
    m->dma_bufs_.push_back(std::move(buf));
    return m;
  }
  ~BenchMemory() {
    if (data_ == nullptr) return;
    if (device_) device_->free_device(data_);
    else ::munmap(data_, size_);
  }

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::vector<peer::DmaBuf>& dma_bufs() const { return dma_bufs_; }
  // Writes the pattern over the whole buffer.
  Status fill() {
    std::vector<std::byte> chunk(std::min<std::size_t>(size_, 64u << 20));
    for (std::size_t at = 0; at < size_; at += chunk.size()) {
      const std::size_t n = std::min(chunk.size(), size_ - at);
      for (std::size_t i = 0; i < n; ++i) chunk[i] = pattern_at(at + i);
      if (!device_) std::memcpy(data_ + at, chunk.data(), n);
      else TENSORHUB_RETURN_IF_ERROR(device_->copy(data_ + at, chunk.data(), n));
    }
    return Status::ok();
  }
  // Copies `out.size()` bytes at `at` to host memory `out`, after flushing
  // the NICs' writes when `flush` (GPU memory).
  Status read(std::byte* at, std::span<std::byte> out, bool flush) {
    if (!device_) {
      std::memcpy(out.data(), at, out.size());
      return Status::ok();
    }
    if (flush) device_->flush_nic_writes();
    return device_->copy(out.data(), at, out.size());
  }

 private:
  BenchMemory() = default;
  std::unique_ptr<cuda::DeviceApi> device_;  // null: host memory
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::vector<peer::DmaBuf> dma_bufs_;
};

Status send_frame(int fd, const std::vector<std::uint8_t>& bytes) {
  const std::uint32_t n = htonl(static_cast<std::uint32_t>(bytes.size()));
  if (::send(fd, &n, 4, MSG_NOSIGNAL) != 4 ||
      ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    return Status::io_error(std::string("sending to the other end: ") + std::strerror(errno));
  }
  return Status::ok();
}

Result<rdma::RdmaMessage> receive_frame(int fd) {
  std::uint32_t n = 0;
  if (::recv(fd, &n, 4, MSG_WAITALL) != 4) return Status::io_error("the other end closed the connection");
  n = ntohl(n);
  if (n > (1u << 20)) return Status::corrupt("a session message of " + std::to_string(n) + " bytes");
  std::vector<std::uint8_t> bytes(n);
  if (n > 0 && ::recv(fd, bytes.data(), n, MSG_WAITALL) != static_cast<ssize_t>(n)) {
    return Status::io_error("the other end closed the connection");
  }
  return rdma::decode_rdma_message(bytes);
}

sockaddr_storage address_of(const core::HostPort& at, socklen_t& length) {
  sockaddr_storage s{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&s);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&s);
  if (::inet_pton(AF_INET, at.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(at.port);
    length = sizeof *v4;
  } else if (::inet_pton(AF_INET6, at.host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(at.port);
    length = sizeof *v6;
  } else {
    length = 0;
  }
  return s;
}

// Our queue pairs (`per_nic` on each NIC) and the offer naming them.
Status make_queue_pairs(std::vector<std::unique_ptr<rdma::VerbsNic>>& nics, std::size_t per_nic,
                        std::vector<std::unique_ptr<rdma::RcQueuePair>>& qps, std::vector<std::size_t>& qp_nic,
                        rdma::RdmaMessage& offer) {
  std::vector<rdma::OfferedNic> offered_nics;
  std::vector<rdma::OfferedQueuePair> offered;
  for (std::size_t i = 0; i < nics.size(); ++i) {
    offered_nics.push_back(nics[i]->offered());
    for (std::size_t q = 0; q < per_nic; ++q) {
      auto qp = rdma::RcQueuePair::create(*nics[i], static_cast<std::uint32_t>(core::entropy64()));
      if (!qp) return qp.status();
      offered.push_back((*qp)->offered(static_cast<std::uint8_t>(i)));
      qps.push_back(std::move(*qp));
      qp_nic.push_back(i);
    }
  }
  offer = rdma::RdmaMessage::offer(std::move(offered_nics), std::move(offered));
  return Status::ok();
}

// Connects qps[k] to their queue pair k; drops ours past their count.
Status connect_pairwise(std::vector<std::unique_ptr<rdma::RcQueuePair>>& qps, const rdma::RdmaMessage& theirs) {
  if (theirs.kind != rdma::RdmaMessageKind::kOffer) return Status::corrupt("expected an offer");
  qps.resize(std::min(qps.size(), theirs.queue_pairs.size()));
  for (std::size_t k = 0; k < qps.size(); ++k) {
    const auto& q = theirs.queue_pairs[k];
    TENSORHUB_RETURN_IF_ERROR(qps[k]->connect(theirs.nics[q.nic], q));
  }
  return Status::ok();
}

// Every NIC with an active port; none (after saying why) when there is none.
std::vector<std::unique_ptr<rdma::VerbsNic>> open_nics_or_say() {
  std::string note;
  auto nics = rdma::VerbsNic::open_active(note);
  if (nics.empty()) std::fprintf(stderr, "error: %s\n", note.c_str());
  return nics;
}

int serve(const BenchArgs& a) {
  auto size = core::parse_byte_size(a.size);
  auto at = core::parse_host_port(a.serve);
  if (!size || !at || *size == 0) {
    std::fprintf(stderr, "error: --serve IP:PORT and a --size above 0 are needed\n");
    return kExitError;
  }
  auto nics = open_nics_or_say();
  if (nics.empty()) return kExitError;
  auto buffer = BenchMemory::allocate(*size, a.gpu);
  Status filled = buffer ? (*buffer)->fill() : buffer.status();
  if (!filled.is_ok()) {
    std::fprintf(stderr, "error: %s\n", filled.message().c_str());
    return kExitError;
  }
  std::vector<rdma::VerbsNic*> raw;
  for (auto& n : nics) {
    n->set_relaxed_ordering(!a.strict_ordering);
    raw.push_back(n.get());
  }
  const std::span<std::byte> regions[] = {std::span((*buffer)->data(), (*buffer)->size())};
  auto registered = rdma::RegisteredRegions::register_on(raw, regions, rdma::Access::kRemoteRead, (*buffer)->dma_bufs());
  if (!registered) {
    std::fprintf(stderr, "error: %s\n", registered.status().message().c_str());
    return kExitError;
  }
  socklen_t length = 0;
  sockaddr_storage address = address_of(*at, length);
  const int listener = ::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (length == 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(listener, 4) != 0) {
    std::fprintf(stderr, "error: cannot listen on %s: %s\n", a.serve.c_str(), std::strerror(errno));
    return kExitError;
  }
  std::printf("serving %s of %s for READs on %s over", core::format_byte_size((*buffer)->size()).c_str(),
              a.gpu.empty() ? "host memory" : a.gpu.c_str(), a.serve.c_str());
  for (auto& n : nics) std::printf(" %s", n->name().c_str());
  std::printf("\n");
  std::fflush(stdout);
  for (;;) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::vector<std::unique_ptr<rdma::RcQueuePair>> qps;
    std::vector<std::size_t> qp_nic;
    rdma::RdmaMessage offer;
    auto theirs = receive_frame(fd);
    Status s = theirs ? make_queue_pairs(nics, (theirs->queue_pairs.size() + nics.size() - 1) / nics.size(),
                                         qps, qp_nic, offer)
                      : theirs.status();
    if (s.is_ok()) s = connect_pairwise(qps, *theirs);
    if (s.is_ok()) s = send_frame(fd, rdma::encode_rdma_message(offer));
    if (s.is_ok()) s = send_frame(fd, rdma::encode_rdma_message(rdma::RdmaMessage::grant(ManifestId{}, registered->grant())));
    if (!s.is_ok()) std::fprintf(stderr, "a client: %s\n", s.message().c_str());
    char byte;
    while (s.is_ok() && ::recv(fd, &byte, 1, 0) > 0) {
    }
    ::close(fd);  // its queue pairs go with `qps`: its access ends
  }
}

int connect_and_read(const BenchArgs& a) {
  auto block = core::parse_byte_size(a.block);
  auto at = core::parse_host_port(a.connect);
  if (!block || !at || *block == 0 || *block > (1u << 30) || a.qps < 1 || a.qps > 16 || a.seconds <= 0) {
    std::fprintf(stderr, "error: --connect IP:PORT, --block of 1 B to 1 GiB, --qps of 1 to 16, --seconds above 0\n");
    return kExitError;
  }
  auto nics = open_nics_or_say();
  if (nics.empty()) return kExitError;
  std::vector<std::unique_ptr<rdma::RcQueuePair>> qps;
  std::vector<std::size_t> qp_nic;
  rdma::RdmaMessage offer;
  if (Status s = make_queue_pairs(nics, a.qps, qps, qp_nic, offer); !s.is_ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return kExitError;
  }
  socklen_t length = 0;
  sockaddr_storage address = address_of(*at, length);
  const int fd = ::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (length == 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    std::fprintf(stderr, "error: cannot connect to %s: %s\n", a.connect.c_str(), std::strerror(errno));
    return kExitError;
  }
  Status s = send_frame(fd, rdma::encode_rdma_message(offer));
  auto theirs = s.is_ok() ? receive_frame(fd) : Result<rdma::RdmaMessage>(s);
  auto grant = theirs ? receive_frame(fd) : Result<rdma::RdmaMessage>(theirs.status());
  if (grant && (grant->kind != rdma::RdmaMessageKind::kGrant || grant->regions.size() != 1)) {
    grant = Status::corrupt("expected a grant of one region");
  }
  if (grant) s = connect_pairwise(qps, *theirs);
  if (!grant || !s.is_ok()) {
    std::fprintf(stderr, "error: %s\n", (grant ? s : grant.status()).message().c_str());
    return kExitError;
  }
  qp_nic.resize(qps.size());
  const rdma::GrantRegion remote = grant->regions[0];
  const std::uint64_t blocks = remote.length / *block;
  if (blocks == 0) {
    std::fprintf(stderr, "error: the server's buffer (%llu bytes) is smaller than a block\n",
                 static_cast<unsigned long long>(remote.length));
    return kExitError;
  }
  // A landing slot per READ that may be in flight.
  std::size_t slots_per_qp = 0;
  for (auto& q : qps) slots_per_qp = std::max<std::size_t>(slots_per_qp, q->read_depth());
  auto landing = BenchMemory::allocate(qps.size() * slots_per_qp * *block, a.gpu);
  std::vector<rdma::VerbsNic*> raw;
  for (auto& n : nics) raw.push_back(n.get());
  auto registered =
      landing ? rdma::RegisteredRegions::register_on(raw, std::vector{std::span((*landing)->data(), (*landing)->size())},
                                                     rdma::Access::kLocalWrite, (*landing)->dma_bufs())
              : Result<rdma::RegisteredRegions>(landing.status());
  if (!registered) {
    std::fprintf(stderr, "error: %s\n", registered.status().message().c_str());
    return kExitError;
  }
  std::vector<std::byte> check(*block);  // a landed block, on the host

  // Keeps every queue pair full; READs block after block of the remote
  // buffer. The first pass over it is checked against the pattern.
  std::vector<std::uint64_t> bytes_by_nic(nics.size());
  std::vector<std::vector<std::size_t>> free_slots(qps.size());
  for (std::size_t k = 0; k < qps.size(); ++k) {
    for (std::size_t i = 0; i < slots_per_qp; ++i) free_slots[k].push_back(k * slots_per_qp + i);
  }
  struct InFlight {
    std::size_t qp, slot;
    std::uint64_t block;
  };
  std::map<std::uint64_t, InFlight> in_flight;
  std::uint64_t next_block = 0, next_wr = 1, reads = 0, mismatches = 0, checked = 0;
  const auto began = std::chrono::steady_clock::now();
  const auto deadline = began + std::chrono::duration<double>(a.seconds);
  std::vector<ibv_wc> done;
  bool stopping = false;
  while (!stopping || !in_flight.empty()) {
    stopping = stopping || std::chrono::steady_clock::now() >= deadline;
    for (std::size_t k = 0; !stopping && k < qps.size(); ++k) {
      std::vector<rdma::ReadWork> batch;
      while (batch.size() < qps[k]->credits() && !free_slots[k].empty()) {
        const std::size_t slot = free_slots[k].back();
        free_slots[k].pop_back();
        const std::uint64_t b = next_block++ % blocks;
        rdma::ReadWork w;
        w.wr_id = next_wr++;
        w.remote_addr = remote.addr + b * *block;
        w.rkey = remote.rkeys[theirs->queue_pairs[k].nic];
        std::byte* to = (*landing)->data() + slot * *block;
        w.local.push_back(ibv_sge{reinterpret_cast<std::uintptr_t>(to), static_cast<std::uint32_t>(*block),
                                  *registered->lkey(qp_nic[k], to, *block)});
        in_flight[w.wr_id] = InFlight{k, slot, b};
        batch.push_back(std::move(w));
      }
      if (Status p = qps[k]->post_reads(batch); !p.is_ok()) {
        std::fprintf(stderr, "error: %s\n", p.message().c_str());
        return kExitError;
      }
    }
    for (std::size_t n = 0; n < nics.size(); ++n) {
      done.clear();
      nics[n]->drain(done);
      for (const ibv_wc& wc : done) {
        auto it = in_flight.find(wc.wr_id);
        if (it == in_flight.end()) continue;
        const InFlight f = it->second;
        in_flight.erase(it);
        qps[f.qp]->on_completion(wc.status == IBV_WC_SUCCESS);
        if (wc.status != IBV_WC_SUCCESS) {
          std::fprintf(stderr, "error: a READ failed: %s\n", ibv_wc_status_str(wc.status));
          return kExitError;
        }
        ++reads;
        bytes_by_nic[qp_nic[f.qp]] += *block;
        if (checked < blocks && f.block == checked) {
          if (Status r = (*landing)->read((*landing)->data() + f.slot * *block, check, !a.no_flush); !r.is_ok()) {
            std::fprintf(stderr, "error: reading a landed block back: %s\n", r.message().c_str());
            return kExitError;
          }
          for (std::uint64_t i = 0; i < *block; ++i) {
            if (check[i] != pattern_at(f.block * *block + i)) ++mismatches;
          }
          ++checked;
        }
        free_slots[f.qp].push_back(f.slot);
      }
    }
    if (in_flight.size() >= qps.size() * slots_per_qp || stopping) {
      pollfd p{nics[0]->completion_fd(), POLLIN, 0};
      ::poll(&p, 1, 1);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  ::close(fd);
  std::uint64_t total = 0;
  for (auto b : bytes_by_nic) total += b;
  if (a.json) {
    nlohmann::ordered_json j;
    j["block"] = *block;
    j["memory"] = a.gpu.empty() ? "host" : a.gpu;
    j["flush"] = !a.gpu.empty() && !a.no_flush;
    j["queue_pairs"] = qps.size();
    j["read_depth"] = qps.empty() ? 0 : qps[0]->read_depth();
    j["seconds"] = seconds;
    j["reads"] = reads;
    j["bytes"] = total;
    j["gbit_per_s"] = 8e-9 * static_cast<double>(total) / seconds;
    j["blocks_checked"] = checked;
    j["bytes_wrong"] = mismatches;
    for (std::size_t n = 0; n < nics.size(); ++n) {
      j["nics"].push_back({{"name", nics[n]->name()},
                           {"bytes", bytes_by_nic[n]},
                           {"gbit_per_s", 8e-9 * static_cast<double>(bytes_by_nic[n]) / seconds}});
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%llu READs of %s over %zu queue pairs (read depth %u) in %.2f s\n",
                static_cast<unsigned long long>(reads), core::format_byte_size(*block).c_str(), qps.size(),
                qps.empty() ? 0u : qps[0]->read_depth(), seconds);
    for (std::size_t n = 0; n < nics.size(); ++n) {
      std::printf("  %s: %.2f Gbit/s\n", nics[n]->name().c_str(), 8e-9 * static_cast<double>(bytes_by_nic[n]) / seconds);
    }
    std::printf("  all: %.2f Gbit/s; first pass checked: %llu blocks, %llu bytes wrong\n",
                8e-9 * static_cast<double>(total) / seconds, static_cast<unsigned long long>(checked),
                static_cast<unsigned long long>(mismatches));
  }
  return mismatches == 0 ? kExitOk : kExitCheckFailed;
}

#endif

}  // namespace

void add_rdma_bench_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* c = app.add_subcommand("rdma-bench", "Measure RDMA READ throughput between two machines (against ib_read_bw)");
  c->add_option("--serve", args->serve, "Serve a buffer for READs, exchanging queue pairs on IP:PORT");
  c->add_option("--connect", args->connect, "READ the buffer served at IP:PORT");
  c->add_option("--size", args->size, "The served buffer (default 1GiB)");
  c->add_option("--block", args->block, "Bytes per READ (default 1MiB, a peer's block)");
  c->add_option("--qps", args->qps, "Queue pairs per local NIC (default 2, a peer's)");
  c->add_option("--seconds", args->seconds, "How long to READ (default 5)");
  c->add_flag("--json", args->json, "The report as JSON");
  c->add_option("--gpu", args->gpu, "This side's buffer in the memory of this GPU (UUID), registered through a dma-buf");
  c->add_flag("--no-flush", args->no_flush, "Client, GPU memory: check landed blocks without flushing the NICs' writes");
  c->add_flag("--strict-ordering", args->strict_ordering, "Server: register the buffer without relaxed ordering");
  c->callback([args, &exit_code] {
    if (args->serve.empty() == args->connect.empty()) {
      std::fprintf(stderr, "error: one of --serve and --connect\n");
      exit_code = kExitError;
      return;
    }
#if TENSORHUB_HAVE_RDMA
    exit_code = args->serve.empty() ? connect_and_read(*args) : serve(*args);
#else
    std::fprintf(stderr, "error: built without RDMA support (TENSORHUB_RDMA=OFF or libibverbs missing)\n");
    exit_code = kExitError;
#endif
  });
}

}  // namespace tensorhub::cli
