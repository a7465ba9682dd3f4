// A fixed set of threads that run jobs handed to them, first in, first out:
// the peer's hashing and large copies, kept off its I/O thread so gossip and
// data connections never wait for them. Not for the sans-I/O cores.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tensorhub::core {

class WorkPool {
 public:
  // `threads` 0: one per online CPU.
  explicit WorkPool(unsigned threads = 0);
  // Runs the jobs already queued, then joins the threads.
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues `job`; it runs on one of the pool's threads. REQUIRES: job does not throw.
  void submit(std::function<void()> job);
  std::size_t threads() const { return threads_.size(); }
  // Jobs queued and not yet started.
  std::size_t queued() const;

 private:
  void run();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tensorhub::core
