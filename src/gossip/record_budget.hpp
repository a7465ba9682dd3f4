// Which heads and holdings a peer's own record announces when all it would
// announce does not fit one record (kMaxRecordBytes, kMaxRecordHeads,
// kMaxRecordHoldings).
//
// The rule, in order of claim (docs/gossip.md, "What a record holds"):
//  1. Required: for each model whose head this peer published and still
//     holds, that head and that holding. Nobody else can announce a new
//     version first, so a publication that would not fit with the others
//     fails (check_required) and nothing is announced of it.
//  2. Complete holdings: the newest of each model first (models by name),
//     then the second newest of each, and so on.
//  3. The heads of the models of the holdings chosen.
//  4. Holdings in progress, the most advanced first.
//  5. The other heads (models this peer only knows of), by model name.
// An entry that does not fit is left out and the next is tried, so a later,
// smaller one may still go in. Left out means: other peers do not learn it
// from this record (a holding left out is not a source to them; a head left
// out still reaches them from the records of its publisher and holders).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <tuple>
#include <vector>

#include "gossip/peer_record.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::gossip {

// A holding with whether this peer is its origin (published it).
struct LocalHolding {
  HoldingEntry entry;
  bool origin = false;
};

// Everything a peer would announce, before the budget: a head per model it
// knows, and each version it holds or fetches.
struct Announcements {
  std::map<std::string, HeadEntry> heads;                                      // by model
  // By key_of: a version in parts is held as several parts, or part sets.
  std::map<HoldingKey, LocalHolding> holdings;

  // The origin holding of `head`: published here, at the head's version and id.
  bool is_origin_of_head(const HeadEntry& head) const;
};

struct ChosenEntries {
  std::vector<HeadEntry> heads;        // sorted by model
  std::vector<HoldingEntry> holdings;  // sorted by key_of
  std::size_t heads_left_out = 0;
  std::size_t holdings_left_out = 0;
  std::size_t record_bytes = 0;  // of the signed record with these entries
};

// The entries of a record whose other fields are `fixed`'s, chosen by the
// rule above. Required entries that do not fit (check_required failed, or
// the fixed fields grew) are left out like the others.
ChosenEntries choose_entries(const PeerRecord& fixed, const Announcements& wanted);

// OK when a record with `fixed`'s other fields holds every required entry
// of `wanted` (rule 1); kResourceExhausted naming the limit otherwise.
Status check_required(const PeerRecord& fixed, const Announcements& wanted);

}  // namespace tensorhub::gossip
