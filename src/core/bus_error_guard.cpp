#include "core/bus_error_guard.hpp"

#include <csetjmp>
#include <csignal>
#include <mutex>

namespace tensorhub::core::detail {
namespace {

thread_local sigjmp_buf* t_recovery = nullptr;
struct sigaction g_previous {};

void on_bus_error(int signal, siginfo_t* info, void* context) {
  if (sigjmp_buf* recovery = t_recovery) {
    t_recovery = nullptr;
    siglongjmp(*recovery, 1);
  }
  // Not a guarded read: whoever handled SIGBUS before decides (the default
  // ends the process once the faulting access runs again).
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) return g_previous.sa_sigaction(signal, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
             g_previous.sa_handler != nullptr) {
    return g_previous.sa_handler(signal);
  }
  sigaction(SIGBUS, &g_previous, nullptr);
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_bus_error;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous);
  });
}

}  // namespace

bool run_guarded(void (*read)(void* context), void* context) {
  install_once();
  sigjmp_buf recovery;
  sigjmp_buf* const outer = t_recovery;
  // Saves the signal mask: the jump back from the handler unblocks SIGBUS.
  if (sigsetjmp(recovery, 1) != 0) {
    t_recovery = outer;
    return false;
  }
  t_recovery = &recovery;
  read(context);
  t_recovery = outer;
  return true;
}

}  // namespace tensorhub::core::detail
