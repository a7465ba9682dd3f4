// The staging ring (src/cuda/staging_ring.hpp) over the fake device: bytes
// reach their final places in "device" memory through a few pinned slots,
// a slot is reused only after its copies ran, and failures come back.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/random_fill.hpp"
#include "cuda/staging_ring.hpp"
#include "support/fake_device.hpp"

using namespace tensorhub;
using cuda::StagingRing;
using testing::FakeDevice;

using testing::DeviceRegions;

TEST_CASE("staging ring: an image reaches device regions through 4 slots, copies landing in any order") {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    FakeDevice device(3);
    // 300,001 bytes over regions of odd sizes, so pieces span regions.
    DeviceRegions memory(device, {70001, 13, 130000, 99987});
    std::vector<std::byte> source(memory.image().size());
    core::fill_pseudo_random(source, seed);
    std::unique_ptr<StagingRing> ring;
    REQUIRE(StagingRing::create(device, {.slot_bytes = 16384, .slots = 4}, ring));

    // The pieces (as blocks arrive from the network) in a random order.
    std::vector<std::uint64_t> offsets;
    for (std::uint64_t at = 0; at < source.size(); at += 16384) offsets.push_back(at);
    std::mt19937_64 rng(seed);
    std::shuffle(offsets.begin(), offsets.end(), rng);

    std::vector<peer::PayloadStage::Landed> landed;
    std::size_t next = 0;
    std::size_t refused = 0;
    while (landed.size() < offsets.size()) {
      if (next < offsets.size()) {
        std::span<std::byte> slot = ring->take(ring->slot_bytes());
        if (slot.empty()) {
          ++refused;
          CHECK(ring->in_flight() == 4);
        } else {
          const std::uint64_t at = offsets[next];
          const std::uint64_t n = std::min<std::uint64_t>(16384, source.size() - at);
          std::memcpy(slot.data(), source.data() + at, n);
          REQUIRE(ring->land(slot, memory.image(), at, n, at));
          ++next;
          continue;
        }
      }
      // The device runs a few operations on streams chosen at random.
      for (int k = 0; k < 3; ++k) device.step_any(rng);
      ring->poll(landed);
    }
    CHECK(refused > 0);  // the ring really filled up
    CHECK(memory.bytes() == source);
    CHECK(device.misplaced_copies() == 0);
    CHECK(device.live_tickets() == 0);
    CHECK(device.pinned_bytes() == 4 * 16384);  // the ring is the only host memory
    std::vector<std::uint64_t> tags;
    for (const auto& l : landed) {
      CHECK(l.ok);
      CHECK(l.tag == l.offset);
      tags.push_back(l.tag);
    }
    std::sort(tags.begin(), tags.end());
    std::sort(offsets.begin(), offsets.end());
    CHECK(tags == offsets);  // each submission comes back once
  }
}

TEST_CASE("staging ring: a slot is not handed out again while its copy has not run") {
  FakeDevice device(1);
  DeviceRegions memory(device, {4096});
  std::unique_ptr<StagingRing> ring;
  REQUIRE(StagingRing::create(device, {.slot_bytes = 1024, .slots = 2}, ring));
  std::vector<peer::PayloadStage::Landed> landed;

  auto a = ring->take(ring->slot_bytes());
  auto b = ring->take(ring->slot_bytes());
  REQUIRE(!a.empty());
  REQUIRE(!b.empty());
  CHECK(a.data() != b.data());
  CHECK(ring->take(ring->slot_bytes()).empty());
  std::memset(a.data(), 0x11, 1024);
  std::memset(b.data(), 0x22, 1024);
  REQUIRE(ring->land(a, memory.image(), 0, 1024, 0));
  REQUIRE(ring->land(b, memory.image(), 1024, 1024, 1));
  ring->poll(landed);
  CHECK(landed.empty());
  CHECK(ring->take(ring->slot_bytes()).empty());

  // The first copy runs but its ticket has not: still not free.
  CHECK(device.step(0));
  ring->poll(landed);
  CHECK(landed.empty());
  CHECK(ring->take(ring->slot_bytes()).empty());
  // Its ticket: exactly that slot comes back.
  CHECK(device.step(0));
  ring->poll(landed);
  REQUIRE(landed.size() == 1);
  CHECK(landed[0].tag == 0);
  auto c = ring->take(ring->slot_bytes());
  CHECK(c.data() == a.data());
  CHECK(ring->take(ring->slot_bytes()).empty());
  // Overwriting the reused slot cannot touch what the second copy reads:
  // that slot is still in flight, and its bytes land as they were.
  std::memset(c.data(), 0x33, 1024);
  device.run_all();
  ring->poll(landed);
  const auto bytes = memory.bytes();
  CHECK(std::all_of(bytes.begin(), bytes.begin() + 1024, [](std::byte x) { return x == std::byte{0x11}; }));
  CHECK(std::all_of(bytes.begin() + 1024, bytes.begin() + 2048, [](std::byte x) { return x == std::byte{0x22}; }));
}

TEST_CASE("staging ring: a copy that fails comes back not ok, and its slot is free again") {
  FakeDevice device(2);
  DeviceRegions memory(device, {3000, 5000});
  std::unique_ptr<StagingRing> ring;
  REQUIRE(StagingRing::create(device, {.slot_bytes = 4096, .slots = 2}, ring));
  // The submission spans both regions: two copies, the second fails.
  device.fail_copy(1);
  auto slot = ring->take(ring->slot_bytes());
  std::memset(slot.data(), 0x5a, 4096);
  REQUIRE(ring->land(slot, memory.image(), 1000, 4096, 7));
  device.run_all();
  std::vector<peer::PayloadStage::Landed> landed;
  ring->poll(landed);
  REQUIRE(landed.size() == 1);
  CHECK_FALSE(landed[0].ok);
  CHECK(landed[0].tag == 7);
  CHECK(landed[0].offset == 1000);
  CHECK(landed[0].length == 4096);
  CHECK(ring->in_flight() == 0);
  CHECK(!ring->take(ring->slot_bytes()).empty());
  CHECK(!ring->take(ring->slot_bytes()).empty());
}

TEST_CASE("staging ring: a lost device refuses the submission and keeps the slot usable") {
  FakeDevice device(1);
  DeviceRegions memory(device, {2048});
  std::unique_ptr<StagingRing> ring;
  REQUIRE(StagingRing::create(device, {.slot_bytes = 1024, .slots = 1}, ring));
  auto slot = ring->take(ring->slot_bytes());
  device.lose();
  const Status s = ring->land(slot, memory.image(), 0, 1024, 0);
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK(ring->in_flight() == 0);
  CHECK(!ring->take(ring->slot_bytes()).empty());
}

TEST_CASE("staging ring: creation fails cleanly without pinned memory or with no slots") {
  FakeDevice device(1);
  device.limit_pinned(1 << 20);
  std::unique_ptr<StagingRing> ring;
  const Status big = StagingRing::create(device, {.slot_bytes = 1 << 20, .slots = 2}, ring);
  CHECK(big.code() == StatusCode::kUnavailable);
  CHECK(big.message().find("2 x 1048576") != std::string::npos);
  CHECK(ring == nullptr);
  CHECK(StagingRing::create(device, {.slot_bytes = 1024, .slots = 0}, ring).code() == StatusCode::kInvalidArgument);
  CHECK(device.pinned_bytes() == 0);
}

TEST_CASE("staging ring: destruction waits for copies in flight, then frees the pinned memory") {
  FakeDevice device(2);
  DeviceRegions memory(device, {8192});
  std::vector<std::byte> source(8192);
  core::fill_pseudo_random(source, 9);
  {
    std::unique_ptr<StagingRing> ring;
    REQUIRE(StagingRing::create(device, {.slot_bytes = 4096, .slots = 2}, ring));
    for (std::uint64_t at : {0u, 4096u}) {
      auto slot = ring->take(ring->slot_bytes());
      std::memcpy(slot.data(), source.data() + at, 4096);
      REQUIRE(ring->land(slot, memory.image(), at, 4096, at));
    }
    CHECK(device.copies_run() == 0);
  }
  CHECK(device.copies_run() == 2);
  CHECK(memory.bytes() == source);
  CHECK(device.pinned_bytes() == 0);
  CHECK(device.live_tickets() == 0);
}

TEST_CASE("staging ring: two landings of one range end in the order they were asked for, whatever the streams do") {
  for (std::uint64_t seed : {4u, 5u, 6u, 7u}) {
    FakeDevice device(3);  // landing i and i + 8 would take different streams in turn
    DeviceRegions memory(device, {64 * 1024});
    std::unique_ptr<StagingRing> ring;
    REQUIRE(StagingRing::create(device, {.slot_bytes = 4096, .slots = 16}, ring));
    // Every 4 KiB range lands twice (a block fetched again after a holder
    // was given up): first bytes 0xAA, then the range's own value.
    for (int pass = 0; pass < 2; ++pass) {
      for (std::uint64_t at = 0; at < 64 * 1024; at += 8192) {
        auto slot = ring->take(4096);
        REQUIRE(!slot.empty());
        std::memset(slot.data(), pass == 0 ? 0xAA : static_cast<int>(at / 8192), 4096);
        REQUIRE(ring->land(slot, memory.image(), at, 4096, at));
      }
    }
    std::mt19937_64 rng(seed);
    while (device.step_any(rng)) {
    }
    std::vector<peer::PayloadStage::Landed> landed;
    ring->poll(landed);
    CHECK(landed.size() == 16);
    const auto bytes = memory.bytes();
    for (std::uint64_t at = 0; at < 64 * 1024; at += 8192) {
      CHECK(bytes[at] == static_cast<std::byte>(at / 8192));
      CHECK(bytes[at + 4095] == static_cast<std::byte>(at / 8192));
    }
  }
}

TEST_CASE("staging ring: a fill copies device bytes into a slot, which stays taken until given back") {
  FakeDevice device(2);
  DeviceRegions memory(device, {5000, 3000});
  std::vector<std::byte> source(8000);
  core::fill_pseudo_random(source, 21);
  memory.fill_from(source);
  std::unique_ptr<StagingRing> ring;
  REQUIRE(StagingRing::create(device, {.slot_bytes = 4096, .slots = 1}, ring));
  auto slot = ring->take(4096);
  REQUIRE(ring->fill(slot, memory.image().as_const(), 3000, 4000, 9));  // spans both regions
  std::vector<peer::PayloadStage::Landed> done;
  ring->poll(done);
  CHECK(done.empty());  // nothing ran yet
  device.run_all();
  ring->poll(done);
  REQUIRE(done.size() == 1);
  CHECK(done[0].ok);
  CHECK(done[0].tag == 9);
  CHECK(std::equal(slot.begin(), slot.begin() + 4000, source.begin() + 3000));
  CHECK(device.bytes_to_host() == 4000);
  CHECK(device.misplaced_copies() == 0);
  CHECK(ring->take(4096).empty());  // still the filler's
  ring->give_back(slot);
  CHECK(!ring->take(4096).empty());
}

TEST_CASE("staging ring: a fill refused by a lost device leaves the slot with its taker") {
  FakeDevice device(1);
  DeviceRegions memory(device, {4096});
  std::unique_ptr<StagingRing> ring;
  REQUIRE(StagingRing::create(device, {.slot_bytes = 4096, .slots = 1}, ring));
  auto slot = ring->take(4096);
  device.lose();
  CHECK(ring->fill(slot, memory.image().as_const(), 0, 4096, 1).code() == StatusCode::kUnavailable);
  CHECK(ring->in_flight() == 0);
  CHECK(ring->take(4096).empty());
  ring->give_back(slot);
  CHECK(!ring->take(4096).empty());
}
