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

// How one fetch ended, as FetchHandle::wait reports it: ok, or why not.
// `released_here`: the handle's caller released it.
Status outcome_of(const peer::VersionWatch::Snapshot& v, bool released_here, bool into_file) {
  if (v.state == peer::VersionState::kComplete) return Status::ok();
  if (v.state == peer::VersionState::kReleased && v.progress.bytes_verified == v.progress.bytes_total && into_file) {
    return Status::ok();  // a file put in place before the release
  }
  // Released by its caller before it finished: cancelled, whatever the
  // release itself made the fetch fail with (a file destination removed
  // under a landing payload fails it with kIoError first).
  return v.result.is_ok() || released_here ? Status::cancelled("released before it finished") : v.result;
}

// The parts of a version in parts, as one fetch's progress.
FetchProgressInfo parts_progress(const std::vector<std::shared_ptr<HeldVersion>>& parts) {
  FetchProgressInfo sum;
  sum.done = true;
  for (const auto& part : parts) {
    const FetchProgressInfo p = part->watch->snapshot().progress;
    sum.bytes_total += p.bytes_total;
    sum.bytes_verified += p.bytes_verified;
    sum.shards_total += p.shards_total;
    sum.shards_verified += p.shards_verified;
    sum.sources += p.sources;
    sum.bytes_received += p.bytes_received;
    sum.bytes_per_second += p.bytes_per_second;
    sum.done = sum.done && p.done;
  }
  return sum;
}

}  // namespace

FetchHandle PeerAccess::assembled_fetch_handle(Impl* impl, VersionInfo info,
                                               std::shared_ptr<const manifest::SealedVersion> sealed,
                                               std::vector<TensorEntry> tensors, std::vector<Created> parts,
                                               core::MutableRegions whole,
                                               const std::vector<std::vector<manifest::LandingRun>>& runs) {
  std::vector<std::uint64_t> shard_sizes;
  for (const Created& part : parts) shard_sizes.push_back(part.version->manifest->shard_size());
  auto state = std::make_shared<FetchHandle::State>();
  state->gate = impl->gate;
  state->info = std::move(info);
  state->version = parts.at(0).version;
  state->watch = parts.at(0).watch;
  for (Created& part : parts) state->parts.push_back(state_for<HeldVersion>(impl, std::move(part)));
  state->sealed = std::move(sealed);
  state->tensor_spans = manifest::tensor_shard_spans(tensors, runs, shard_sizes);
  state->tensors = std::move(tensors);
  state->whole = std::move(whole);
  return FetchHandle(std::move(state));
}

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
      state_->release_all(ReleaseMode::kNow);
      state_->discard_file();
    }
    state_ = std::move(other.state_);
  }
  return *this;
}
FetchHandle::~FetchHandle() {
  if (!state_) return;
  state_->release_all(ReleaseMode::kNow);
  state_->discard_file();
}
const VersionInfo& FetchHandle::info() const { return state_->info; }
const Manifest& FetchHandle::manifest() const {
  // A version in parts: part 0's (a fetch of a selection may hold none of
  // part 0, or a view of it, which is no signed manifest).
  if (state_->sealed) return *state_->sealed->parts().at(0);
  return *state_->version->manifest;
}

std::span<const TensorEntry> FetchHandle::tensors() const {
  if (state_->assembled()) return state_->tensors;
  return state_->version->manifest->tensors();
}

std::vector<bool> FetchHandle::verified_shards() const {
  State& s = *state_;
  if (s.phase.load() == HeldVersion::kReleased) return {};
  std::vector<bool> out;
  s.with_peer([&](Impl& impl) {
    if (!s.assembled()) {
      out = impl.call([&] { return impl.engine->verified_shards(*s.version); });
      return;
    }
    for (const auto& part : s.parts) {
      const auto flags = impl.call([&] { return impl.engine->verified_shards(*part->version); });
      out.insert(out.end(), flags.begin(), flags.end());
    }
  });
  return out;
}

std::vector<bool> FetchHandle::verified_tensors() const {
  State& s = *state_;
  if (s.phase.load() == HeldVersion::kReleased) return {};
  if (!s.assembled()) {
    const std::vector<bool> shards = verified_shards();
    if (shards.empty()) return {};
    const std::uint64_t size = s.version->manifest->shard_size();
    std::vector<bool> out;
    for (const TensorEntry& t : s.version->manifest->tensors()) {
      bool ready = true;
      for (std::uint64_t i = t.byte_offset / size; t.byte_length > 0 && i <= (t.byte_offset + t.byte_length - 1) / size;
           ++i) {
        ready = ready && shards[i];
      }
      out.push_back(ready);
    }
    return out;
  }
  std::vector<std::vector<bool>> per_part;
  const bool held = s.with_peer([&](Impl& impl) {
    for (const auto& part : s.parts) per_part.push_back(impl.call([&] { return impl.engine->verified_shards(*part->version); }));
  });
  if (!held || s.phase.load() == HeldVersion::kReleased) return {};
  for (const auto& flags : per_part) {
    if (flags.empty()) return {};  // a part released meanwhile
  }
  std::vector<bool> out;
  out.reserve(s.tensor_spans.size());
  for (const auto& spans : s.tensor_spans) {
    bool ready = true;
    for (const manifest::ShardSpan& span : spans) {
      const peer::LocalVersion& v = *s.parts[span.image]->version;
      const std::vector<bool>& flags = per_part[span.image];
      for (std::uint32_t i = span.first; ready && i <= span.last && i < flags.size(); ++i) {
        ready = flags[i] || !v.wants(ShardIndex{i});
      }
    }
    out.push_back(ready);
  }
  return out;
}

FetchProgressInfo FetchHandle::progress() const {
  return state_->assembled() ? parts_progress(state_->parts) : state_->watch->snapshot().progress;
}

FetchProgressInfo FetchHandle::wait_progress(std::uint32_t shards_verified, std::chrono::milliseconds timeout) const {
  if (!state_->assembled()) return state_->watch->wait_verified_above(shards_verified, timeout).progress;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::uint64_t seen = 0;
    state_->with_peer([&](Impl& impl) { seen = impl.current_generation(); });
    const FetchProgressInfo p = parts_progress(state_->parts);
    if (p.shards_verified > shards_verified || p.done || std::chrono::steady_clock::now() >= deadline) return p;
    // Every watch refresh moves the peer's generation; the bound covers a
    // peer that is going.
    const auto wake = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
    if (!state_->with_peer([&](Impl& impl) { impl.wait_change(seen, wake); })) std::this_thread::sleep_until(wake);
  }
}

Status FetchHandle::wait(std::chrono::milliseconds timeout) {
  if (state_->assembled()) {
    // Each part in turn, within what is left of the timeout.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const bool released_here = state_->phase.load() != HeldVersion::kHeld;
    for (std::size_t i = 0; i < state_->parts.size(); ++i) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      const peer::VersionWatch::Snapshot v = state_->parts[i]->watch->wait_finished(std::max(left, std::chrono::milliseconds(0)));
      if (!v.finished()) {
        const FetchProgressInfo p = parts_progress(state_->parts);
        return Status::timeout(std::to_string(p.shards_verified) + " of " + std::to_string(p.shards_total) +
                               " shards of " + std::to_string(state_->parts.size()) + " parts verified after " +
                               std::to_string(timeout.count()) + " ms");
      }
      Status part = outcome_of(v, released_here, /*into_file=*/false);
      if (!part.is_ok()) {
        if (v.state == peer::VersionState::kFailed && state_->file) state_->file->fetch_failed();
        return part.with_context("part " + std::to_string(i));
      }
    }
    return state_->commit_file();
  }
  const peer::VersionWatch::Snapshot v = state_->watch->wait_finished(timeout);
  if (!v.finished()) {
    return Status::timeout(std::to_string(v.progress.shards_verified) + " of " + std::to_string(v.progress.shards_total) +
                           " shards verified after " + std::to_string(timeout.count()) + " ms");
  }
  if (v.state == peer::VersionState::kComplete) return state_->commit_file();
  const bool released_here = state_->phase.load() != HeldVersion::kHeld;
  const Status outcome = outcome_of(v, released_here, state_->file != nullptr);
  if (outcome.is_ok()) return state_->commit_file();
  if (v.state == peer::VersionState::kReleased && v.progress.bytes_verified == v.progress.bytes_total) {
    return Status::cancelled("released");
  }
  // The engine removes a failed fetch's file once it hears (FetchDone); a
  // waiter may wake first: it never returns while the file is still there.
  if (v.state == peer::VersionState::kFailed && state_->file) state_->file->fetch_failed();
  return outcome;
}

namespace {

// Every version of `held` (the handle's own, or each part) complete.
bool complete(const std::vector<std::shared_ptr<HeldVersion>>& held) {
  return std::all_of(held.begin(), held.end(), [](const auto& part) {
    return part->watch->snapshot().state == peer::VersionState::kComplete;
  });
}

}  // namespace

bool FetchHandle::finished_complete() const {
  if (state_->assembled()) return complete(state_->parts);
  return state_->watch->snapshot().state == peer::VersionState::kComplete;
}

std::span<const std::byte> FetchHandle::bytes() const {
  const core::MutableRegions& d = state_->assembled() ? state_->whole : state_->version->destination;
  if (!finished_complete() || d.count() != 1) return {};
  return d.regions()[0];
}

std::vector<ConstRegion> FetchHandle::regions() const {
  const core::MutableRegions& d = state_->assembled() ? state_->whole : state_->version->destination;
  if (!finished_complete()) return {};
  return std::vector<ConstRegion>(d.regions().begin(), d.regions().end());
}

void FetchHandle::release() {
  if (!state_) return;
  state_->discard_file();
  state_->release_all(ReleaseMode::kHonourRetention);
}
void FetchHandle::release_async(std::function<void()> done) {
  if (!state_) return;
  state_->discard_file();
  if (!state_->assembled()) return state_->release_async(std::move(done));
  // `done` runs once every part's memory is back.
  auto left = std::make_shared<std::atomic<std::size_t>>(state_->parts.size());
  for (const auto& part : state_->parts) {
    part->release_async([left, done] {
      if (left->fetch_sub(1) == 1 && done) done();
    });
  }
  state_->phase = HeldVersion::kReleased;
}

}  // namespace tensorhub
