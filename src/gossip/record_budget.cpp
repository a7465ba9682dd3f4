#include "gossip/record_budget.hpp"

#include <algorithm>
#include <set>
#include <tuple>

namespace tensorhub::gossip {
namespace {

// msgpack's array header: fixarray up to 15 entries, array16 from 16.
std::size_t list_header_bytes(std::size_t count) { return count <= 15 ? 1 : 3; }

// Fills a record's entry lists one entry at a time, each only if the record
// still fits its limits with it.
class Filler {
 public:
  explicit Filler(const PeerRecord& fixed) : bytes_(fixed_bytes(fixed)) {}

  bool add(const HeadEntry& head) {
    if (heads_.count(head.model) != 0) return true;
    const std::size_t grown = bytes_ + encoded_entry_bytes(head) + list_header_bytes(heads_.size() + 1) -
                              list_header_bytes(heads_.size());
    if (heads_.size() >= kMaxRecordHeads || grown > kMaxRecordBytes) return false;
    bytes_ = grown;
    heads_.emplace(head.model, head);
    return true;
  }
  bool add(const HoldingEntry& holding) {
    const HoldingKey key = key_of(holding);
    if (holdings_.count(key) != 0) return true;
    const std::size_t grown = bytes_ + encoded_entry_bytes(holding) + list_header_bytes(holdings_.size() + 1) -
                              list_header_bytes(holdings_.size());
    if (holdings_.size() >= kMaxRecordHoldings || grown > kMaxRecordBytes) return false;
    bytes_ = grown;
    holdings_.emplace(key, holding);
    return true;
  }
  bool has_head(const std::string& model) const { return heads_.count(model) != 0; }
  std::size_t bytes() const { return bytes_; }
  std::size_t heads() const { return heads_.size(); }
  std::size_t holdings() const { return holdings_.size(); }

  ChosenEntries take(const Announcements& wanted) {
    ChosenEntries out;
    for (auto& [model, head] : heads_) out.heads.push_back(head);
    for (auto& [key, holding] : holdings_) out.holdings.push_back(holding);
    out.heads_left_out = wanted.heads.size() - out.heads.size();
    out.holdings_left_out = wanted.holdings.size() - out.holdings.size();
    out.record_bytes = bytes_;
    return out;
  }

 private:
  static std::size_t fixed_bytes(const PeerRecord& fixed) {
    PeerRecord empty = fixed;
    empty.heads.clear();
    empty.holdings.clear();
    return signed_record_bytes(empty);
  }

  std::size_t bytes_;
  std::map<std::string, HeadEntry> heads_;
  std::map<HoldingKey, HoldingEntry> holdings_;
};

// Rule 1 into `filler`; false when a required entry did not fit.
bool add_required(Filler& filler, const Announcements& wanted) {
  bool all = true;
  for (const auto& [model, head] : wanted.heads) {
    if (!wanted.is_origin_of_head(head)) continue;
    all &= filler.add(head);
    all &= filler.add(wanted.holdings.at(HoldingKey{head.model, head.version, head.manifest_id}).entry);
  }
  return all;
}

}  // namespace

bool Announcements::is_origin_of_head(const HeadEntry& head) const {
  auto it = holdings.find(HoldingKey{head.model, head.version, head.manifest_id});
  return it != holdings.end() && it->second.origin;
}

ChosenEntries choose_entries(const PeerRecord& fixed, const Announcements& wanted) {
  Filler filler(fixed);
  add_required(filler, wanted);

  // Rule 2: complete holdings, newest of each model first.
  std::map<std::string, std::vector<const HoldingEntry*>> complete;  // newest first
  std::vector<const HoldingEntry*> in_progress;
  for (auto it = wanted.holdings.rbegin(); it != wanted.holdings.rend(); ++it) {
    const HoldingEntry& h = it->second.entry;
    if (h.complete()) {
      complete[h.model].push_back(&h);
    } else {
      in_progress.push_back(&h);
    }
  }
  std::set<std::string> held_models;
  for (std::size_t rank = 0;; ++rank) {
    bool any = false;
    for (const auto& [model, list] : complete) {
      if (rank >= list.size()) continue;
      any = true;
      if (filler.add(*list[rank])) held_models.insert(model);
    }
    if (!any) break;
  }
  // Rule 3: the heads of the models held.
  for (const std::string& model : held_models) {
    if (auto it = wanted.heads.find(model); it != wanted.heads.end()) filler.add(it->second);
  }
  // Rule 4: holdings in progress, the most advanced first.
  std::stable_sort(in_progress.begin(), in_progress.end(), [](const HoldingEntry* a, const HoldingEntry* b) {
    return a->progress_permille > b->progress_permille;
  });
  for (const HoldingEntry* h : in_progress) filler.add(*h);
  // Rule 5: the other heads.
  for (const auto& [model, head] : wanted.heads) filler.add(head);
  return filler.take(wanted);
}

Status check_required(const PeerRecord& fixed, const Announcements& wanted) {
  Filler filler(fixed);
  if (add_required(filler, wanted)) return Status::ok();
  PeerRecord needed = fixed;
  needed.heads.clear();
  needed.holdings.clear();
  for (const auto& [model, head] : wanted.heads) {
    if (!wanted.is_origin_of_head(head)) continue;
    needed.heads.push_back(head);
    needed.holdings.push_back(wanted.holdings.at(HoldingKey{head.model, head.version, head.manifest_id}).entry);
  }
  std::sort(needed.holdings.begin(), needed.holdings.end(), [](const HoldingEntry& a, const HoldingEntry& b) {
    return std::tie(a.model, a.version) < std::tie(b.model, b.version);
  });
  return Status::resource_exhausted(
      "this peer's gossip record cannot announce the heads of " + std::to_string(needed.heads.size()) +
      " models it publishes: they need " + std::to_string(signed_record_bytes(needed)) + " bytes, and a record holds " +
      std::to_string(kMaxRecordBytes) + " bytes and " + std::to_string(kMaxRecordHeads) +
      " heads; release what this peer published of models it no longer publishes, or use shorter model names");
}

}  // namespace tensorhub::gossip
