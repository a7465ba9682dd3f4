// The RDMA transport between two instances in one process over softverbs,
// joined by a fake TCP transport: READs land where the peer says, and a
// neighbour's hostile session messages cost it its RDMA path, nothing more.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <asio.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "rdma/rdma_transport.hpp"
#include "rdma/rdma_wire.hpp"
#include "softverbs/softverbs.h"
#include "support/temp_dir.hpp"

using namespace tensorhub;
using namespace tensorhub::peer;
using tensorhub::rdma::NicChoice;
using tensorhub::rdma::RdmaTransport;

namespace {

PeerId id_of(std::uint8_t b) {
  PeerId p;
  p.bytes.fill(b);
  return p;
}

// What the peer above a transport hears.
struct Above final : TransportEvents {
  std::span<std::byte> landing;  // where pieces land
  std::vector<swarm::SwarmMessage> messages, stored, lost;
  void on_connected(const PeerId&) override {}
  void on_connect_failed(const PeerId&) override {}
  void on_disconnected(const PeerId&) override {}
  void on_message(const PeerId&, const swarm::SwarmMessage& m) override { messages.push_back(m); }
  void piece_destination(const PeerId&, const swarm::SwarmMessage& header, std::vector<std::span<std::byte>>& out) override {
    out.push_back(landing.subspan(header.request_id.value * 4096ull, header.length));
  }
  void on_piece_progress(const PeerId&, const swarm::SwarmMessage&) override {}
  void on_piece(const PeerId&, const swarm::SwarmMessage& h, bool ok) override {
    if (ok) stored.push_back(h);
  }
  void on_piece_lost(const PeerId&, const swarm::SwarmMessage& h) override { lost.push_back(h); }
};

// One version's memory: served from `image`, fetched into `landing`, by
// address, or through dma-bufs where the test sets them.
struct Memory final : RdmaMemory {
  ManifestId version_id;
  std::vector<std::byte> image, landing;
  // Where set: the bytes served, and where READs land, instead of `image`
  // and `landing` (memory of the fake GPU), and their dma-bufs.
  std::span<std::byte> device_image, device_landing;
  DmaBuf image_buf, landing_buf;
  std::string landing_pci;  // the landing's PCI device (a GPU's), as sysfs names it
  TransportEvents* above = nullptr;  // where READs land: as its pieces
  // What hands `buf` out as the one region's dma-buf.
  static std::function<Status(std::vector<DmaBuf>&)> handing(DmaBuf buf) {
    return [buf](std::vector<DmaBuf>& out) {
      out.push_back(buf);
      return Status::ok();
    };
  }
  std::size_t served_asks = 0;
  std::optional<HeldRegions> served_regions(const ManifestId& v) override {
    ++served_asks;
    if (image_buf.valid()) return HeldRegions{{device_image}, nullptr, handing(image_buf), {}};
    if (v != version_id || image.empty()) return std::nullopt;
    return HeldRegions{{image}, nullptr, {}, {}};
  }
  std::optional<HeldRegions> landing_regions(const ManifestId& v) override {
    if (landing_buf.valid()) return HeldRegions{{device_landing}, nullptr, handing(landing_buf), landing_pci};
    if (v != version_id || landing.empty()) return std::nullopt;
    return HeldRegions{{landing}, nullptr, {}, landing_pci};
  }
  void read_destination(const PeerId& peer, const swarm::SwarmMessage& header,
                        std::vector<std::span<std::byte>>& out) override {
    above->piece_destination(peer, header, out);
  }
  // Jobs run at once; their results still come back on a later turn of
  // the loop, as from the peer's pool.
  void run_off_thread(std::function<void()> job) override { job(); }
};

// The TCP below a transport: what it sends reaches the other's on_message
// on a later turn of the loop; requests that reach it are recorded.
struct Wire final : DataTransport {
  asio::io_context& io;
  PeerId self;
  RdmaTransport** far = nullptr;
  std::vector<swarm::SwarmMessage> requests;
  Wire(asio::io_context& io_, PeerId self_) : io(io_), self(self_) {}
  std::string_view name() const override { return "wire"; }
  void connect(const PeerId&) override {}
  void disconnect(const PeerId&, const std::string&) override {}
  void send(const PeerId&, const swarm::SwarmMessage& m) override {
    if (m.type == swarm::MessageType::kRequest) requests.push_back(m);
    asio::post(io, [this, m] {
      if (*far) (*far)->on_message(self, m);
    });
  }
  void send_piece(const PeerId&, const swarm::SwarmMessage&, std::span<const std::span<const std::byte>>,
                  std::shared_ptr<transport::PieceSource>) override {}
  void cancel_piece(const PeerId&, swarm::RequestId) override {}
  void cancel_pieces_of(const PeerId&, const ManifestId&) override {}
  std::vector<LinkStats> links() const override { return {}; }
  void close() override {}
};

struct Pair {
  asio::io_context io;
  PeerId a_id = id_of(1), b_id = id_of(2);
  Above a_up, b_up;
  Memory a_mem, b_mem;
  Wire a_wire{io, a_id}, b_wire{io, b_id};
  std::unique_ptr<RdmaTransport> a, b;
  RdmaTransport* a_ptr = nullptr;
  RdmaTransport* b_ptr = nullptr;

  explicit Pair(int nics = 1, std::size_t queue_pairs = 2, NicChoice choice = {}) {
    softverbs_configure(nics);
    softverbs_set_read_delay_us(0);
    softverbs_fail_next_reads(0, 0);
    a_mem.version_id.bytes[0] = 7;
    b_mem.version_id = a_mem.version_id;
    b_mem.image.resize(64 * 4096);
    for (std::size_t i = 0; i < b_mem.image.size(); ++i) b_mem.image[i] = static_cast<std::byte>(i * 7 + 3);
    a_mem.landing.resize(b_mem.image.size());
    a_up.landing = a_mem.landing;
    a_mem.above = &a_up;
    b_mem.above = &b_up;
    std::string note;
    a = RdmaTransport::open(io, a_up, a_mem, note, queue_pairs, choice);
    b = RdmaTransport::open(io, b_up, b_mem, note, queue_pairs, choice);
    REQUIRE_MESSAGE(a != nullptr, note);
    REQUIRE(b != nullptr);
    a_ptr = a.get();
    b_ptr = b.get();
    a_wire.far = &b_ptr;
    b_wire.far = &a_ptr;
    a->attach(a_wire);
    b->attach(b_wire);
    a->on_connected(b_id);
    b->on_connected(a_id);
    settle();
  }
  ~Pair() {
    a_ptr = b_ptr = nullptr;
    a->close();
    b->close();
  }
  void settle(int turns = 200) {
    for (int i = 0; i < turns; ++i) {
      io.restart();
      io.poll();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  std::string a_state() const { return a->status().neighbours.at(0).state; }
  void request(std::uint32_t block) {
    a->send(b_id, swarm::SwarmMessage::request(a_mem.version_id, swarm::RequestId{block}, ShardIndex{0}, BlockIndex{block}, block * 4096ull, 4096));
  }
};

// Memory as a GPU's is to the host: its addresses (`iova`) are reserved
// PROT_NONE, so any CPU access crashes the test, and its bytes are reached
// through a memfd (the dma-buf), which the test also maps (`view`).
struct DeviceLike {
  std::size_t size;
  int fd = -1;
  std::byte* view = nullptr;
  std::byte* iova = nullptr;
  explicit DeviceLike(std::size_t bytes) : size(bytes) {
    fd = ::memfd_create("device-like", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(size)) == 0);
    view = static_cast<std::byte*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    iova = static_cast<std::byte*>(::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    REQUIRE(view != MAP_FAILED);
    REQUIRE(iova != MAP_FAILED);
  }
  ~DeviceLike() {
    ::munmap(view, size);
    ::munmap(iova, size);
    ::close(fd);
  }
  // The dma-buf of the region at `offset`.
  DmaBuf buf(std::size_t offset) const { return DmaBuf(::dup(fd), offset); }
};

}  // namespace

TEST_CASE("rdma transport: GPU memory moves through dma-bufs, from and into addresses the host never touches") {
  softverbs_reset_stats();
  Pair p;
  const std::size_t n = p.b_mem.image.size();
  DeviceLike holder(n + 4096), fetcher(n + 4096);
  // Each region begins 512 bytes into a page, as a tensor inside a larger allocation does.
  std::memcpy(holder.view + 512, p.b_mem.image.data(), n);
  p.b_mem.device_image = {holder.iova + 512, n};
  p.b_mem.image_buf = holder.buf(512);
  p.a_mem.device_landing = {fetcher.iova + 512, n};
  p.a_mem.landing_buf = fetcher.buf(512);
  p.a_up.landing = p.a_mem.device_landing;
  for (std::uint32_t i = 0; i < 64; ++i) p.request(i);
  p.settle();
  CHECK(p.a_up.stored.size() == 64);
  CHECK(p.a_up.lost.empty());
  CHECK(std::memcmp(fetcher.view + 512, p.b_mem.image.data(), n) == 0);
  CHECK(softverbs_get_stats().dma_buf_registrations == 2);  // the holder's version, the fetcher's landing
  CHECK(p.a_wire.requests.empty());
}

TEST_CASE("rdma transport: a version the NIC cannot register is refused once, and goes over TCP") {
  Pair p;
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  ::close(pipe_fds[1]);
  DeviceLike holder(4096);
  p.b_mem.device_image = {holder.iova, 4096};
  p.b_mem.image_buf = DmaBuf(pipe_fds[0], 0);  // a file no NIC maps
  p.request(0);
  p.settle();
  CHECK(p.a_wire.requests.size() == 1);  // over TCP once the holder said no
  CHECK(p.b_mem.served_asks == 1);       // one registration tried, not one per refusal
  CHECK(p.a_up.stored.empty());
}

TEST_CASE("rdma transport: requests become READs once the grant is here, and land where the peer says") {
  Pair p;
  CHECK(p.a_state() == "reading");
  for (std::uint32_t i = 0; i < 64; ++i) p.request(i);
  p.settle();
  CHECK(p.a_up.stored.size() == 64);
  CHECK(p.a_up.lost.empty());
  CHECK(p.a_mem.landing == p.b_mem.image);
  CHECK(p.a_wire.requests.empty());  // none went over TCP
  CHECK(p.b_up.messages.empty());    // the holder's peer heard nothing
  CHECK(p.b->status().grants_given == 1);
  CHECK(p.a->status().neighbours.at(0).bytes == p.b_mem.image.size());
}

TEST_CASE("rdma transport: two NICs, three queue pairs each: every block lands, within every depth") {
  softverbs_reset_stats();
  Pair p(2, 3);
  for (std::uint32_t i = 0; i < 64; ++i) p.request(i);
  p.settle();
  CHECK(p.a_up.stored.size() == 64);
  CHECK(p.a_mem.landing == p.b_mem.image);
  CHECK(softverbs_get_stats().depth_exceeded == 0);
}

TEST_CASE("rdma transport: a failure with READs in flight rebuilds the session once, and READs go on") {
  Pair p;
  softverbs_set_read_delay_us(2000);
  softverbs_fail_next_reads(1, IBV_WC_RETRY_EXC_ERR);
  for (std::uint32_t i = 0; i < 8; ++i) p.request(i);
  p.settle();
  softverbs_set_read_delay_us(0);
  // The first READ failed; the queue pair's others were in flight: all lost.
  CHECK(p.a_up.stored.size() + p.a_up.lost.size() == 8);
  CHECK(p.a_up.lost.size() >= 1);
  // a's new queue pairs connected to b's; b reconnected its own to a's
  // offer and said ready. No offer answered another (nothing ping-ponged).
  CHECK(p.a_state() == "reading");
  CHECK(p.b->status().neighbours.at(0).state == "reading");
  const std::size_t stored = p.a_up.stored.size();
  for (std::uint32_t i = 8; i < 16; ++i) p.request(i);
  p.settle();
  CHECK(p.a_up.stored.size() == stored + 8);  // READs go on
}

TEST_CASE("rdma transport: a local fault moves the neighbour's READs to the other NIC, and a fault on the last one to TCP") {
  Pair p(2, 1);  // two NICs, one queue pair each
  softverbs_fail_next_reads(1, IBV_WC_LOC_PROT_ERR);  // a fault of our own side: our registration or queue pair
  p.request(0);
  p.settle();
  REQUIRE(p.a_up.lost.size() == 1);
  CHECK(p.a_state() == "reading");  // rebuilt, on the other NIC only
  auto bytes_by_nic = [&] {
    std::vector<std::uint64_t> out;
    for (const auto& nic : p.a->status().nics) out.push_back(nic.bytes_read);
    return out;
  };
  const auto before = bytes_by_nic();
  for (std::uint32_t i = 1; i < 33; ++i) p.request(i);
  p.settle();
  CHECK(p.a_up.stored.size() == 32);
  const auto after = bytes_by_nic();
  REQUIRE(after.size() == 2);
  // Every block went through one NIC: the one that did not fault.
  CHECK(((after[0] == before[0]) != (after[1] == before[1])));
  CHECK(after[0] + after[1] - before[0] - before[1] == 32 * 4096);
  // A local fault on that one too: no NIC is left, so TCP.
  softverbs_fail_next_reads(1, IBV_WC_LOC_PROT_ERR);
  p.request(33);
  p.settle();
  CHECK(p.a_state() == "tcp (a local fault on every NIC)");
  p.request(34);
  CHECK(p.a_wire.requests.size() == 1);
}

TEST_CASE("rdma transport: a neighbour whose offer is not followed by its ready within the limit goes to TCP") {
  Pair p;
  rdma::OfferedNic nic;
  nic.mtu = 5;
  nic.responder_depth = nic.requester_depth = 16;
  // An offer b never sent (as from a broken or hostile neighbour): a
  // connects to it and waits for b's ready, which never comes.
  p.a->on_message(p.b_id, swarm::SwarmMessage::with_bytes(swarm::MessageType::kTransport, ManifestId{},
                                                          rdma::encode_rdma_message(rdma::RdmaMessage::offer({nic}, {{0, 0x100, 1}}))));
  p.request(0);  // held for the session
  CHECK(p.a_wire.requests.empty());
  const auto deadline = std::chrono::steady_clock::now() + RdmaTransport::kReadyLimit + std::chrono::seconds(2);
  while (p.a_state() != "tcp (no ready within the limit after its offer)" && std::chrono::steady_clock::now() < deadline) {
    p.settle(10);
  }
  CHECK(p.a_state() == "tcp (no ready within the limit after its offer)");
  CHECK(p.a_wire.requests.size() == 1);  // the held request went over TCP
}

TEST_CASE("rdma transport: READs into a GPU's memory go through the NICs nearest that GPU") {
  // A fake sysfs: both NICs on NUMA node 0, under different bridges; the
  // GPU under softverbs1's bridge.
  testing::TempDir dir;
  auto device_at = [&](const std::string& bridge, const std::string& bdf) {
    const auto path = dir.path() / "devices" / "pci0000:00" / bridge / bdf;
    std::filesystem::create_directories(path);
    std::ofstream(path / "numa_node") << "0\n";
    return path;
  };
  for (int i = 0; i < 2; ++i) {
    const auto nic = device_at("0000:00:0" + std::to_string(i + 1) + ".0", "0000:0" + std::to_string(i + 1) + ":00.0");
    const auto cls = dir.path() / "class" / "infiniband" / ("softverbs" + std::to_string(i));
    std::filesystem::create_directories(cls);
    std::filesystem::create_directory_symlink(nic, cls / "device");
  }
  const auto gpu = device_at("0000:00:02.0", "0000:03:00.0");
  std::filesystem::create_directories(dir.path() / "bus" / "pci" / "devices");
  std::filesystem::create_directory_symlink(gpu, dir.path() / "bus" / "pci" / "devices" / "0000:03:00.0");

  Pair p(2, 2, NicChoice{dir.path().string(), /*memory_node=*/0});
  // Host memory: both NICs are as near (node 0), and both carry blocks.
  REQUIRE(p.a->status().nics.size() == 2);
  CHECK(p.a->status().nics[0].preferred);
  CHECK(p.a->status().nics[1].preferred);
  // The landing is the GPU's memory: its READs take softverbs1 only.
  p.a_mem.landing_pci = "0000:03:00.0";
  for (std::uint32_t i = 0; i < 32; ++i) p.request(i);
  p.settle();
  CHECK(p.a_up.stored.size() == 32);
  CHECK(std::equal(p.a_mem.landing.begin(), p.a_mem.landing.begin() + 32 * 4096, p.b_mem.image.begin()));
  const RdmaStatus s = p.a->status();
  CHECK(s.nics[0].bytes_read == 0);
  CHECK(s.nics[1].bytes_read == 32 * 4096);
}

TEST_CASE("rdma transport: blocks go through the NICs nearest the memory") {
  // A fake sysfs: softverbs0 on NUMA node 0, softverbs1 on node 1.
  testing::TempDir dir;
  for (int i = 0; i < 2; ++i) {
    const auto device = dir.path() / "devices" / ("pci0000:0" + std::to_string(i)) / "0000:01:00.0";
    std::filesystem::create_directories(device);
    std::ofstream(device / "numa_node") << i << "\n";
    const auto cls = dir.path() / "class" / "infiniband" / ("softverbs" + std::to_string(i));
    std::filesystem::create_directories(cls);
    std::filesystem::create_directory_symlink(device, cls / "device");
  }
  Pair p(2, 2, NicChoice{dir.path().string(), /*memory_node=*/1});
  for (std::uint32_t i = 0; i < 32; ++i) p.request(i);
  p.settle();
  CHECK(p.a_up.stored.size() == 32);
  const RdmaStatus s = p.a->status();
  REQUIRE(s.nics.size() == 2);
  CHECK_FALSE(s.nics[0].preferred);
  CHECK(s.nics[1].preferred);
  CHECK(s.nics[0].bytes_read == 0);
  CHECK(s.nics[1].bytes_read == 32 * 4096);
  // The preferred NIC faults locally: the blocks take the other one rather than wait.
  softverbs_fail_next_reads(1, IBV_WC_LOC_PROT_ERR);
  p.request(32);
  p.settle();
  for (std::uint32_t i = 33; i < 41; ++i) p.request(i);
  p.settle();
  CHECK(p.a_up.stored.size() == 40);
  CHECK(p.a->status().nics[0].bytes_read == 8 * 4096);
  // Without places, every NIC carries blocks.
  Pair q(2, 2);
  for (std::uint32_t i = 0; i < 32; ++i) q.request(i);
  q.settle();
  const RdmaStatus t = q.a->status();
  CHECK(t.nics[0].bytes_read > 0);
  CHECK(t.nics[1].bytes_read > 0);
}

TEST_CASE("rdma transport: a port error moves every neighbour to TCP") {
  Pair p;
  softverbs_post_async_event(0, IBV_EVENT_PORT_ERR);  // both transports' NIC 0 (one process)
  p.settle();
  CHECK(p.a_state().find("tcp (softverbs0: port error") == 0);
  p.request(0);
  CHECK(p.a_wire.requests.size() == 1);
}

TEST_CASE("rdma transport: a version the holder does not grant goes over TCP") {
  Pair p;
  p.b_mem.image.clear();  // b holds nothing it can grant
  p.request(0);
  p.settle();
  CHECK(p.a_wire.requests.size() == 1);  // sent over TCP once the refusal came
  p.request(1);
  CHECK(p.a_wire.requests.size() == 2);  // and at once afterwards
  CHECK(p.a_up.stored.empty());
}

TEST_CASE("rdma transport: hostile session messages cost the sender its RDMA path, nothing more") {
  auto transport_message = [](std::vector<std::uint8_t> bytes) {
    return swarm::SwarmMessage::with_bytes(swarm::MessageType::kTransport, ManifestId{}, std::move(bytes));
  };
  SUBCASE("a malformed message") {
    Pair p;
    p.a->on_message(p.b_id, transport_message({0x93, 0x01, 0xc0, 0xc0}));
    CHECK(p.a_state().find("tcp (a malformed session message") == 0);
    p.request(0);
    CHECK(p.a_wire.requests.size() == 1);  // TCP at once
  }
  SUBCASE("a flood of offers") {
    Pair p;
    rdma::OfferedNic nic;
    nic.mtu = 5;
    nic.responder_depth = nic.requester_depth = 16;
    const auto offer = rdma::encode_rdma_message(rdma::RdmaMessage::offer({nic}, {{0, 0x100, 1}}));
    for (std::size_t i = 0; i < RdmaTransport::kMaxOffersPerMinute + 1; ++i) p.a->on_message(p.b_id, transport_message(offer));
    CHECK(p.a_state() == "tcp (too many offers)");
  }
  SUBCASE("grants nobody asked for are not kept") {
    Pair p;
    for (std::uint8_t v = 0; v < 50; ++v) {
      ManifestId other;
      other.bytes[1] = v;
      const auto grant = rdma::encode_rdma_message(rdma::RdmaMessage::grant(other, {{0, 0x1000, 4096, {1}}}));
      p.a->on_message(p.b_id, transport_message(grant));
    }
    CHECK(p.a_state() == "reading");
    CHECK(p.a->status().neighbours.at(0).grants == 0);
    p.request(0);  // the real version: asked, granted, READ
    p.settle();
    CHECK(p.a_up.stored.size() == 1);
    CHECK(p.a->status().neighbours.at(0).grants == 1);
  }
  SUBCASE("a grant that points outside the holder's memory loses the block, then TCP") {
    Pair p;
    // b's grant is answered as usual; then b "revokes" nothing and a READ
    // fails at b's NIC: simulate with a failure from softverbs.
    softverbs_fail_next_reads(1, IBV_WC_REM_ACCESS_ERR);
    p.request(3);
    p.settle();
    CHECK(p.a_up.lost.size() == 1);
    CHECK(p.a->status().neighbours.at(0).failed_reads == 1);
    p.request(4);  // the version is refused from b now: TCP
    CHECK(p.a_wire.requests.size() == 1);
  }
}
