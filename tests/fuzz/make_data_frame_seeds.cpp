// Writes valid seed inputs for fuzz_data_frames into a directory: one
// control message of each shape, and a sealed frame holding a request, each
// behind its selector byte.
#include <string>

#include "seed_file.hpp"
#include "swarm/swarm_messages.hpp"
#include "transport/secure_channel.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;

int main(int argc, char** argv) {
  const auto seeds = fuzz::seed_dir(argc, argv);
  if (!seeds) return 2;
  const std::string& dir = *seeds;
  ManifestId v;
  v.bytes.fill(7);
  const std::vector<SwarmMessage> messages = {
      SwarmMessage::signal(MessageType::kChoke, v),
      SwarmMessage::about_shard(MessageType::kHave, v, ShardIndex{3}),
      SwarmMessage::with_bits(MessageType::kBitfield, v, 12, {0xff, 0x0f}),
      SwarmMessage::request(v, swarm::RequestId{9}, ShardIndex{2}, BlockIndex{1}, 3u << 20, 1u << 20),
      SwarmMessage::about_request(MessageType::kCancel, v, swarm::RequestId{9}),
      SwarmMessage::piece(v, swarm::RequestId{9}, 1u << 20),
      SwarmMessage::refuse(v, swarm::RequestId{9}, {'n', 'o'}),
      SwarmMessage::with_bytes(MessageType::kPeers, v, std::vector<std::uint8_t>(64, 1)),
      SwarmMessage::with_bytes(MessageType::kServeView, v, std::vector<std::uint8_t>(100, 2)),
      SwarmMessage::signal(MessageType::kViewServed, v),
  };
  int n = 0;
  for (const auto& m : messages) fuzz::write_seed(dir + "/message-" + std::to_string(n++), 0, encode_swarm_message(m));
  transport::FrameSealer sealer(core::AeadKey{});
  fuzz::write_seed(dir + "/sealed", 1, sealer.seal(encode_swarm_message(messages[3])));
  return 0;
}
