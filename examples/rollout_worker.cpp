// A rollout worker that embeds a TensorHub peer, using only the public API.
//
// It subscribes to a model's heads. For each new head it fetches the version
// into the back half of a double buffer while inference keeps running on the
// front half, then swaps: the new version becomes the front, the old one is
// released (it stops being served to others) and its buffer becomes the next
// back buffer. The front version is served to other workers for as long as
// this worker runs inference on it: that is what makes the store
// reference-oriented.
//
//   rollout_worker --listen 127.0.0.1:0 --seed HOST:PORT --key worker.key
//                  --swarm-key swarm.key --trust PUBLISHER_HEX --model policy [--steps N]
//
// It prints one line per version it switches to, and exits after N versions
// (default: runs until killed).
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tensorhub/peer.hpp"

using namespace std::chrono_literals;

namespace {

struct Arguments {
  tensorhub::PeerOptions peer;
  std::string key_file, swarm_key_file, model = "policy";
  std::uint64_t steps = 0;  // 0: forever
};

bool parse(int argc, char** argv, Arguments& a) {
  a.peer.listen = "127.0.0.1:0";
  a.peer.data_listen = "127.0.0.1:0";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--listen") {
      a.peer.listen = value;
    } else if (flag == "--seed") {
      a.peer.seeds.push_back(value);
    } else if (flag == "--key") {
      a.key_file = value;
    } else if (flag == "--swarm-key") {
      a.swarm_key_file = value;
    } else if (flag == "--trust") {
      auto key = tensorhub::PublicKey::from_hex(value);
      if (!key) {
        std::fprintf(stderr, "--trust: %s\n", key.status().to_string().c_str());
        return false;
      }
      a.peer.trusted_publishers.push_back(*key);
    } else if (flag == "--model") {
      a.model = value;
    } else if (flag == "--steps") {
      a.steps = std::stoull(value);
    } else {
      std::fprintf(stderr, "unknown option %s\n", flag.c_str());
      return false;
    }
  }
  return argc % 2 == 1 && !a.key_file.empty() && !a.swarm_key_file.empty() && !a.peer.trusted_publishers.empty();
}

// Stands in for the inference engine: reads every byte of the weights.
std::uint64_t run_inference(std::span<const std::byte> weights) {
  std::uint64_t sum = 0;
  for (std::byte b : weights) sum = sum * 31 + static_cast<std::uint8_t>(b);
  return sum;
}

// The newest head the subscription has announced (set on the peer's thread).
class HeadMailbox {
 public:
  void post(const tensorhub::VersionInfo& head) {
    std::lock_guard lock(mutex_);
    if (!latest_ || head.version > latest_->version) latest_ = head;
    changed_.notify_all();
  }
  tensorhub::VersionInfo wait_newer_than(std::uint64_t version) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return latest_ && latest_->version > version; });
    return *latest_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<tensorhub::VersionInfo> latest_;
};

}  // namespace

int main(int argc, char** argv) {
  Arguments args;
  if (!parse(argc, argv, args)) {
    std::fprintf(stderr,
                 "usage: rollout_worker --key FILE --swarm-key FILE --trust PUBLISHER_HEX [--seed HOST:PORT]... "
                 "[--listen HOST:PORT] [--model NAME] [--steps N]\n");
    return 2;
  }
  auto identity = tensorhub::Identity::load(args.key_file);
  auto swarm_key = tensorhub::SwarmKey::load(args.swarm_key_file);
  if (!identity || !swarm_key) {
    std::fprintf(stderr, "%s\n", (!identity ? identity.status() : swarm_key.status()).to_string().c_str());
    return 1;
  }
  auto peer = tensorhub::Peer::start(args.peer, std::move(*identity), std::move(*swarm_key));
  if (!peer) {
    std::fprintf(stderr, "cannot start the peer: %s\n", peer.status().to_string().c_str());
    return 1;
  }
  HeadMailbox heads;
  (*peer)->subscribe(args.model, [&heads](const tensorhub::VersionInfo& head) { heads.post(head); });

  std::array<std::vector<std::byte>, 2> buffers;
  std::size_t back = 0;
  std::optional<tensorhub::FetchHandle> front;  // the version inference runs on (and the swarm reads)
  std::uint64_t current = 0;
  for (std::uint64_t step = 0; args.steps == 0 || step < args.steps; ++step) {
    const tensorhub::VersionInfo head = heads.wait_newer_than(current);
    // The back buffer is free: its version was released at the last swap.
    buffers[back].resize(head.bytes);
    const auto started = std::chrono::steady_clock::now();
    auto fetch = (*peer)->fetch(args.model, head.version, buffers[back]);
    if (!fetch) {
      std::fprintf(stderr, "fetch v%llu: %s\n", static_cast<unsigned long long>(head.version),
                   fetch.status().to_string().c_str());
      return 1;
    }
    tensorhub::Status outcome;
    while ((outcome = fetch->wait(1s)).code() == tensorhub::StatusCode::kTimeout) {
      const auto p = fetch->progress();
      std::fprintf(stderr, "  v%llu: %u/%u shards from %zu sources\n", static_cast<unsigned long long>(head.version),
                   p.shards_verified, p.shards_total, p.sources);
    }
    if (!outcome.is_ok()) {
      std::fprintf(stderr, "fetch v%llu failed: %s\n", static_cast<unsigned long long>(head.version),
                   outcome.to_string().c_str());
      return 1;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    // Swap: inference moves to the new version; the old one stops being served
    // (it is no longer the head, so retention does not hold it) and its
    // buffer becomes the next back buffer.
    std::optional<tensorhub::FetchHandle> previous = std::move(front);
    front.emplace(std::move(*fetch));
    if (previous) previous->release();
    back ^= 1;
    current = head.version;
    std::printf("switched to %s v%llu (%llu bytes, fetched and verified in %.2f s), checksum %016llx\n",
                args.model.c_str(), static_cast<unsigned long long>(head.version),
                static_cast<unsigned long long>(head.bytes), seconds,
                static_cast<unsigned long long>(run_inference(front->bytes())));
    std::fflush(stdout);
  }
  return 0;
}
