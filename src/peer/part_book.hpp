// The parts of versions published in parts that this peer knows, and the
// seals waiting for them. Sans-I/O: time is an input, and asking a peer for
// a part's manifest is a request the caller sends (kGetManifest).
//
// Rules:
//  - A part's manifest is kept only when a trusted publisher signed it.
//    The parts of one (model, version) agree on their count and parent; a
//    part that disagrees with the first one known is refused.
//  - Two validly signed manifests for one slot (model, version, part
//    index) with different ids are equivocation: the pair is handed to the
//    caller as proof, the version is never sealed here, and no seal of it
//    is joined.
//  - A peer that publishes a part of a version (add_own) wants the others:
//    a gossip record that names a holding of that (model, version) under
//    an id not known here names a part, which is asked of that peer. Once
//    every part is here, the version is ready to seal (take_ready): every
//    publisher of a part seals, and their seals are one version with one id.
//  - A seal received (its signature checked by the caller) waits until
//    every part it names is here; the missing ones are asked of the peers
//    that sent the seal, round robin, again after `retry`. Once all are
//    here, the seal and its parts are joined (SealedVersion::join) and
//    handed to the caller (take_joined), or refused with the reason.
//  - A seal received (its signature checked by the caller) also has its
//    parts asked of any peer whose record holds them. A seal whose parts
//    have not all come within kSealWait is dropped (a later copy of it
//    starts again).
//  - A part's manifest nobody asked for is kept only when its version has
//    an entry here (a proof of equivocation for a slot already held).
//  - Bounded: at most kMaxVersions (model, version) entries (the lowest
//    number of the model makes room, never a version this peer publishes a
//    part of or a waiting seal needs: a version that finds no room is not
//    taken), kMaxPendingSeals seals waiting (the lowest number makes room
//    for a higher one), kMaxWanted parts asked for at once and at most
//    kMaxNamedPerPeer by one peer's word, kMaxNamers peers remembered per
//    part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/time.hpp"
#include "core/version_number.hpp"
#include "manifest/sealed_version.hpp"
#include "peer/head_tracker.hpp"
#include "peer/namer_ring.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/seal.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::peer {

// Two part manifests signed for one slot.
struct PartConflict {
  std::shared_ptr<const Manifest> first, second;
};

// A seal joined with its parts, or why it could not be.
struct JoinedSeal {
  ManifestId seal;
  Result<std::shared_ptr<const manifest::SealedVersion>> version;
};

class PartBook {
 public:
  static constexpr std::size_t kMaxVersions = 16;
  static constexpr std::size_t kMaxPendingSeals = 16;
  static constexpr std::size_t kMaxWanted = 4096;
  static constexpr std::size_t kMaxNamers = 16;
  static constexpr std::size_t kMaxNamedPerPeer = 32;
  static constexpr Duration kSealWait = std::chrono::seconds(60);

  PartBook(std::vector<PublicKey> trusted_publishers, Duration retry);

  // This peer publishes `part` (signed by this peer): the other parts of
  // its version are wanted from now on. Errors: kAlreadyExists (another
  // manifest holds that slot here already), kInvalidArgument (its count or
  // parent differs from the version's other parts known here).
  Status add_own(std::shared_ptr<const Manifest> part);

  // A gossip record of `peer` says it holds `id` of `model` v`version`.
  // Returns the request to send now when that names a part this peer wants.
  std::optional<ManifestRequest> on_named(TimePoint now, const PeerId& peer, const std::string& model,
                                          VersionNumber version, const ManifestId& id);
  // A seal `from` sent, its signature checked. Returns the requests for
  // the parts not here (none: it joins at once; see take_joined).
  std::vector<ManifestRequest> on_seal(TimePoint now, const PeerId& from, Seal seal);
  // A part's manifest arrived (from a peer or a proof). Returns a
  // conflict when another manifest holds its slot. Errors:
  // kVerifyFailed (no trusted publisher signed it), kInvalidArgument (its
  // count or parent differs from the version's other parts).
  Result<std::optional<PartConflict>> on_part(std::shared_ptr<const Manifest> part);
  // `peer` does not have `id`: the next peer that named it is asked.
  std::optional<ManifestRequest> on_no_manifest(TimePoint now, const PeerId& peer, const ManifestId& id);
  void forget_peer(const PeerId& peer);

  // Seals whose parts are all here now, joined or refused, each once.
  std::vector<JoinedSeal> take_joined();
  // The seal bodies of versions this peer publishes a part of whose parts
  // are all here and that no seal joined yet, each once.
  std::vector<SealBody> take_ready();
  // Requests whose answer is overdue, asked of the next namer.
  std::vector<ManifestRequest> handle_timeout(TimePoint now);
  TimePoint next_timeout() const;

  // A part's manifest known here, by id; null when none.
  std::shared_ptr<const Manifest> manifest(const ManifestId& id) const;
  // The parts of `model` v`version` known here, by index.
  std::vector<std::shared_ptr<const Manifest>> parts(const std::string& model, VersionNumber version) const;
  // How many parts the version has (0 when no part of it is known), and
  // the indices not known here.
  std::uint32_t part_count(const std::string& model, VersionNumber version) const;
  std::vector<std::uint32_t> missing(const std::string& model, VersionNumber version) const;
  // Whether two manifests claimed one of the version's slots.
  bool equivocated(const std::string& model, VersionNumber version) const;
  // Sealing the version failed here (the parts do not fit together): kept
  // as the reason its publishers' handles give. OK when it did not.
  void seal_failed(const std::string& model, VersionNumber version, Status why);
  Status seal_failure(const std::string& model, VersionNumber version) const;
  // Versions of `model` at or below `version` are forgotten (a newer head
  // makes them history), except those a pending seal waits for. A sealed
  // version keeps its parts in its SealedVersion.
  void forget_through(const std::string& model, VersionNumber version);
  std::size_t versions() const { return versions_.size(); }
  std::size_t pending_seals() const { return pending_.size(); }
  std::size_t wanted() const { return wanted_.size(); }

 private:
  using Key = std::pair<std::string, VersionNumber>;
  struct Slots {
    std::uint32_t count = 0;
    ManifestId parent;
    std::map<std::uint32_t, std::shared_ptr<const Manifest>> parts;
    bool own = false;        // this peer publishes a part of it
    bool offered = false;    // handed out by take_ready
    bool equivocated = false;
    Status seal_failure;
  };
  // The peers that name it, asked in turn (NamerRing).
  struct Wanted : NamerRing {
    Key version;
  };

  Slots* slots(const Key& key);
  // The entry of `key`, made when there is room (see the bounds above).
  Slots* make_slots(const Key& key);
  // Whether a waiting seal names part `id`, or needs the version `key`.
  bool needed(const ManifestId& id) const { return needed_.count(id) != 0; }
  bool needed(const Key& key) const;
  void refresh_needed();
  std::size_t named_by(const PeerId& peer) const;
  Status fits(const Slots& s, const Manifest& part) const;
  // Wants `id` of `key`, named by `peer`; the request to send now, if any.
  std::optional<ManifestRequest> want(TimePoint now, const Key& key, const ManifestId& id, const PeerId& peer);
  // The request for `id` of the namer `w` asks now (`peer` when it names it).
  static std::optional<ManifestRequest> ask(TimePoint now, const ManifestId& id, Wanted& w,
                                            const std::optional<PeerId>& peer = std::nullopt);
  void check_pending();

  std::vector<PublicKey> trusted_;
  Duration retry_;
  std::map<Key, Slots> versions_;
  std::map<ManifestId, std::shared_ptr<const Manifest>> by_id_;
  std::map<ManifestId, Wanted> wanted_;
  struct PendingSeal {
    Seal seal;
    TimePoint since;
  };
  std::map<ManifestId, PendingSeal> pending_;
  std::set<ManifestId> needed_;  // the parts waiting seals name
  std::vector<JoinedSeal> joined_;
};

}  // namespace tensorhub::peer
