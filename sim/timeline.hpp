// Bytes delivered over time, per link class, in fixed buckets of simulated
// time: what the CSV time series and the plots show. A flow's bytes count in
// the bucket where it completes (flows are blocks of 1-256 MiB, short next to
// a bucket); a cancelled flow's partial bytes are not shown.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/time.hpp"
#include "sim/network_model.hpp"

namespace tensorhub::sim {

class Timeline {
 public:
  explicit Timeline(Duration bucket = std::chrono::milliseconds(100)) : bucket_(bucket) {}

  void add(TimePoint at, LinkClass link_class, std::uint64_t bytes) {
    const auto index = static_cast<std::size_t>((at - kTimeZero) / bucket_);
    if (index >= buckets_.size()) buckets_.resize(index + 1);
    buckets_[index][static_cast<std::size_t>(link_class)] += bytes;
  }

  Duration bucket() const { return bucket_; }
  // Per bucket (bucket i covers [i, i + 1) x bucket()): bytes per class.
  const std::vector<std::array<std::uint64_t, kLinkClasses>>& buckets() const { return buckets_; }

 private:
  Duration bucket_;
  std::vector<std::array<std::uint64_t, kLinkClasses>> buckets_;
};

}  // namespace tensorhub::sim
