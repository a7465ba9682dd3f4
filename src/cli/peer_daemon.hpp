// `tensorhub peer`: a Peer plus its control socket, run until a signal.
//
// Control commands (one JSON request line; answers are JSON lines, the last
// one has "done": true):
//   {"cmd":"status"}
//   {"cmd":"publish","model":M,"file":PATH,"wait_replicas":R,"release":bool}
//       maps PATH read-only and serves it in place; streams replica counts
//   {"cmd":"fetch","model":M,"version":N|0,"out":PATH}
//       streams progress; writes a verified file; keeps serving the copy
//   {"cmd":"digest","model":M,"version":N}   BLAKE2b-256 of a held version
//   {"cmd":"release","model":M,"version":N}
//   {"cmd":"hold","model":M,"version":N|0,"gpu":UUID|absent}
//       fetches the version once into a file under --hold-dir that the
//       processes of this node map, or with "gpu" into memory of that GPU
//       shared by a CUDA IPC handle (held_versions.hpp); the answer's
//       "done" line leaves the connection open, and the hold lasts until
//       the client closes it (then a last line, "released")
// With --follow MODEL the daemon fetches every new head of MODEL as it
// appears and keeps the two newest (a double buffer), as a rollout worker.
#pragma once

#include <string>
#include <vector>

#include "transport/peer_internal.hpp"
#include "tensorhub/peer.hpp"

namespace tensorhub::cli {

struct DaemonOptions {
  PeerOptions peer;
  peer::InternalOptions internal;  // the baselines' leeches, the tests' corrupt holders
  std::string key_file, swarm_key_file, control_path, log_level = "info";
  std::string members_file;  // --members: reloaded when it changes
  std::vector<std::string> follow;
  double release_deferral_seconds = 60;  // becomes peer.max_release_deferral
  std::uint64_t reserve_bytes = 0;       // --reserve: destination buffers set aside at start
  std::size_t reserve_count = 1;
  std::string hold_directory;  // --hold-dir: a subfolder per peer id (empty: default_hold_directory())
  std::size_t gpu_buffers = 2;  // --gpu-buffers: versions held at once per GPU
};

int run_peer_daemon(DaemonOptions options);

}  // namespace tensorhub::cli
