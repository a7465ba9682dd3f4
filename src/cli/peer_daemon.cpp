#include "cli/peer_daemon.hpp"

#include <asio.hpp>
#include <chrono>
#include <csignal>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>

#include <sys/stat.h>

#include "cli/cli_common.hpp"
#include "cli/control_lines.hpp"
#include "cli/held_versions.hpp"
#include "cli/reserved_buffers.hpp"
#include "core/bus_error_guard.hpp"
#include "core/file_io.hpp"
#include "core/hash.hpp"
#include "core/host_port.hpp"
#include "core/log.hpp"
#include "core/mapped_file.hpp"
#include "core/member_list.hpp"
#include "core/quoted.hpp"
#include "tensorhub/safetensors.hpp"
#include "transport/control_server.hpp"

namespace tensorhub::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Key = std::pair<std::string, std::uint64_t>;
// How often a published file is checked for changes under the daemon.
constexpr std::chrono::milliseconds kFileCheckInterval{250};
// How often the member list file is checked for a new list.
constexpr std::chrono::milliseconds kMembersCheckInterval{1000};

// What tells one version of a file from the next: identity, size, time.
struct FileStamp {
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = -1;
  std::int64_t mtime_ns = 0;
  friend bool operator==(const FileStamp&, const FileStamp&) = default;
};
FileStamp stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return FileStamp{};
  return FileStamp{st.st_dev, st.st_ino, st.st_size,
                   static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

// A request's field, or `fallback` when absent; kInvalidArgument when it is
// there with another type.
template <typename T>
Result<T> field(const Json& request, const char* key, T fallback) {
  auto it = request.find(key);
  if (it == request.end() || it->is_null()) return fallback;
  const std::string where = std::string("\"") + key + "\"";
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return Status::invalid_argument(where + " must be a string");
    return it->template get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return Status::invalid_argument(where + " must be true or false");
    return it->template get<bool>();
  } else {
    if (!it->is_number_unsigned()) return Status::invalid_argument(where + " must be a non-negative integer");
    return static_cast<T>(it->template get<std::uint64_t>());
  }
}

class Daemon {
 public:
  explicit Daemon(DaemonOptions options) : options_(std::move(options)), signals_(io_, SIGINT, SIGTERM) {}

  int run() {
    core::LogLevel level;
    if (!core::parse_log_level(options_.log_level, level)) {
      return report_error(Status::invalid_argument("--log-level must be error, warn, info or debug"));
    }
    core::set_log_level(level);
    auto listen = core::parse_host_port(options_.peer.listen);
    if (!listen) return report_error(listen.status().with_context("--listen"));
    for (const auto& seed : options_.peer.seeds) {
      if (auto parsed = core::parse_host_port(seed); !parsed) return report_error(parsed.status().with_context("--seed"));
    }
    if (options_.reserve_bytes > 0) {
      Status reserved = reserved_.reserve(options_.reserve_count, options_.reserve_bytes);
      if (!reserved.is_ok()) return report_error(reserved);
    }
    auto identity = Identity::load(options_.key_file);
    if (!identity) return report_error(identity.status());
    auto swarm_key = SwarmKey::load(options_.swarm_key_file);
    if (!swarm_key) return report_error(swarm_key.status());
    if (!options_.members_file.empty()) {
      members_stamp_ = stamp_of(options_.members_file);
      auto members = core::load_member_list(options_.members_file);
      if (!members) return report_error(members.status().with_context("--members"));
      if (members->empty()) {
        return report_error(Status::invalid_argument("--members " + options_.members_file + " lists no key"));
      }
      options_.peer.members = std::move(*members);
    }
    peer::InternalOptions internal = options_.internal;
    internal.probe_gpus = true;  // a process of its own: status shows the GPUs
    auto peer = peer::start_peer(options_.peer, internal, std::move(*identity), std::move(*swarm_key));
    if (!peer) return report_error(peer.status());
    peer_ = std::move(*peer);

    auto bound = core::parse_host_port(peer_->gossip_address());
    std::string path = options_.control_path;
    if (path.empty()) {
      auto default_path = default_control_path(*bound, /*create=*/true);
      if (!default_path) return report_error(default_path.status());
      path = *default_path;
    }
    // Before the control socket opens: what a killed life left is gone by then.
    held_ = std::make_unique<HeldVersions>(*peer_, options_.hold_directory + "/" + peer_->id().hex().substr(0, 12),
                                           cuda_hold_memory, options_.gpu_buffers);
    auto control = transport::ControlServer::start(
        io_, path,
        [this](const std::string& request, transport::ControlServer::Reply reply,
               transport::ControlServer::WhenClosed when_closed) { handle(request, reply, when_closed); });
    if (!control) return report_error(control.status());
    control_ = std::move(*control);
    TH_LOG_INFO("peer", "control socket " << path);

    for (const std::string& model : options_.follow) follow(model);
    if (!options_.members_file.empty()) later(kMembersCheckInterval, [this] { watch_members(); });

    signals_.async_wait([this](std::error_code ec, int signal) {
      if (ec) return;
      TH_LOG_INFO("peer", (signal == SIGINT ? "SIGINT" : "SIGTERM") << ": leaving gracefully");
      control_->close();
      io_.stop();
    });
    io_.run();
    // Handles go before the peer; the peer's destructor leaves gracefully.
    held_.reset();
    fetched_.clear();
    published_.clear();
    peer_.reset();
    TH_LOG_INFO("peer", "stopped");
    return kExitOk;
  }

 private:
  struct Published {
    std::unique_ptr<core::MappedFile> file;
    std::unique_ptr<PublishHandle> handle;
  };

  // Every request gets an answer, however malformed, and the daemon lives on.
  void handle(const std::string& request, const transport::ControlServer::Reply& reply,
              const transport::ControlServer::WhenClosed& when_closed) {
    Status s = Status::ok();
    try {
      s = handle_request(request, reply, when_closed);
    } catch (const std::exception& e) {
      s = Status::internal(std::string("the request failed: ") + e.what());
      TH_LOG_ERROR("peer", s.message());
    }
    if (!s.is_ok()) reply(line(error_line(s)), true);
  }

  // An error it returns is the request's answer; otherwise it answers itself.
  Status handle_request(const std::string& request, const transport::ControlServer::Reply& reply,
                        const transport::ControlServer::WhenClosed& when_closed) {
    const Json req = Json::parse(request, nullptr, /*allow_exceptions=*/false);
    if (!req.is_object() || !req.contains("cmd") || !req["cmd"].is_string()) {
      return Status::invalid_argument("expected a JSON object with a \"cmd\" string");
    }
    const std::string cmd = req["cmd"];
    auto model = field<std::string>(req, "model", "");
    auto version = field<std::uint64_t>(req, "version", 0);
    auto file = field<std::string>(req, "file", "");
    auto out = field<std::string>(req, "out", "");
    auto wait_replicas = field<std::size_t>(req, "wait_replicas", 0);
    auto release_after = field<bool>(req, "release", false);
    auto now = field<bool>(req, "now", false);
    auto gpu = field<std::string>(req, "gpu", "");
    for (const Status* st : {&model.status(), &version.status(), &file.status(), &out.status(), &wait_replicas.status(),
                             &release_after.status(), &now.status(), &gpu.status()}) {
      TENSORHUB_RETURN_IF_ERROR(*st);
    }
    if (cmd == "hold") {
      hold(*model, *version, *gpu, reply, when_closed);
      return Status::ok();
    }
    if (!gpu->empty()) return Status::invalid_argument("\"gpu\" goes with \"hold\" only");
    handle_command(cmd, *model, *version, *file, *out, *wait_replicas, *release_after, *now, reply);
    return Status::ok();
  }

  void handle_command(const std::string& cmd, const std::string& model, std::uint64_t version, const std::string& file,
                      const std::string& out, std::size_t wait_replicas, bool release_after, bool now,
                      const transport::ControlServer::Reply& reply) {
    if (cmd == "status") {
      reply(peer_->status_json(), true);
    } else if (cmd == "publish") {
      publish(model, file, wait_replicas, release_after, reply);
    } else if (cmd == "fetch") {
      fetch(model, version, out, reply);
    } else if (cmd == "digest") {
      auto it = fetched_.find({model, version});
      std::span<const std::byte> bytes;
      if (it != fetched_.end() && it->second->wait(std::chrono::milliseconds(0)).is_ok()) bytes = it->second->bytes();
      auto pub = published_.find({model, version});
      if (pub != published_.end()) bytes = pub->second.file->bytes();
      if (bytes.empty()) {
        reply(line(error_line(Status::not_found(model + " v" + std::to_string(version) + " is not held here"))), true);
        return;
      }
      core::Blake2bDigest digest{};
      if (!core::read_guarded([&] { digest = core::blake2b_256(bytes); })) {
        reply(line(error_line(Status::io_error(model + " v" + std::to_string(version) +
                                               " could not be read: its file was truncated"))),
              true);
        return;
      }
      reply(line(Json{{"done", true}, {"ok", true}, {"blake2b", to_hex(digest)}}), true);
    } else if (cmd == "release") {
      release(model, version, now, reply);
    } else {
      reply(line(error_line(Status::invalid_argument("unknown command " + core::quoted(cmd)))),
            true);
    }
  }

  void publish(const std::string& model, const std::string& path, std::size_t wait_replicas, bool release_after,
               const transport::ControlServer::Reply& reply) {
    auto file = core::MappedFile::open(path);
    if (!file) return reply(line(error_line(file.status())), true);
    auto layout = parse_safetensors(file->bytes());
    if (!layout) return reply(line(error_line(layout.status().with_context(path))), true);
    auto mapped = std::make_unique<core::MappedFile>(std::move(*file));
    const auto started = Clock::now();
    auto handle = peer_->publish(model, mapped->bytes(), layout->tensors);
    if (!handle) return reply(line(error_line(handle.status())), true);
    const std::uint64_t version = handle->version();
    const ManifestId id = handle->manifest_id();
    reply(line(Json{{"event", "published"}, {"version", version}, {"id", id.hex()}, {"bytes", mapped->bytes().size()}}),
          false);
    const core::MappedFile* file_published = mapped.get();
    published_[{model, version}] = Published{std::move(mapped), std::make_unique<PublishHandle>(std::move(*handle))};
    watch_file({model, version}, file_published);
    if (wait_replicas == 0) {
      reply(line(Json{{"done", true}, {"ok", true}, {"version", version}, {"id", id.hex()}}), true);
      return;
    }
    watch_replicas(model, version, id, wait_replicas, release_after, started, reply, 0);
  }

  // A changed member list file is loaded and put in force; one that does
  // not load (or lists no key, or not this peer) leaves the list in force.
  void watch_members() {
    later(kMembersCheckInterval, [this] { watch_members(); });
    const FileStamp now = stamp_of(options_.members_file);
    if (now == members_stamp_) return;
    members_stamp_ = now;
    auto members = core::load_member_list(options_.members_file);
    Status s = !members ? members.status()
               : members->empty()
                   ? Status::invalid_argument(options_.members_file + " lists no key")
                   : peer_->set_members(std::move(*members));
    if (!s.is_ok()) {
      TH_LOG_ERROR("peer", "the member list is unchanged: " << s.to_string());
      return;
    }
    TH_LOG_INFO("peer", "member list reloaded from " << options_.members_file);
  }

  // A published file that is truncated or written under the daemon serves
  // bytes that are not the version's (or faults past its new end): the
  // version is withdrawn, with an error, as soon as it is seen.
  void watch_file(const Key& key, const core::MappedFile* file) {
    auto it = published_.find(key);
    if (it == published_.end() || it->second.file.get() != file) return;  // released meanwhile
    if (Status s = file->unchanged(); !s.is_ok()) {
      TH_LOG_ERROR("peer", key.first << " v" << key.second << " is withdrawn: " << s.message());
      published_.erase(it);  // the handle goes: the version is served no more
      return;
    }
    later(kFileCheckInterval, [this, key, file] { watch_file(key, file); });
  }

  void watch_replicas(std::string model, std::uint64_t version, ManifestId id, std::size_t wanted, bool release_after,
                      Clock::time_point started, transport::ControlServer::Reply reply, std::size_t reported) {
    const std::size_t now_have = peer_->replicas(id);
    if (now_have != reported) reply(line(Json{{"event", "replicas"}, {"count", now_have}}), false);
    if (now_have >= wanted) {
      const double stall = std::chrono::duration<double>(Clock::now() - started).count();
      std::uint64_t served = 0;
      if (auto it = published_.find({model, version}); it != published_.end()) {
        if (release_after) it->second.handle->release();  // waits for pieces in flight
        served = it->second.handle->bytes_served();
        if (release_after) published_.erase(it);
      }
      reply(line(Json{{"done", true}, {"ok", true}, {"version", version}, {"id", id.hex()}, {"replicas", now_have},
                 {"stall_seconds", stall}, {"released", release_after}, {"bytes_served", served}}),
            true);
      return;
    }
    later(std::chrono::milliseconds(50), [=, this] {
      watch_replicas(model, version, id, wanted, release_after, started, reply, now_have);
    });
  }

  void fetch(const std::string& model, std::uint64_t version, const std::string& out,
             const transport::ControlServer::Reply& reply) {
    auto known = peer_->version_info(model, version);
    if (!known) return reply(line(error_line(known.status())), true);
    const VersionInfo info = *known;
    const Key key{model, info.version};
    const bool held = fetched_.count(key) != 0 || published_.count(key) != 0;
    if (out.empty()) {
      // Held by the daemon (and served): fetched now, or already.
      FetchHandle* raw = nullptr;
      if (auto it = fetched_.find(key); it != fetched_.end()) {
        raw = it->second.get();
      } else if (!held) {
        auto handle = start_fetch(model, info.version, info.bytes);
        if (!handle) return reply(line(error_line(handle.status())), true);
        raw = *handle;
      } else {
        return reply(line(error_line(Status::already_exists(model + " v" + std::to_string(info.version) +
                                                       " is published by this peer; fetch it with an output file"))),
                     true);
      }
      reply(line(Json{{"event", "started"}, {"version", info.version}, {"id", info.id.hex()}}), false);
      return watch_fetch(raw, info, [] {}, Clock::now(), reply);
    }
    // Into the output file, written as the blocks arrive and renamed into
    // place once every shard is verified (Peer::fetch_to_file). A version
    // this daemon holds already is copied into it locally.
    auto handle = peer_->fetch_to_file(model, info.version, out);
    if (!handle) return reply(line(error_line(handle.status())), true);
    reply(line(Json{{"event", "started"}, {"version", info.version}, {"id", info.id.hex()}}), false);
    if (!held) {
      // The daemon holds and serves this version from the file from now on.
      auto& kept = fetched_[key] = std::make_unique<FetchHandle>(std::move(*handle));
      return watch_fetch(kept.get(), info, [] {}, Clock::now(), reply);
    }
    // A private copy: the handle and its file's mapping go once the file is in place.
    auto copy = std::make_shared<FetchHandle>(std::move(*handle));
    watch_fetch(copy.get(), info, [copy] {}, Clock::now(), reply);
  }

  // Reports progress until the fetch ends (wait() puts an output file into
  // place); then `done` (dropping what only this fetch needed).
  void watch_fetch(FetchHandle* handle, VersionInfo info, std::function<void()> done, Clock::time_point started,
                   transport::ControlServer::Reply reply) {
    const FetchProgressInfo p = handle->progress();
    Status s = handle->wait(std::chrono::milliseconds(0));
    if (s.code() == StatusCode::kTimeout) {
      reply(line(progress_line(p)), false);
      later(std::chrono::milliseconds(50), [=, this] { watch_fetch(handle, info, done, started, reply); });
      return;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    const std::uint64_t bytes = handle->bytes().size();
    done();
    if (!s.is_ok()) return reply(line(error_line(s)), true);
    reply(line(Json{{"done", true}, {"ok", true}, {"version", info.version}, {"id", info.id.hex()}, {"bytes", bytes},
               {"seconds", seconds}}),
          true);
  }

  // A hold lasts while its connection is open: the client (a rank of an
  // engine) closes it to let go, and one that dies lets go with it.
  void hold(const std::string& model, std::uint64_t version, const std::string& gpu,
            const transport::ControlServer::Reply& reply, const transport::ControlServer::WhenClosed& when_closed) {
    auto known = peer_->version_info(model, version);
    if (!known) return reply(line(error_line(known.status())), true);
    const bool polling = held_->fetching();
    if (!held_->hold(*known, gpu, reply)) return;  // answered with its error
    when_closed([this, reply, model, gpu, number = known->version] {
      if (!held_) return;  // the daemon is stopping
      auto left = held_->unhold(model, number, gpu);
      reply(line(left ? Json{{"done", true}, {"ok", true}, {"released", true}, {"holds", *left}}
                      : error_line(left.status())),
            true);
    });
    if (!polling && held_->fetching()) later(std::chrono::milliseconds(50), [this] { poll_holds(); });
  }

  void poll_holds() {
    held_->poll();
    if (held_->fetching()) later(std::chrono::milliseconds(50), [this] { poll_holds(); });
  }

  void release(const std::string& model, std::uint64_t version, bool now, const transport::ControlServer::Reply& reply) {
    const std::pair<std::string, std::uint64_t> key{model, version};
    auto done = [this, key, reply] {
      // On the peer's thread: the memory is free; drop it on the daemon's.
      asio::post(io_, [this, key, reply] {
        published_.erase(key);
        drop_fetched(key);
        reply(line(Json{{"done", true}, {"ok", true}}), true);
      });
    };
    auto pub = published_.find(key);
    auto fetched = fetched_.find(key);
    if (pub == published_.end() && fetched == fetched_.end()) {
      reply(line(error_line(Status::not_found(model + " v" + std::to_string(version) + " is not held here"))), true);
    } else if (now) {
      published_.erase(key);  // destroying a handle releases at once
      drop_fetched(key);
      reply(line(Json{{"done", true}, {"ok", true}}), true);
    } else if (pub != published_.end()) {
      reply(line(Json{{"event", "releasing"}}), false);
      pub->second.handle->release_async(done);
    } else {
      reply(line(Json{{"event", "releasing"}}), false);
      fetched->second->release_async(done);
    }
  }

  void follow(const std::string& model) {
    peer_->subscribe(model, [this, model](const VersionInfo& head) {
      // On the peer's thread: hand over to the daemon's.
      asio::post(io_, [this, model, head] { follow_head(model, head); });
    });
  }

  void follow_head(const std::string& model, const VersionInfo& head) {
    if (fetched_.count({model, head.version})) return;
    // Keep a double buffer: the newest version held, and this one. Older
    // ones go first, so their reserved memory is free for this fetch.
    std::vector<std::uint64_t> held;
    for (const auto& [key, h] : fetched_) {
      if (key.first == model) held.push_back(key.second);
    }
    std::sort(held.begin(), held.end());
    while (held.size() > 1) {
      drop_fetched({model, held.front()});
      held.erase(held.begin());
    }
    auto handle = start_fetch(model, head.version, head.bytes, /*keep_buffer=*/true);
    if (!handle) {
      TH_LOG_WARN("peer", "cannot follow " << model << " v" << head.version << ": " << handle.status().to_string());
    }
  }

  // Starts a fetch into reserved memory when a buffer of `bytes` is free
  // (bytes 0: unknown). Otherwise a followed model gets a new buffer that
  // stays with the daemon (its pages, faulted in by this fetch, are warm
  // for the versions after it), and anything else memory the peer
  // allocates for the version alone.
  Result<FetchHandle*> start_fetch(const std::string& model, std::uint64_t version, std::uint64_t bytes,
                                   bool keep_buffer = false) {
    std::optional<std::size_t> buffer;
    if (bytes > 0) buffer = reserved_.take(bytes);
    if (!buffer && bytes > 0 && keep_buffer) {
      auto added = reserved_.add(bytes);
      if (!added) return added.status();
      buffer = *added;
    }
    if (!buffer && options_.reserve_bytes > 0) {
      TH_LOG_WARN("peer", model << " v" << version << " (" << bytes << " bytes) gets new memory: no --reserve buffer "
                                << "of that size is free");
    }
    auto handle = buffer ? peer_->fetch(model, version, reserved_.bytes(*buffer, bytes)) : peer_->fetch(model, version);
    if (!handle) {
      if (buffer) reserved_.give_back(*buffer);
      return handle.status();
    }
    auto owned = std::make_unique<FetchHandle>(std::move(*handle));
    FetchHandle* raw = owned.get();
    fetched_[{model, version}] = std::move(owned);
    if (buffer) buffer_of_[{model, version}] = *buffer;
    return raw;
  }

  // Releases a fetched version (at once) and frees its reserved memory.
  void drop_fetched(const Key& key) {
    fetched_.erase(key);  // the handle's destructor releases, then the memory is ours (a file's stays)
    if (auto b = buffer_of_.find(key); b != buffer_of_.end()) {
      reserved_.give_back(b->second);
      buffer_of_.erase(b);
    }
  }

  void later(std::chrono::milliseconds delay, std::function<void()> fn) {
    auto timer = std::make_shared<asio::steady_timer>(io_, delay);
    timer->async_wait([timer, fn = std::move(fn)](std::error_code ec) {
      if (ec) return;
      try {
        fn();
      } catch (const std::exception& e) {
        TH_LOG_ERROR("peer", "a deferred step of a request failed: " << e.what());
      }
    });
  }

  DaemonOptions options_;
  asio::io_context io_;
  asio::signal_set signals_;
  std::unique_ptr<Peer> peer_;
  std::unique_ptr<transport::ControlServer> control_;
  ReservedBuffers reserved_;  // declared first: outlives the fetches that use it
  FileStamp members_stamp_;   // of the member list file last loaded
  std::map<Key, std::size_t> buffer_of_;
  std::map<Key, Published> published_;
  std::map<Key, std::unique_ptr<FetchHandle>> fetched_;
  std::unique_ptr<HeldVersions> held_;
};

}  // namespace

int run_peer_daemon(DaemonOptions options) { return Daemon(std::move(options)).run(); }

}  // namespace tensorhub::cli
