#include "swarm/swarm_messages.hpp"

#include "core/msgpack_reader.hpp"
#include "core/msgpack_writer.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/seal.hpp"

namespace tensorhub::swarm {

SwarmMessage SwarmMessage::signal(MessageType type, const ManifestId& version_id) {
  SwarmMessage m;
  m.type = type;
  m.version_id = version_id;
  return m;
}

SwarmMessage SwarmMessage::about_shard(MessageType type, const ManifestId& version_id, ShardIndex shard) {
  SwarmMessage m = signal(type, version_id);
  m.shard = shard;
  return m;
}

SwarmMessage SwarmMessage::with_bits(MessageType type, const ManifestId& version_id, std::uint32_t shard_count,
                                     std::vector<std::uint8_t> bits) {
  SwarmMessage m = signal(type, version_id);
  m.shard_count = shard_count;
  m.bytes = std::move(bits);
  return m;
}

SwarmMessage SwarmMessage::request(const ManifestId& version_id, RequestId request_id, ShardIndex shard,
                                   BlockIndex block, std::uint64_t offset, std::uint32_t length) {
  SwarmMessage m = signal(MessageType::kRequest, version_id);
  m.request_id = request_id;
  m.shard = shard;
  m.block = block;
  m.offset = offset;
  m.length = length;
  return m;
}

SwarmMessage SwarmMessage::about_request(MessageType type, const ManifestId& version_id, RequestId request_id) {
  SwarmMessage m = signal(type, version_id);
  m.request_id = request_id;
  return m;
}

SwarmMessage SwarmMessage::piece(const ManifestId& version_id, RequestId request_id, std::uint32_t length) {
  SwarmMessage m = about_request(MessageType::kPiece, version_id, request_id);
  m.length = length;
  return m;
}

SwarmMessage SwarmMessage::refuse(const ManifestId& version_id, RequestId request_id, std::vector<std::uint8_t> reason) {
  SwarmMessage m = about_request(MessageType::kRefuse, version_id, request_id);
  m.bytes = std::move(reason);
  return m;
}

SwarmMessage SwarmMessage::with_bytes(MessageType type, const ManifestId& version_id, std::vector<std::uint8_t> bytes) {
  SwarmMessage m = signal(type, version_id);
  m.bytes = std::move(bytes);
  return m;
}

std::string_view message_type_name(MessageType type) {
  switch (type) {
    case MessageType::kBitfield: return "bitfield";
    case MessageType::kHave: return "have";
    case MessageType::kInterested: return "interested";
    case MessageType::kInterestedInSelection: return "interested-in-selection";
    case MessageType::kNotInterested: return "not-interested";
    case MessageType::kChoke: return "choke";
    case MessageType::kUnchoke: return "unchoke";
    case MessageType::kRequest: return "request";
    case MessageType::kCancel: return "cancel";
    case MessageType::kPiece: return "piece";
    case MessageType::kRefuse: return "refuse";
    case MessageType::kGetManifest: return "get-manifest";
    case MessageType::kManifest: return "manifest";
    case MessageType::kNoManifest: return "no-manifest";
    case MessageType::kUnknownVersion: return "unknown-version";
    case MessageType::kSuperSeed: return "super-seed";
    case MessageType::kDeferred: return "deferred";
    case MessageType::kPeers: return "peers";
    case MessageType::kChallenge: return "challenge";
    case MessageType::kProof: return "proof";
    case MessageType::kTransport: return "transport";
    case MessageType::kSeal: return "seal";
    case MessageType::kGroup: return "group";
    case MessageType::kFetching: return "fetching";
    case MessageType::kNotFetching: return "not-fetching";
    case MessageType::kServeView: return "serve-view";
    case MessageType::kViewServed: return "view-served";
  }
  return "unknown";
}

std::vector<std::uint8_t> encode_swarm_message(const SwarmMessage& message) {
  std::vector<std::uint8_t> out;
  encode_swarm_message(message, out);
  return out;
}

void encode_swarm_message(const SwarmMessage& m, std::vector<std::uint8_t>& out) {
  // The largest fixed part (a request: 7 fields, 32-byte id) is under 80 bytes.
  out.reserve(out.size() + 80 + m.bytes.size());
  core::MsgpackWriter w(out);
  // Every message opens [type, version, ...]; `fields` counts those two.
  auto open = [&](std::uint32_t fields) {
    w.write_array_header(fields);
    w.write_uint(static_cast<std::uint8_t>(m.type));
    w.write_bin(m.version_id.bytes);
  };
  switch (m.type) {
    case MessageType::kBitfield:
    case MessageType::kInterested:
    case MessageType::kInterestedInSelection:
      open(4);
      w.write_uint(m.shard_count);
      w.write_bin(m.bytes);
      break;
    case MessageType::kPeers:
    case MessageType::kChallenge:
    case MessageType::kProof:
    case MessageType::kTransport:
    case MessageType::kSeal:
    case MessageType::kGroup:
    case MessageType::kServeView:
      open(3);
      w.write_bin(m.bytes);
      break;
    case MessageType::kHave:
    case MessageType::kFetching:
    case MessageType::kNotFetching:
      open(3);
      w.write_uint(m.shard.value);
      break;
    case MessageType::kRequest:
      open(7);
      w.write_uint(m.request_id.value);
      w.write_uint(m.shard.value);
      w.write_uint(m.block.value);
      w.write_uint(m.offset);
      w.write_uint(m.length);
      break;
    case MessageType::kCancel:
    case MessageType::kDeferred:
      open(3);
      w.write_uint(m.request_id.value);
      break;
    case MessageType::kPiece:
      open(4);
      w.write_uint(m.request_id.value);
      w.write_uint(m.length);
      break;
    case MessageType::kRefuse:
    case MessageType::kManifest:
      open(4);
      w.write_uint(m.request_id.value);
      w.write_bin(m.bytes);
      break;
    default:  // not-interested, choke, unchoke, get-manifest, no-manifest, super-seed, unknown-version, view-served
      open(2);
      break;
  }
}

Result<SwarmMessage> decode_swarm_message(std::span<const std::uint8_t> bytes) {
  core::MsgpackReader r(bytes);
  SwarmMessage m;
  std::uint32_t fields = 0;
  std::uint64_t type = 0;
  r.read_array_header("data message", fields, 7);
  if (r.read_uint("type", type) && (type < 1 || type > kLastMessageType)) r.fail("type", "unknown data message type " + std::to_string(type));
  m.type = static_cast<MessageType>(type);
  r.read_bin_exact("version", m.version_id.bytes);
  if (!r.ok()) return r.status();
  auto expect_fields = [&](std::uint32_t n) {
    if (fields != n) r.fail("data message", std::string(message_type_name(m.type)) + " takes " + std::to_string(n) + " fields, not " + std::to_string(fields));
  };
  std::uint64_t v = 0;
  std::span<const std::uint8_t> blob;
  switch (m.type) {
    case MessageType::kBitfield:
    case MessageType::kInterested:
    case MessageType::kInterestedInSelection:
      expect_fields(4);
      if (r.read_uint("shard count", v, kMaxShards)) m.shard_count = static_cast<std::uint32_t>(v);
      if (r.read_bin("bitfield", blob, (kMaxShards + 7) / 8)) {
        if (blob.size() != (std::uint64_t{m.shard_count} + 7) / 8) r.fail("bitfield", "length does not match the shard count");
        m.bytes.assign(blob.begin(), blob.end());
      }
      break;
    case MessageType::kPeers:
      expect_fields(3);
      if (r.read_bin("peers", blob, kMaxPeersListed * PeerId::kSize)) {
        if (blob.size() % PeerId::kSize != 0) r.fail("peers", "length is not a whole number of peer ids");
        m.bytes.assign(blob.begin(), blob.end());
      }
      break;
    case MessageType::kChallenge:
    case MessageType::kProof:
      // A nonce and 1 to 4 ranges of 12 bytes; a 32-byte digest.
      expect_fields(3);
      if (r.read_bin(m.type == MessageType::kChallenge ? "challenge" : "proof", blob, 64)) {
        if (m.type == MessageType::kProof ? blob.size() != 32 : (blob.size() < 28 || (blob.size() - 16) % 12 != 0)) {
          r.fail(m.type == MessageType::kChallenge ? "challenge" : "proof", "wrong length");
        }
        m.bytes.assign(blob.begin(), blob.end());
      }
      break;
    case MessageType::kTransport:
      expect_fields(3);
      if (r.read_bin("transport message", blob, kMaxTransportBytes)) m.bytes.assign(blob.begin(), blob.end());
      break;
    case MessageType::kSeal:
      expect_fields(3);
      if (r.read_bin("seal", blob, kMaxSealBytes)) m.bytes.assign(blob.begin(), blob.end());
      break;
    case MessageType::kGroup:
      expect_fields(3);
      if (r.read_bin("group state", blob, kMaxGroupBytes)) m.bytes.assign(blob.begin(), blob.end());
      break;
    case MessageType::kServeView:
      expect_fields(3);
      if (r.read_bin("serve view", blob, kMaxServeViewBytes)) {
        if (blob.size() <= sizeof(ManifestId::bytes)) r.fail("serve view", "holds no tensor table after the part's id");
        m.bytes.assign(blob.begin(), blob.end());
      }
      break;
    case MessageType::kHave:
    case MessageType::kFetching:
    case MessageType::kNotFetching:
      expect_fields(3);
      if (r.read_uint("shard", v, kMaxShards - 1)) m.shard = ShardIndex{static_cast<std::uint32_t>(v)};
      break;
    case MessageType::kRequest:
      expect_fields(7);
      if (r.read_uint("request id", v, UINT32_MAX)) m.request_id = RequestId{static_cast<std::uint32_t>(v)};
      if (r.read_uint("shard", v, kMaxShards - 1)) m.shard = ShardIndex{static_cast<std::uint32_t>(v)};
      if (r.read_uint("block", v, UINT32_MAX)) m.block = BlockIndex{static_cast<std::uint32_t>(v)};
      r.read_uint("offset", m.offset, kMaxImageSize);
      if (r.read_uint("length", v, kMaxBlockBytes)) m.length = static_cast<std::uint32_t>(v);
      break;
    case MessageType::kCancel:
    case MessageType::kDeferred:
      expect_fields(3);
      if (r.read_uint("request id", v, UINT32_MAX)) m.request_id = RequestId{static_cast<std::uint32_t>(v)};
      break;
    case MessageType::kPiece:
      expect_fields(4);
      if (r.read_uint("request id", v, UINT32_MAX)) m.request_id = RequestId{static_cast<std::uint32_t>(v)};
      if (r.read_uint("length", v, kMaxBlockBytes)) m.length = static_cast<std::uint32_t>(v);
      break;
    case MessageType::kRefuse:
    case MessageType::kManifest: {
      expect_fields(4);
      if (r.read_uint("request id", v, UINT32_MAX)) m.request_id = RequestId{static_cast<std::uint32_t>(v)};
      const std::size_t limit = m.type == MessageType::kManifest ? kMaxManifestBytes : 256;
      if (r.read_bin(m.type == MessageType::kManifest ? "manifest" : "reason", blob, limit)) {
        m.bytes.assign(blob.begin(), blob.end());
      }
      break;
    }
    default:
      expect_fields(2);
      break;
  }
  TENSORHUB_RETURN_IF_ERROR(r.finish());
  return m;
}

}  // namespace tensorhub::swarm
