// When a driver may report progress: at most once a second of wall time,
// the clock read only every 1,024 calls. Reading the wall clock never
// changes a run; it only decides when to print.
#pragma once

#include <chrono>
#include <cstdint>

namespace tensorhub::sim {

class ProgressThrottle {
 public:
  bool due() {
    if (++calls_ % 1024 != 0) return false;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::seconds(1)) return false;
    last_ = now;
    return true;
  }

 private:
  std::uint64_t calls_ = 0;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace tensorhub::sim
