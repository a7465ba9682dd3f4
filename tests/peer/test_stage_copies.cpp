#include <doctest/doctest.h>

#include <asio.hpp>
#include <chrono>
#include <vector>

#include "transport/stage_copies.hpp"

using namespace tensorhub;
using namespace tensorhub::peer;

namespace {

// A stage whose copies end when the test says: land() and fill() record
// the tag (or refuse, when told), finish() makes poll() report it.
class ScriptedStage final : public PayloadStage {
 public:
  std::vector<std::uint64_t> asked;  // tags, in the order asked for
  bool refuse = false;
  int drained = 0;
  int given_back = 0;

  std::span<std::byte> take(std::uint64_t) override { return {}; }
  void give_back(std::span<std::byte>) override { ++given_back; }
  Status land(std::span<std::byte>, const core::MutableRegions&, std::uint64_t, std::uint64_t,
              std::uint64_t tag) override {
    return ask(tag);
  }
  Status fill(std::span<std::byte>, const core::ConstRegions&, std::uint64_t, std::uint64_t,
              std::uint64_t tag) override {
    return ask(tag);
  }
  void poll(std::vector<Landed>& out) override {
    out.insert(out.end(), finished_.begin(), finished_.end());
    finished_.clear();
  }
  void drain() override { ++drained; }
  std::size_t in_flight() const override { return asked.size(); }
  void finish(std::uint64_t tag, bool ok) { finished_.push_back(Landed{tag, 0, 0, ok}); }

 private:
  Status ask(std::uint64_t tag) {
    if (refuse) return Status::unavailable("refused");
    asked.push_back(tag);
    return Status::ok();
  }
  std::vector<Landed> finished_;
};

StageCopies::Copy copy_of(ScriptedStage& stage, const std::shared_ptr<VersionLease>& lease, bool serving,
                          std::uint64_t offset) {
  StageCopies::Copy c;
  c.stage = &stage;
  c.lease = lease;
  c.serving = serving;
  c.offset = offset;
  c.length = 4096;
  ++lease->uses;
  return c;
}

// Runs the I/O context until `done` or a second passes.
template <typename Done>
void run_until(asio::io_context& io, Done done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!done() && std::chrono::steady_clock::now() < until) io.run_for(std::chrono::milliseconds(1));
}

}  // namespace

TEST_CASE("stage copies: each copy ends once, with its result, and the counts follow") {
  asio::io_context io;
  std::vector<StageCopies::Ended> ended;
  StageCopies copies(io, [&](std::vector<StageCopies::Ended> batch) {
    for (auto& e : batch) ended.push_back(std::move(e));
  });
  ScriptedStage stage;
  auto lease = std::make_shared<VersionLease>();
  auto land_at = [&](std::uint64_t offset) {
    return copies.begin(copy_of(stage, lease, false, offset), [&](std::uint64_t tag) {
      return stage.land({}, core::MutableRegions{}, offset, 4096, tag);
    });
  };
  auto fill_at = [&](std::uint64_t offset) {
    return copies.begin(copy_of(stage, lease, true, offset), [&](std::uint64_t tag) {
      return stage.fill({}, core::ConstRegions{}, offset, 4096, tag);
    });
  };
  REQUIRE(land_at(0).is_ok());
  REQUIRE(fill_at(4096).is_ok());
  REQUIRE(fill_at(8192).is_ok());
  CHECK(copies.in_flight() == 3);
  CHECK(copies.landings_begun() == 1);
  REQUIRE(stage.asked.size() == 3);
  CHECK(stage.asked[0] != stage.asked[1]);

  // A refused copy is not kept, nor counted.
  stage.refuse = true;
  CHECK_FALSE(land_at(12288).is_ok());
  --lease->uses;  // the caller's to end, as the engine does
  CHECK(copies.in_flight() == 3);
  CHECK(copies.landings_begun() == 1);

  // The landing fails and one fill succeeds at one poll; the poll goes on
  // for the copy still in flight.
  stage.finish(stage.asked[0], false);
  stage.finish(stage.asked[1], true);
  stage.finish(999, true);  // a tag it never began: ignored
  run_until(io, [&] { return ended.size() == 2; });
  REQUIRE(ended.size() == 2);
  CHECK(copies.in_flight() == 1);
  for (const auto& e : ended) {
    CHECK(e.ok == e.copy.serving);
    CHECK(e.copy.offset == (e.copy.serving ? 4096u : 0u));
  }
  stage.finish(stage.asked[2], false);  // a fill that fails is not served
  run_until(io, [&] { return ended.size() == 3; });
  REQUIRE(ended.size() == 3);
  CHECK_FALSE(ended[2].ok);
  CHECK(ended[2].copy.offset == 8192);
  CHECK(copies.in_flight() == 0);
  CHECK(copies.fills_served() == 1);
}

TEST_CASE("stage copies: draining waits for the stages and ends every copy without its result") {
  asio::io_context io;
  int batches = 0;
  StageCopies copies(io, [&](std::vector<StageCopies::Ended>) { ++batches; });
  ScriptedStage stage;
  auto lease = std::make_shared<VersionLease>();
  bool idle = false;
  lease->on_idle.push_back([&] { idle = true; });
  REQUIRE(copies.begin(copy_of(stage, lease, false, 0), [&](std::uint64_t tag) {
    return stage.land({}, core::MutableRegions{}, 0, 4096, tag);
  }).is_ok());
  REQUIRE(copies.begin(copy_of(stage, lease, true, 4096), [&](std::uint64_t tag) {
    return stage.fill({}, core::ConstRegions{}, 4096, 4096, tag);
  }).is_ok());
  lease->sending_to[PeerId{}].insert(4096);
  CHECK(lease->uses == 2);
  io.run_for(std::chrono::milliseconds(2));  // the poll timer is armed and nothing has ended
  CHECK(batches == 0);
  copies.drain();
  CHECK(stage.drained == 1);
  CHECK(stage.given_back == 1);  // the fill's buffer
  CHECK(lease->uses == 0);
  CHECK(idle);
  CHECK(lease->sending_to.empty());
  CHECK(copies.in_flight() == 0);
  // Nothing is polled after a drain: a copy begun and ended afterwards is never reported.
  auto late = std::make_shared<VersionLease>();
  REQUIRE(copies.begin(copy_of(stage, late, false, 0), [&](std::uint64_t tag) {
    return stage.land({}, core::MutableRegions{}, 0, 4096, tag);
  }).is_ok());
  stage.finish(stage.asked.back(), true);
  io.run_for(std::chrono::milliseconds(5));
  CHECK(batches == 0);
}
