// The manifest: the signed description of one version of a model.
//
// A version is one flat byte image (for a safetensors model, the whole file),
// described by a tensor table and cut into fixed-size shards, each with a hash.
// The manifest's canonical msgpack encoding, without the signature, is hashed
// with BLAKE2b-256: that hash is the manifest id. The publisher signs the id
// with Ed25519. A manifest names its parent's id, so versions form a hash chain.
//
// What each shard-hash mode promises:
//  - kXxh3_128 (default): XXH3-128 detects corruption, truncation, a wrong or
//    mixed version, and any accidental change with overwhelming probability.
//    It is not collision-resistant: a swarm member that crafts colliding data
//    on purpose could pass a forged shard. Use it when members are trusted to
//    be honest (the swarm key already keeps outsiders out).
//  - kBlake2b_256 ("secure mode"): a cryptographic hash; no member can forge a
//    shard that verifies. It costs about 25x the hashing CPU.
// The manifest itself is always protected by BLAKE2b-256 and Ed25519, so the
// shard table cannot be altered in either mode.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorhub/identity.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"
#include "tensorhub/tensor.hpp"
#include "tensorhub/tensor_slice.hpp"

namespace tensorhub {

enum class ShardHashAlgorithm : std::uint8_t {
  kXxh3_128 = 0,
  kBlake2b_256 = 1,
};
std::string_view shard_hash_name(ShardHashAlgorithm algorithm);  // "xxh3-128", "blake2b-256"
std::size_t shard_hash_size(ShardHashAlgorithm algorithm);       // 16 or 32

// A shard's hash; `size` bytes of `bytes` are used.
struct ShardDigest {
  std::array<std::uint8_t, 32> bytes{};
  std::uint8_t size = 0;
  std::span<const std::uint8_t> view() const { return {bytes.data(), size}; }
  std::string hex() const { return to_hex(view()); }
  friend bool operator==(const ShardDigest&, const ShardDigest&) = default;
};

// An image may be given as regions laid end to end (one per tensor, say),
// so that a version is published from, and fetched into, memory where it
// already lies. Offsets are into the regions' concatenation.
using ConstRegion = std::span<const std::byte>;
using MutableRegion = std::span<std::byte>;

// Hashes one shard's bytes.
ShardDigest compute_shard_digest(ShardHashAlgorithm algorithm, std::span<const std::byte> bytes);
// Hashes one shard given in pieces (its parts in each region it spans),
// without copying them together.
ShardDigest compute_shard_digest_of_pieces(ShardHashAlgorithm algorithm, std::span<const ConstRegion> pieces);

struct ShardEntry {
  std::uint64_t byte_offset = 0;
  std::uint64_t byte_length = 0;
  ShardDigest digest;
  friend bool operator==(const ShardEntry&, const ShardEntry&) = default;
};

// Limits. A decoder rejects anything beyond them before allocating for it.
inline constexpr std::uint64_t kMinShardSize = 64ull << 10;          // 64 KiB
inline constexpr std::uint64_t kMaxShardSize = 1ull << 30;           // 1 GiB
// A build's shard size of 0: chosen from the image's size (auto_shard_size).
inline constexpr std::uint64_t kAutoShardSize = 0;
inline constexpr std::uint64_t kMaxImageSize = 1ull << 52;           // 4 PiB
inline constexpr std::size_t kMaxShards = std::size_t{1} << 22;      // 4 Mi shards
inline constexpr std::size_t kMaxTensors = std::size_t{1} << 20;     // 1 Mi tensors
inline constexpr std::size_t kMaxModelNameBytes = 128;
inline constexpr std::size_t kMaxManifestBytes = std::size_t{256} << 20;  // 256 MiB

// Model names: 1..128 bytes of [A-Za-z0-9._/-], not starting with '/' or '.'.
// Errors: kInvalidArgument (the rule the name breaks).
Status validate_model_name(std::string_view name);

// A version published in parts (one per trainer rank): this manifest
// describes part `index` of `count`, its tensors or slices of them
// (TensorEntry::is_slice). Only a part's manifest holds slices.
struct PartOf {
  std::uint32_t index = 0;
  std::uint32_t count = 0;
  friend bool operator==(const PartOf&, const PartOf&) = default;
};
inline constexpr std::uint32_t kMaxParts = 65536;

// A view of the image for a selection declared when it was published: the
// image's bytes the selection takes, as an image of their own (the
// intersections of the image's tensors with the selected slices, dense and
// end to end in the image's order), cut into shards of the manifest's shard
// size. A fetcher of that selection computes the same view and key
// (manifest::part_view) and can fetch and verify exactly its bytes.
struct ViewEntry {
  ManifestId key;                    // BLAKE2b-256 of the view's tensor table
  std::uint64_t size = 0;            // bytes, at least 1 and at most the image's
  std::vector<ShardDigest> digests;  // one per shard of the view
  friend bool operator==(const ViewEntry&, const ViewEntry&) = default;
};
inline constexpr std::size_t kMaxViews = 64;

// What the publisher signs (through its id).
struct ManifestBody {
  std::string model;
  std::uint64_t version = 0;
  ManifestId parent;                 // all zero for a first version
  std::uint64_t created_unix_ms = 0;
  PublicKey publisher;
  ShardHashAlgorithm shard_hash = ShardHashAlgorithm::kXxh3_128;
  std::uint64_t shard_size = 0;
  std::uint64_t total_size = 0;
  std::vector<TensorEntry> tensors;  // sorted by byte_offset, non-overlapping
  std::vector<ShardEntry> shards;    // shard i covers [i*shard_size, min(total, (i+1)*shard_size))
  std::optional<PartOf> part;        // set: one part of a version published in parts
  std::vector<ViewEntry> views;      // sorted by key, unique; the digests together at most kMaxShards

  friend bool operator==(const ManifestBody&, const ManifestBody&) = default;
};

// An immutable, decoded, structurally valid manifest. Holding one says nothing
// about trust: call verify_manifest_signature() before believing it.
class Manifest {
 public:
  const ManifestBody& body() const { return body_; }
  const std::string& model() const { return body_.model; }
  std::uint64_t version() const { return body_.version; }
  const ManifestId& id() const { return id_; }
  const ManifestId& parent() const { return body_.parent; }
  const PublicKey& publisher() const { return body_.publisher; }
  const Signature& signature() const { return signature_; }
  std::uint64_t total_size() const { return body_.total_size; }
  std::uint64_t shard_size() const { return body_.shard_size; }
  std::size_t shard_count() const { return body_.shards.size(); }
  // REQUIRES: index.value < shard_count()
  const ShardEntry& shard(ShardIndex index) const { return body_.shards.at(index.value); }
  std::span<const TensorEntry> tensors() const { return body_.tensors; }
  // Set when this manifest is one part of a version published in parts.
  const std::optional<PartOf>& part() const { return body_.part; }
  // The views declared when it was published, by key; nullptr when none has it.
  std::span<const ViewEntry> views() const { return body_.views; }
  const ViewEntry* find_view(const ManifestId& key) const;

  // The complete signed encoding: what a .manifest file holds, byte for byte.
  std::span<const std::uint8_t> encoded() const { return encoded_; }

  // The tensors that overlap a shard, in offset order. O(log T + result).
  // REQUIRES: index.value < shard_count()
  std::vector<TensorIndex> tensors_in_shard(ShardIndex index) const;
  // "a, b, c and 4 more": for messages.
  // REQUIRES: index.value < shard_count()
  std::string describe_tensors_in_shard(ShardIndex index, std::size_t max_names = 3) const;

 private:
  friend struct ManifestAccess;
  ManifestBody body_;
  ManifestId id_;
  Signature signature_;
  std::vector<std::uint8_t> encoded_;
};

struct ManifestBuildOptions {
  std::string model;
  std::uint64_t version = 0;
  ManifestId parent;  // zero for a first version
  std::uint64_t created_unix_ms = 0;
  std::uint64_t shard_size = kAutoShardSize;  // or a power of two in [64 KiB, 1 GiB]
  ShardHashAlgorithm shard_hash = ShardHashAlgorithm::kXxh3_128;
  unsigned threads = 0;  // threads that hash shards; 0 means one per core
  std::optional<PartOf> part;  // set: the manifest of one part (its tensors may be slices)
  // Declared selections (Peer::fetch_selection's form): the view of the
  // image each takes is hashed into the manifest (ViewEntry), unless it
  // takes nothing of the image. Tensors a selection names that the image
  // does not hold are another part's, and ignored.
  std::vector<std::vector<TensorSelection>> views;
};

// The shard size a build chooses when it is given none: the largest power
// of two that cuts `image_size` into at least 2,048 shards, within [128 KiB,
// 256 MiB] (256 MiB: 128 KiB; 1 GiB: 512 KiB; 2 GiB: 1 MiB; 14 GB: 4 MiB;
// 128 GiB: 64 MiB; 512 GiB and up: 256 MiB). A holder serves a shard only
// once it has all of it and has verified it, so every relay waits one
// shard's transfer at its share of a link, and the swarm's distance from the
// bound grows with the shard's fraction of the version. Below 128 KiB the
// messages per byte cost more than the relay saves; above 256 MiB a shard's
// verification and first relay take too long.
std::uint64_t auto_shard_size(std::uint64_t image_size);

// Builds and signs the manifest of `image`, described by `tensors` (any order;
// the manifest keeps them sorted by offset).
// Errors: kInvalidArgument (a bad model name, a nonzero parent for version 0, a
// shard size that is not a power of two in [64 KiB, 1 GiB], an empty or
// oversized image, more than kMaxShards shards or kMaxTensors tensors, a
// table validate_tensor_table refuses, a part whose index is not below its
// count or whose count is 0 or above kMaxParts, a slice of a tensor outside
// a part's manifest, a declared view that names a tensor twice or a slice
// that does not fit the tensor, more than kMaxViews views or kMaxShards of
// their shards), kIoError (the image could not be read: a mapped file
// truncated while it is hashed).
Result<Manifest> build_manifest(const ManifestBuildOptions& options, std::span<const std::byte> image,
                                std::vector<TensorEntry> tensors, const Identity& publisher);
// The same for an image given as regions (none empty); shards may span them.
// Errors: as above; kInvalidArgument also for an empty region.
Result<Manifest> build_manifest(const ManifestBuildOptions& options, std::span<const ConstRegion> regions,
                                std::vector<TensorEntry> tensors, const Identity& publisher);

// The body build_manifest() would sign, with every shard's digest left
// zero: for a build whose digests are computed elsewhere (a GPU), then
// signed with sign_manifest(). Errors: as build_manifest(), but no kIoError;
// kInvalidArgument for declared views (only build_manifest hashes them).
Result<ManifestBody> manifest_shape(const ManifestBuildOptions& options, std::uint64_t image_size,
                                    std::vector<TensorEntry> tensors, const PublicKey& publisher);
// Signs a body whose shard digests were computed elsewhere (another hasher,
// a GPU). Errors: kInvalidArgument (the body breaks any rule decode_manifest
// checks, or names another publisher than `publisher`).
Result<Manifest> sign_manifest(ManifestBody body, const Identity& publisher);

// Strictly decodes a .manifest encoding: exact structure, canonical encodings
// only, no trailing bytes, every limit above, shards that tile the image
// exactly, tensors in bounds and non-overlapping.
// Errors: kCorrupt (the first rule the bytes break: one line that, for
// malformed bytes, names the byte offset).
Result<Manifest> decode_manifest(std::span<const std::uint8_t> encoded);

// Checks that the manifest is signed by one of `trusted` publishers.
// Errors: kVerifyFailed (its publisher is not in `trusted`, or the signature
// does not verify).
Status verify_manifest_signature(const Manifest& manifest, std::span<const PublicKey> trusted);

// Checks that `child` extends `parent`: same model, child names parent's id,
// and a larger version number.
// Errors: kVerifyFailed (the first of these that fails).
Status verify_manifest_chain(const Manifest& parent, const Manifest& child);

// Checks one shard's bytes against the shard table.
bool verify_shard(const Manifest& manifest, ShardIndex index, std::span<const std::byte> bytes);

// Checks a whole image against the shard table, hashing on `threads` threads
// (0: one per core).
// Errors: kVerifyFailed (a size other than total_size(), or a shard whose
// hash differs: the message names the first and its tensors).
Status verify_image(const Manifest& manifest, std::span<const std::byte> image, unsigned threads = 0);

// Which shards of `to` differ from `from`. When both have the same shard size
// and hash algorithm, an unchanged hash at the same index means unchanged
// bytes, which need no transfer. Otherwise every shard of `to` counts as
// changed (`comparable` is false).
struct ManifestDiff {
  bool comparable = false;
  std::vector<ShardIndex> changed;
  std::uint64_t changed_bytes = 0;
};
ManifestDiff diff_manifests(const Manifest& from, const Manifest& to);

// Reads a .manifest file.
// Errors: kNotFound (no such file), kPermissionDenied (no right to read it),
// kInvalidArgument (not a regular file, or larger than kMaxManifestBytes),
// kIoError (it cannot be opened or read otherwise), kCorrupt (as
// decode_manifest; the message starts with `path`).
Result<Manifest> read_manifest_file(const std::string& path);
// Writes manifest.encoded() to `path` atomically (a temporary file beside
// it, synced, then renamed), mode 0644, replacing any file there.
// Errors: kNotFound (`path`'s directory does not exist), kPermissionDenied
// (no right to create the file there), kIoError (the write, sync or rename
// fails otherwise).
Status write_manifest_file(const Manifest& manifest, const std::string& path);

}  // namespace tensorhub
