// A version vector: per model, the newest head version known and its manifest
// id. Merging keeps, per model, the highest version; it is commutative,
// associative and idempotent, so any order of gossip converges on the same
// view. Whether a head is *valid* (signed, chained) is checked by whoever
// holds the manifest before adopting it; gossip only carries the claim.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gossip/peer_record.hpp"

namespace tensorhub::gossip {

class VersionVector {
 public:
  // True when `head` is news (a model not seen, or a higher version).
  bool merge(const HeadEntry& head);
  bool merge(std::span<const HeadEntry> heads);
  void merge(const VersionVector& other);

  std::optional<HeadEntry> head(const std::string& model) const;
  std::vector<HeadEntry> heads() const;  // sorted by model
  bool empty() const { return heads_.empty(); }

  friend bool operator==(const VersionVector&, const VersionVector&) = default;

 private:
  std::map<std::string, HeadEntry> heads_;
};

}  // namespace tensorhub::gossip
