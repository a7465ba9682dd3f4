// PeerEngine's local channel to the peers of its host (mate_channel.hpp):
// what it lends a mate that asks (MateServer serves the channel), and
// copying a version's shards from a mate that holds it.
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

Result<MateServer::Loan> PeerEngine::lend_to_mate(const ManifestId& version_id) {
  auto it = core_->versions().find(version_id);
  if (it == core_->versions().end()) return Status::not_found("this peer does not hold that version");
  const std::shared_ptr<LocalVersion> v = it->second;
  if (!v->holds_all()) return Status::unavailable("this peer holds that version only in part");
  MateServer::Loan loan;
  if (Status s = v->domain->share(v->memory, loan.ranges); !s) return s;
  std::shared_ptr<VersionLease> lease = lease_of(v);
  ++lease->uses;
  loan.give_back = [lease] { lease->end_use(); };
  return loan;
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
