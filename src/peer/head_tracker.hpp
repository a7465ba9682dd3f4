// What this peer believes about each model: the manifests it has verified,
// the head (the newest verified version), the manifests it still wants, and
// proof of equivocation. Sans-I/O: time is an input, and asking a peer for
// a manifest is an action the caller carries out.
//
// Rules:
//  - A version is a whole version's manifest or a version in parts' seal
//    joined with its parts (KnownVersion); the rules below hold for both,
//    and "manifest" names either record.
//  - A manifest is believed only when a trusted publisher signed it and, if
//    its parent is known, it extends that parent (verify_chain).
//  - Two validly signed manifests for one (model, version) with different
//    ids are equivocation (a seal and a whole manifest for one number
//    too). The pair is kept as proof, neither is ever head,
//    and any later manifest for that (model, version) is refused.
//  - A head that gossip names and that is newer than ours is wanted: its
//    manifest is asked of a peer whose record names it. So is one named for
//    a version we believe under another id: it would prove equivocation. An answer that has
//    not come after `retry` is asked of the next peer that names it (the
//    first may have died or lost the connection), round robin.
//  - A manifest whose parent is unknown, while a lower version of its model
//    is believed and at most kMaxChainBack versions lie between, waits: its
//    parent is asked of the peers that named it, and so on back along the
//    chain, so that a fork from the history we hold shows up (a version
//    signed twice at the fork, or a broken chain) before anything of it is
//    believed. A manifest whose parent does not come within kChainWait is
//    believed without it (the parent may be gone from every peer).
//  - A namer that answers for a head its record named with nothing (no
//    manifest) or with garbage (undecodable, another id) lied: it names nothing here for a while (kDiscreditFor,
//    doubling each time, up to kMaxDiscreditFor), and what only it named is
//    wanted no more. One peer names at most kMaxNamedPerPeer wanted
//    manifests (an honest record names one head per model, at most 16), so
//    one member cannot fill the table with fake heads that crowd out the
//    real one.
//  - Bounded: at most kMaxWanted manifests are wanted at once (the newest
//    win), each remembers at most kMaxNamers peers, at most kMaxWaiting wait
//    for their parent, and per model only the newest kKeptVersions
//    manifests are kept once verified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/version_number.hpp"
#include "core/time.hpp"
#include "peer/known_version.hpp"
#include "peer/namer_ring.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/version_info.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::peer {

// Ask `peer` for the manifest `id` (of `model` v`version`).
struct ManifestRequest {
  PeerId peer;
  ManifestId id;
  std::string model;
  VersionNumber version;
};

// Two versions signed for one (model, version).
struct Equivocation {
  std::string model;
  VersionNumber version;
  KnownVersion first, second;
};

class HeadTracker {
 public:
  static constexpr std::size_t kMaxWanted = 64;
  static constexpr std::size_t kMaxNamers = 16;
  static constexpr std::size_t kKeptVersions = 16;
  static constexpr std::uint64_t kMaxChainBack = 8;
  static constexpr std::size_t kMaxWaiting = 64;
  static constexpr Duration kChainWait = std::chrono::seconds(8);
  static constexpr std::size_t kMaxNamedPerPeer = 16;
  static constexpr Duration kDiscreditFor = std::chrono::seconds(60);
  static constexpr Duration kMaxDiscreditFor = std::chrono::hours(1);
  static constexpr std::size_t kMaxDiscredited = 4096;

  HeadTracker(std::vector<PublicKey> trusted_publishers, Duration retry);

  // A gossip record of `peer` names `id` as the head v`version` of `model`.
  // Returns the request to send now, if the manifest is wanted and not
  // already asked within `retry`.
  std::optional<ManifestRequest> on_head_named(TimePoint now, const PeerId& peer, const std::string& model,
                                               VersionNumber version, const ManifestId& id);
  // `peer` is gone: it names nothing any more.
  void forget_peer(const PeerId& peer);
  // `peer` answered that it does not have `id`: the next namer is asked at
  // once. A peer whose own record named `id` as its head lied, and is
  // discredited (see above); one asked for a parent may not have it.
  std::optional<ManifestRequest> on_no_manifest(TimePoint now, const PeerId& peer, const ManifestId& id);
  // `peer` answered for `id` with bytes that are no manifest, or another
  // id's: it is discredited, and the next namer is asked at once.
  std::optional<ManifestRequest> on_bad_manifest(TimePoint now, const PeerId& peer, const ManifestId& id);
  // `peer` answered for `id` with a manifest no publisher we trust signed
  // (peers may trust different keys): the next namer is asked at once.
  std::optional<ManifestRequest> on_foreign_manifest(TimePoint now, const PeerId& peer, const ManifestId& id);
  // Whether `peer`'s head names are ignored now.
  bool discredited(TimePoint now, const PeerId& peer) const;

  // Checks and records a manifest (from a peer, or our own publication).
  // Returns whether the head of its model changed (to it, or to a child
  // that waited for it). A manifest that waits for its parent returns false;
  // parent_requests() then says whom to ask.
  // Errors: kVerifyFailed (untrusted signer, broken chain, equivocation),
  // kInvalidArgument (one part of a version in parts: never a version alone).
  Result<bool> accept(std::shared_ptr<const Manifest> manifest);
  // The same for a version in parts, once its seal and every part are
  // joined (SealedVersion::join checked them together). Errors: as above;
  // kVerifyFailed also for a seal or part no trusted publisher signed.
  Result<bool> accept(std::shared_ptr<const manifest::SealedVersion> sealed);
  // The parents wanted for waiting manifests and not asked yet.
  std::vector<ManifestRequest> parent_requests(TimePoint now);
  std::size_t waiting() const { return waiting_count_; }

  // Requests whose answer is overdue, re-addressed to the next namer; and
  // manifests that waited kChainWait for their parent, believed now.
  std::vector<ManifestRequest> handle_timeout(TimePoint now);
  TimePoint next_timeout() const;

  // The newest verified version of `model`.
  std::optional<VersionInfo> head(const std::string& model) const;
  // The head of every model with one, by model name.
  std::vector<VersionInfo> heads() const;
  // A verified version, by id or by (model, version); null when unknown.
  const KnownVersion* known(const ManifestId& id) const;
  const KnownVersion* known(const std::string& model, VersionNumber version) const;
  // A verified whole version's manifest, by id or by (model, version); null
  // when unknown or a version in parts.
  std::shared_ptr<const Manifest> manifest(const ManifestId& id) const;
  std::shared_ptr<const Manifest> find(const std::string& model, VersionNumber version) const;
  // A part's manifest of a version in parts believed here, by its id; null
  // when none.
  std::shared_ptr<const Manifest> part(const ManifestId& id) const;
  // The version number and parent of `model`'s next publication.
  struct NextVersion {
    VersionNumber version{1};
    ManifestId parent;
  };
  NextVersion next_version(const std::string& model) const;
  bool equivocated(const std::string& model, VersionNumber version) const;
  // Two manifests signed for one part's slot of a version in parts (the
  // part book found them): that version is equivocated as if two seals of
  // it were, and a seal of it believed already is believed no more.
  void record_equivocation(Equivocation e);
  const std::vector<Equivocation>& equivocations() const { return equivocations_; }
  std::size_t wanted() const { return wanted_.size(); }
  bool trusts(const PublicKey& publisher) const;

 private:
  struct Model {
    std::map<VersionNumber, KnownVersion> by_version;  // verified, not equivocated
    std::optional<VersionInfo> head;
  };
  // The peers that name it, asked in turn (NamerRing).
  struct Wanted : NamerRing {
    std::string model;
    VersionNumber version;
    bool parent = false;  // wanted as the parent of a waiting manifest, not named as a head
  };
  struct Discredit {
    TimePoint until;
    Duration last;  // the length of the last discredit
  };

  // The request for `id` of the namer `w` asks now (`peer` when it names it).
  static std::optional<ManifestRequest> ask(TimePoint now, const ManifestId& id, Wanted& w,
                                            const std::optional<PeerId>& peer = std::nullopt);
  // `peer` lied about `id`: discredited, dropped as a namer everywhere.
  std::optional<ManifestRequest> discredit(TimePoint now, const PeerId& peer, const ManifestId& id);
  // `peer` cannot give `id`: the next namer is asked.
  std::optional<ManifestRequest> pass_over(TimePoint now, const PeerId& peer, const ManifestId& id);
  std::size_t named_by(const PeerId& peer) const;
  void refresh_head(Model& model);
  void prune(Model& model);
  // `m` waits for its parent when that is worth asking for (see above).
  bool wait_for_parent(const KnownVersion& m, std::vector<PeerId> namers);
  // Accepts the manifests that waited for `parent`; whether a head changed.
  bool release_children(const ManifestId& parent, bool skip_chain);
  Result<bool> accept(KnownVersion version, bool skip_chain);

  std::vector<PublicKey> trusted_;
  Duration retry_;
  std::map<std::string, Model> models_;
  std::map<ManifestId, KnownVersion> by_id_;  // every version in models_
  std::map<ManifestId, Wanted> wanted_;
  std::map<PeerId, Discredit> discredited_;
  std::set<std::pair<std::string, VersionNumber>> equivocated_;  // (model, version) signed twice
  std::vector<Equivocation> equivocations_;  // the proof, kept for the first few
  struct Waiting {
    KnownVersion version;
    TimePoint since = kTimeNever;  // set when its parent is first asked for
  };
  std::map<ManifestId, std::vector<Waiting>> waiting_;  // by the parent they wait for
  std::size_t waiting_count_ = 0;
};

}  // namespace tensorhub::peer
