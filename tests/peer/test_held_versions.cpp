// A daemon's holds (src/cli/held_versions.hpp) over loopback peers: in
// files, and "on GPUs" through a fake GPU memory (host memory standing in
// for it; the CUDA allocation and IPC export are checked on a GPU by
// tests/gpu/run). What is tested is the hold's protocol: one fetch for many
// holders, the answer's fields, the cap on versions held per GPU, and that
// memory is freed only when the last hold is let go.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/held_versions.hpp"
#include "support/gossip_network.hpp"
#include "support/model_fixture.hpp"
#include "tensorhub/peer.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;
using namespace std::chrono_literals;

namespace {

SwarmKey swarm_key() { return test_swarm_key(0x37); }

std::unique_ptr<Peer> start(std::uint64_t key, const PublicKey& publisher, std::vector<std::string> seeds) {
  PeerOptions o;
  o.listen = o.data_listen = "127.0.0.1:0";
  o.seeds = std::move(seeds);
  o.trusted_publishers = {publisher};
  o.shard_size = 256u << 10;
  o.block_size = 64u << 10;
  o.retain_head_replicas = 0;
  auto peer = Peer::start(o, GossipNetwork::identity_for(key), swarm_key());
  REQUIRE_MESSAGE(peer.is_ok(), peer.status().to_string());
  return std::move(*peer);
}

// Host memory posing as a GPU's: counts what is alive, so the test sees when
// the daemon frees it.
struct FakeGpus {
  int live = 0;
  int made = 0;
  std::vector<std::vector<std::byte>*> buffers;
  bool fail_commit = false;  // the fetched bytes cannot be kept (as a file that cannot be renamed)
};

class FakeGpuMemory final : public cli::HoldMemory {
 public:
  FakeGpuMemory(FakeGpus& gpus, std::string gpu, std::uint64_t bytes) : gpus_(gpus), gpu_(std::move(gpu)), bytes_(bytes) {
    ++gpus_.live;
    ++gpus_.made;
    gpus_.buffers.push_back(&bytes_);
  }
  ~FakeGpuMemory() override {
    --gpus_.live;
    std::erase(gpus_.buffers, &bytes_);
  }
  Result<FetchHandle> fetch(Peer& peer, const VersionInfo& info) override {
    return peer.fetch(info.model, info.version, std::span<std::byte>(bytes_));
  }
  Status commit() override { return gpus_.fail_commit ? Status::io_error("cannot keep the bytes") : Status::ok(); }
  Status describe(const FetchHandle& handle, cli::Json& done) const override {
    done["gpu"] = gpu_;
    done["ipc"] = cli::Json{{"handle", std::string(128, 'a')}, {"offset", 0}, {"bytes", bytes_.size()}};
    done["tensors"] = cli::tensor_table(handle.manifest());
    return Status::ok();
  }

 private:
  FakeGpus& gpus_;
  std::string gpu_;
  std::vector<std::byte> bytes_;
};

constexpr const char* kGpuA = "GPU-11111111-2222-3333-4444-555555555555";
constexpr const char* kGpuB = "GPU-99999999-8888-7777-6666-555555555555";

// One reply's lines; the test polls until its last line or "done".
struct Answer {
  std::vector<nlohmann::json> lines;
  bool closed = false;
  cli::HeldVersions::Reply reply() {
    return [this](const std::string& text, bool last) {
      lines.push_back(nlohmann::json::parse(text));
      closed = closed || last;
      return true;
    };
  }
  bool done() const { return !lines.empty() && lines.back().value("done", false); }
};

// A trainer that published v1 of "policy" (1 MiB), and a daemon that knows it.
struct OneVersion {
  std::unique_ptr<Peer> trainer, daemon;
  std::vector<std::byte> image;  // served in place: outlives `published`
  std::optional<PublishHandle> published;
  std::optional<VersionInfo> info;

  OneVersion(std::uint64_t key, std::uint64_t seed) {
    const PublicKey publisher_key = GossipNetwork::identity_for(key).public_key();
    trainer = start(key, publisher_key, {});
    daemon = start(key + 1, publisher_key, {trainer->gossip_address()});
    image = small_model(seed, 1u << 20);
    auto handle = trainer->publish("policy", image, tensors_of(image));
    REQUIRE_MESSAGE(handle.is_ok(), handle.status().to_string());
    published.emplace(std::move(*handle));
    REQUIRE(daemon->wait_for_head("policy", 0, 10s).is_ok());
    auto known = daemon->version_info("policy", 1);
    REQUIRE(known.is_ok());
    info = *known;
  }
};

// Lets go of a version at once, on the caller's thread.
void retire_now(std::shared_ptr<void> held, std::function<void()> after) {
  held.reset();
  if (after) after();
}

// Keeps what is let go until run() (a work pool that has not got to it yet).
struct RetireLater {
  std::vector<std::pair<std::shared_ptr<void>, std::function<void()>>> queued;
  cli::HeldVersions::Retire retire() {
    return [this](std::shared_ptr<void> held, std::function<void()> after) { queued.emplace_back(held, after); };
  }
  void run() {
    auto jobs = std::move(queued);
    queued.clear();
    for (auto& [held, after] : jobs) retire_now(std::move(held), std::move(after));
  }
};

void poll_until_done(cli::HeldVersions& held, const std::vector<Answer*>& answers) {
  for (int i = 0; i < 400; ++i) {
    bool all = true;
    for (const Answer* a : answers) all = all && a->done();
    if (all) return;
    held.poll();
    std::this_thread::sleep_for(25ms);
  }
  FAIL("the holds did not finish in 10 s");
}

}  // namespace

TEST_CASE("a daemon holds versions on GPUs: one fetch for every holder, two versions a GPU, freed with the last hold") {
  const PublicKey publisher_key = GossipNetwork::identity_for(801).public_key();
  auto trainer = start(801, publisher_key, {});
  auto daemon = start(802, publisher_key, {trainer->gossip_address()});
  std::vector<std::vector<std::byte>> images;
  std::vector<PublishHandle> published;
  for (std::uint64_t v = 1; v <= 3; ++v) {
    images.push_back(small_model(v, (1u << 20) + v * 4096));
    auto handle = trainer->publish("policy", images.back(), tensors_of(images.back()));
    REQUIRE_MESSAGE(handle.is_ok(), handle.status().to_string());
    published.push_back(std::move(*handle));
    // Each head heard before the next: a peer learns the manifests of the
    // heads it hears, not of versions that were never its head.
    REQUIRE(daemon->wait_for_head("policy", v - 1, 10s).is_ok());
  }
  auto info = [&](std::uint64_t v) {
    auto i = daemon->version_info("policy", v);
    REQUIRE_MESSAGE(i.is_ok(), i.status().to_string());
    return *i;
  };

  FakeGpus gpus;
  const std::string folder = (std::filesystem::temp_directory_path() / "tensorhub-held-versions-test").string();
  cli::HeldVersions held(*daemon, folder, retire_now,
                         [&gpus](const std::string& gpu, const VersionInfo& i) -> Result<std::unique_ptr<cli::HoldMemory>> {
                           if (gpu == kGpuB && i.version == 3) return Status::unavailable("out of memory on " + gpu);
                           return std::unique_ptr<cli::HoldMemory>(new FakeGpuMemory(gpus, gpu, i.bytes));
                         },
                         /*gpu_buffers=*/2);

  // Two holders of v1 on GPU A: one allocation, one fetch, both answered
  // with where it is and the tensor table.
  Answer first, second;
  REQUIRE(held.hold(info(1), kGpuA, first.reply()));
  REQUIRE(held.hold(info(1), kGpuA, second.reply()));
  poll_until_done(held, {&first, &second});
  CHECK(gpus.made == 1);
  REQUIRE(gpus.buffers.size() == 1);
  CHECK(*gpus.buffers[0] == images[0]);
  for (const Answer* a : {&first, &second}) {
    const auto& done = a->lines.back();
    CHECK(done["ok"] == true);
    CHECK_FALSE(a->closed);  // a hold keeps its connection
    CHECK(done["gpu"] == kGpuA);
    CHECK(done["ipc"]["handle"].get<std::string>().size() == 128);
    CHECK(done["bytes"] == images[0].size());
    CHECK(done["tensors"].size() == tensors_of(images[0]).size());
    CHECK(done["tensors"][0][0] == tensors_of(images[0])[0].name);
    CHECK_FALSE(done.contains("path"));
  }
  CHECK(second.lines.back()["holds"] == 2);

  // v2 fills GPU A's second buffer; v3 would be a third and is refused,
  // naming what is held, while a file hold and GPU B are not counted.
  Answer v2;
  REQUIRE(held.hold(info(2), kGpuA, v2.reply()));
  poll_until_done(held, {&v2});
  Answer refused;
  CHECK_FALSE(held.hold(info(3), kGpuA, refused.reply()));
  REQUIRE(refused.closed);
  const std::string error = refused.lines.back()["error"];
  CHECK(error.find("holds 2 versions already (policy v1, policy v2)") != std::string::npos);
  CHECK(error.find("let go of one first") != std::string::npos);
  Answer in_file;
  REQUIRE(held.hold(info(3), "", in_file.reply()));
  poll_until_done(held, {&in_file});
  CHECK(in_file.lines.back().contains("path"));
  // The factory's error is the hold's answer, and nothing is held.
  Answer no_memory;
  CHECK_FALSE(held.hold(info(3), kGpuB, no_memory.reply()));
  CHECK(no_memory.lines.back()["error"].get<std::string>().find("out of memory") != std::string::npos);
  CHECK(held.unhold("policy", 3, kGpuB).status().code() == StatusCode::kNotFound);

  // v1's memory stays while one hold is left, and goes with the last;
  // then GPU A has room for v3.
  CHECK(gpus.live == 2);
  auto left = held.unhold("policy", 1, kGpuA);
  REQUIRE(left.is_ok());
  CHECK(*left == 1);
  CHECK(gpus.live == 2);
  left = held.unhold("policy", 1, kGpuA);
  REQUIRE(left.is_ok());
  CHECK(*left == 0);
  CHECK(gpus.live == 1);
  CHECK(held.unhold("policy", 1, kGpuA).status().code() == StatusCode::kNotFound);
  Answer v3;
  REQUIRE(held.hold(info(3), kGpuA, v3.reply()));
  poll_until_done(held, {&v3});
  CHECK(v3.lines.back()["ok"] == true);
  CHECK(gpus.live == 2);
  std::vector<std::byte> v3_bytes;
  for (auto* b : gpus.buffers) {
    if (b->size() == images[2].size()) v3_bytes = *b;
  }
  CHECK(v3_bytes == images[2]);
}

TEST_CASE("a hold whose fetch fails lets go of its memory before its holders hear") {
  OneVersion one(811, 11);
  Peer* daemon = one.daemon.get();
  const std::optional<VersionInfo>& info = one.info;

  FakeGpus gpus;
  gpus.fail_commit = true;
  const std::string folder = (std::filesystem::temp_directory_path() / "tensorhub-held-versions-fail").string();
  cli::HeldVersions held(*daemon, folder, retire_now,
                         [&gpus](const std::string& gpu, const VersionInfo& i) -> Result<std::unique_ptr<cli::HoldMemory>> {
                           return std::unique_ptr<cli::HoldMemory>(new FakeGpuMemory(gpus, gpu, i.bytes));
                         },
                         /*gpu_buffers=*/2);
  // Each holder notes how much memory is alive when its answer comes.
  std::vector<int> live_when_answered;
  std::vector<std::string> errors;
  auto reply = [&](const std::string& text, bool last) {
    if (!last) return true;
    live_when_answered.push_back(gpus.live);
    errors.push_back(nlohmann::json::parse(text).value("error", ""));
    return true;
  };
  REQUIRE(held.hold(*info, kGpuA, reply));
  REQUIRE(held.hold(*info, kGpuA, reply));
  for (int i = 0; i < 400 && errors.size() < 2; ++i) {
    held.poll();
    std::this_thread::sleep_for(25ms);
  }
  REQUIRE(errors.size() == 2);
  for (const std::string& e : errors) CHECK(e.find("cannot keep the bytes") != std::string::npos);
  CHECK(live_when_answered == std::vector<int>{0, 0});  // gone before either heard
  CHECK(held.unhold("policy", 1, kGpuA).status().code() == StatusCode::kNotFound);
}

TEST_CASE("a version's last hold is let go off the caller's thread, and stays counted until it is gone") {
  OneVersion one(821, 21);
  Peer* daemon = one.daemon.get();
  const std::optional<VersionInfo>& info = one.info;
  FakeGpus gpus;
  RetireLater pool;
  const std::string folder = (std::filesystem::temp_directory_path() / "tensorhub-held-versions-retire").string();
  cli::HeldVersions held(*daemon, folder, pool.retire(),
                         [&gpus](const std::string& gpu, const VersionInfo& i) -> Result<std::unique_ptr<cli::HoldMemory>> {
                           return std::unique_ptr<cli::HoldMemory>(new FakeGpuMemory(gpus, gpu, i.bytes));
                         },
                         /*gpu_buffers=*/1);
  Answer first;
  REQUIRE(held.hold(*info, kGpuA, first.reply()));
  poll_until_done(held, {&first});
  REQUIRE(first.lines.back()["ok"] == true);
  // The last unhold returns before the memory goes: the pool lets go of it.
  auto left = held.unhold("policy", 1, kGpuA);
  REQUIRE(left.is_ok());
  CHECK(*left == 0);
  CHECK(gpus.live == 1);
  REQUIRE(pool.queued.size() == 1);
  CHECK(held.retiring(*info, kGpuA));
  CHECK_FALSE(held.retiring(*info, ""));
  // Until it is gone it fills the GPU's one buffer: another hold there is
  // refused, naming it.
  Answer refused;
  auto v_other = *info;
  v_other.version = 7;
  CHECK_FALSE(held.hold(v_other, kGpuA, refused.reply()));
  CHECK(refused.lines.back()["error"].get<std::string>().find("policy v1 (being let go)") != std::string::npos);
  // What waits for it runs once it is gone, in order, and a hold may start then.
  std::vector<int> ran;
  held.after_retired(*info, kGpuA, [&] { ran.push_back(1); });
  held.after_retired(*info, kGpuA, [&] { ran.push_back(2); });
  CHECK(ran.empty());
  pool.run();
  CHECK(ran == std::vector<int>{1, 2});
  CHECK(gpus.live == 0);
  CHECK_FALSE(held.retiring(*info, kGpuA));
  held.after_retired(*info, kGpuA, [&] { ran.push_back(3); });  // nothing retiring: at once
  CHECK(ran == std::vector<int>{1, 2, 3});
  Answer again;
  REQUIRE(held.hold(*info, kGpuA, again.reply()));
  poll_until_done(held, {&again});
  CHECK(again.lines.back()["ok"] == true);
  CHECK(gpus.made == 2);
  REQUIRE(held.unhold("policy", 1, kGpuA).is_ok());
  pool.run();
  CHECK(gpus.live == 0);
}
