#pragma once

namespace tensorhub::core {

// Initializes libsodium once per process; safe from any thread. Every entry
// point that uses libsodium calls it first. Aborts if libsodium cannot
// initialize (no entropy source), since nothing secure can run then.
void ensure_sodium();

}  // namespace tensorhub::core
