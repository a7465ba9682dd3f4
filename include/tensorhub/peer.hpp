// The TensorHub peer: the library a trainer or rollout worker embeds.
//
// A Peer joins the swarm (gossip), serves the versions it holds, and fetches
// the versions it asks for, shard by shard from the peers that hold them.
// It runs its own I/O thread and a pool of threads for hashing and copying;
// every method here may be called from any application thread. Methods
// that wait say so, and take a timeout.
//
// Callbacks (subscribe, release_async) run on the peer's callback thread,
// one at a time and in order: never on the I/O thread, so a callback may
// call any method here, blocking ones included (it delays the callbacks
// after it, not the peer). A callback must not destroy the Peer.
//
// Memory and lifetimes:
//  - publish() serves caller-owned memory in place. The caller must not
//    change it until release() has returned on the handle (release stops new
//    reads, waits for the reads in flight, then gives the memory back).
//  - Retention: release() of a model's head waits while this peer is among
//    the last `retain_head_replicas` complete holders, so the swarm never
//    drops the newest version by accident (bounded by max_release_deferral;
//    a newer head or another holder ends the wait). Destroying a handle, or
//    the Peer leaving, releases at once.
//  - fetch() writes into caller-owned memory (which must stay valid and
//    untouched until the fetch finishes or is released), or into memory the
//    peer allocates and the handle owns. Every handle owns its version
//    alone: a fetch of a version this peer holds already copies it, and
//    releasing one handle never affects another.
//  - Destroy handles before the Peer. A handle that outlives it holds
//    nothing: destroying the Peer ends every read of every version, and
//    the handle's release returns at once (wait_replicated says kCancelled).
//
// Errors are Status codes (tensorhub/status.hpp); each method lists the
// ones it returns.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tensorhub/identity.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/status.hpp"
#include "tensorhub/swarm_key.hpp"
#include "tensorhub/tensor.hpp"
#include "tensorhub/version_info.hpp"

namespace tensorhub {

struct PeerOptions {
  std::string listen = "127.0.0.1:7946";  // gossip, UDP and TCP: IP:port
  std::string data_listen;                // data plane, TCP, IP:port; default: the gossip port + 1
  std::string advertise;                  // IP:port others reach the gossip port at
  std::vector<std::string> seeds;         // host:port of peers to join through (names looked up at start)
  // start() gives up looking up the seeds' names after this: a seed still
  // being looked up is passed over (kTimeout when it was the last one).
  // This and publish_head_wait: more than 0, at most a day.
  std::chrono::milliseconds start_timeout{10'000};
  // How long publish() waits to learn the head it must follow (a peer
  // started with seeds that has heard from no peer, or whose announced
  // head is not verified yet): then kUnavailable.
  std::chrono::milliseconds publish_head_wait{10'000};
  std::string dc, rack, host;             // topology labels: printable ASCII, at most 64 bytes each
  std::vector<PublicKey> trusted_publishers;  // manifests signed by others are refused
  // Admission control: when not empty, only these identities are members.
  // Anyone else holding the swarm key is not heard by gossip and its data
  // connections are closed once authenticated. Must name this peer. Empty:
  // anyone holding the swarm key is a member. Peer::set_members changes it.
  std::vector<PublicKey> members;
  // Limits and tuning (defaults are sensible).
  std::size_t max_neighbours = 16;
  std::size_t upload_slots = 8;  // per host: peers with the same host label divide them
  std::uint32_t block_size = 1u << 20;
  // TCP connections to each neighbour this peer connects to (1 to 8): the
  // extra ones carry requests and pieces, for links one connection cannot fill.
  std::size_t data_lanes = 1;
  std::uint64_t shard_size = kAutoShardSize;  // for versions this peer publishes (auto_shard_size)
  // The shard hash of versions this peer publishes: XXH3-128 (fast; catches
  // any accidental change) or BLAKE2b-256 (secure mode: also deliberate
  // forgery by a member). docs/security.md states each mode's promise.
  ShardHashAlgorithm shard_hash = ShardHashAlgorithm::kXxh3_128;
  // Fetch only versions whose shards are hashed with BLAKE2b-256: any other
  // is refused with kPermissionDenied.
  bool require_secure_hash = false;
  // Retention: release() of a model's head waits while fewer than this many
  // other peers hold it complete (0: never wait), until another holder
  // completes, a newer head appears, or max_release_deferral passes.
  std::size_t retain_head_replicas = 1;
  std::chrono::milliseconds max_release_deferral{60'000};
  // The publisher reveals its shards to each fetcher a few at a time, the
  // rarest first, so its uplink sends distinct shards to different peers
  // (BitTorrent's super-seeding). false: it advertises everything at once.
  bool super_seed = true;
  // A version this peer fetched into GPU memory is served from a host copy
  // made once it is complete (host memory of the version's size), rather
  // than from a device-to-host copy per piece. false: no host copy.
  bool mirror_gpu_versions = true;
  // Block payloads move by RDMA READ from neighbours that offer it, where
  // this machine has an RDMA device with an active port (docs/rdma.md);
  // TCP carries everything else. false: TCP only.
  bool rdma = true;
  // RDMA queue pairs to each neighbour per local NIC (1 to 16): more keep
  // a NIC busy when one queue pair waits at its read depth.
  std::size_t rdma_queue_pairs = 2;
};

// Where a version's memory lies, for publish() and fetch().
struct MemoryOptions {
  // Empty: host memory. Otherwise the UUID of the GPU whose memory the
  // regions are ("GPU-" and 32 hex digits, as `nvidia-smi -L` prints it).
  std::string gpu;
};

// What publish_part() is told besides the part's bytes.
struct PartOptions {
  MemoryOptions memory;  // where the part's regions lie
  // Selections (fetch_selection()'s form) whose fetchers are expected: one
  // a tensor-parallel rank, say, as tensorhub.layouts gives them. Layouts
  // are stable across versions, so they are declared once and given to
  // every publish. The part's view of each (the bytes of the part it
  // takes, end to end) is hashed into its manifest, and this peer serves
  // each view gathered from the part's memory: a fetch of that selection
  // moves and verifies exactly its bytes from this part, a strided one (a
  // row-parallel rank's columns) too. A selection that takes nothing of
  // this part is left out. At most kMaxViews views a part; host memory
  // only (views of a part in GPU memory are not built yet). The views are
  // in the part's signed manifest: every publish of a part of a version (a
  // restarted rank's too) must declare the same ones, or it makes a
  // second manifest for its slot and the version is never sealed.
  std::vector<std::vector<TensorSelection>> views;
};

// How fetch_to_file() creates its file.
struct FileOptions {
  unsigned mode = 0644;   // permission bits of the new file
  bool overwrite = true;  // false: kAlreadyExists when the path exists
};

class Peer;

// A published version. Destroying the handle, or assigning another to it,
// releases the version at once. A moved-from handle holds nothing.
class PublishHandle {
 public:
  ~PublishHandle();
  PublishHandle(PublishHandle&&) noexcept;
  PublishHandle& operator=(PublishHandle&&) noexcept;
  // Which version this is: model, number, manifest id and size (as
  // FetchHandle::info).
  const VersionInfo& info() const;
  const Manifest& manifest() const;
  // Payload bytes this peer has sent of this version to others so far.
  std::uint64_t bytes_served() const;
  // Waits until `replicas` peers other than this one hold the whole version:
  // their gossip records say so, and each has proved it by answering a
  // challenge on random ranges of the version's bytes. Wakes on news, and
  // at least every second to challenge again.
  // Errors: kTimeout (with how many hold it).
  Status wait_replicated(std::size_t replicas, std::chrono::milliseconds timeout);
  // For a part (Peer::publish_part): waits until a seal this peer believes
  // makes its version, and so this part, visible. OK at once for a whole
  // version. Errors: kTimeout (naming the parts that have not come, as
  // "part 2, part 3 of 4"), kVerifyFailed (the version cannot be sealed:
  // the parts overlap or leave a gap, naming the tensor, or a part was
  // signed twice), kAlreadyExists (another version took the number),
  // kCancelled (the peer stopped).
  Status wait_sealed(std::chrono::milliseconds timeout);
  // Stops serving; waits for reads in flight (and for retention, see the top
  // of this file); then the memory is the caller's. Blocks. Releasing twice
  // is harmless.
  void release();
  // The same without blocking: `done` runs on the callback thread once the
  // memory is the caller's. Keep the handle until then (destroying it cuts a
  // retention wait short).
  void release_async(std::function<void()> done);

 private:
  friend class Peer;
  friend struct PeerAccess;
  struct State;
  explicit PublishHandle(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

// A fetch in progress or finished. Destroying the handle, or assigning
// another to it, releases the version at once.
class FetchHandle {
 public:
  ~FetchHandle();
  FetchHandle(FetchHandle&&) noexcept;
  FetchHandle& operator=(FetchHandle&&) noexcept;
  const VersionInfo& info() const;
  // The version's signed manifest: its tensor table and shards. For a
  // version published in parts, which has one manifest per part: part 0's
  // (tensors() describes the whole model).
  const Manifest& manifest() const;
  // The tensors as they lie in the destination: manifest().tensors() for a
  // whole version; for a version in parts, every tensor whole at its global
  // shape, end to end in the order the parts first name them.
  std::span<const TensorEntry> tensors() const;
  // One flag per shard of manifest() (for a version in parts, of each
  // part in turn): verified, so its bytes in the destination are final (a
  // consumer may read those while the rest arrive). Empty once released.
  std::vector<bool> verified_shards() const;
  // One flag per tensor of tensors(): every byte of it verified, so a
  // consumer may read that tensor while the rest arrive (of a version in
  // parts or a selection too: each tensor is ready once the shards of each
  // part that land in it are). Empty once released.
  std::vector<bool> verified_tensors() const;
  FetchProgressInfo progress() const;
  // Waits until more than `shards_verified` shards are verified, the fetch
  // has ended (progress().done), or `timeout` passes, and returns the
  // progress then: a consumer reading tensors as they verify waits for the
  // next shard with it instead of polling.
  FetchProgressInfo wait_progress(std::uint32_t shards_verified, std::chrono::milliseconds timeout) const;
  // Waits for the outcome: ok when every byte is verified. For a fetch
  // into a file (Peer::fetch_to_file), the first call that finds every
  // byte verified renames the file into place, and returns ok once it is.
  // Errors: kTimeout (the fetch goes on), kUnavailable (no holder could
  // finish it), kCancelled (released; after the release, a file put in
  // place before it still gives ok), kIoError (the file could not be
  // renamed into place).
  Status wait(std::chrono::milliseconds timeout);
  // The version's bytes once every one is verified; empty until then, and
  // for a fetch into several regions (see regions()).
  std::span<const std::byte> bytes() const;
  // The regions the version was fetched into, once every byte is verified.
  std::vector<ConstRegion> regions() const;
  // Stops serving the fetched copy to others and lets go of the memory,
  // honouring retention like PublishHandle::release(). Blocks. A file
  // that no wait() has put in place yet is removed (a later wait()
  // returns kCancelled); one in place stays.
  void release();
  void release_async(std::function<void()> done);

 private:
  friend class Peer;
  friend struct PeerAccess;
  struct State;
  explicit FetchHandle(std::shared_ptr<State> state);
  bool finished_complete() const;
  std::shared_ptr<State> state_;
};

// One rank of a model-parallel group: the ranks of one inference instance,
// which switch versions together (docs/parts.md, "Group commit"). Each
// rank stages the version (fetch), then commits it: commit is a barrier
// that returns once every rank holds its stage verified and has entered
// commit, and fails naming the ranks at fault otherwise, so no rank loads
// a version its group cannot. The ranks find
// each other through gossip (each peer's record claims its rank) and then
// exchange their states directly, every 500 ms; a rank not heard from for
// 2 s is lost. Made by Peer::group; destroying it leaves the group. It may
// outlive its Peer: then every call fails with kCancelled.
class Group {
 public:
  ~Group();
  Group(Group&&) noexcept;
  Group& operator=(Group&&) noexcept;
  const std::string& name() const;
  std::uint32_t size() const;
  std::uint32_t rank() const;
  // Stages `model` v`version` for the group: fetches it as Peer::fetch does
  // (into `destination`, or memory the peer allocates) and tells the other
  // ranks how far it has come. `version` is explicit, as the trainer or
  // controller hands it down; no rank resolves the head on its own.
  // Releasing the handle before the group commits fails this rank's stage
  // (the others' commits fail naming it). Staging the same version again
  // replaces the stage. Errors: as Peer::fetch; kInvalidArgument
  // (kLatestVersion), kCancelled (the peer has stopped).
  Result<FetchHandle> fetch(const std::string& model, std::uint64_t version, std::span<std::byte> destination = {});
  // The same into `regions` where `options` says they live (Peer::fetch).
  Result<FetchHandle> fetch(const std::string& model, std::uint64_t version, std::span<const MutableRegion> regions,
                            const MemoryOptions& options);
  // Stages this rank's selection of `model` v`version` (Peer::fetch_selection):
  // the commit then waits for every rank's own selection, verified.
  // Errors: as Peer::fetch_selection; as fetch() above.
  Result<FetchHandle> fetch_selection(const std::string& model, std::uint64_t version,
                                      std::span<const TensorSelection> selection,
                                      std::span<const MutableRegion> regions = {});
  // The same into `regions` where `options` says they live (Peer's).
  Result<FetchHandle> fetch_selection(const std::string& model, std::uint64_t version,
                                      std::span<const TensorSelection> selection,
                                      std::span<const MutableRegion> regions, const MemoryOptions& options);
  // The same into a file (Peer::fetch_to_file, Peer::fetch_selection_to_file):
  // an engine's loader reads the staged slice from it once the group
  // commits. Errors: as those; as fetch() above.
  Result<FetchHandle> fetch_to_file(const std::string& model, std::uint64_t version, const std::string& path,
                                    const FileOptions& options = {});
  Result<FetchHandle> fetch_selection_to_file(const std::string& model, std::uint64_t version,
                                              std::span<const TensorSelection> selection, const std::string& path,
                                              const FileOptions& options = {});
  // Commits v`version` (every model this rank staged at that number):
  // returns ok once every rank of the group holds its stage of it verified
  // under one version id and has called commit for it (or committed it).
  // A commit that gives up withdraws this rank from the barrier; a rank
  // that saw it waiting may have committed meanwhile: after an error,
  // committed() says so, and commit() again then succeeds at once.
  // Errors: kAborted, at once, when a rank is lost
  // (not heard from for 2 s, or gone from gossip), cannot stage it (its
  // fetch failed or was released), staged another version under that
  // number, or two peers claim one rank: the message names each as
  // "rank N: why"; kTimeout when ranks still stage it, or have not joined,
  // at the timeout (named likewise; this rank's stage goes on);
  // kInvalidArgument (this rank staged no such version); kCancelled (the
  // peer has stopped).
  Status commit(std::uint64_t version, std::chrono::milliseconds timeout);
  // The highest version of `model` that a rank of the group (this one
  // included) says it committed: what a late rank (restarted, or new)
  // stages and commits to catch up. nullopt: none says so yet.
  // Errors: kCancelled (the peer has stopped).
  Result<std::optional<std::uint64_t>> committed(const std::string& model) const;

 private:
  friend class Peer;
  struct State;
  explicit Group(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

class Peer {
 public:
  // Starts the I/O thread, binds the ports and joins through the seeds,
  // looking up their names within PeerOptions::start_timeout.
  // Errors: kInvalidArgument (a bad address, label or option),
  // kUnavailable (a port cannot be bound, or no seed's name resolves),
  // kTimeout (no seed's name resolved, the last one in time).
  static Result<std::unique_ptr<Peer>> start(PeerOptions options, Identity identity, SwarmKey swarm_key);
  ~Peer();  // leaves gracefully (up to 4 s), then stops

  const PeerId& id() const;
  // host:port where this peer's gossip listens (useful with port 0).
  std::string gossip_address() const;

  // Publishes `image` (a flat byte image described by `tensors`, e.g. a
  // mapped safetensors file) as the next version of `model`, signed with this
  // peer's key. The version number is the model's current head + 1: a peer
  // started with seeds first waits (up to PeerOptions::publish_head_wait,
  // 10 s unless told) until it has heard from the swarm and verified any
  // head that gossip announces, so a restarted trainer never reuses a
  // number. The image is hashed on the calling
  // thread and the peer's pool, never on the I/O thread. A publish that
  // fails serves nothing.
  // Errors: kPermissionDenied (this peer's key is not a trusted publisher),
  // kInvalidArgument (bad model name, tensor table or shard size),
  // kUnavailable (the head could not be learnt within publish_head_wait: no seed
  // answered, or the announced head's manifest was not obtained),
  // kAlreadyExists (other publications of the model kept taking the next
  // number), kVerifyFailed (the manifest breaks the model's chain).
  Result<PublishHandle> publish(const std::string& model, std::span<const std::byte> image,
                                std::vector<TensorEntry> tensors);
  // The same for an image given as regions laid end to end (one per tensor,
  // say): each region is served where it lies, and a shard may span
  // regions. The regions must stay valid and unchanged until release().
  // Errors: as above; kInvalidArgument also for an empty region.
  Result<PublishHandle> publish(const std::string& model, std::span<const ConstRegion> regions,
                                std::vector<TensorEntry> tensors);
  // The same for regions where `options` says they lie. From a GPU's
  // memory, the shards are hashed on that GPU and pieces are served from a
  // host mirror read back once (PeerOptions::mirror_gpu_versions), else
  // copied out one at a time. Errors: as above; for a GPU also those of
  // fetch() into one.
  Result<PublishHandle> publish(const std::string& model, std::span<const ConstRegion> regions,
                                std::vector<TensorEntry> tensors, const MemoryOptions& options);

  // Publishes part `part_index` of `part_count` of `model` v`version`: a
  // version published in parts, one part per trainer rank, each from the
  // memory where it lies (regions laid end to end, as publish()). `tensors`
  // describe the part's image: whole tensors, or slices of larger ones
  // (TensorEntry::global_shape and slice_begin). Every rank gives the same
  // `version` (handed down by the trainer, never resolved here) and count;
  // the parts name the model's head as their parent (a rank that knows
  // v`version` - 1 is on its way waits up to publish_head_wait for it).
  // The part is served at once; the version becomes visible (latest,
  // wait_for_head, fetch) once sealed: every rank whose peer has every
  // part's id (from gossip) seals it, with nothing central waiting. The
  // handle's info() is the part's (its manifest id), wait_replicated counts
  // replicas of this part, and wait_sealed waits for the seal. Releasing a
  // part of the head honours retention as the head does (per part). A
  // part's manifest carries no creation time, so a rank that publishes the
  // same bytes again makes the same manifest; other bytes for a slot are
  // equivocation, and that version is never sealed.
  // Errors: kInvalidArgument (a bad model name, tensor table, part index
  // or count, or an empty region), kPermissionDenied (this peer's key is
  // not a trusted publisher), kUnavailable (the head could not be learnt),
  // kAlreadyExists (v`version` is known already, or another manifest is
  // that part here).
  Result<PublishHandle> publish_part(const std::string& model, std::uint64_t version, std::uint32_t part_index,
                                     std::uint32_t part_count, std::span<const ConstRegion> regions,
                                     std::vector<TensorEntry> tensors);
  // The same from memory where `options` says it lies (publish()'s rules).
  Result<PublishHandle> publish_part(const std::string& model, std::uint64_t version, std::uint32_t part_index,
                                     std::uint32_t part_count, std::span<const ConstRegion> regions,
                                     std::vector<TensorEntry> tensors, const MemoryOptions& options);
  // The same with the views `options` declares (PartOptions::views).
  // Errors: as above; kInvalidArgument also for a declared selection that
  // names a tensor twice or a slice that does not fit it (naming it), too
  // many views, or views of a part in GPU memory.
  Result<PublishHandle> publish_part(const std::string& model, std::uint64_t version, std::uint32_t part_index,
                                     std::uint32_t part_count, std::span<const ConstRegion> regions,
                                     std::vector<TensorEntry> tensors, const PartOptions& options);

  // The newest verified head of a model, if any is known.
  std::optional<VersionInfo> latest(const std::string& model) const;
  // A verified version of `model` (kLatestVersion: the head), e.g. to size
  // a destination. Errors: kUnavailable (no version known yet), kNotFound.
  Result<VersionInfo> version_info(const std::string& model, std::uint64_t version) const;
  // The signed manifest of a verified version (kLatestVersion: the head):
  // its tensor table, e.g. to lay out destination regions before a fetch.
  // Errors: as version_info; kInvalidArgument for a version published in
  // parts (one manifest a part: tensors() describes it).
  Result<Manifest> manifest(const std::string& model, std::uint64_t version) const;
  // The tensors of a verified version (kLatestVersion: the head) as a fetch
  // of it lays them out (FetchHandle::tensors()): a whole version's
  // manifest's table; for a version in parts, every tensor whole at its
  // global shape. Errors: as version_info.
  Result<std::vector<TensorEntry>> tensors(const std::string& model, std::uint64_t version) const;
  // The layout a fetch of `selection` of that version lands in
  // (fetch_selection): the selected tensors end to end, in the order
  // tensors() gives them, each at its slice's shape (TensorEntry's
  // global_shape and slice_begin say where the slice lies; a tensor
  // selected whole is whole). Errors: as version_info; kInvalidArgument (an
  // empty selection, a tensor the version does not have or named twice, a
  // slice outside its tensor, each naming the tensor).
  Result<std::vector<TensorEntry>> tensors(const std::string& model, std::uint64_t version,
                                           std::span<const TensorSelection> selection) const;
  // Calls `callback` (on the callback thread) with the current head, if any,
  // and then for each new verified head.
  void subscribe(const std::string& model, std::function<void(const VersionInfo&)> callback);
  // Waits until a head of `model` newer than `after` is known. Wakes on
  // gossip news, not on a poll. Errors: kTimeout; kVerifyFailed when a
  // version above `after` was signed twice (equivocation: neither manifest
  // is believed, and that number never becomes the head); kUnavailable when this
  // peer was started with seeds and has heard from no peer (no seed
  // answered: not running, unreachable, or another swarm key).
  Result<VersionInfo> wait_for_head(const std::string& model, std::uint64_t after, std::chrono::milliseconds timeout);

  // Fetches a version (kLatestVersion: the head) into `destination` (empty:
  // the peer allocates). A version this peer holds already (published,
  // fetched or being fetched) is copied from its local copy into the new
  // handle's memory, once that copy is complete. A version published in
  // parts is fetched whole (FetchHandle::tensors() lays it out): each part
  // from the peers that hold it, its bytes landing straight where they
  // belong in the destination.
  // Errors: kUnavailable (no version of the model is known yet), kNotFound
  // (that version is not known), kInvalidArgument (a destination of another
  // size than the version), kIoError (no memory for the destination).
  Result<FetchHandle> fetch(const std::string& model, std::uint64_t version, std::span<std::byte> destination = {});
  // Fetches into regions laid end to end (one per tensor, say), whose sizes
  // add up to the version's: blocks land straight in them, spanning regions
  // where they must. Errors: as above; kInvalidArgument also for an empty region.
  Result<FetchHandle> fetch(const std::string& model, std::uint64_t version, std::span<const MutableRegion> regions);
  // Fetches into `regions` where `options` says they live. Into a GPU's
  // memory, the regions are device addresses: the peer never reads or
  // writes them from the host; payloads reach them through a pinned staging
  // ring (16 blocks, 16 MiB at the default block size, allocated when the
  // GPU is first used), every shard is verified on that GPU, and pieces
  // served from them come from a host mirror made once the version is
  // complete (PeerOptions::mirror_gpu_versions). Errors: as above; for a GPU also kInvalidArgument (not a GPU
  // UUID, or no regions), kUnavailable (built without CUDA, no driver, no
  // pinned memory), kNotFound (no GPU with that UUID).
  Result<FetchHandle> fetch(const std::string& model, std::uint64_t version, std::span<const MutableRegion> regions,
                            const MemoryOptions& options);
  // Fetches a selection of a version (kLatestVersion: the head): of each
  // tensor `selection` names, the slice it names (one tensor-parallel
  // rank's rows or columns, an expert, a layer), into `regions` laid end to
  // end and laid out as tensors(model, version, selection) (empty: the peer
  // allocates). Of a part whose publisher declared this selection
  // (PartOptions::views), the part's view is fetched: exactly the selected
  // bytes, verified against the digests the part's manifest holds for it,
  // from that publisher and from the other fetchers of the selection.
  // Otherwise only the shards that hold selected bytes are fetched, each
  // verified whole against the manifest, from any peer holding it (another
  // fetcher of an overlapping selection included); a version in parts
  // fetches only the parts the selection takes bytes of. The other bytes
  // of those shards land in scratch the fetch owns. The handle's tensors()
  // is the selection's layout, verified_shards() the wanted shards of each
  // image fetched, and progress() counts those; its info() is the
  // version's. This peer then serves the shards it holds; gossip counts
  // it a holder in part.
  // The regions are host memory (GPU memory: the overload below), and a
  // selection moves over TCP (not RDMA: its scratch would be pinned
  // whole). Errors: as fetch(); as tensors() with a selection;
  // kInvalidArgument also for regions of another size than the selection;
  // kAlreadyExists (this peer holds a selection of that version already,
  // or fetches a selection of a version it holds as one).
  Result<FetchHandle> fetch_selection(const std::string& model, std::uint64_t version,
                                      std::span<const TensorSelection> selection,
                                      std::span<const MutableRegion> regions = {});
  // The same into `regions` where `options` says they live. Into a GPU's
  // memory only views move (a view lands whole there; whole shards would
  // need host scratch): every part the selection takes bytes of must have
  // declared its view (PartOptions::views), and each view is verified on
  // the GPU. Errors: as above; kInvalidArgument also for no regions, or a
  // part without that view (naming it); for a GPU as fetch() into one.
  Result<FetchHandle> fetch_selection(const std::string& model, std::uint64_t version,
                                      std::span<const TensorSelection> selection,
                                      std::span<const MutableRegion> regions, const MemoryOptions& options);
  // Fetches a version (kLatestVersion: the head) into the file at `path`:
  // its image (the published file, byte for byte), or for a version in
  // parts a safetensors file of its tensors, whole, in tensors()' order.
  // The file is created beside `path` at the version's size, blocks are
  // written into it as they arrive (by pwrite, which fills a new page
  // without zeroing it first: about twice as fast as stores through a
  // mapping), and wait() renames it to `path` once every byte is
  // verified. Until released, the handle serves the version from the file
  // (bytes() maps it); the file stays once in place. A fetch that fails,
  // or a handle released or destroyed before the rename, leaves `path`
  // untouched, and the temporary file goes with the release.
  // Errors: as fetch(); kAlreadyExists (`path` exists and
  // !options.overwrite), kNotFound also when `path`'s directory does not
  // exist, kPermissionDenied (no right to create the file there),
  // kIoError (the file cannot be created, sized or mapped).
  Result<FetchHandle> fetch_to_file(const std::string& model, std::uint64_t version, const std::string& path,
                                    const FileOptions& options = {});
  // Fetches a selection (fetch_selection()'s) into a safetensors file at
  // `path`: the selected tensors at their slices' shapes, in the order and
  // layout of tensors(model, version, selection), each slice's global
  // shape and start in the header's "__metadata__" entry
  // "tensorhub.slices" (as `tensorhub publish --part` reads it). Created,
  // written, put in place and released as fetch_to_file's file. Errors:
  // as fetch_selection() and fetch_to_file().
  Result<FetchHandle> fetch_selection_to_file(const std::string& model, std::uint64_t version,
                                              std::span<const TensorSelection> selection, const std::string& path,
                                              const FileOptions& options = {});

  // Joins group `name` as `rank` of `size` (a Group: see there). Every
  // rank's peer gives the same name and size. Errors: kInvalidArgument (a
  // name that breaks the model-name rule or is longer than 64 bytes, a
  // size of 0 or above 1024, a rank not below the size), kAlreadyExists
  // (this peer is a rank of that group already), kResourceExhausted (this
  // peer is a rank of 4 groups already, or its gossip record would not
  // hold the claim).
  Result<Group> group(const std::string& name, std::uint32_t size, std::uint32_t rank);

  // Replaces the member list (PeerOptions::members; empty: anyone holding
  // the swarm key). Members no longer on it are forgotten at once and their
  // connections closed. Errors: kInvalidArgument (a list that does not name
  // this peer).
  Status set_members(std::vector<PublicKey> members);

  // How many peers other than this one hold `model` v`version`
  // (kLatestVersion: the head) completely: their gossip records say so and
  // each proved it by answering a challenge (PublishHandle::wait_replicated).
  // Errors: as version_info().
  Result<std::size_t> replicas(const std::string& model, std::uint64_t version) const;
  // The member table and transfers as JSON (what `tensorhub status` prints).
  std::string status_json() const;

 private:
  friend struct PeerAccess;
  struct Impl;
  explicit Peer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorhub
