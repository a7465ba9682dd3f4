// A version's memory in use: pieces being sent from it, jobs reading or
// writing it. The engine holds one lease per version it serves or fills.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <vector>

#include "peer/local_version.hpp"
#include "seams/piece_source.hpp"
#include "tensorhub/ids.hpp"
#include "transport/version_watch.hpp"

namespace tensorhub::peer {

// Keeps a version's memory in use while pieces are sent from it and while
// jobs read or write it; `on_idle` runs once none are left (the release).
struct VersionLease {
  std::shared_ptr<LocalVersion> version;
  std::shared_ptr<VersionWatch> watch;  // counts the bytes served
  int uses = 0;
  // Pieces queued or being written, per peer, by offset in the image.
  std::map<PeerId, std::set<std::uint64_t>> sending_to;
  // Payload bytes queued for each peer so far in its current fetch (since
  // it last said it wanted no more), sent or not.
  std::map<PeerId, std::uint64_t> bytes_to;
  std::vector<std::function<void()>> on_idle;
  // A host copy of a complete version whose memory the host cannot read
  // (GPU memory), pieces are served from once it is filled; it goes with
  // the lease, after the last piece sent from it.
  std::shared_ptr<std::span<std::byte>> mirror;
  bool mirror_started = false;

  void piece_done(const PeerId& peer, std::uint64_t offset, std::uint32_t length, bool sent) {
    if (sent && watch) watch->bytes_served += length;  // a piece cancelled while queued never left
    if (auto it = sending_to.find(peer); it != sending_to.end()) {
      it->second.erase(offset);
      if (it->second.empty()) sending_to.erase(it);
    }
    end_use();
  }
  void end_use() {
    if (--uses > 0 || on_idle.empty()) return;
    auto idle = std::move(on_idle);
    on_idle.clear();
    for (auto& fn : idle) fn();
  }
};

// One piece sent to `peer` from a lease's memory.
struct LeasedPiece : transport::PieceSource {
  std::shared_ptr<VersionLease> lease;
  PeerId peer;
  std::uint64_t offset = 0;
  void on_piece_sent(std::uint32_t length, bool sent) override { lease->piece_done(peer, offset, length, sent); }
};

}  // namespace tensorhub::peer
