#include "core/parallel_for.hpp"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace tensorhub::core {

unsigned hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

void parallel_for(std::size_t count, unsigned threads, const std::function<void(std::size_t)>& fn) {
  if (threads == 0) threads = hardware_threads();
  const std::size_t workers = std::min<std::size_t>(threads, count);
  if (workers <= 1) {
    for (std::size_t i = 0; i < count; ++i) fn(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next.fetch_add(1, std::memory_order_relaxed); i < count;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      fn(i);
    }
  };
  std::vector<std::jthread> helpers;
  helpers.reserve(workers - 1);
  for (std::size_t t = 1; t < workers; ++t) helpers.emplace_back(work);
  work();
}

}  // namespace tensorhub::core
