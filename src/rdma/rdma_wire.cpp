#include "rdma/rdma_wire.hpp"

#include <string>

#include "core/msgpack_reader.hpp"
#include "core/msgpack_writer.hpp"

namespace tensorhub::rdma {

RdmaMessage RdmaMessage::offer(std::vector<OfferedNic> nics, std::vector<OfferedQueuePair> queue_pairs) {
  RdmaMessage m;
  m.kind = RdmaMessageKind::kOffer;
  m.nics = std::move(nics);
  m.queue_pairs = std::move(queue_pairs);
  return m;
}

RdmaMessage RdmaMessage::ready() { return RdmaMessage{}; }

RdmaMessage RdmaMessage::about(RdmaMessageKind kind, const ManifestId& version_id) {
  RdmaMessage m;
  m.kind = kind;
  m.version_id = version_id;
  return m;
}

RdmaMessage RdmaMessage::grant(const ManifestId& version_id, std::vector<GrantRegion> regions) {
  RdmaMessage m = about(RdmaMessageKind::kGrant, version_id);
  m.regions = std::move(regions);
  return m;
}

std::vector<std::uint8_t> encode_rdma_message(const RdmaMessage& m) {
  std::vector<std::uint8_t> out;
  core::MsgpackWriter w(out);
  switch (m.kind) {
    case RdmaMessageKind::kOffer:
      w.write_array_header(3);
      w.write_uint(static_cast<std::uint64_t>(m.kind));
      w.write_array_header(static_cast<std::uint32_t>(m.nics.size()));
      for (const OfferedNic& n : m.nics) {
        w.write_array_header(4);
        w.write_bin(n.gid);
        w.write_uint(n.mtu);
        w.write_uint(n.responder_depth);
        w.write_uint(n.requester_depth);
      }
      w.write_array_header(static_cast<std::uint32_t>(m.queue_pairs.size()));
      for (const OfferedQueuePair& q : m.queue_pairs) {
        w.write_array_header(3);
        w.write_uint(q.nic);
        w.write_uint(q.qpn);
        w.write_uint(q.psn);
      }
      break;
    case RdmaMessageKind::kReady:
      w.write_array_header(1);
      w.write_uint(static_cast<std::uint64_t>(m.kind));
      break;
    case RdmaMessageKind::kGrant:
      w.write_array_header(3);
      w.write_uint(static_cast<std::uint64_t>(m.kind));
      w.write_bin(m.version_id.bytes);
      w.write_array_header(static_cast<std::uint32_t>(m.regions.size()));
      for (const GrantRegion& g : m.regions) {
        w.write_array_header(4);
        w.write_uint(g.offset);
        w.write_uint(g.addr);
        w.write_uint(g.length);
        w.write_array_header(static_cast<std::uint32_t>(g.rkeys.size()));
        for (std::uint32_t k : g.rkeys) w.write_uint(k);
      }
      break;
    case RdmaMessageKind::kAskGrant:
    case RdmaMessageKind::kNoGrant:
    case RdmaMessageKind::kRevoke:
      w.write_array_header(2);
      w.write_uint(static_cast<std::uint64_t>(m.kind));
      w.write_bin(m.version_id.bytes);
      break;
  }
  return out;
}

namespace {

void read_offer(core::MsgpackReader& r, RdmaMessage& m) {
  std::uint32_t count = 0;
  std::uint64_t v = 0;
  if (!r.read_array_header("nics", count, kMaxOfferedNics, 22)) return;
  if (count == 0) r.fail("nics", "an offer names at least one NIC");
  for (std::uint32_t i = 0; i < count && r.ok(); ++i) {
    OfferedNic n;
    r.expect_array("nic", 4);
    r.read_bin_exact("gid", n.gid);
    if (r.read_uint("mtu", v, 5)) {
      if (v == 0) r.fail("mtu", "not an MTU (1 to 5)");
      n.mtu = static_cast<std::uint8_t>(v);
    }
    if (r.read_uint("responder depth", v, 255)) n.responder_depth = static_cast<std::uint8_t>(v);
    if (r.read_uint("requester depth", v, 255)) n.requester_depth = static_cast<std::uint8_t>(v);
    m.nics.push_back(n);
  }
  if (!r.read_array_header("queue pairs", count, kMaxOfferedQueuePairs, 4)) return;
  if (count == 0 && r.ok()) r.fail("queue pairs", "an offer names at least one queue pair");
  for (std::uint32_t i = 0; i < count && r.ok(); ++i) {
    OfferedQueuePair q;
    r.expect_array("queue pair", 3);
    if (r.read_uint("nic", v, 255)) {
      if (v >= m.nics.size()) r.fail("nic", "names no offered NIC");
      q.nic = static_cast<std::uint8_t>(v);
    }
    if (r.read_uint("qpn", v, 0xffffff)) q.qpn = static_cast<std::uint32_t>(v);
    if (r.read_uint("psn", v, 0xffffff)) q.psn = static_cast<std::uint32_t>(v);
    m.queue_pairs.push_back(q);
  }
}

void read_grant(core::MsgpackReader& r, RdmaMessage& m) {
  std::uint32_t count = 0;
  std::uint64_t v = 0;
  if (!r.read_array_header("regions", count, kMaxGrantRegions, 6)) return;
  std::uint64_t end = 0;  // of the previous region, in the image
  for (std::uint32_t i = 0; i < count && r.ok(); ++i) {
    GrantRegion g;
    r.expect_array("region", 4);
    r.read_uint("offset", g.offset);
    r.read_uint("address", g.addr);
    r.read_uint("length", g.length);
    if (r.ok() && g.length == 0) r.fail("length", "an empty region");
    if (r.ok() && (g.offset < end || g.offset + g.length < g.offset || g.addr + g.length < g.addr)) {
      r.fail("region", "overlaps the one before it, or wraps around");
    }
    end = g.offset + g.length;
    std::uint32_t keys = 0;
    if (r.read_array_header("rkeys", keys, kMaxOfferedNics)) {
      if (keys == 0) r.fail("rkeys", "a region without a key");
      for (std::uint32_t k = 0; k < keys && r.ok(); ++k) {
        if (r.read_uint("rkey", v, 0xffffffff)) g.rkeys.push_back(static_cast<std::uint32_t>(v));
      }
    }
    m.regions.push_back(std::move(g));
  }
}

}  // namespace

Result<RdmaMessage> decode_rdma_message(std::span<const std::uint8_t> bytes) {
  core::MsgpackReader r(bytes);
  RdmaMessage m;
  std::uint32_t fields = 0;
  std::uint64_t kind = 0;
  r.read_array_header("rdma message", fields, 3);
  if (r.read_uint("kind", kind) && (kind < 1 || kind > 6)) r.fail("kind", "unknown rdma message kind " + std::to_string(kind));
  if (!r.ok()) return r.status();
  m.kind = static_cast<RdmaMessageKind>(kind);
  const std::uint32_t want = m.kind == RdmaMessageKind::kReady                                     ? 1
                             : m.kind == RdmaMessageKind::kOffer || m.kind == RdmaMessageKind::kGrant ? 3
                                                                                                    : 2;
  if (fields != want) return Status::corrupt("rdma message takes " + std::to_string(want) + " fields, not " + std::to_string(fields));
  switch (m.kind) {
    case RdmaMessageKind::kOffer: read_offer(r, m); break;
    case RdmaMessageKind::kReady: break;
    case RdmaMessageKind::kGrant:
      r.read_bin_exact("version", m.version_id.bytes);
      read_grant(r, m);
      break;
    case RdmaMessageKind::kAskGrant:
    case RdmaMessageKind::kNoGrant:
    case RdmaMessageKind::kRevoke: r.read_bin_exact("version", m.version_id.bytes); break;
  }
  TENSORHUB_RETURN_IF_ERROR(r.finish());
  return m;
}

}  // namespace tensorhub::rdma
