// Where a version that a daemon holds for the processes of its node lives
// (held_versions.hpp): a file they map (host memory under /dev/shm), or GPU
// memory that the daemon allocates and shares by CUDA IPC with the engine on
// that GPU. One object per held version; it is destroyed only after the
// version's release, so nothing reads or writes it then.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cli/control_lines.hpp"
#include "tensorhub/peer.hpp"

namespace tensorhub::cli {

class HoldMemory {
 public:
  virtual ~HoldMemory() = default;
  // Starts the fetch of `info`'s version into this memory.
  virtual Result<FetchHandle> fetch(Peer& peer, const VersionInfo& info) = 0;
  // Once every byte is verified (the handle's wait() returned ok): what
  // the memory needs before holders may read it (nothing, for a file the
  // wait() put in place). Errors: kIoError.
  virtual Status commit() = 0;
  // Adds to the hold's "done" line what tells a holder where the bytes are.
  // Errors: kUnavailable (the memory cannot be shared).
  virtual Status describe(const FetchHandle& handle, Json& done) const = 0;
};

// A file at `path` (folders made as needed), written by the fetch
// (Peer::fetch_to_file: by pwrite, put in place by the handle's wait());
// removed, with the folders it leaves empty up to `root`, when destroyed.
// Errors: kIoError (the folders cannot be made).
Result<std::unique_ptr<HoldMemory>> file_hold_memory(const std::string& path, const std::string& root);

// GPU memory of `info.bytes` on the GPU `gpu` ("GPU-..."), fetched into
// through the staging ring and shared by a CUDA IPC handle; its "done"
// fields: "gpu", "ipc" {"handle" (128 hex digits), "offset", "bytes"} and
// "tensors" [[name, dtype, shape, offset, length], ...].
// Errors: kInvalidArgument (not a GPU UUID); kNotFound (no such GPU);
// kUnavailable (no CUDA, or the GPU's memory is short).
using GpuHoldMemoryFactory = std::function<Result<std::unique_ptr<HoldMemory>>(const std::string& gpu,
                                                                               const VersionInfo& info)>;
Result<std::unique_ptr<HoldMemory>> cuda_hold_memory(const std::string& gpu, const VersionInfo& info);

// The "tensors" field of a GPU hold's "done" line: the manifest's table.
Json tensor_table(const Manifest& manifest);

}  // namespace tensorhub::cli
