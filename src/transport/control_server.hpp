// The control endpoint: a Unix socket (mode 0600: only its owner may drive the
// peer) that takes one JSON request line per connection and answers with one
// or more JSON lines. Long operations stream progress lines and end with a
// final one.
//
// Thread-compatibility: runs on the io_context's thread, as the handler does.
#pragma once

#include <asio.hpp>
#include <functional>
#include <memory>
#include <string>

#include "tensorhub/status.hpp"

namespace tensorhub::transport {

class ControlServer {
 public:
  // `send(line, last)`: writes one response line; after last=true the
  // connection closes. The handler may keep `send` and call it later.
  using Reply = std::function<void(const std::string& line, bool last)>;
  // `when_closed(fn)`: `fn` runs once the client closes its end of this
  // request's connection (or it fails), for a request whose effect lasts
  // as long as the connection does (a lease). The client may close its
  // writing half and read on: the answer `fn` sends still reaches it.
  using WhenClosed = std::function<void(std::function<void()> fn)>;
  using Handler = std::function<void(const std::string& request, Reply send, WhenClosed when_closed)>;

  static Result<std::unique_ptr<ControlServer>> start(asio::io_context& io, const std::string& path, Handler handler);
  ~ControlServer();
  void close();
  const std::string& path() const { return path_; }

 private:
  ControlServer(asio::io_context& io, std::string path, Handler handler);
  void accept();

  asio::local::stream_protocol::acceptor acceptor_;
  std::string path_;
  Handler handler_;
  bool closed_ = false;
};

// The client side: sends one request line and calls `on_line` for each line
// of the answer until the server closes. Blocking; for the CLI.
Status control_request(const std::string& path, const std::string& request,
                       const std::function<void(const std::string& line)>& on_line);

}  // namespace tensorhub::transport
