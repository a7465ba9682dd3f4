// A part's view of a selection: the bytes of one part's image that a
// selection takes, as an image of their own. Its tensors are the
// intersections of the part's slices with the selected ones, each dense
// (row-major) and laid end to end in the part's order; its bytes are the
// part's selected bytes in increasing part offset, so a view is gathered
// from the part's memory without a copy, and lands in a fetcher's
// selection layout as contiguous rows. No I/O.
//
// A publisher told a selection (layouts are stable across versions) and a
// fetcher holding that selection compute the same view of a part, and so
// the same key, without talking: the key names the view's tensor table,
// whichever way the selection was written. This is the unit issue 48's
// hash layout plans to hash and move (docs/parts.md): a strided slice's
// pieces are contiguous in its view.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "manifest/sealed_version.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::manifest {

struct PartView {
  std::vector<TensorEntry> tensors;  // each a slice (global shape, start), end to end from 0
  // Where the view's bytes lie in the part's image, in view order:
  // part_offset, whole_offset (here: the offset in the view), length.
  std::vector<LandingRun> gather;
  std::uint64_t size = 0;
  ManifestId key;  // BLAKE2b-256 of the view's tensor table (the manifest codec's encoding)
};

// The view of part `part` (a part's or a whole version's manifest) that
// the selection `selected` (selected_layout's entries) takes; none of its
// tensors when the selection takes nothing of it. Errors: as selection_runs
// (more than kMaxLandingRuns runs).
Result<PartView> part_view(const Manifest& part, std::span<const TensorEntry> selected);
// The same for an image of `total_size` bytes holding `image_tensors`
// (a manifest body's, before it is signed); `what` names it in messages.
Result<PartView> part_view(std::span<const TensorEntry> image_tensors, std::uint64_t total_size,
                           std::span<const TensorEntry> selected, std::string_view what);

// The views of an image (`image_tensors`, `total_size` bytes, cut into
// shards of `shard_size`) that `selections` (Peer::fetch_selection's form)
// declare: each once, in key order; a selection that takes nothing of the
// image has none. Errors: kInvalidArgument (a selection naming a tensor
// twice or a slice that does not fit, naming it and the selection's index;
// more than kMaxViews views or kMaxShards of their shards).
Result<std::vector<PartView>> declared_views(std::span<const TensorEntry> image_tensors, std::uint64_t total_size,
                                             std::uint64_t shard_size,
                                             std::span<const std::vector<TensorSelection>> selections,
                                             std::string_view what);

// The swarm id of view `key` of the image `image` (BLAKE2b-256 of a domain
// string, the image's id and the key): what a view's holders announce and
// its fetchers ask for.
ManifestId view_id(const ManifestId& image, const ManifestId& key);

// The encoding of a view's tensor table (PartView::tensors, or a view
// manifest's tensors), whose BLAKE2b-256 is the view's key: what a fetcher
// of a view sends a holder of its image to have the view served.
std::vector<std::uint8_t> view_table_bytes(std::span<const TensorEntry> view_tensors);
// The view of `image` whose table's encoding is `table`, when `image`
// declares it: the table's BLAKE2b-256 is a declared view's key, so only a
// view the image's signer declared is ever derived from a peer's bytes.
// Errors: kNotFound (no declared view has that key), kCorrupt (the table
// does not decode, or does not derive that view from the image).
Result<PartView> declared_view_of_table(const Manifest& image, std::span<const std::uint8_t> table);

// The key of a selection of a version (`selected`: selected_layout's
// entries), the same for every fetcher of it however it was written:
// BLAKE2b-256 of a domain string and the layout's tensor table. A part set
// in gossip (gossip::HoldingEntry) names one selection's views by it.
ManifestId selection_key(std::span<const TensorEntry> selected);

// The manifest a view is fetched and served by: the view's tensors, its
// size, and the digests `image` declares for it (ViewEntry), under
// view_id(image.id(), view.key). Its parent is the image's id and its
// publisher the image's; it has no signature and no encoding of its own:
// it is believed because the image's signed manifest holds its digests,
// and it is never sent (view_of tells one). Errors: kNotFound (the image
// declares no view with that key), kCorrupt (the declared size is not the
// view's).
Result<std::shared_ptr<const Manifest>> view_manifest(const Manifest& image, const PartView& view);

// The id of the image whose view `m` is (view_manifest's), or none for a
// manifest that was signed (decoded or built).
std::optional<ManifestId> view_of(const Manifest& m);

}  // namespace tensorhub::manifest
