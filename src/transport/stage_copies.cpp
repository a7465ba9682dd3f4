#include "transport/stage_copies.hpp"

#include <algorithm>
#include <chrono>

namespace tensorhub::peer {
namespace {

// How often copies in flight are polled: far below a piece's time on the
// wire, and only while some are in flight.
constexpr auto kPollInterval = std::chrono::microseconds(100);

}  // namespace

StageCopies::StageCopies(asio::io_context& io, std::function<void(std::vector<Ended>)> ended)
    : poll_timer_(io), ended_(std::move(ended)) {}

Status StageCopies::begin(Copy copy, const std::function<Status(std::uint64_t tag)>& start) {
  const std::uint64_t tag = next_tag_++;
  Status started = start(tag);
  if (!started.is_ok()) return started;
  if (!copy.serving) ++landings_begun_;
  copies_.emplace(tag, std::move(copy));
  arm_poll();
  return Status::ok();
}

std::vector<PayloadStage*> StageCopies::stages() const {
  std::vector<PayloadStage*> stages;
  for (const auto& [tag, c] : copies_) {
    if (std::find(stages.begin(), stages.end(), c.stage) == stages.end()) stages.push_back(c.stage);
  }
  return stages;
}

void StageCopies::arm_poll() {
  if (poll_armed_ || stopped_ || copies_.empty()) return;
  poll_armed_ = true;
  poll_timer_.expires_after(kPollInterval);
  poll_timer_.async_wait([this](std::error_code ec) {
    if (ec) return;
    poll_armed_ = false;
    if (stopped_) return;
    poll();
    arm_poll();
  });
}

void StageCopies::poll() {
  std::vector<PayloadStage::Landed> done;
  for (PayloadStage* stage : stages()) stage->poll(done);
  std::vector<Ended> ended;
  for (const PayloadStage::Landed& d : done) {
    auto it = copies_.find(d.tag);
    if (it == copies_.end()) continue;
    if (it->second.serving && d.ok) ++fills_served_;
    ended.push_back(Ended{std::move(it->second), d.ok});
    copies_.erase(it);
  }
  if (!ended.empty()) ended_(std::move(ended));
}

void StageCopies::drain() {
  stopped_ = true;
  poll_timer_.cancel();
  const std::vector<PayloadStage*> waited = stages();
  for (PayloadStage* stage : waited) stage->drain();
  std::vector<PayloadStage::Landed> done;
  for (PayloadStage* stage : waited) stage->poll(done);
  for (auto& [tag, c] : copies_) {
    if (c.serving) {
      c.stage->give_back(c.buffer);
      c.lease->piece_done(c.peer, c.offset, c.length, false);
    } else {
      c.lease->end_use();
    }
  }
  copies_.clear();
}

}  // namespace tensorhub::peer
