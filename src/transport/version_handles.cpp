// The handles of the public Peer: a version it publishes (PublishHandle)
// and one it fetches (FetchHandle). Each holds its version through the
// peer's gate, reads what the engine shows of it (its VersionWatch), and
// releases it on request or when destroyed.
#include "tensorhub/peer.hpp"

#include "transport/peer_impl.hpp"

namespace tensorhub {

using handles::HeldVersion;
using Impl = PeerAccess::Impl;
using ReleaseMode = peer::ReleaseMode;

namespace {

// A handle's state for a version the engine just created: the gate to its
// peer, the version, its watch and which version it is.
template <typename State>
std::shared_ptr<State> state_for(Impl* impl, PeerAccess::Created version) {
  auto state = std::make_shared<State>();
  state->gate = impl->gate;
  const peer::LocalVersion& v = *version.version;
  state->info = VersionInfo{v.model, v.number.value, v.id, v.manifest->total_size()};
  state->version = std::move(version.version);
  state->watch = std::move(version.watch);
  return state;
}

}  // namespace

PublishHandle PeerAccess::publish_handle(Impl* impl, Created version) {
  return PublishHandle(state_for<PublishHandle::State>(impl, std::move(version)));
}

FetchHandle PeerAccess::fetch_handle(Impl* impl, Created version) {
  return FetchHandle(state_for<FetchHandle::State>(impl, std::move(version)));
}

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

Status PublishHandle::wait_sealed(std::chrono::milliseconds timeout) {
  if (!state_->version->manifest->part()) return Status::ok();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::uint64_t seen = 0;
    Status sealed;
    const bool asked = state_->with_peer([&](Impl& impl) {
      seen = impl.current_generation();
      sealed = impl.call([&] { return impl.engine->part_sealed(*state_->version); });
    });
    if (!asked) return Status::cancelled("the peer that published this part has stopped");
    if (sealed.code() != StatusCode::kUnavailable) return sealed;
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::timeout("not sealed after " + std::to_string(timeout.count()) + " ms: " + sealed.message());
    }
    state_->with_peer([&](Impl& impl) { impl.wait_change(seen, deadline); });
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
