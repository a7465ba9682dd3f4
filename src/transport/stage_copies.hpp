// Copies through a payload stage in flight, by tag: a received payload
// landing from a stage's buffer into a version's memory (the memory is in
// use until it ends), or a piece being filled into a stage's buffer, to be
// served from it once full. The stages are polled while any copy is in
// flight. Only the I/O thread calls these.
#pragma once

#include <asio.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "seams/payload_stage.hpp"
#include "swarm/swarm_messages.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"
#include "transport/version_lease.hpp"

namespace tensorhub::peer {

class StageCopies {
 public:
  struct Copy {
    PeerId peer;
    swarm::SwarmMessage header;
    PayloadStage* stage = nullptr;
    std::shared_ptr<VersionLease> lease;  // a use of it is held until the copy ends
    bool serving = false;                 // a fill for a served piece; otherwise a landing
    std::span<std::byte> buffer;          // the stage's buffer
    std::uint64_t offset = 0;             // in the version's image
    std::uint32_t length = 0;
  };
  struct Ended {
    Copy copy;
    bool ok = false;  // the bytes are where they were going
  };

  // `ended` runs on the I/O thread with the copies that ended at one poll.
  StageCopies(asio::io_context& io, std::function<void(std::vector<Ended>)> ended);
  StageCopies(const StageCopies&) = delete;
  StageCopies& operator=(const StageCopies&) = delete;

  // Starts `copy`: `start(tag)` asks its stage for it. On success the copy
  // is in flight until a poll finds it ended; on an error nothing is kept.
  // Errors: those of `start`.
  Status begin(Copy copy, const std::function<Status(std::uint64_t tag)>& start);
  // Stops polling, waits for every stage with a copy in flight and ends
  // each without its result: a landing's use of its version ends; a fill's
  // buffer goes back and its piece counts as not sent. (The engine closes.)
  void drain();

  std::size_t in_flight() const { return copies_.size(); }
  std::uint64_t landings_begun() const { return landings_begun_; }
  std::uint64_t fills_served() const { return fills_served_; }

 private:
  void arm_poll();
  void poll();
  std::vector<PayloadStage*> stages() const;

  asio::steady_timer poll_timer_;
  std::function<void(std::vector<Ended>)> ended_;
  std::map<std::uint64_t, Copy> copies_;
  std::uint64_t next_tag_ = 1;
  bool poll_armed_ = false;
  bool stopped_ = false;
  std::uint64_t landings_begun_ = 0;  // through a stage's buffer
  std::uint64_t fills_served_ = 0;    // pieces filled into a stage's buffer to be served (no mirror)
};

}  // namespace tensorhub::peer
