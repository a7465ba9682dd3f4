// The public Peer: an I/O thread running a PeerEngine, a callback thread for
// the application's callbacks, and thread-safe calls that run on the I/O
// thread and wait for their answer.
#include "tensorhub/peer.hpp"

#include <asio.hpp>
#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "core/log.hpp"
#include "core/work_pool.hpp"
#include "cuda/gpu_memory.hpp"
#include "seams/file_memory.hpp"
#include "transport/peer_engine.hpp"
#include "transport/peer_internal.hpp"

namespace tensorhub {
namespace {

// How long a Peer's destructor waits for its departure to spread.
constexpr auto kLeaveWait = std::chrono::seconds(4);
// How long a release under way waits once the peer is stopping.
constexpr auto kShutdownReleaseWait = std::chrono::seconds(3);
// Publications that lost the race for a version number are built again this often.
constexpr int kPublishAttempts = 3;
// How long a publication waits to learn the head it must follow.
constexpr auto kHeadWait = std::chrono::seconds(10);

}  // namespace

struct Peer::Impl {
  // What handles reach their peer through. ~Impl closes it (waiting for
  // the calls under way, each bounded once the engine is closed), so a
  // handle that outlives its Peer finds it closed and holds nothing: the
  // engine is gone, and with it every read of the handle's memory. Calls
  // through it run concurrently; the mutex guards only the fields.
  struct Gate {
    std::mutex mutex;
    std::condition_variable idle;
    Impl* impl = nullptr;  // null once the peer is going
    int calls = 0;         // calls under way
  };
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  std::atomic<bool> closing{false};  // the engine is closed: releases under way are bounded

  // The GPUs fetched into, by UUID: opened on first use, kept while the
  // peer runs, and destroyed after the engine (whose versions use them).
  std::mutex gpus_mutex;
  std::map<std::string, std::unique_ptr<cuda::GpuMemory>> gpus;

  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::unique_ptr<peer::PeerEngine> engine;
  std::thread thread;
  PeerId id;
  std::optional<Identity> identity;  // a copy for signing publications on the caller's thread
  std::uint64_t shard_size = kAutoShardSize;
  ShardHashAlgorithm shard_hash = ShardHashAlgorithm::kXxh3_128;
  std::uint32_t block_size = 1u << 20;  // a GPU's staging slots hold one block each

  // Waiters wake when `generation` moves (the engine changed something).
  std::mutex change_mutex;
  std::condition_variable change;
  std::uint64_t generation = 0;

  // The application's callbacks, off the I/O thread.
  std::mutex callbacks_mutex;
  std::unique_ptr<core::WorkPool> callbacks = std::make_unique<core::WorkPool>(1);

  void run_callback(std::function<void()> fn) {
    std::lock_guard lock(callbacks_mutex);
    if (callbacks) callbacks->submit(std::move(fn));
  }

  std::uint64_t current_generation() {
    std::lock_guard lock(change_mutex);
    return generation;
  }
  // Waits until the generation moves past `seen` or `deadline` passes;
  // returns false on the deadline.
  bool wait_change(std::uint64_t seen, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(change_mutex);
    return change.wait_until(lock, deadline, [&] { return generation != seen; });
  }

  // Runs fn on the I/O thread and returns its result.
  template <typename F>
  auto call(F&& fn) -> decltype(fn()) {
    using R = decltype(fn());
    if (std::this_thread::get_id() == thread.get_id()) return fn();
    std::packaged_task<R()> task(std::forward<F>(fn));
    auto future = task.get_future();
    asio::post(io, [&task] { task(); });
    return future.get();
  }

  ~Impl() {
    if (thread.joinable()) {
      std::promise<void> left;
      auto done = left.get_future();
      asio::post(io, [this, &left] { engine->leave([&left] { left.set_value(); }); });
      done.wait_for(kLeaveWait);
      // Callbacks already queued run while the I/O thread still answers them.
      std::unique_ptr<core::WorkPool> pool;
      {
        std::lock_guard lock(callbacks_mutex);
        pool = std::move(callbacks);
      }
      pool.reset();
      asio::post(io, [this] { engine->close(); });
      closing = true;  // nothing is sent any more: a release under way is bounded
      close_gate();    // while the I/O thread still gives memory back
      work.reset();
      io.stop();
      thread.join();
    }
    close_gate();
    engine.reset();
  }

  // From here on, handles reach nothing; the calls under way finish first.
  void close_gate() {
    std::unique_lock lock(gate->mutex);
    gate->impl = nullptr;
    gate->idle.wait(lock, [&] { return gate->calls == 0; });
  }
};

struct PeerAccess {
  using Impl = Peer::Impl;
  static std::unique_ptr<Peer> make(std::unique_ptr<Impl> impl) { return std::unique_ptr<Peer>(new Peer(std::move(impl))); }
  static Impl& impl(Peer& peer) { return *peer.impl_; }
  // A version the engine just published or began fetching, and what the
  // handle's threads see of it.
  struct Created {
    std::shared_ptr<peer::LocalVersion> version;
    std::shared_ptr<const peer::VersionWatch> watch;
  };
  // Runs `start` (the engine's publish or fetch) on the I/O thread; with
  // the version it gives, its watch.
  template <typename F>
  static Result<Created> created(Impl& impl, F&& start) {
    return impl.call([&]() -> Result<Created> {
      auto v = start();
      if (!v) return v.status();
      return Created{*v, impl.engine->watch_of(*v)};
    });
  }
  static FetchHandle fetch_handle(Impl* impl, Created version);
  static PublishHandle publish_handle(Impl* impl, Created version);
  // The GPU named `uuid`, opened on first use. Errors: as GpuMemory::open.
  static Result<const cuda::GpuMemory*> gpu(Impl& impl, const std::string& uuid);
};

namespace {

using ReleaseMode = peer::ReleaseMode;
using Impl = PeerAccess::Impl;

// What both handles hold: one version of their own, and how far its release
// has gone.
struct HeldVersion {
  enum Phase { kHeld, kReleasing, kReleased };
  std::shared_ptr<Impl::Gate> gate;
  // Only the fields a LocalVersion never changes are read through `version`
  // here; its state is the I/O thread's, and handles read `watch`.
  std::shared_ptr<peer::LocalVersion> version;
  std::shared_ptr<const peer::VersionWatch> watch;
  VersionInfo info;  // of `version`
  std::atomic<int> phase{kHeld};

  // Runs fn(impl) on the caller's thread while the peer is there; false
  // (fn not run) once it is going.
  template <typename F>
  bool with_peer(F&& fn) {
    Impl* impl = nullptr;
    {
      std::lock_guard lock(gate->mutex);
      if (gate->impl == nullptr) return false;
      impl = gate->impl;
      ++gate->calls;
    }
    struct Done {
      Impl::Gate& gate;
      ~Done() {
        std::lock_guard lock(gate.mutex);
        if (--gate.calls == 0) gate.idle.notify_all();
      }
    } done{*gate};
    fn(*impl);
    return true;
  }

  void release(ReleaseMode mode) {
    if (phase.load() == kReleased) return;
    if (phase.load() == kReleasing && mode == ReleaseMode::kHonourRetention) mode = ReleaseMode::kNow;
    phase = kReleasing;
    // The memory is its owner's once no piece is being sent from it: the
    // engine ends stalled sends after a grace (PeerEngine::release_memory).
    with_peer([&](Impl& impl) {
      auto done = std::make_shared<std::promise<void>>();
      auto future = done->get_future();
      impl.call([&] { impl.engine->release(version, mode, [done] { done->set_value(); }); });
      // While the peer runs, the wait ends: the engine ends stalled sends
      // after its grace. While it shuts down, it is bounded, then abandoned.
      std::optional<std::chrono::steady_clock::time_point> closing_since;
      while (future.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
        if (!impl.closing.load()) continue;
        if (!closing_since) closing_since = std::chrono::steady_clock::now();
        if (std::chrono::steady_clock::now() - *closing_since >= kShutdownReleaseWait) {
          TH_LOG_WARN("peer", "the release of " << version->model << " v" << version->number << " did not finish within "
                                                << kShutdownReleaseWait.count() << " s of the peer stopping; "
                                                << "abandoned");
          break;
        }
      }
    });
    phase = kReleased;
  }

  void release_async(std::function<void()> done) {
    int expected = kHeld;
    if (!phase.compare_exchange_strong(expected, kReleasing)) return;
    const bool asked = with_peer([&](Impl& impl) {
      impl.call([&] {
        impl.engine->release(version, ReleaseMode::kHonourRetention, [this, &impl, done = std::move(done)] {
          phase = kReleased;
          if (done) impl.run_callback(done);
        });
      });
    });
    if (!asked) phase = kReleased;  // the peer is gone, and with it every read of the memory
  }
};

}  // namespace

struct PublishHandle::State : HeldVersion {};

struct FetchHandle::State : HeldVersion {
  // A fetch into a file: renamed into place by the first wait() that finds
  // the version complete.
  std::shared_ptr<peer::FileDestination> file;

  Status commit_file() { return file ? file->commit() : Status::ok(); }
  void discard_file() {
    if (file) file->release();
  }
};

namespace peer {

Result<std::unique_ptr<Peer>> start_peer(PeerOptions options, InternalOptions internal, Identity identity,
                                         SwarmKey swarm_key) {
  auto impl = std::make_unique<Impl>();
  Impl* raw = impl.get();
  impl->gate->impl = raw;
  impl->id = identity.public_key();
  impl->identity.emplace(identity.clone());
  impl->shard_size = options.shard_size;
  impl->shard_hash = options.shard_hash;
  impl->block_size = options.block_size;
  impl->engine = std::make_unique<PeerEngine>(impl->io, std::move(options), internal, std::move(identity),
                                              std::move(swarm_key),
                                              [raw](std::function<void()> fn) { raw->run_callback(std::move(fn)); });
  Status started = impl->engine->start();
  if (!started.is_ok()) return started;
  impl->engine->on_change([raw] {
    {
      std::lock_guard lock(raw->change_mutex);
      ++raw->generation;
    }
    raw->change.notify_all();
  });
  impl->work.emplace(asio::make_work_guard(impl->io));
  impl->thread = std::thread([raw] { raw->io.run(); });
  return PeerAccess::make(std::move(impl));
}

void post_to_io_thread(Peer& peer, std::function<void()> fn) { asio::post(PeerAccess::impl(peer).io, std::move(fn)); }

}  // namespace peer

Result<std::unique_ptr<Peer>> Peer::start(PeerOptions options, Identity identity, SwarmKey swarm_key) {
  return peer::start_peer(std::move(options), peer::InternalOptions{}, std::move(identity), std::move(swarm_key));
}

Peer::Peer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Peer::~Peer() = default;

const PeerId& Peer::id() const { return impl_->id; }

std::string Peer::gossip_address() const {
  return impl_->call([&] { return impl_->engine->gossip_address().to_string(); });
}

Result<PublishHandle> Peer::publish(const std::string& model, std::span<const std::byte> image,
                                    std::vector<TensorEntry> tensors) {
  if (image.empty()) return publish(model, std::span<const ConstRegion>(), std::move(tensors));
  const ConstRegion one[] = {image};
  return publish(model, std::span<const ConstRegion>(one), std::move(tensors));
}

Result<PublishHandle> Peer::publish(const std::string& model, std::span<const ConstRegion> regions,
                                    std::vector<TensorEntry> tensors) {
  return peer::publish_from(*this, model, regions, std::move(tensors), peer::host_memory());
}

Result<PublishHandle> Peer::publish(const std::string& model, std::span<const ConstRegion> regions,
                                    std::vector<TensorEntry> tensors, const MemoryOptions& options) {
  if (options.gpu.empty()) return publish(model, regions, std::move(tensors));
  auto gpu = PeerAccess::gpu(*impl_, options.gpu);
  if (!gpu) return gpu.status();
  return peer::publish_from(*this, model, regions, std::move(tensors), (*gpu)->domain());
}

Result<PublishHandle> peer::publish_from(Peer& peer, const std::string& model, std::span<const ConstRegion> regions,
                                         std::vector<TensorEntry> tensors, const MemoryDomain& domain) {
  Impl* impl = &PeerAccess::impl(peer);
  const auto head_deadline = std::chrono::steady_clock::now() + kHeadWait;
  for (int attempt = 1;;) {
    const std::uint64_t seen = impl->current_generation();
    auto next = impl->call([&] { return impl->engine->next_version(model); });
    if (!next && next.status().code() == StatusCode::kUnavailable && impl->wait_change(seen, head_deadline)) continue;
    if (!next) return next.status();
    ManifestBuildOptions o;
    o.model = model;
    o.version = next->version;
    o.parent = next->parent;
    o.created_unix_ms = transport::wall_clock_ms();
    o.shard_size = impl->shard_size;
    o.shard_hash = impl->shard_hash;
    // Hashed here, on the caller's thread and its helpers (or on the GPU):
    // the I/O thread goes on serving.
    auto manifest = build_manifest_in(domain, o, regions, tensors, *impl->identity);
    if (!manifest) return manifest.status();
    auto shared = std::make_shared<const Manifest>(std::move(*manifest));
    auto v = PeerAccess::created(*impl, [&] { return impl->engine->publish(shared, core::ConstRegions(regions), domain); });
    if (!v && v.status().code() == StatusCode::kAlreadyExists && attempt++ < kPublishAttempts) continue;
    if (!v) return v.status();
    return PeerAccess::publish_handle(impl, std::move(*v));
  }
}

std::optional<VersionInfo> Peer::latest(const std::string& model) const {
  return impl_->call([&] { return impl_->engine->latest(model); });
}

Result<VersionInfo> Peer::version_info(const std::string& model, std::uint64_t version) const {
  return impl_->call([&] { return impl_->engine->version_info(model, version); });
}

Result<Manifest> Peer::manifest(const std::string& model, std::uint64_t version) const {
  return impl_->call([&]() -> Result<Manifest> {
    auto m = impl_->engine->manifest(model, version);
    if (!m) return m.status();
    return Manifest(**m);
  });
}

void Peer::subscribe(const std::string& model, std::function<void(const VersionInfo&)> callback) {
  impl_->call([&] { impl_->engine->subscribe(model, std::move(callback)); });
}

Result<VersionInfo> Peer::wait_for_head(const std::string& model, std::uint64_t after, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const std::uint64_t seen = impl_->current_generation();
    auto head = latest(model);
    if (head && head->version > after) return *head;
    // A newer version signed twice will never become the head: say so.
    Status equivocation = impl_->call([&] { return impl_->engine->equivocation_above(model, after); });
    if (!equivocation.is_ok()) return equivocation;
    if (!impl_->wait_change(seen, deadline)) {
      const std::string what = "no head of '" + model + "' newer than v" + std::to_string(after) + " appeared";
      Status joined = impl_->call([&] { return impl_->engine->join_status(); });
      if (!joined.is_ok()) return joined.with_context(what);
      return Status::timeout(what);
    }
  }
}

Result<FetchHandle> Peer::fetch(const std::string& model, std::uint64_t version, std::span<std::byte> destination) {
  return fetch(model, version, destination.empty() ? std::span<const MutableRegion>() : std::span<const MutableRegion>(&destination, 1));
}

Result<FetchHandle> Peer::fetch(const std::string& model, std::uint64_t version, std::span<const MutableRegion> regions) {
  return peer::fetch_into(*this, model, version, regions, peer::host_memory());
}

Result<FetchHandle> Peer::fetch(const std::string& model, std::uint64_t version, std::span<const MutableRegion> regions,
                                const MemoryOptions& options) {
  if (options.gpu.empty()) return fetch(model, version, regions);
  if (regions.empty()) return Status::invalid_argument("a fetch into GPU memory needs its destination regions");
  auto gpu = PeerAccess::gpu(*impl_, options.gpu);
  if (!gpu) return gpu.status();
  return peer::fetch_into(*this, model, version, regions, (*gpu)->domain());
}

Result<FetchHandle> Peer::fetch_to_file(const std::string& model, std::uint64_t version, const std::string& path,
                                        const FileOptions& options) {
  auto info = version_info(model, version);
  if (!info) return info.status();
  auto file = core::MappedOutputFile::create(path, info->bytes, options.mode, options.overwrite);
  if (!file) return file.status();
  auto destination = std::make_shared<peer::FileDestination>(std::move(*file));
  auto v = PeerAccess::created(*impl_, [&] {
    return impl_->engine->fetch(info->model, info->version, core::MutableRegions(destination->bytes()),
                                destination->domain(), destination);
  });
  if (!v) return v.status();
  FetchHandle handle = PeerAccess::fetch_handle(impl_.get(), std::move(*v));
  handle.state_->file = std::move(destination);
  return handle;
}

Result<FetchHandle> peer::fetch_into(Peer& peer, const std::string& model, std::uint64_t version,
                                     std::span<const MutableRegion> regions, const MemoryDomain& domain) {
  Impl* impl = &PeerAccess::impl(peer);
  for (const MutableRegion& r : regions) {
    if (r.empty()) return Status::invalid_argument("a destination region is empty");
  }
  auto v = PeerAccess::created(*impl, [&] { return impl->engine->fetch(model, version, core::MutableRegions(regions), domain); });
  if (!v) return v.status();
  return PeerAccess::fetch_handle(impl, std::move(*v));
}

namespace {

// A handle's state for a version the engine just created: the gate to its
// peer, the version, its watch and which version it is.
template <typename State>
std::shared_ptr<State> state_for(Impl* impl, PeerAccess::Created version) {
  auto state = std::make_shared<State>();
  state->gate = impl->gate;
  const peer::LocalVersion& v = *version.version;
  state->info = VersionInfo{v.model, v.number, v.id, v.manifest->total_size()};
  state->version = std::move(version.version);
  state->watch = std::move(version.watch);
  return state;
}

}  // namespace

PublishHandle PeerAccess::publish_handle(Impl* impl, Created version) {
  return PublishHandle(state_for<PublishHandle::State>(impl, std::move(version)));
}

Result<const cuda::GpuMemory*> PeerAccess::gpu(Impl& impl, const std::string& uuid) {
  std::lock_guard lock(impl.gpus_mutex);
  auto& slot = impl.gpus[uuid];
  if (!slot) {
    Status opened = cuda::GpuMemory::open(uuid, impl.block_size, slot);
    if (!opened.is_ok()) {
      impl.gpus.erase(uuid);
      return opened;
    }
  }
  return slot.get();
}

FetchHandle PeerAccess::fetch_handle(Impl* impl, Created version) {
  return FetchHandle(state_for<FetchHandle::State>(impl, std::move(version)));
}

Result<std::size_t> Peer::replicas(const std::string& model, std::uint64_t version) const {
  return impl_->call([&]() -> Result<std::size_t> {
    auto info = impl_->engine->version_info(model, version);
    if (!info) return info.status();
    return impl_->engine->replicas(info->id);
  });
}

Status Peer::set_members(std::vector<PublicKey> members) {
  return impl_->call([&] { return impl_->engine->set_members(std::move(members)); });
}

std::string Peer::status_json() const {
  return impl_->call([&] { return impl_->engine->status_json(); });
}

// --------------------------------------------------------------------------

PublishHandle::PublishHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}
PublishHandle::PublishHandle(PublishHandle&&) noexcept = default;
PublishHandle& PublishHandle::operator=(PublishHandle&& other) noexcept {
  if (this != &other) {
    if (state_) state_->release(ReleaseMode::kNow);
    state_ = std::move(other.state_);
  }
  return *this;
}
PublishHandle::~PublishHandle() {
  if (state_) state_->release(ReleaseMode::kNow);
}
const VersionInfo& PublishHandle::info() const { return state_->info; }
const Manifest& PublishHandle::manifest() const { return *state_->version->manifest; }
std::uint64_t PublishHandle::bytes_served() const { return state_->watch->bytes_served.load(); }

Status PublishHandle::wait_replicated(std::size_t replicas, std::chrono::milliseconds timeout) {
  const ManifestId id = state_->version->id;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::uint64_t seen = 0;
    std::size_t have = 0;
    // Counting also challenges the members that claim the version and have
    // not proved it (again, when an answer was lost): so wake at least
    // every second even in a quiet swarm.
    const bool counted = state_->with_peer([&](Impl& impl) {
      seen = impl.current_generation();
      have = impl.call([&] { return impl.engine->replicas(id); });
    });
    if (!counted) return Status::cancelled("the peer that published this version has stopped");
    if (have >= replicas) return Status::ok();
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::timeout(std::to_string(have) + " of " + std::to_string(replicas) + " replicas after " +
                             std::to_string(timeout.count()) + " ms");
    }
    const auto wake = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    // Through the gate: a peer going meanwhile waits for this (at most a second).
    state_->with_peer([&](Impl& impl) { impl.wait_change(seen, wake); });
  }
}

void PublishHandle::release() {
  if (state_) state_->release(ReleaseMode::kHonourRetention);
}
void PublishHandle::release_async(std::function<void()> done) {
  if (state_) state_->release_async(std::move(done));
}

FetchHandle::FetchHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}
FetchHandle::FetchHandle(FetchHandle&&) noexcept = default;
FetchHandle& FetchHandle::operator=(FetchHandle&& other) noexcept {
  if (this != &other) {
    if (state_) {
      state_->release(ReleaseMode::kNow);
      state_->discard_file();
    }
    state_ = std::move(other.state_);
  }
  return *this;
}
FetchHandle::~FetchHandle() {
  if (!state_) return;
  state_->release(ReleaseMode::kNow);
  state_->discard_file();
}
const VersionInfo& FetchHandle::info() const { return state_->info; }
const Manifest& FetchHandle::manifest() const { return *state_->version->manifest; }
std::vector<bool> FetchHandle::verified_shards() const {
  State& s = *state_;
  if (s.phase.load() == HeldVersion::kReleased) return {};
  std::vector<bool> out;
  s.with_peer([&](Impl& impl) { out = impl.call([&] { return impl.engine->verified_shards(*s.version); }); });
  return out;
}

FetchProgressInfo FetchHandle::progress() const { return state_->watch->snapshot().progress; }

FetchProgressInfo FetchHandle::wait_progress(std::uint32_t shards_verified, std::chrono::milliseconds timeout) const {
  return state_->watch->wait_verified_above(shards_verified, timeout).progress;
}

Status FetchHandle::wait(std::chrono::milliseconds timeout) {
  const peer::VersionWatch::Snapshot v = state_->watch->wait_finished(timeout);
  if (!v.finished()) {
    return Status::timeout(std::to_string(v.progress.shards_verified) + " of " + std::to_string(v.progress.shards_total) +
                           " shards verified after " + std::to_string(timeout.count()) + " ms");
  }
  if (v.state == peer::VersionState::kComplete) return state_->commit_file();
  if (v.state == peer::VersionState::kReleased && v.progress.bytes_verified == v.progress.bytes_total) {
    // ok for a file put in place before the release
    return state_->file ? state_->commit_file() : Status::cancelled("released");
  }
  // Released by its caller before it finished: cancelled, whatever the
  // release itself made the fetch fail with (a file destination removed
  // under a landing payload fails it with kIoError first).
  const bool released_here = state_->phase.load() != HeldVersion::kHeld;
  const Status failed =
      v.result.is_ok() || released_here ? Status::cancelled("released before it finished") : v.result;
  const bool fetch_failed = v.state == peer::VersionState::kFailed;
  // The engine removes a failed fetch's file once it hears (FetchDone); a
  // waiter may wake first: it never returns while the file is still there.
  if (fetch_failed && state_->file) state_->file->fetch_failed();
  return failed;
}

std::span<const std::byte> FetchHandle::bytes() const {
  const auto& v = *state_->version;
  if (state_->watch->snapshot().state != peer::VersionState::kComplete || v.destination.count() != 1) return {};
  return v.destination.regions()[0];
}

std::vector<ConstRegion> FetchHandle::regions() const {
  const auto& v = *state_->version;
  if (state_->watch->snapshot().state != peer::VersionState::kComplete) return {};
  return std::vector<ConstRegion>(v.destination.regions().begin(), v.destination.regions().end());
}

void FetchHandle::release() {
  if (!state_) return;
  state_->discard_file();
  state_->release(ReleaseMode::kHonourRetention);
}
void FetchHandle::release_async(std::function<void()> done) {
  if (!state_) return;
  state_->discard_file();
  state_->release_async(std::move(done));
}

}  // namespace tensorhub
