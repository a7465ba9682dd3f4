#include "core/entropy.hpp"

#include <sodium.h>

#include "core/sodium_init.hpp"

namespace tensorhub::core {

std::uint64_t entropy64() {
  ensure_sodium();
  std::uint64_t value = 0;
  randombytes_buf(&value, sizeof value);
  return value;
}

}  // namespace tensorhub::core
