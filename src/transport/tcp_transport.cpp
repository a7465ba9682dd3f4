#include "transport/tcp_transport.hpp"

#include <algorithm>

#include "core/log.hpp"

namespace tensorhub::peer {
namespace {

constexpr const char* kLog = "data";

}  // namespace

TcpTransport::TcpTransport(asio::io_context& io, const Identity& identity, const SwarmKey& swarm_key,
                           TransportEvents& events, std::size_t lanes, AddressOf address_of)
    : io_(io),
      identity_(identity),
      swarm_key_(swarm_key),
      events_(events),
      lanes_(lanes),
      address_of_(std::move(address_of)),
      acceptor_(io),
      accept_backoff_(io),
      links_(identity.public_key()) {}

TcpTransport::~TcpTransport() { close(); }

Status TcpTransport::listen(const core::HostPort& at) {
  std::error_code ec;
  const auto address = asio::ip::make_address(at.host, ec);
  if (ec) return Status::invalid_argument("data listen host '" + at.host + "' is not an IP address");
  const asio::ip::tcp::endpoint endpoint(address, at.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::unavailable("cannot listen for data on " + at.to_string() + ": " + ec.message());
  bound_ = core::HostPort{at.host, acceptor_.local_endpoint().port()};
  accept();
  return Status::ok();
}

void TcpTransport::accept() {
  // A token bucket on accepts: a flood waits in the kernel's listen queue
  // instead of taking the I/O thread.
  const auto now = std::chrono::steady_clock::now();
  accept_tokens_ = std::min(kAcceptBurst, accept_tokens_ + std::chrono::duration<double>(now - accept_tokens_at_).count() *
                                                             kAcceptsPerSecond);
  accept_tokens_at_ = now;
  if (accept_tokens_ < 1.0) {
    accept_backoff_.expires_after(std::chrono::milliseconds(10));
    accept_backoff_.async_wait([this](std::error_code wait_ec) {
      if (!wait_ec && !closed_) accept();
    });
    return;
  }
  accept_tokens_ -= 1.0;
  acceptor_.async_accept([this](std::error_code ec, asio::ip::tcp::socket socket) {
    if (closed_) return;
    if (!ec) {
      admit(std::move(socket));
    } else if (ec != asio::error::operation_aborted) {
      // EMFILE, say: the listening socket stays readable, so accepting again
      // at once would spin the I/O thread. Back off, as gossip's acceptor does.
      TH_LOG_WARN(kLog, "data accept failed: " << ec.message() << "; retrying in 100 ms");
      accept_backoff_.expires_after(std::chrono::milliseconds(100));
      accept_backoff_.async_wait([this](std::error_code wait_ec) {
        if (!wait_ec && !closed_) accept();
      });
      return;
    }
    accept();
  });
}

void TcpTransport::admit(asio::ip::tcp::socket socket) {
  std::error_code ec;
  const asio::ip::address from = socket.remote_endpoint(ec).address();
  if (ec) return;  // gone already
  std::erase_if(handshaking_, [](const auto& entry) {
    auto c = entry.first.lock();
    return !c || c->established() || c->closed();
  });
  auto shed_oldest = [&](const auto& match) {
    for (auto it = handshaking_.begin(); it != handshaking_.end(); ++it) {
      if (!match(it->second)) continue;
      auto c = it->first.lock();
      handshaking_.erase(it);
      ++handshakes_shed_;
      if (c) c->close(Status::unavailable("too many handshakes in flight"));
      return true;
    }
    return false;
  };
  const auto is_member = [&](const asio::ip::address& a) { return member_address_ && member_address_(a); };
  const auto same = std::count_if(handshaking_.begin(), handshaking_.end(),
                                  [&](const auto& entry) { return entry.second == from; });
  if (static_cast<std::size_t>(same) >= kMaxHandshakesPerAddress) {
    // That address has its share in flight: this one goes at once, before
    // it costs a connection object (a flood from one address costs the
    // accept and the close).
    ++handshakes_shed_;
    socket.close(ec);
    return;
  }
  if (handshaking_.size() >= kMaxHandshakes) {
    // Full: a handshake from an address no member has makes room first, so
    // a flood from many addresses cannot push a member's handshake out. A
    // newcomer from such an address, when members fill every slot, goes.
    if (!shed_oldest([&](const asio::ip::address& a) { return !is_member(a); })) {
      if (!is_member(from)) {
        ++handshakes_shed_;
        socket.close(ec);
        return;
      }
      shed_oldest([](const asio::ip::address&) { return true; });
    }
  }
  auto connection =
      transport::DataConnection::accept(std::move(socket), identity_, swarm_key_, hello_replays_, *this, timeouts_);
  handshaking_.emplace_back(connection, from);
  links_.add_inbound(std::move(connection));
}

void TcpTransport::connect(const PeerId& peer) {
  if (links_.link(peer)) {
    events_.on_connected(peer);
    return;
  }
  if (links_.connecting(peer)) return;
  auto endpoint = address_of_(peer);
  if (!endpoint) {
    events_.on_connect_failed(peer);
    return;
  }
  links_.add_outbound(peer,
                      transport::DataConnection::connect(io_, *endpoint, peer, identity_, swarm_key_, *this, timeouts_));
}

void TcpTransport::disconnect(const PeerId& peer, const std::string& reason) {
  if (const auto* link = links_.link(peer)) {
    TH_LOG_INFO(kLog, "disconnecting " << peer.short_hex() << ": " << reason);
    link->primary().close(Status::cancelled(reason));  // the other lanes follow (on_closed)
  }
}

void TcpTransport::send(const PeerId& peer, const swarm::SwarmMessage& message) {
  if (!links_.send(peer, message)) connect(peer);
}

void TcpTransport::send_piece(const PeerId& peer, const swarm::SwarmMessage& header,
                              std::span<const std::span<const std::byte>> pieces,
                              std::shared_ptr<transport::PieceSource> source) {
  const auto* link = links_.link(peer);
  if (!link) {
    std::size_t bytes = 0;
    for (const auto& p : pieces) bytes += p.size();
    if (source) source->on_piece_sent(static_cast<std::uint32_t>(bytes), false);
    return;
  }
  link->lane_for(header.request_id).send_piece(header, pieces, std::move(source));
}

void TcpTransport::cancel_piece(const PeerId& peer, swarm::RequestId request_id) {
  if (const auto* link = links_.link(peer)) {
    for (const auto& lane : link->lanes) {
      if (lane && lane->cancel_piece(request_id)) break;
    }
  }
}

void TcpTransport::cancel_pieces_of(const PeerId& peer, const ManifestId& version_id) {
  if (const auto* link = links_.link(peer)) {
    for (const auto& lane : link->lanes) {
      if (lane) lane->cancel_pieces_of(version_id);
    }
  }
}

std::vector<LinkStats> TcpTransport::links() const {
  std::vector<LinkStats> out;
  for (const auto& [peer, link] : links_.links()) {
    LinkStats stats{peer, {}};
    for (std::size_t lane = 0; lane < link.lanes.size(); ++lane) {
      const auto& c = link.lanes[lane];
      if (!c || !c->established() || c->closed()) continue;
      stats.lanes.push_back(LinkStats::Lane{lane, c->bytes_sent(), c->bytes_received()});
    }
    out.push_back(std::move(stats));
  }
  return out;
}

void TcpTransport::close() {
  if (closed_) return;
  closed_ = true;
  std::error_code ignored;
  acceptor_.close(ignored);
  accept_backoff_.cancel();
  for (auto& c : links_.take_all()) c->close(Status::cancelled("the peer is stopping"));
}

void TcpTransport::on_established(transport::DataConnection& connection) {
  using Established = DataLinks<transport::DataConnection>::Established;
  Established e = links_.on_established(connection);
  if (e.kind == Established::kRejected) {
    TH_LOG_DEBUG(kLog, "closed a connection with " << e.peer.short_hex() << ": " << e.why.to_string());
    return;
  }
  if (e.kind != Established::kLinked) return;
  if (!e.replaced.empty()) {
    // What was in flight on the old link went with it: its requests, and a
    // payload half landed. The core puts them back at once.
    TH_LOG_INFO(kLog, "replacing the connection to " << e.peer.short_hex() << " (both sides connected)");
    for (auto& lane : e.replaced) {
      if (lane) lane->close(Status::cancelled("a duplicate connection"));
    }
    events_.on_disconnected(e.peer);
  }
  if (e.outbound && lanes_ > 1) {
    if (auto endpoint = address_of_(e.peer)) {
      std::vector<std::shared_ptr<transport::DataConnection>> lanes;
      for (std::size_t lane = 1; lane < lanes_; ++lane) {
        lanes.push_back(transport::DataConnection::connect(io_, *endpoint, e.peer, identity_, swarm_key_, *this,
                                                           timeouts_, static_cast<std::uint8_t>(lane)));
      }
      links_.add_extra_lanes(e.peer, std::move(lanes));
    }
  }
  events_.on_connected(e.peer);
}

void TcpTransport::on_message(transport::DataConnection& connection, swarm::SwarmMessage message) {
  events_.on_message(connection.remote(), message);
}

void TcpTransport::piece_destination(transport::DataConnection& connection, const swarm::SwarmMessage& header,
                                     std::vector<std::span<std::byte>>& out) {
  events_.piece_destination(connection.remote(), header, out);
}

void TcpTransport::on_piece(transport::DataConnection& connection, const swarm::SwarmMessage& header, bool stored) {
  events_.on_piece(connection.remote(), header, stored);
}

void TcpTransport::on_piece_progress(transport::DataConnection& connection, const swarm::SwarmMessage& header) {
  events_.on_piece_progress(connection.remote(), header);
}

void TcpTransport::on_closed(transport::DataConnection& connection, const Status& why) {
  if (closed_) return;
  using Closed = DataLinks<transport::DataConnection>::Closed;
  Closed c = links_.on_closed(connection);
  switch (c.kind) {
    case Closed::kNothing: return;
    case Closed::kConnectFailed:
      TH_LOG_DEBUG(kLog, "connection to " << c.peer.short_hex() << " failed: " << why.to_string());
      events_.on_connect_failed(c.peer);
      return;
    case Closed::kLinkLost:
      // The whole link goes, and the core puts the requests it had in flight back at once.
      for (auto& lane : c.others) lane->close(Status::cancelled("another lane to this peer closed"));
      events_.on_disconnected(c.peer);
      return;
  }
}

}  // namespace tensorhub::peer
