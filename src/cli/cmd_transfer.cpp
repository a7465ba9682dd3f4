// tensorhub publish / tensorhub fetch: through a running peer's control
// socket, or (fetch --join) as a short-lived peer of its own.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <optional>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli/cli_common.hpp"
#include "cli/control_request.hpp"
#include "core/byte_size.hpp"
#include "core/quoted.hpp"
#include "core/file_io.hpp"
#include "core/log.hpp"
#include "core/mapped_file.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/peer.hpp"
#include "transport/control_server.hpp"

namespace tensorhub::cli {
namespace {

using Json = nlohmann::ordered_json;

// Draws "[#####.....]  45%  12/64 shards  1.20 GB/s" on a terminal.
void draw_progress(std::uint64_t done, std::uint64_t total, std::uint32_t shards_done, std::uint32_t shards_total,
                   double seconds) {
  if (!::isatty(STDERR_FILENO) || total == 0) return;
  constexpr int kWidth = 30;
  const double fraction = static_cast<double>(done) / static_cast<double>(total);
  std::string bar(kWidth, '.');
  for (int i = 0; i < static_cast<int>(fraction * kWidth); ++i) bar[static_cast<std::size_t>(i)] = '#';
  std::fprintf(stderr, "\r[%s] %5.1f%%  %u/%u shards  %s   ", bar.c_str(), 100 * fraction, shards_done, shards_total,
               seconds > 0 ? core::format_rate(static_cast<double>(done) / seconds).c_str() : "");
  if (done == total) std::fprintf(stderr, "\n");
}

// Sends a control request and handles its JSON lines; returns the exit code
// (the daemon's error's kind decides it, as for an error here).
int control_call(const std::string& path, const Json& request, const std::function<void(const Json&)>& on_event,
                 Json& final_line, std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
  bool got_final = false;
  Status s = transport::control_request(path, request.dump(), [&](const std::string& line) {
    Json j = Json::parse(line, nullptr, false);
    if (!j.is_object()) return;
    if (j.value("done", false)) {
      final_line = j;
      got_final = true;
    } else {
      on_event(j);
    }
  }, timeout);
  if (!s.is_ok()) return report_error(s);
  if (!got_final) return report_error(Status::io_error("the peer closed the control connection without an answer"));
  if (!final_line.value("ok", false)) {
    std::fprintf(stderr, "tensorhub: %s\n", final_line.value("error", std::string("failed")).c_str());
    return exit_code_for(status_code_from_id(final_line.value("code", std::string("internal"))));
  }
  return kExitOk;
}

// A model name is checked here first: the one-line reason, before any request.
Status check_model(const std::string& model) { return validate_model_name(model).with_context("--model"); }

// --timeout: a positive number of seconds.
Result<std::chrono::milliseconds> timeout_of(double seconds) {
  if (!(seconds > 0) || seconds > 1e9) {
    return Status::invalid_argument("--timeout must be a positive number of seconds, not " + std::to_string(seconds));
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000)));
}

struct PublishArgs {
  std::string control, peer, model, file;
  std::size_t wait_replicas = 0;
  bool release = false;
  std::uint64_t version = 0;
  std::string part;   // "I/N"
  std::string views;  // a JSON file: a list of selections
};

// A JSON value given as text, or as "@FILE" (the file's text): a selection
// (--select) or a list of them (--views). Errors: kInvalidArgument (not
// JSON, naming the option), as core::read_file for the file (at most 64 MiB).
Result<Json> json_argument(const std::string& option, const std::string& text) {
  std::string source = text;
  if (!text.empty() && text.front() == '@') {
    auto read = core::read_file(text.substr(1), std::size_t{64} << 20);
    if (!read) return read.status().with_context(option);
    source.assign(read->begin(), read->end());
  }
  Json value = Json::parse(source, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return Status::invalid_argument(option + " is not JSON: " + core::quoted(text));
  return value;
}

// "I/N": part I (from 0) of N. Errors: kInvalidArgument naming the form.
Status parse_part(const std::string& text, std::uint64_t& index, std::uint64_t& count) {
  const auto slash = text.find('/');
  auto number = [](std::string_view s, std::uint64_t& out) {
    if (s.empty() || s.size() > 9) return false;
    out = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      out = out * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return true;
  };
  if (slash == std::string::npos || !number(std::string_view(text).substr(0, slash), index) ||
      !number(std::string_view(text).substr(slash + 1), count) || count == 0 || count > kMaxParts || index >= count) {
    return Status::invalid_argument("--part takes I/N, part I (from 0) of N parts (N from 1 to " +
                                    std::to_string(kMaxParts) + "), not " + core::quoted(text));
  }
  return Status::ok();
}

int run_publish(const PublishArgs& a) {
  if (Status s = check_model(a.model); !s.is_ok()) return report_error(s);
  auto path = resolve_control_path(a.control, a.peer);
  if (!path) return report_error(path.status());
  auto file = core::MappedFile::open(a.file);  // fail early, with the CLI's own message
  if (!file) return report_error(file.status());
  Json request{{"cmd", "publish"}, {"model", a.model}};
  if (!a.part.empty()) {
    std::uint64_t index = 0, count = 0;
    if (Status s = parse_part(a.part, index, count); !s.is_ok()) return report_error(s);
    if (a.version == 0) return report_error(Status::invalid_argument("--part needs --version V (from 1)"));
    request["version"] = a.version;
    request["part_index"] = index;
    request["part_count"] = count;
    if (!a.views.empty()) {
      auto views = json_argument("--views", "@" + a.views);
      if (!views) return report_error(views.status());
      if (!views->is_array()) return report_error(Status::invalid_argument("--views: the file must hold a JSON list of selections"));
      for (std::size_t i = 0; i < views->size(); ++i) {
        auto view = selection_from_json((*views)[i], "--views [" + std::to_string(i) + "]");
        if (!view) return report_error(view.status());
      }
      request["views"] = std::move(*views);
    }
  } else if (!a.views.empty()) {
    return report_error(Status::invalid_argument("--views goes with --part: views are a part's"));
  } else if (a.version != 0) {
    return report_error(Status::invalid_argument("--version goes with --part: a whole version takes the next number"));
  }
  put_path(request, "file", absolute_path(a.file));
  request["wait_replicas"] = a.wait_replicas;
  request["release"] = a.release;
  Json final_line;
  const int code = control_call(*path, request, [](const Json& e) {
    if (e.value("event", "") == "published" && e.contains("part")) {
      std::printf("published part %llu of %llu of v%llu as %s (serving in place; visible once every part is sealed)\n",
                  static_cast<unsigned long long>(e["part"][0].get<std::uint64_t>()),
                  static_cast<unsigned long long>(e["part"][1].get<std::uint64_t>()),
                  static_cast<unsigned long long>(e.value("version", std::uint64_t{0})), e.value("id", "").c_str());
    } else if (e.value("event", "") == "published") {
      std::printf("published %s v%llu (%s)\n", e.value("id", "").c_str(),
                  static_cast<unsigned long long>(e.value("version", std::uint64_t{0})), "serving in place");
    } else if (e.value("event", "") == "replicas") {
      std::fprintf(stderr, "replicas: %zu\n", e.value("count", std::size_t{0}));
    }
  }, final_line);
  if (code == kExitOk && a.wait_replicas > 0) {
    std::printf("%zu replicas after %.2f s%s\n", final_line.value("replicas", std::size_t{0}),
                final_line.value("stall_seconds", 0.0), a.release ? "; released" : "");
  }
  return code;
}

struct FetchArgs {
  std::string control, peer, model, version = "latest", out;
  std::string select;  // a selection, as JSON text or @FILE
  // Staged for a group (the daemon's rank `group_rank` of `group_size`).
  std::string group;
  std::uint64_t group_size = 0, group_rank = 0;
  std::string join, key, swarm_key, listen = "127.0.0.1:0";
  std::vector<std::string> trust;
  double timeout_seconds = 600;
};

Result<std::uint64_t> parse_version(const std::string& text) {
  if (text == "latest") return std::uint64_t{0};
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v == 0) {
    return Status::invalid_argument("--version must be a positive number or 'latest', not '" + text + "'");
  }
  return static_cast<std::uint64_t>(v);
}

int run_fetch_via_control(const FetchArgs& a, std::uint64_t version, std::chrono::milliseconds timeout) {
  auto path = resolve_control_path(a.control, a.peer);
  if (!path) return report_error(path.status());
  const auto started = std::chrono::steady_clock::now();
  Json request{{"cmd", a.group.empty() ? "fetch" : "stage"}, {"model", a.model}, {"version", version}};
  put_path(request, "out", absolute_path(a.out));
  if (!a.group.empty()) {
    if (version == 0) return report_error(Status::invalid_argument("--group stages an explicit --version, not latest"));
    request["group"] = a.group;
    request["group_size"] = a.group_size;
    request["group_rank"] = a.group_rank;
  }
  if (!a.select.empty()) {
    auto select = json_argument("--select", a.select);
    if (!select) return report_error(select.status());
    if (auto checked = selection_from_json(*select, "--select"); !checked) return report_error(checked.status());
    request["select"] = std::move(*select);
  }
  Json final_line;
  const int code = control_call(*path, request, [&](const Json& e) {
    if (e.value("event", "") == "progress") {
      draw_progress(e.value("bytes_verified", std::uint64_t{0}), e.value("bytes_total", std::uint64_t{0}),
                    e.value("shards_verified", 0u), e.value("shards_total", 0u),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    }
  }, final_line, timeout);
  if (code == kExitOk) {
    const std::uint64_t bytes = final_line.value("bytes", std::uint64_t{0});
    const double seconds = final_line.value("seconds", 0.0);
    std::printf("%s %s%s v%llu: %s in %.2f s (%s, %s received), every shard verified; wrote %s\n",
                a.group.empty() ? "fetched" : ("staged for group " + a.group + ":").c_str(),
                a.select.empty() ? "" : "a selection of ", a.model.c_str(),
                static_cast<unsigned long long>(final_line.value("version", std::uint64_t{0})),
                core::format_byte_size(bytes).c_str(), seconds,
                core::format_rate(static_cast<double>(bytes) / std::max(seconds, 1e-9)).c_str(),
                core::format_byte_size(final_line.value("bytes_received", std::uint64_t{0})).c_str(), a.out.c_str());
  }
  return code;
}

int run_fetch_ephemeral(const FetchArgs& a, std::uint64_t version, std::chrono::milliseconds timeout) {
  if (!a.group.empty()) {
    return report_error(Status::invalid_argument("--group stages through a daemon (--control or --peer), not --join"));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto identity = Identity::load(a.key);
  if (!identity) return report_error(identity.status());
  auto swarm_key = SwarmKey::load(a.swarm_key);
  if (!swarm_key) return report_error(swarm_key.status());
  PeerOptions o;
  o.listen = a.listen;
  o.seeds = {a.join};
  for (const std::string& hex : a.trust) {
    auto key = PublicKey::from_hex(hex);
    if (!key) return report_error(key.status().with_context("--trust " + hex));
    o.trusted_publishers.push_back(*key);
  }
  if (o.trusted_publishers.empty()) return report_error(Status::invalid_argument("--join needs --trust PUBLISHER_KEY"));
  if (!core::log_enabled(core::LogLevel::kDebug)) core::set_log_level(core::LogLevel::kWarn);
  auto peer = Peer::start(o, std::move(*identity), std::move(*swarm_key));
  if (!peer) return report_error(peer.status());
  const auto left = [&] {
    return std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                      deadline - std::chrono::steady_clock::now()));
  };
  auto head = (*peer)->wait_for_head(a.model, version == 0 ? 0 : version - 1, left());
  if (!head) return report_error(head.status());
  const auto started = std::chrono::steady_clock::now();
  // Written into the file as the blocks arrive; wait() puts it in place.
  std::vector<TensorSelection> selection;
  if (!a.select.empty()) {
    auto select = json_argument("--select", a.select);
    if (!select) return report_error(select.status());
    auto checked = selection_from_json(*select, "--select");
    if (!checked) return report_error(checked.status());
    selection = std::move(*checked);
  }
  auto handle = selection.empty() ? (*peer)->fetch_to_file(a.model, version, a.out)
                                  : (*peer)->fetch_selection_to_file(a.model, version, selection, a.out);
  if (!handle) return report_error(handle.status());
  Status s = Status::timeout("");
  while (s.code() == StatusCode::kTimeout && std::chrono::steady_clock::now() < deadline) {
    s = handle->wait(std::min(std::chrono::milliseconds(200), left()));
    const auto p = handle->progress();
    draw_progress(p.bytes_verified, p.bytes_total, p.shards_verified, p.shards_total,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  if (!s.is_ok()) return report_error(s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("fetched %s%s v%llu: %s in %.2f s (%s received), every shard verified; wrote %s\n",
              selection.empty() ? "" : "a selection of ", a.model.c_str(),
              static_cast<unsigned long long>(handle->info().version), core::format_byte_size(handle->bytes().size()).c_str(),
              seconds, core::format_byte_size(handle->progress().bytes_received).c_str(), a.out.c_str());
  return kExitOk;
}

}  // namespace

void add_transfer_commands(CLI::App& app, int& exit_code) {
  auto pub = std::make_shared<PublishArgs>();
  CLI::App* p = app.add_subcommand("publish", "Publish a safetensors file as the next version, through a running peer");
  p->add_option("file", pub->file, "The .safetensors file; the peer maps it read-only and serves it in place")
      ->required()
      ->check(CLI::ExistingFile);
  p->add_option("--model", pub->model, "Model name")->required();
  p->add_option("--control", pub->control, "The peer's control socket");
  p->add_option("--peer", pub->peer, "Or: the peer's --listen HOST:PORT");
  p->add_option("--wait-replicas", pub->wait_replicas, "Wait until R other peers hold the whole version");
  p->add_flag("--release", pub->release, "With --wait-replicas: then stop serving it from the file");
  p->add_option("--version", pub->version, "With --part: the version this part belongs to (the trainer's number)");
  p->add_option("--part", pub->part,
                "I/N: publish the file as part I (from 0) of N of --version; its metadata \"tensorhub.slices\" "
                "names the tensors that are slices of larger ones (docs/parts.md)");
  p->add_option("--views", pub->views,
                "With --part: a JSON file listing the selections readers will fetch (as fetch --select takes them); "
                "each one's bytes of this part are hashed and served as a view, so its fetch moves exactly them")
      ->check(CLI::ExistingFile);
  p->callback([pub, &exit_code] { exit_code = run_publish(*pub); });

  struct ReleaseArgs {
    std::string control, peer, model;
    std::uint64_t version = 0;
    bool now = false;
  };
  auto rel = std::make_shared<ReleaseArgs>();
  CLI::App* r = app.add_subcommand("release", "Stop serving a version from a running peer and let go of its memory");
  r->add_option("--model", rel->model, "Model name")->required();
  r->add_option("--version", rel->version, "Version number")->required();
  r->add_option("--control", rel->control, "The peer's control socket");
  r->add_option("--peer", rel->peer, "Or: the peer's --listen HOST:PORT");
  r->add_flag("--now", rel->now,
              "Release at once, even when this peer is among the last holders of the head (by default it keeps "
              "serving until another peer holds it, a newer head appears, or the peer's --max-release-deferral passes)");
  r->callback([rel, &exit_code] {
    auto path = resolve_control_path(rel->control, rel->peer);
    if (!path) {
      exit_code = report_error(path.status());
      return;
    }
    if (Status s = check_model(rel->model); !s.is_ok()) {
      exit_code = report_error(s);
      return;
    }
    Json final_line;
    exit_code = control_call(*path, Json{{"cmd", "release"}, {"model", rel->model}, {"version", rel->version}, {"now", rel->now}},
                             [](const Json&) {}, final_line);
  });

  auto f = std::make_shared<FetchArgs>();
  CLI::App* c = app.add_subcommand("fetch", "Fetch a version into a file, through a running peer or as a new one (--join)");
  c->add_option("--model", f->model, "Model name")->required();
  c->add_option("--version", f->version, "A version number, or latest (default)");
  c->add_option("--out", f->out,
                "The file to write: a verified copy of the published file; for a version in parts or a selection, a "
                "safetensors file of its tensors")
      ->required();
  c->add_option("--group", f->group,
                "Stage the version (or --select's selection) for this group, as rank --group-rank of --group-size: "
                "the daemon holds it until its next stage for the group; then `tensorhub commit`");
  c->add_option("--group-size", f->group_size, "With --group: the group's ranks");
  c->add_option("--group-rank", f->group_rank, "With --group: this daemon's rank, from 0");
  c->add_option("--select", f->select,
                "Fetch only a selection: JSON {\"tensor\": [[begin, end], ...] per dimension, or null for the whole "
                "tensor, ...}, or @FILE holding it; slices keep their place in \"tensorhub.slices\" metadata");
  c->add_option("--control", f->control, "The peer's control socket");
  c->add_option("--peer", f->peer, "Or: the peer's --listen HOST:PORT");
  c->add_option("--join", f->join, "Instead: join the swarm through HOST:PORT as a short-lived peer");
  c->add_option("--key", f->key, "With --join: this peer's key file");
  c->add_option("--swarm-key", f->swarm_key, "With --join: the swarm key file");
  c->add_option("--trust", f->trust, "With --join: a trusted publisher key (hex); repeatable");
  c->add_option("--listen", f->listen, "With --join: HOST:PORT to listen on (default 127.0.0.1:0)");
  c->add_option("--timeout", f->timeout_seconds, "Give up after this many seconds (default 600)");
  c->callback([f, &exit_code] {
    auto version = parse_version(f->version);
    if (!version) {
      exit_code = report_error(version.status());
      return;
    }
    auto timeout = timeout_of(f->timeout_seconds);
    if (!timeout) {
      exit_code = report_error(timeout.status());
      return;
    }
    if (Status s = check_model(f->model); !s.is_ok()) {
      exit_code = report_error(s);
      return;
    }
    if (!f->join.empty()) {
      if (f->key.empty() || f->swarm_key.empty()) {
        exit_code = report_error(Status::invalid_argument("--join needs --key and --swarm-key"));
        return;
      }
      exit_code = run_fetch_ephemeral(*f, *version, *timeout);
    } else {
      exit_code = run_fetch_via_control(*f, *version, *timeout);
    }
  });

  struct CommitArgs {
    std::string control, peer, group;
    std::uint64_t version = 0;
    double timeout_seconds = 60;
  };
  auto com = std::make_shared<CommitArgs>();
  CLI::App* m = app.add_subcommand(
      "commit", "Commit a staged version for a group: returns once every rank holds its stage verified, or names "
                "the ranks that do not");
  m->add_option("--group", com->group, "The group (as staged with fetch --group)")->required();
  m->add_option("--version", com->version, "The version staged (the trainer's number)")->required();
  m->add_option("--control", com->control, "The peer's control socket");
  m->add_option("--peer", com->peer, "Or: the peer's --listen HOST:PORT");
  m->add_option("--timeout", com->timeout_seconds, "Give up after this many seconds (default 60)");
  m->callback([com, &exit_code] {
    auto path = resolve_control_path(com->control, com->peer);
    if (!path) {
      exit_code = report_error(path.status());
      return;
    }
    auto timeout = timeout_of(com->timeout_seconds);
    if (!timeout) {
      exit_code = report_error(timeout.status());
      return;
    }
    Json request{{"cmd", "commit"}, {"group", com->group}, {"version", com->version},
                 {"timeout_ms", static_cast<std::uint64_t>(timeout->count())}};
    Json final_line;
    // The daemon answers once the commit is decided: at most the timeout, and a little more.
    exit_code = control_call(*path, request, [](const Json&) {}, final_line, *timeout + std::chrono::seconds(10));
    if (exit_code == kExitOk) {
      std::printf("committed v%llu for group %s: every rank holds its stage\n",
                  static_cast<unsigned long long>(com->version), com->group.c_str());
    }
  });

  struct CommittedArgs {
    std::string control, peer, group, model;
    std::uint64_t group_size = 0, group_rank = 0;
    double wait_seconds = 0;
  };
  auto asked = std::make_shared<CommittedArgs>();
  CLI::App* q = app.add_subcommand(
      "committed", "Print the version of a model a group committed (a number, or none): what a restarted rank "
                   "stages and commits to catch up");
  q->add_option("--group", asked->group, "The group")->required();
  q->add_option("--group-size", asked->group_size, "The group's ranks")->required();
  q->add_option("--group-rank", asked->group_rank, "This daemon's rank, from 0 (it joins the group as this rank)")
      ->required();
  q->add_option("--model", asked->model, "Model name")->required();
  q->add_option("--wait", asked->wait_seconds,
                "Wait up to this many seconds for a rank to say it committed one (default 0: answer at once)");
  q->add_option("--control", asked->control, "The peer's control socket");
  q->add_option("--peer", asked->peer, "Or: the peer's --listen HOST:PORT");
  q->callback([asked, &exit_code] {
    auto path = resolve_control_path(asked->control, asked->peer);
    if (!path) {
      exit_code = report_error(path.status());
      return;
    }
    if (Status s = check_model(asked->model); !s.is_ok()) {
      exit_code = report_error(s);
      return;
    }
    if (!(asked->wait_seconds >= 0) || asked->wait_seconds > 86400) {
      exit_code = report_error(Status::invalid_argument("--wait takes 0 to 86400 seconds"));
      return;
    }
    const auto wait = std::chrono::milliseconds(static_cast<std::uint64_t>(asked->wait_seconds * 1000));
    Json request{{"cmd", "committed"}, {"group", asked->group},     {"group_size", asked->group_size},
                 {"group_rank", asked->group_rank}, {"model", asked->model}, {"timeout_ms", wait.count()}};
    Json final_line;
    exit_code = control_call(*path, request, [](const Json&) {}, final_line, wait + std::chrono::seconds(10));
    if (exit_code != kExitOk) return;
    const Json& version = final_line["version"];
    if (version.is_number_unsigned()) {
      std::printf("%llu\n", static_cast<unsigned long long>(version.get<std::uint64_t>()));
    } else {
      std::printf("none\n");
    }
  });
}

}  // namespace tensorhub::cli
