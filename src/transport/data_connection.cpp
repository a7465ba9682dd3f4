#include "transport/data_connection.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "core/log.hpp"
#include "tensorhub/manifest.hpp"
#include "transport/growing_read.hpp"

namespace tensorhub::transport {
namespace {

constexpr const char* kLog = "data";
// Control frames stay small; only a manifest may be large.
constexpr std::size_t kMaxFrameBytes = kMaxManifestBytes + 4096;
// Read buffers larger than this go back after the frame that needed them.
constexpr std::size_t kKeptReadCapacity = 1u << 20;
// The kernel takes more of a frame only while fewer bytes than this wait
// unsent on the connection (TCP_NOTSENT_LOWAT): a write stops about one
// segment past it, and the socket is writable again once half of it is
// sent. Pieces and control messages share a connection, and a HAVE or a
// request written behind megabytes of unsent pieces waits for them at this
// flow's share of the link: every relay of a shard pays that wait, and the
// swarm's lag behind its publisher grows by it. The frames wait in the
// outbox instead, where control messages go first and cancelled pieces are
// dropped before they are sent.
constexpr int kUnsentLowWaterBytes = 64 << 10;

// The wall clock, for the hello's freshness (secure_channel.hpp).
std::uint64_t unix_micros() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

}  // namespace

DataConnection::DataConnection(asio::ip::tcp::socket socket, const Identity& identity, const SwarmKey& swarm_key,
                               DataConnectionHandler& handler, DataConnectionTimeouts timeouts)
    : socket_(std::move(socket)),
      identity_(identity),
      swarm_key_(swarm_key),
      handler_(handler),
      timeouts_(timeouts),
      timer_(socket_.get_executor()) {}

DataConnection::~DataConnection() = default;

std::shared_ptr<DataConnection> DataConnection::connect(asio::io_context& io, const asio::ip::tcp::endpoint& to,
                                                        const PeerId& expected, const Identity& identity,
                                                        const SwarmKey& swarm_key, DataConnectionHandler& handler,
                                                        DataConnectionTimeouts timeouts, std::uint8_t lane) {
  std::shared_ptr<DataConnection> c(
      new DataConnection(asio::ip::tcp::socket(io), identity, swarm_key, handler, timeouts));
  c->arm_handshake_timer(timeouts.handshake);
  c->socket_.async_connect(to, [c, expected, lane](std::error_code ec) {
    if (c->closed_) return;
    if (ec) return c->close(Status::unavailable("connect failed: " + ec.message()));
    c->configure_socket();
    c->start_initiator(expected, lane);
  });
  return c;
}

std::shared_ptr<DataConnection> DataConnection::accept(asio::ip::tcp::socket socket, const Identity& identity,
                                                       const SwarmKey& swarm_key, HelloReplayCache& replays,
                                                       DataConnectionHandler& handler, DataConnectionTimeouts timeouts) {
  std::shared_ptr<DataConnection> c(new DataConnection(std::move(socket), identity, swarm_key, handler, timeouts));
  c->configure_socket();
  c->arm_handshake_timer(std::min(timeouts.hello, timeouts.handshake));
  c->start_responder(replays);
  return c;
}

void DataConnection::configure_socket() {
  std::error_code ignored;
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
  const auto milliseconds =
      static_cast<unsigned int>(std::chrono::duration_cast<std::chrono::milliseconds>(timeouts_.unacknowledged).count());
  // Best effort: without it a vanished peer still goes when gossip says so.
  ::setsockopt(socket_.native_handle(), IPPROTO_TCP, TCP_USER_TIMEOUT, &milliseconds, sizeof milliseconds);
  // Best effort: without it control messages may wait behind unsent pieces.
  ::setsockopt(socket_.native_handle(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &kUnsentLowWaterBytes,
               sizeof kUnsentLowWaterBytes);
}

void DataConnection::arm_handshake_timer(Duration limit) {
  timer_.expires_after(limit);
  timer_.async_wait([self = weak_from_this()](std::error_code ec) {
    auto c = self.lock();
    if (!c || ec || c->established_ || c->closed_) return;
    c->close(Status::timeout("handshake timed out"));
  });
}

void DataConnection::arm_keepalive_timer() {
  timer_.expires_after(timeouts_.keepalive);
  timer_.async_wait([self = weak_from_this()](std::error_code ec) {
    auto c = self.lock();
    if (!c || ec || c->closed_) return;
    if (std::chrono::steady_clock::now() > c->partial_deadline_) {
      return c->close(Status::timeout("a frame of " + std::to_string(c->frame_length_) + " bytes did not arrive in time"));
    }
    if (!c->wrote_since_tick_ && !c->writing_ && c->outbox_.empty()) {
      if (c->spare_.empty()) c->spare_.emplace_back();
      c->outbox_.splice(c->outbox_.end(), c->spare_, c->spare_.begin());
      Outgoing& keepalive = c->outbox_.back();
      keepalive.message.clear();  // seals nothing
      keepalive.piece = false;
      keepalive.cancel_id = swarm::RequestId{};
      ++c->keepalives_sent_;
      c->write_next();
    }
    c->wrote_since_tick_ = false;
    c->arm_keepalive_timer();
  });
}

void DataConnection::start_initiator(const PeerId& expected, std::uint8_t lane) {
  initiator_.emplace(identity_, swarm_key_, expected, lane);
  auto hello = std::make_shared<std::vector<std::uint8_t>>(initiator_->hello(unix_micros()));
  auto self = shared_from_this();
  asio::async_write(socket_, asio::buffer(*hello), [self, hello](std::error_code ec, std::size_t) {
    if (self->closed_) return;
    if (ec) return self->close(Status::io_error("handshake write failed: " + ec.message()));
    self->handshake_buffer_.resize(kWelcomeBytes);
    asio::async_read(self->socket_, asio::buffer(self->handshake_buffer_), [self](std::error_code rec, std::size_t) {
      if (self->closed_) return;
      if (rec) return self->close(Status::io_error("handshake read failed: " + rec.message()));
      auto finish = self->initiator_->on_welcome(self->handshake_buffer_);
      if (!finish) return self->close(finish.status());
      auto out = std::make_shared<std::vector<std::uint8_t>>(std::move(*finish));
      asio::async_write(self->socket_, asio::buffer(*out), [self, out](std::error_code wec, std::size_t) {
        if (self->closed_) return;
        if (wec) return self->close(Status::io_error("handshake write failed: " + wec.message()));
        self->established(self->initiator_->keys());
      });
    });
  });
}

void DataConnection::start_responder(HelloReplayCache& replays) {
  responder_.emplace(identity_, swarm_key_, replays);
  handshake_buffer_.resize(kHelloBytes);
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(handshake_buffer_), [self](std::error_code ec, std::size_t) {
    if (self->closed_) return;
    if (ec) return self->close(Status::io_error("handshake read failed: " + ec.message()));
    auto welcome = self->responder_->on_hello(self->handshake_buffer_, unix_micros());
    if (!welcome) return self->close(welcome.status());  // not a member, or a replay: say nothing
    self->arm_handshake_timer(self->timeouts_.handshake);
    auto out = std::make_shared<std::vector<std::uint8_t>>(std::move(*welcome));
    asio::async_write(self->socket_, asio::buffer(*out), [self, out](std::error_code wec, std::size_t) {
      if (self->closed_) return;
      if (wec) return self->close(Status::io_error("handshake write failed: " + wec.message()));
      self->handshake_buffer_.resize(kFinishBytes);
      asio::async_read(self->socket_, asio::buffer(self->handshake_buffer_), [self](std::error_code rec, std::size_t) {
        if (self->closed_) return;
        if (rec) return self->close(Status::io_error("handshake read failed: " + rec.message()));
        Status s = self->responder_->on_finish(self->handshake_buffer_);
        if (!s.is_ok()) return self->close(s);
        self->established(self->responder_->keys());
      });
    });
  });
}

void DataConnection::established(ChannelKeys keys) {
  keys_ = keys;
  sealer_.emplace(keys_.send);
  opener_.emplace(keys_.receive);
  established_ = true;
  timer_.cancel();
  initiator_.reset();
  responder_.reset();
  handler_.on_established(*this);
  if (closed_) return;
  read_frame_length();
  write_next();
  arm_keepalive_timer();
}

void DataConnection::send(const SwarmMessage& message) {
  send_piece(message, std::span<const std::span<const std::byte>>(), nullptr);
}

void DataConnection::send_piece(const SwarmMessage& header, std::span<const std::span<const std::byte>> pieces,
                                std::shared_ptr<PieceSource> source) {
  std::size_t payload_bytes = 0;
  for (const auto& p : pieces) payload_bytes += p.size();
  if (closed_ || !established_) {
    if (source) source->on_piece_sent(static_cast<std::uint32_t>(payload_bytes), false);
    return;
  }
  if (spare_.empty()) spare_.emplace_back();
  // Control messages (requests, HAVEs, chokes) go ahead of queued pieces,
  // in their own order: behind a neighbour's pipeline of pieces (megabytes
  // at a share of the link) a request or a HAVE waited for a good part of a
  // second, and the peers it steered sat idle meanwhile. Pieces keep their
  // order, and the front may be on the wire already, so it stays first.
  const bool piece = header.type == MessageType::kPiece;
  auto at = outbox_.end();
  if (!piece && !outbox_.empty()) {
    at = std::next(outbox_.begin());
    while (at != outbox_.end() && !at->piece) ++at;
  }
  outbox_.splice(at, spare_, spare_.begin());
  Outgoing& out = *std::prev(at);
  out.message.clear();
  encode_swarm_message(header, out.message);
  out.piece = piece;
  out.cancel_id = piece ? header.request_id : swarm::RequestId{};
  out.version_id = header.version_id;
  out.payload.assign(pieces.begin(), pieces.end());
  out.payload_bytes = payload_bytes;
  out.source = std::move(source);
  if (!piece) {
    queued_control_bytes_ += out.message.size();
    if (queued_control_bytes_ > timeouts_.max_queued_control_bytes && !closing_) {
      // Closed from the executor, not from inside this send: the caller
      // may be walking its links.
      closing_ = true;
      asio::post(socket_.get_executor(), [self = shared_from_this()] {
        self->close(Status::unavailable("the peer does not read: " + std::to_string(self->queued_control_bytes_) +
                                        " bytes of control messages queued"));
      });
    }
  }
  if (!writing_) write_next();
}

void DataConnection::retire(std::list<Outgoing>& from, std::list<Outgoing>::iterator it, bool sent) {
  if (!it->piece) queued_control_bytes_ -= std::min(queued_control_bytes_, it->message.size());
  auto source = std::move(it->source);
  const auto length = static_cast<std::uint32_t>(it->payload_bytes);
  it->payload.clear();
  it->payload_bytes = 0;
  // A bounded pool: a burst of queued messages must not pin memory for good.
  if (spare_.size() < 64 && it->message.capacity() <= 4096) {
    spare_.splice(spare_.end(), from, it);
  } else {
    from.erase(it);
  }
  if (source) source->on_piece_sent(length, sent);
}

template <typename Match>
std::size_t DataConnection::drop_queued(Match&& match, std::size_t limit) {
  if (outbox_.empty()) return 0;
  std::size_t dropped = 0;
  // The front is being written (or about to be): it goes as it is.
  for (auto it = std::next(outbox_.begin()); it != outbox_.end() && dropped < limit;) {
    auto next = std::next(it);
    if (it->cancel_id != swarm::RequestId{} && match(*it)) {
      retire(outbox_, it, false);
      ++dropped;
    }
    it = next;
  }
  return dropped;
}

bool DataConnection::cancel_piece(swarm::RequestId request_id) {
  if (request_id == swarm::RequestId{}) return false;
  return drop_queued([&](const Outgoing& o) { return o.cancel_id == request_id; }, 1) == 1;
}

std::size_t DataConnection::cancel_pieces_of(const ManifestId& version_id) {
  return drop_queued([&](const Outgoing& o) { return o.version_id == version_id; }, SIZE_MAX);
}

void DataConnection::write_next() {
  if (closed_ || !established_ || writing_ || outbox_.empty()) return;
  writing_ = true;
  wrote_since_tick_ = true;
  Outgoing& front = outbox_.front();
  // Sealed only now, in the order frames go out: the receiver expects the
  // frame counters in sequence, and a cancelled piece never takes one.
  write_frame_.assign(4, 0);
  sealer_->seal(front.message, write_frame_);
  const auto length = static_cast<std::uint32_t>(write_frame_.size() - 4);
  write_frame_[0] = static_cast<std::uint8_t>(length >> 24);
  write_frame_[1] = static_cast<std::uint8_t>(length >> 16);
  write_frame_[2] = static_cast<std::uint8_t>(length >> 8);
  write_frame_[3] = static_cast<std::uint8_t>(length);
  // One gather write: the sealed header, then the payload's pieces from where they lie.
  write_buffers_.clear();
  write_buffers_.push_back(asio::buffer(write_frame_));
  for (const auto& p : front.payload) write_buffers_.push_back(asio::buffer(p.data(), p.size()));
  auto self = shared_from_this();
  asio::async_write(socket_, write_buffers_, [self](std::error_code ec, std::size_t n) {
    self->writing_ = false;
    if (self->outbox_.empty()) return;
    self->bytes_sent_ += n;
    self->retire(self->outbox_, self->outbox_.begin(), !ec);
    if (ec) return self->close(Status::io_error("write failed: " + ec.message()));
    self->write_next();
  });
}

void DataConnection::read_frame_length() {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(length_buffer_), [self](std::error_code ec, std::size_t) {
    if (self->closed_) return;
    if (ec) {
      return self->close(ec == asio::error::eof ? Status::unavailable("the peer closed the connection")
                                                : Status::io_error("read failed: " + ec.message()));
    }
    self->bytes_received_ += 4;
    const std::uint32_t n = std::uint32_t{self->length_buffer_[0]} << 24 | std::uint32_t{self->length_buffer_[1]} << 16 |
                            std::uint32_t{self->length_buffer_[2]} << 8 | self->length_buffer_[3];
    if (n < kFrameOverhead || n > kMaxFrameBytes) {
      return self->close(Status::corrupt("frame of " + std::to_string(n) + " bytes is out of bounds"));
    }
    self->read_frame(n);
  });
}

void DataConnection::start_partial(std::size_t length) {
  const auto allowance = std::chrono::duration<double>(static_cast<double>(length) /
                                                       static_cast<double>(timeouts_.min_frame_bytes_per_second));
  partial_deadline_ = std::chrono::steady_clock::now() + timeouts_.frame +
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(allowance);
}

void DataConnection::read_frame(std::uint32_t length) {
  frame_length_ = length;
  start_partial(length);
  // The buffer grows by what arrives, never by what the length claims.
  auto self = shared_from_this();
  async_read_growing(socket_, frame_buffer_, length, [self](std::error_code ec) {
    if (self->closed_) return;
    if (ec) return self->close(Status::io_error("read failed: " + ec.message()));
    self->bytes_received_ += self->frame_length_;
    self->end_partial();
    self->on_frame();
  });
}

void DataConnection::on_frame() {
  if (!opener_->open(frame_buffer_, plaintext_)) {
    return close(Status::verify_failed("a frame failed authentication"));
  }
  if (frame_buffer_.capacity() > kKeptReadCapacity) std::vector<std::uint8_t>().swap(frame_buffer_);
  if (plaintext_.empty()) {  // a keepalive
    ++keepalives_received_;
    return read_frame_length();
  }
  auto message = decode_swarm_message(plaintext_);
  if (plaintext_.capacity() > kKeptReadCapacity) std::vector<std::uint8_t>().swap(plaintext_);
  if (!message) return close(message.status());
  if (message->type == MessageType::kPiece) {
    read_payload(std::move(*message));
    return;
  }
  handler_.on_message(*this, std::move(*message));
  if (!closed_) read_frame_length();
}

void DataConnection::read_payload(SwarmMessage header) {
  payload_destination_.clear();
  handler_.piece_destination(*this, header, payload_destination_);
  std::size_t total = 0;
  for (const auto& p : payload_destination_) total += p.size();
  payload_stored_ = total == header.length;
  if (!payload_stored_) {
    // Thrown away through one small buffer, within a deadline.
    discard_buffer_.resize(kReadChunkBytes);
    payload_destination_.clear();
    frame_length_ = header.length;
    start_partial(header.length);
  }
  payload_length_ = header.length;
  payload_header_ = std::move(header);
  payload_done_ = 0;
  payload_progress_reported_ = std::chrono::steady_clock::now();
  read_payload_rest();
}

void DataConnection::read_payload_rest() {
  if (payload_done_ == payload_length_) {
    if (!payload_stored_) end_partial();
    handler_.on_piece(*this, payload_header_, payload_stored_);
    if (!closed_) read_frame_length();
    return;
  }
  // The pieces not yet full, the first one from where it stands.
  read_buffers_.clear();
  if (!payload_stored_) {
    read_buffers_.push_back(asio::buffer(discard_buffer_.data(),
                                         std::min(discard_buffer_.size(), payload_length_ - payload_done_)));
  }
  std::size_t skip = payload_done_;
  for (const auto& p : payload_destination_) {
    if (skip >= p.size()) {
      skip -= p.size();
      continue;
    }
    read_buffers_.push_back(asio::buffer(p.data() + skip, p.size() - skip));
    skip = 0;
  }
  auto self = shared_from_this();
  socket_.async_read_some(read_buffers_, [self](std::error_code ec, std::size_t n) {
    if (self->closed_) return;
    if (ec) return self->close(Status::io_error("read failed: " + ec.message()));
    self->bytes_received_ += n;
    self->payload_done_ += n;
    // The payload is moving: a holder stopped mid-payload is told apart from
    // a slow one by this, not by the payload's age.
    if (self->payload_stored_ && self->payload_done_ < self->payload_length_) {
      const auto now = std::chrono::steady_clock::now();
      if (now - self->payload_progress_reported_ >= self->timeouts_.piece_progress) {
        self->payload_progress_reported_ = now;
        self->handler_.on_piece_progress(*self, self->payload_header_);
        if (self->closed_) return;
      }
    }
    self->read_payload_rest();
  });
}

void DataConnection::close(const Status& why) {
  if (closed_) return;
  closed_ = true;
  std::error_code ignored;
  timer_.cancel();
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  // Queued payload writes report failure, so their memory can be released.
  // The one being written stays until its (aborted) write completes: asio
  // may still hold its buffers until then.
  auto first_dropped = outbox_.begin();
  if (writing_ && first_dropped != outbox_.end()) ++first_dropped;
  while (first_dropped != outbox_.end()) retire(outbox_, first_dropped++, false);
  TH_LOG_DEBUG(kLog, "connection " << (established_ ? keys_.remote.short_hex() : std::string("(handshake)"))
                                   << " closed: " << why.to_string());
  handler_.on_closed(*this, why);
}

}  // namespace tensorhub::transport
