#include <doctest/doctest.h>

#include "support/mutator.hpp"
#include "swarm/swarm_messages.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;

namespace {
std::vector<SwarmMessage> samples() {
  ManifestId v;
  v.bytes.fill(0x3c);
  std::vector<SwarmMessage> out;
  SwarmMessage m;
  m.version_id = v;
  m.type = MessageType::kBitfield;
  m.shard_count = 20;
  m.bytes = {0xff, 0x0f, 0xa0};
  out.push_back(m);
  m = SwarmMessage::about_shard(MessageType::kHave, v, ShardIndex{17});
  out.push_back(m);
  m = SwarmMessage::request(v, swarm::RequestId{99}, ShardIndex{3}, BlockIndex{5}, 3ull << 30, 1u << 20);
  out.push_back(m);
  m = SwarmMessage::about_request(MessageType::kCancel, v, swarm::RequestId{99});
  out.push_back(m);
  m = SwarmMessage::piece(v, swarm::RequestId{99}, 1u << 20);
  out.push_back(m);
  m = SwarmMessage::about_request(MessageType::kDeferred, v, swarm::RequestId{42});
  out.push_back(m);
  m = SwarmMessage::with_bytes(MessageType::kPeers, v, std::vector<std::uint8_t>(2 * PeerId::kSize, 0x5a));
  out.push_back(m);
  m = SwarmMessage::refuse(v, swarm::RequestId{7}, {'n', 'o'});
  out.push_back(m);
  m = SwarmMessage::with_bytes(MessageType::kManifest, v, std::vector<std::uint8_t>(3000, 1));
  out.push_back(m);
  m = SwarmMessage::about_shard(MessageType::kFetching, v, ShardIndex{4});
  out.push_back(m);
  m = SwarmMessage::with_bytes(MessageType::kGroup, {}, std::vector<std::uint8_t>(swarm::kMaxGroupBytes, 7));
  out.push_back(m);
  m = SwarmMessage::about_shard(MessageType::kNotFetching, v, ShardIndex{4});
  out.push_back(m);
  m = SwarmMessage::with_bytes(MessageType::kServeView, v, std::vector<std::uint8_t>(32 + 90, 0x21));
  out.push_back(m);
  for (auto t : {MessageType::kInterested, MessageType::kNotInterested, MessageType::kChoke,
                 MessageType::kUnchoke, MessageType::kGetManifest, MessageType::kNoManifest, MessageType::kSuperSeed,
                 MessageType::kUnknownVersion, MessageType::kViewServed}) {
    out.push_back(SwarmMessage::signal(t, v));
  }
  return out;
}
}  // namespace

TEST_CASE("data messages: every type round trips") {
  for (const SwarmMessage& m : samples()) {
    const auto bytes = encode_swarm_message(m);
    auto back = decode_swarm_message(bytes);
    REQUIRE_MESSAGE(back.is_ok(), message_type_name(m.type) << ": " << back.status().to_string());
    CHECK(back->type == m.type);
    CHECK(back->version_id == m.version_id);
    CHECK(back->request_id == m.request_id);
    CHECK(back->shard == m.shard);
    CHECK(back->block == m.block);
    CHECK(back->offset == m.offset);
    CHECK(back->length == m.length);
    CHECK(back->bytes == m.bytes);
    CHECK(encode_swarm_message(*back) == bytes);
  }
}

TEST_CASE("data messages: bounds and shapes are enforced") {
  SwarmMessage m = samples()[0];
  m.shard_count = 30;  // bits for 20
  CHECK(decode_swarm_message(encode_swarm_message(m)).status().message().find("shard count") != std::string::npos);
  m = samples()[2];
  m.length = kMaxBlockBytes + 1;
  CHECK_FALSE(decode_swarm_message(encode_swarm_message(m)).is_ok());
  auto bytes = encode_swarm_message(samples()[1]);
  bytes[1] = 99;  // an unknown type
  CHECK(decode_swarm_message(bytes).status().message().find("unknown data message type") != std::string::npos);
  SwarmMessage peers{MessageType::kPeers, m.version_id, {}, {}, {}, 0, 0, 0, std::vector<std::uint8_t>(PeerId::kSize + 1, 1)};
  CHECK(decode_swarm_message(encode_swarm_message(peers)).status().message().find("whole number of peer ids") !=
        std::string::npos);
  // A request to serve a view names a part and carries its table.
  const SwarmMessage bare = SwarmMessage::with_bytes(MessageType::kServeView, m.version_id, std::vector<std::uint8_t>(32, 1));
  CHECK(decode_swarm_message(encode_swarm_message(bare)).status().message().find("no tensor table") !=
        std::string::npos);
  peers.bytes.assign((kMaxPeersListed + 1) * PeerId::kSize, 1);
  CHECK_FALSE(decode_swarm_message(encode_swarm_message(peers)).is_ok());
  bytes = encode_swarm_message(samples()[1]);
  bytes.push_back(0);
  CHECK(decode_swarm_message(bytes).status().message().find("trailing") != std::string::npos);
}

TEST_CASE("mutation: data message decoder") {
  const std::uint64_t seed = testing::mutation_seed(0x5eed0004);
  INFO("seed " << seed);
  core::SplitMix64 rng(seed);
  int accepted = 0;
  for (int i = 0; i < 5000; ++i) {
    const auto all = samples();
    const auto original = encode_swarm_message(all[rng.below(all.size())]);
    const auto mutant = testing::mutate(original, rng);
    auto decoded = decode_swarm_message(mutant);
    if (!decoded.is_ok()) {
      CHECK(decoded.status().message().find('\n') == std::string::npos);
      continue;
    }
    ++accepted;
    CHECK(encode_swarm_message(*decoded) == mutant);  // accepted means canonical
  }
  MESSAGE("5000 mutants, " << accepted << " still well-formed (and canonical)");
}
