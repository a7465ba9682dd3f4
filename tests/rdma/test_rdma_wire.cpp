// The RDMA session messages: round trips, one-line rejections, mutations.
#include <doctest/doctest.h>

#include "rdma/rdma_wire.hpp"
#include "support/mutator.hpp"

using namespace tensorhub;
using namespace tensorhub::rdma;

namespace {

RdmaMessage sample_offer() {
  OfferedNic a;
  a.gid[0] = 0xfe;
  a.gid[15] = 7;
  a.mtu = 5;
  a.responder_depth = 16;
  a.requester_depth = 16;
  OfferedNic b = a;
  b.gid[15] = 8;
  b.mtu = 3;
  return RdmaMessage::offer({a, b}, {{0, 0x123, 0xabcdef}, {0, 0x124, 1}, {1, 0x200, 2}, {1, 0x201, 3}});
}

RdmaMessage sample_grant() {
  ManifestId v;
  v.bytes[0] = 9;
  return RdmaMessage::grant(v, {{0, 0x7f0000001000, 4096, {11, 12}}, {4096, 0x7f0000100000, 1 << 20, {13, 14}}});
}

void check_one_line_corrupt(const Status& s) {
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(!s.message().empty());
  CHECK(s.message().find('\n') == std::string::npos);
}

}  // namespace

TEST_CASE("rdma wire: every kind round-trips byte for byte") {
  ManifestId v;
  v.bytes[31] = 1;
  const RdmaMessage messages[] = {sample_offer(), RdmaMessage::ready(), RdmaMessage::about(RdmaMessageKind::kAskGrant, v),
                                  sample_grant(), RdmaMessage::about(RdmaMessageKind::kNoGrant, v),
                                  RdmaMessage::about(RdmaMessageKind::kRevoke, v)};
  for (const RdmaMessage& m : messages) {
    const auto bytes = encode_rdma_message(m);
    auto back = decode_rdma_message(bytes);
    REQUIRE(back.is_ok());
    CHECK(back->kind == m.kind);
    CHECK(encode_rdma_message(*back) == bytes);
  }
  auto offer = decode_rdma_message(encode_rdma_message(sample_offer()));
  REQUIRE(offer.is_ok());
  CHECK(offer->nics.size() == 2);
  CHECK(offer->nics[1].mtu == 3);
  CHECK(offer->queue_pairs[0].psn == 0xabcdef);
  CHECK(offer->queue_pairs[3].nic == 1);
  auto grant = decode_rdma_message(encode_rdma_message(sample_grant()));
  REQUIRE(grant.is_ok());
  CHECK(grant->regions[1].offset == 4096);
  CHECK(grant->regions[1].rkeys == std::vector<std::uint32_t>{13, 14});
}

TEST_CASE("rdma wire: malformed messages are refused with the reason") {
  auto reason = [](RdmaMessage m) {
    auto r = decode_rdma_message(encode_rdma_message(m));
    REQUIRE_FALSE(r.is_ok());
    check_one_line_corrupt(r.status());
    return r.status().message();
  };
  RdmaMessage m = sample_offer();
  m.queue_pairs[2].nic = 2;
  CHECK(reason(m).find("names no offered NIC") != std::string::npos);
  m = sample_offer();
  m.nics[0].mtu = 0;
  CHECK(reason(m).find("not an MTU") != std::string::npos);
  m = sample_offer();
  m.queue_pairs[0].qpn = 1u << 24;
  CHECK(reason(m).find("qpn") != std::string::npos);
  m = sample_offer();
  m.queue_pairs.clear();
  CHECK_MESSAGE(reason(m).find("at least one queue pair") != std::string::npos, reason(m));
  m = sample_offer();
  m.nics.clear();
  m.queue_pairs.clear();
  CHECK(reason(m).find("at least one NIC") != std::string::npos);
  m = sample_grant();
  m.regions[1].offset = 100;  // overlaps the first
  CHECK(reason(m).find("overlaps") != std::string::npos);
  m = sample_grant();
  m.regions[0].length = 0;
  CHECK(reason(m).find("empty region") != std::string::npos);
  m = sample_grant();
  m.regions[1].addr = ~std::uint64_t{0} - 10;
  CHECK(reason(m).find("wraps") != std::string::npos);
  m = sample_grant();
  m.regions[0].rkeys.clear();
  CHECK(reason(m).find("without a key") != std::string::npos);

  std::vector<std::uint8_t> unknown = {0x91, 0x07};  // [7]
  auto r = decode_rdma_message(unknown);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message().find("unknown rdma message kind 7") != std::string::npos);
  std::vector<std::uint8_t> extra = encode_rdma_message(RdmaMessage::ready());
  extra[0] = 0x92;
  extra.push_back(0);
  r = decode_rdma_message(extra);
  REQUIRE_FALSE(r.is_ok());
  check_one_line_corrupt(r.status());
  // A count that claims more regions than the bytes could hold allocates nothing.
  std::vector<std::uint8_t> claims = encode_rdma_message(RdmaMessage::grant(ManifestId{}, {}));
  claims.back() = 0xdd;  // array 32: a 4-byte count follows
  claims.insert(claims.end(), {0x00, 0x00, 0x10, 0x00});
  r = decode_rdma_message(claims);
  REQUIRE_FALSE(r.is_ok());
  check_one_line_corrupt(r.status());
}

TEST_CASE("mutation: rdma session decoder") {
  const std::uint64_t seed = testing::mutation_seed(0x5eed0031);
  INFO("seed " << seed << " (replay with TENSORHUB_MUTATION_SEED)");
  core::SplitMix64 rng(seed);
  const std::vector<std::uint8_t> valid[] = {encode_rdma_message(sample_offer()), encode_rdma_message(sample_grant())};
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    const auto mutant = testing::mutate(valid[i % 2], rng);
    auto decoded = decode_rdma_message(mutant);
    if (!decoded.is_ok()) {
      check_one_line_corrupt(decoded.status());
      continue;
    }
    ++accepted;
    CHECK(encode_rdma_message(*decoded) == mutant);  // accepted means canonical
    for (const auto& q : decoded->queue_pairs) CHECK(q.nic < decoded->nics.size());
  }
  MESSAGE(accepted << " of 20000 mutants were valid messages");
}
