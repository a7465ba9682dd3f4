// What two peers say to each other to move blocks by RDMA READ, inside
// their authenticated data connection (never in gossip):
//
//   kOffer     this side's queue pairs for the neighbour: per NIC its GID,
//              active MTU and read depths; per queue pair its number and
//              starting PSN. Each side offers when the link opens; each
//              connects its queue pairs to the other's, pairwise.
//   kReady     this side's queue pairs are connected (RTS): the other may
//              READ through them.
//   kAskGrant  where are the bytes of `version` (the fetcher wants to READ them).
//   kGrant     the version's regions: image offset, address, length, and
//              an rkey per offered NIC. Registered REMOTE_READ only.
//   kNoGrant   the holder does not grant it (not held here, not in host
//              memory, or RDMA is off): use TCP.
//   kRevoke    the version's grant ends (released): READs after this fail.
//
// Each message is a canonical msgpack array [kind, ...fields]; decoding is
// strict and bounded like every decoder here.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::rdma {

inline constexpr std::size_t kMaxOfferedNics = 16;
inline constexpr std::size_t kMaxOfferedQueuePairs = 64;
inline constexpr std::size_t kMaxGrantRegions = 4096;

enum class RdmaMessageKind : std::uint8_t {
  kOffer = 1,
  kReady = 2,
  kAskGrant = 3,
  kGrant = 4,
  kNoGrant = 5,
  kRevoke = 6,
};

struct OfferedNic {
  std::array<std::uint8_t, 16> gid{};
  std::uint8_t mtu = 0;              // ibv_mtu: 1 (256) to 5 (4096)
  std::uint8_t responder_depth = 0;  // READs it answers at once per queue pair (max_qp_rd_atom)
  std::uint8_t requester_depth = 0;  // READs it issues at once per queue pair (max_qp_init_rd_atom)
};

struct OfferedQueuePair {
  std::uint8_t nic = 0;    // index into the offer's nics
  std::uint32_t qpn = 0;   // 24 bits
  std::uint32_t psn = 0;   // 24 bits
};

struct GrantRegion {
  std::uint64_t offset = 0;  // in the version's image
  std::uint64_t addr = 0;    // where it lies in the holder's address space
  std::uint64_t length = 0;
  std::vector<std::uint32_t> rkeys;  // one per offered NIC, in the offer's order
};

struct RdmaMessage {
  RdmaMessageKind kind = RdmaMessageKind::kReady;
  std::vector<OfferedNic> nics;            // kOffer
  std::vector<OfferedQueuePair> queue_pairs;  // kOffer
  ManifestId version_id;                   // kAskGrant, kGrant, kNoGrant, kRevoke
  std::vector<GrantRegion> regions;        // kGrant: by offset, not overlapping

  static RdmaMessage offer(std::vector<OfferedNic> nics, std::vector<OfferedQueuePair> queue_pairs);
  static RdmaMessage ready();
  static RdmaMessage about(RdmaMessageKind kind, const ManifestId& version_id);
  static RdmaMessage grant(const ManifestId& version_id, std::vector<GrantRegion> regions);
};

std::vector<std::uint8_t> encode_rdma_message(const RdmaMessage& message);
// Errors: kCorrupt, naming the field and why.
Result<RdmaMessage> decode_rdma_message(std::span<const std::uint8_t> bytes);

}  // namespace tensorhub::rdma
