#include "gossip/peer_record.hpp"

#include <algorithm>
#include <cstring>

#include "core/host_port.hpp"
#include "core/model_name.hpp"
#include "core/msgpack_reader.hpp"
#include "core/msgpack_writer.hpp"
#include "core/quoted.hpp"

namespace tensorhub::gossip {
namespace {

constexpr std::string_view kDomain{"tensorhub record v1\0", 20};
constexpr std::size_t kMaxModelBytes = 128;

void encode_entry(core::MsgpackWriter& w, const HeadEntry& h) {
  w.write_array_header(3);
  w.write_str(h.model);
  w.write_uint(h.version);
  w.write_bin(h.manifest_id.bytes);
}

// A plain holding is [model, version, id, progress]; a part set adds
// [selection (0 or 32 bytes), part count, parts bitmap, complete bitmap].
void encode_entry(core::MsgpackWriter& w, const HoldingEntry& h) {
  w.write_array_header(h.is_part_set() ? 8 : 4);
  w.write_str(h.model);
  w.write_uint(h.version);
  w.write_bin(h.manifest_id.bytes);
  w.write_uint(h.progress_permille);
  if (!h.is_part_set()) return;
  if (h.selection) {
    w.write_bin(h.selection->bytes);
  } else {
    w.write_bin(std::span<const std::uint8_t>{});
  }
  w.write_uint(h.parts.size());
  w.write_bin(h.parts.to_bytes());
  w.write_bin(h.complete_parts.to_bytes());
}

// The part set fields of a holding whose array has 8 elements.
bool decode_part_set(core::MsgpackReader& rd, HoldingEntry& h) {
  std::span<const std::uint8_t> bytes;
  std::uint64_t count = 0;
  if (!rd.read_bin("part set selection", bytes, sizeof(ManifestId::bytes))) return false;
  if (!bytes.empty()) {
    if (bytes.size() != sizeof(ManifestId::bytes)) return rd.fail("part set selection", "is neither empty nor 32 bytes");
    h.selection.emplace();
    std::copy(bytes.begin(), bytes.end(), h.selection->bytes.begin());
  }
  if (!rd.read_uint("part set part count", count, kMaxPartSetParts)) return false;
  if (count == 0) return rd.fail("part set part count", "is 0");
  for (core::Bitfield* bits : {&h.parts, &h.complete_parts}) {
    if (!rd.read_bin("part set bitmap", bytes, (kMaxPartSetParts + 7) / 8)) return false;
    auto decoded = core::Bitfield::from_bytes(bytes, count);
    if (!decoded) return rd.fail("part set bitmap", decoded.status().message());
    *bits = std::move(*decoded);
  }
  return true;
}

void encode_entry(core::MsgpackWriter& w, const GroupEntry& g) {
  w.write_array_header(3);
  w.write_str(g.name);
  w.write_uint(g.size);
  w.write_uint(g.rank);
}

template <typename Entry>
std::size_t entry_size(const Entry& entry) {
  std::vector<std::uint8_t> scratch;
  core::MsgpackWriter w(scratch);
  encode_entry(w, entry);
  return scratch.size();
}

std::vector<std::uint8_t> encode_body(const PeerRecord& r) {
  std::vector<std::uint8_t> out;
  out.reserve(256);
  core::MsgpackWriter w(out);
  w.write_array_header(13);
  w.write_bin(r.id.bytes);
  w.write_uint(r.incarnation);
  w.write_uint(r.seq);
  w.write_uint(r.boot);
  w.write_str(r.gossip_addr);
  w.write_str(r.data_addr);
  w.write_str(r.topology.dc);
  w.write_str(r.topology.rack);
  w.write_str(r.topology.host);
  w.write_bool(r.leaving);
  w.write_array_header(static_cast<std::uint32_t>(r.heads.size()));
  for (const HeadEntry& h : r.heads) encode_entry(w, h);
  w.write_array_header(static_cast<std::uint32_t>(r.holdings.size()));
  for (const HoldingEntry& h : r.holdings) encode_entry(w, h);
  w.write_array_header(static_cast<std::uint32_t>(r.groups.size()));
  for (const GroupEntry& g : r.groups) encode_entry(w, g);
  return out;
}

// The signed encoding wraps the body: [body, bin8(signature)].
constexpr std::size_t kSignatureWrapBytes = 1 + 2 + sizeof(Signature::bytes);

std::vector<std::uint8_t> signing_message(std::span<const std::uint8_t> body) {
  std::vector<std::uint8_t> message(kDomain.size() + body.size());
  std::memcpy(message.data(), kDomain.data(), kDomain.size());
  std::memcpy(message.data() + kDomain.size(), body.data(), body.size());
  return message;
}

Status decode_body(core::MsgpackReader& rd, PeerRecord& r) {
  std::string_view s;
  rd.expect_array("record", 13);
  rd.read_bin_exact("record id", r.id.bytes);
  rd.read_uint("record incarnation", r.incarnation);
  rd.read_uint("record seq", r.seq);
  rd.read_uint("record boot", r.boot);
  if (rd.read_str("gossip address", s, kMaxRecordAddrBytes)) r.gossip_addr.assign(s);
  if (rd.read_str("data address", s, kMaxRecordAddrBytes)) r.data_addr.assign(s);
  if (rd.read_str("dc", s, kMaxTopologyLabelBytes)) r.topology.dc.assign(s);
  if (rd.read_str("rack", s, kMaxTopologyLabelBytes)) r.topology.rack.assign(s);
  if (rd.read_str("host", s, kMaxTopologyLabelBytes)) r.topology.host.assign(s);
  rd.read_bool("leaving", r.leaving);
  std::uint32_t count = 0;
  if (rd.read_array_header("heads", count, kMaxRecordHeads, 4)) {
    r.heads.resize(count);
    for (auto& h : r.heads) {
      if (!(rd.expect_array("head", 3) && rd.read_str("head model", s, kMaxModelBytes))) break;
      h.model.assign(s);
      if (!(rd.read_uint("head version", h.version) && rd.read_bin_exact("head manifest id", h.manifest_id.bytes))) break;
    }
  }
  if (rd.read_array_header("holdings", count, kMaxRecordHoldings, 5)) {
    r.holdings.resize(count);
    for (auto& h : r.holdings) {
      std::uint64_t progress = 0;
      std::uint32_t fields = 0;
      if (!rd.read_array_header("holding", fields, 8)) break;
      if (fields != 4 && fields != 8) {
        rd.fail("holding", "has neither 4 fields (a holding) nor 8 (a part set)");
        break;
      }
      if (!rd.read_str("holding model", s, kMaxModelBytes)) break;
      h.model.assign(s);
      if (!(rd.read_uint("holding version", h.version) &&
            rd.read_bin_exact("holding manifest id", h.manifest_id.bytes) &&
            rd.read_uint("holding progress", progress, 1000))) {
        break;
      }
      h.progress_permille = static_cast<std::uint16_t>(progress);
      if (fields == 8 && !decode_part_set(rd, h)) break;
    }
  }
  if (rd.read_array_header("groups", count, kMaxRecordGroups, 4)) {
    r.groups.resize(count);
    for (auto& g : r.groups) {
      std::uint64_t size = 0, rank = 0;
      if (!(rd.expect_array("group", 3) && rd.read_str("group name", s, kMaxGroupNameBytes))) break;
      g.name.assign(s);
      if (!(rd.read_uint("group size", size, kMaxGroupSize) && rd.read_uint("group rank", rank, kMaxGroupSize))) break;
      g.size = static_cast<std::uint32_t>(size);
      g.rank = static_cast<std::uint32_t>(rank);
    }
  }
  return rd.status();
}

class VerifyingDecoder final : public RecordDecoder {
 public:
  Result<RecordPtr> decode(std::span<const std::uint8_t> encoded) override { return decode_record(encoded); }
};

// A part set names 1..kMaxPartSetParts parts, at least one held, complete
// ones among the held, and is complete exactly when all held are; a plain
// holding names no selection.
Status validate_part_set(const HoldingEntry& h) {
  if (!h.is_part_set()) {
    if (h.selection || h.complete_parts.size() != 0) {
      return Status::invalid_argument("a plain holding names a selection or complete parts");
    }
    return Status::ok();
  }
  if (h.parts.size() > kMaxPartSetParts || h.complete_parts.size() != h.parts.size()) {
    return Status::invalid_argument("a part set of " + std::to_string(h.parts.size()) + " parts (at most " +
                                    std::to_string(kMaxPartSetParts) + ") with a complete bitmap of " +
                                    std::to_string(h.complete_parts.size()));
  }
  if (h.parts.none()) return Status::invalid_argument("a part set holds no part");
  std::size_t complete = 0;
  for (std::size_t i = h.complete_parts.find_next(0, true); i < h.complete_parts.size();
       i = h.complete_parts.find_next(i + 1, true)) {
    if (!h.parts.test(i)) return Status::invalid_argument("a part set's part " + std::to_string(i) + " is complete but not held");
    ++complete;
  }
  if ((h.progress_permille == 1000) != (complete == h.parts.count())) {
    return Status::invalid_argument("a part set's progress is 1000 permille exactly when every part it holds is complete");
  }
  return Status::ok();
}

}  // namespace

Status validate_record(const PeerRecord& r) {
  if (r.gossip_addr.size() > kMaxRecordAddrBytes || r.data_addr.size() > kMaxRecordAddrBytes) {
    return Status::invalid_argument("record address longer than " + std::to_string(kMaxRecordAddrBytes) + " bytes");
  }
  // Addresses are IP literals: a record never costs its reader a name lookup.
  if (auto a = core::parse_ip_host_port(r.gossip_addr); !a) return a.status().with_context("record gossip address");
  if (!r.data_addr.empty()) {
    if (auto a = core::parse_ip_host_port(r.data_addr); !a) return a.status().with_context("record data address");
  }
  for (const std::string* label : {&r.topology.dc, &r.topology.rack, &r.topology.host}) {
    if (label->size() > kMaxTopologyLabelBytes) {
      return Status::invalid_argument("topology label longer than " + std::to_string(kMaxTopologyLabelBytes) +
                                      " bytes");
    }
    if (!core::is_printable_ascii(*label)) {
      return Status::invalid_argument("topology label " + core::quoted(*label) + " is not printable ASCII");
    }
  }
  for (const auto& h : r.heads) {
    TENSORHUB_RETURN_IF_ERROR(core::validate_model_name(h.model, kMaxModelBytes).with_context("record head"));
  }
  for (const auto& h : r.holdings) {
    TENSORHUB_RETURN_IF_ERROR(core::validate_model_name(h.model, kMaxModelBytes).with_context("record holding"));
  }
  if (r.heads.size() > kMaxRecordHeads) return Status::invalid_argument("too many heads in a record");
  if (r.holdings.size() > kMaxRecordHoldings) return Status::invalid_argument("too many holdings in a record");
  for (std::size_t i = 1; i < r.heads.size(); ++i) {
    if (!(r.heads[i - 1].model < r.heads[i].model)) {
      return Status::invalid_argument("record heads are not sorted by model, or repeat one");
    }
  }
  for (std::size_t i = 1; i < r.holdings.size(); ++i) {
    if (!(key_of(r.holdings[i - 1]) < key_of(r.holdings[i]))) {
      return Status::invalid_argument(
          "record holdings are not sorted by (model, version, id, selection), or repeat one");
    }
  }
  for (const auto& h : r.holdings) {
    if (h.progress_permille > 1000) return Status::invalid_argument("holding progress above 1000 permille");
    TENSORHUB_RETURN_IF_ERROR(validate_part_set(h));
  }
  if (r.groups.size() > kMaxRecordGroups) return Status::invalid_argument("too many groups in a record");
  for (std::size_t i = 0; i < r.groups.size(); ++i) {
    const GroupEntry& g = r.groups[i];
    TENSORHUB_RETURN_IF_ERROR(core::validate_model_name(g.name, kMaxGroupNameBytes).with_context("record group"));
    if (g.size == 0 || g.size > kMaxGroupSize || g.rank >= g.size) {
      return Status::invalid_argument("record group " + core::quoted(g.name) + ": rank " + std::to_string(g.rank) +
                                      " of " + std::to_string(g.size) + " (ranks are below a size of 1 to " +
                                      std::to_string(kMaxGroupSize) + ")");
    }
    if (i > 0 && !(r.groups[i - 1].name < g.name)) {
      return Status::invalid_argument("record groups are not sorted by name, or repeat one");
    }
  }
  return Status::ok();
}

std::size_t encoded_entry_bytes(const HeadEntry& head) { return entry_size(head); }
std::size_t encoded_entry_bytes(const HoldingEntry& holding) { return entry_size(holding); }

std::size_t signed_record_bytes(const PeerRecord& record) { return encode_body(record).size() + kSignatureWrapBytes; }

Result<RecordPtr> sign_record(const PeerRecord& record, const Identity& identity) {
  if (record.id != identity.public_key()) return Status::invalid_argument("a record may be signed only by its owner");
  TENSORHUB_RETURN_IF_ERROR(validate_record(record));
  auto out = std::make_shared<SignedRecord>();
  out->record = record;
  const std::vector<std::uint8_t> body = encode_body(record);
  out->signature = identity.sign(signing_message(body));
  core::MsgpackWriter w(out->encoded);
  w.write_array_header(2);
  out->encoded.insert(out->encoded.end(), body.begin(), body.end());
  w.write_bin(out->signature.bytes);
  if (out->encoded.size() > kMaxRecordBytes) {
    return Status::invalid_argument("record of " + std::to_string(out->encoded.size()) +
                                    " bytes exceeds the datagram budget of " + std::to_string(kMaxRecordBytes) +
                                    "; hold fewer versions or shorter names");
  }
  return RecordPtr(std::move(out));
}

Result<RecordPtr> decode_record(std::span<const std::uint8_t> encoded) {
  if (encoded.size() > kMaxRecordBytes) return Status::corrupt("record exceeds " + std::to_string(kMaxRecordBytes) + " bytes");
  core::MsgpackReader rd(encoded);
  auto out = std::make_shared<SignedRecord>();
  rd.expect_array("signed record", 2);
  const std::size_t body_start = rd.offset();
  TENSORHUB_RETURN_IF_ERROR(decode_body(rd, out->record));
  const std::size_t body_end = rd.offset();
  rd.read_bin_exact("record signature", out->signature.bytes);
  TENSORHUB_RETURN_IF_ERROR(rd.finish());
  Status valid = validate_record(out->record);
  if (!valid.is_ok()) return Status::corrupt(valid.message());
  if (!verify_signature(out->record.id, signing_message(encoded.subspan(body_start, body_end - body_start)),
                        out->signature)) {
    return Status::verify_failed("record of peer " + out->record.id.short_hex() + " has a bad signature");
  }
  out->encoded.assign(encoded.begin(), encoded.end());
  return RecordPtr(std::move(out));
}

std::shared_ptr<RecordDecoder> default_record_decoder() { return std::make_shared<VerifyingDecoder>(); }

}  // namespace tensorhub::gossip
