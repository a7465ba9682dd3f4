// What the library's own tools may set on a peer and an application may not:
// the baselines' leeches and the tests' corrupt holders.
#pragma once

#include <functional>
#include <memory>

#include "seams/memory_domain.hpp"
#include "tensorhub/peer.hpp"

namespace tensorhub::peer {

struct InternalOptions {
  // false: a leech that never announces (so never serves) what it fetches;
  // only for baselines, e.g. every worker pulling from the publisher alone.
  bool serve_fetched = true;
  // Flip one byte of every piece this peer serves, to exercise the
  // detection of corrupt holders (tests only).
  bool corrupt_serving = false;
  // Send every block request this many times, as a hostile or broken
  // requester would, to exercise the holder's refusals (tests only).
  int repeat_requests = 1;
  // Probe the GPUs at start (off the I/O thread) for status. The daemon
  // does; a library peer does not, since loading the CUDA driver in an
  // application's process behind its back breaks a fork that follows.
  bool probe_gpus = false;
};

// Peer::start with internal options.
Result<std::unique_ptr<Peer>> start_peer(PeerOptions options, InternalOptions internal, Identity identity,
                                         SwarmKey swarm_key);

// Peer::fetch into memory of `domain` (GPU memory, say): `regions` are that
// domain's, verified and served through it, and payloads land through its
// payload stage. The public API names GPU destinations once the CUDA device
// can be chosen there; until then the tests and tools call this.
// REQUIRES: `domain` outlives the handle's version.
// Errors: as Peer::fetch; kInvalidArgument for no regions when the host
// cannot allocate in `domain`.
Result<FetchHandle> fetch_into(Peer& peer, const std::string& model, std::uint64_t version,
                               std::span<const MutableRegion> regions, const MemoryDomain& domain);

// Peer::fetch_selection into memory of `domain` (the tests' fake GPU).
// REQUIRES: `domain` outlives the handle's versions. Errors: as
// Peer::fetch_selection with MemoryOptions.
Result<FetchHandle> fetch_selection_into(Peer& peer, const std::string& model, std::uint64_t version,
                                         std::span<const TensorSelection> selection,
                                         std::span<const MutableRegion> regions, const MemoryDomain& domain);

// Peer::publish from memory of `domain` (GPU memory, say): the manifest's
// digests computed by the domain, pieces served through it.
// REQUIRES: `domain` outlives the handle's version.
// Errors: as Peer::publish.
Result<PublishHandle> publish_from(Peer& peer, const std::string& model, std::span<const ConstRegion> regions,
                                   std::vector<TensorEntry> tensors, const MemoryDomain& domain);

// Peer::publish_part from memory of `domain`. Errors: as Peer::publish_part.
// `views`: as PartOptions::views.
Result<PublishHandle> publish_part_from(Peer& peer, const std::string& model, std::uint64_t version, PartOf part,
                                        std::span<const ConstRegion> regions, std::vector<TensorEntry> tensors,
                                        const MemoryDomain& domain,
                                        std::span<const std::vector<TensorSelection>> views = {});

// Queues `fn` on the peer's I/O thread, behind whatever is queued there
// (benchmarks measure the thread's lag with it: gossip datagrams wait in
// the same queue).
void post_to_io_thread(Peer& peer, std::function<void()> fn);

}  // namespace tensorhub::peer
