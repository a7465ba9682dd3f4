// PeerEngine's heavy work, run on its pool and never on the I/O thread:
// hashing a shard that arrived whole, and copying verified shards from one
// held version into another (unchanged since the parent). Each job holds a
// use of the versions' leases until its result is back on the I/O thread.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "transport/peer_engine.hpp"
#include "transport/version_lease.hpp"

namespace tensorhub::peer {

void PeerEngine::hash_shard(const HashShard& job) {
  std::shared_ptr<VersionLease> lease = lease_of(job.version);
  ++lease->uses;
  pool_.submit([this, lease, version = job.version, shard = job.shard, serial = job.fetch_serial] {
    const bool good = version->domain->verify_shard(*version->manifest, shard, version->destination.as_const());
    asio::post(io_, [this, lease, version, shard, serial, good] {
      lease->end_use();
      if (closed_) return;
      core_->pieces(now(), [&](swarm::PiecePath& path, TimePoint at) {
        path.on_verified(at, version->id, shard, serial, good);
      });
      pump();
    });
  });
}

void PeerEngine::copy_shards(CopyShards job) {
  // Split over the pool's threads; the last part to finish reports.
  const std::size_t parts = std::max<std::size_t>(1, std::min(pool_.threads(), job.shards.size()));
  std::shared_ptr<VersionLease> from = lease_of(job.from);
  std::shared_ptr<VersionLease> to = lease_of(job.to);
  ++from->uses;
  ++to->uses;
  struct Job {
    CopyShards copy;
    std::mutex mutex;
    std::vector<ShardIndex> failed;  // guarded by mutex
    Status destination_error;        // guarded by mutex: the first kIoError
  };
  auto shared = std::make_shared<Job>();
  shared->copy = std::move(job);
  auto left = std::make_shared<std::atomic<std::size_t>>(parts);
  for (std::size_t part = 0; part < parts; ++part) {
    pool_.submit([this, shared, left, from, to, part, parts] {
      const CopyShards& c = shared->copy;
      const Manifest& m = *c.to->manifest;
      for (std::size_t i = part; i < c.shards.size(); i += parts) {
        Status copied = copy_verified_shard(*c.to->domain, m, c.shards[i], c.from->memory, c.to->destination);
        if (!copied.is_ok()) {
          std::lock_guard lock(shared->mutex);
          shared->failed.push_back(c.shards[i]);
          if (copied.code() == StatusCode::kIoError && shared->destination_error.is_ok()) {
            shared->destination_error = copied;
          }
        }
      }
      if (left->fetch_sub(1) != 1) return;
      asio::post(io_, [this, shared, from, to] {
        from->end_use();
        to->end_use();
        if (closed_) return;
        core_->on_shards_copied(now(), shared->copy.to, shared->failed, {}, shared->destination_error);
        pump();
      });
    });
  }
}

}  // namespace tensorhub::peer
