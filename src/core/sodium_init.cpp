#include "core/sodium_init.hpp"

#include <sodium.h>

#include <cstdio>
#include <cstdlib>

namespace tensorhub::core {

void ensure_sodium() {
  static const bool initialized = [] {
    if (sodium_init() < 0) {
      std::fprintf(stderr, "tensorhub: libsodium failed to initialize\n");
      std::abort();
    }
    return true;
  }();
  (void)initialized;
}

}  // namespace tensorhub::core
