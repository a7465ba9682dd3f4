// Versions a daemon holds for the other processes of its node. In host
// memory: the tensor-parallel ranks of one inference engine each ask for
// version N, the daemon fetches it once into
// <directory>/<model>/v<N>/model.safetensors (under /dev/shm by default:
// memory, not disk), and every rank maps that file. In GPU memory (a hold
// that names a GPU): the daemon fetches it once into memory it allocates on
// that GPU and answers with a CUDA IPC handle; the engine on that GPU maps
// it, copies the weights, unmaps and lets go (GpuMapping, docs/gpu.md).
// A hold is counted: the version stays, and is served to the swarm, until
// every hold on it is let go (the daemon ties each to a control connection,
// so a rank that dies lets go too) or the daemon stops; then it is released
// and its memory freed. At most `gpu_buffers` versions are held on one GPU
// (two: the engine's current weights and the next), and a hold that would
// need another is refused until one is let go, so no buffer is ever
// overwritten while an engine may read it.
// Letting go of a version waits for the pieces being sent from it (up to
// the engine's grace), so it never runs on the daemon's loop: the handle
// and the memory go through `retire` (the daemon's work pool). Until they
// are gone the version is retiring: a new hold on it must wait (its file
// would be made at the same path; the daemon waits with after_retired),
// and its GPU memory still counts against `gpu_buffers`.
// A daemon that is killed leaves its files; the next start of a daemon
// with its identity removes them.
//
// Thread-compatibility: runs on the daemon's thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/hold_memory.hpp"
#include "tensorhub/peer.hpp"
#include "transport/control_server.hpp"

namespace tensorhub::cli {

class HeldVersions {
 public:
  using Reply = transport::ControlServer::Reply;
  // Destroys `held` off the caller's thread, then runs `after` on it.
  using Retire = std::function<void(std::shared_ptr<void> held, std::function<void()> after)>;

  // `directory`: where the held files go (created on the first hold; what
  // a killed daemon left there is removed now). It belongs to this daemon.
  // `gpu_memory` makes the memory of holds on a GPU (cuda_hold_memory, or
  // a test's); `gpu_buffers` (at least 1) caps the versions held per GPU.
  // `retire` lets go of a version's fetch and memory (see above).
  HeldVersions(Peer& peer, std::string directory, Retire retire, GpuHoldMemoryFactory gpu_memory = cuda_hold_memory,
               std::size_t gpu_buffers = 2);
  ~HeldVersions();  // releases every hold and removes its file, on this thread (not those retiring)
  HeldVersions(const HeldVersions&) = delete;
  HeldVersions& operator=(const HeldVersions&) = delete;

  // Adds a hold on `info`'s version, in a file (`gpu` empty) or in memory
  // of the GPU `gpu`: fetched there if this is the first. `reply` gets
  // progress lines, then a line with "done": true, "version", "id",
  // "bytes", "holds" (the count) and where the bytes are ("path" and "dir"
  // of the verified file; or "gpu", "ipc" and "tensors", hold_memory.hpp),
  // which leaves the connection open (the hold lasts until the caller's
  // unhold), or, as its last line, the error that ended the fetch (the
  // hold is then gone: unhold finds nothing). Returns false when it
  // answered at once with an error (no hold was added): the memory could
  // not be made, or `gpu` holds `gpu_buffers` other versions already.
  // REQUIRES: !retiring(info, gpu).
  bool hold(const VersionInfo& info, const std::string& gpu, Reply reply);
  // Whether that version's last copy there is still being let go.
  bool retiring(const VersionInfo& info, const std::string& gpu) const;
  // Runs `then` on the caller's thread once it is gone (at once when it is).
  void after_retired(const VersionInfo& info, const std::string& gpu, std::function<void()> then);

  // Lets go of one hold. Errors: kNotFound (no hold on that version there:
  // its fetch failed). Returns the holds left; at 0 the version is released
  // and its memory freed, off this thread (`retire`).
  Result<std::size_t> unhold(const std::string& model, std::uint64_t version, const std::string& gpu);

  // Sends progress to the holds being fetched and answers those that ended.
  // The daemon calls it every 50 ms while fetching() is true.
  void poll();
  bool fetching() const;

  // Where version `version` of `model` is held: <directory>/<model with '/'
  // as %2F>/v<version>/model.safetensors (one path component per model name,
  // which a valid name keeps from being "." or "..").
  std::string path_of(const std::string& model, std::uint64_t version) const;

 private:
  struct Held {
    VersionInfo info;
    std::unique_ptr<HoldMemory> memory;  // declared before the handle: outlives it
    std::unique_ptr<FetchHandle> handle;
    std::size_t holds = 0;
    bool verified = false;
    std::vector<Reply> waiting;  // answered when the fetch ends
  };
  // Model, version, and the GPU ("" for a file).
  using Key = std::tuple<std::string, std::uint64_t, std::string>;

  void answer(Held& held, const Status& result);
  // Takes the hold on `key` out, and lets go of its fetch and memory
  // (`retire`); then, with `why` (an error), answers its holders.
  void remove(const Key& key, std::optional<Status> why = std::nullopt);

  // The versions held on `gpu`, as "v<N>" words for an error.
  std::vector<std::string> held_on(const std::string& gpu) const;

  Peer& peer_;
  std::string directory_;
  Retire retire_;
  GpuHoldMemoryFactory gpu_memory_;
  std::size_t gpu_buffers_;
  std::map<Key, Held> held_;
  // Versions being let go, and what waits for them to be gone.
  std::map<Key, std::vector<std::function<void()>>> retiring_;
};

}  // namespace tensorhub::cli
