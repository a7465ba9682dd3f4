// PeerEngine's local channel to the peers of its host (mate_channel.hpp):
// sharing a version's memory with a mate that asks, and copying a version's
// shards from a mate that holds it.
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.hpp"
#include "transport/mate_channel.hpp"
#include "transport/peer_engine.hpp"
#include "transport/version_lease.hpp"

namespace tensorhub::peer {
namespace {
constexpr const char* kLog = "peer";
constexpr int kAskTimeoutMs = 10'000;
}  // namespace

void PeerEngine::listen_for_mates(const std::string& data_addr) {
  using Local = asio::local::stream_protocol;
  auto acceptor = std::make_unique<Local::acceptor>(io_);
  std::error_code ec;
  acceptor->open(Local(), ec);
  if (!ec) acceptor->bind(Local::endpoint(mate_socket_name(id(), data_addr)), ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    TH_LOG_WARN(kLog, "no channel to host mates: " << ec.message() << " (versions are fetched over the network only)");
    return;
  }
  mates_ = std::move(acceptor);
  accept_mate();
}

void PeerEngine::accept_mate() {
  mates_->async_accept([this](std::error_code ec, asio::local::stream_protocol::socket socket) {
    if (ec || closed_) return;
    serve_mate(std::make_shared<asio::local::stream_protocol::socket>(std::move(socket)));
    accept_mate();
  });
}

void PeerEngine::serve_mate(std::shared_ptr<asio::local::stream_protocol::socket> socket) {
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
        auto it = core_->versions().find(*id);
        if (it == core_->versions().end()) return refuse("this peer does not hold that version");
        const std::shared_ptr<LocalVersion> v = it->second;
        if (v->state != VersionState::kComplete) return refuse("this peer holds that version only in part");
        std::vector<SharedRange> ranges;
        if (Status s = v->domain->share(v->memory, ranges); !s) return refuse(s.message());
        // The memory stays until the mate closes the channel (its copy is
        // done), or the lease's time is up.
        std::shared_ptr<VersionLease> lease = lease_of(v);
        ++lease->uses;
        ++mate_sessions_served_;
        auto ended = std::make_shared<bool>(false);
        auto end = [lease, ended, socket] {
          if (*ended) return;
          *ended = true;
          lease->end_use();
          std::error_code ignored;
          socket->close(ignored);
        };
        auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::seconds(kMateLeaseSeconds));
        timer->async_wait([end, timer](std::error_code e) {
          if (!e) end();
        });
        auto answer = std::make_shared<std::string>(encode_mate_answer(ranges));
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

void PeerEngine::copy_from_mate(CopyFromMate job) {
  std::shared_ptr<VersionLease> to = lease_of(job.to);
  ++to->uses;
  pool_.submit([this, job = std::move(job), to] {
    const Manifest& m = *job.to->manifest;
    std::vector<ShardIndex> failed;
    std::string why;
    Status destination_error;
    std::uint64_t bytes = 0;
    std::vector<SharedRange> ranges;
    int connection = -1;
    Status asked = ask_mate(job.mate.id, job.mate.data_addr, job.to->id, m.total_size(), kAskTimeoutMs, ranges,
                            connection);
    if (asked) {
      auto mapping = job.to->domain->open_shared(ranges);
      if (!mapping) {
        asked = mapping.status();
      } else {
        for (ShardIndex s : job.shards) {
          Status copied = copy_verified_shard(*job.to->domain, m, s, (*mapping)->regions(), job.to->destination);
          if (copied.is_ok()) {
            bytes += m.shard(s).byte_length;
          } else {
            failed.push_back(s);
            if (copied.code() == StatusCode::kIoError && destination_error.is_ok()) destination_error = copied;
          }
        }
        if (!failed.empty()) why = "its bytes did not verify";
      }
      ::close(connection);  // the mate lets go of its lease
    }
    if (!asked) {
      failed = job.shards;
      why = asked.message();
    }
    asio::post(io_, [this, job, to, failed = std::move(failed), why = std::move(why), bytes,
                     destination_error = std::move(destination_error)] {
      to->end_use();
      if (closed_) return;
      mate_shards_copied_ += job.shards.size() - failed.size();
      mate_bytes_copied_ += bytes;
      core_->on_shards_copied(now(), job.to, failed, why, destination_error);
      pump();
    });
  });
}

}  // namespace tensorhub::peer
