// The TCP data transport: authenticated data connections (transport::
// DataConnection), one link per neighbour with extra lanes when asked, the
// duplicate-connection tie-break of data_links.hpp, and an acceptor.
//
// The acceptor admits at most kMaxHandshakes inbound handshakes at once,
// and kMaxHandshakesPerAddress from one address: a connection from an
// address at its share is closed at once; past the overall cap, the oldest
// handshake from an address no member has (set_member_address) is closed,
// so a flood from many addresses cannot push a member's handshake out. It accepts at most kAcceptsPerSecond (a burst of
// kAcceptBurst): past that the kernel's listen queue holds the rest, so a
// flood of connections costs at most that many accepts' CPU (about 7 us
// each). A socket that sends no hello within a second is closed
// (DataConnectionTimeouts::hello). An accept error (out of descriptors, say)
// backs off 100 ms instead of spinning on a listening socket that stays
// readable. So idle connections from outside cost a bounded number of
// descriptors and a bounded share of the I/O thread.
#pragma once

#include <asio.hpp>
#include <deque>
#include <functional>
#include <utility>
#include <optional>

#include "core/host_port.hpp"
#include "transport/data_links.hpp"
#include "seams/data_transport.hpp"
#include "tensorhub/identity.hpp"
#include "tensorhub/swarm_key.hpp"
#include "transport/data_connection.hpp"

namespace tensorhub::peer {

class TcpTransport final : public DataTransport, private transport::DataConnectionHandler {
 public:
  // Where a peer's data plane listens (from its gossip record); nothing:
  // unknown or not an IP address (a connect then fails).
  using AddressOf = std::function<std::optional<asio::ip::tcp::endpoint>(const PeerId&)>;

  // `lanes`: TCP connections per neighbour this side opens (1 to kMaxLanes).
  TcpTransport(asio::io_context& io, const Identity& identity, const SwarmKey& swarm_key, TransportEvents& events,
               std::size_t lanes, AddressOf address_of);
  ~TcpTransport() override;

  // Binds and accepts. Errors: kInvalidArgument (not an IP address),
  // kUnavailable (cannot bind).
  Status listen(const core::HostPort& at);
  const core::HostPort& bound() const { return bound_; }
  // Connections (either way) with a peer `admits` refuses are closed once
  // authenticated. Unset: anyone holding the swarm key.
  void set_admission(std::function<bool(const PeerId&)> admits) { links_.set_admission(std::move(admits)); }
  // Whether an address is a member's (from gossip records): when the
  // handshakes in flight are at the cap, those from other addresses are
  // closed first. Unset: no address is preferred.
  void set_member_address(std::function<bool(const asio::ip::address&)> is_member) {
    member_address_ = std::move(is_member);
  }
  // Inbound handshakes closed to stay within the caps.
  std::uint64_t handshakes_shed() const { return handshakes_shed_; }

  static constexpr std::size_t kMaxHandshakes = 64;
  static constexpr std::size_t kMaxHandshakesPerAddress = 8;
  static constexpr double kAcceptsPerSecond = 20000;
  static constexpr double kAcceptBurst = 2000;

  std::string_view name() const override { return "tcp"; }
  void connect(const PeerId& peer) override;
  void disconnect(const PeerId& peer, const std::string& reason) override;
  void send(const PeerId& peer, const swarm::SwarmMessage& message) override;
  void send_piece(const PeerId& peer, const swarm::SwarmMessage& header, std::span<const std::span<const std::byte>> pieces,
                  std::shared_ptr<transport::PieceSource> source) override;
  void cancel_piece(const PeerId& peer, swarm::RequestId request_id) override;
  void cancel_pieces_of(const PeerId& peer, const ManifestId& version_id) override;
  std::vector<LinkStats> links() const override;
  void close() override;

 private:
  void accept();
  // Starts the handshake of an accepted socket, within the caps.
  void admit(asio::ip::tcp::socket socket);
  // DataConnectionHandler
  void on_established(transport::DataConnection& connection) override;
  void on_message(transport::DataConnection& connection, swarm::SwarmMessage message) override;
  void piece_destination(transport::DataConnection& connection, const swarm::SwarmMessage& header,
                         std::vector<std::span<std::byte>>& out) override;
  void on_piece(transport::DataConnection& connection, const swarm::SwarmMessage& header, bool stored) override;
  void on_piece_progress(transport::DataConnection& connection, const swarm::SwarmMessage& header) override;
  void on_closed(transport::DataConnection& connection, const Status& why) override;

  asio::io_context& io_;
  const Identity& identity_;
  const SwarmKey& swarm_key_;
  TransportEvents& events_;
  std::size_t lanes_;
  AddressOf address_of_;
  transport::DataConnectionTimeouts timeouts_{};
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer accept_backoff_;  // after an accept error, or out of accept budget
  double accept_tokens_ = kAcceptBurst;
  std::chrono::steady_clock::time_point accept_tokens_at_ = std::chrono::steady_clock::now();
  transport::HelloReplayCache hello_replays_;
  // Inbound connections in their handshake, oldest first, with their address.
  std::deque<std::pair<std::weak_ptr<transport::DataConnection>, asio::ip::address>> handshaking_;
  std::uint64_t handshakes_shed_ = 0;
  std::function<bool(const asio::ip::address&)> member_address_;
  core::HostPort bound_;
  DataLinks<transport::DataConnection> links_;
  bool closed_ = false;
};

}  // namespace tensorhub::peer
