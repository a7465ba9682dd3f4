// tensorhub peer: runs a swarm peer until SIGINT or SIGTERM, then leaves
// gracefully. tensorhub status: asks a running peer for its member table.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/cli_common.hpp"
#include "core/host_port.hpp"
#include "core/log.hpp"
#include "cli/peer_daemon.hpp"
#include "transport/control_server.hpp"

namespace tensorhub::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string cell(const Json& j, const char* key) {
  if (!j.contains(key)) return "";
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

void print_status_table(const Json& status) {
  const Json& self = status["self"];
  std::printf("self     %s  %s  %s  incarnation %s  dc=%s rack=%s host=%s\n", cell(self, "id").substr(0, 16).c_str(),
              cell(self, "addr").c_str(), cell(self, "state").c_str(), cell(self, "incarnation").c_str(),
              cell(self, "dc").c_str(), cell(self, "rack").c_str(), cell(self, "host").c_str());
  std::map<std::string, int> counts;
  for (const auto& m : status["members"]) ++counts[m["state"].get<std::string>()];
  std::printf("members  %zu known: %d alive, %d suspect, %d dead, %d left\n", status["members"].size(), counts["alive"],
              counts["suspect"], counts["dead"], counts["left"]);
  std::printf("  %-16s %-22s %-8s %-15s %-10s %-10s %-12s %s\n", "ID", "ADDRESS", "STATE", "INCARNATION", "DC", "RACK",
              "HOST", "HEADS");
  for (const auto& m : status["members"]) {
    std::string heads;
    for (const auto& [model, h] : m["heads"].items()) heads += model + "@" + h["version"].dump() + " ";
    std::printf("  %-16s %-22s %-8s %-15s %-10s %-10s %-12s %s\n", cell(m, "id").substr(0, 16).c_str(),
                cell(m, "addr").c_str(), cell(m, "state").c_str(), cell(m, "incarnation").c_str(), cell(m, "dc").c_str(),
                cell(m, "rack").c_str(), cell(m, "host").c_str(), heads.c_str());
  }
  if (!status["known_heads"].empty()) {
    std::printf("heads   ");
    for (const auto& [model, h] : status["known_heads"].items()) {
      std::printf(" %s@%s (%s)", model.c_str(), h["version"].dump().c_str(),
                  h["id"].get<std::string>().substr(0, 12).c_str());
    }
    std::printf("\n");
  }
  if (status.contains("versions") && !status["versions"].empty()) {
    std::printf("versions\n");
    for (const auto& v : status["versions"]) {
      const double total = std::max(1.0, v["bytes_total"].get<double>());
      std::printf("  %s v%s  %-9s %5.1f%%  %s of %s shards  replicas %s%s\n", cell(v, "model").c_str(),
                  cell(v, "version").c_str(), cell(v, "state").c_str(), 100.0 * v["bytes_verified"].get<double>() / total,
                  cell(v, "shards_verified").c_str(), cell(v, "shards_total").c_str(), cell(v, "replicas").c_str(),
                  v["published"].get<bool>() ? "  (published here)" : "");
    }
  }
}

}  // namespace

void add_peer_commands(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<DaemonOptions>();
  auto trusted = std::make_shared<std::vector<std::string>>();
  CLI::App* p = app.add_subcommand("peer", "Run a swarm peer until SIGINT/SIGTERM (then it leaves gracefully)");
  p->add_option("--listen", args->peer.listen, "HOST:PORT for gossip (UDP and TCP); binds only there")->required();
  p->add_option("--data-listen", args->peer.data_listen, "HOST:PORT for the data plane (default: gossip port + 1)");
  p->add_option("--advertise", args->peer.advertise, "IP:PORT others reach this peer at (default: --listen)");
  p->add_option("--key", args->key_file, "This peer's key file (tensorhub keygen)")->required();
  p->add_option("--swarm-key", args->swarm_key_file, "The swarm key file (tensorhub swarm-key)")->required();
  p->add_option("--seed", args->peer.seeds, "HOST:PORT of a peer to join through; repeatable");
  p->add_option("--trust", *trusted, "Trusted publisher public key (hex); repeatable (default: this peer's own key)");
  p->add_option("--members", args->members_file,
                "Admission control: a file of member public keys (hex, one a line); only they are heard and served. "
                "Reloaded when it changes");
  p->add_option("--dc", args->peer.dc, "Topology label: datacenter");
  p->add_option("--rack", args->peer.rack, "Topology label: rack");
  p->add_option("--host", args->peer.host, "Topology label: host");
  add_shard_size_option(*p, args->peer.shard_size, "versions this peer publishes");
  p->add_option_function<std::string>(
       "--hash",
       [args](const std::string& name) {
         args->peer.shard_hash =
             name == "blake2b-256" ? ShardHashAlgorithm::kBlake2b_256 : ShardHashAlgorithm::kXxh3_128;
       },
       "Shard hash of versions this peer publishes: xxh3-128 (default, fast) or blake2b-256 (secure mode)")
      ->check(CLI::IsMember({"xxh3-128", "blake2b-256"}));
  p->add_flag("--require-secure-hash", args->peer.require_secure_hash,
              "Fetch only versions whose shards are hashed with blake2b-256");
  p->add_option("--data-lanes", args->peer.data_lanes,
                "TCP connections to each neighbour this peer opens (1-8, default 1): more for links one cannot fill");
  p->add_option("--retain-replicas", args->peer.retain_head_replicas,
                "A release of a model's head waits while fewer other peers hold it (default 1; 0: never wait)");
  p->add_option("--max-release-deferral", args->release_deferral_seconds,
                "Seconds a release may wait for --retain-replicas (default 60)");
  add_size_option(*p, "--reserve", args->reserve_bytes,
                  "Set aside destination memory of this size at start (touched now, so fetches never page-fault)");
  p->add_option("--reserve-count", args->reserve_count, "How many --reserve buffers (default 1; 2 for a double buffer)");
  p->add_option("--follow", args->follow, "Fetch every new head of this model as it appears; repeatable");
  p->add_option("--control", args->control_path, "Control socket path (default: derived from --listen)");
  p->add_option("--hold-dir", args->hold_directory,
                "Where held versions go, in a folder per peer id (default /dev/shm/tensorhub-<uid>: memory); a "
                "directory of this user that no other user may write, created mode 0700");
  p->add_option("--gpu-buffers", args->gpu_buffers,
                "Versions held at once in one GPU's memory for engines on it (default 2: the current and the next)")
      ->check(CLI::Range(1, 64));
  p->add_flag("--no-super-seed", [args](std::int64_t) { args->peer.super_seed = false; },
              "Advertise every shard of a published version at once (default: reveal a few at a time, rarest first)");
  p->add_flag("--no-rdma", [args](std::int64_t) { args->peer.rdma = false; },
              "Move payloads over TCP only (default: by RDMA READ where both ends have an RDMA device)");
  p->add_flag("--no-serve-fetched", [args](std::int64_t) { args->internal.serve_fetched = false; },
              "Never announce or serve fetched versions (a leech: for the central baseline of the cluster bench)");
  p->add_flag("--test-corrupt-serving", args->internal.corrupt_serving,
              "Tests only: serve corrupted bytes (to test corrupt-holder detection)")
      ->group("");  // hidden from --help
  p->add_option("--log-level", args->log_level, "error, warn, info (default) or debug");
  p->callback([args, trusted, &exit_code] {
    for (const std::string& hex : *trusted) {
      auto key = PublicKey::from_hex(hex);
      if (!key) {
        exit_code = report_error(key.status().with_context("--trust " + hex));
        return;
      }
      args->peer.trusted_publishers.push_back(*key);
    }
    const double deferral = args->release_deferral_seconds;
    if (!(deferral >= 0) || deferral > 1e9) {
      exit_code = report_error(Status::invalid_argument("--max-release-deferral must be 0 or more seconds, not " +
                                                        std::to_string(deferral)));
      return;
    }
    args->peer.max_release_deferral = std::chrono::milliseconds(static_cast<std::int64_t>(deferral * 1000));
    exit_code = run_peer_daemon(*args);
  });

  struct StatusArgs {
    std::string control, peer;
    bool json = false;
  };
  auto status = std::make_shared<StatusArgs>();
  CLI::App* s = app.add_subcommand("status", "Show a running peer's view of the swarm");
  s->add_option("--control", status->control, "The peer's control socket");
  s->add_option("--peer", status->peer, "Or: the peer's --listen HOST:PORT, to find its default control socket");
  s->add_flag("--json", status->json, "As JSON");
  s->callback([status, &exit_code] {
    auto path = resolve_control_path(status->control, status->peer);
    if (!path) {
      exit_code = report_error(path.status());
      return;
    }
    Json answer;
    Status st = transport::control_request(*path, R"({"cmd":"status"})", [&](const std::string& line) {
      answer = Json::parse(line, nullptr, false);
    });
    if (!st.is_ok()) {
      exit_code = report_error(st);
      return;
    }
    if (!answer.is_object()) {
      exit_code = report_error(Status::io_error("the peer answered something that is not a JSON object"));
      return;
    }
    if (answer.contains("error")) {
      std::fprintf(stderr, "tensorhub: %s\n", cell(answer, "error").c_str());
      exit_code = exit_code_for(status_code_from_id(answer.value("code", std::string("internal"))));
      return;
    }
    if (status->json) {
      std::printf("%s\n", answer.dump(2).c_str());
    } else {
      print_status_table(answer);
    }
    exit_code = kExitOk;
  });
}

}  // namespace tensorhub::cli
