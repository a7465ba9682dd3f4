// What this peer believes about each model: the manifests it has verified,
// the head (the newest verified version), the manifests it still wants, and
// proof of equivocation. Sans-I/O: time is an input, and asking a peer for
// a manifest is an action the caller carries out.
//
// Rules:
//  - A manifest is believed only when a trusted publisher signed it and, if
//    its parent is known, it extends that parent (verify_manifest_chain).
//  - Two validly signed manifests for one (model, version) with different
//    ids are equivocation. The pair is kept as proof, neither is ever head,
//    and any later manifest for that (model, version) is refused.
//  - A head that gossip names and that is newer than ours is wanted: its
//    manifest is asked of a peer whose record names it. So is one named for
//    a version we believe under another id: it would prove equivocation. An answer that has
//    not come after `retry` is asked of the next peer that names it (the
//    first may have died or lost the connection), round robin.
//  - Bounded: at most kMaxWanted manifests are wanted at once (the newest
//    win), each remembers at most kMaxNamers peers, and per model only the
//    newest kKeptVersions manifests are kept once verified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/time.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/peer.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::peer {

// Ask `peer` for the manifest `id` (of `model` v`version`).
struct ManifestRequest {
  PeerId peer;
  ManifestId id;
  std::string model;
  std::uint64_t version = 0;
};

// Two manifests signed for one (model, version).
struct Equivocation {
  std::string model;
  std::uint64_t version = 0;
  std::shared_ptr<const Manifest> first, second;
};

class HeadTracker {
 public:
  static constexpr std::size_t kMaxWanted = 64;
  static constexpr std::size_t kMaxNamers = 16;
  static constexpr std::size_t kKeptVersions = 16;

  HeadTracker(std::vector<PublicKey> trusted_publishers, Duration retry);

  // A gossip record of `peer` names `id` as the head v`version` of `model`.
  // Returns the request to send now, if the manifest is wanted and not
  // already asked within `retry`.
  std::optional<ManifestRequest> on_head_named(TimePoint now, const PeerId& peer, const std::string& model,
                                               std::uint64_t version, const ManifestId& id);
  // `peer` is gone: it names nothing any more.
  void forget_peer(const PeerId& peer);
  // `peer` answered that it does not have `id`: the next namer is asked at once.
  std::optional<ManifestRequest> on_no_manifest(TimePoint now, const PeerId& peer, const ManifestId& id);

  // Checks and records a manifest (from a peer, or our own publication).
  // Returns whether it became the head of its model.
  // Errors: kVerifyFailed (untrusted signer, broken chain, equivocation).
  Result<bool> accept(std::shared_ptr<const Manifest> manifest);

  // Requests whose answer is overdue, re-addressed to the next namer.
  std::vector<ManifestRequest> handle_timeout(TimePoint now);
  TimePoint next_timeout() const;

  // The newest verified version of `model`.
  std::optional<VersionInfo> head(const std::string& model) const;
  // A verified manifest, by id or by (model, version).
  std::shared_ptr<const Manifest> manifest(const ManifestId& id) const;
  std::shared_ptr<const Manifest> find(const std::string& model, std::uint64_t version) const;
  // The version number and parent of `model`'s next publication.
  struct NextVersion {
    std::uint64_t version = 1;
    ManifestId parent;
  };
  NextVersion next_version(const std::string& model) const;
  bool equivocated(const std::string& model, std::uint64_t version) const;
  const std::vector<Equivocation>& equivocations() const { return equivocations_; }
  std::size_t wanted() const { return wanted_.size(); }
  bool trusts(const PublicKey& publisher) const;

 private:
  struct Model {
    std::map<std::uint64_t, std::shared_ptr<const Manifest>> by_version;  // verified, not equivocated
    std::optional<VersionInfo> head;
  };
  struct Wanted {
    std::string model;
    std::uint64_t version = 0;
    std::vector<PeerId> namers;  // peers whose records name it, in the order heard
    std::size_t last_asked = kNotAsked;  // index in namers; the next one is asked next
    TimePoint asked_at = kTimeNever;  // kTimeNever: no answer awaited
  };

  static constexpr std::size_t kNotAsked = static_cast<std::size_t>(-1);

  std::optional<ManifestRequest> ask_next(TimePoint now, const ManifestId& id, Wanted& w);
  std::optional<ManifestRequest> ask(TimePoint now, const ManifestId& id, Wanted& w, std::size_t index);
  void drop_namer(Wanted& w, std::vector<PeerId>::iterator pos);
  void refresh_head(Model& model, const std::string& name);
  void prune(Model& model);

  std::vector<PublicKey> trusted_;
  Duration retry_;
  std::map<std::string, Model> models_;
  std::map<ManifestId, std::shared_ptr<const Manifest>> by_id_;  // every manifest in models_
  std::map<ManifestId, Wanted> wanted_;
  std::set<std::pair<std::string, std::uint64_t>> equivocated_;  // (model, version) signed twice
  std::vector<Equivocation> equivocations_;  // the proof, kept for the first few
};

}  // namespace tensorhub::peer
