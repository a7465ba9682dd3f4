// The signed record each peer owns and gossips about itself.
//
// Only the owner signs its record; relays forward the exact signed bytes, so
// a relayed record cannot be forged. (incarnation, seq) orders a peer's
// records: a higher pair replaces a lower one, and the record is how a peer
// says "I am alive at this incarnation".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/bitfield.hpp"
#include "core/location.hpp"
#include "tensorhub/identity.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::gossip {

using Topology = tensorhub::Location;

// A head this peer knows: the newest version of a model with a valid chain.
struct HeadEntry {
  std::string model;
  std::uint64_t version = 0;
  ManifestId manifest_id;
  friend bool operator==(const HeadEntry&, const HeadEntry&) = default;
};

// A version this peer holds (progress 1000) or is fetching (coarse progress).
//
// Or, when `parts` is not empty, a part set: the compact form of what a
// peer holds of a version in parts, one entry however many parts. Then
// `manifest_id` is the seal's id (the version's), and the entry holds the
// parts whose bit is set in `parts` (held or being fetched), whole when
// `selection` is none, or else their views of the selection whose key
// `selection` is (manifest::selection_key): a reader fetching that
// selection knows which view of each part that is. `complete` is the
// subset held complete and verified, and progress is 1000 exactly when it
// is all of them.
struct HoldingEntry {
  HoldingEntry() = default;
  HoldingEntry(std::string model_name, std::uint64_t version_number, const ManifestId& id, std::uint16_t permille = 0)
      : model(std::move(model_name)), version(version_number), manifest_id(id), progress_permille(permille) {}

  std::string model;
  std::uint64_t version = 0;
  ManifestId manifest_id;
  std::uint16_t progress_permille = 0;  // 0..1000; 1000 = complete and verified
  std::optional<ManifestId> selection;  // a part set's selection; none: its parts whole
  core::Bitfield parts;                 // a part set's parts (one bit a part); empty: a plain holding
  core::Bitfield complete_parts;        // of the same size: those complete
  bool complete() const { return progress_permille >= 1000; }
  bool is_part_set() const { return parts.size() != 0; }
  friend bool operator==(const HoldingEntry&, const HoldingEntry&) = default;
};

// What orders and identifies a record's holdings: a peer holds a version
// (or a part) once, and a version in parts once whole and once per
// selection.
struct HoldingKey {
  HoldingKey() = default;
  HoldingKey(std::string model_name, std::uint64_t version_number, const ManifestId& id,
             std::optional<ManifestId> selection_key = std::nullopt)
      : model(std::move(model_name)), version(version_number), manifest_id(id), selection(selection_key) {}

  std::string model;
  std::uint64_t version = 0;
  ManifestId manifest_id;
  std::optional<ManifestId> selection;
  friend auto operator<=>(const HoldingKey&, const HoldingKey&) = default;
};
inline HoldingKey key_of(const HoldingEntry& h) { return {h.model, h.version, h.manifest_id, h.selection}; }

// A model-parallel group this peer is a rank of (peer/group_book.hpp): the
// group's ranks find each other by these claims and then talk directly.
struct GroupEntry {
  std::string name;       // the model-name rule, at most kMaxGroupNameBytes
  std::uint32_t size = 0;  // 1..kMaxGroupSize
  std::uint32_t rank = 0;  // < size
  friend bool operator==(const GroupEntry&, const GroupEntry&) = default;
};

struct PeerRecord {
  PeerId id;
  std::uint64_t incarnation = 0;
  std::uint64_t seq = 0;
  // Random per process start: the boot id in the nonces of this life's
  // datagrams. Signed here, so a receiver believes a new boot only from a
  // record, never from a datagram that merely carries it.
  std::uint64_t boot = 0;
  std::string gossip_addr;  // host:port, UDP and TCP
  std::string data_addr;    // host:port of the data plane, may be empty
  Topology topology;
  bool leaving = false;     // a graceful leave: final for this incarnation
  std::vector<HeadEntry> heads;        // sorted by model, unique models
  std::vector<HoldingEntry> holdings;  // sorted by key_of, unique (a version in parts: a part set, or one per part)
  std::vector<GroupEntry> groups;      // sorted by name, unique names
  friend bool operator==(const PeerRecord&, const PeerRecord&) = default;
};

// Limits that keep every record inside one gossip datagram.
inline constexpr std::size_t kMaxRecordBytes = 1100;
inline constexpr std::size_t kMaxRecordAddrBytes = 96;
inline constexpr std::size_t kMaxTopologyLabelBytes = 64;
inline constexpr std::size_t kMaxRecordHeads = 16;
inline constexpr std::size_t kMaxRecordHoldings = 16;
inline constexpr std::size_t kMaxRecordGroups = 4;
inline constexpr std::size_t kMaxGroupNameBytes = 64;
inline constexpr std::uint32_t kMaxGroupSize = 1024;
// A part set names at most this many parts: its two bitmaps take 128
// bytes each. A version in more parts is held as plain holdings, a part each.
inline constexpr std::uint32_t kMaxPartSetParts = 1024;

// An immutable record with its signed encoding. Shared: relays, queues and
// member tables hold the same object.
struct SignedRecord {
  PeerRecord record;
  std::vector<std::uint8_t> encoded;  // [body, signature]: what travels
  Signature signature;
};
using RecordPtr = std::shared_ptr<const SignedRecord>;

// The rules every record keeps, checked when it is signed and when it is
// decoded: addresses are IP:port (a record never costs a name lookup),
// topology labels printable ASCII, model names by the model-name rule,
// entries sorted and bounded. Returns kInvalidArgument naming the first
// broken rule.
Status validate_record(const PeerRecord& record);

// The size of `record`'s signed encoding, and what one entry adds to it
// (besides its list's header: one byte up to 15 entries, three from 16).
std::size_t signed_record_bytes(const PeerRecord& record);
std::size_t encoded_entry_bytes(const HeadEntry& head);
std::size_t encoded_entry_bytes(const HoldingEntry& holding);

// Encodes and signs. Fails when the record breaks a limit (too large for a
// datagram, unsorted entries, bad labels) or is not `identity`'s.
Result<RecordPtr> sign_record(const PeerRecord& record, const Identity& identity);

// Strictly decodes (canonical, bounded) and verifies the owner's signature.
Result<RecordPtr> decode_record(std::span<const std::uint8_t> encoded);

// Decoding and signature checks are the expensive part of receiving gossip.
// A RecordDecoder may share work between many cores in one process (the
// deterministic tests and the simulator run thousands): the default one
// decodes and verifies every time.
class RecordDecoder {
 public:
  virtual ~RecordDecoder() = default;
  virtual Result<RecordPtr> decode(std::span<const std::uint8_t> encoded) = 0;
};
std::shared_ptr<RecordDecoder> default_record_decoder();

}  // namespace tensorhub::gossip
