#include "transport/control_server.hpp"

#include <sys/socket.h>
#include <sys/stat.h>

#include <array>
#include <deque>
#include <functional>
#include <vector>
#include <optional>
#include <string>
#include <unistd.h>

#include "core/log.hpp"

namespace tensorhub::transport {
namespace {

constexpr std::size_t kMaxRequestBytes = 1u << 20;

class ControlSession : public std::enable_shared_from_this<ControlSession> {
 public:
  ControlSession(asio::local::stream_protocol::socket socket, ControlServer::Handler& handler)
      : socket_(std::move(socket)), handler_(handler) {}

  void start() {
    auto self = shared_from_this();
    asio::async_read_until(socket_, asio::dynamic_buffer(request_, kMaxRequestBytes), '\n',
                           [self](std::error_code ec, std::size_t n) {
                             if (ec) return;
                             std::string line = self->request_.substr(0, n - 1);
                             self->handler_(
                                 line, [self](const std::string& reply, bool last) { self->write(reply, last); },
                                 [self](std::function<void()> fn) { self->on_close_.push_back(std::move(fn)); });
                             self->watch_close();
                           });
  }

 private:
  void write(const std::string& line, bool last) {
    if (finished_) return;
    finished_ = last;
    outbox_.push_back(line + "\n");
    if (!writing_) write_next();
  }

  void write_next() {
    if (outbox_.empty()) {
      if (finished_) {
        std::error_code ignored;
        socket_.shutdown(asio::local::stream_protocol::socket::shutdown_both, ignored);
        socket_.close(ignored);
      }
      return;
    }
    writing_ = true;
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(outbox_.front()), [self](std::error_code ec, std::size_t) {
      self->writing_ = false;
      if (ec) {
        self->finished_ = true;
        self->outbox_.clear();
        return;
      }
      self->outbox_.pop_front();
      self->write_next();
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
  ControlServer::Handler& handler_;
  std::vector<std::function<void()>> on_close_;
  std::array<char, 256> discard_{};
  std::string request_;
  std::deque<std::string> outbox_;
  bool writing_ = false;
  bool finished_ = false;
};

}  // namespace

ControlServer::ControlServer(asio::io_context& io, std::string path, Handler handler)
    : acceptor_(io), path_(std::move(path)), handler_(std::move(handler)) {}

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
    }
    accept();
  });
}

Status control_request(const std::string& path, const std::string& request,
                       const std::function<void(const std::string& line)>& on_line) {
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
  asio::write(socket, asio::buffer(request + "\n"), ec);
  if (ec) return Status::io_error("cannot send to " + path + ": " + ec.message());
  std::string buffer;
  while (true) {
    const std::size_t n = asio::read_until(socket, asio::dynamic_buffer(buffer, 64u << 20), '\n', ec);
    if (ec == asio::error::eof) return Status::ok();
    if (ec) return Status::io_error("reading from " + path + ": " + ec.message());
    on_line(buffer.substr(0, n - 1));
    buffer.erase(0, n);
  }
}

}  // namespace tensorhub::transport
