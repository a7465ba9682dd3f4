#include "sim/version_ledger.hpp"

#include <algorithm>

namespace tensorhub::sim {

void VersionLedger::publish(std::uint32_t number, TimePoint at) {
  VersionOutcome outcome;
  outcome.number = number;
  outcome.published = at;
  outcome.worker_done.resize(workers_);
  outcomes_.push_back(std::move(outcome));
}

void VersionLedger::worker_done(std::uint32_t number, std::size_t worker, TimePoint at) {
  if (!known(number)) return;
  VersionOutcome& v = outcomes_[number - 1];
  if (v.worker_done[worker]) return;
  v.worker_done[worker] = at;
  const auto held = static_cast<std::size_t>(
      std::count_if(v.worker_done.begin(), v.worker_done.end(), [](const auto& t) { return t.has_value(); }));
  if (!v.replicated && held >= workload_.replicas) v.replicated = at;
}

void VersionLedger::add_publisher_bytes(std::uint32_t number, std::uint64_t bytes) {
  if (known(number)) outcomes_[number - 1].publisher_bytes += bytes;
}

void VersionLedger::trainer_free(std::uint32_t number, TimePoint at) {
  if (known(number) && !outcomes_[number - 1].trainer_free) outcomes_[number - 1].trainer_free = at;
}

bool VersionLedger::all_hold(std::uint32_t number, const std::function<bool(std::size_t)>& alive) const {
  if (!known(number)) return false;
  const VersionOutcome& v = outcomes_[number - 1];
  for (std::size_t w = 0; w < workers_; ++w) {
    if (alive(w) && !v.worker_done[w]) return false;
  }
  return true;
}

VersionLedger::Next VersionLedger::next(const std::function<bool(std::size_t)>& alive, bool more_to_join) {
  if (outcomes_.empty() || !all_hold(latest(), alive)) return Next::kWait;
  if (latest() < workload_.versions) {
    if (workload_.interval.count() != 0 || publish_announced_ == latest()) return Next::kWait;
    publish_announced_ = latest();
    return Next::kPublishNext;
  }
  return more_to_join ? Next::kWait : Next::kFinished;
}

std::size_t VersionLedger::done_with_latest() const {
  if (outcomes_.empty()) return 0;
  const auto& done = outcomes_.back().worker_done;
  return static_cast<std::size_t>(std::count_if(done.begin(), done.end(), [](const auto& t) { return t.has_value(); }));
}

}  // namespace tensorhub::sim
