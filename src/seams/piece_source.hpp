// What a piece's payload is sent from.
//
// A data connection holds a shared reference to the source of every piece it
// has queued, so the payload's memory outlives the write that reads it, and
// tells the source once the piece has left or was dropped (cancelled, or the
// connection closed). One reference count instead of a callback object per
// piece: sending a block allocates nothing.
#pragma once

#include <cstdint>

namespace tensorhub::transport {

class PieceSource {
 public:
  virtual ~PieceSource() = default;
  // Runs on the connection's I/O thread, once per piece sent from this source.
  virtual void on_piece_sent(std::uint32_t length, bool sent) = 0;
};

}  // namespace tensorhub::transport
