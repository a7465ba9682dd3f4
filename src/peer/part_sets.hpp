// The images this peer fetches as parts of sealed versions, grouped the way
// its gossip record announces them: one part set (gossip::HoldingEntry) per
// sealed version and selection, however many parts. A member's part set is
// read back through the same grouping: a part set of a selection names
// views only the fetchers of that selection can tell apart, and they are
// exactly the peers that index their own views here. No I/O.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include "tensorhub/ids.hpp"

namespace tensorhub::peer {

// Where an image sits in a sealed version: part `index` of `count`, or
// that part's view of the selection whose key is `selection`
// (manifest::selection_key).
struct PartSlot {
  ManifestId seal;  // the sealed version's id
  std::uint32_t index = 0;
  std::uint32_t count = 0;  // 1..gossip::kMaxPartSetParts
  std::optional<ManifestId> selection;
  friend bool operator==(const PartSlot&, const PartSlot&) = default;
};

class PartSets {
 public:
  using Members = std::map<std::uint32_t, ManifestId>;  // part index -> the image's swarm id

  // `id` is the image at `slot`. One image a slot: a later one replaces it.
  void add(const PartSlot& slot, const ManifestId& id);
  // Forgets `id` at `slot` (nothing when another image holds the slot).
  void remove(const PartSlot& slot, const ManifestId& id);
  // The images indexed for (seal, selection); null when none.
  const Members* members(const ManifestId& seal, const std::optional<ManifestId>& selection) const;
  bool empty() const { return sets_.empty(); }

 private:
  std::map<std::pair<ManifestId, std::optional<ManifestId>>, Members> sets_;
};

}  // namespace tensorhub::peer
