// A set of peer ids with O(1) insert, erase, membership and uniform random
// choice (a vector plus an index map; erase swaps with the last element).
// The gossip core picks random members many times a second, so a scan of the
// member table per pick would make every round O(N).
#pragma once

#include <cstddef>
#include <unordered_map>
#include <vector>

#include "tensorhub/ids.hpp"

namespace tensorhub::gossip {

class IdSet {
 public:
  bool insert(const PeerId& id) {
    if (index_.count(id)) return false;
    index_.emplace(id, ids_.size());
    ids_.push_back(id);
    return true;
  }
  bool erase(const PeerId& id) {
    auto it = index_.find(id);
    if (it == index_.end()) return false;
    const std::size_t at = it->second;
    index_.erase(it);
    if (at + 1 != ids_.size()) {
      ids_[at] = ids_.back();
      index_[ids_[at]] = at;
    }
    ids_.pop_back();
    return true;
  }
  bool contains(const PeerId& id) const { return index_.count(id) != 0; }
  std::size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }
  const PeerId& at(std::size_t i) const { return ids_[i]; }
  const std::vector<PeerId>& ids() const { return ids_; }

 private:
  std::vector<PeerId> ids_;
  std::unordered_map<PeerId, std::size_t> index_;
};

}  // namespace tensorhub::gossip
