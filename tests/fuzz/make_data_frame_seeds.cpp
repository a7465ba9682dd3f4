// Writes valid seed inputs for fuzz_data_frames into a directory: one
// control message of each shape, and a sealed frame holding a request, each
// behind its selector byte.
#include <cstdio>
#include <fstream>
#include <string>

#include "swarm/swarm_messages.hpp"
#include "transport/secure_channel.hpp"

using namespace tensorhub;
using namespace tensorhub::swarm;

namespace {
void write(const std::string& path, std::uint8_t selector, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.put(static_cast<char>(selector));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  ManifestId v;
  v.bytes.fill(7);
  const std::vector<SwarmMessage> messages = {
      SwarmMessage::signal(MessageType::kChoke, v),
      SwarmMessage::about_shard(MessageType::kHave, v, ShardIndex{3}),
      SwarmMessage::with_bits(MessageType::kBitfield, v, 12, {0xff, 0x0f}),
      SwarmMessage::request(v, 9, ShardIndex{2}, BlockIndex{1}, 3u << 20, 1u << 20),
      SwarmMessage::about_request(MessageType::kCancel, v, 9),
      SwarmMessage::piece(v, 9, 1u << 20),
      SwarmMessage::refuse(v, 9, {'n', 'o'}),
      SwarmMessage::with_bytes(MessageType::kPeers, v, std::vector<std::uint8_t>(64, 1)),
  };
  int n = 0;
  for (const auto& m : messages) write(dir + "/message-" + std::to_string(n++), 0, encode_swarm_message(m));
  transport::FrameSealer sealer(core::AeadKey{});
  write(dir + "/sealed", 1, sealer.seal(encode_swarm_message(messages[3])));
  return 0;
}
