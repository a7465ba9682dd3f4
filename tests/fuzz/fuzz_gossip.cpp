// libFuzzer target: every gossip decoder on arbitrary bytes. The first byte
// picks the decoder; the rest is the input. Decoders must reject with a
// reason or accept within their bounds; nothing may crash.
#include <cstdlib>

#include "gossip/gossip_wire.hpp"

using namespace tensorhub;
using namespace tensorhub::gossip;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::uint8_t> input(data + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      Packet packet;
      std::vector<IncomingItem> items;
      if (decode_packet(input, packet, items).is_ok() && items.size() > 64) std::abort();
      break;
    }
    case 1: {
      PeerId sender;
      StreamBody body;
      (void)decode_stream(input, sender, body, 1024);
      break;
    }
    case 2: {
      auto record = decode_record(input);
      if (record.is_ok() && record.value()->encoded.size() > kMaxRecordBytes) std::abort();
      (void)peek_record_version(input);
      break;
    }
    case 3: {
      tensorhub::core::AeadKey key{};
      Opened opened;
      if ((size & 1) != 0) {
        (void)open_sealed(key, true, input, opened);
      } else if (open_datagram(key, input, opened) == OpenError::kNone) {
        (void)datagram_sender_proved(PairKey{}, input);
      }
      break;
    }
  }
  return 0;
}
