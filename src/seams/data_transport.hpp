// The data-transport seam: how blocks and control messages reach a
// neighbour. TCP (tcp_transport.hpp) carries everything; the RDMA transport
// (rdma_transport.hpp) sits on it and moves the payloads of the requests it
// can by one-sided READ, per neighbour. Neither the peer core nor the swarm
// core changes for a transport.
//
// A transport reports to TransportEvents, on the driver's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "swarm/swarm_messages.hpp"
#include "tensorhub/ids.hpp"
#include "seams/piece_source.hpp"

namespace tensorhub::peer {

class TransportEvents {
 public:
  virtual ~TransportEvents() = default;
  virtual void on_connected(const PeerId& peer) = 0;
  virtual void on_connect_failed(const PeerId& peer) = 0;
  virtual void on_disconnected(const PeerId& peer) = 0;
  virtual void on_message(const PeerId& peer, const swarm::SwarmMessage& message) = 0;
  // Where a piece's payload goes (pieces of memory, filled in order); none: discard it.
  virtual void piece_destination(const PeerId& peer, const swarm::SwarmMessage& header,
                                 std::vector<std::span<std::byte>>& out) = 0;
  virtual void on_piece_progress(const PeerId& peer, const swarm::SwarmMessage& header) = 0;
  virtual void on_piece(const PeerId& peer, const swarm::SwarmMessage& header, bool stored) = 0;
  // The payload whose destination was given could not be brought whole (an
  // RDMA READ failed): the block is asked for again and its holder is not blamed.
  virtual void on_piece_lost(const PeerId& peer, const swarm::SwarmMessage& header) = 0;
};

// Bytes a transport carried to and from one neighbour, per lane.
struct LinkStats {
  PeerId peer;
  struct Lane {
    std::size_t lane = 0;
    std::uint64_t bytes_sent = 0, bytes_received = 0;
  };
  std::vector<Lane> lanes;
};

class DataTransport {
 public:
  virtual ~DataTransport() = default;
  virtual std::string_view name() const = 0;
  // Opens a connection to `peer` unless one is open or opening; on_connected
  // or on_connect_failed follows (at once when already connected).
  virtual void connect(const PeerId& peer) = 0;
  virtual void disconnect(const PeerId& peer, const std::string& reason) = 0;
  // A control message or a request; sent once a connection is open (one is opened if needed).
  virtual void send(const PeerId& peer, const swarm::SwarmMessage& message) = 0;
  // A piece: `header` then `pieces` in order. `source` owns their memory
  // and hears when the piece has left or been dropped.
  virtual void send_piece(const PeerId& peer, const swarm::SwarmMessage& header,
                          std::span<const std::span<const std::byte>> pieces,
                          std::shared_ptr<transport::PieceSource> source) = 0;
  // Pieces still queued are not sent: one (by request id), or every one of a version.
  virtual void cancel_piece(const PeerId& peer, swarm::RequestId request_id) = 0;
  virtual void cancel_pieces_of(const PeerId& peer, const ManifestId& version_id) = 0;
  virtual std::vector<LinkStats> links() const = 0;
  // Closes every connection; no event follows.
  virtual void close() = 0;
};

}  // namespace tensorhub::peer
