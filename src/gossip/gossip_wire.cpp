#include "gossip/gossip_wire.hpp"

#include <sodium.h>

#include <cstring>
#include <string_view>

#include "core/host_port.hpp"
#include "core/msgpack_reader.hpp"
#include "core/msgpack_writer.hpp"

namespace tensorhub::gossip {
namespace {

constexpr std::uint8_t kDatagramMagic[4] = {'T', 'H', 'g', '2'};
constexpr std::uint8_t kStreamMagic[4] = {'T', 'H', 's', '2'};
constexpr std::string_view kLivenessLabel = "tensorhub liveness claim v1";
constexpr std::uint64_t kStreamCounterBit = 1ull << 63;
constexpr std::uint8_t kItemRecord = 1;
constexpr std::uint8_t kItemLiveness = 2;

void put_be64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    p[i] = static_cast<std::uint8_t>(v);
    v >>= 8;
  }
}

std::uint64_t get_be64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

void write_item(core::MsgpackWriter& w, const OutgoingItem& item) {
  if (const auto* record = std::get_if<RecordPtr>(&item)) {
    w.write_array_header(2);
    w.write_uint(kItemRecord);
    w.write_bin((*record)->encoded);
  } else {
    const auto& l = std::get<LivenessItem>(item);
    w.write_array_header(6);
    w.write_uint(kItemLiveness);
    w.write_uint(static_cast<std::uint8_t>(l.state));
    w.write_bin(l.target.bytes);
    w.write_uint(l.incarnation);
    w.write_bin(l.from.bytes);
    w.write_bin(l.signature.bytes);
  }
}

void write_items(core::MsgpackWriter& w, std::span<const OutgoingItem> items) {
  w.write_array_header(static_cast<std::uint32_t>(items.size()));
  for (const auto& item : items) write_item(w, item);
}

bool read_items(core::MsgpackReader& r, std::vector<IncomingItem>& items, std::size_t max_items) {
  std::uint32_t count = 0;
  if (!r.read_array_header("items", count, static_cast<std::uint32_t>(max_items), 3)) return false;
  items.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint32_t fields = 0;
    std::uint64_t type = 0;
    const std::size_t at = r.offset();
    if (!(r.read_array_header("item", fields, 6) && r.read_uint("item type", type))) return false;
    if (type == kItemRecord && fields == 2) {
      std::span<const std::uint8_t> bytes;
      if (!r.read_bin("record", bytes, kMaxRecordBytes)) return false;
      items.emplace_back(RecordBytes{{bytes.begin(), bytes.end()}});
    } else if (type == kItemLiveness && fields == 6) {
      LivenessItem l;
      std::uint64_t state = 0;
      if (!(r.read_uint("liveness", state, 3) && r.read_bin_exact("liveness target", l.target.bytes) &&
            r.read_uint("liveness incarnation", l.incarnation) && r.read_bin_exact("liveness source", l.from.bytes) &&
            r.read_bin_exact("liveness signature", l.signature.bytes))) {
        return false;
      }
      l.state = static_cast<Liveness>(state);
      if (l.state != Liveness::kSuspect && l.state != Liveness::kDead) {
        return r.fail_at(at, "item", "liveness items carry suspect or dead only");
      }
      items.emplace_back(l);
    } else {
      return r.fail_at(at, "item", "unknown item type " + std::to_string(type) + " with " + std::to_string(fields) +
                                       " fields");
    }
  }
  return true;
}

}  // namespace

std::string_view liveness_name(Liveness l) {
  switch (l) {
    case Liveness::kAlive: return "alive";
    case Liveness::kSuspect: return "suspect";
    case Liveness::kDead: return "dead";
    case Liveness::kLeft: return "left";
  }
  return "unknown";
}

std::size_t encoded_item_size(const OutgoingItem& item) {
  if (const auto* record = std::get_if<RecordPtr>(&item)) return 1 + 1 + 3 + (*record)->encoded.size();
  return 1 + 1 + 1 + 34 + 9 + 34 + 66;
}

namespace {
std::vector<std::uint8_t> liveness_claim_bytes(Liveness state, const PeerId& target, std::uint64_t incarnation,
                                               const PeerId& from) {
  std::vector<std::uint8_t> m(kLivenessLabel.begin(), kLivenessLabel.end());
  m.push_back(static_cast<std::uint8_t>(state));
  m.insert(m.end(), target.bytes.begin(), target.bytes.end());
  std::uint8_t inc[8];
  put_be64(inc, incarnation);
  m.insert(m.end(), inc, inc + 8);
  m.insert(m.end(), from.bytes.begin(), from.bytes.end());
  return m;
}
}  // namespace

LivenessItem sign_liveness(const Identity& accuser, Liveness state, const PeerId& target, std::uint64_t incarnation) {
  LivenessItem item{state, target, incarnation, accuser.public_key(), {}};
  item.signature = accuser.sign(liveness_claim_bytes(state, target, incarnation, item.from));
  return item;
}

bool verify_liveness(const LivenessItem& item) {
  return verify_signature(item.from, liveness_claim_bytes(item.state, item.target, item.incarnation, item.from),
                          item.signature);
}

std::optional<RecordVersion> peek_record_version(std::span<const std::uint8_t> encoded) {
  core::MsgpackReader r(encoded);
  RecordVersion v;
  if (r.expect_array("signed record", 2) && r.expect_array("record", 13) && r.read_bin_exact("id", v.id.bytes) &&
      r.read_uint("incarnation", v.incarnation) && r.read_uint("seq", v.seq) && r.read_uint("boot", v.boot)) {
    return v;
  }
  return std::nullopt;
}

Sealer::Sealer(const core::AeadKey& key, const PeerId& sender, std::uint64_t boot_id)
    : key_(key), sender_(sender), boot_id_(boot_id) {}

std::vector<std::uint8_t> Sealer::seal(bool stream, std::span<const std::uint8_t> plaintext) {
  const std::uint64_t counter = stream ? (kStreamCounterBit | ++stream_counter_) : ++datagram_counter_;
  core::AeadNonce nonce{};
  put_be64(nonce.data(), boot_id_);
  put_be64(nonce.data() + 8, counter);
  std::memcpy(nonce.data() + 16, sender_.bytes.data(), 8);
  const auto* magic = stream ? kStreamMagic : kDatagramMagic;
  std::vector<std::uint8_t> out(4 + nonce.size());
  out.reserve(kSealOverhead + plaintext.size());
  std::memcpy(out.data(), magic, 4);
  std::memcpy(out.data() + 4, nonce.data(), nonce.size());
  core::aead_seal(key_, nonce, std::span<const std::uint8_t>(magic, 4), plaintext, out);
  return out;
}

std::vector<std::uint8_t> Sealer::seal_packet(const PairKey& pair_key, const Packet& packet,
                                              std::span<const OutgoingItem> items) {
  std::vector<std::uint8_t> plain;
  plain.reserve(128);
  core::MsgpackWriter w(plain);
  w.write_array_header(6);
  w.write_bin(packet.sender.bytes);
  w.write_uint(static_cast<std::uint8_t>(packet.kind));
  w.write_uint(packet.probe_seq);
  if (packet.target) {
    w.write_bin(packet.target->bytes);
  } else {
    w.write_bin({});
  }
  w.write_str(packet.target_addr);
  write_items(w, items);
  std::vector<std::uint8_t> out = seal(false, plain);
  const SenderTag tag = sender_tag(pair_key, out);
  out.insert(out.end(), tag.begin(), tag.end());
  return out;
}

std::vector<std::uint8_t> Sealer::seal_stream(StreamKind kind, std::span<const std::uint8_t> body) {
  std::vector<std::uint8_t> plain;
  plain.reserve(48 + body.size());
  core::MsgpackWriter w(plain);
  w.write_array_header(3);
  w.write_bin(sender_.bytes);
  w.write_uint(static_cast<std::uint8_t>(kind));
  plain.insert(plain.end(), body.begin(), body.end());
  return seal(true, plain);
}

OpenError open_sealed(const core::AeadKey& key, bool stream, std::span<const std::uint8_t> sealed, Opened& out) {
  if (sealed.size() < kSealOverhead) return OpenError::kTooShort;
  const auto* magic = stream ? kStreamMagic : kDatagramMagic;
  if (std::memcmp(sealed.data(), magic, 4) != 0) return OpenError::kBadMagic;
  core::AeadNonce nonce;
  std::memcpy(nonce.data(), sealed.data() + 4, nonce.size());
  if (!core::aead_open(key, nonce, sealed.first(4), sealed.subspan(4 + nonce.size()), out.plaintext)) {
    return OpenError::kAuthFailed;
  }
  out.boot_id = get_be64(nonce.data());
  out.counter = get_be64(nonce.data() + 8);
  // The plaintext names the sender; it must match the prefix in the nonce.
  core::MsgpackReader r(out.plaintext);
  std::uint32_t fields = 0;
  if (!(r.read_array_header("message", fields, 6) &&
        r.read_bin_exact("sender", out.sender.bytes))) {
    return OpenError::kMalformed;
  }
  if (std::memcmp(out.sender.bytes.data(), nonce.data() + 16, 8) != 0) return OpenError::kMalformed;
  if (((out.counter & kStreamCounterBit) != 0) != stream) return OpenError::kMalformed;
  return OpenError::kNone;
}

OpenError open_datagram(const core::AeadKey& key, std::span<const std::uint8_t> datagram, Opened& out) {
  if (datagram.size() < kDatagramOverhead) return OpenError::kTooShort;
  return open_sealed(key, /*stream=*/false, datagram.first(datagram.size() - kSenderTagBytes), out);
}

bool datagram_sender_proved(const PairKey& pair_key, std::span<const std::uint8_t> datagram) {
  if (datagram.size() < kDatagramOverhead) return false;
  const std::size_t body = datagram.size() - kSenderTagBytes;
  const SenderTag expected = sender_tag(pair_key, datagram.first(body));
  return sodium_memcmp(expected.data(), datagram.data() + body, kSenderTagBytes) == 0;
}

Status decode_packet(std::span<const std::uint8_t> plaintext, Packet& packet, std::vector<IncomingItem>& items) {
  core::MsgpackReader r(plaintext);
  std::uint64_t kind = 0, seq = 0;
  std::span<const std::uint8_t> target;
  std::string_view addr;
  r.expect_array("packet", 6);
  r.read_bin_exact("sender", packet.sender.bytes);
  if (r.read_uint("kind", kind) && (kind < 1 || kind > 5)) r.fail("kind", "unknown packet kind " + std::to_string(kind));
  r.read_uint("probe seq", seq, UINT32_MAX);
  if (r.read_bin("target", target, 32) && target.size() != 0 && target.size() != 32) {
    r.fail("target", "a target is 0 or 32 bytes");
  }
  if (r.read_str("target address", addr, kMaxRecordAddrBytes)) {
    // An IP literal: a ping-req never costs its relay a name lookup.
    if (!addr.empty() && !core::parse_ip_host_port(addr)) r.fail("target address", "not IP:port");
    packet.target_addr.assign(addr);
  }
  read_items(r, items, 64);
  TENSORHUB_RETURN_IF_ERROR(r.finish());
  packet.kind = static_cast<PacketKind>(kind);
  packet.probe_seq = static_cast<std::uint32_t>(seq);
  if (target.size() == 32) {
    PeerId id;
    std::memcpy(id.bytes.data(), target.data(), 32);
    packet.target = id;
  }
  return Status::ok();
}

std::vector<std::uint8_t> encode_sync_request(std::span<const DigestEntry> digest) {
  std::vector<std::uint8_t> out;
  out.reserve(8 + digest.size() * 64);
  core::MsgpackWriter w(out);
  w.write_array_header(static_cast<std::uint32_t>(digest.size()));
  for (const DigestEntry& e : digest) {
    w.write_array_header(5);
    w.write_bin(e.id.bytes);
    w.write_uint(e.record_incarnation);
    w.write_uint(e.record_seq);
    w.write_uint(static_cast<std::uint8_t>(e.liveness));
    w.write_uint(e.liveness_incarnation);
  }
  return out;
}

std::vector<std::uint8_t> encode_sync_response(std::span<const OutgoingItem> items, std::span<const PeerId> wants) {
  std::vector<std::uint8_t> out;
  core::MsgpackWriter w(out);
  w.write_array_header(2);
  write_items(w, items);
  w.write_array_header(static_cast<std::uint32_t>(wants.size()));
  for (const PeerId& id : wants) w.write_bin(id.bytes);
  return out;
}

std::vector<std::uint8_t> encode_sync_records(std::span<const OutgoingItem> items) {
  std::vector<std::uint8_t> out;
  core::MsgpackWriter w(out);
  write_items(w, items);
  return out;
}

std::vector<std::uint8_t> encode_stream_probe(std::uint32_t seq) {
  std::vector<std::uint8_t> out;
  core::MsgpackWriter(out).write_uint(seq);
  return out;
}

Status decode_stream(std::span<const std::uint8_t> plaintext, PeerId& sender, StreamBody& body,
                     std::size_t max_entries) {
  core::MsgpackReader r(plaintext);
  std::uint64_t kind = 0;
  r.expect_array("stream message", 3);
  r.read_bin_exact("sender", sender.bytes);
  r.read_uint("kind", kind);
  const auto max = static_cast<std::uint32_t>(max_entries);
  if (!r.ok()) return r.status();
  switch (static_cast<StreamKind>(kind)) {
    case StreamKind::kSyncRequest: {
      SyncRequest request;
      std::uint32_t count = 0;
      if (r.read_array_header("digest", count, max, 38)) {
        request.digest.resize(count);
        for (DigestEntry& e : request.digest) {
          std::uint64_t liveness = 0;
          if (!(r.expect_array("digest entry", 5) && r.read_bin_exact("digest id", e.id.bytes) &&
                r.read_uint("digest incarnation", e.record_incarnation) && r.read_uint("digest seq", e.record_seq) &&
                r.read_uint("digest liveness", liveness, 3) &&
                r.read_uint("digest liveness incarnation", e.liveness_incarnation))) {
            break;
          }
          e.liveness = static_cast<Liveness>(liveness);
        }
      }
      body = std::move(request);
      break;
    }
    case StreamKind::kSyncResponse: {
      SyncResponse response;
      std::uint32_t count = 0;
      if (r.expect_array("sync response", 2) && read_items(r, response.items, max) &&
          r.read_array_header("wants", count, max, 34)) {
        response.wants.resize(count);
        for (PeerId& id : response.wants) {
          if (!r.read_bin_exact("want", id.bytes)) break;
        }
      }
      body = std::move(response);
      break;
    }
    case StreamKind::kSyncRecords: {
      SyncRecords records;
      read_items(r, records.items, max);
      body = std::move(records);
      break;
    }
    case StreamKind::kProbe:
    case StreamKind::kProbeAck: {
      std::uint64_t seq = 0;
      r.read_uint("probe seq", seq, UINT32_MAX);
      body = StreamProbe{static_cast<std::uint32_t>(seq), static_cast<StreamKind>(kind) == StreamKind::kProbeAck};
      break;
    }
    default:
      return Status::corrupt("unknown stream message kind " + std::to_string(kind));
  }
  return r.finish();
}

}  // namespace tensorhub::gossip
