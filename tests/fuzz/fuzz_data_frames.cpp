// libFuzzer target: the data plane after the handshake. The first byte picks
// the layer: a control frame's plaintext (every swarm message type), or a
// sealed frame as it comes off the socket. A decoded message must encode
// back to bytes that decode to the same message; nothing may crash.
#include <cstdlib>

#include "swarm/swarm_messages.hpp"
#include "transport/secure_channel.hpp"

using namespace tensorhub;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::uint8_t> input(data + 1, size - 1);
  switch (data[0] % 2) {
    case 0: {
      auto message = swarm::decode_swarm_message(input);
      if (!message.is_ok()) break;
      const auto again = swarm::decode_swarm_message(swarm::encode_swarm_message(*message));
      if (!again.is_ok() || again->type != message->type || again->version_id != message->version_id ||
          again->bytes != message->bytes || again->length != message->length) {
        std::abort();
      }
      break;
    }
    case 1: {
      transport::FrameOpener opener(core::AeadKey{});
      std::vector<std::uint8_t> plaintext;
      if (opener.open(input, plaintext)) (void)swarm::decode_swarm_message(plaintext);
      break;
    }
  }
  return 0;
}
