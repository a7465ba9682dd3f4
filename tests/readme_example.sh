#!/usr/bin/env bash
# The README's C++ example is examples/quickstart.cpp, byte for byte, and it runs.
# Usage: readme_example.sh README.md examples/quickstart.cpp BUILT_QUICKSTART
set -euo pipefail
readme=$1 source=$2 binary=$3
shown=$(awk '/^<!-- example: examples\/quickstart.cpp -->$/ {grab=1; next} grab && /^```cpp$/ {inside=1; next} inside && /^```$/ {exit} inside {print}' "$readme")
if [ -z "$shown" ]; then
  echo "README: no example block after the '<!-- example: examples/quickstart.cpp -->' marker"
  exit 1
fi
if ! diff <(printf '%s\n' "$shown") "$source"; then
  echo "README's example differs from $source (above: < README, > file)"
  exit 1
fi
"$binary" 2>/dev/null | tee /dev/stderr | grep -q "identical: yes"
echo "the README's example is examples/quickstart.cpp and it ran"
