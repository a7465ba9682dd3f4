// The inside of the public Peer, shared by the facade (peer.cpp) and its
// handles (version_handles.cpp): Peer::Impl (the I/O thread running a
// PeerEngine, the callback thread, and calls that run on the I/O thread and
// wait for their answer), PeerAccess (what the library's other parts reach
// through), and what a handle holds (HeldVersion).
#pragma once

#include <asio.hpp>
#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "core/log.hpp"
#include "core/work_pool.hpp"
#include "cuda/gpu_memory.hpp"
#include "seams/file_memory.hpp"
#include "tensorhub/peer.hpp"
#include "transport/peer_engine.hpp"
#include "transport/peer_internal.hpp"

namespace tensorhub {

// How long a Peer's destructor waits for its departure to spread.
inline constexpr auto kLeaveWait = std::chrono::seconds(4);
// How long a release under way waits once the peer is stopping.
inline constexpr auto kShutdownReleaseWait = std::chrono::seconds(3);

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
  std::chrono::milliseconds publish_head_wait{10'000};  // PeerOptions::publish_head_wait
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
  // A fetch of several images into one destination `whole` laid out as
  // `tensors`: a version in parts fetched whole (one fetch per part), or
  // a selection (one fetch per image it takes bytes of). `sealed`: the
  // version in parts, if it is one. REQUIRES: parts is not empty.
  // `runs[i]`: where part i's bytes land in `whole`.
  static FetchHandle assembled_fetch_handle(Impl* impl, VersionInfo info,
                                            std::shared_ptr<const manifest::SealedVersion> sealed,
                                            std::vector<TensorEntry> tensors, std::vector<Created> parts,
                                            core::MutableRegions whole,
                                            const std::vector<std::vector<manifest::LandingRun>>& runs);
  static PublishHandle publish_handle(Impl* impl, Created version);
  // Peer::fetch_selection, and Group::fetch_selection. `file`: the output
  // file `regions` lie in (fetch_selection_to_file), which the fetch keeps
  // and the handle's wait() puts in place; nullptr: the caller's memory.
  // `domain`: where `regions` lie (a file's, when `file` is set).
  static Result<FetchHandle> fetch_selection(Impl& impl, const std::string& model, std::uint64_t version,
                                             std::span<const TensorSelection> selection,
                                             std::span<const MutableRegion> regions,
                                             std::shared_ptr<peer::FileDestination> file = nullptr,
                                             const peer::MemoryDomain& domain = peer::host_memory());
  // The GPU domain `options` names (host memory when none). Errors: as
  // PeerAccess::gpu.
  static Result<const peer::MemoryDomain*> domain_of(Impl& impl, const MemoryOptions& options);
  // Peer::fetch, and Group::fetch: into `regions` of `domain` (peer::fetch_into).
  static Result<FetchHandle> fetch_into(Impl& impl, const std::string& model, std::uint64_t version,
                                        std::span<const MutableRegion> regions, const peer::MemoryDomain& domain);
  // Peer::fetch_to_file and Peer::fetch_selection_to_file, and Group's.
  static Result<FetchHandle> fetch_to_file(Impl& impl, const std::string& model, std::uint64_t version,
                                           const std::string& path, const FileOptions& options);
  static Result<FetchHandle> fetch_selection_to_file(Impl& impl, const std::string& model, std::uint64_t version,
                                                     std::span<const TensorSelection> selection,
                                                     const std::string& path, const FileOptions& options);
  // A version in parts, whole, into `regions` of `domain`; `file`: as
  // fetch_selection.
  static Result<FetchHandle> fetch_parts(Impl& impl, std::shared_ptr<const manifest::SealedVersion> sealed,
                                         std::span<const MutableRegion> regions, const peer::MemoryDomain& domain,
                                         std::shared_ptr<peer::FileDestination> file = nullptr);
  // The local versions a fetch handle holds (a version in parts: every part's).
  static std::vector<std::shared_ptr<peer::LocalVersion>> versions_of(const FetchHandle& handle);
  // The id a fetch handle's version has: its manifest's, or its seal's.
  static ManifestId version_id_of(const FetchHandle& handle);
  // The GPU named `uuid`, opened on first use. Errors: as GpuMemory::open.
  static Result<const cuda::GpuMemory*> gpu(Impl& impl, const std::string& uuid);
};

namespace handles {

using ReleaseMode = peer::ReleaseMode;
using Impl = PeerAccess::Impl;

// Runs fn(impl) on the caller's thread while the peer behind `gate` is
// there (the peer waits for it before it goes); false (fn not run) once it
// is going. What a handle or group that may outlive its Peer calls through.
template <typename F>
bool through_gate(Impl::Gate& gate, F&& fn) {
  Impl* impl = nullptr;
  {
    std::lock_guard lock(gate.mutex);
    if (gate.impl == nullptr) return false;
    impl = gate.impl;
    ++gate.calls;
  }
  struct Done {
    Impl::Gate& gate;
    ~Done() {
      std::lock_guard lock(gate.mutex);
      if (--gate.calls == 0) gate.idle.notify_all();
    }
  } done{gate};
  fn(*impl);
  return true;
}

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
    return through_gate(*gate, std::forward<F>(fn));
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

}  // namespace handles

struct PublishHandle::State : handles::HeldVersion {};

struct FetchHandle::State : handles::HeldVersion {
  // A fetch into a file: renamed into place by the first wait() that finds
  // the version complete.
  std::shared_ptr<peer::FileDestination> file;
  // A fetch of several images into one destination (a version in parts
  // fetched whole, or a selection): one fetch per image in image order (the
  // base's version and watch are the first's), the destination, and its
  // tensor table. `sealed`: the version in parts, if it is one.
  std::shared_ptr<const manifest::SealedVersion> sealed;
  std::vector<std::shared_ptr<handles::HeldVersion>> parts;
  core::MutableRegions whole;
  std::vector<TensorEntry> tensors;
  // Per tensor of `tensors`, the shards of each part that land bytes in it.
  std::vector<std::vector<manifest::ShardSpan>> tensor_spans;

  bool assembled() const { return !parts.empty(); }
  // Releases every version the handle holds (each of an assembled fetch).
  void release_all(peer::ReleaseMode mode) {
    if (!assembled()) return release(mode);
    for (const auto& p : parts) p->release(mode);
    phase = kReleased;
  }

  Status commit_file() { return file ? file->commit() : Status::ok(); }
  void discard_file() {
    if (file) file->release();
  }
};

}  // namespace tensorhub
