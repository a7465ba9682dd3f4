#include "peer/part_sets.hpp"

namespace tensorhub::peer {

void PartSets::add(const PartSlot& slot, const ManifestId& id) { sets_[{slot.seal, slot.selection}][slot.index] = id; }

void PartSets::remove(const PartSlot& slot, const ManifestId& id) {
  auto set = sets_.find({slot.seal, slot.selection});
  if (set == sets_.end()) return;
  auto member = set->second.find(slot.index);
  if (member == set->second.end() || member->second != id) return;
  set->second.erase(member);
  if (set->second.empty()) sets_.erase(set);
}

const PartSets::Members* PartSets::members(const ManifestId& seal, const std::optional<ManifestId>& selection) const {
  auto set = sets_.find({seal, selection});
  return set == sets_.end() ? nullptr : &set->second;
}

}  // namespace tensorhub::peer
