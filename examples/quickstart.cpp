// A trainer and a rollout worker in one process, on loopback.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tensorhub/peer.hpp"

using namespace tensorhub;
using namespace std::chrono_literals;

template <typename T>
T check(Result<T> r) {  // this example stops at the first error
  if (!r) std::fprintf(stderr, "%s\n", r.status().to_string().c_str()), std::exit(1);
  return std::move(*r);
}

int main() {
  const Identity trainer_key = Identity::generate();
  const SwarmKey swarm_key = SwarmKey::generate();
  PeerOptions options;
  options.listen = options.data_listen = "127.0.0.1:0";
  options.trusted_publishers = {trainer_key.public_key()};
  auto trainer = check(Peer::start(options, trainer_key.clone(), swarm_key));
  options.seeds = {trainer->gossip_address()};
  auto worker = check(Peer::start(options, Identity::generate(), swarm_key));

  // The trainer publishes its weights where they are: no copy.
  std::vector<std::byte> weights(64 << 20, std::byte{7});
  auto published = check(trainer->publish("policy", weights, {{"w", DType::kU8, {weights.size()}, 0, weights.size()}}));

  // The worker learns the head through gossip and fetches it; every shard is verified.
  VersionInfo head = check(worker->wait_for_head("policy", 0, 10s));
  std::vector<std::byte> buffer(head.bytes);
  auto fetch = check(worker->fetch("policy", head.version, buffer));
  if (Status s = fetch.wait(60s); !s.is_ok()) return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
  std::printf("policy v%llu: %zu bytes, identical: %s\n", static_cast<unsigned long long>(head.version), buffer.size(),
              buffer == weights ? "yes" : "no");

  // The trainer may reuse its memory once a worker holds a copy.
  if (!published.wait_replicated(1, 10s).is_ok()) return 1;
  published.release();
}
