// The swarm protocol's messages between neighbours, as they travel inside
// the data plane's sealed frames.
//
// Each is a canonical msgpack array [type, manifest id (32), ...fields]. A
// kPiece header is followed on the connection by `length` raw payload bytes,
// outside any frame, so the payload can go from registered memory to the
// destination without a copy. Decoding is strict and bounded like every
// decoder here: a bitfield may describe at most kMaxShards shards, and a
// manifest at most kMaxManifestBytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "swarm/request_ids.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::swarm {

enum class MessageType : std::uint8_t {
  kBitfield = 1,       // bits (the sender's held shards of the version)
  kHave = 2,           // shard
  kInterested = 3,     // the sender wants blocks of the version; bits: what it holds already
  kNotInterested = 4,
  kChoke = 5,          // the sender will not serve requests now
  kUnchoke = 6,
  kRequest = 7,        // request id, shard, block, offset, length
  kCancel = 8,         // request id
  kPiece = 9,          // request id, length; payload follows
  kRefuse = 10,        // request id, reason
  kGetManifest = 11,
  kManifest = 12,      // manifest bytes
  kNoManifest = 13,
  kSuperSeed = 14,     // the sender holds every shard and reveals them a few at a time (HAVE)
  kDeferred = 15,      // request id: a mate in the requester's datacenter brings this shard across; get it there
  kPeers = 16,         // bytes: up to kMaxPeersListed peer ids (32 bytes each) that fetch the version too
  kFetching = 17,      // shard: the sender (a host mate) brings it across its NIC; leave it to the sender
  kNotFetching = 18,   // shard: the sender's kFetching is withdrawn (it has nobody to bring it from now)
  kUnknownVersion = 19,  // answers kInterested: the sender neither serves nor fetches the version
  kChallenge = 20,     // bytes: a proof-of-possession challenge (peer/possession_proofs.hpp)
  kProof = 21,         // bytes: the answer, a BLAKE2b-256 digest
  kTransport = 22,     // bytes: a data transport's own message (rdma/rdma_wire.hpp); the swarm never sees it
  kSeal = 23,          // seal bytes: answers kGetManifest for a version published in parts
  kGroup = 24,         // bytes: a group rank's state (peer/group_state.hpp), to the group's other ranks
  kInterestedInSelection = 25,  // as kInterested, from a fetcher of a selection: a super-seed shows it every shard
  kServeView = 26,     // bytes: a part's id, then the encoding of its view's tensor table: serve that view (its id)
  kViewServed = 27,    // answers kServeView: the sender serves the view now
};
inline constexpr std::uint8_t kLastMessageType = 27;

std::string_view message_type_name(MessageType type);

struct SwarmMessage {
  MessageType type = MessageType::kHave;
  ManifestId version_id;  // the version, by its manifest id
  RequestId request_id;
  ShardIndex shard;
  BlockIndex block;
  std::uint64_t offset = 0;
  std::uint32_t length = 0;
  std::uint32_t shard_count = 0;       // kBitfield, kInterested: how many bits
  std::vector<std::uint8_t> bytes;     // kBitfield/kInterested bits (wire form), kManifest encoding, kRefuse reason, kPeers ids

  // One constructor per shape; each sets the fields its type carries.
  // A type that carries nothing but the version: not-interested, choke,
  // unchoke, get-manifest, no-manifest, super-seed, unknown-version.
  static SwarmMessage signal(MessageType type, const ManifestId& version_id);
  // have, fetching, not-fetching.
  static SwarmMessage about_shard(MessageType type, const ManifestId& version_id, ShardIndex shard);
  // bitfield, interested: `bits` in wire form, `shard_count` of them.
  static SwarmMessage with_bits(MessageType type, const ManifestId& version_id, std::uint32_t shard_count,
                                std::vector<std::uint8_t> bits);
  static SwarmMessage request(const ManifestId& version_id, RequestId request_id, ShardIndex shard, BlockIndex block,
                              std::uint64_t offset, std::uint32_t length);
  // cancel, deferred.
  static SwarmMessage about_request(MessageType type, const ManifestId& version_id, RequestId request_id);
  static SwarmMessage piece(const ManifestId& version_id, RequestId request_id, std::uint32_t length);
  static SwarmMessage refuse(const ManifestId& version_id, RequestId request_id, std::vector<std::uint8_t> reason);
  // manifest (its encoding), peers (their ids), challenge, proof, transport.
  static SwarmMessage with_bytes(MessageType type, const ManifestId& version_id, std::vector<std::uint8_t> bytes);
};

inline constexpr std::uint32_t kMaxBlockBytes = 64u << 20;
inline constexpr std::size_t kMaxPeersListed = 16;
inline constexpr std::size_t kMaxTransportBytes = 1u << 20;
// The most bytes a kGroup message carries.
inline constexpr std::size_t kMaxGroupBytes = 4096;
// The most bytes a kServeView message carries: a part's id and a view's
// tensor table (about 80 bytes a tensor).
inline constexpr std::size_t kMaxServeViewBytes = std::size_t{4} << 20;

std::vector<std::uint8_t> encode_swarm_message(const SwarmMessage& message);
// Appends the encoding to `out` (whose capacity a caller may reuse).
void encode_swarm_message(const SwarmMessage& message, std::vector<std::uint8_t>& out);
Result<SwarmMessage> decode_swarm_message(std::span<const std::uint8_t> bytes);

}  // namespace tensorhub::swarm
