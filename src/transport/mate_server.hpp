// The holder's side of the channel to host mates (mate_channel.hpp): listens
// on the peer's abstract socket, serves processes of this user only, and
// answers a request for a version with the shared ranges of its memory,
// which stays lent until the mate closes the connection or the lease's time
// (kMateLeaseSeconds) is up. Which versions it lends, and how, is the
// engine's (Lend). Only the I/O thread calls these.
#pragma once

#include <asio.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "seams/shared_range.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::peer {

class MateServer {
 public:
  // A version's memory lent to a mate: its ranges, and what to call once
  // the mate is done with them.
  struct Loan {
    std::vector<SharedRange> ranges;
    std::function<void()> give_back;
  };
  // Errors: whatever the engine refuses with; the message goes to the mate.
  using Lend = std::function<Result<Loan>(const ManifestId& version_id)>;

  MateServer(asio::io_context& io, Lend lend);
  MateServer(const MateServer&) = delete;
  MateServer& operator=(const MateServer&) = delete;

  // Listens on `socket_name` (mate_socket_name()).
  // Errors: kUnavailable (the socket cannot be had; the message says why).
  Status listen(const std::string& socket_name);
  // Stops accepting; connections already served keep their loans until
  // they end.
  void close();

  bool listening() const { return acceptor_ != nullptr; }
  std::uint64_t versions_lent() const { return versions_lent_; }

 private:
  using Socket = asio::local::stream_protocol::socket;
  void accept();
  void serve(std::shared_ptr<Socket> socket);

  asio::io_context& io_;
  Lend lend_;
  std::unique_ptr<asio::local::stream_protocol::acceptor> acceptor_;  // null: not listening
  bool closed_ = false;
  std::uint64_t versions_lent_ = 0;
};

}  // namespace tensorhub::peer
