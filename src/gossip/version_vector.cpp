#include "gossip/version_vector.hpp"

namespace tensorhub::gossip {

bool VersionVector::merge(const HeadEntry& head) {
  auto it = heads_.find(head.model);
  if (it == heads_.end()) {
    heads_.emplace(head.model, head);
    return true;
  }
  // Equal versions with different ids are equivocation or a bug upstream;
  // the lower id wins so that every peer picks the same one, and the
  // manifest check rejects the forgery when a fetch is attempted.
  if (head.version > it->second.version ||
      (head.version == it->second.version && head.manifest_id < it->second.manifest_id)) {
    it->second = head;
    return true;
  }
  return false;
}

bool VersionVector::merge(std::span<const HeadEntry> heads) {
  bool changed = false;
  for (const HeadEntry& h : heads) changed |= merge(h);
  return changed;
}

void VersionVector::merge(const VersionVector& other) {
  for (const auto& [model, head] : other.heads_) merge(head);
}

std::optional<HeadEntry> VersionVector::head(const std::string& model) const {
  auto it = heads_.find(model);
  if (it == heads_.end()) return std::nullopt;
  return it->second;
}

std::vector<HeadEntry> VersionVector::heads() const {
  std::vector<HeadEntry> out;
  out.reserve(heads_.size());
  for (const auto& [model, head] : heads_) out.push_back(head);
  return out;
}

}  // namespace tensorhub::gossip
