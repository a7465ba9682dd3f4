#include "transport/control_server.hpp"

#include <sys/socket.h>
#include <sys/stat.h>

#include <array>
#include <cstdio>
#include <deque>
#include <functional>
#include <vector>
#include <optional>
#include <string>
#include <unistd.h>

#include "core/log.hpp"

namespace tensorhub::transport {
namespace {

class ControlSession : public std::enable_shared_from_this<ControlSession> {
 public:
  ControlSession(asio::local::stream_protocol::socket socket, ControlServer::Handler& handler)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), handler_(handler) {}

  void start() {
    auto self = shared_from_this();
    timer_.expires_after(ControlServer::kRequestTimeout);
    timer_.async_wait([self](std::error_code ec) {
      if (ec || self->state_ != State::kReading) return;
      self->state_ = State::kRefused;
      std::error_code ignored;
      self->socket_.cancel(ignored);  // the read ends; its handler sees kRefused and leaves the answer to this one
      self->refuse(Status::timeout("no complete request line within " +
                                   std::to_string(ControlServer::kRequestTimeout.count()) + " s"));
    });
    asio::async_read_until(
        socket_, asio::dynamic_buffer(request_, ControlServer::kMaxRequestBytes), '\n',
        [self](std::error_code ec, std::size_t n) {
          if (self->state_ != State::kReading) return;
          self->timer_.cancel();
          if (ec == asio::error::not_found) {
            self->state_ = State::kRefused;
            return self->refuse(Status::invalid_argument(
                "a request line holds at most " + std::to_string(ControlServer::kMaxRequestBytes) + " bytes"));
          }
          if (ec == asio::error::eof && !self->request_.empty()) {
            self->state_ = State::kRefused;
            return self->refuse(Status::invalid_argument("the request ended without a newline"));
          }
          if (ec) return self->close_now();  // nothing was asked
          self->state_ = State::kAnswering;
          std::string line = self->request_.substr(0, n - 1);
          self->handler_(
              Result<std::string>(std::move(line)),
              [self](const std::string& reply, bool last) { return self->write(reply, last); },
              [self](std::function<void()> fn) { self->on_close_.push_back(std::move(fn)); });
          self->watch_close();
        });
  }

 private:
  enum class State { kReading, kAnswering, kRefused };

  // Answers a request that could not be read; the connection lingers until
  // the client has stopped sending, so closing does not reset the answer away.
  void refuse(const Status& why) {
    handler_(Result<std::string>(why), [self = shared_from_this()](const std::string& reply, bool last) {
      return self->write(reply, last);
    }, [](std::function<void()>) {});
  }

  bool write(const std::string& line, bool last) {
    if (broken_) return false;
    if (finished_) return true;
    finished_ = last;
    outbox_.push_back(line + "\n");
    if (!writing_) write_next();
    return !broken_;
  }

  void write_next() {
    if (outbox_.empty()) {
      if (!finished_) return;
      if (state_ == State::kRefused) return linger();
      return close_now();
    }
    writing_ = true;
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(outbox_.front()), [self](std::error_code ec, std::size_t) {
      self->writing_ = false;
      if (ec) {
        self->finished_ = true;
        self->broken_ = true;
        self->outbox_.clear();
        return;
      }
      self->outbox_.pop_front();
      self->write_next();
    });
  }

  void close_now() {
    std::error_code ignored;
    timer_.cancel();
    socket_.shutdown(asio::local::stream_protocol::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  void linger() {
    std::error_code ignored;
    socket_.shutdown(asio::local::stream_protocol::socket::shutdown_send, ignored);
    auto self = shared_from_this();
    timer_.expires_after(ControlServer::kLingerTimeout);
    timer_.async_wait([self](std::error_code ec) {
      if (!ec) self->close_now();
    });
    drain();
  }

  void drain() {
    auto self = shared_from_this();
    socket_.async_read_some(asio::buffer(discard_), [self](std::error_code ec, std::size_t) {
      if (!ec) return self->drain();
      self->close_now();
    });
  }

  // Reads past the request until the client closes (or the connection
  // ends): then the close callbacks run, once. Bytes after the request
  // line are ignored.
  void watch_close() {
    auto self = shared_from_this();
    socket_.async_read_some(asio::buffer(discard_), [self](std::error_code ec, std::size_t) {
      if (!ec) return self->watch_close();
      auto callbacks = std::move(self->on_close_);
      self->on_close_.clear();
      for (auto& fn : callbacks) fn();
    });
  }

  asio::local::stream_protocol::socket socket_;
  asio::steady_timer timer_;  // the request's deadline, then the linger's
  ControlServer::Handler& handler_;
  State state_ = State::kReading;
  std::vector<std::function<void()>> on_close_;
  std::array<char, 4096> discard_{};
  std::string request_;
  std::deque<std::string> outbox_;
  bool writing_ = false;
  bool finished_ = false;
  bool broken_ = false;  // a write failed: the client cannot be answered any more
};

}  // namespace

ControlServer::ControlServer(asio::io_context& io, std::string path, Handler handler)
    : acceptor_(io), accept_backoff_(io), path_(std::move(path)), handler_(std::move(handler)) {}

ControlServer::~ControlServer() { close(); }

Result<std::unique_ptr<ControlServer>> ControlServer::start(asio::io_context& io, const std::string& path,
                                                            Handler handler) {
  std::unique_ptr<ControlServer> server(new ControlServer(io, path, std::move(handler)));
  // A socket left by a dead peer is removed; a live one is refused.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Status::already_exists(path + " exists and is not a socket");
    asio::local::stream_protocol::socket probe(io);
    std::error_code ec;
    probe.connect(asio::local::stream_protocol::endpoint(path), ec);
    if (!ec) return Status::already_exists("another peer is running with control socket " + path);
    ::unlink(path.c_str());
  }
  std::error_code ec;
  const mode_t old_mask = ::umask(077);  // the socket is created 0600
  server->acceptor_.open(asio::local::stream_protocol(), ec);
  if (!ec) server->acceptor_.bind(asio::local::stream_protocol::endpoint(path), ec);
  ::umask(old_mask);
  if (!ec) server->acceptor_.listen(16, ec);
  if (ec) return Status::unavailable("cannot listen on control socket " + path + ": " + ec.message());
  server->accept();
  return server;
}

void ControlServer::close() {
  if (closed_) return;
  closed_ = true;
  std::error_code ignored;
  acceptor_.close(ignored);
  accept_backoff_.cancel();
  ::unlink(path_.c_str());
}

namespace {

// The uid of the process at the other end of a Unix socket, or nothing.
std::optional<uid_t> peer_uid(int fd) {
  ucred cred{};
  socklen_t length = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) return std::nullopt;
  return cred.uid;
}

// This user, or root: the only ones a control connection may join.
bool trusted_uid(std::optional<uid_t> uid) { return uid && (*uid == ::geteuid() || *uid == 0); }

}  // namespace

void ControlServer::accept() {
  acceptor_.async_accept([this](std::error_code ec, asio::local::stream_protocol::socket socket) {
    if (closed_) return;
    if (!ec) {
      // The socket is 0600 already; a client of another user is refused
      // should its mode ever be widened.
      const auto uid = peer_uid(socket.native_handle());
      if (trusted_uid(uid)) {
        std::make_shared<ControlSession>(std::move(socket), handler_)->start();
      } else {
        TH_LOG_WARN("control", "refused a control connection from uid " << (uid ? std::to_string(*uid) : "?"));
        std::error_code ignored;
        socket.close(ignored);
      }
    } else if (ec != asio::error::operation_aborted) {
      // Out of descriptors, say: try again shortly rather than spin.
      TH_LOG_WARN("control", "accepting a control connection failed: " << ec.message());
      accept_backoff_.expires_after(std::chrono::milliseconds(100));
      accept_backoff_.async_wait([this](std::error_code wait_ec) {
        if (!wait_ec && !closed_) accept();
      });
      return;
    }
    accept();
  });
}

Status control_request(const std::string& path, const std::string& request,
                       const std::function<void(const std::string& line)>& on_line,
                       std::optional<std::chrono::milliseconds> timeout) {
  asio::io_context io;
  asio::local::stream_protocol::socket socket(io);
  std::error_code ec;
  socket.connect(asio::local::stream_protocol::endpoint(path), ec);
  if (ec) return Status::unavailable("cannot reach a peer at control socket " + path + ": " + ec.message());
  // Whoever listens there gets the request and is believed: it must be this
  // user (or root), not someone who took the path first.
  if (const auto uid = peer_uid(socket.native_handle()); !trusted_uid(uid)) {
    return Status::permission_denied("the control socket " + path + " is served by uid " +
                                     (uid ? std::to_string(*uid) : std::string("?")) + ", not by this user (uid " +
                                     std::to_string(::geteuid()) + "): it is not this user's peer");
  }
  Status result = Status::ok();
  bool timed_out = false;
  asio::steady_timer deadline(io);
  if (timeout) {
    deadline.expires_after(*timeout);
    deadline.async_wait([&](std::error_code wait_ec) {
      if (wait_ec) return;
      timed_out = true;
      std::error_code ignored;
      socket.close(ignored);  // the daemon sees the connection close, and stops this request's work
    });
  }
  const std::string sent = request + "\n";
  std::string buffer;
  std::function<void()> read_next = [&] {
    asio::async_read_until(socket, asio::dynamic_buffer(buffer, 64u << 20), '\n',
                           [&](std::error_code read_ec, std::size_t n) {
                             if (read_ec) {
                               if (read_ec != asio::error::eof && !timed_out) {
                                 result = Status::io_error("reading from " + path + ": " + read_ec.message());
                               }
                               deadline.cancel();
                               return;
                             }
                             on_line(buffer.substr(0, n - 1));
                             buffer.erase(0, n);
                             read_next();
                           });
  };
  asio::async_write(socket, asio::buffer(sent), [&](std::error_code write_ec, std::size_t) {
    if (write_ec) {
      if (!timed_out) result = Status::io_error("cannot send to " + path + ": " + write_ec.message());
      deadline.cancel();
      return;
    }
  });
  read_next();  // answers may come before the request is all sent (a refusal of one too long)
  io.run();
  if (timed_out) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", static_cast<double>(timeout->count()) / 1000.0);
    return Status::timeout(std::string("no answer from the peer within ") + seconds + " s; the request is cancelled");
  }
  return result;
}

}  // namespace tensorhub::transport
