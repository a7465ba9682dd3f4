#include "transport/gossip_runtime.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <thread>

#include "core/entropy.hpp"
#include "core/host_port.hpp"
#include "core/log.hpp"
#include "core/quoted.hpp"
#include "gossip/peer_record.hpp"
#include "transport/growing_read.hpp"

namespace tensorhub::transport {
namespace {

constexpr const char* kLog = "gossip";

std::string endpoint_string(const asio::ip::address& address, std::uint16_t port) {
  return core::HostPort{address.to_string(), port}.to_string();
}

}  // namespace

std::uint64_t wall_clock_ms() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

TimePoint steady_now() {
  return TimePoint(std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now().time_since_epoch()));
}

// One TCP connection carrying length-prefixed sealed frames (u32 big-endian
// length, then the frame). Writes are queued; a close requested by the core
// waits until the queue has drained.
class GossipRuntime::Stream : public std::enable_shared_from_this<GossipRuntime::Stream> {
 public:
  Stream(GossipRuntime& runtime, asio::ip::tcp::socket socket, gossip::StreamId id, asio::ip::address remote = {})
      : runtime_(runtime), socket_(std::move(socket)), id_(id), remote_(remote) {}

  asio::ip::tcp::socket& socket() { return socket_; }
  // An inbound stream's source address (unspecified for outbound ones).
  const asio::ip::address& remote() const { return remote_; }

  void start_reading() { read_header(); }

  void send(std::vector<std::uint8_t> frame) {
    std::vector<std::uint8_t> message(4 + frame.size());
    const auto n = static_cast<std::uint32_t>(frame.size());
    message[0] = static_cast<std::uint8_t>(n >> 24);
    message[1] = static_cast<std::uint8_t>(n >> 16);
    message[2] = static_cast<std::uint8_t>(n >> 8);
    message[3] = static_cast<std::uint8_t>(n);
    std::copy(frame.begin(), frame.end(), message.begin() + 4);
    queue_.push_back(std::move(message));
    if (connected_ && !writing_) write_next();
  }

  void close_after_writes() {
    closing_ = true;
    if (!writing_ && queue_.empty()) shutdown();
  }

  void connected() {
    connected_ = true;
    start_reading();
    if (!writing_ && !queue_.empty()) write_next();
    if (closing_ && queue_.empty()) shutdown();
  }

  void shutdown() {
    if (done_) return;
    done_ = true;
    std::error_code ignored;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  bool done() const { return done_; }

 private:
  void read_header() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(header_), [self](std::error_code ec, std::size_t) {
      if (ec) return self->fail();
      const std::uint32_t n = std::uint32_t{self->header_[0]} << 24 | std::uint32_t{self->header_[1]} << 16 |
                              std::uint32_t{self->header_[2]} << 8 | self->header_[3];
      if (n > self->runtime_.options_.config.max_stream_message_bytes) {
        TH_LOG_DEBUG(kLog, "stream frame of " << n << " bytes exceeds the limit; closing");
        return self->fail();
      }
      self->read_body(n);
    });
  }

  void read_body(std::size_t length) {
    // Before the frame is authenticated, anyone may claim a length: the
    // buffer grows by what arrives (the core's stream timeout bounds how
    // long that may take).
    auto self = shared_from_this();
    async_read_growing(socket_, body_, length, [self](std::error_code ec) {
      if (ec) return self->fail();
      if (self->done_) return;
      self->runtime_.core_->handle_stream_frame(steady_now(), self->id_, self->body_);
      self->runtime_.pump();
      if (!self->done_) self->read_header();
    });
  }

  void write_next() {
    writing_ = true;
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(queue_.front()), [self](std::error_code ec, std::size_t) {
      self->writing_ = false;
      if (ec) return self->fail();
      self->queue_.pop_front();
      if (!self->queue_.empty()) {
        self->write_next();
      } else if (self->closing_) {
        self->shutdown();
      }
    });
  }

  void fail() {
    if (done_) return;
    shutdown();
    runtime_.stream_closed(id_);
  }

  GossipRuntime& runtime_;
  asio::ip::tcp::socket socket_;
  gossip::StreamId id_;
  asio::ip::address remote_;
  std::array<std::uint8_t, 4> header_{};
  std::vector<std::uint8_t> body_;
  std::deque<std::vector<std::uint8_t>> queue_;
  bool connected_ = true;
  bool writing_ = false;
  bool closing_ = false;
  bool done_ = false;

  friend class GossipRuntime;
};

GossipRuntime::GossipRuntime(asio::io_context& io, GossipRuntimeOptions options)
    : io_(io), options_(std::move(options)), udp_(io), acceptor_(io), timer_(io), receive_buffer_(65536) {}

GossipRuntime::~GossipRuntime() { close(); }

Result<std::unique_ptr<GossipRuntime>> GossipRuntime::start(asio::io_context& io, GossipRuntimeOptions options,
                                                            Identity identity, const SwarmKey& swarm_key) {
  std::unique_ptr<GossipRuntime> rt(new GossipRuntime(io, std::move(options)));
  std::error_code ec;
  const auto address = asio::ip::make_address(rt->options_.listen.host, ec);
  if (ec) {
    return Status::invalid_argument("listen host '" + rt->options_.listen.host +
                                    "' is not an IP address (bind to one address, e.g. 127.0.0.1 or 0.0.0.0)");
  }
  // Gossip takes one port number for UDP and TCP. With port 0 the kernel
  // picks a free UDP port, which TCP may still hold (another socket's
  // ephemeral port: a rare failed start in parallel tests), so a few picks
  // are tried.
  const int attempts = rt->options_.listen.port == 0 ? 8 : 1;
  std::uint16_t port = 0;
  Status bound = Status::ok();
  for (int attempt = 0; attempt < attempts; ++attempt) {
    rt->udp_.close(ec);
    rt->acceptor_.close(ec);
    ec.clear();
    const asio::ip::udp::endpoint udp_endpoint(address, rt->options_.listen.port);
    rt->udp_.open(udp_endpoint.protocol(), ec);
    if (!ec) rt->udp_.bind(udp_endpoint, ec);
    if (ec) return Status::unavailable("cannot bind UDP " + rt->options_.listen.to_string() + ": " + ec.message());
    port = rt->udp_.local_endpoint().port();
    const asio::ip::tcp::endpoint tcp_endpoint(address, port);
    rt->acceptor_.open(tcp_endpoint.protocol(), ec);
    if (!ec) rt->acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
    if (!ec) rt->acceptor_.bind(tcp_endpoint, ec);
    if (!ec) rt->acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) {
      bound = Status::ok();
      break;
    }
    bound = Status::unavailable("cannot listen on TCP " + tcp_endpoint.address().to_string() + ":" +
                                std::to_string(port) + ": " + ec.message());
  }
  if (!bound.is_ok()) return bound;
  rt->udp_.non_blocking(true, ec);
  rt->bound_ = core::HostPort{rt->options_.listen.host, port};
  if (rt->options_.advertise.empty()) rt->options_.advertise = rt->bound_.to_string();

  gossip::LocalPeerInfo local{rt->options_.advertise, rt->options_.data_addr, rt->options_.topology};
  {
    // What this peer will sign must pass every reader's rules.
    gossip::PeerRecord own;
    own.gossip_addr = local.gossip_addr;
    own.data_addr = local.data_addr;
    own.topology = local.topology;
    TENSORHUB_RETURN_IF_ERROR(gossip::validate_record(own).with_context("this peer's record"));
  }
  auto seeds = resolve_seeds(rt->options_.seeds, address.is_v6(), rt->options_.seed_lookup_timeout);
  if (!seeds) return seeds.status();
  rt->options_.seeds = std::move(*seeds);
  // The incarnation only needs to beat a past life's in the usual case (a
  // clock that stepped back is outbid once the past life's record is heard);
  // the seed, and with it the boot id, must differ even between processes
  // that share an identity and start in the same millisecond.
  const std::uint64_t incarnation = wall_clock_ms();
  rt->core_ = std::make_unique<gossip::GossipCore>(rt->options_.config, std::move(identity), swarm_key, local,
                                                   incarnation, core::entropy64(), steady_now());
  TH_LOG_INFO(kLog, "listening on " << rt->bound_.to_string() << " (udp+tcp) as peer " << rt->core_->self_id().hex()
                                    << ", advertised as " << rt->options_.advertise << ", swarm "
                                    << swarm_key.fingerprint());
  rt->core_->set_admitted(rt->options_.admitted);
  rt->receive_datagram();
  rt->accept_stream();
  if (!rt->options_.seeds.empty()) rt->core_->join(steady_now(), rt->options_.seeds);
  rt->pump();
  return rt;
}

void GossipRuntime::close() {
  if (closed_) return;
  closed_ = true;
  std::error_code ignored;
  udp_.close(ignored);
  acceptor_.close(ignored);
  timer_.cancel();
  if (leave_timer_) leave_timer_->cancel();
  for (auto& [id, stream] : streams_) stream->shutdown();
  streams_.clear();
}

Result<asio::ip::udp::endpoint> GossipRuntime::resolve_udp(const std::string& address) {
  // IP literals only: names are resolved once, at start (seeds), never on
  // this thread, which also runs the data plane.
  auto hp = core::parse_ip_host_port(address);
  if (!hp) return hp.status();
  std::error_code ec;
  const auto ip = asio::ip::make_address(hp->host, ec);
  if (ec) return Status::invalid_argument("address " + core::quoted(address) + ": " + ec.message());
  return asio::ip::udp::endpoint(ip, hp->port);
}

Result<std::string> system_seed_lookup(const std::string& host, std::uint16_t port, bool ipv6) {
  asio::io_context io;
  asio::ip::udp::resolver resolver(io);
  std::error_code ec;
  const auto results = resolver.resolve(ipv6 ? asio::ip::udp::v6() : asio::ip::udp::v4(), host, std::to_string(port), ec);
  if (ec || results.empty()) {
    return Status::unavailable("cannot resolve " + core::quoted(host) + (ec ? ": " + ec.message() : std::string()));
  }
  const auto endpoint = results.begin()->endpoint();
  return core::HostPort{endpoint.address().to_string(), endpoint.port()}.to_string();
}

Result<std::vector<std::string>> resolve_seeds(const std::vector<std::string>& seeds, bool ipv6,
                                               std::chrono::milliseconds within, const SeedLookup& lookup) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  // Every name is looked up at once, each on a thread of its own:
  // getaddrinfo cannot be cancelled, so a lookup past the deadline is left
  // to finish there, and only its promise hears of it.
  std::vector<std::optional<std::future<Result<std::string>>>> answers;
  for (const std::string& seed : seeds) {
    auto hp = core::parse_host_port(seed);
    if (!hp) return hp.status().with_context("seed");
    if (core::is_ip_literal(hp->host)) {
      answers.emplace_back();
      continue;
    }
    auto answer = std::make_shared<std::promise<Result<std::string>>>();
    answers.emplace_back(answer->get_future());
    std::thread([answer, lookup, host = hp->host, port = hp->port, ipv6] {
      answer->set_value(lookup(host, port, ipv6));
    }).detach();
  }
  std::vector<std::string> out;
  Status last = Status::ok();
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    if (!answers[i]) {
      out.push_back(seeds[i]);
      continue;
    }
    if (answers[i]->wait_until(deadline) != std::future_status::ready) {
      last = Status::timeout("seed " + core::quoted(seeds[i]) + ": its name's lookup took longer than the start allows (" +
                             std::to_string(within.count()) + " ms)");
      TH_LOG_WARN(kLog, last.message());
      continue;
    }
    auto resolved = answers[i]->get();
    if (!resolved) {
      last = resolved.status().with_context("seed " + core::quoted(seeds[i]));
      TH_LOG_WARN(kLog, last.message());
      continue;
    }
    out.push_back(std::move(*resolved));
  }
  if (out.empty() && !last.is_ok()) return last;
  return out;
}

void GossipRuntime::receive_datagram() {
  udp_.async_receive_from(asio::buffer(receive_buffer_), receive_from_, [this](std::error_code ec, std::size_t n) {
    if (closed_) return;
    if (!ec) {
      core_->handle_datagram(steady_now(), endpoint_string(receive_from_.address(), receive_from_.port()),
                             std::span<const std::uint8_t>(receive_buffer_.data(), n));
      pump();
    }
    receive_datagram();
  });
}

void GossipRuntime::accept_stream() {
  acceptor_.async_accept([this](std::error_code ec, asio::ip::tcp::socket socket) {
    if (closed_) return;
    if (!ec) {
      std::error_code remote_ec;
      const auto remote = socket.remote_endpoint(remote_ec);
      const auto from_there = std::count_if(streams_.begin(), streams_.end(), [&](const auto& entry) {
        return (entry.first & gossip::kInboundStreamBit) != 0 && entry.second->remote() == remote.address();
      });
      if (remote_ec) {
        // Gone before we looked.
      } else if (streams_.size() >= options_.max_inbound_streams) {
        TH_LOG_WARN(kLog, "too many open streams; refusing a connection");
      } else if (static_cast<std::size_t>(from_there) >= options_.max_inbound_streams_per_address) {
        TH_LOG_DEBUG(kLog, "too many open streams from " << remote.address().to_string() << "; refusing a connection");
      } else {
        const gossip::StreamId id = gossip::kInboundStreamBit | next_inbound_++;
        auto stream = std::make_shared<Stream>(*this, std::move(socket), id, remote.address());
        streams_[id] = stream;
        core_->handle_stream_accepted(steady_now(), id, endpoint_string(remote.address(), remote.port()));
        stream->start_reading();
        pump();
      }
    } else if (ec != asio::error::operation_aborted) {
      // Out of file descriptors, say: back off instead of spinning.
      TH_LOG_WARN(kLog, "accept failed: " << ec.message());
      auto retry = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(100));
      retry->async_wait([this, retry](std::error_code) {
        if (!closed_) accept_stream();
      });
      return;
    }
    accept_stream();
  });
}

void GossipRuntime::open_stream(const gossip::StreamAction& action) {
  auto hp = core::parse_host_port(action.to);
  std::error_code ec;
  asio::ip::address ip;
  if (hp) ip = asio::ip::make_address(hp->host, ec);
  if (!hp || ec) {
    auto udp = resolve_udp(action.to);
    if (!udp) {
      TH_LOG_DEBUG(kLog, "cannot open a stream to " << action.to << ": " << udp.status().message());
      asio::post(io_, [this, id = action.id] {
        if (!closed_) {
          core_->handle_stream_closed(steady_now(), id);
          pump();
        }
      });
      return;
    }
    ip = udp->address();
  }
  const asio::ip::tcp::endpoint endpoint(ip, hp ? hp->port : 0);
  auto stream = std::make_shared<Stream>(*this, asio::ip::tcp::socket(io_), action.id);
  stream->connected_ = false;
  streams_[action.id] = stream;
  stream->send(action.frame);
  stream->socket().async_connect(endpoint, [this, stream, to = action.to](std::error_code connect_ec) {
    if (closed_ || stream->done()) return;
    if (connect_ec) {
      TH_LOG_DEBUG(kLog, "connect to " << to << " failed: " << connect_ec.message());
      stream->shutdown();
      stream_closed(stream->id_);
      return;
    }
    stream->connected();
  });
}

void GossipRuntime::stream_closed(gossip::StreamId id) {
  if (streams_.erase(id) == 0 || closed_) return;
  core_->handle_stream_closed(steady_now(), id);
  pump();
}

void GossipRuntime::pump() {
  if (closed_) return;
  if (core_->stats().records_unsigned > unsigned_logged_) {
    unsigned_logged_ = core_->stats().records_unsigned;
    TH_LOG_ERROR(kLog, "this peer's record could not be signed; the previous one stays in force: "
                           << core_->sign_error().to_string());
  }
  while (auto d = core_->poll_datagram()) {
    auto endpoint = resolve_udp(d->to);
    if (!endpoint) {
      TH_LOG_DEBUG(kLog, "dropping a datagram to " << d->to << ": " << endpoint.status().message());
      continue;
    }
    std::error_code ec;
    udp_.send_to(asio::buffer(d->bytes), *endpoint, 0, ec);  // non-blocking: a full buffer drops it, as UDP may
    if (ec) {
      core_->handle_send_failed();
      TH_LOG_DEBUG(kLog, "send to " << d->to << " failed: " << ec.message());
    }
  }
  while (auto action = core_->poll_stream()) {
    switch (action->kind) {
      case gossip::StreamAction::Kind::kOpen: open_stream(*action); break;
      case gossip::StreamAction::Kind::kSend: {
        auto it = streams_.find(action->id);
        if (it != streams_.end()) it->second->send(std::move(action->frame));
        break;
      }
      case gossip::StreamAction::Kind::kClose: {
        auto it = streams_.find(action->id);
        if (it != streams_.end()) {
          it->second->close_after_writes();
          streams_.erase(it);
        }
        break;
      }
    }
  }
  while (auto event = core_->poll_event()) {
    const auto& r = event->record;
    if (event->kind == gossip::MemberEventKind::kIdentityConflict) {
      TH_LOG_ERROR(kLog, "another live process uses this peer's identity "
                             << event->id.short_hex() << " (its record: incarnation " << event->incarnation
                             << (r ? ", address " + r->record.gossip_addr : std::string())
                             << "): give each process its own key file");
      continue;
    }
    const auto level = event->kind == gossip::MemberEventKind::kUpdated ? core::LogLevel::kDebug : core::LogLevel::kInfo;
    TENSORHUB_LOG(level, kLog, "member " << gossip::member_event_name(event->kind) << " peer=" << event->id.short_hex()
                                         << " incarnation=" << event->incarnation
                                         << (r ? " addr=" + r->record.gossip_addr : std::string()));
    if (event_handler_) event_handler_(*event);
  }
  if (leave_done_ && core_->leave_settled()) {
    auto settled = std::move(leave_done_);
    leave_done_ = nullptr;
    if (leave_timer_) leave_timer_->cancel();
    asio::post(io_, std::move(settled));
  }
  arm_timer();
}

void GossipRuntime::arm_timer() {
  const TimePoint next = core_->next_timeout();
  if (next == timer_at_) return;
  timer_at_ = next;
  const auto now = steady_now();
  const auto wait = next > now ? std::chrono::duration_cast<std::chrono::steady_clock::duration>(next - now)
                               : std::chrono::steady_clock::duration::zero();
  timer_.expires_after(wait);
  timer_.async_wait([this](std::error_code ec) {
    if (ec || closed_) return;
    timer_at_ = kTimeNever;
    core_->handle_timeout(steady_now());
    pump();
  });
}

void GossipRuntime::leave(Duration max_wait, std::function<void()> done) {
  TH_LOG_INFO(kLog, "leaving the swarm");
  leave_done_ = std::move(done);
  leave_timer_ = std::make_unique<asio::steady_timer>(io_);
  leave_timer_->expires_after(max_wait);
  leave_timer_->async_wait([this](std::error_code ec) {
    if (ec || !leave_done_) return;
    TH_LOG_WARN(kLog, "leave did not settle in time; exiting anyway");
    auto expired = std::move(leave_done_);
    leave_done_ = nullptr;
    expired();
  });
  core_->leave(steady_now());
  pump();
}

}  // namespace tensorhub::transport
