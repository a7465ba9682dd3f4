// The public Peer: an I/O thread running a PeerEngine, and thread-safe calls
// that run on that thread and wait for their answer.
#include "tensorhub/peer.hpp"

#include <asio.hpp>
#include <atomic>
#include <future>
#include <thread>

#include "peer/peer_engine.hpp"

namespace tensorhub {

struct Peer::Impl {
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::unique_ptr<peer::PeerEngine> engine;
  std::thread thread;
  PeerId id;
  std::mutex change_mutex;
  std::condition_variable change;

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
      done.wait_for(std::chrono::seconds(4));
      asio::post(io, [this] { engine->close(); });
      work.reset();
      io.stop();
      thread.join();
    }
    engine.reset();
  }
};

namespace {

using ReleaseMode = peer::PeerEngine::ReleaseMode;

// What both handles hold: the version, and how far its release has gone.
struct HeldVersion {
  enum Phase { kHeld, kReleasing, kReleased };
  Peer::Impl* impl = nullptr;
  std::shared_ptr<peer::LocalVersion> version;
  std::atomic<int> phase{kHeld};

  // REQUIRES: called from an application thread, not the peer's.
  void release(ReleaseMode mode) {
    if (phase.load() == kReleased) return;
    if (phase.load() == kReleasing && mode == ReleaseMode::kHonourRetention) mode = ReleaseMode::kNow;
    phase = kReleasing;
    std::promise<void> done;
    auto future = done.get_future();
    impl->call([&] { impl->engine->release(version, mode, [&done] { done.set_value(); }); });
    future.wait();
    phase = kReleased;
  }

  void release_async(std::function<void()> done) {
    int expected = kHeld;
    if (!phase.compare_exchange_strong(expected, kReleasing)) return;
    impl->call([&] {
      impl->engine->release(version, ReleaseMode::kHonourRetention, [this, done = std::move(done)] {
        phase = kReleased;
        if (done) done();
      });
    });
  }
};

}  // namespace

struct PublishHandle::State : HeldVersion {};

struct FetchHandle::State : HeldVersion {
  VersionInfo info;
};

Result<std::unique_ptr<Peer>> Peer::start(PeerOptions options, Identity identity, SwarmKey swarm_key) {
  auto impl = std::make_unique<Impl>();
  impl->id = identity.public_key();
  impl->engine = std::make_unique<peer::PeerEngine>(impl->io, std::move(options), std::move(identity), std::move(swarm_key));
  Status started = impl->engine->start();
  if (!started.is_ok()) return started;
  Impl* raw = impl.get();
  impl->engine->on_change([raw] {
    std::lock_guard lock(raw->change_mutex);
    raw->change.notify_all();
  });
  impl->work.emplace(asio::make_work_guard(impl->io));
  impl->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<Peer>(new Peer(std::move(impl)));
}

Peer::Peer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Peer::~Peer() = default;

const PeerId& Peer::id() const { return impl_->id; }

std::string Peer::gossip_address() const {
  return impl_->call([&] { return impl_->engine->gossip_address().to_string(); });
}

Result<PublishHandle> Peer::publish(const std::string& model, std::span<const std::byte> image,
                                    std::vector<TensorEntry> tensors) {
  auto v = impl_->call([&] { return impl_->engine->publish(model, image, std::move(tensors)); });
  if (!v) return v.status();
  auto state = std::make_shared<PublishHandle::State>();
  state->impl = impl_.get();
  state->version = *v;
  return PublishHandle(state);
}

std::optional<VersionInfo> Peer::latest(const std::string& model) const {
  return impl_->call([&] { return impl_->engine->latest(model); });
}

void Peer::subscribe(const std::string& model, std::function<void(const VersionInfo&)> callback) {
  impl_->call([&] { impl_->engine->subscribe(model, std::move(callback)); });
}

Result<VersionInfo> Peer::wait_for_head(const std::string& model, std::uint64_t after, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto head = latest(model);
    if (head && head->version > after) return *head;
    std::unique_lock lock(impl_->change_mutex);
    if (impl_->change.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100))) ==
            std::cv_status::timeout &&
        std::chrono::steady_clock::now() >= deadline) {
      return Status::timeout("no head of '" + model + "' newer than v" + std::to_string(after) + " appeared");
    }
  }
}

Result<FetchHandle> Peer::fetch(const std::string& model, std::uint64_t version, std::span<std::byte> destination) {
  auto v = impl_->call([&] { return impl_->engine->fetch(model, version, destination); });
  if (!v) return v.status();
  auto state = std::make_shared<FetchHandle::State>();
  state->impl = impl_.get();
  state->version = *v;
  {
    std::lock_guard lock((*v)->mutex);
    state->info = VersionInfo{(*v)->model, (*v)->number, (*v)->id, (*v)->manifest ? (*v)->manifest->total_size() : 0};
  }
  return FetchHandle(state);
}

std::size_t Peer::replicas(const ManifestId& id) const {
  return impl_->call([&] { return impl_->engine->replicas(id); });
}

std::string Peer::status_json() const {
  return impl_->call([&] { return impl_->engine->status_json(); });
}

// --------------------------------------------------------------------------

PublishHandle::PublishHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}
PublishHandle::PublishHandle(PublishHandle&&) noexcept = default;
PublishHandle::~PublishHandle() {
  if (state_) state_->release(ReleaseMode::kNow);
}
std::uint64_t PublishHandle::version() const { return state_->version->number; }
const ManifestId& PublishHandle::manifest_id() const { return state_->version->id; }
const Manifest& PublishHandle::manifest() const { return *state_->version->manifest; }
std::uint64_t PublishHandle::bytes_served() const {
  std::lock_guard lock(state_->version->mutex);
  return state_->version->bytes_served;
}

Status PublishHandle::wait_replicated(std::size_t replicas, std::chrono::milliseconds timeout) {
  Peer::Impl* impl = state_->impl;
  const ManifestId id = state_->version->id;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const std::size_t have = impl->call([&] { return impl->engine->replicas(id); });
    if (have >= replicas) return Status::ok();
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::timeout(std::to_string(have) + " of " + std::to_string(replicas) + " replicas after " +
                             std::to_string(timeout.count()) + " ms");
    }
    std::unique_lock lock(impl->change_mutex);
    impl->change.wait_for(lock, std::chrono::milliseconds(50));
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
FetchHandle::~FetchHandle() {
  if (state_) state_->release(ReleaseMode::kNow);
}
const VersionInfo& FetchHandle::info() const { return state_->info; }

FetchProgressInfo FetchHandle::progress() const {
  std::lock_guard lock(state_->version->mutex);
  return state_->version->progress;
}

Status FetchHandle::wait(std::chrono::milliseconds timeout) {
  auto& v = *state_->version;
  std::unique_lock lock(v.mutex);
  const bool finished = v.changed.wait_for(lock, timeout, [&] {
    return v.state == peer::VersionState::kComplete || v.state == peer::VersionState::kFailed ||
           v.state == peer::VersionState::kReleased;
  });
  if (!finished) {
    return Status::timeout(std::to_string(v.progress.shards_verified) + " of " + std::to_string(v.progress.shards_total) +
                           " shards verified after " + std::to_string(timeout.count()) + " ms");
  }
  return v.state == peer::VersionState::kComplete ? Status::ok() : v.result;
}

std::span<const std::byte> FetchHandle::bytes() const { return state_->version->destination; }

void FetchHandle::release() {
  if (state_) state_->release(ReleaseMode::kHonourRetention);
}
void FetchHandle::release_async(std::function<void()> done) {
  if (state_) state_->release_async(std::move(done));
}

}  // namespace tensorhub
