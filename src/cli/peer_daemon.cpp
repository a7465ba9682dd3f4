// The daemon (`tensorhub peer`): one peer and one control loop answering
// the control socket. It stays one class in one file above the soft ceiling
// of 600 lines because every command's handler (publish, fetch, digest,
// release, hold, the waits) shares the same three things and nothing else:
// the loop, which alone writes to the connections and owns every map of
// held versions; the work pool, where each step that may block runs; and
// the peer. The pieces with state of their own are their own types:
// HeldVersions (holds for engines), ReservedBuffers (--reserve),
// OutputJournal (outputs being written), ControlServer (the socket).
#include "cli/peer_daemon.hpp"


#include <asio.hpp>
#include <chrono>
#include <csignal>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <type_traits>

#include <sys/stat.h>

#include "cli/cli_common.hpp"
#include "cli/control_lines.hpp"
#include "cli/control_request.hpp"
#include "cli/output_journal.hpp"
#include "manifest/slices_metadata.hpp"
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
#include "core/work_pool.hpp"
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
// How long a signalled daemon may take to stop before it exits regardless.
constexpr std::chrono::seconds kShutdownLimit{10};

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

// Answers a request with its error: the last line.
void fail(const transport::ControlServer::Reply& reply, const Status& why) { reply(line(error_line(why)), true); }

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
    // The hold directory is this user's alone: another user who made it
    // first could swap a held file under a verified path.
    if (options_.hold_directory.empty()) options_.hold_directory = default_hold_directory();
    if (Status s = check_private_directory(options_.hold_directory, "hold", /*create=*/true, "--hold-dir DIR");
        !s.is_ok()) {
      return report_error(s);
    }
    const std::string own = options_.hold_directory + "/" + identity->public_key().hex().substr(0, 12);
    std::size_t leftovers = 0;
    auto journal = OutputJournal::open(own + ".outputs", leftovers);
    if (!journal) return report_error(journal.status().with_context("the record of outputs being fetched"));
    outputs_ = std::move(*journal);
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
    held_ = std::make_unique<HeldVersions>(
        *peer_, own, [this](std::shared_ptr<void> held, std::function<void()> after) { retire(std::move(held), std::move(after)); },
        cuda_hold_memory, options_.gpu_buffers);
    auto control = transport::ControlServer::start(
        io_, path,
        [this](const Result<std::string>& request, transport::ControlServer::Reply reply,
               transport::ControlServer::WhenClosed when_closed) { handle(request, reply, when_closed); });
    if (!control) return report_error(control.status());
    control_ = std::move(*control);
    TH_LOG_INFO("peer", "control socket " << path);

    for (const std::string& model : options_.follow) follow(model);
    if (!options_.members_file.empty()) later(kMembersCheckInterval, [this] { watch_members(); });

    signals_.async_wait([this](std::error_code ec, int signal) {
      if (ec) return;
      TH_LOG_INFO("peer", (signal == SIGINT ? "SIGINT" : "SIGTERM") << ": leaving gracefully");
      // A signal always ends the daemon: whatever the shutdown waits on, it
      // is cut short after kShutdownLimit (the next start removes what it leaves).
      std::thread([] {
        std::this_thread::sleep_for(kShutdownLimit);
        TH_LOG_ERROR("peer", "shutting down took longer than " << kShutdownLimit.count() << " s; exiting now");
        std::_Exit(kExitOk);
      }).detach();
      control_->close();
      io_.stop();
    });
    io_.run();
    // Handles go before the peer; the peer's destructor leaves gracefully.
    // A fetch still running is cancelled: its temporary file goes with it.
    held_.reset();
    for (const auto& watch : watches_) watch->handle.reset();
    watches_.clear();
    copies_.clear();
    fetched_.clear();
    published_.clear();
    staged_.clear();
    work_.reset();  // the jobs under way finish (what they hand back to the loop is never run)
    groups_.clear();
    peer_.reset();
    commits_.reset();  // a commit waiting ends once the peer has stopped (kCancelled)
    queries_.reset();
    TH_LOG_INFO("peer", "stopped");
    return kExitOk;
  }

 private:
  struct Published {
    std::shared_ptr<core::MappedFile> file;
    std::unique_ptr<PublishHandle> handle;  // after `file`: released before the file is unmapped
  };
  // A fetch request being answered.
  struct FetchWatch {
    VersionInfo info;
    transport::ControlServer::Reply reply;
    std::shared_ptr<FetchHandle> handle;  // null once it ended
    std::optional<Key> kept;              // the daemon holds it under this key (in fetched_)
    bool started_here = false;            // this request started the fetch: its client's leaving cancels it
    std::string output;                   // its --out, recorded in outputs_ while it runs
    bool finished = false;
  };

  // Every request gets an answer, however malformed, and the daemon lives on.
  void handle(const Result<std::string>& request, const transport::ControlServer::Reply& reply,
              const transport::ControlServer::WhenClosed& when_closed) {
    Status s = request.status();
    if (s.is_ok()) {
      try {
        s = handle_request(*request, reply, when_closed);
      } catch (const std::exception& e) {
        s = Status::internal(std::string("the request failed: ") + e.what());
        TH_LOG_ERROR("peer", s.message());
      }
    }
    if (!s.is_ok()) reply(line(error_line(s)), true);
  }

  // An error it returns is the request's answer; otherwise it answers itself.
  Status handle_request(const std::string& text, const transport::ControlServer::Reply& reply,
                        const transport::ControlServer::WhenClosed& when_closed) {
    auto request = parse_control_request(text);
    if (!request) return request.status();
    const ControlRequest& r = *request;
    if (r.cmd == "status") {
      reply(peer_->status_json(), true);
    } else if (r.cmd == "publish") {
      publish(r, reply);
    } else if (r.cmd == "stage") {
      stage(r, reply);
    } else if (r.cmd == "commit") {
      commit(r, reply);
    } else if (r.cmd == "committed") {
      committed(r, reply);
    } else if (r.cmd == "fetch" && !r.select.empty()) {
      fetch_selection(r.model, r.version, r.select, r.out, reply);
    } else if (r.cmd == "fetch") {
      fetch(r.model, r.version, r.out, reply);
    } else if (r.cmd == "digest") {
      digest(r.model, r.version, reply);
    } else if (r.cmd == "release") {
      release(r.model, r.version, r.now, reply);
    } else if (r.cmd == "hold") {
      hold(r.model, r.version, r.gpu, reply, when_closed);
    } else if (r.cmd == "wait_replicated") {
      auto known = peer_->version_info(r.model, r.version);
      if (!known) return known.status();
      auto gone = std::make_shared<bool>(false);
      when_closed([gone] { *gone = true; });
      watch_replicas(r.model, known->version, known->id, r.wait_replicas, /*release_after=*/false, Clock::now(), reply,
                     0, gone);
    } else if (r.cmd == "wait_for_head") {
      auto gone = std::make_shared<bool>(false);
      when_closed([gone] { *gone = true; });
      watch_head(r.model, r.after, reply, gone);
    }
    return Status::ok();
  }

  // BLAKE2b of a version runs at about 0.65 GB/s: off the control loop,
  // holding what keeps the bytes alive until it is done.
  void digest(const std::string& model, std::uint64_t version, const transport::ControlServer::Reply& reply) {
    std::shared_ptr<const void> keep;
    std::span<const std::byte> bytes;
    if (auto it = fetched_.find({model, version});
        it != fetched_.end() && it->second->wait(std::chrono::milliseconds(0)).is_ok()) {
      bytes = it->second->bytes();
      keep = it->second;
    }
    if (auto pub = published_.find({model, version}); pub != published_.end()) {
      bytes = pub->second->file->bytes();
      keep = pub->second;
    }
    if (bytes.empty()) return fail(reply, Status::not_found(model + " v" + std::to_string(version) + " is not held here"));
    work_->submit([this, reply, keep, bytes, what = model + " v" + std::to_string(version)] {
      core::Blake2bDigest digest{};
      const bool read = core::read_guarded([&] { digest = core::blake2b_256(bytes); });
      const std::string answer = read ? line(Json{{"done", true}, {"ok", true}, {"blake2b", to_hex(digest)}})
                                      : line(error_line(Status::io_error(what + " could not be read: its file was "
                                                                                "truncated")));
      asio::post(io_, [reply, answer] { reply(answer, true); });  // the connection is the loop's
    });
  }

  // Mapping, parsing and hashing take as long as the version is large (4 GiB:
  // a fraction of a second to seconds): they run on the work pool, and the
  // publication joins the daemon's state back on the control loop.
  // A part (r.part_count > 0): the file's tensors with the slices its
  // metadata names (manifest/slices_metadata.hpp), as part r.part_index of v r.version.
  void publish(const ControlRequest& r, const transport::ControlServer::Reply& reply) {
    const auto started = Clock::now();
    const std::string model = r.model, path = r.file;
    const std::size_t wait_replicas = r.wait_replicas;
    const bool release_after = r.release;
    if (r.part_count > 0 && published_.count({model, r.version})) {
      return fail(reply, Status::already_exists("this peer publishes a part of " + model + " v" +
                                                std::to_string(r.version) + " already"));
    }
    work_->submit([this, r, model, path, wait_replicas, release_after, reply, started] {
      auto published = std::make_shared<Published>();
      Status s = [&]() -> Status {
        auto file = core::MappedFile::open(path);
        if (!file) return file.status();
        auto layout = parse_safetensors(file->bytes());
        if (!layout) return layout.status().with_context(path);
        published->file = std::make_shared<core::MappedFile>(std::move(*file));
        Result<PublishHandle> handle = Status::internal("not published");
        if (r.part_count > 0) {
          auto tensors = manifest::part_tensors(*layout);
          if (!tensors) return tensors.status().with_context(path);
          const ConstRegion regions[] = {published->file->bytes()};
          PartOptions options;
          options.views = r.views;
          handle = peer_->publish_part(model, r.version, static_cast<std::uint32_t>(r.part_index),
                                       static_cast<std::uint32_t>(r.part_count), regions, std::move(*tensors), options);
        } else {
          handle = peer_->publish(model, published->file->bytes(), layout->tensors);
        }
        if (!handle) return handle.status();
        published->handle = std::make_unique<PublishHandle>(std::move(*handle));
        return Status::ok();
      }();
      asio::post(io_, [this, r, model, wait_replicas, release_after, reply, started, published, s] {
        if (!s.is_ok()) return fail(reply, s);
        const std::uint64_t version = published->handle->info().version;
        const ManifestId id = published->handle->info().id;
        Json event{{"event", "published"}, {"version", version}, {"id", id.hex()},
                   {"bytes", published->file->bytes().size()}};
        if (r.part_count > 0) event["part"] = Json::array({r.part_index, r.part_count});
        reply(line(event), false);
        published_[{model, version}] = published;
        watch_file({model, version}, published->file.get());
        if (wait_replicas == 0) {
          reply(line(Json{{"done", true}, {"ok", true}, {"version", version}, {"id", id.hex()}}), true);
          return;
        }
        watch_replicas(model, version, id, wait_replicas, release_after, started, reply, 0);
      });
    });
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
    if (it == published_.end() || it->second->file.get() != file) return;  // released meanwhile
    if (Status s = file->unchanged(); !s.is_ok()) {
      TH_LOG_ERROR("peer", key.first << " v" << key.second << " is withdrawn: " << s.message());
      retire(it->second);  // the handle goes: the version is served no more
      published_.erase(it);
      return;
    }
    later(kFileCheckInterval, [this, key, file] { watch_file(key, file); });
  }

  // Answers once `wanted` peers other than this one hold model v`version`
  // and proved it, with a "replicas" event as the count moves. A client
  // that closes first (`gone`) ends the wait. The daemon looks every 50 ms:
  // a look is a call into its own peer, not a round trip.
  void watch_replicas(std::string model, std::uint64_t version, ManifestId id, std::size_t wanted, bool release_after,
                      Clock::time_point started, transport::ControlServer::Reply reply, std::size_t reported,
                      std::shared_ptr<const bool> gone = nullptr) {
    if (gone && *gone) return;
    auto counted = peer_->replicas(model, version);
    if (!counted) return fail(reply, counted.status());  // no longer known here (pruned, or signed twice)
    const std::size_t now_have = *counted;
    if (now_have != reported) reply(line(Json{{"event", "replicas"}, {"count", now_have}}), false);
    if (now_have >= wanted) {
      const double stall = std::chrono::duration<double>(Clock::now() - started).count();
      auto it = published_.find({model, version});
      std::shared_ptr<Published> published = it == published_.end() ? nullptr : it->second;
      if (release_after && published) published_.erase(it);
      // The release waits for pieces in flight: off the control loop.
      work_->submit([this, reply, published, release_after, version, id, now_have, stall] {
        std::uint64_t served = 0;
        if (published) {
          if (release_after) published->handle->release();
          served = published->handle->bytes_served();
        }
        const std::string answer =
            line(Json{{"done", true}, {"ok", true}, {"version", version}, {"id", id.hex()}, {"replicas", now_have},
                      {"stall_seconds", stall}, {"released", release_after}, {"bytes_served", served}});
        asio::post(io_, [reply, answer] { reply(answer, true); });  // the connection is the loop's
      });
      return;
    }
    later(std::chrono::milliseconds(50), [=, this] {
      watch_replicas(model, version, id, wanted, release_after, started, reply, now_have, gone);
    });
  }

  // Answers once a head of `model` newer than `after` is verified here; a
  // client that closes first (`gone`) ends the wait.
  void watch_head(std::string model, std::uint64_t after, transport::ControlServer::Reply reply,
                  std::shared_ptr<const bool> gone) {
    if (*gone) return;
    if (auto head = peer_->latest(model); head && head->version > after) {
      reply(line(Json{{"done", true}, {"ok", true}, {"model", model}, {"version", head->version}, {"id", head->id.hex()},
                      {"bytes", head->bytes}}),
            true);
      return;
    }
    later(std::chrono::milliseconds(50), [=, this] { watch_head(model, after, reply, gone); });
  }

  // A fetch answers with progress until it ends. One whose client goes away
  // first (closes the connection: `fetch --timeout` ran out, or it died; a
  // client that only closes its writing half still reads, and is answered)
  // is cancelled: its handle goes, with its temporary file. A fetch that
  // fails leaves nothing held, so the same request again starts afresh.
  void fetch(const std::string& model, std::uint64_t version, const std::string& out,
             const transport::ControlServer::Reply& reply) {
    auto known = peer_->version_info(model, version);
    if (!known) return fail(reply, known.status());
    const VersionInfo info = *known;
    const Key key{model, info.version};
    const bool held = fetched_.count(key) != 0 || published_.count(key) != 0;
    auto watch = std::make_shared<FetchWatch>();
    watch->info = info;
    watch->reply = reply;
    if (out.empty()) {
      // Held by the daemon (and served): fetched now, or already.
      if (auto it = fetched_.find(key); it != fetched_.end()) {
        watch->handle = it->second;
        watch->kept = key;
      } else if (!held) {
        auto handle = start_fetch(model, info.version, info.bytes);
        if (!handle) return fail(reply, handle.status());
        watch->handle = *handle;
        watch->kept = key;
        watch->started_here = true;
      } else {
        return fail(reply, Status::already_exists(model + " v" + std::to_string(info.version) +
                                                       " is published by this peer; fetch it with an output file"));
      }
    } else {
      // Into the output file, written as the blocks arrive and renamed into
      // place once every shard is verified (Peer::fetch_to_file). A version
      // this daemon holds already is copied into it locally.
      watch = start_into_file(info, out, reply, [&] { return peer_->fetch_to_file(model, info.version, out); });
      if (!watch) return;
      if (!held) {
        // The daemon holds and serves this version from the file from now on.
        fetched_[key] = watch->handle;
        watch->kept = key;
      } else {
        copies_.insert(watch->handle);  // a private copy: it goes once the file is in place
      }
    }
    answer_fetch(watch);
  }

  // Starts a fetch into the output file `out` for `reply`, recorded before
  // its temporary file exists: a daemon killed at any moment after leaves
  // nothing its restart does not find. nullptr (and answered) when
  // `start()` fails.
  template <typename Start>
  std::shared_ptr<FetchWatch> start_into_file(const VersionInfo& info, const std::string& out,
                                              const transport::ControlServer::Reply& reply, Start&& start) {
    outputs_.add(out);
    Result<FetchHandle> handle = start();
    if (!handle) {
      outputs_.remove(out);
      fail(reply, handle.status());
      return nullptr;
    }
    auto watch = std::make_shared<FetchWatch>();
    watch->info = info;
    watch->reply = reply;
    watch->handle = std::make_shared<FetchHandle>(std::move(*handle));
    watch->output = out;
    watch->started_here = true;
    return watch;
  }

  // Answers `watch`'s request from now on: started, then progress until it ends.
  void answer_fetch(const std::shared_ptr<FetchWatch>& watch) {
    watches_.insert(watch);
    watch->reply(line(Json{{"event", "started"}, {"version", watch->info.version}, {"id", watch->info.id.hex()},
                           {"bytes", watch->handle->progress().bytes_total}}),
                 false);
    watch_fetch(watch, Clock::now());
  }

  // A selection goes into the output file (Peer::fetch_selection_to_file),
  // served to other fetchers of it while it is fetched, and let go once the
  // file is in place: the daemon holds whole versions only.
  void fetch_selection(const std::string& model, std::uint64_t version, const std::vector<TensorSelection>& selection,
                       const std::string& out, const transport::ControlServer::Reply& reply) {
    if (out.empty()) return fail(reply, Status::invalid_argument("a selection is fetched into a file (\"out\")"));
    auto known = peer_->version_info(model, version);
    if (!known) return fail(reply, known.status());
    auto watch = start_into_file(*known, out, reply, [&] {
      return peer_->fetch_selection_to_file(model, known->version, selection, out);
    });
    if (!watch) return;
    copies_.insert(watch->handle);
    answer_fetch(watch);
  }

  // This daemon's rank of group `name`: joined on its first stage (Peer::group),
  // the same size and rank every time after.
  Result<std::shared_ptr<Group>> group_for(const std::string& name, std::uint64_t size, std::uint64_t rank) {
    if (auto it = groups_.find(name); it != groups_.end()) {
      if (it->second->size() != size || it->second->rank() != rank) {
        return Status::already_exists("this peer is rank " + std::to_string(it->second->rank()) + " of " +
                                      std::to_string(it->second->size()) + " of group " + core::quoted(name) +
                                      " already");
      }
      return it->second;
    }
    auto joined = peer_->group(name, static_cast<std::uint32_t>(size), static_cast<std::uint32_t>(rank));
    if (!joined) return joined.status();
    auto group = std::make_shared<Group>(std::move(*joined));
    groups_[name] = group;
    return group;
  }

  // Stages a version (or a selection of it) for a group, into the output
  // file (Group::fetch_to_file, Group::fetch_selection_to_file), answering
  // with progress as fetch does. The stage is held (and served) until a
  // later stage of the same group and model takes its place: releasing it
  // before the group commits would fail this rank.
  void stage(const ControlRequest& r, const transport::ControlServer::Reply& reply) {
    auto group = group_for(r.group, r.group_size, r.group_rank);
    if (!group) return fail(reply, group.status());
    auto known = peer_->version_info(r.model, r.version);
    if (!known) return fail(reply, known.status());
    auto watch = start_into_file(*known, r.out, reply, [&] {
      return r.select.empty() ? (*group)->fetch_to_file(r.model, r.version, r.out)
                              : (*group)->fetch_selection_to_file(r.model, r.version, r.select, r.out);
    });
    if (!watch) return;
    if (auto& held = staged_[{r.group, r.model}]) retire(std::move(held));  // the earlier stage goes
    staged_[{r.group, r.model}] = watch->handle;
    answer_fetch(watch);
  }

  // Commits v`version` for a group this daemon staged for (Group::commit):
  // the wait runs on a thread of its own, never on the control loop.
  void commit(const ControlRequest& r, const transport::ControlServer::Reply& reply) {
    auto it = groups_.find(r.group);
    if (it == groups_.end()) {
      return fail(reply, Status::not_found("this peer is no rank of group " + core::quoted(r.group) +
                                           ": stage a version for it first"));
    }
    reply(line(Json{{"event", "committing"}, {"version", r.version}}), false);
    commits_->submit([this, group = it->second, version = r.version, timeout = std::chrono::milliseconds(r.timeout_ms),
                      reply] {
      const Status s = group->commit(version, timeout);
      asio::post(io_, [s, version, reply] {
        if (!s.is_ok()) return fail(reply, s);
        reply(line(Json{{"done", true}, {"ok", true}, {"version", version}}), true);
      });
    });
  }

  // The version of a model a group committed (Group::committed), joining
  // the group as stage does: what a restarted rank stages to catch up. A
  // wait for a rank to say one (`timeout_ms`) runs on a pool of its own,
  // so that waits never hold up a commit.
  void committed(const ControlRequest& r, const transport::ControlServer::Reply& reply) {
    auto group = group_for(r.group, r.group_size, r.group_rank);
    if (!group) return fail(reply, group.status());
    queries_->submit([this, group = *group, model = r.model,
                      deadline = Clock::now() + std::chrono::milliseconds(r.timeout_ms), reply] {
      Result<std::optional<std::uint64_t>> version = group->committed(model);
      while (version.is_ok() && !*version && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        version = group->committed(model);
      }
      asio::post(io_, [version, model, reply] {
        if (!version) return fail(reply, version.status());
        reply(line(Json{{"done", true}, {"ok", true}, {"model", model},
                        {"version", *version ? Json(**version) : Json(nullptr)}}),
              true);
      });
    });
  }

  // Reports progress until the fetch ends (wait() puts an output file into
  // place), then answers and lets go of what only this fetch needed.
  void watch_fetch(const std::shared_ptr<FetchWatch>& watch, Clock::time_point started) {
    if (watch->finished) return;
    const FetchProgressInfo p = watch->handle->progress();
    Status s = watch->handle->wait(std::chrono::milliseconds(0));
    if (s.code() == StatusCode::kTimeout) {
      if (!watch->reply(line(progress_line(p)), false)) {
        // The client went away (closed the connection: its --timeout ran
        // out, or it died). A fetch this request started is cancelled; one
        // the daemon held before goes on.
        if (watch->started_here) {
          TH_LOG_INFO("peer", "the client of the fetch of " << watch->info.model << " v" << watch->info.version
                                                            << " went away: cancelled");
        }
        return end_fetch(*watch, /*drop=*/watch->started_here);
      }
      later(std::chrono::milliseconds(50), [this, watch, started] { watch_fetch(watch, started); });
      return;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    const std::uint64_t bytes = watch->handle->bytes().size();
    const std::uint64_t received = watch->handle->progress().bytes_received;
    end_fetch(*watch, !s.is_ok());
    if (!s.is_ok()) return fail(watch->reply, s);
    watch->reply(line(Json{{"done", true}, {"ok", true}, {"version", watch->info.version}, {"id", watch->info.id.hex()},
                           {"bytes", bytes}, {"bytes_received", received}, {"seconds", seconds}}),
                 true);
  }

  // The answer to `watch` is over: a private copy's handle goes (its file is
  // in place, or gone); with `drop` (the fetch failed, or its client went
  // away from a fetch it started) the handle the daemon kept goes too, so
  // the same request again starts afresh; its output is no longer one whose
  // leftovers a restart removes.
  void end_fetch(FetchWatch& watch, bool drop) {
    watch.finished = true;
    std::shared_ptr<FetchHandle> handle = std::move(watch.handle);
    copies_.erase(handle);
    if (drop && watch.kept) {
      auto it = fetched_.find(*watch.kept);
      if (it != fetched_.end() && it->second == handle) drop_fetched({*watch.kept});
    }
    if (!watch.output.empty()) outputs_.remove(watch.output);
    retire(std::move(handle));  // a kept one lives on in fetched_
    for (auto it = watches_.begin(); it != watches_.end(); ++it) {
      if (it->get() == &watch) {
        watches_.erase(it);
        break;
      }
    }
  }

  // A hold lasts while its connection is open: the client (a rank of an
  // engine) closes it to let go, and one that dies lets go with it.
  void hold(const std::string& model, std::uint64_t version, const std::string& gpu,
            const transport::ControlServer::Reply& reply, const transport::ControlServer::WhenClosed& when_closed) {
    auto known = peer_->version_info(model, version);
    if (!known) return fail(reply, known.status());
    // The connection may close before the hold starts (it waits for the
    // last copy of the version to go) or after: only a hold that started
    // is let go.
    struct Lease {
      bool started = false;
      bool closed = false;
    };
    auto lease = std::make_shared<Lease>();
    when_closed([this, reply, lease, info = *known, gpu] {
      lease->closed = true;
      if (!lease->started || !held_) return;  // never held, or the daemon is stopping
      auto left = held_->unhold(info.model, info.version, gpu);
      const std::string answer = line(left ? Json{{"done", true}, {"ok", true}, {"released", true}, {"holds", *left}}
                                           : error_line(left.status()));
      // The last hold's answer waits until the memory is gone (the file removed).
      if (left && *left == 0) return held_->after_retired(info, gpu, [reply, answer] { reply(answer, true); });
      reply(answer, true);
    });
    auto start = [this, reply, lease, info = *known, gpu] {
      if (lease->closed || !held_) return;
      lease->started = held_->hold(info, gpu, reply);  // false: answered with its error
      poll_holds_while_fetching();
    };
    if (held_->retiring(*known, gpu)) {
      reply(line(Json{{"event", "waiting"}, {"reason", "the version's last copy here is being let go"}}), false);
    }
    held_->after_retired(*known, gpu, start);
  }

  // Sends progress to the holds being fetched every 50 ms while any is.
  void poll_holds_while_fetching() {
    if (polling_holds_ || !held_->fetching()) return;
    polling_holds_ = true;
    later(std::chrono::milliseconds(50), [this] { poll_holds(); });
  }

  void poll_holds() {
    polling_holds_ = false;
    held_->poll();
    poll_holds_while_fetching();
  }

  void release(const std::string& model, std::uint64_t version, bool now, const transport::ControlServer::Reply& reply) {
    const std::pair<std::string, std::uint64_t> key{model, version};
    auto done = [this, key, reply] {
      // On the peer's thread: the memory is free; drop it on the daemon's.
      asio::post(io_, [this, key, reply] {
        if (auto it = published_.find(key); it != published_.end()) {
          retire(it->second);
          published_.erase(it);
        }
        drop_fetched({key}, [reply] { reply(line(Json{{"done", true}, {"ok", true}}), true); });
      });
    };
    auto pub = published_.find(key);
    auto fetched = fetched_.find(key);
    if (pub == published_.end() && fetched == fetched_.end()) {
      reply(line(error_line(Status::not_found(model + " v" + std::to_string(version) + " is not held here"))), true);
    } else if (now) {
      // Destroying a handle releases at once (once pieces in flight are out).
      if (pub != published_.end()) {
        retire(pub->second);
        published_.erase(pub);
      }
      drop_fetched({key}, [reply] { reply(line(Json{{"done", true}, {"ok", true}}), true); });
    } else if (pub != published_.end()) {
      reply(line(Json{{"event", "releasing"}}), false);
      pub->second->handle->release_async(done);
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
    std::vector<Key> older;
    while (held.size() > 1) {
      older.emplace_back(model, held.front());
      held.erase(held.begin());
    }
    // Once they are released, their reserved memory takes this one.
    drop_fetched(older, [this, model, head] {
      if (fetched_.count({model, head.version})) return;
      auto handle = start_fetch(model, head.version, head.bytes, /*keep_buffer=*/true);
      if (!handle) {
        TH_LOG_WARN("peer", "cannot follow " << model << " v" << head.version << ": " << handle.status().to_string());
      }
    });
  }

  // Starts a fetch into reserved memory when a buffer of `bytes` is free
  // (bytes 0: unknown). Otherwise a followed model gets a new buffer that
  // stays with the daemon (its pages, faulted in by this fetch, are warm
  // for the versions after it), and anything else memory the peer
  // allocates for the version alone.
  Result<std::shared_ptr<FetchHandle>> start_fetch(const std::string& model, std::uint64_t version,
                                                   std::uint64_t bytes, bool keep_buffer = false) {
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
    auto owned = std::make_shared<FetchHandle>(std::move(*handle));
    fetched_[{model, version}] = owned;
    if (buffer) buffer_of_[{model, version}] = *buffer;
    return owned;
  }

  // Releases fetched versions (at once: the handles' destructors release
  // them, off the control loop), then gives their reserved memory back and
  // runs `after`, on the loop.
  void drop_fetched(const std::vector<Key>& keys, std::function<void()> after = {}) {
    std::vector<std::shared_ptr<FetchHandle>> handles;
    std::vector<std::size_t> buffers;
    for (const Key& key : keys) {
      if (auto it = fetched_.find(key); it != fetched_.end()) {
        handles.push_back(std::move(it->second));
        fetched_.erase(it);
      }
      if (auto b = buffer_of_.find(key); b != buffer_of_.end()) {
        buffers.push_back(b->second);
        buffer_of_.erase(b);
      }
    }
    retire(std::make_shared<decltype(handles)>(std::move(handles)), [this, buffers, after] {
      for (std::size_t b : buffers) reserved_.give_back(b);  // the memory is ours again (a file's stays)
      if (after) after();
    });
  }

  // Lets go of `held` (a handle's destructor releases it, waiting for pieces
  // in flight up to the engine's grace) on the work pool, never on the
  // control loop; then runs `after` on the loop.
  void retire(std::shared_ptr<void> held, std::function<void()> after = {}) {
    work_->submit([this, held = std::move(held), after = std::move(after)]() mutable {
      held.reset();
      if (after) asio::post(io_, std::move(after));
    });
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
  std::map<Key, std::shared_ptr<Published>> published_;
  std::map<Key, std::shared_ptr<FetchHandle>> fetched_;
  std::set<std::shared_ptr<FetchHandle>> copies_;  // private copies into output files, until in place
  std::set<std::shared_ptr<FetchWatch>> watches_;  // fetch requests being answered
  OutputJournal outputs_;
  std::unique_ptr<HeldVersions> held_;
  bool polling_holds_ = false;  // poll_holds is due
  // The steps that take long (hashing a publication, a digest, releases
  // that wait for pieces in flight), so the control loop never waits on them.
  std::unique_ptr<core::WorkPool> work_ = std::make_unique<core::WorkPool>(2);
  // The groups this daemon is a rank of, by name, and each group's stage
  // of each model; commits wait on threads of their own (a peer is a rank
  // of at most 4 groups).
  std::map<std::string, std::shared_ptr<Group>> groups_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<FetchHandle>> staged_;
  std::unique_ptr<core::WorkPool> commits_ = std::make_unique<core::WorkPool>(4);
  std::unique_ptr<core::WorkPool> queries_ = std::make_unique<core::WorkPool>(2);  // committed's waits
};

}  // namespace

int run_peer_daemon(DaemonOptions options) { return Daemon(std::move(options)).run(); }

}  // namespace tensorhub::cli
