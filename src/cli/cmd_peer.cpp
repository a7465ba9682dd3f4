// tensorhub peer: runs a swarm peer until SIGINT or SIGTERM, then leaves
// gracefully. tensorhub status: asks a running peer for its member table.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/cli_common.hpp"
#include "core/host_port.hpp"
#include "core/log.hpp"
#include "transport/control_server.hpp"
#include "transport/gossip_runtime.hpp"
#include "transport/status_json.hpp"

namespace tensorhub::cli {
namespace {

using Json = nlohmann::ordered_json;

struct PeerArgs {
  std::string listen, advertise, key, swarm_key, control, log_level = "info";
  std::vector<std::string> seeds;
  std::string dc, rack, host;
};

int run_peer(const PeerArgs& a) {
  core::LogLevel level;
  if (!core::parse_log_level(a.log_level, level)) {
    return report_error(Status::invalid_argument("--log-level must be error, warn, info or debug"));
  }
  core::set_log_level(level);
  auto listen = core::parse_host_port(a.listen);
  if (!listen) return report_error(listen.status().with_context("--listen"));
  for (const auto& seed : a.seeds) {
    auto parsed = core::parse_host_port(seed);
    if (!parsed) return report_error(parsed.status().with_context("--seed"));
  }
  if (!a.advertise.empty()) {
    auto parsed = core::parse_host_port(a.advertise);
    if (!parsed) return report_error(parsed.status().with_context("--advertise"));
  }
  auto identity = Identity::load(a.key);
  if (!identity) return report_error(identity.status());
  auto swarm_key = SwarmKey::load(a.swarm_key);
  if (!swarm_key) return report_error(swarm_key.status());

  asio::io_context io;
  transport::GossipRuntimeOptions options;
  options.listen = *listen;
  options.advertise = a.advertise;
  options.seeds = a.seeds;
  options.topology = gossip::Topology{a.dc, a.rack, a.host};
  auto runtime = transport::GossipRuntime::start(io, options, std::move(*identity), *swarm_key);
  if (!runtime) return report_error(runtime.status());
  transport::GossipRuntime& rt = **runtime;

  const std::string control_path = a.control.empty() ? default_control_path(rt.bound()) : a.control;
  auto control = transport::ControlServer::start(io, control_path, [&](const std::string& request,
                                                                       transport::ControlServer::Reply reply) {
    const Json req = Json::parse(request, nullptr, /*allow_exceptions=*/false);
    if (!req.is_object() || !req.contains("cmd") || !req["cmd"].is_string()) {
      reply(Json{{"error", "expected a JSON object with a \"cmd\""}}.dump(), true);
      return;
    }
    const std::string cmd = req["cmd"];
    if (cmd == "status") {
      reply(transport::gossip_status_json(rt.core(), transport::steady_now()).dump(), true);
    } else {
      reply(Json{{"error", "unknown command '" + cmd + "'"}}.dump(), true);
    }
  });
  if (!control) return report_error(control.status());
  TH_LOG_INFO("peer", "control socket " << control_path);

  asio::signal_set signals(io, SIGINT, SIGTERM);
  bool stopping = false;
  signals.async_wait([&](std::error_code ec, int signal) {
    if (ec || stopping) return;
    stopping = true;
    TH_LOG_INFO("peer", (signal == SIGINT ? "SIGINT" : "SIGTERM") << ": leaving gracefully");
    rt.leave(std::chrono::seconds(3), [&] {
      (*control)->close();
      rt.close();
      io.stop();
    });
  });
  io.run();
  TH_LOG_INFO("peer", "stopped");
  return kExitOk;
}

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
}

}  // namespace

std::string default_control_path(const core::HostPort& listen) {
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");
  std::string name = "tensorhub-peer-";
  for (char c : listen.host) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  name += "-" + std::to_string(listen.port) + ".sock";
  return std::string(runtime_dir && *runtime_dir ? runtime_dir : "/tmp") + "/" + name;
}

void add_peer_commands(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PeerArgs>();
  CLI::App* p = app.add_subcommand("peer", "Run a swarm peer until SIGINT/SIGTERM (then it leaves gracefully)");
  p->add_option("--listen", args->listen, "HOST:PORT for gossip (UDP and TCP); binds only there")->required();
  p->add_option("--advertise", args->advertise, "HOST:PORT others reach this peer at (default: --listen)");
  p->add_option("--key", args->key, "This peer's key file (tensorhub keygen)")->required();
  p->add_option("--swarm-key", args->swarm_key, "The swarm key file (tensorhub swarm-key)")->required();
  p->add_option("--seed", args->seeds, "HOST:PORT of a peer to join through; repeatable");
  p->add_option("--dc", args->dc, "Topology label: datacenter");
  p->add_option("--rack", args->rack, "Topology label: rack");
  p->add_option("--host", args->host, "Topology label: host");
  p->add_option("--control", args->control, "Control socket path (default: derived from --listen)");
  p->add_option("--log-level", args->log_level, "error, warn, info (default) or debug");
  p->callback([args, &exit_code] { exit_code = run_peer(*args); });

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
    std::string path = status->control;
    if (path.empty()) {
      auto hp = core::parse_host_port(status->peer);
      if (status->peer.empty() || !hp) {
        exit_code = report_error(Status::invalid_argument("give --control PATH or --peer HOST:PORT"));
        return;
      }
      path = default_control_path(*hp);
    }
    Json answer;
    Status st = transport::control_request(path, R"({"cmd":"status"})", [&](const std::string& line) {
      answer = Json::parse(line, nullptr, false);
    });
    if (!st.is_ok()) {
      exit_code = report_error(st);
      return;
    }
    if (!answer.is_object() || answer.contains("error")) {
      exit_code = report_error(Status::io_error("the peer answered: " + (answer.is_object() ? cell(answer, "error")
                                                                                            : std::string("garbage"))));
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
