// The gossip wire format: sealed datagrams and sealed stream frames.
//
// Every message is sealed with XChaCha20-Poly1305 under a key derived from the
// swarm key. Layout:
//   magic (4: "THg2" datagram | "THs2" stream frame)
//   nonce (24): boot id (8, BE) || counter (8, BE) || sender id prefix (8)
//   ciphertext || tag (16)
//   datagrams only: sender tag (16), BLAKE2b-128 of all the above under the
//   pairwise key of sender and receiver (pair_keys.hpp)
// The nonce is unique per (sender, boot, counter), so it never repeats under
// the key; the receiver reads boot and counter from it for replay checks.
// Datagram and stream counters are separate spaces (the top bit of the
// counter tells them apart).
//
// Plaintexts are canonical msgpack:
//   datagram: [sender(32), kind, probe_seq, target(0|32), target_addr, items]
//   stream:   [sender(32), kind, body]
//   item:     [1, record bytes]
//           | [2, liveness, target(32), incarnation, from(32), signature(64)]
// A liveness claim is signed by its accuser (`from`), so it can be relayed
// by anyone and forged by nobody.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/aead.hpp"
#include "gossip/pair_keys.hpp"
#include "gossip/peer_record.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::gossip {

inline constexpr std::size_t kSealOverhead = 4 + core::kAeadNonceBytes + core::kAeadTagBytes;
inline constexpr std::size_t kDatagramOverhead = kSealOverhead + kSenderTagBytes;

enum class PacketKind : std::uint8_t { kPing = 1, kAck = 2, kPingReq = 3, kNack = 4, kGossip = 5 };
enum class StreamKind : std::uint8_t {
  kSyncRequest = 1,
  kSyncResponse = 2,
  kSyncRecords = 3,
  kProbe = 4,     // a ping over TCP, when the UDP probe went unanswered
  kProbeAck = 5,
};

// A member's liveness as this peer believes it.
enum class Liveness : std::uint8_t { kAlive = 0, kSuspect = 1, kDead = 2, kLeft = 3 };
std::string_view liveness_name(Liveness l);

// "target is suspect/dead at incarnation, says from", signed by from. (Alive
// and left travel as signed records.)
struct LivenessItem {
  Liveness state = Liveness::kSuspect;
  PeerId target;
  std::uint64_t incarnation = 0;
  PeerId from;
  Signature signature;
  friend bool operator==(const LivenessItem&, const LivenessItem&) = default;
};

// A claim by `accuser`, signed with its key.
LivenessItem sign_liveness(const Identity& accuser, Liveness state, const PeerId& target, std::uint64_t incarnation);
// True when item.signature is item.from's signature of the claim.
bool verify_liveness(const LivenessItem& item);

// Outgoing items hold the record; incoming ones hold its bytes, decoded and
// verified only if they turn out to be news.
struct RecordBytes {
  std::vector<std::uint8_t> bytes;
};
using OutgoingItem = std::variant<RecordPtr, LivenessItem>;
using IncomingItem = std::variant<RecordBytes, LivenessItem>;

std::size_t encoded_item_size(const OutgoingItem& item);

struct Packet {
  PeerId sender;
  PacketKind kind = PacketKind::kGossip;
  std::uint32_t probe_seq = 0;
  std::optional<PeerId> target;
  std::string target_addr;
};

// One entry of a push-pull digest: what the sender knows about one member.
struct DigestEntry {
  PeerId id;
  std::uint64_t record_incarnation = 0;
  std::uint64_t record_seq = 0;
  Liveness liveness = Liveness::kAlive;
  std::uint64_t liveness_incarnation = 0;
};

struct SyncRequest {
  std::vector<DigestEntry> digest;
};
struct SyncResponse {
  std::vector<IncomingItem> items;  // what the requester lacked
  std::vector<PeerId> wants;        // what the responder lacks
};
struct SyncRecords {
  std::vector<IncomingItem> items;
};
struct StreamProbe {
  std::uint32_t seq = 0;
  bool ack = false;
};
using StreamBody = std::variant<SyncRequest, SyncResponse, SyncRecords, StreamProbe>;

// Peeks (id, incarnation, seq) from a record's bytes without verifying it.
struct RecordVersion {
  PeerId id;
  std::uint64_t incarnation = 0;
  std::uint64_t seq = 0;
  std::uint64_t boot = 0;
};
std::optional<RecordVersion> peek_record_version(std::span<const std::uint8_t> encoded);

// Seals messages for one sender; owns the counters that make nonces unique.
class Sealer {
 public:
  Sealer(const core::AeadKey& key, const PeerId& sender, std::uint64_t boot_id);

  // A datagram for the peer that shares `pair_key` with the sender.
  std::vector<std::uint8_t> seal_packet(const PairKey& pair_key, const Packet& packet,
                                        std::span<const OutgoingItem> items);
  std::vector<std::uint8_t> seal_stream(StreamKind kind, std::span<const std::uint8_t> body);

  const PeerId& sender() const { return sender_; }
  std::uint64_t boot_id() const { return boot_id_; }

 private:
  std::vector<std::uint8_t> seal(bool stream, std::span<const std::uint8_t> plaintext);
  core::AeadKey key_;
  PeerId sender_;
  std::uint64_t boot_id_;
  std::uint64_t datagram_counter_ = 0;
  std::uint64_t stream_counter_ = 0;
};

// What opening a sealed message yields.
struct Opened {
  PeerId sender;
  std::uint64_t boot_id = 0;
  std::uint64_t counter = 0;
  std::vector<std::uint8_t> plaintext;
};

enum class OpenError { kNone, kTooShort, kBadMagic, kAuthFailed, kMalformed };
// Authenticates and decrypts a stream frame, or a datagram without its sender
// tag. Anything without the swarm key fails here.
OpenError open_sealed(const core::AeadKey& key, bool stream, std::span<const std::uint8_t> sealed, Opened& out);
// Opens a datagram (open_sealed on all but its sender tag). The sender it
// names is not proved until datagram_sender_proved() holds.
OpenError open_datagram(const core::AeadKey& key, std::span<const std::uint8_t> datagram, Opened& out);
// True when the datagram's sender tag is right under `pair_key` (the key of
// the sender it names and this receiver). REQUIRES: open_datagram succeeded.
bool datagram_sender_proved(const PairKey& pair_key, std::span<const std::uint8_t> datagram);

// Decodes an opened datagram's plaintext (strict; bounded by the datagram).
Status decode_packet(std::span<const std::uint8_t> plaintext, Packet& packet, std::vector<IncomingItem>& items);
// Decodes an opened stream frame's plaintext; max_entries bounds digests and lists.
Status decode_stream(std::span<const std::uint8_t> plaintext, PeerId& sender, StreamBody& body,
                     std::size_t max_entries);

// Stream bodies, encoded for Sealer::seal_stream.
std::vector<std::uint8_t> encode_sync_request(std::span<const DigestEntry> digest);
std::vector<std::uint8_t> encode_sync_response(std::span<const OutgoingItem> items, std::span<const PeerId> wants);
std::vector<std::uint8_t> encode_sync_records(std::span<const OutgoingItem> items);
std::vector<std::uint8_t> encode_stream_probe(std::uint32_t seq);

}  // namespace tensorhub::gossip
