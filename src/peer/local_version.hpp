// One version as this peer holds it: its manifest, the memory it is served
// from or fetched into, its state and progress.
//
// Owned by the peer core, which changes it on the driver's thread only. The
// fields above `state` are set once, before any handle exists, and never
// change: other threads may read them. The fields from `state` on are the
// core's alone; a driver that lets other threads see them publishes a
// snapshot of its own (the runtime's VersionWatch).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/anonymous_memory.hpp"
#include "core/bitfield.hpp"
#include "core/version_number.hpp"
#include "core/regions.hpp"
#include "seams/destination_owner.hpp"
#include "seams/memory_domain.hpp"
#include "core/time.hpp"
#include "peer/part_sets.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/version_info.hpp"

namespace tensorhub::peer {

// kReleased is a driver's word: the memory went back to its owner after the
// core's ReleaseMemory. The core itself never sets it.
enum class VersionState { kFetching, kComplete, kFailed, kReleased };

std::string_view version_state_name(VersionState state);

// Why a version is held here.
enum class VersionRole {
  kPublished,  // this peer published it from the caller's memory
  kFetched,    // fetched from the swarm; served onwards as it verifies
  kCopy,       // a private copy of a version held here already; never served
};

// A peer on this peer's host (the same dc, rack and host labels) and its
// data address, which names its local channel (mate_channel.hpp).
struct HostMate {
  PeerId id;
  std::string data_addr;
};

struct LocalVersion {
  std::string model;
  VersionNumber number;
  ManifestId id;
  std::shared_ptr<const Manifest> manifest;
  VersionRole role = VersionRole::kFetched;
  core::ConstRegions memory;          // what is served (published, or fetched so far)
  core::MutableRegions destination;   // what a fetch or copy writes
  const MemoryDomain* domain = &host_memory();  // where memory and destination live
  core::AnonymousMemory owned;        // when the driver allocated the destination
  // What the destination and the domain belong to, when the fetch was
  // given them to keep: they live as long as the version.
  std::shared_ptr<DestinationOwner> backing;
  // A peer of this host that holds this version in memory this one maps
  // (GPU memory by CUDA IPC): the shards no local version gives are copied
  // from it first (CopyFromMate), and the swarm fetches only what fails.
  std::optional<HostMate> host_mate;
  TimePoint started;                  // driver time: the fetch began, or the version was published
  // The shards a fetch of a selection is for, one bit per shard; empty:
  // every shard (a whole version). A selection, once complete, holds
  // those alone: it serves them, and never counts as a whole copy.
  core::Bitfield wanted;
  // Set for a view (manifest::view_manifest): the id of the image (a
  // part) it is a view of. A fetch of it asks that image's publisher
  // besides the view's announced holders.
  std::optional<ManifestId> view_of;
  // A view this peer serves from an image it publishes: that image, whose
  // memory holds the view's bytes. It goes when the image is released.
  std::shared_ptr<LocalVersion> served_from;
  // A fetch of a sealed version's part, or of a part's view of a
  // selection: its place there, by which gossip announces it in a part set.
  std::optional<PartSlot> slot;

  VersionState state = VersionState::kFetching;
  Status result;                     // why it failed, once kFailed
  FetchProgressInfo progress;
  TimePoint completed = kTimeNever;  // driver time: every shard verified
  std::uint32_t bad_shards = 0;      // shards received that failed verification
  // A view's fetch: the holders of its image asked to serve it
  // (kServeView), when, and whether they said they do; and those that did
  // not answer in time, asked again only once nobody else is left.
  struct ServeAsk {
    PeerId peer;
    TimePoint asked;
    bool served = false;
  };
  std::vector<ServeAsk> asked_to_serve;
  std::vector<PeerId> slow_to_serve;

  bool served() const { return role != VersionRole::kCopy; }
  bool whole() const { return wanted.size() == 0; }
  bool wants(ShardIndex shard) const { return whole() || wanted.test(shard.value); }
  // Every shard is here and verified: a whole version, complete.
  bool holds_all() const { return state == VersionState::kComplete && whole(); }
  bool finished() const { return state != VersionState::kFetching; }
};

}  // namespace tensorhub::peer
