// Runs independent work items on several threads. For bulk CPU work such as
// hashing shards; not for the sans-I/O cores, which never spawn threads.
#pragma once

#include <cstddef>
#include <functional>

namespace tensorhub::core {

// Online CPUs, at least 1.
unsigned hardware_threads();

// Calls fn(i) for every i in [0, count), on up to `threads` threads (0 means
// hardware_threads()). Items are handed out one at a time from a shared
// counter, so uneven items balance. The calling thread works too. Returns when
// every call has returned. REQUIRES: fn does not throw.
void parallel_for(std::size_t count, unsigned threads, const std::function<void(std::size_t)>& fn);

}  // namespace tensorhub::core
