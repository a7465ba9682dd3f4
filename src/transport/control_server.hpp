// The control endpoint: a Unix socket (mode 0600: only its owner may drive the
// peer) that takes one JSON request line per connection and answers with one
// or more JSON lines. Long operations stream progress lines and end with a
// final one.
//
// Thread-compatibility: runs on the io_context's thread, as the handler does.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <memory>
#include <string>

#include "tensorhub/status.hpp"

namespace tensorhub::transport {

class ControlServer {
 public:
  // `send(line, last)`: writes one response line; after last=true the
  // connection closes. The handler may keep `send` and call it later. It
  // returns false once the client can no longer be answered (a write
  // failed: the client closed the connection, or died), so a request
  // that streams progress learns its client is gone.
  using Reply = std::function<bool(const std::string& line, bool last)>;
  // `when_closed(fn)`: `fn` runs once the client closes its end of this
  // request's connection (or it fails), for a request whose effect lasts
  // as long as the connection does (a lease). The client may close its
  // writing half and read on: the answer `fn` sends still reaches it.
  using WhenClosed = std::function<void(std::function<void()> fn)>;
  // `request`: the line without its newline, or why there is none to
  // read (kInvalidArgument: longer than kMaxRequestBytes, or the client
  // closed before a newline; kTimeout: no newline within
  // kRequestTimeout). Every one is answered: the handler answers an error
  // like a bad request, and the connection then closes once the client
  // stops sending (or kLingerTimeout passes), so the answer reaches it.
  using Handler = std::function<void(const Result<std::string>& request, Reply send, WhenClosed when_closed)>;

  static constexpr std::size_t kMaxRequestBytes = 1u << 20;
  static constexpr std::chrono::seconds kRequestTimeout{10};
  static constexpr std::chrono::seconds kLingerTimeout{5};

  static Result<std::unique_ptr<ControlServer>> start(asio::io_context& io, const std::string& path, Handler handler);
  ~ControlServer();
  void close();
  const std::string& path() const { return path_; }

 private:
  ControlServer(asio::io_context& io, std::string path, Handler handler);
  void accept();

  asio::local::stream_protocol::acceptor acceptor_;
  asio::steady_timer accept_backoff_;  // accept errors (no descriptors left) retry after a pause, never spin
  std::string path_;
  Handler handler_;
  bool closed_ = false;
};

// The client side: sends one request line and calls `on_line` for each line
// of the answer until the server closes. Blocking; for the CLI. With a
// `timeout`, gives up after it (kTimeout) and closes the connection, which
// tells the daemon to stop what it does for this request.
Status control_request(const std::string& path, const std::string& request,
                       const std::function<void(const std::string& line)>& on_line,
                       std::optional<std::chrono::milliseconds> timeout = std::nullopt);

}  // namespace tensorhub::transport
