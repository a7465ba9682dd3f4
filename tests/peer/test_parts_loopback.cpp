// Versions in parts between Peers in one process over loopback: every
// trainer rank publishes its part through the public API, the ranks seal,
// and the version is a head everywhere; a rank that never publishes is named.
// Selections, declared views, and both into safetensors files.
#include <doctest/doctest.h>

#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/random_fill.hpp"
#include "cuda/device_memory_domain.hpp"
#include "cuda/staging_ring.hpp"
#include "manifest/slices_metadata.hpp"
#include "support/fake_device.hpp"
#include "support/temp_dir.hpp"
#include "tensorhub/safetensors.hpp"
#include "transport/peer_internal.hpp"
#include "support/gossip_network.hpp"
#include "support/model_fixture.hpp"
#include "tensorhub/peer.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kRows = 3072, kCols = 128;  // "w", F32: 1.5 MiB

std::vector<PublicKey> ranks_keys(std::size_t n) {
  std::vector<PublicKey> keys;
  for (std::size_t i = 0; i < n; ++i) keys.push_back(GossipNetwork::identity_for(60 + i).public_key());
  return keys;
}

std::unique_ptr<Peer> start(std::uint64_t key, std::vector<std::string> seeds) {
  PeerOptions o;
  o.listen = "127.0.0.1:0";
  o.data_listen = "127.0.0.1:0";
  o.seeds = std::move(seeds);
  o.trusted_publishers = ranks_keys(8);
  o.shard_size = 256u << 10;
  o.block_size = 64u << 10;
  o.host = "h" + std::to_string(key);
  auto peer = Peer::start(o, GossipNetwork::identity_for(key), test_swarm_key(0x48));
  REQUIRE_MESSAGE(peer.is_ok(), peer.status().to_string());
  return std::move(*peer);
}

// Rank `rank` of 3: rows [rank * 1024, +1024) of "w".
struct RankPart {
  std::vector<std::byte> image;
  std::vector<TensorEntry> tensors;
};
RankPart rank_part(std::uint32_t rank, std::uint64_t version) {
  const std::uint64_t rows = kRows / 3;
  RankPart p;
  p.image.resize(rows * kCols * 4);
  core::fill_pseudo_random(p.image, version * 10 + rank);
  p.tensors.push_back(TensorEntry{"w", DType::kF32, {rows, kCols}, 0, p.image.size(), {kRows, kCols}, {rank * rows, 0}});
  return p;
}

Result<PublishHandle> publish(Peer& peer, std::uint64_t version, std::uint32_t rank, const RankPart& part,
                              const PartOptions& options = {}) {
  const ConstRegion regions[] = {part.image};
  return peer.publish_part("policy", version, rank, 3, regions, part.tensors, options);
}

// v1 published by peers[0..2], one part each, and sealed.
struct SealedParts {
  std::vector<RankPart> parts;        // served from: they outlive the handles
  std::vector<PublishHandle> handles;
  std::vector<std::byte> full;        // the whole "w", the parts' rows in order
};
SealedParts publish_sealed(const std::vector<std::unique_ptr<Peer>>& peers, const PartOptions& options = {}) {
  SealedParts v;
  for (std::uint32_t r = 0; r < 3; ++r) {
    v.parts.push_back(rank_part(r, 1));
    v.full.insert(v.full.end(), v.parts.back().image.begin(), v.parts.back().image.end());
    auto h = publish(*peers[r], 1, r, v.parts.back(), options);
    REQUIRE_MESSAGE(h.is_ok(), h.status().to_string());
    v.handles.push_back(std::move(*h));
  }
  for (auto& h : v.handles) REQUIRE(h.wait_sealed(20s).is_ok());
  return v;
}

// Whether `observer`'s gossip says, within 20 s, that `gone` hold nothing.
bool until_they_hold_nothing(Peer& observer, std::initializer_list<const Peer*> gone) {
  const auto hold_nothing = [&] {
    const auto status = nlohmann::json::parse(observer.status_json());
    for (const auto& member : status["members"]) {
      for (const Peer* peer : gone) {
        if (member["id"] == peer->id().hex() && !member["holds"].empty()) return false;
      }
    }
    return true;
  };
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!hold_nothing() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  return hold_nothing();
}

// Whether `observer`'s gossip says, within 20 s, that `holder` holds
// something complete (a view's fetch counts its holders by that).
bool until_it_holds_complete(Peer& observer, const Peer& holder) {
  const auto holds = [&] {
    const auto status = nlohmann::json::parse(observer.status_json());
    for (const auto& member : status["members"]) {
      if (member["id"] != holder.id().hex()) continue;
      for (const auto& h : member["holds"]) {
        if (h["complete"] == true) return true;
      }
    }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!holds() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  return holds();
}

}  // namespace

TEST_CASE("parts over loopback: three ranks publish through Peer::publish_part, seal, and a watcher sees one head") {
  std::vector<std::unique_ptr<Peer>> peers;
  peers.push_back(start(60, {}));
  const std::string seed = peers[0]->gossip_address();
  for (std::uint64_t k : {61, 62, 70}) peers.push_back(start(k, {seed}));
  Peer& watcher = *peers[3];

  std::vector<RankPart> parts;
  std::vector<PublishHandle> handles;
  for (std::uint32_t r = 0; r < 3; ++r) {
    parts.push_back(rank_part(r, 1));
    auto h = publish(*peers[r], 1, r, parts.back());
    REQUIRE_MESSAGE(h.is_ok(), h.status().to_string());
    CHECK(h->info().version == 1);
    handles.push_back(std::move(*h));
  }
  for (auto& h : handles) CHECK_MESSAGE(h.wait_sealed(20s).is_ok(), h.wait_sealed(0ms).to_string());
  auto head = watcher.wait_for_head("policy", 0, 20s);
  REQUIRE_MESSAGE(head.is_ok(), head.status().to_string());
  CHECK(head->version == 1);
  CHECK(head->bytes == kRows * kCols * 4);
  for (std::size_t r = 0; r < 3; ++r) CHECK(peers[r]->latest("policy")->id == head->id);
  // A rank's part is its own swarm unit: other ranks fetch nothing of it to seal.
  CHECK(handles[0].info().id != head->id);

  // The watcher fetches the whole model: the trainer's full "w", rows in order.
  std::vector<std::byte> full;
  for (const RankPart& p : parts) full.insert(full.end(), p.image.begin(), p.image.end());
  auto fetched = watcher.fetch("policy", 1);
  REQUIRE_MESSAGE(fetched.is_ok(), fetched.status().to_string());
  REQUIRE_MESSAGE(fetched->wait(20s).is_ok(), fetched->wait(0ms).to_string());
  CHECK(fetched->info().id == head->id);
  REQUIRE(fetched->tensors().size() == 1);
  CHECK(fetched->tensors()[0] == TensorEntry{"w", DType::kF32, {kRows, kCols}, 0, kRows * kCols * 4});
  CHECK(std::equal(fetched->bytes().begin(), fetched->bytes().end(), full.begin(), full.end()));
  const FetchProgressInfo progress = fetched->progress();
  CHECK(progress.done);
  CHECK(progress.bytes_verified == full.size());
  CHECK(progress.shards_total == 6);  // 512 KiB a part, 256 KiB shards
  CHECK(fetched->verified_shards() == std::vector<bool>(6, true));
  CHECK(fetched->verified_tensors() == std::vector<bool>{true});
  // Into the caller's regions, split where no part splits: each part lands across them.
  std::vector<std::byte> first(1000 * 1000), second(full.size() - first.size());
  const MutableRegion into[] = {first, second};
  auto again = peers[1]->fetch("policy", 1, into);
  REQUIRE(again.is_ok());
  REQUIRE(again->wait(20s).is_ok());
  CHECK(std::equal(first.begin(), first.end(), full.begin()));
  CHECK(std::equal(second.begin(), second.end(), full.begin() + static_cast<std::ptrdiff_t>(first.size())));
  CHECK(again->regions().size() == 2);
  fetched->release();
  CHECK(fetched->bytes().empty());

  // v2: rank 2 never publishes; the others' handles name it.
  for (std::uint32_t r = 0; r < 2; ++r) {
    auto h = publish(*peers[r], 2, r, rank_part(r, 2));
    REQUIRE(h.is_ok());
    const Status s = h->wait_sealed(1500ms);
    CHECK(s.code() == StatusCode::kTimeout);
    CHECK_MESSAGE(s.message().find("part 2 of 3") != std::string::npos, s.message());
    handles.push_back(std::move(*h));
  }
  CHECK(watcher.latest("policy")->version == 1);
  // A part for a number the swarm has passed is refused.
  CHECK(publish(*peers[2], 1, 2, rank_part(2, 5)).status().code() == StatusCode::kAlreadyExists);
}

TEST_CASE("parts over loopback: a fetch by selection moves the shards it needs and lands bit-identical slices") {
  std::vector<std::unique_ptr<Peer>> peers;
  peers.push_back(start(60, {}));
  const std::string seed = peers[0]->gossip_address();
  for (std::uint64_t k : {61, 62, 71, 72}) peers.push_back(start(k, {seed}));
  const SealedParts v1 = publish_sealed(peers);
  const std::vector<std::byte>& full = v1.full;
  Peer& rows_rank = *peers[3];
  Peer& columns_rank = *peers[4];
  REQUIRE(rows_rank.wait_for_head("policy", 0, 20s).is_ok());
  REQUIRE(columns_rank.wait_for_head("policy", 0, 20s).is_ok());

  // Rows [1024, 2048): part 1's rows exactly, so part 1 alone is fetched.
  const TensorSelection rows[] = {{"w", TensorSlice{{{1024, 2048}, {0, kCols}}}}};
  auto layout = rows_rank.tensors("policy", 1, rows);
  REQUIRE_MESSAGE(layout.is_ok(), layout.status().to_string());
  REQUIRE(layout->size() == 1);
  CHECK((*layout)[0] == TensorEntry{"w", DType::kF32, {1024, kCols}, 0, 1024 * kCols * 4, {kRows, kCols}, {1024, 0}});
  auto by_rows = rows_rank.fetch_selection("policy", 1, rows);
  REQUIRE_MESSAGE(by_rows.is_ok(), by_rows.status().to_string());
  REQUIRE_MESSAGE(by_rows->wait(20s).is_ok(), by_rows->wait(0ms).to_string());
  CHECK(by_rows->tensors()[0] == (*layout)[0]);
  const std::uint64_t row_bytes = kCols * 4;
  CHECK(std::equal(by_rows->bytes().begin(), by_rows->bytes().end(), full.begin() + 1024 * row_bytes,
                   full.begin() + 2048 * row_bytes));
  FetchProgressInfo p = by_rows->progress();
  CHECK(p.shards_total == 2);  // part 1's two shards of 256 KiB
  CHECK(p.bytes_verified == 1024 * row_bytes);
  CHECK(p.bytes_received == 1024 * row_bytes);
  CHECK(by_rows->verified_shards() == std::vector<bool>{true, true});
  CHECK(by_rows->verified_tensors() == std::vector<bool>{true});

  // A tensor-parallel rank's columns [64, 128) of every row: strided, in
  // every shard of every part; into the caller's memory.
  const TensorSelection columns[] = {{"w", TensorSlice{{{0, kRows}, {64, 128}}}}};
  std::vector<std::byte> into(kRows * 64 * 4);
  const MutableRegion regions[] = {into};
  auto by_columns = columns_rank.fetch_selection("policy", 1, columns, regions);
  REQUIRE_MESSAGE(by_columns.is_ok(), by_columns.status().to_string());
  REQUIRE_MESSAGE(by_columns->wait(20s).is_ok(), by_columns->wait(0ms).to_string());
  std::vector<std::byte> expected;
  for (std::uint64_t r = 0; r < kRows; ++r) {
    const auto row = full.begin() + static_cast<std::ptrdiff_t>(r * row_bytes + 64 * 4);
    expected.insert(expected.end(), row, row + 64 * 4);
  }
  CHECK(into == expected);
  p = by_columns->progress();
  CHECK(p.shards_total == 6);
  CHECK(p.bytes_received == full.size());  // whole shards: the hash layout verifies shards whole
  CHECK(by_columns->verified_shards() == std::vector<bool>(6, true));

  // The trainer rank that published part 1 copies its selection of it locally: nothing crosses the network.
  auto local = peers[1]->fetch_selection("policy", 1, rows);
  REQUIRE_MESSAGE(local.is_ok(), local.status().to_string());
  REQUIRE_MESSAGE(local->wait(20s).is_ok(), local->wait(0ms).to_string());
  CHECK(std::equal(local->bytes().begin(), local->bytes().end(), by_rows->bytes().begin(), by_rows->bytes().end()));
  CHECK(local->progress().bytes_received == 0);
  CHECK(local->verified_tensors() == std::vector<bool>{true});

  // Bad selections and destinations are refused, naming what is wrong.
  const TensorSelection unknown[] = {{"x", {}}};
  CHECK(rows_rank.fetch_selection("policy", 1, unknown).status().message() == "policy v1 has no tensor 'x'");
  std::vector<std::byte> small(10);
  const MutableRegion too_small[] = {small};
  const auto wrong = columns_rank.fetch_selection("policy", 1, rows, too_small);
  CHECK(wrong.status().code() == StatusCode::kInvalidArgument);
  // One selection of a version a peer: it serves what it holds.
  CHECK(rows_rank.fetch_selection("policy", 1, columns).status().code() == StatusCode::kAlreadyExists);
  // A whole fetch of a part held as a selection is refused too, naming why.
  const auto whole = rows_rank.fetch("policy", 1);
  CHECK(whole.status().code() == StatusCode::kAlreadyExists);
}

TEST_CASE("parts over loopback: a selection of a whole version from its super-seeding publisher alone completes") {
  // The publisher reveals shards a few at a time to whole fetchers; a
  // fetcher of a selection takes only the shards it wants, so it is shown
  // the publisher's whole bitfield instead.
  auto publisher = start(60, {});
  auto fetcher = start(71, {publisher->gossip_address()});
  RankPart whole;
  whole.image.resize(kRows * kCols * 4);
  core::fill_pseudo_random(whole.image, 5);
  whole.tensors.push_back(TensorEntry{"w", DType::kF32, {kRows, kCols}, 0, whole.image.size()});
  auto published = publisher->publish("policy", whole.image, whole.tensors);
  REQUIRE_MESSAGE(published.is_ok(), published.status().to_string());
  REQUIRE(fetcher->wait_for_head("policy", 0, 20s).is_ok());
  // The last 512 rows: the last of six shards.
  const TensorSelection last[] = {{"w", TensorSlice{{{kRows - 512, kRows}, {0, kCols}}}}};
  auto fetched = fetcher->fetch_selection("policy", 1, last);
  REQUIRE_MESSAGE(fetched.is_ok(), fetched.status().to_string());
  REQUIRE_MESSAGE(fetched->wait(20s).is_ok(), fetched->wait(0ms).to_string());
  const std::size_t from = (kRows - 512) * kCols * 4;
  CHECK(std::equal(fetched->bytes().begin(), fetched->bytes().end(), whole.image.begin() + static_cast<std::ptrdiff_t>(from),
                   whole.image.end()));
  CHECK(fetched->progress().bytes_received == whole.image.size() - from);
  CHECK(fetched->verified_tensors() == std::vector<bool>{true});
}

TEST_CASE("parts over loopback: declared views move exactly a strided selection's bytes, same-selection fetchers "
          "serve each other, and a whole reader serves a view nobody fetched once its publishers are gone") {
  std::vector<std::unique_ptr<Peer>> peers;
  peers.push_back(start(60, {}));
  const std::string seed = peers[0]->gossip_address();
  for (std::uint64_t k : {61, 62, 71, 72, 73, 74}) peers.push_back(start(k, {seed}));
  // Two tensor-parallel ranks' columns of "w": every row of every part
  // gives each a strided piece of 256 bytes.
  const TensorSelection left[] = {{"w", TensorSlice{{{0, kRows}, {0, 64}}}}};
  const TensorSelection right[] = {{"w", TensorSlice{{{0, kRows}, {64, 128}}}}};
  PartOptions declared;
  declared.views = {{left[0]}, {right[0]}};
  SealedParts v1 = publish_sealed(peers, declared);
  for (const PublishHandle& h : v1.handles) CHECK(h.manifest().views().size() == 2);
  const std::vector<std::byte>& full = v1.full;
  const std::uint64_t row_bytes = kCols * 4;
  std::vector<std::byte> expected;
  for (std::uint64_t r = 0; r < kRows; ++r) {
    const auto row = full.begin() + static_cast<std::ptrdiff_t>(r * row_bytes + 64 * 4);
    expected.insert(expected.end(), row, row + 64 * 4);
  }

  // The right-hand rank of a first instance: its view of each part, from
  // that part's publisher, gathered there; nothing else crosses.
  Peer& first = *peers[3];
  REQUIRE(first.wait_for_head("policy", 0, 20s).is_ok());
  auto a = first.fetch_selection("policy", 1, right);
  REQUIRE_MESSAGE(a.is_ok(), a.status().to_string());
  REQUIRE_MESSAGE(a->wait(20s).is_ok(), a->wait(0ms).to_string());
  CHECK(std::equal(a->bytes().begin(), a->bytes().end(), expected.begin(), expected.end()));
  FetchProgressInfo p = a->progress();
  CHECK(p.bytes_received == expected.size());  // 768 KiB: exactly the selection (whole shards: 1.5 MiB)
  CHECK(p.bytes_verified == expected.size());
  CHECK(p.shards_total == 3);  // one view shard of 256 KiB a part
  CHECK(a->verified_tensors() == std::vector<bool>{true});

  // A trainer rank that fetches the selection copies its own part's bytes
  // locally (whole shards, held here) and fetches the others' views.
  auto own = peers[1]->fetch_selection("policy", 1, right);
  REQUIRE_MESSAGE(own.is_ok(), own.status().to_string());
  REQUIRE_MESSAGE(own->wait(20s).is_ok(), own->wait(0ms).to_string());
  CHECK(std::equal(own->bytes().begin(), own->bytes().end(), expected.begin(), expected.end()));
  CHECK(own->progress().bytes_received == expected.size() * 2 / 3);
  own->release();

  // A reader of the whole model holds every part.
  auto whole = peers[5]->fetch("policy", 1);
  REQUIRE(whole.is_ok());
  REQUIRE_MESSAGE(whole->wait(20s).is_ok(), whole->wait(0ms).to_string());

  // The publishers go: the same rank of a second instance fetches its
  // views from the first, which serves what it holds.
  v1.handles.clear();
  Peer& second = *peers[4];
  REQUIRE(second.wait_for_head("policy", 0, 20s).is_ok());
  std::vector<std::byte> into(expected.size());
  const MutableRegion regions[] = {into};
  auto b = second.fetch_selection("policy", 1, right, regions);
  REQUIRE_MESSAGE(b.is_ok(), b.status().to_string());
  REQUIRE_MESSAGE(b->wait(20s).is_ok(), b->wait(0ms).to_string());
  CHECK(into == expected);
  CHECK(b->progress().bytes_received == expected.size());

  // The left-hand rank's views: declared, but their publishers are gone
  // and nobody fetched them. The whole reader, asked (kServeView), serves
  // them from the parts it holds, once gossip has told the fetcher the
  // publishers hold nothing: still exactly the selected bytes.
  REQUIRE(until_they_hold_nothing(*peers[6], {peers[0].get(), peers[1].get(), peers[2].get()}));
  REQUIRE(until_it_holds_complete(*peers[6], *peers[5]));
  auto c = peers[6]->fetch_selection("policy", 1, left);
  REQUIRE_MESSAGE(c.is_ok(), c.status().to_string());
  REQUIRE_MESSAGE(c->wait(20s).is_ok(), c->wait(0ms).to_string());
  for (std::uint64_t r = 0; r < kRows; ++r) {
    const auto row = full.begin() + static_cast<std::ptrdiff_t>(r * row_bytes);
    REQUIRE(std::equal(row, row + 64 * 4, c->bytes().begin() + static_cast<std::ptrdiff_t>(r * 64 * 4)));
  }
  CHECK(c->progress().bytes_received == full.size() / 2);
}

TEST_CASE("parts over loopback: a version in parts and a selection of it go into safetensors files") {
  std::vector<std::unique_ptr<Peer>> peers;
  peers.push_back(start(60, {}));
  const std::string seed = peers[0]->gossip_address();
  for (std::uint64_t k : {61, 62, 71}) peers.push_back(start(k, {seed}));
  const SealedParts v1 = publish_sealed(peers);
  const std::vector<std::byte>& full = v1.full;
  Peer& reader = *peers[3];
  REQUIRE(reader.wait_for_head("policy", 0, 20s).is_ok());
  const TempDir temp;
  const std::string dir = temp.path().string();

  // The whole model: one safetensors file, "w" whole, the parts' rows in order.
  const std::string whole_path = dir + "/whole.safetensors";
  auto whole = reader.fetch_to_file("policy", 1, whole_path);
  REQUIRE_MESSAGE(whole.is_ok(), whole.status().to_string());
  REQUIRE_MESSAGE(whole->wait(20s).is_ok(), whole->wait(0ms).to_string());
  {
    auto file = SafetensorsFile::open(whole_path);
    REQUIRE_MESSAGE(file.is_ok(), file.status().to_string());
    REQUIRE(file->layout().tensors.size() == 1);
    CHECK(file->layout().tensors[0].name == "w");
    CHECK(file->layout().tensors[0].shape == std::vector<std::uint64_t>{kRows, kCols});
    CHECK(file->metadata().empty());
    const auto data = file->bytes().subspan(file->layout().data_offset);
    CHECK(std::equal(data.begin(), data.end(), full.begin(), full.end()));
  }

  // A row-parallel rank's columns: the file holds its slice and says which.
  const TensorSelection columns[] = {{"w", TensorSlice{{{0, kRows}, {64, 128}}}}};
  const std::string selection_path = dir + "/columns.safetensors";
  auto selected = reader.fetch_selection_to_file("policy", 1, columns, selection_path);
  REQUIRE_MESSAGE(selected.is_ok(), selected.status().to_string());
  REQUIRE_MESSAGE(selected->wait(20s).is_ok(), selected->wait(0ms).to_string());
  {
    auto file = SafetensorsFile::open(selection_path);
    REQUIRE_MESSAGE(file.is_ok(), file.status().to_string());
    auto tensors = manifest::part_tensors(file->layout());
    REQUIRE(tensors.is_ok());
    REQUIRE(tensors->size() == 1);
    CHECK((*tensors)[0].shape == std::vector<std::uint64_t>{kRows, 64});
    CHECK((*tensors)[0].global_shape == std::vector<std::uint64_t>{kRows, kCols});
    CHECK((*tensors)[0].slice_begin == std::vector<std::uint64_t>{0, 64});
    const auto data = file->bytes().subspan(file->layout().data_offset);
    const std::uint64_t row_bytes = kCols * 4;
    bool same = data.size() == kRows * 64 * 4;
    for (std::uint64_t r = 0; same && r < kRows; ++r) {
      same = std::equal(data.begin() + static_cast<std::ptrdiff_t>(r * 256), data.begin() + static_cast<std::ptrdiff_t>((r + 1) * 256),
                        full.begin() + static_cast<std::ptrdiff_t>(r * row_bytes + 256));
    }
    CHECK(same);
  }
  // Refused before any file is made: a bad selection, a path taken.
  const TensorSelection unknown[] = {{"x", {}}};
  CHECK(reader.fetch_selection_to_file("policy", 1, unknown, dir + "/x.safetensors").status().message() ==
        "policy v1 has no tensor 'x'");
  CHECK_FALSE(std::filesystem::exists(dir + "/x.safetensors"));
  FileOptions keep;
  keep.overwrite = false;
  CHECK(reader.fetch_selection_to_file("policy", 1, columns, selection_path, keep).status().code() ==
        StatusCode::kAlreadyExists);
}

TEST_CASE("parts over loopback: a selection lands in GPU memory by its views, verified on the device, and without a view "
          "it is refused") {
  // GPU memory is the fake device's: host memory posing as device memory,
  // copies through the staging ring, shards hashed by the device.
  FakeDevice device(2);
  device.complete_on_query(true);
  std::unique_ptr<cuda::StagingRing> ring;
  REQUIRE(cuda::StagingRing::create(device, {.slot_bytes = 64u << 10, .slots = 8}, ring));
  const cuda::DeviceMemoryDomain gpu(device, ring.get());

  std::vector<std::unique_ptr<Peer>> peers;
  peers.push_back(start(60, {}));
  const std::string seed = peers[0]->gossip_address();
  for (std::uint64_t k : {61, 62, 71}) peers.push_back(start(k, {seed}));
  const TensorSelection right[] = {{"w", TensorSlice{{{0, kRows}, {64, 128}}}}};
  const TensorSelection left[] = {{"w", TensorSlice{{{0, kRows}, {0, 64}}}}};
  PartOptions declared;
  declared.views = {{right[0]}};
  const SealedParts v1 = publish_sealed(peers, declared);
  Peer& rank = *peers[3];
  REQUIRE(rank.wait_for_head("policy", 0, 20s).is_ok());

  // Regions of odd sizes, so a view's blocks span them.
  const std::size_t size = kRows * 64 * 4;
  DeviceRegions memory(device, {size / 3 + 5, size - size / 3 - 5});
  auto fetched = peer::fetch_selection_into(rank, "policy", 1, right, memory.regions(), gpu);
  REQUIRE_MESSAGE(fetched.is_ok(), fetched.status().to_string());
  REQUIRE_MESSAGE(fetched->wait(20s).is_ok(), fetched->wait(0ms).to_string());
  std::vector<std::byte> expected;
  for (std::uint64_t r = 0; r < kRows; ++r) {
    const auto row = v1.full.begin() + static_cast<std::ptrdiff_t>(r * kCols * 4 + 64 * 4);
    expected.insert(expected.end(), row, row + 64 * 4);
  }
  CHECK(memory.bytes() == expected);
  CHECK(fetched->progress().bytes_received == size);
  CHECK(device.hashes() >= 3);  // each part's view shard, verified on the device
  CHECK(device.misplaced_copies() == 0);
  fetched->release();

  // The left-hand columns have no declared view: their shards would need
  // host scratch, so the fetch is refused, naming the part.
  DeviceRegions other(device, {size});
  auto refused = peer::fetch_selection_into(rank, "policy", 1, left, other.regions(), gpu);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK_MESSAGE(refused.status().message().find("part 0 of policy v1 has no declared view") != std::string::npos,
                refused.status().message());
  // A GPU that is not there: refused through the public API.
  CHECK(rank.fetch_selection("policy", 1, right, other.regions(),
                             MemoryOptions{"GPU-8b2c3a10-1f2e-4d3c-9a8b-7c6d5e4f3a2b"})
            .status()
            .code() != StatusCode::kOk);
}

TEST_CASE("parts over loopback: a record names a version in 96 parts, whole or as one selection's views, in one part "
          "set, and readers fetch every part and view from it once the publishers are gone") {
  // Eight trainer peers publish 12 parts each of a version in 96 (32 rows
  // of "w" a part), with the two tensor-parallel ranks' column views declared.
  constexpr std::uint32_t kParts = 96, kPublishers = 8;
  constexpr std::uint64_t kPartRows = kRows / kParts;
  constexpr std::size_t kWhole = 8, kSecondWhole = 9, kFirst = 10, kSecond = 11, kLeft = 12;  // peers after the publishers
  std::vector<std::unique_ptr<Peer>> peers;
  peers.push_back(start(60, {}));
  const std::string seed = peers[0]->gossip_address();
  for (std::uint64_t k = 61; k < 60 + kPublishers; ++k) peers.push_back(start(k, {seed}));
  for (std::uint64_t k : {71, 72, 73, 74, 75}) peers.push_back(start(k, {seed}));
  const TensorSelection left[] = {{"w", TensorSlice{{{0, kRows}, {0, 64}}}}};
  const TensorSelection right[] = {{"w", TensorSlice{{{0, kRows}, {64, 128}}}}};
  PartOptions declared;
  declared.views = {{left[0]}, {right[0]}};
  std::vector<std::vector<std::byte>> images(kParts);
  std::vector<std::byte> full;
  std::vector<PublishHandle> handles;
  for (std::uint32_t p = 0; p < kParts; ++p) {
    images[p].resize(kPartRows * kCols * 4);
    core::fill_pseudo_random(images[p], 4800 + p);
    full.insert(full.end(), images[p].begin(), images[p].end());
    std::vector<TensorEntry> tensors = {
        {"w", DType::kF32, {kPartRows, kCols}, 0, images[p].size(), {kRows, kCols}, {p * kPartRows, 0}}};
    const ConstRegion regions[] = {images[p]};
    auto h = peers[p / (kParts / kPublishers)]->publish_part("policy", 1, p, kParts, regions, tensors, declared);
    REQUIRE_MESSAGE(h.is_ok(), h.status().to_string());
    handles.push_back(std::move(*h));
  }
  for (auto& h : handles) REQUIRE_MESSAGE(h.wait_sealed(20s).is_ok(), h.wait_sealed(0ms).to_string());
  std::vector<std::byte> right_columns;
  for (std::uint64_t r = 0; r < kRows; ++r) {
    const auto row = full.begin() + static_cast<std::ptrdiff_t>(r * kCols * 4 + 64 * 4);
    right_columns.insert(right_columns.end(), row, row + 64 * 4);
  }
  // The one entry `peer`'s own signed record holds of "policy" v1, complete
  // (a record is signed again within a second of a change), which the
  // record must not leave out.
  const auto own_holding = [](Peer& peer) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      const auto status = nlohmann::json::parse(peer.status_json());
      CHECK(status["self"]["record"]["holdings_left_out"] == 0);
      std::vector<nlohmann::json> found;
      for (const auto& h : status["self"]["holds"]) {
        if (h["model"] == "policy" && h["version"] == 1) found.push_back(h);
      }
      if ((found.size() == 1 && found[0]["complete"] == true) || std::chrono::steady_clock::now() > until) {
        REQUIRE_MESSAGE(found.size() == 1, (status["self"].dump() + " " + status["stats"].dump()));
        return found[0];
      }
      std::this_thread::sleep_for(20ms);
    }
  };

  // A whole reader's 96 parts are one part set of the seal.
  Peer& whole = *peers[kWhole];
  auto head = whole.wait_for_head("policy", 0, 20s);
  REQUIRE_MESSAGE(head.is_ok(), head.status().to_string());
  auto a = whole.fetch("policy", 1);
  REQUIRE_MESSAGE(a.is_ok(), a.status().to_string());
  REQUIRE_MESSAGE(a->wait(20s).is_ok(), a->wait(0ms).to_string());
  nlohmann::json held = own_holding(whole);
  CHECK(held["id"] == head->id.hex());
  CHECK(held["part_count"] == kParts);
  CHECK(held["parts"].size() == kParts);
  CHECK(held["complete_parts"].size() == kParts);
  CHECK(held["selection"].is_null());
  CHECK(held["complete"] == true);

  // A fetcher of the right-hand columns: its 24 views, one part set of
  // the selection.
  Peer& first = *peers[kFirst];
  REQUIRE(first.wait_for_head("policy", 0, 20s).is_ok());
  auto c = first.fetch_selection("policy", 1, right);
  REQUIRE_MESSAGE(c.is_ok(), c.status().to_string());
  REQUIRE_MESSAGE(c->wait(20s).is_ok(), c->wait(0ms).to_string());
  CHECK(c->progress().bytes_received == right_columns.size());
  held = own_holding(first);
  CHECK(held["id"] == head->id.hex());
  CHECK(held["complete_parts"].size() == kParts);
  CHECK(held["selection"].is_string());

  // The publishers go. Every part is still served: whole by the first
  // reader, and the views by the first fetcher of the selection, as their
  // part sets tell.
  handles.clear();
  for (std::size_t reader : {kSecondWhole, kSecond, kLeft}) {
    REQUIRE(peers[reader]->wait_for_head("policy", 0, 20s).is_ok());
  }
  for (std::size_t observer : {kSecond, kLeft}) {
    std::initializer_list<const Peer*> publishers = {peers[0].get(), peers[1].get(), peers[2].get(), peers[3].get(),
                                                     peers[4].get(), peers[5].get(), peers[6].get(), peers[7].get()};
    REQUIRE(until_they_hold_nothing(*peers[observer], publishers));
  }
  auto b = peers[kSecondWhole]->fetch("policy", 1);
  REQUIRE_MESSAGE(b.is_ok(), b.status().to_string());
  REQUIRE_MESSAGE(b->wait(20s).is_ok(), b->wait(0ms).to_string());
  CHECK(std::equal(b->bytes().begin(), b->bytes().end(), full.begin(), full.end()));
  auto d = peers[kSecond]->fetch_selection("policy", 1, right);
  REQUIRE_MESSAGE(d.is_ok(), d.status().to_string());
  REQUIRE_MESSAGE(d->wait(20s).is_ok(), d->wait(0ms).to_string());
  CHECK(std::equal(d->bytes().begin(), d->bytes().end(), right_columns.begin(), right_columns.end()));
  // Views, not whole shards (those would bring every column: twice as much).
  CHECK(d->progress().bytes_received == right_columns.size());
  // The left-hand columns, which nobody fetched: every one of the 96 views
  // from the whole readers, each asked to serve them (kServeView).
  REQUIRE(until_it_holds_complete(*peers[kLeft], *peers[kWhole]));
  auto e = peers[kLeft]->fetch_selection("policy", 1, left);
  REQUIRE_MESSAGE(e.is_ok(), e.status().to_string());
  REQUIRE_MESSAGE(e->wait(20s).is_ok(), e->wait(0ms).to_string());
  CHECK(e->progress().bytes_received == right_columns.size());
  for (std::uint64_t r = 0; r < kRows; ++r) {
    const auto row = full.begin() + static_cast<std::ptrdiff_t>(r * kCols * 4);
    REQUIRE(std::equal(row, row + 64 * 4, e->bytes().begin() + static_cast<std::ptrdiff_t>(r * 64 * 4)));
  }
}
