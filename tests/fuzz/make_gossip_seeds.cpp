// Writes valid seed inputs for fuzz_gossip into a directory: a datagram
// plaintext, a stream plaintext, a signed record and a sealed datagram, each
// behind its selector byte.
#include <array>
#include <string>

#include "seed_file.hpp"
#include "gossip/gossip_wire.hpp"

using namespace tensorhub;
using namespace tensorhub::gossip;

int main(int argc, char** argv) {
  const auto seeds = fuzz::seed_dir(argc, argv);
  if (!seeds) return 2;
  const std::string& dir = *seeds;
  std::array<std::uint8_t, 32> seed{};
  seed[0] = 1;
  const Identity id = Identity::from_seed(seed);
  PeerRecord r;
  r.id = id.public_key();
  r.incarnation = 17;
  r.gossip_addr = "10.0.0.1:7946";
  r.topology = Topology{"dc", "rack", "host"};
  r.heads = {HeadEntry{"policy", 3, {}}};
  // A plain holding, and a part set of v4 (the compact form: three of 12 parts' views of a selection).
  HoldingEntry views{"policy", 4, {}, 300};
  views.selection = ManifestId{};
  views.parts = core::Bitfield(12);
  views.complete_parts = core::Bitfield(12);
  for (std::size_t i : {0, 5, 11}) views.parts.set(i);
  views.complete_parts.set(5);
  r.holdings = {HoldingEntry{"policy", 3, {}, 1000}, views};
  r.groups = {GroupEntry{"instance-0", 2, 1}};
  const RecordPtr record = *sign_record(r, id);
  fuzz::write_seed(dir + "/record", 2, record->encoded);

  core::AeadKey key{};
  Sealer sealer(key, id.public_key(), 1);
  Packet p;
  p.sender = id.public_key();
  p.kind = PacketKind::kPingReq;
  p.probe_seq = 5;
  p.target = id.public_key();
  p.target_addr = "10.0.0.2:7946";
  const std::vector<OutgoingItem> items = {record, sign_liveness(id, Liveness::kSuspect, id.public_key(), 3)};
  const auto sealed = sealer.seal_packet(PairKey{}, p, items);
  fuzz::write_seed(dir + "/sealed", 3, sealed);
  Opened opened;
  open_datagram(key, sealed, opened);
  fuzz::write_seed(dir + "/packet", 0, opened.plaintext);
  const std::vector<DigestEntry> digest = {{id.public_key(), 17, 0, Liveness::kAlive, 17}};
  open_sealed(key, true, sealer.seal_stream(StreamKind::kSyncRequest, encode_sync_request(digest)), opened);
  fuzz::write_seed(dir + "/stream-request", 1, opened.plaintext);
  const std::vector<PeerId> wants = {id.public_key()};
  open_sealed(key, true, sealer.seal_stream(StreamKind::kSyncResponse, encode_sync_response(items, wants)), opened);
  fuzz::write_seed(dir + "/stream-response", 1, opened.plaintext);
  return 0;
}
