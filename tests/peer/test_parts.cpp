// Versions in parts between whole peers in virtual time: every trainer rank
// publishes its part, gossip brings each the others' ids, every rank seals,
// and the seal makes the version a head everywhere. Parts that do not fit
// together, a part that never comes, and a slot signed twice never become
// a version.
#include <doctest/doctest.h>

#include "core/random_fill.hpp"
#include "support/model_fixture.hpp"
#include "support/peer_checks.hpp"
#include "support/peer_network.hpp"

using namespace tensorhub;
using namespace tensorhub::peer;
using namespace tensorhub::testing;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kRows = 4096;  // of the [kRows, 64] F32 weight "w": 1 MiB
constexpr std::uint64_t kCols = 64;

// Rank `rank` of `world`'s FSDP-style part: rows [first, first + rows) of
// "w", and (rank 0) the whole bias "b". Its bytes derive from `seed`.
struct Part {
  std::vector<std::byte> image;
  std::vector<TensorEntry> tensors;
};

Part fsdp_part(std::uint32_t rank, std::uint32_t world, std::uint64_t seed, std::uint64_t first_row = ~0ull) {
  const std::uint64_t rows = kRows / world;
  if (first_row == ~0ull) first_row = rank * rows;
  Part p;
  p.tensors.push_back(TensorEntry{"w", DType::kF32, {rows, kCols}, 0, rows * kCols * 4, {kRows, kCols}, {first_row, 0}});
  std::uint64_t size = rows * kCols * 4;
  if (rank == 0) {
    p.tensors.push_back(TensorEntry{"b", DType::kF32, {kCols}, size, kCols * 4});
    size += kCols * 4;
  }
  p.image.resize(size);
  core::fill_pseudo_random(p.image, seed * 100 + rank);
  return p;
}

Result<std::shared_ptr<LocalVersion>> publish(PeerNetwork& net, std::size_t peer, std::uint64_t version,
                                              std::uint32_t rank, std::uint32_t world, const Part& part) {
  return net.publish_part(peer, "policy", version, PartOf{rank, world}, part.image, part.tensors);
}

bool knows_head_in_parts(PeerNetwork& net, std::size_t peer, std::uint64_t version) {
  auto head = net.core(peer).latest("policy");
  if (!head || head->version != version) return false;
  const KnownVersion* k = net.core(peer).heads().known(head->id);
  return k && k->in_parts();
}

}  // namespace

TEST_CASE("parts: four ranks publish their parts, every rank seals, and the version is one head everywhere") {
  PeerNetwork net(41);
  add_peers(net, 6);  // ranks on peers 0-3; peers 4 and 5 only watch
  std::vector<Part> parts;
  std::vector<std::shared_ptr<LocalVersion>> published;
  for (std::uint32_t r = 0; r < 4; ++r) {
    parts.push_back(fsdp_part(r, 4, 1));
    auto v = publish(net, r, 1, r, 4, parts.back());
    REQUIRE_MESSAGE(v.is_ok(), v.status().to_string());
    published.push_back(*v);
    // No part alone is a version.
    CHECK_FALSE(net.core(r).latest("policy").has_value());
  }
  REQUIRE(net.run_until([&] {
    for (std::size_t p = 0; p < 6; ++p) {
      if (!knows_head_in_parts(net, p, 1)) return false;
    }
    return true;
  }, 20s));
  const ManifestId id = net.core(0).latest("policy")->id;
  for (std::size_t p = 0; p < 6; ++p) {
    CHECK(net.core(p).latest("policy")->id == id);  // every rank's seal is the same version
    CHECK(net.heads_seen(p).size() == 1);
    CHECK(net.errors(p).empty());
  }
  for (std::uint32_t r = 0; r < 4; ++r) CHECK(net.core(r).part_sealed(*published[r]).is_ok());
  // The whole model, as a watcher sees it: "w" whole at [4096, 64], then "b".
  const auto& sealed = *net.core(5).heads().known(id)->sealed();
  REQUIRE(sealed.tensors().size() == 2);
  CHECK(sealed.tensors()[0].name == "w");
  CHECK(sealed.tensors()[0].shape == std::vector<std::uint64_t>{kRows, kCols});
  CHECK_FALSE(sealed.tensors()[0].is_slice());
  CHECK(sealed.tensors()[1].byte_offset == kRows * kCols * 4);
  CHECK(sealed.total_size() == kRows * kCols * 4 + kCols * 4);
  CHECK(net.core(5).latest("policy")->bytes == sealed.total_size());
  for (std::uint32_t r = 0; r < 4; ++r) CHECK(sealed.parts()[r]->id() == published[r]->id);

  // v2 follows v1, whichever rank publishes first.
  for (std::uint32_t r : {3u, 1u, 0u, 2u}) REQUIRE(publish(net, r, 2, r, 4, fsdp_part(r, 4, 2)).is_ok());
  REQUIRE(net.run_until([&] { return knows_head_in_parts(net, 4, 2) && knows_head_in_parts(net, 5, 2); }, 20s));
  CHECK(net.core(4).heads().known(net.core(4).latest("policy")->id)->parent() == id);
}

TEST_CASE("parts: a part that never comes leaves the version unsealed, and its rank is named") {
  PeerNetwork net(42);
  add_peers(net, 4);
  std::vector<std::shared_ptr<LocalVersion>> published;
  for (std::uint32_t r = 0; r < 3; ++r) {  // rank 3 never publishes
    auto v = publish(net, r, 1, r, 4, fsdp_part(r, 4, 1));
    REQUIRE(v.is_ok());
    published.push_back(*v);
  }
  net.run_for(10s);
  for (std::size_t p = 0; p < 4; ++p) CHECK_FALSE(net.core(p).latest("policy").has_value());
  for (const auto& v : published) {
    const Status s = net.core(static_cast<std::size_t>(v->manifest->part()->index)).part_sealed(*v);
    CHECK(s.code() == StatusCode::kUnavailable);
    CHECK_MESSAGE(s.message().find("waits for part 3 of 4") != std::string::npos, s.message());
  }
  // It comes late: the version is sealed then.
  REQUIRE(publish(net, 3, 1, 3, 4, fsdp_part(3, 4, 1)).is_ok());
  REQUIRE(net.run_until([&] { return knows_head_in_parts(net, 0, 1) && knows_head_in_parts(net, 3, 1); }, 20s));
}

TEST_CASE("parts: parts that overlap are never sealed, and the tensor is named") {
  PeerNetwork net(43);
  add_peers(net, 3);
  // Rank 1 of 2 starts a row early: row 2047 is held twice, row 4095 by nobody.
  auto a = publish(net, 0, 1, 0, 2, fsdp_part(0, 2, 1));
  auto b = publish(net, 1, 1, 1, 2, fsdp_part(1, 2, 1, kRows / 2 - 1));
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  net.run_for(10s);
  for (std::size_t p = 0; p < 3; ++p) CHECK_FALSE(net.core(p).latest("policy").has_value());
  const Status s = net.core(0).part_sealed(**a);
  CHECK(s.code() == StatusCode::kVerifyFailed);
  CHECK_MESSAGE(s.message().find("tensor 'w': parts 0 and 1 both cover [2047:2048, 0:64]") != std::string::npos,
                s.message());
  CHECK_FALSE(net.errors(0).empty());
}

TEST_CASE("parts: two manifests for one part are equivocation: the version is never a head, anywhere") {
  PeerNetwork net(44);
  add_peers(net, 4);
  REQUIRE(publish(net, 0, 1, 0, 2, fsdp_part(0, 2, 1)).is_ok());
  REQUIRE(publish(net, 1, 1, 1, 2, fsdp_part(1, 2, 1)).is_ok());
  REQUIRE(publish(net, 2, 1, 1, 2, fsdp_part(1, 2, 7)).is_ok());  // another part 1, other bytes
  net.run_for(15s);
  for (std::size_t p = 0; p < 4; ++p) {
    INFO("peer " << p);
    CHECK_FALSE(net.core(p).latest("policy").has_value());
  }
  for (std::size_t p = 0; p < 3; ++p) {
    INFO("peer " << p);
    CHECK(net.core(p).heads().equivocated("policy", VersionNumber{1}));
  }
  // A part of that number is refused from now on.
  CHECK(publish(net, 0, 1, 0, 2, fsdp_part(0, 2, 3)).status().code() == StatusCode::kAlreadyExists);
}

namespace {

// A model of three tensors, split over `world` ranks as trainers split
// them: "w" [4096, 64] F32 by rows (FSDP), "c" [128, 64] BF16 by columns
// (a tensor-parallel column block: one run per row), and "b" [64] F32
// whole on rank 0. Each part's image starts with a 100-byte gap (as a
// safetensors header), which belongs to no tensor.
struct SplitModel {
  std::vector<std::byte> w, c, b;  // the trainer's full tensors
  std::vector<Part> parts;
  // The whole model as a fetch lays it out: w, c, b end to end.
  std::vector<std::byte> whole() const {
    std::vector<std::byte> out(w);
    out.insert(out.end(), c.begin(), c.end());
    out.insert(out.end(), b.begin(), b.end());
    return out;
  }
};

SplitModel split_model(std::uint32_t world, std::uint64_t seed) {
  constexpr std::uint64_t kGap = 100, kCRows = 128, kCCols = 64;
  SplitModel m;
  m.w.resize(kRows * kCols * 4);
  m.c.resize(kCRows * kCCols * 2);
  m.b.resize(kCols * 4);
  core::fill_pseudo_random(m.w, seed);
  core::fill_pseudo_random(m.c, seed + 1);
  core::fill_pseudo_random(m.b, seed + 2);
  const std::uint64_t rows = kRows / world, cols = kCCols / world;
  for (std::uint32_t r = 0; r < world; ++r) {
    Part p;
    p.image.assign(kGap, std::byte{0x5a});
    const auto w_rows = std::span(m.w).subspan(r * rows * kCols * 4, rows * kCols * 4);
    p.tensors.push_back(TensorEntry{"w", DType::kF32, {rows, kCols}, p.image.size(), w_rows.size(), {kRows, kCols},
                                    {r * rows, 0}});
    p.image.insert(p.image.end(), w_rows.begin(), w_rows.end());
    const std::uint64_t c_at = p.image.size();
    for (std::uint64_t row = 0; row < kCRows; ++row) {
      const auto piece = std::span(m.c).subspan((row * kCCols + r * cols) * 2, cols * 2);
      p.image.insert(p.image.end(), piece.begin(), piece.end());
    }
    p.tensors.push_back(TensorEntry{"c", DType::kBF16, {kCRows, cols}, c_at, kCRows * cols * 2, {kCRows, kCCols},
                                    {0, r * cols}});
    if (r == 0) {
      p.tensors.push_back(TensorEntry{"b", DType::kF32, {kCols}, p.image.size(), m.b.size()});
      p.image.insert(p.image.end(), m.b.begin(), m.b.end());
    }
    m.parts.push_back(std::move(p));
  }
  return m;
}

bool every_complete(const std::vector<std::shared_ptr<LocalVersion>>& parts) {
  return std::all_of(parts.begin(), parts.end(), complete);
}

}  // namespace

TEST_CASE("parts: a watcher fetches the whole model, each part landing at its places, bit-identical to the trainer's") {
  PeerNetwork net(45);
  add_peers(net, 5);  // ranks on peers 0-1; peers 2-4 fetch
  const SplitModel model = split_model(2, 9);
  for (std::uint32_t r = 0; r < 2; ++r) REQUIRE(publish(net, r, 1, r, 2, model.parts[r]).is_ok());
  REQUIRE(net.run_until([&] { return knows_head_in_parts(net, 2, 1) && knows_head_in_parts(net, 3, 1) &&
                                     knows_head_in_parts(net, 4, 1); }, 20s));
  std::vector<PeerNetwork::PartsFetch> fetches;
  for (std::size_t p = 2; p < 5; ++p) {
    auto f = net.fetch_parts(p, "policy", 1);
    REQUIRE_MESSAGE(f.is_ok(), f.status().to_string());
    REQUIRE(f->parts.size() == 2);
    fetches.push_back(std::move(*f));
  }
  REQUIRE(net.run_until([&] {
    return std::all_of(fetches.begin(), fetches.end(), [](const auto& f) { return every_complete(f.parts); });
  }, 30s));
  const std::vector<std::byte> expected = model.whole();
  for (const auto& f : fetches) {
    CHECK(f.whole.size() == expected.size());
    CHECK(std::equal(f.whole.begin(), f.whole.end(), expected.begin(), expected.end()));
  }
  // The fetchers served each other: the ranks sent less than three copies.
  const std::uint64_t part_bytes = model.parts[0].image.size() + model.parts[1].image.size();
  CHECK(net.bytes_served(0) + net.bytes_served(1) < 3 * part_bytes);
  CHECK(net.bytes_served(2) + net.bytes_served(3) + net.bytes_served(4) > 0);
  // A rank's part has replicas of its own: its memory can go back.
  CHECK(net.run_until([&] { return net.core(0).replicas(fetches[0].parts[0]->id) == 3; }, 10s));
}

TEST_CASE("parts: a rank's part of the head is kept until another peer holds that part") {
  PeerNetwork net(46);
  add_peers(net, 3);
  const std::vector<Part> parts{fsdp_part(0, 2, 1), fsdp_part(1, 2, 1)};
  std::vector<std::shared_ptr<LocalVersion>> published;
  for (std::uint32_t r = 0; r < 2; ++r) published.push_back(*publish(net, r, 1, r, 2, parts[r]));
  REQUIRE(net.run_until([&] { return knows_head_in_parts(net, 2, 1); }, 20s));
  bool released = false;
  net.release(0, published[0], ReleaseMode::kHonourRetention, [&] { released = true; });
  net.run_for(3s);
  CHECK_FALSE(released);  // the only holder of part 0 of the head
  auto fetched = net.fetch_parts(2, "policy", 1);
  REQUIRE(fetched.is_ok());
  CHECK(net.run_until([&] { return released; }, 20s));
}
