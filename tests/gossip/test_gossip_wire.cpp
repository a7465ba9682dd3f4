// The gossip wire: signed records, sealing, strict packet and stream
// decoding, and seeded mutation tests of every decoder.
#include <doctest/doctest.h>

#include <functional>

#include <algorithm>

#include "gossip/gossip_wire.hpp"
#include "support/gossip_network.hpp"
#include "support/mutator.hpp"

using namespace tensorhub;
using namespace tensorhub::gossip;

namespace {

Identity identity(std::uint64_t key) { return testing::GossipNetwork::identity_for(key); }

// v18 of "policy" sealed as `seal`, in `count` parts: the views of one
// selection of its even parts, every fourth complete.
HoldingEntry part_set(const ManifestId& seal, std::uint32_t count) {
  HoldingEntry h{"policy", 18, seal, 500};
  h.selection.emplace();
  h.selection->bytes.fill(0x5e);
  h.parts = core::Bitfield(count);
  h.complete_parts = core::Bitfield(count);
  for (std::uint32_t i = 0; i < count; i += 2) h.parts.set(i);
  for (std::uint32_t i = 0; i < count; i += 4) h.complete_parts.set(i);
  return h;
}

PeerRecord sample_record(const Identity& id) {
  PeerRecord r;
  r.id = id.public_key();
  r.incarnation = 1700000000123;
  r.seq = 4;
  r.gossip_addr = "10.1.2.3:7946";
  r.data_addr = "10.1.2.3:7947";
  r.topology = Topology{"dc-west", "rack-12", "host-7"};
  ManifestId m;
  m.bytes.fill(0xab);
  r.heads = {HeadEntry{"critic", 2, m}, HeadEntry{"policy", 17, m}};
  r.holdings = {HoldingEntry{"policy", 16, m, 1000}, HoldingEntry{"policy", 17, m, 420}, part_set(m, 24)};
  r.groups = {GroupEntry{"instance-3", 16, 5}};
  return r;
}

core::AeadKey key_bytes(std::uint8_t fill) {
  core::AeadKey k;
  k.fill(fill);
  return k;
}

}  // namespace

TEST_CASE("records: sign, decode, verify, the exact bytes travel") {
  const Identity id = identity(1);
  auto signed_record = sign_record(sample_record(id), id);
  REQUIRE(signed_record.is_ok());
  CHECK((*signed_record)->encoded.size() < kMaxRecordBytes);
  auto decoded = decode_record((*signed_record)->encoded);
  REQUIRE(decoded.is_ok());
  CHECK((*decoded)->record == sample_record(id));
  CHECK((*decoded)->encoded == (*signed_record)->encoded);
  auto version = peek_record_version((*signed_record)->encoded);
  REQUIRE(version.has_value());
  CHECK(version->id == id.public_key());
  CHECK(version->incarnation == 1700000000123);
  CHECK(version->seq == 4);
}

TEST_CASE("records: a part set names a version's parts, or one selection's views of them, in one entry") {
  const Identity id = identity(2);
  ManifestId seal;
  seal.bytes.fill(0x33);
  PeerRecord r = sample_record(id);
  // The same sealed version held whole (its first 1024 parts, every one
  // complete) and as one selection's views: two entries, the whole first.
  HoldingEntry whole{"policy", 18, seal, 1000};
  whole.parts = core::Bitfield(gossip::kMaxPartSetParts, true);
  whole.complete_parts = whole.parts;
  HoldingEntry views = part_set(seal, gossip::kMaxPartSetParts);
  r.holdings = {whole, views};
  auto signed_record = sign_record(r, id);
  REQUIRE_MESSAGE(signed_record.is_ok(), signed_record.status().to_string());
  auto decoded = decode_record((*signed_record)->encoded);
  REQUIRE_MESSAGE(decoded.is_ok(), decoded.status().to_string());
  CHECK((*decoded)->record == r);
  CHECK((*decoded)->record.holdings[1].selection == views.selection);
  // 1024 parts cost two bitmaps of 128 bytes, against 1024 holdings of 50.
  CHECK(encoded_entry_bytes(whole) < 330);
  CHECK(encoded_entry_bytes(part_set(seal, 256)) < 160);
  CHECK(encoded_entry_bytes(HoldingEntry{"policy", 18, seal, 1000}) > 45);

  // Every rule is checked where a record is signed and where it is decoded.
  const auto refused = [&](HoldingEntry h, std::string_view why) {
    PeerRecord bad = sample_record(id);
    bad.holdings = {h};
    const Status s = validate_record(bad);
    CHECK_MESSAGE(s.code() == StatusCode::kInvalidArgument, why);
    CHECK_MESSAGE(s.message().find(why) != std::string::npos, s.message());
    CHECK(sign_record(bad, id).status().code() == StatusCode::kInvalidArgument);
  };
  HoldingEntry h = part_set(seal, 8);
  h.complete_parts.set(1);  // part 1 is not held
  refused(h, "part 1 is complete but not held");
  h = part_set(seal, 8);
  h.progress_permille = 1000;
  refused(h, "exactly when every part it holds is complete");
  h = part_set(seal, 8);
  h.complete_parts = h.parts;
  refused(h, "exactly when every part it holds is complete");
  h = part_set(seal, 8);
  h.parts.reset_all();
  h.complete_parts.reset_all();
  refused(h, "holds no part");
  h = part_set(seal, 8);
  h.complete_parts = core::Bitfield(9);
  refused(h, "with a complete bitmap of 9");
  h = part_set(seal, gossip::kMaxPartSetParts + 8);
  refused(h, "at most 1024");
  h = HoldingEntry{"policy", 18, seal, 10};
  h.selection = seal;
  refused(h, "a plain holding names a selection");
  PeerRecord twice = sample_record(id);
  twice.holdings = {part_set(seal, 8), part_set(seal, 8)};
  CHECK(validate_record(twice).message().find("repeat one") != std::string::npos);
}

TEST_CASE("records: any flipped bit is rejected, only the owner can sign") {
  const Identity id = identity(2);
  auto signed_record = sign_record(sample_record(id), id);
  REQUIRE(signed_record.is_ok());
  auto bytes = (*signed_record)->encoded;
  for (std::size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    bytes[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    if (decode_record(bytes).is_ok()) FAIL_CHECK("bit " << bit << " flipped and the record still verified");
    bytes[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
  }
  CHECK_FALSE(sign_record(sample_record(id), identity(3)).is_ok());
}

TEST_CASE("records: limits keep a record inside one datagram") {
  const Identity id = identity(4);
  PeerRecord r = sample_record(id);
  r.topology.dc = std::string(65, 'x');
  CHECK_FALSE(sign_record(r, id).is_ok());
  r = sample_record(id);
  std::swap(r.heads[0], r.heads[1]);
  CHECK(sign_record(r, id).status().message().find("sorted") != std::string::npos);
  r = sample_record(id);
  r.holdings.clear();
  for (int i = 0; i < 16; ++i) {
    r.holdings.push_back(HoldingEntry{std::string(60, 'm') + std::to_string(10 + i), 1, {}, 1000});
  }
  CHECK(sign_record(r, id).status().message().find("datagram budget") != std::string::npos);
}

namespace {

// `encoded` with the first `from` replaced by `to` (of the same length).
std::vector<std::uint8_t> replaced(std::vector<std::uint8_t> encoded, std::string_view from, std::string_view to) {
  REQUIRE(from.size() == to.size());
  auto at = std::search(encoded.begin(), encoded.end(), from.begin(), from.end(),
                        [](std::uint8_t a, char b) { return a == static_cast<std::uint8_t>(b); });
  REQUIRE(at != encoded.end());
  std::copy(to.begin(), to.end(), at);
  return encoded;
}

}  // namespace

TEST_CASE("records: strings a reader could choke on are refused, signed or decoded") {
  const Identity id = identity(8);
  auto refused = [&](auto change) {
    PeerRecord r = sample_record(id);
    change(r);
    return !sign_record(r, id).is_ok();
  };
  CHECK(refused([](PeerRecord& r) { r.topology.dc = "\xff"; }));
  CHECK(refused([](PeerRecord& r) { r.topology.rack = "rack\n12"; }));
  CHECK(refused([](PeerRecord& r) { r.gossip_addr = "node-3:7946"; }));   // a name costs a lookup
  CHECK(refused([](PeerRecord& r) { r.data_addr = "x.example:7947"; }));
  CHECK(refused([](PeerRecord& r) { r.heads[0].model = "crit\xc3\xa9"; }));
  CHECK(refused([](PeerRecord& r) { r.holdings[0].model = "../policy"; }));
  CHECK(refused([](PeerRecord& r) { r.groups[0].name = "inst\nance"; }));
  CHECK(refused([](PeerRecord& r) { r.groups[0].rank = 16; }));                // a rank is below the size
  CHECK(refused([](PeerRecord& r) { r.groups[0].size = 0; }));
  CHECK(refused([](PeerRecord& r) { r.groups[0].size = r.groups[0].rank = kMaxGroupSize + 1; }));
  CHECK(refused([](PeerRecord& r) { r.groups.push_back(r.groups[0]); }));        // one claim per group
  CHECK(refused([](PeerRecord& r) { r.groups.assign(kMaxRecordGroups + 1, r.groups[0]); }));
  CHECK_FALSE(refused([](PeerRecord& r) { r.groups.push_back(GroupEntry{"z", 1, 0}); }));
  CHECK_FALSE(refused([](PeerRecord& r) { r.gossip_addr = "[fe80::1]:7946"; }));
  CHECK_FALSE(refused([](PeerRecord& r) { r.data_addr.clear(); }));

  // A member that signs such a record by other means: every reader refuses
  // it when decoding, before it is stored or shown (status JSON).
  auto good = sign_record(sample_record(id), id);
  REQUIRE(good.is_ok());
  const auto& bytes = (*good)->encoded;
  auto label = decode_record(replaced(bytes, "dc-west", "dc\xff" "west"));
  REQUIRE_FALSE(label.is_ok());
  CHECK(label.status().message().find("printable ASCII") != std::string::npos);
  auto address = decode_record(replaced(bytes, "10.1.2.3:7946", "sinkhole:7946"));
  REQUIRE_FALSE(address.is_ok());
  CHECK(address.status().message().find("IP address") != std::string::npos);
  auto model = decode_record(replaced(bytes, "critic", "cr tic"));
  REQUIRE_FALSE(model.is_ok());
  CHECK(model.status().message().find("model name") != std::string::npos);
}

TEST_CASE("sealing: round trip, wrong key, any tampering") {
  const Identity id = identity(5);
  Sealer sealer(key_bytes(1), id.public_key(), 77);
  auto record = sign_record(sample_record(id), id);
  REQUIRE(record.is_ok());
  Packet p;
  p.sender = id.public_key();
  p.kind = PacketKind::kPingReq;
  p.probe_seq = 42;
  p.target = identity(6).public_key();
  p.target_addr = "10.9.9.9:7946";
  const std::vector<OutgoingItem> items = {*record, sign_liveness(id, Liveness::kDead, identity(7).public_key(), 9)};
  const Identity receiver = identity(6);
  const auto pair = derive_pair_key(id, receiver.public_key(), key_bytes(1));
  REQUIRE(pair);
  // Both ends derive the same key; a third party's differs.
  CHECK(derive_pair_key(receiver, id.public_key(), key_bytes(1)) == pair);
  const auto third = derive_pair_key(identity(7), id.public_key(), key_bytes(1));
  REQUIRE(third);
  CHECK(*third != *pair);
  CHECK(derive_pair_key(receiver, id.public_key(), key_bytes(2)) != pair);  // bound to the swarm key
  const auto sealed = sealer.seal_packet(*pair, p, items);
  CHECK(sealed.size() < 1400);

  Opened opened;
  REQUIRE(open_datagram(key_bytes(1), sealed, opened) == OpenError::kNone);
  CHECK(datagram_sender_proved(*pair, sealed));
  CHECK_FALSE(datagram_sender_proved(*third, sealed));  // meant for another receiver, or sent by another member
  CHECK(opened.sender == id.public_key());
  CHECK(opened.boot_id == 77);
  CHECK(opened.counter == 1);
  Packet back;
  std::vector<IncomingItem> got;
  REQUIRE(decode_packet(opened.plaintext, back, got).is_ok());
  CHECK(back.kind == PacketKind::kPingReq);
  CHECK(back.probe_seq == 42);
  CHECK(back.target == p.target);
  CHECK(back.target_addr == p.target_addr);
  REQUIRE(got.size() == 2);
  {
    // A ping-req's target address is an IP literal: a name would cost the
    // relay a lookup on its I/O thread.
    Packet named = p;
    named.target_addr = "sinkhole.test:7946";
    Opened o;
    Sealer other(key_bytes(1), id.public_key(), 78);
    REQUIRE(open_datagram(key_bytes(1), other.seal_packet(*pair, named, items), o) == OpenError::kNone);
    Packet out;
    std::vector<IncomingItem> got_named;
    const Status s = decode_packet(o.plaintext, out, got_named);
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.message().find("target address") != std::string::npos);
  }
  CHECK(std::get<RecordBytes>(got[0]).bytes == (*record)->encoded);
  const auto& claim = std::get<LivenessItem>(got[1]);
  CHECK(claim == std::get<LivenessItem>(items[1]));
  CHECK(verify_liveness(claim));
  // A claim is signed by its accuser: no field can change, and nobody can
  // sign in another's name.
  for (auto change : std::vector<std::function<void(LivenessItem&)>>{
           [](LivenessItem& l) { l.state = Liveness::kSuspect; },
           [](LivenessItem& l) { l.incarnation += 1; },
           [](LivenessItem& l) { l.target = identity(8).public_key(); },
           [](LivenessItem& l) { l.from = identity(8).public_key(); },
           [](LivenessItem& l) { l.signature.bytes[5] ^= 1; }}) {
    LivenessItem changed = claim;
    change(changed);
    CHECK_FALSE(verify_liveness(changed));
  }

  // Counters make every nonce unique.
  const auto second = sealer.seal_packet(*pair, p, {});
  Opened opened2;
  REQUIRE(open_datagram(key_bytes(1), second, opened2) == OpenError::kNone);
  CHECK(opened2.counter == 2);

  CHECK(open_datagram(key_bytes(2), sealed, opened) == OpenError::kAuthFailed);
  CHECK(open_sealed(key_bytes(1), true, sealed, opened) == OpenError::kBadMagic);  // not a stream frame
  CHECK(open_datagram(key_bytes(1), std::span(sealed).first(20), opened) == OpenError::kTooShort);
  auto tampered = sealed;
  for (std::size_t i = 0; i < tampered.size(); ++i) {
    tampered[i] ^= 0x01;
    if (open_datagram(key_bytes(1), tampered, opened) == OpenError::kNone && datagram_sender_proved(*pair, tampered)) {
      FAIL_CHECK("byte " << i);
    }
    tampered[i] ^= 0x01;
  }
}

TEST_CASE("stream messages: sync request, response and records round trip") {
  const Identity id = identity(8);
  Sealer sealer(key_bytes(3), id.public_key(), 1);
  std::vector<DigestEntry> digest = {{identity(9).public_key(), 5, 2, Liveness::kSuspect, 5},
                                     {identity(10).public_key(), 7, 0, Liveness::kAlive, 7}};
  auto frame = sealer.seal_stream(StreamKind::kSyncRequest, encode_sync_request(digest));
  Opened opened;
  REQUIRE(open_sealed(key_bytes(3), true, frame, opened) == OpenError::kNone);
  CHECK((opened.counter >> 63) == 1);  // the stream counter space
  PeerId sender;
  StreamBody body;
  REQUIRE(decode_stream(opened.plaintext, sender, body, 100).is_ok());
  CHECK(sender == id.public_key());
  const auto& request = std::get<SyncRequest>(body);
  REQUIRE(request.digest.size() == 2);
  CHECK(request.digest[0].liveness == Liveness::kSuspect);
  CHECK(request.digest[1].record_incarnation == 7);
  // The limit on entries holds.
  CHECK_FALSE(decode_stream(opened.plaintext, sender, body, 1).is_ok());

  auto record = sign_record(sample_record(id), id);
  const std::vector<OutgoingItem> items = {*record};
  const std::vector<PeerId> wants = {identity(11).public_key()};
  frame = sealer.seal_stream(StreamKind::kSyncResponse, encode_sync_response(items, wants));
  REQUIRE(open_sealed(key_bytes(3), true, frame, opened) == OpenError::kNone);
  REQUIRE(decode_stream(opened.plaintext, sender, body, 100).is_ok());
  const auto& response = std::get<SyncResponse>(body);
  CHECK(response.items.size() == 1);
  CHECK(response.wants == wants);
}

TEST_CASE("mutation: packet, stream and record decoders") {
  const std::uint64_t seed = testing::mutation_seed(0x5eed0003);
  INFO("seed " << seed << " (replay with TENSORHUB_MUTATION_SEED)");
  core::SplitMix64 rng(seed);
  const Identity id = identity(12);
  Sealer sealer(key_bytes(4), id.public_key(), 1);
  auto record = sign_record(sample_record(id), id);
  REQUIRE(record.is_ok());
  Packet p;
  p.sender = id.public_key();
  p.kind = PacketKind::kPing;
  p.probe_seq = 9;
  p.target = identity(13).public_key();
  const std::vector<OutgoingItem> items = {*record, sign_liveness(id, Liveness::kSuspect, identity(14).public_key(), 3)};
  const auto pair = derive_pair_key(id, identity(13).public_key(), key_bytes(4));
  REQUIRE(pair);
  Opened opened;
  REQUIRE(open_datagram(key_bytes(4), sealer.seal_packet(*pair, p, items), opened) == OpenError::kNone);
  const std::vector<std::uint8_t> packet_plain = opened.plaintext;
  const std::vector<DigestEntry> digest = {{identity(15).public_key(), 5, 2, Liveness::kAlive, 5}};
  REQUIRE(open_sealed(key_bytes(4), true, sealer.seal_stream(StreamKind::kSyncRequest, encode_sync_request(digest)),
                      opened) == OpenError::kNone);
  const std::vector<std::uint8_t> stream_plain = opened.plaintext;
  const std::vector<std::uint8_t> record_bytes = (*record)->encoded;

  int packets_ok = 0, streams_ok = 0, records_ok = 0;
  for (int i = 0; i < 4000; ++i) {
    {
      Packet out;
      std::vector<IncomingItem> got;
      const auto mutant = testing::mutate(packet_plain, rng);
      Status s = decode_packet(mutant, out, got);
      if (s.is_ok()) {
        ++packets_ok;
        CHECK(got.size() <= 64);
      } else {
        CHECK(s.message().find('\n') == std::string::npos);
      }
    }
    {
      PeerId sender;
      StreamBody body;
      const auto mutant = testing::mutate(stream_plain, rng);
      if (decode_stream(mutant, sender, body, 1000).is_ok()) ++streams_ok;
    }
    {
      const auto mutant = testing::mutate(record_bytes, rng);
      auto decoded = decode_record(mutant);
      if (decoded.is_ok()) {
        ++records_ok;
        CHECK(mutant == record_bytes);  // only the original verifies
      }
      (void)peek_record_version(mutant);
    }
    {
      // Sealed garbage: mutate the sealed bytes; nothing opens.
      const auto sealed = sealer.seal_packet(*pair, p, {});
      const auto mutant = testing::mutate(sealed, rng);
      Opened o;
      if (mutant != sealed) {
        CHECK((open_datagram(key_bytes(4), mutant, o) != OpenError::kNone || !datagram_sender_proved(*pair, mutant)));
      }
    }
  }
  MESSAGE("4000 mutants each: " << packets_ok << " packets, " << streams_ok << " stream messages still well-formed; "
                                << records_ok << " records verified (only unmodified ones)");
}
