// Fetch by selection, as the manifest sees it: the selection's layout, where
// each byte of a part (or a whole version) lands in it, and which shards a
// fetch of it needs. Checked against slicing the whole model element by
// element, for parts split by rows (FSDP) and by columns (tensor parallel).
#include <doctest/doctest.h>

#include <cstring>

#include "core/random_fill.hpp"
#include "manifest/manifest_codec.hpp"
#include "manifest/part_view.hpp"
#include "manifest/selection.hpp"
#include "support/model_fixture.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;

namespace {

constexpr std::uint64_t kRows = 128, kCols = 256, kHeader = 10;

// The whole model: "w" F32 [128, 256] then "b" F32 [256], laid end to end.
struct Model {
  std::vector<std::byte> w = std::vector<std::byte>(kRows * kCols * 4);
  std::vector<std::byte> b = std::vector<std::byte>(kCols * 4);
  Model() {
    core::fill_pseudo_random(w, 11);
    core::fill_pseudo_random(b, 12);
  }
  std::vector<TensorEntry> tensors() const {
    return {TensorEntry{"w", DType::kF32, {kRows, kCols}, 0, w.size()},
            TensorEntry{"b", DType::kF32, {kCols}, w.size(), b.size()}};
  }
};

// The bytes of rows [r0, r1) x columns [c0, c1) of "w", row-major.
std::vector<std::byte> block_of(const Model& model, IndexRange rows, IndexRange cols) {
  std::vector<std::byte> out;
  for (std::uint64_t r = rows.begin; r < rows.end; ++r) {
    const std::byte* row = model.w.data() + (r * kCols + cols.begin) * 4;
    out.insert(out.end(), row, row + cols.size() * 4);
  }
  return out;
}

struct Part {
  Manifest manifest;
  std::vector<std::byte> image;
};

// Part `index` of `count`: "w" split along `dim` (0: rows, 1: columns)
// after a header of kHeader bytes that belongs to no tensor; part 0 also
// holds "b" whole.
Part make_part(const Model& model, std::uint32_t index, std::uint32_t count, int dim) {
  const IndexRange rows = dim == 0 ? IndexRange{kRows / count * index, kRows / count * (index + 1)} : IndexRange{0, kRows};
  const IndexRange cols = dim == 1 ? IndexRange{kCols / count * index, kCols / count * (index + 1)} : IndexRange{0, kCols};
  Part p;
  p.image.resize(kHeader);
  const std::vector<std::byte> w = block_of(model, rows, cols);
  std::vector<TensorEntry> tensors{
      TensorEntry{"w", DType::kF32, {rows.size(), cols.size()}, kHeader, w.size(), {kRows, kCols}, {rows.begin, cols.begin}}};
  if (count == 1) tensors[0] = TensorEntry{"w", DType::kF32, {kRows, kCols}, kHeader, w.size()};  // whole
  p.image.insert(p.image.end(), w.begin(), w.end());
  if (index == 0) {
    tensors.push_back(TensorEntry{"b", DType::kF32, {kCols}, p.image.size(), model.b.size()});
    p.image.insert(p.image.end(), model.b.begin(), model.b.end());
  }
  ManifestBuildOptions o = small_options();
  o.part = PartOf{index, count};
  auto m = build_manifest(o, p.image, tensors, test_identity());
  REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
  p.manifest = std::move(*m);
  return p;
}

// Lands every part's selected bytes in a destination of the selection's
// layout, checking that each part's runs tile its image.
std::vector<std::byte> land(const std::vector<Part>& parts, const std::vector<TensorEntry>& layout) {
  std::uint64_t size = 0;
  for (const TensorEntry& t : layout) size += t.byte_length;
  std::vector<std::byte> out(size, std::byte{0xee});
  for (const Part& p : parts) {
    auto runs = manifest::selection_runs(p.manifest, layout);
    REQUIRE_MESSAGE(runs.is_ok(), runs.status().to_string());
    std::uint64_t at = 0;
    for (const manifest::LandingRun& r : *runs) {
      CHECK(r.part_offset == at);
      at += r.length;
      if (r.whole_offset == manifest::kNoWholeOffset) continue;
      REQUIRE(r.whole_offset + r.length <= out.size());
      std::memcpy(out.data() + r.whole_offset, p.image.data() + r.part_offset, r.length);
    }
    CHECK(at == p.image.size());
  }
  return out;
}

TensorSlice slice2(IndexRange rows, IndexRange cols) { return TensorSlice{{rows, cols}}; }

}  // namespace

TEST_CASE("selection: every selection lands bit-identical to slicing the whole model, from row or column parts") {
  const Model model;
  const std::vector<std::vector<TensorSelection>> selections{
      {{"w", slice2({0, kRows}, {64, 192})}, {"b", {}}},  // a row-parallel rank's columns, and the bias
      {{"w", slice2({32, 96}, {0, kCols})}},              // a column-parallel rank's rows
      {{"w", slice2({10, 20}, {5, 250})}},                // a block
      {{"b", TensorSlice{{{100, 200}}}}, {"w", {}}},      // a slice of the bias, all of w
  };
  for (int dim : {0, 1}) {
    for (std::uint32_t count : {1u, 2u, 4u}) {
      std::vector<Part> parts;
      for (std::uint32_t i = 0; i < count; ++i) parts.push_back(make_part(model, i, count, dim));
      for (const auto& selection : selections) {
        CAPTURE(dim);
        CAPTURE(count);
        CAPTURE(selection[0].slice.to_string());
        auto layout = manifest::selected_layout(model.tensors(), selection, "policy v1");
        REQUIRE_MESSAGE(layout.is_ok(), layout.status().to_string());
        // In the whole model's order, end to end, each a slice of its tensor.
        REQUIRE(layout->size() == selection.size());
        CHECK((*layout)[0].name == "w");
        CHECK((*layout)[0].byte_offset == 0);
        if (layout->size() > 1) CHECK((*layout)[1].byte_offset == (*layout)[0].byte_length);
        std::vector<std::byte> expected;
        for (const TensorEntry& t : *layout) {
          const TensorSlice s = t.slice();
          if (t.name == "w") {
            const auto bytes = block_of(model, s.ranges[0], s.ranges[1]);
            expected.insert(expected.end(), bytes.begin(), bytes.end());
          } else {
            expected.insert(expected.end(), model.b.begin() + s.ranges[0].begin * 4, model.b.begin() + s.ranges[0].end * 4);
          }
        }
        CHECK(land(parts, *layout) == expected);
      }
    }
  }
}

TEST_CASE("selection: a whole version's manifest lands the same way, gaps never land") {
  const Model model;
  std::vector<std::byte> image(kHeader);
  image.insert(image.end(), model.w.begin(), model.w.end());
  image.insert(image.end(), model.b.begin(), model.b.end());
  std::vector<TensorEntry> tensors = model.tensors();
  for (TensorEntry& t : tensors) t.byte_offset += kHeader;
  auto m = build_manifest(small_options(), image, tensors, test_identity());
  REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
  const std::vector<TensorSelection> selection{{"w", slice2({0, kRows}, {128, 256})}};
  auto layout = manifest::selected_layout(model.tensors(), selection, "policy v1");
  REQUIRE(layout.is_ok());
  std::vector<Part> whole;
  whole.push_back(Part{std::move(*m), image});
  CHECK(land(whole, *layout) == block_of(model, {0, kRows}, {128, 256}));
  auto runs = manifest::selection_runs(whole[0].manifest, *layout);
  REQUIRE(runs.is_ok());
  // One run a row, half of each row selected.
  CHECK(manifest::selected_bytes(*runs) == kRows * 128 * 4);
  CHECK(runs->front() == manifest::LandingRun{0, manifest::kNoWholeOffset, kHeader + 128 * 4});
}

TEST_CASE("selection: only the shards holding selected bytes are wanted") {
  const Model model;
  // Two FSDP parts of 64 rows: 10 + 64 KiB (+ 1 KiB of bias in part 0), in 64 KiB shards.
  std::vector<Part> parts{make_part(model, 0, 2, 0), make_part(model, 1, 2, 0)};
  REQUIRE(parts[0].manifest.shard_count() == 2);
  REQUIRE(parts[1].manifest.shard_count() == 2);
  // Rows [0, 32): the first 32 KiB of part 0's rows, all in its shard 0.
  auto layout = manifest::selected_layout(model.tensors(), std::vector<TensorSelection>{{"w", slice2({0, 32}, {0, kCols})}},
                                          "policy v1");
  REQUIRE(layout.is_ok());
  auto runs0 = manifest::selection_runs(parts[0].manifest, *layout);
  auto runs1 = manifest::selection_runs(parts[1].manifest, *layout);
  REQUIRE(runs0.is_ok());
  REQUIRE(runs1.is_ok());
  core::Bitfield first = manifest::shards_selected(parts[0].manifest, *runs0);
  CHECK(first.test(0));
  CHECK_FALSE(first.test(1));
  CHECK(manifest::shards_selected(parts[1].manifest, *runs1).none());
  CHECK(manifest::selected_bytes(*runs1) == 0);
  // The bias, at the end of part 0: its shard 1 alone.
  auto bias = manifest::selected_layout(model.tensors(), std::vector<TensorSelection>{{"b", {}}}, "policy v1");
  REQUIRE(bias.is_ok());
  auto bias_runs = manifest::selection_runs(parts[0].manifest, *bias);
  REQUIRE(bias_runs.is_ok());
  core::Bitfield last = manifest::shards_selected(parts[0].manifest, *bias_runs);
  CHECK_FALSE(last.test(0));
  CHECK(last.test(1));
}

TEST_CASE("selection: bad selections are refused naming the tensor") {
  const Model model;
  auto error = [&](std::vector<TensorSelection> selection) {
    auto layout = manifest::selected_layout(model.tensors(), selection, "policy v1");
    REQUIRE_FALSE(layout.is_ok());
    CHECK(layout.status().code() == StatusCode::kInvalidArgument);
    return layout.status().message();
  };
  CHECK(error({}) == "a selection of policy v1 names no tensor");
  CHECK(error({{"x", {}}}) == "policy v1 has no tensor 'x'");
  CHECK(error({{"w", {}}, {"w", {}}}) == "the selection names tensor 'w' twice");
  CHECK(error({{"w", slice2({0, 200}, {0, 1})}}).find("tensor 'w' [0:200, 0:1] does not fit its shape") !=
        std::string::npos);
  CHECK(error({{"w", TensorSlice{{{0, 1}}}}}).find("tensor 'w'") != std::string::npos);
  CHECK(error({{"w", slice2({5, 5}, {0, 1})}}).find("tensor 'w'") != std::string::npos);
}

TEST_CASE("selection: each tensor's shards per image, for streaming a fetch of parts or of a selection") {
  const Model model;
  // Two FSDP parts of 64 rows: "w" rows [0, 64) at bytes 10.. of part 0 (its
  // shards 0 and 1, the bias in shard 1), rows [64, 128) in part 1's.
  std::vector<Part> parts{make_part(model, 0, 2, 0), make_part(model, 1, 2, 0)};
  const std::vector<std::uint64_t> shard_sizes{parts[0].manifest.shard_size(), parts[1].manifest.shard_size()};
  auto runs_of = [&](const std::vector<TensorEntry>& layout) {
    std::vector<std::vector<manifest::LandingRun>> runs;
    for (const Part& p : parts) {
      auto r = manifest::selection_runs(p.manifest, layout);
      REQUIRE(r.is_ok());
      runs.push_back(std::move(*r));
    }
    return runs;
  };
  // Rows [0, 16) of "w" and the bias: part 0's shard 0, and its shard 1.
  auto layout = manifest::selected_layout(
      model.tensors(), std::vector<TensorSelection>{{"w", slice2({0, 16}, {0, kCols})}, {"b", {}}}, "policy v1");
  REQUIRE(layout.is_ok());
  auto spans = manifest::tensor_shard_spans(*layout, runs_of(*layout), shard_sizes);
  REQUIRE(spans.size() == 2);
  CHECK(spans[0] == std::vector<manifest::ShardSpan>{{0, 0, 0}});
  CHECK(spans[1] == std::vector<manifest::ShardSpan>{{0, 1, 1}});
  // Columns [248, 256) of every row: the last row of each part crosses into its shard 1.
  auto columns = manifest::selected_layout(model.tensors(), std::vector<TensorSelection>{{"w", slice2({0, kRows}, {248, 256})}},
                                           "policy v1");
  REQUIRE(columns.is_ok());
  spans = manifest::tensor_shard_spans(*columns, runs_of(*columns), shard_sizes);
  REQUIRE(spans.size() == 1);
  CHECK(spans[0] == std::vector<manifest::ShardSpan>{{0, 0, 1}, {1, 0, 1}});
}

TEST_CASE("selection: a part's view is its selected bytes back to back, dense slices that land as contiguous rows") {
  const Model model;
  // Row parts (FSDP), a row-parallel rank's columns: strided in each part,
  // contiguous in its view.
  const std::vector<TensorSelection> columns{{"w", slice2({0, kRows}, {64, 128})}, {"b", {}}};
  auto layout = manifest::selected_layout(model.tensors(), columns, "policy v1");
  REQUIRE(layout.is_ok());
  std::vector<Part> parts;
  for (std::uint32_t i = 0; i < 4; ++i) parts.push_back(make_part(model, i, 4, 0));
  std::vector<std::byte> landed(layout->back().byte_offset + layout->back().byte_length);
  for (const Part& p : parts) {
    auto view = manifest::part_view(p.manifest, *layout);
    REQUIRE_MESSAGE(view.is_ok(), view.status().to_string());
    const std::uint64_t first_row = p.manifest.tensors()[0].slice_begin[0];
    // "w": its 32 rows x columns 64..128, dense; part 0 also "b" whole.
    REQUIRE(view->tensors.size() == (p.manifest.part()->index == 0 ? 2u : 1u));
    const TensorEntry& w = view->tensors[0];
    CHECK(w.shape == std::vector<std::uint64_t>{kRows / 4, 64});
    CHECK(w.global_shape == std::vector<std::uint64_t>{kRows, kCols});
    CHECK(w.slice_begin == std::vector<std::uint64_t>{first_row, 64});
    CHECK(w.byte_offset == 0);
    // Gathered from the part's image, the view is the block, row-major.
    std::vector<std::byte> gathered;
    std::uint64_t at = 0;
    for (const manifest::LandingRun& r : view->gather) {
      CHECK(r.whole_offset == at);
      at += r.length;
      gathered.insert(gathered.end(), p.image.begin() + static_cast<std::ptrdiff_t>(r.part_offset),
                      p.image.begin() + static_cast<std::ptrdiff_t>(r.part_offset + r.length));
    }
    CHECK(at == view->size);
    CHECK(view->gather.size() == kRows / 4 + (p.manifest.part()->index == 0 ? 1 : 0));  // a run per row (and b)
    std::vector<std::byte> expected = block_of(model, {first_row, first_row + kRows / 4}, {64, 128});
    if (p.manifest.part()->index == 0) expected.insert(expected.end(), model.b.begin(), model.b.end());
    CHECK(gathered == expected);
    // Each view tensor lands as one contiguous run of the selection's layout.
    for (const TensorEntry& t : view->tensors) {
      const TensorEntry& dest = t.name == "w" ? (*layout)[0] : (*layout)[1];
      const std::uint64_t row_bytes = 64 * 4;
      const std::uint64_t into = dest.byte_offset + (t.name == "w" ? first_row * row_bytes : 0);
      std::memcpy(landed.data() + into, gathered.data() + t.byte_offset, t.byte_length);
    }
  }
  std::vector<std::byte> expected = block_of(model, {0, kRows}, {64, 128});
  expected.insert(expected.end(), model.b.begin(), model.b.end());
  CHECK(landed == expected);
}

TEST_CASE("selection: a view's key names its tensor table, however the selection was written") {
  const Model model;
  const Part part = make_part(model, 1, 2, 1);  // columns 128..256
  auto view_of = [&](const std::vector<TensorSelection>& selection) {
    auto layout = manifest::selected_layout(model.tensors(), selection, "policy v1");
    REQUIRE(layout.is_ok());
    auto view = manifest::part_view(part.manifest, *layout);
    REQUIRE(view.is_ok());
    return *view;
  };
  const auto whole = view_of({{"w", {}}});
  const auto spelt_out = view_of({{"w", slice2({0, kRows}, {0, kCols})}});
  const auto with_b = view_of({{"w", {}}, {"b", {}}});  // the part holds no "b"
  const auto cut = view_of({{"w", slice2({0, kRows}, {0, 192})}});
  CHECK(whole.key == spelt_out.key);
  CHECK(whole.key == with_b.key);
  CHECK(whole.key != cut.key);
  CHECK(whole.size == kRows * 128 * 4);
  CHECK(whole.gather == std::vector<manifest::LandingRun>{{kHeader, 0, kRows * 128 * 4}});
  CHECK(cut.size == kRows * 64 * 4);
  // A selection that takes nothing of the part: an empty view.
  const auto none = view_of({{"w", slice2({0, kRows}, {0, 64})}});
  CHECK(none.tensors.empty());
  CHECK(none.size == 0);
  CHECK(none.gather.empty());
}

TEST_CASE("selection: a selection's key is the same however it was written, and differs for any other slice") {
  const Model model;
  auto key_of = [&](const std::vector<TensorSelection>& selection) {
    auto layout = manifest::selected_layout(model.tensors(), selection, "policy v1");
    REQUIRE(layout.is_ok());
    return manifest::selection_key(*layout);
  };
  const ManifestId whole = key_of({{"w", {}}});
  CHECK(whole == key_of({{"w", slice2({0, kRows}, {0, kCols})}}));
  CHECK(whole != key_of({{"w", {}}, {"b", {}}}));  // "b" is selected too, though a part may hold none of it
  CHECK(whole != key_of({{"w", slice2({0, kRows}, {0, 192})}}));
  CHECK(whole != key_of({{"w", slice2({1, kRows}, {0, kCols})}}));
  // Not a view's key: a part set names the selection, not one part's view of it.
  const Part part = make_part(model, 1, 2, 1);
  auto layout = manifest::selected_layout(model.tensors(), std::vector<TensorSelection>{{"w", {}}}, "policy v1");
  REQUIRE(layout.is_ok());
  auto view = manifest::part_view(part.manifest, *layout);
  REQUIRE(view.is_ok());
  CHECK(view->key != whole);
}

TEST_CASE("selection: a part declared with views carries each view's digests, which a fetcher finds by its own key") {
  const Model model;
  const std::vector<TensorSelection> tp0{{"w", slice2({0, kRows}, {0, 128})}, {"b", {}}};
  const std::vector<TensorSelection> tp1{{"w", slice2({0, kRows}, {128, 256})}, {"b", {}}};
  const std::vector<TensorSelection> bias_only{{"b", {}}};  // takes nothing of part 1
  // Part 1 of 2 by rows, rebuilt with the views of both TP ranks (tp0 twice).
  const Part plain = make_part(model, 1, 2, 0);
  ManifestBuildOptions o = small_options();
  o.part = PartOf{1, 2};
  o.views = {tp0, tp1, bias_only, tp0};
  std::vector<TensorEntry> tensors(plain.manifest.tensors().begin(), plain.manifest.tensors().end());
  auto m = build_manifest(o, plain.image, tensors, test_identity());
  REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
  REQUIRE(m->views().size() == 2);
  CHECK(m->views()[0].key < m->views()[1].key);
  // The shards and the id's inputs besides the views are the plain part's.
  CHECK(m->body().shards == plain.manifest.body().shards);
  // It decodes back to itself, and its signature holds.
  auto decoded = decode_manifest(m->encoded());
  REQUIRE_MESSAGE(decoded.is_ok(), decoded.status().to_string());
  CHECK(decoded->body() == m->body());
  const PublicKey trusted[] = {test_identity().public_key()};
  CHECK(verify_manifest_signature(*decoded, trusted).is_ok());
  for (const auto& selection : {tp0, tp1}) {
    // A fetcher's view, from the whole model's layout and the signed part.
    auto layout = manifest::selected_layout(model.tensors(), selection, "policy v1");
    REQUIRE(layout.is_ok());
    auto view = manifest::part_view(*decoded, *layout);
    REQUIRE(view.is_ok());
    const ViewEntry* entry = decoded->find_view(view->key);
    REQUIRE(entry != nullptr);
    CHECK(entry->size == view->size);
    // Its digests are the gathered bytes' in shards of the part's shard size.
    std::vector<std::byte> gathered;
    for (const manifest::LandingRun& r : view->gather) {
      gathered.insert(gathered.end(), plain.image.begin() + static_cast<std::ptrdiff_t>(r.part_offset),
                      plain.image.begin() + static_cast<std::ptrdiff_t>(r.part_offset + r.length));
    }
    const std::uint64_t shard = decoded->shard_size();
    REQUIRE(entry->digests.size() == (gathered.size() + shard - 1) / shard);
    for (std::size_t i = 0; i < entry->digests.size(); ++i) {
      const std::size_t from = i * shard, to = std::min<std::size_t>(gathered.size(), from + shard);
      CHECK(entry->digests[i] == compute_shard_digest(decoded->body().shard_hash,
                                                      std::span(gathered).subspan(from, to - from)));
    }
    // The view's manifest: its own id, the view's tensors, the declared
    // digests; the gathered bytes verify against it, and it is never
    // taken for a signed manifest.
    auto vm = manifest::view_manifest(*decoded, *view);
    REQUIRE_MESSAGE(vm.is_ok(), vm.status().to_string());
    CHECK((*vm)->id() == manifest::view_id(decoded->id(), view->key));
    CHECK((*vm)->id() != decoded->id());
    CHECK(manifest::view_of(**vm) == decoded->id());
    CHECK_FALSE(manifest::view_of(*decoded).has_value());
    CHECK((*vm)->encoded().empty());
    CHECK((*vm)->publisher() == decoded->publisher());
    CHECK((*vm)->total_size() == view->size);
    CHECK(std::equal((*vm)->tensors().begin(), (*vm)->tensors().end(), view->tensors.begin(), view->tensors.end()));
    CHECK(verify_image(**vm, gathered, 1).is_ok());
    std::vector<std::byte> flipped = gathered;
    flipped.back() ^= std::byte{1};
    CHECK(verify_image(**vm, flipped, 1).code() == StatusCode::kVerifyFailed);
    // Another part's view of that key (or none declared) is not found.
    CHECK(manifest::view_manifest(plain.manifest, *view).status().code() == StatusCode::kNotFound);
    // What a fetcher sends a whole holder of the part: the view's table,
    // from which the holder derives the same view, gather and all; a
    // table the part does not declare (one byte off) is refused.
    const std::vector<std::uint8_t> table = manifest::view_table_bytes((*vm)->tensors());
    auto served = manifest::declared_view_of_table(*decoded, table);
    REQUIRE_MESSAGE(served.is_ok(), served.status().to_string());
    CHECK(served->key == view->key);
    CHECK(served->gather == view->gather);
    CHECK(served->size == view->size);
    std::vector<std::uint8_t> off = table;
    off.back() ^= 1;
    CHECK(manifest::declared_view_of_table(*decoded, off).status().code() == StatusCode::kNotFound);
    CHECK(manifest::declared_view_of_table(plain.manifest, table).status().code() == StatusCode::kNotFound);
  }
  CHECK(manifest::view_id(decoded->id(), decoded->views()[0].key) !=
        manifest::view_id(decoded->id(), decoded->views()[1].key));
  ManifestId unknown;
  unknown.bytes.fill(7);
  CHECK(decoded->find_view(unknown) == nullptr);
  // A declared selection that does not fit is refused before any hashing, naming it.
  o.views = {tp0, {{"w", slice2({0, kRows}, {0, 300})}}};
  auto bad = build_manifest(o, plain.image, tensors, test_identity());
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("declared view 1") != std::string::npos);
  CHECK(bad.status().message().find("'w'") != std::string::npos);
}

TEST_CASE("selection: a manifest's views are checked: order, sizes and digest counts") {
  const Model model;
  const Part plain = make_part(model, 0, 2, 0);
  ManifestBody body = plain.manifest.body();
  ViewEntry v;
  v.key.bytes.fill(1);
  v.size = 1000;
  v.digests.resize(1);
  v.digests[0].size = 16;
  body.views = {v};
  CHECK(manifest_detail::validate_body(body).is_ok());
  ViewEntry w = v;
  w.key.bytes.fill(0);
  body.views = {v, w};  // out of order
  CHECK(manifest_detail::validate_body(body).message().find("out of order") != std::string::npos);
  body.views = {v, v};  // twice
  CHECK(manifest_detail::validate_body(body).message().find("out of order") != std::string::npos);
  ViewEntry big = v;
  big.size = body.total_size + 1;
  body.views = {big};
  CHECK(manifest_detail::validate_body(body).message().find("a view holds 1 to") != std::string::npos);
  ViewEntry short_of = v;
  short_of.size = body.shard_size + 1;  // needs 2 digests
  body.views = {short_of};
  CHECK(manifest_detail::validate_body(body).message().find("need 2") != std::string::npos);
  // Encoded, the same body decodes to the same views (a whole version's too).
  body.views = {v};
  auto signed_body = sign_manifest(body, test_identity());
  REQUIRE(signed_body.is_ok());
  auto decoded = decode_manifest(signed_body->encoded());
  REQUIRE_MESSAGE(decoded.is_ok(), decoded.status().to_string());
  CHECK(decoded->views().size() == 1);
  body.part.reset();
  body.tensors = {TensorEntry{"w", DType::kF32, {kRows / 2, kCols}, kHeader, kRows / 2 * kCols * 4}};
  auto whole = sign_manifest(body, test_identity());
  REQUIRE_MESSAGE(whole.is_ok(), whole.status().to_string());
  auto whole_decoded = decode_manifest(whole->encoded());
  REQUIRE_MESSAGE(whole_decoded.is_ok(), whole_decoded.status().to_string());
  CHECK(std::vector<ViewEntry>(whole_decoded->views().begin(), whole_decoded->views().end()) == body.views);
}
