#include "manifest/part_view.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <string_view>

#include "core/hash.hpp"
#include "core/msgpack_writer.hpp"
#include "manifest/manifest_codec.hpp"
#include "manifest/selection.hpp"
#include "manifest/slice_algebra.hpp"

namespace tensorhub::manifest {
namespace {

ManifestId key_of_table(std::span<const std::uint8_t> table) {
  const core::Blake2bDigest digest = core::blake2b_256(std::as_bytes(table));
  ManifestId key;
  std::copy(digest.begin(), digest.end(), key.bytes.begin());
  return key;
}

}  // namespace

Result<PartView> part_view(const Manifest& part, std::span<const TensorEntry> selected) {
  return part_view(part.tensors(), part.total_size(), selected, image_name(part));
}

Result<PartView> part_view(std::span<const TensorEntry> image_tensors, std::uint64_t total_size,
                           std::span<const TensorEntry> selected, std::string_view what) {
  auto runs = selection_runs(image_tensors, total_size, selected, what);
  if (!runs) return runs.status();
  PartView view;
  std::map<std::string_view, const TensorEntry*> by_name;
  for (const TensorEntry& s : selected) by_name.emplace(s.name, &s);
  for (const TensorEntry& t : image_tensors) {  // in offset order: the order of the view's bytes
    auto it = by_name.find(t.name);
    if (it == by_name.end() || t.byte_length == 0) continue;
    const auto both = intersect(t.slice(), it->second->slice());
    if (!both) continue;
    TensorEntry e{t.name, t.dtype, both->shape(), view.size, both->element_count() * dtype_size(t.dtype)};
    e.global_shape = t.whole_shape();
    for (const IndexRange& r : both->ranges) e.slice_begin.push_back(r.begin);
    view.size += e.byte_length;
    view.tensors.push_back(std::move(e));
  }
  // The intersections' elements, in row-major order tensor after tensor,
  // are the selected runs in increasing part offset (selection_runs walks
  // them so): the view is those runs back to back.
  LandingRunList gather;
  std::uint64_t at = 0;
  for (const LandingRun& r : *runs) {
    if (r.whole_offset == kNoWholeOffset || r.length == 0) continue;
    gather.add(r.part_offset, at, r.length);
    at += r.length;
  }
  view.gather = gather.take();
  view.key = key_of_table(view_table_bytes(view.tensors));
  return view;
}

Result<std::vector<PartView>> declared_views(std::span<const TensorEntry> image_tensors, std::uint64_t total_size,
                                             std::uint64_t shard_size,
                                             std::span<const std::vector<TensorSelection>> selections,
                                             std::string_view what) {
  std::vector<PartView> views;
  std::uint64_t shards = 0;
  for (std::size_t i = 0; i < selections.size(); ++i) {
    auto selected = selection_within(image_tensors, selections[i], what);
    if (!selected) return Status::invalid_argument("declared view " + std::to_string(i) + ": " + selected.status().message());
    if (selected->empty()) continue;
    auto view = part_view(image_tensors, total_size, *selected, what);
    if (!view) return Status::invalid_argument("declared view " + std::to_string(i) + ": " + view.status().message());
    if (view->size == 0) continue;
    const bool again = std::any_of(views.begin(), views.end(), [&](const auto& v) { return v.key == view->key; });
    if (again) continue;
    shards += (view->size + shard_size - 1) / shard_size;
    views.push_back(std::move(*view));
  }
  if (views.size() > kMaxViews || shards > kMaxShards) {
    return Status::invalid_argument(std::to_string(views.size()) + " declared views of " + std::to_string(shards) +
                                    " shards exceed the limits of " + std::to_string(kMaxViews) + " views and " +
                                    std::to_string(kMaxShards) + " shards");
  }
  std::sort(views.begin(), views.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  return views;
}

namespace {
constexpr std::string_view kViewIdDomain{"tensorhub view v1\0", 18};
constexpr std::string_view kSelectionKeyDomain{"tensorhub selection v1\0", 23};
}  // namespace

std::vector<std::uint8_t> view_table_bytes(std::span<const TensorEntry> view_tensors) {
  std::vector<std::uint8_t> table;
  core::MsgpackWriter w(table);
  manifest_detail::write_tensor_table(w, view_tensors);
  return table;
}

Result<PartView> declared_view_of_table(const Manifest& image, std::span<const std::uint8_t> table) {
  const ManifestId key = key_of_table(table);
  if (image.find_view(key) == nullptr) {
    return Status::not_found(image_name(image) + " declares no view " + key.short_hex());
  }
  auto tensors = manifest_detail::read_tensor_table(table);
  if (!tensors) return Status::corrupt("view " + key.short_hex() + "'s table: " + tensors.status().message());
  // The view's tensors name their slices of the global tensors: as a
  // selection, they take exactly the view's bytes of the image.
  auto view = part_view(image, *tensors);
  if (!view) return Status::corrupt("view " + key.short_hex() + ": " + view.status().message());
  if (view->key != key) return Status::corrupt("view " + key.short_hex() + "'s table derives another view");
  return view;
}

ManifestId selection_key(std::span<const TensorEntry> selected) {
  std::vector<std::uint8_t> table;
  core::MsgpackWriter w(table);
  manifest_detail::write_tensor_table(w, selected);
  const std::span<const std::byte> pieces[] = {std::as_bytes(std::span(kSelectionKeyDomain)),
                                               std::as_bytes(std::span(table))};
  const core::Blake2bDigest digest = core::blake2b_256_of_pieces(pieces);
  ManifestId key;
  std::copy(digest.begin(), digest.end(), key.bytes.begin());
  return key;
}

ManifestId view_id(const ManifestId& image, const ManifestId& key) {
  const std::span<const std::byte> pieces[] = {std::as_bytes(std::span(kViewIdDomain)),
                                               std::as_bytes(std::span(image.bytes)),
                                               std::as_bytes(std::span(key.bytes))};
  const core::Blake2bDigest digest = core::blake2b_256_of_pieces(pieces);
  ManifestId id;
  std::copy(digest.begin(), digest.end(), id.bytes.begin());
  return id;
}

Result<std::shared_ptr<const Manifest>> view_manifest(const Manifest& image, const PartView& view) {
  const ViewEntry* entry = image.find_view(view.key);
  if (entry == nullptr) return Status::not_found(image_name(image) + " declares no view " + view.key.short_hex());
  if (entry->size != view.size) {
    return Status::corrupt(image_name(image) + " declares view " + view.key.short_hex() + " of " +
                           std::to_string(entry->size) + " bytes; the selection's view has " + std::to_string(view.size));
  }
  ManifestBody body;
  body.model = image.model();
  body.version = image.version();
  body.parent = image.id();
  body.publisher = image.publisher();
  body.shard_hash = image.body().shard_hash;
  body.shard_size = image.shard_size();
  body.total_size = view.size;
  body.tensors = view.tensors;
  body.part = image.part() ? image.part() : std::optional<PartOf>(PartOf{0, 1});  // its tensors are slices
  body.shards.reserve(entry->digests.size());
  for (std::size_t i = 0; i < entry->digests.size(); ++i) {
    const std::uint64_t offset = i * body.shard_size;
    body.shards.push_back(ShardEntry{offset, std::min(body.shard_size, view.size - offset), entry->digests[i]});
  }
  // The image's manifest was checked (validate_views): each view's digests
  // tile its size. This holds the rest (its tensors) to the same rules.
  TENSORHUB_RETURN_IF_ERROR(manifest_detail::validate_body(body));
  return std::make_shared<const Manifest>(ManifestAccess::assemble_view(std::move(body), view_id(image.id(), view.key)));
}

std::optional<ManifestId> view_of(const Manifest& m) {
  if (!m.encoded().empty()) return std::nullopt;
  return m.parent();
}

}  // namespace tensorhub::manifest
