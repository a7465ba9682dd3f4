// Peers in one process whose payloads move by RDMA READ over softverbs
// (tests/softverbs): the holder's memory is read, its swarm never sees the
// requests; failures lose blocks that arrive anyway; a peer without RDMA
// gets everything over TCP.
#include <doctest/doctest.h>
#include <infiniband/verbs.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "cuda/device_memory_domain.hpp"
#include "cuda/staging_ring.hpp"
#include "transport/peer_internal.hpp"
#include "softverbs/softverbs.h"
#include "support/fake_device.hpp"
#include "support/gossip_network.hpp"
#include "support/model_fixture.hpp"
#include "tensorhub/peer.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;
using namespace std::chrono_literals;

namespace {

SwarmKey swarm_key() { return test_swarm_key(0x31); }

std::unique_ptr<Peer> start(std::uint64_t key, std::uint64_t publisher, std::vector<std::string> seeds,
                            bool rdma = true, bool mirror_gpu_versions = true) {
  PeerOptions o;
  o.listen = "127.0.0.1:0";
  o.data_listen = "127.0.0.1:0";
  o.seeds = std::move(seeds);
  o.trusted_publishers = {GossipNetwork::identity_for(publisher).public_key()};
  o.shard_size = 256u << 10;
  o.block_size = 64u << 10;
  o.host = "h" + std::to_string(key);
  o.rdma = rdma;
  o.mirror_gpu_versions = mirror_gpu_versions;
  auto peer = Peer::start(o, GossipNetwork::identity_for(key), swarm_key());
  REQUIRE_MESSAGE(peer.is_ok(), peer.status().to_string());
  return std::move(*peer);
}

// What the peer's status says of its RDMA neighbours: reads and failures, summed.
struct RdmaCounts {
  std::uint64_t reads = 0, bytes = 0, failed = 0;
  std::size_t reading = 0;
  std::string note;
};
RdmaCounts rdma_counts(const Peer& peer) {
  const auto j = nlohmann::json::parse(peer.status_json());
  RdmaCounts c;
  c.note = j["rdma"]["note"].get<std::string>();
  for (const auto& n : j["rdma"]["neighbours"]) {
    c.reads += n["reads"].get<std::uint64_t>();
    c.bytes += n["bytes"].get<std::uint64_t>();
    c.failed += n["failed_reads"].get<std::uint64_t>();
    if (n["state"] == "reading") ++c.reading;
  }
  return c;
}

std::uint64_t bytes_served(const Peer& peer) {
  const auto j = nlohmann::json::parse(peer.status_json());
  std::uint64_t sent = 0;
  for (const auto& link : j["data_links"]) {
    for (const auto& lane : link["lanes"]) sent += lane["bytes_sent"].get<std::uint64_t>();
  }
  return sent;
}

// A publisher (key `first`) with a version of `bytes`, and a worker that
// knows its head; softverbs gives each one NIC.
struct Published {
  std::unique_ptr<Peer> publisher, worker;
  std::vector<std::byte> image;
  std::optional<PublishHandle> handle;
  Published(std::uint64_t first, std::uint64_t bytes) {
    softverbs_configure(1);
    softverbs_reset_stats();
    publisher = start(first, first, {});
    worker = start(first + 1, first, {publisher->gossip_address()});
    image = small_model(first, bytes);
    auto h = publisher->publish("policy", image, tensors_of(image));
    REQUIRE_MESSAGE(h.is_ok(), h.status().to_string());
    handle.emplace(std::move(*h));
    REQUIRE(worker->wait_for_head("policy", 0, 10s).is_ok());
  }
};

}  // namespace

TEST_CASE("rdma peers: a fetch moves every block by READ, and the holder sends no payload") {
  Published p(700, 3u << 20);
  auto& publisher = p.publisher;
  auto& worker = p.worker;
  const auto& image = p.image;
  const std::uint64_t control_before = bytes_served(*publisher);
  auto fetch = worker->fetch("policy", 0);
  REQUIRE(fetch.is_ok());
  REQUIRE_MESSAGE(fetch->wait(20s).is_ok(), fetch->wait(0ms).to_string());
  CHECK(std::equal(fetch->bytes().begin(), fetch->bytes().end(), image.begin(), image.end()));
  const RdmaCounts counts = rdma_counts(*worker);
  const softverbs_stats stats = softverbs_get_stats();
  MESSAGE("READs " << counts.reads << ", " << counts.bytes << " bytes; publisher sent " << bytes_served(*publisher) - control_before
                   << " bytes over TCP");
  CHECK(counts.reading == 1);
  CHECK(counts.bytes == image.size());  // every block by READ
  CHECK(stats.bytes_read == image.size());
  CHECK(stats.depth_exceeded == 0);
  // The publisher's TCP carried control messages only: no payload.
  CHECK(bytes_served(*publisher) - control_before < image.size() / 16);
  CHECK(rdma_counts(*publisher).reading == 1);
}

namespace {

// A version published from one fake GPU's memory and fetched into
// another's, over softverbs: the figures the GPU cases check.
struct GpuToGpu {
  std::vector<std::byte> image;
  bool verified = false;
  RdmaCounts counts;
  std::uint64_t staged = 0, through_host = 0;
  std::size_t holder_exported = 0, worker_exported = 0;
  std::uint64_t dma_buf_registrations = 0;
  std::size_t hashes = 0, flushes = 0, misplaced = 0;
  std::uint64_t holder_read_back = 0, holder_pinned = 0, publisher_tcp = 0;
};

// `registration`: how both fake GPUs say NICs register them ("dma-buf":
// memfd-backed memory exported as dma-bufs; "peermem": by address).
GpuToGpu gpu_to_gpu(std::uint64_t key, const std::string& registration) {
  softverbs_configure(1);
  softverbs_reset_stats();
  FakeDevice holder_gpu(2), worker_gpu(2);
  for (FakeDevice* d : {&holder_gpu, &worker_gpu}) {
    d->complete_on_query(true);
    if (registration == "dma-buf") d->back_with_memfd();
    else d->set_rdma_registration(registration);
  }
  std::unique_ptr<cuda::StagingRing> ring;
  REQUIRE(cuda::StagingRing::create(worker_gpu, {.slot_bytes = 64u << 10, .slots = 8}, ring));
  const cuda::DeviceMemoryDomain holder_domain(holder_gpu), worker_domain(worker_gpu, ring.get());
  // Host mirrors on for the publisher: with RDMA it makes none (nobody
  // asks over TCP), so every byte its GPU gives up is counted.
  auto publisher = start(key, key, {}, true, true);
  auto worker = start(key + 1, key, {publisher->gossip_address()}, true, false);

  GpuToGpu out;
  out.image = small_model(key, 3u << 20);
  const auto& image = out.image;
  DeviceRegions weights(holder_gpu, {image.size() / 2 + 3, image.size() - image.size() / 2 - 3});
  weights.fill_from(image);
  std::vector<ConstRegion> parts(weights.regions().begin(), weights.regions().end());
  auto handle = peer::publish_from(*publisher, "policy", parts, tensors_of(image), holder_domain);
  REQUIRE_MESSAGE(handle.is_ok(), handle.status().to_string());
  REQUIRE(worker->wait_for_head("policy", 0, 10s).is_ok());
  const std::uint64_t control_before = bytes_served(*publisher);
  const std::uint64_t read_back_before = holder_gpu.bytes_to_host();

  // Regions of odd sizes, so blocks span them and start inside pages.
  DeviceRegions memory(worker_gpu, {image.size() / 3 + 7, 1, image.size() - image.size() / 3 - 8});
  auto fetched = peer::fetch_into(*worker, "policy", 1, memory.regions(), worker_domain);
  REQUIRE_MESSAGE(fetched.is_ok(), fetched.status().to_string());
  REQUIRE_MESSAGE(fetched->wait(30s).is_ok(), fetched->wait(0ms).to_string());
  out.verified = memory.bytes() == image;

  out.counts = rdma_counts(*worker);
  const auto landings = nlohmann::json::parse(worker->status_json())["landings"];
  out.staged = landings["staged"].get<std::uint64_t>();
  out.through_host = landings["through_host_buffer"].get<std::uint64_t>();
  out.holder_exported = holder_gpu.dma_bufs_exported();
  out.worker_exported = worker_gpu.dma_bufs_exported();
  out.dma_buf_registrations = softverbs_get_stats().dma_buf_registrations;
  out.hashes = worker_gpu.hashes();
  out.flushes = worker_gpu.nic_flushes();
  out.misplaced = worker_gpu.misplaced_copies() + holder_gpu.misplaced_copies();
  out.holder_read_back = holder_gpu.bytes_to_host() - read_back_before;
  out.holder_pinned = holder_gpu.pinned_bytes();
  out.publisher_tcp = bytes_served(*publisher) - control_before;
  MESSAGE(registration << ": READs " << out.counts.reads << ", " << out.counts.bytes << " bytes; holder's GPU read back "
                       << out.holder_read_back << " bytes; publisher sent " << out.publisher_tcp
                       << " bytes over TCP; flushes " << out.flushes);
  return out;
}

}  // namespace

TEST_CASE("rdma peers: GPU memory to GPU memory: every block by READ through dma-bufs, verified on the device after a flush") {
  const GpuToGpu r = gpu_to_gpu(740, "dma-buf");
  const std::uint64_t shards = (r.image.size() + (256u << 10) - 1) / (256u << 10);
  CHECK(r.verified);
  CHECK(r.counts.bytes == r.image.size());  // every block by READ, into GPU memory
  CHECK(r.staged == 0);                     // none through the staging ring
  CHECK(r.through_host == 0);
  // Registered by dma-buf: the holder's 2 regions, the worker's 3.
  CHECK(r.holder_exported == 2);
  CHECK(r.worker_exported == 3);
  CHECK(r.dma_buf_registrations == 5);
  // Verified on the worker's GPU, each check after a flush of the NIC's writes.
  CHECK(r.hashes >= shards);
  CHECK(r.flushes >= shards);
  CHECK(r.misplaced == 0);
  // The holder's GPU gave up no payload (only proofs of possession), it
  // pinned no host mirror, and its TCP carried control messages.
  CHECK(r.holder_read_back < r.image.size() / 16);
  CHECK(r.holder_pinned == 0);
  CHECK(r.publisher_tcp < r.image.size() / 16);
}

TEST_CASE("rdma peers: GPU memory where nvidia_peermem is loaded is registered by its address") {
  const GpuToGpu r = gpu_to_gpu(760, "peermem");
  CHECK(r.verified);
  CHECK(r.counts.bytes == r.image.size());
  CHECK(r.staged == 0);
  CHECK(r.holder_exported + r.worker_exported == 0);
  CHECK(r.dma_buf_registrations == 0);
  CHECK(r.flushes >= (r.image.size() + (256u << 10) - 1) / (256u << 10));
  CHECK(r.holder_read_back < r.image.size() / 16);
}

TEST_CASE("rdma peers: GPU memory the NICs cannot reach moves over TCP, through the staging ring") {
  softverbs_configure(1);
  softverbs_reset_stats();
  FakeDevice gpu_device(2);  // heap-backed: it exports no dma-buf
  gpu_device.complete_on_query(true);
  // Its probe says so ("staging"), or claims dma-bufs whose export then fails.
  SUBCASE("staging") {}
  SUBCASE("a failing export") { gpu_device.set_rdma_registration("dma-buf"); }
  std::unique_ptr<cuda::StagingRing> ring;
  REQUIRE(cuda::StagingRing::create(gpu_device, {.slot_bytes = 64u << 10, .slots = 8}, ring));
  const cuda::DeviceMemoryDomain gpu(gpu_device, ring.get());
  Published p(750, 2u << 20);
  DeviceRegions memory(gpu_device, {p.image.size()});
  auto fetched = peer::fetch_into(*p.worker, "policy", 1, memory.regions(), gpu);
  REQUIRE_MESSAGE(fetched.is_ok(), fetched.status().to_string());
  REQUIRE_MESSAGE(fetched->wait(30s).is_ok(), fetched->wait(0ms).to_string());
  CHECK(memory.bytes() == p.image);
  const auto landings = nlohmann::json::parse(p.worker->status_json())["landings"];
  CHECK(landings["staged"].get<std::uint64_t>() > 0);
  CHECK(rdma_counts(*p.worker).bytes == 0);
  CHECK(softverbs_get_stats().dma_buf_registrations == 0);
}

TEST_CASE("rdma peers: failed READs are asked for again and the fetch still verifies") {
  Published p(710, 2u << 20);
  auto& publisher = p.publisher;
  auto& worker = p.worker;
  const auto& image = p.image;
  softverbs_fail_next_reads(2, IBV_WC_RETRY_EXC_ERR);  // the path gives up twice: queue pairs rebuilt twice
  auto fetch = worker->fetch("policy", 0);
  REQUIRE(fetch.is_ok());
  REQUIRE_MESSAGE(fetch->wait(30s).is_ok(), fetch->wait(0ms).to_string());
  CHECK(std::equal(fetch->bytes().begin(), fetch->bytes().end(), image.begin(), image.end()));
  const RdmaCounts counts = rdma_counts(*worker);
  CHECK(softverbs_get_stats().reads_failed >= 2);
  CHECK(counts.failed >= 1);   // both queue pairs may fail in one round: one rebuild
  CHECK(counts.reading == 1);  // rebuilt, and reading again
  CHECK(counts.bytes >= image.size());  // the lost blocks came again, by READ
  CHECK(bytes_served(*publisher) < image.size() / 16);  // and not over TCP
}

TEST_CASE("rdma peers: a queue pair count out of range is refused at start") {
  for (std::size_t bad : {std::size_t{0}, std::size_t{17}}) {
    PeerOptions o;
    o.listen = "127.0.0.1:0";
    o.rdma_queue_pairs = bad;
    auto peer = Peer::start(o, GossipNetwork::identity_for(730), swarm_key());
    REQUIRE_FALSE(peer.is_ok());
    CHECK(peer.status().code() == StatusCode::kInvalidArgument);
    CHECK(peer.status().message().find("queue pairs") != std::string::npos);
  }
}

TEST_CASE("rdma peers: a neighbour without RDMA serves over TCP, byte-identical") {
  softverbs_configure(1);
  auto publisher = start(720, 720, {}, /*rdma=*/false);
  auto worker = start(721, 720, {publisher->gossip_address()});
  CHECK(rdma_counts(*publisher).note.find("off") != std::string::npos);
  auto image = small_model(33, 2u << 20);
  auto handle = publisher->publish("policy", image, tensors_of(image));
  REQUIRE(handle.is_ok());
  REQUIRE(worker->wait_for_head("policy", 0, 10s).is_ok());
  auto fetch = worker->fetch("policy", 0);
  REQUIRE(fetch.is_ok());
  REQUIRE(fetch->wait(20s).is_ok());
  CHECK(std::equal(fetch->bytes().begin(), fetch->bytes().end(), image.begin(), image.end()));
  CHECK(rdma_counts(*worker).bytes == 0);
  CHECK(rdma_counts(*worker).reading == 0);
}
