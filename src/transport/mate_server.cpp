#include "transport/mate_server.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include "transport/mate_channel.hpp"

namespace tensorhub::peer {

MateServer::MateServer(asio::io_context& io, Lend lend) : io_(io), lend_(std::move(lend)) {}

Status MateServer::listen(const std::string& socket_name) {
  using Local = asio::local::stream_protocol;
  auto acceptor = std::make_unique<Local::acceptor>(io_);
  std::error_code ec;
  acceptor->open(Local(), ec);
  if (!ec) acceptor->bind(Local::endpoint(socket_name), ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::unavailable(ec.message());
  acceptor_ = std::move(acceptor);
  accept();
  return Status::ok();
}

void MateServer::close() {
  closed_ = true;
  if (acceptor_) {
    std::error_code ignored;
    acceptor_->close(ignored);
  }
}

void MateServer::accept() {
  acceptor_->async_accept([this](std::error_code ec, Socket socket) {
    if (ec || closed_) return;
    serve(std::make_shared<Socket>(std::move(socket)));
    accept();
  });
}

void MateServer::serve(std::shared_ptr<Socket> socket) {
  // Processes of this peer's user only: another user may not map its memory.
  ucred peer_credentials{};
  socklen_t size = sizeof peer_credentials;
  if (::getsockopt(socket->native_handle(), SOL_SOCKET, SO_PEERCRED, &peer_credentials, &size) != 0 ||
      peer_credentials.uid != ::geteuid()) {
    return;  // closed as the socket goes
  }
  auto request = std::make_shared<std::string>();
  asio::async_read_until(
      *socket, asio::dynamic_buffer(*request, kMaxMateRequestBytes), '\n',
      [this, socket, request](std::error_code ec, std::size_t) {
        if (ec || closed_) return;
        auto refuse = [socket](const std::string& why) {
          auto text = std::make_shared<std::string>(encode_mate_refusal(why));
          asio::async_write(*socket, asio::buffer(*text), [socket, text](std::error_code, std::size_t) {});
        };
        auto id = decode_mate_request(*request);
        if (!id) return refuse(id.status().message());
        auto loan = lend_(*id);
        if (!loan) return refuse(loan.status().message());
        ++versions_lent_;
        // The memory stays until the mate closes the channel (its copy is
        // done), or the lease's time is up.
        auto ended = std::make_shared<bool>(false);
        auto end = [give_back = std::move(loan->give_back), ended, socket] {
          if (*ended) return;
          *ended = true;
          give_back();
          std::error_code ignored;
          socket->close(ignored);
        };
        auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::seconds(kMateLeaseSeconds));
        timer->async_wait([end, timer](std::error_code e) {
          if (!e) end();
        });
        auto answer = std::make_shared<std::string>(encode_mate_answer(loan->ranges));
        asio::async_write(*socket, asio::buffer(*answer), [socket, answer, end, timer](std::error_code e, std::size_t) {
          if (e) {
            timer->cancel();
            return end();
          }
          auto byte = std::make_shared<char>();
          socket->async_read_some(asio::buffer(byte.get(), 1), [end, byte, timer](std::error_code, std::size_t) {
            timer->cancel();
            end();  // the mate closed the channel (or wrote, which it must not)
          });
        });
      });
}

}  // namespace tensorhub::peer
