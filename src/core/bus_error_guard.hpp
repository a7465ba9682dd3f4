// Reads of a file's mapping that another process may truncate.
//
// A page of a MAP_SHARED mapping that lies past the file's new end raises
// SIGBUS when user code touches it, and SIGBUS kills the process. The kernel
// reads such pages safely (a send from them fails with EFAULT), but hashing
// and copying run in user space. read_guarded runs a read with a recovery
// point on the calling thread: a SIGBUS inside it ends the read and returns
// false, and the process lives on. A SIGBUS anywhere else is left to the
// handler that was installed before (the default kills the process, as it
// should: that is a bug, not a truncated file).
//
// The recovery unwinds like longjmp, so `read` must hold no lock and keep no
// object with a non-trivial destructor alive across the bytes it touches:
// pass plain hashing or copying over spans prepared beforehand.
#pragma once

#include <utility>

namespace tensorhub::core {

namespace detail {
bool run_guarded(void (*read)(void* context), void* context);
}  // namespace detail

// Runs `read()`; false when it faulted on a mapped page that is gone.
template <typename Read>
bool read_guarded(Read&& read) {
  return detail::run_guarded([](void* context) { (*static_cast<Read*>(context))(); }, &read);
}

}  // namespace tensorhub::core
