// One authenticated data-plane TCP connection (asio).
//
// It runs the handshake of secure_channel.hpp, then carries length-prefixed
// sealed control frames ([u32 big-endian length][sealed message]). A frame
// that seals nothing is a keepalive, skipped by the reader. A piece
// header is followed by its payload: sent with one scatter-gather write
// straight from the holder's memory, and read straight into the destination
// span the handler names, so the payload is never copied in between.
//
// Ownership: the connection keeps itself alive (shared_ptr) while operations
// are pending; the handler must outlive it or close it first. Every callback
// runs on the io_context's thread.
#pragma once

#include <asio.hpp>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/time.hpp"
#include "tensorhub/identity.hpp"
#include "tensorhub/swarm_key.hpp"
#include "swarm/swarm_messages.hpp"
#include "seams/piece_source.hpp"
#include "transport/secure_channel.hpp"

namespace tensorhub::transport {

using swarm::MessageType;
using swarm::SwarmMessage;
using swarm::decode_swarm_message;
using swarm::encode_swarm_message;

class DataConnection;

// How long a connection may take to prove its peer a member, and how it
// finds out that an established one is dead.
struct DataConnectionTimeouts {
  Duration handshake = std::chrono::seconds(5);
  // An accepted socket must deliver its hello within this: an initiator
  // sends it at once, so a silent socket is an idle flood, not a slow peer.
  Duration hello = std::chrono::seconds(1);
  // With nothing written for this long, a keepalive goes out. A peer that
  // closed its socket while the path was down (gossip had declared us dead)
  // sent a reset that was lost, and its kernel says so again only when
  // something arrives: without the keepalive, a fetcher choked by that peer
  // has nothing to send and waits on the dead connection forever.
  Duration keepalive = std::chrono::seconds(2);
  // Bytes written and unacknowledged for this long close the connection
  // (TCP_USER_TIMEOUT): a peer that vanished without a reset.
  Duration unacknowledged = std::chrono::seconds(30);
  // A payload arriving is reported moving at most this often.
  Duration piece_progress = std::chrono::milliseconds(100);
  // A frame, or a payload read only to be thrown away, must arrive whole
  // within this plus its length at min_frame_bytes_per_second: a member that
  // sends a length and then drips is cut off. (Stored payloads are the
  // swarm core's: it gives up a landing that falls below its rate.)
  Duration frame = std::chrono::seconds(5);
  std::size_t min_frame_bytes_per_second = 256 * 1024;
  // Control messages queued and not yet written, in bytes: past this the
  // peer is not reading what it asks for, and the connection closes.
  std::size_t max_queued_control_bytes = 64u << 20;
};

class DataConnectionHandler {
 public:
  virtual ~DataConnectionHandler() = default;
  virtual void on_established(DataConnection& connection) = 0;
  virtual void on_message(DataConnection& connection, SwarmMessage message) = 0;
  // Where a piece's payload goes: pieces of memory appended to `out`, filled
  // in order (the payload may span regions of the destination). Pieces of
  // another total length than the payload discard it. The payload is
  // written there as it arrives, until on_piece; a close stops the writes
  // at once (the read is aborted on this thread), and then on_piece never
  // comes.
  virtual void piece_destination(DataConnection& connection, const SwarmMessage& header,
                                 std::vector<std::span<std::byte>>& out) = 0;
  virtual void on_piece(DataConnection& connection, const SwarmMessage& header, bool stored) = 0;
  // Bytes of a stored piece's payload arrived, and more are to come: the
  // payload is moving (at most one call per DataConnectionTimeouts::piece_progress).
  virtual void on_piece_progress(DataConnection& /*connection*/, const SwarmMessage& /*header*/) {}
  virtual void on_closed(DataConnection& connection, const Status& why) = 0;
};

class DataConnection : public std::enable_shared_from_this<DataConnection> {
 public:
  // To the peer `expected` at `to` (another that answers there is refused).
  // `lane`: which of the neighbour's connections this is (secure_channel.hpp).
  static std::shared_ptr<DataConnection> connect(asio::io_context& io, const asio::ip::tcp::endpoint& to,
                                                 const PeerId& expected, const Identity& identity,
                                                 const SwarmKey& swarm_key, DataConnectionHandler& handler,
                                                 DataConnectionTimeouts timeouts, std::uint8_t lane = 0);
  // `replays`: the peer's hellos accepted lately. REQUIRES: it outlives the
  // connection's handshake.
  static std::shared_ptr<DataConnection> accept(asio::ip::tcp::socket socket, const Identity& identity,
                                                const SwarmKey& swarm_key, HelloReplayCache& replays,
                                                DataConnectionHandler& handler, DataConnectionTimeouts timeouts);
  ~DataConnection();

  // A control message goes out before the pieces still queued (the one
  // being written finishes first); control messages keep their order, and
  // so do pieces.
  void send(const SwarmMessage& message);
  // The payload is `pieces` in order, sent with one gather write from where
  // they lie. REQUIRES: `source` owns their memory and keeps it unchanged;
  // it is held until the piece has left or been dropped, then told which.
  void send_piece(const SwarmMessage& header, std::span<const std::span<const std::byte>> pieces,
                  std::shared_ptr<PieceSource> source);
  // A payload in one piece.
  void send_piece(const SwarmMessage& header, std::span<const std::byte> payload, std::shared_ptr<PieceSource> source) {
    const std::span<const std::byte> one[] = {payload};
    send_piece(header, std::span<const std::span<const std::byte>>(one), std::move(source));
  }
  void close(const Status& why);
  // Drops a piece not yet being written (the requester cancelled it); its
  // source hears sent = false. Returns whether one was dropped.
  bool cancel_piece(swarm::RequestId request_id);
  // Drops every piece of `version` not yet being written (the requester was
  // choked); their sources hear sent = false. Returns how many.
  std::size_t cancel_pieces_of(const ManifestId& version_id);

  bool established() const { return established_; }
  bool closed() const { return closed_; }
  const PeerId& remote() const { return keys_.remote; }
  std::uint8_t lane() const { return keys_.lane; }  // once established
  std::uint64_t bytes_sent() const { return bytes_sent_; }
  std::uint64_t bytes_received() const { return bytes_received_; }
  std::uint64_t keepalives_sent() const { return keepalives_sent_; }
  std::uint64_t keepalives_received() const { return keepalives_received_; }
  // Memory held for reading: grows with the bytes of a frame that have
  // arrived, never with the length a frame claims.
  std::size_t read_buffer_capacity() const {
    return frame_buffer_.capacity() + plaintext_.capacity() + discard_buffer_.capacity();
  }
  // Encoded control messages queued and not yet written.
  std::size_t queued_control_bytes() const { return queued_control_bytes_; }

 private:
  struct Outgoing {
    std::vector<std::uint8_t> message;  // encoded, sealed when its turn comes
    bool piece = false;                 // a piece (its payload follows), not a control message
    swarm::RequestId cancel_id;         // a piece's request id (0: not cancellable)
    ManifestId version_id;              // a piece's version
    std::vector<std::span<const std::byte>> payload;  // capacity kept in spare_
    std::size_t payload_bytes = 0;
    std::shared_ptr<PieceSource> source;  // a piece's; null for a control message
  };

  DataConnection(asio::ip::tcp::socket socket, const Identity& identity, const SwarmKey& swarm_key,
                 DataConnectionHandler& handler, DataConnectionTimeouts timeouts);
  // TCP options, once the socket is connected.
  void configure_socket();
  void start_initiator(const PeerId& expected, std::uint8_t lane);
  void start_responder(HelloReplayCache& replays);
  // Closes the connection unless it is established within `limit`.
  void arm_handshake_timer(Duration limit);
  // Established: every `keepalive`, a keepalive if nothing was written since.
  void arm_keepalive_timer();
  void established(ChannelKeys keys);
  void write_next();
  // The entry at `it` is gone (sent or dropped): it moves to spare_, and its
  // source, if any, is told.
  void retire(std::list<Outgoing>& from, std::list<Outgoing>::iterator it, bool sent);
  // Drops the queued pieces (never the front, which may be on the wire) that
  // `match` accepts, up to `limit` of them.
  template <typename Match>
  std::size_t drop_queued(Match&& match, std::size_t limit);
  void read_frame_length();
  void read_frame(std::uint32_t length);
  void on_frame();
  // A frame or discarded payload of `length` bytes is under way / done.
  void start_partial(std::size_t length);
  void end_partial() { partial_deadline_ = std::chrono::steady_clock::time_point::max(); }
  void read_payload(SwarmMessage header);
  // Reads the rest of the payload into payload_destination_ past payload_done_.
  void read_payload_rest();

  asio::ip::tcp::socket socket_;
  const Identity& identity_;
  const SwarmKey swarm_key_;  // a copy: the connection may outlive whoever opened it
  DataConnectionHandler& handler_;
  const DataConnectionTimeouts timeouts_;
  asio::steady_timer timer_;  // the handshake's deadline, then the keepalive's tick
  std::optional<HandshakeInitiator> initiator_;
  std::optional<HandshakeResponder> responder_;
  std::vector<std::uint8_t> handshake_buffer_;
  ChannelKeys keys_;
  std::optional<FrameSealer> sealer_;
  std::optional<FrameOpener> opener_;
  std::array<std::uint8_t, 4> length_buffer_{};
  std::vector<std::uint8_t> frame_buffer_;
  std::size_t frame_length_ = 0;  // of the frame being read
  // When the frame (or discarded payload) under way must be complete.
  std::chrono::steady_clock::time_point partial_deadline_ = std::chrono::steady_clock::time_point::max();
  std::size_t queued_control_bytes_ = 0;
  bool closing_ = false;  // a close is posted
  std::vector<std::uint8_t> plaintext_;
  std::vector<std::byte> discard_buffer_;
  // The payload being read: its header, where it goes (pieces), how much has come.
  SwarmMessage payload_header_;
  std::vector<std::span<std::byte>> payload_destination_;
  std::size_t payload_length_ = 0;
  std::size_t payload_done_ = 0;
  std::vector<asio::mutable_buffer> read_buffers_;  // reused for each read of a payload
  bool payload_stored_ = false;
  std::chrono::steady_clock::time_point payload_progress_reported_;
  // Queued frames, the front being written; after the front, control
  // messages before pieces (each kind in the order sent). Finished entries move (splice)
  // to spare_ with their buffers and are reused, so steady sending
  // allocates nothing.
  std::list<Outgoing> outbox_;
  std::list<Outgoing> spare_;
  std::vector<std::uint8_t> write_frame_;  // the front's length prefix + sealed message, while writing
  std::vector<asio::const_buffer> write_buffers_;  // the front's frame and payload pieces, while writing
  bool writing_ = false;
  bool wrote_since_tick_ = false;
  bool established_ = false;
  bool closed_ = false;
  std::uint64_t bytes_sent_ = 0, bytes_received_ = 0;
  std::uint64_t keepalives_sent_ = 0, keepalives_received_ = 0;
};

}  // namespace tensorhub::transport
