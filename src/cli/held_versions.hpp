// Versions a daemon holds as files for the other processes of its node: the
// tensor-parallel ranks of one inference engine each ask for version N, the
// daemon fetches it once into <directory>/<model>/v<N>/model.safetensors
// (under /dev/shm by default: memory, not disk), and every rank maps that
// file. A hold is counted: the file stays, and is served to the swarm, until
// every hold on it is let go (the daemon ties each to a control connection,
// so a rank that dies lets go too) or the daemon stops; then it is removed.
// A daemon that is killed leaves its files; the next start of a daemon
// with its identity removes them.
//
// Thread-compatibility: runs on the daemon's thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/mapped_output_file.hpp"
#include "tensorhub/peer.hpp"
#include "transport/control_server.hpp"

namespace tensorhub::cli {

class HeldVersions {
 public:
  using Reply = transport::ControlServer::Reply;

  // `directory`: where the held files go (created on the first hold; what
  // a killed daemon left there is removed now). It belongs to this daemon.
  HeldVersions(Peer& peer, std::string directory);
  ~HeldVersions();  // releases every hold and removes its file
  HeldVersions(const HeldVersions&) = delete;
  HeldVersions& operator=(const HeldVersions&) = delete;

  // Adds a hold on `info`'s version: fetched into its file if this is the
  // first. `reply` gets progress lines, then a line with "done": true,
  // "path" (the verified file), "dir", "version", "id" and "holds" (the
  // count), which leaves the connection open (the hold lasts until the
  // caller's unhold), or, as its last line, the error that ended the fetch
  // (the hold is then gone: unhold finds nothing). Returns false when it
  // answered at once with an error (no hold was added).
  bool hold(const VersionInfo& info, Reply reply);

  // Lets go of one hold. Errors: kNotFound (no hold on that version: its
  // fetch failed). Returns the holds left; at 0 the version is released and
  // its file removed.
  Result<std::size_t> unhold(const std::string& model, std::uint64_t version);

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
    std::shared_ptr<core::MappedOutputFile> file;
    std::unique_ptr<FetchHandle> handle;
    std::size_t holds = 0;
    bool verified = false;
    std::vector<Reply> waiting;  // answered when the fetch ends
  };
  using Key = std::pair<std::string, std::uint64_t>;

  void answer(Held& held, const Status& result);
  void remove(const Key& key);

  Peer& peer_;
  std::string directory_;
  std::map<Key, Held> held_;
};

}  // namespace tensorhub::cli
