// tensorhub demo: a trainer and rollout workers on loopback, as processes.
//
// It starts one publisher and N-1 workers (`tensorhub peer --follow`), makes
// seeded synthetic weights, publishes successive versions (part of the shards
// changed each time), releases each after R replicas, and waits for every
// worker to hold each version. For each version it prints: publish-to-all
// time, the trainer's stall (publish until R replicas), p50/p99 fetch time,
// aggregate throughput, bytes served by the publisher and by the workers,
// and verification (each worker's copy hashed against the published file).
// It exits non-zero if any byte differs.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cmath>
#include <fcntl.h>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "cli/cli_common.hpp"
#include "cli/control_request.hpp"
#include "core/byte_size.hpp"
#include "core/file_io.hpp"
#include "core/hash.hpp"
#include "manifest/synthetic_model.hpp"
#include "tensorhub/identity.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/swarm_key.hpp"
#include "tensorhub/safetensors.hpp"
#include "transport/control_server.hpp"

extern char** environ;

namespace tensorhub::cli {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct DemoArgs {
  std::size_t peers = 8;
  std::uint64_t size = 256ull << 20;
  std::size_t versions = 3;
  std::uint64_t shard_size = kAutoShardSize;
  std::size_t replicas = 2;
  double change = 0.25;
  bool json = false;
  bool keep = false;
};

struct Process {
  pid_t pid = -1;
  std::string name, control;
};

std::string self_executable() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("tensorhub") : p.string();
}

// A port below the kernel's ephemeral range (32768 and up) whose UDP and TCP
// are free on 127.0.0.1: ports the kernel hands out on its own (our data
// listeners, clients) can then never take it between the check and the bind.
std::uint16_t free_port(std::set<std::uint16_t>& taken) {
  asio::io_context io;
  std::uint64_t state = static_cast<std::uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ull;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const auto port = static_cast<std::uint16_t>(20000 + (state >> 33) % 12000);
    if (taken.count(port)) continue;
    std::error_code ec;
    asio::ip::udp::socket u(io);
    u.open(asio::ip::udp::v4(), ec);
    if (!ec) u.bind(asio::ip::udp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
    asio::ip::tcp::acceptor t(io);
    if (!ec) t.open(asio::ip::tcp::v4(), ec);
    if (!ec) t.bind(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
    if (!ec) {
      taken.insert(port);
      return port;
    }
  }
  return 0;
}

pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// One request, all answer lines; the last (with "done") is returned.
Result<Json> call(const std::string& control, const Json& request, const std::function<void(const Json&)>& on_event = {}) {
  Json last;
  Status s = transport::control_request(control, request.dump(), [&](const std::string& line) {
    Json j = Json::parse(line, nullptr, false);
    if (!j.is_object()) return;
    if (j.value("done", false) || !j.contains("event")) {
      last = j;
    } else if (on_event) {
      on_event(j);
    }
  });
  if (!s.is_ok()) return s;
  if (last.contains("error")) return Status::unavailable(last.value("error", std::string()));
  return last;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

const Json* find_version(const Json& status, std::uint64_t version) {
  if (!status.contains("versions")) return nullptr;
  for (const auto& v : status["versions"]) {
    if (v.value("model", "") == "policy" && v.value("version", std::uint64_t{0}) == version) return &v;
  }
  return nullptr;
}

int run_demo(const DemoArgs& a) {
  if (a.peers < 2) return report_error(Status::invalid_argument("--peers must be at least 2"));
  if (a.replicas >= a.peers) return report_error(Status::invalid_argument("--replicas must be below --peers"));
  const fs::path dir = fs::temp_directory_path() / ("tensorhub-demo-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string exe = self_executable();
  std::vector<Process> procs;
  int exit_code = kExitOk;
  auto cleanup = [&] {
    for (auto& p : procs) {
      if (p.pid > 0) ::kill(p.pid, SIGTERM);
    }
    for (auto& p : procs) {
      if (p.pid > 0) ::waitpid(p.pid, nullptr, 0);
    }
    if (!a.keep) fs::remove_all(dir);
  };
  auto fail = [&](const Status& s) {
    cleanup();
    return report_error(s);
  };
  auto say = [&](const std::string& text) {
    if (!a.json) std::printf("%s\n", text.c_str());
    std::fflush(stdout);
  };

  // Keys and weights.
  const std::string swarm_key = (dir / "swarm.key").string();
  if (Status s = SwarmKey::generate().save(swarm_key); !s.is_ok()) return fail(s);
  std::vector<std::string> key_files;
  std::string publisher_hex;
  for (std::size_t i = 0; i < a.peers; ++i) {
    Identity id = Identity::generate();
    key_files.push_back((dir / ("peer" + std::to_string(i) + ".key")).string());
    if (Status s = id.save(key_files.back()); !s.is_ok()) return fail(s);
    if (i == 0) publisher_hex = id.public_key().hex();
  }
  say("demo: " + std::to_string(a.peers) + " peers on loopback (1 trainer, " + std::to_string(a.peers - 1) +
      " rollout workers), " + std::to_string(a.versions) + " versions of " + core::format_byte_size(a.size) +
      ", shards of " + describe_shard_size(a.shard_size) + ", release after " + std::to_string(a.replicas) +
      " replicas; working in " + dir.string());
  SyntheticModelSpec spec;
  spec.data_bytes = a.size;
  spec.tensor_bytes = std::min<std::uint64_t>(a.size, 8ull << 20) & ~1ull;
  spec.seed = 42;
  auto weights = make_synthetic_safetensors(spec);
  if (!weights) return fail(weights.status());

  // Processes.
  std::uint16_t seed_port = 0;
  std::set<std::uint16_t> taken;
  for (std::size_t i = 0; i < a.peers; ++i) {
    const std::uint16_t port = free_port(taken);
    const std::uint16_t data_port = free_port(taken);
    if (i == 0) seed_port = port;
    Process p;
    p.name = i == 0 ? "trainer" : "worker" + std::to_string(i);
    p.control = (dir / (p.name + ".sock")).string();
    std::vector<std::string> args = {exe, "peer", "--listen", "127.0.0.1:" + std::to_string(port), "--data-listen",
                                     "127.0.0.1:" + std::to_string(data_port), "--key", key_files[i], "--swarm-key", swarm_key, "--control",
                                     p.control, "--trust", publisher_hex, "--shard-size",
                                     a.shard_size == kAutoShardSize ? std::string("auto") : std::to_string(a.shard_size),
                                     "--host", p.name, "--rack", "rack" + std::to_string(i % 2)};
    if (i > 0) {
      args.push_back("--seed");
      args.push_back("127.0.0.1:" + std::to_string(seed_port));
      args.push_back("--follow");
      args.push_back("policy");
      // A rollout worker keeps its weight buffers: two (the double buffer),
      // set aside at start, with room for the safetensors header.
      args.push_back("--reserve");
      args.push_back(std::to_string(a.size + (1u << 20)));
      args.push_back("--reserve-count");
      args.push_back("2");
    }
    p.pid = spawn(args, (dir / (p.name + ".log")).string());
    if (p.pid < 0) return fail(Status::internal("cannot start " + exe));
    procs.push_back(p);
  }
  // Everyone up and seeing everyone.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (true) {
    bool ready = true;
    for (const auto& p : procs) {
      auto s = call(p.control, Json{{"cmd", "status"}});
      ready &= s.is_ok() && (*s)["members"].size() == a.peers - 1;
    }
    if (ready) break;
    if (Clock::now() > deadline) return fail(Status::timeout("the peers did not find each other in 30 s"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  say("all " + std::to_string(a.peers) + " peers see each other");

  Json report = Json::array();
  std::vector<std::byte> image = std::move(*weights);
  for (std::size_t version = 1; version <= a.versions; ++version) {
    if (version > 1) {
      auto changed = mutate_safetensors(image, a.change, 1000 + version);
      if (!changed) return fail(changed.status());
    }
    const std::string file = (dir / ("policy-v" + std::to_string(version) + ".safetensors")).string();
    if (Status s = core::write_file_atomic(file, image, 0644, true); !s.is_ok()) return fail(s);
    const auto published_digest = to_hex(core::blake2b_256(image));

    // Publish; the trainer's call returns once R workers hold it, then releases.
    const auto t0 = Clock::now();
    Result<Json> published = Status::internal("not run");
    std::thread trainer([&] {
      Json request{{"cmd", "publish"}, {"model", "policy"}};
      put_path(request, "file", file);
      request["wait_replicas"] = a.replicas;
      request["release"] = true;
      published = call(procs[0].control, request);
    });
    // Watch every worker until all hold it.
    std::vector<double> done_at(a.peers, -1);
    std::size_t done = 0;
    const auto version_deadline = Clock::now() + std::chrono::seconds(600);
    while (done < a.peers - 1 && Clock::now() < version_deadline) {
      std::string line = "  v" + std::to_string(version) + " ";
      for (std::size_t i = 1; i < a.peers; ++i) {
        double fraction = 1.0;
        if (done_at[i] < 0) {
          auto s = call(procs[i].control, Json{{"cmd", "status"}});
          fraction = 0;
          if (s) {
            if (const Json* v = find_version(*s, version)) {
              fraction = v->value("bytes_verified", 0.0) / std::max(1.0, v->value("bytes_total", 1.0));
              if (v->value("state", "") == "complete") {
                done_at[i] = std::chrono::duration<double>(Clock::now() - t0).count();
                ++done;
                fraction = 1;
              }
            }
          }
        }
        char cell[16];
        std::snprintf(cell, sizeof cell, " %3.0f%%", 100 * fraction);
        line += cell;
      }
      if (!a.json && ::isatty(STDOUT_FILENO)) std::printf("\r%s", line.c_str());
      std::fflush(stdout);
      if (done < a.peers - 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const double all_done = std::chrono::duration<double>(Clock::now() - t0).count();
    trainer.join();
    if (!a.json && ::isatty(STDOUT_FILENO)) std::printf("\n");
    if (!published) return fail(published.status().with_context("publish v" + std::to_string(version)));
    if (done < a.peers - 1) return fail(Status::timeout("v" + std::to_string(version) + " did not reach every worker"));

    // Verification and accounting.
    std::vector<double> fetch_times;
    std::uint64_t served_by_workers = 0;
    std::size_t verified = 0;
    for (std::size_t i = 1; i < a.peers; ++i) {
      fetch_times.push_back(done_at[i]);
      auto d = call(procs[i].control, Json{{"cmd", "digest"}, {"model", "policy"}, {"version", version}});
      if (d && d->value("blake2b", "") == published_digest) ++verified;
      auto s = call(procs[i].control, Json{{"cmd", "status"}});
      if (s) {
        if (const Json* v = find_version(*s, version)) served_by_workers += v->value("bytes_served", std::uint64_t{0});
      }
    }
    const std::uint64_t served_by_trainer = published->value("bytes_served", std::uint64_t{0});
    const double stall = published->value("stall_seconds", 0.0);
    Json row{{"version", version},
             {"bytes", image.size()},
             {"publish_to_all_s", all_done},
             {"trainer_stall_s", stall},
             {"fetch_p50_s", percentile(fetch_times, 0.5)},
             {"fetch_p99_s", percentile(fetch_times, 0.99)},
             {"aggregate_gbps", static_cast<double>(image.size()) * static_cast<double>(a.peers - 1) / all_done / 1e9},
             {"served_by_trainer", served_by_trainer},
             {"served_by_workers", served_by_workers},
             {"verified", verified},
             {"workers", a.peers - 1}};
    report.push_back(row);
    if (verified != a.peers - 1) exit_code = kExitCheckFailed;
  }

  if (a.json) {
    std::printf("%s\n", Json{{"peers", a.peers}, {"versions", report}}.dump(2).c_str());
  } else {
    std::printf("\n%-8s %10s %10s %10s %10s %10s %12s %14s %14s %10s\n", "version", "to all", "stall", "p50", "p99",
                "agg GB/s", "size", "trainer sent", "workers sent", "verified");
    for (const auto& r : report) {
      const double size = r["bytes"].get<double>();
      std::printf("v%-7llu %9.2fs %9.2fs %9.2fs %9.2fs %10.2f %12s %13.2fx %13.2fx %7zu/%zu\n",
                  static_cast<unsigned long long>(r["version"].get<std::uint64_t>()), r["publish_to_all_s"].get<double>(),
                  r["trainer_stall_s"].get<double>(), r["fetch_p50_s"].get<double>(), r["fetch_p99_s"].get<double>(),
                  r["aggregate_gbps"].get<double>(), core::format_byte_size(r["bytes"].get<std::uint64_t>()).c_str(),
                  r["served_by_trainer"].get<double>() / size, r["served_by_workers"].get<double>() / size,
                  r["verified"].get<std::size_t>(), r["workers"].get<std::size_t>());
    }
    std::printf("%s\n", exit_code == kExitOk ? "every worker's copy of every version matches the published bytes"
                                             : "SOME COPIES DIFFER from the published bytes");
  }
  cleanup();
  return exit_code;
}

}  // namespace

void add_demo_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* d = app.add_subcommand("demo", "A trainer and rollout workers on loopback: publish versions, fetch, report");
  d->add_option("--peers", args->peers, "Peers, the trainer included (default 8)");
  add_size_option(*d, "--size", args->size, "Version size (default 256MiB)");
  d->add_option("--versions", args->versions, "Versions to publish (default 3)");
  add_shard_size_option(*d, args->shard_size, "the demo's versions");
  d->add_option("--replicas", args->replicas, "The trainer releases each version after this many replicas (default 2)");
  d->add_option("--change", args->change, "Fraction of tensors changed per version (default 0.25)");
  d->add_flag("--json", args->json, "The report as JSON");
  d->add_flag("--keep", args->keep, "Keep the working directory (logs, keys, files)");
  d->callback([args, &exit_code] { exit_code = run_demo(*args); });
}

}  // namespace tensorhub::cli
