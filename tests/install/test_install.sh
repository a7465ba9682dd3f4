#!/usr/bin/env bash
# `cmake --install` gives another project what it needs: find_package(TensorHub)
# and pkg-config both build examples/quickstart.cpp against the installed copy
# (public headers and libtensorhub.a only), and both programs run.
# Usage: test_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) source=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > /dev/null
test -f "$work/prefix/include/tensorhub/peer.hpp"
test -f "$work/prefix/lib/libtensorhub.a"
# No internal header is installed: the consumer sees include/tensorhub only.
if find "$work/prefix/include" -name '*.hpp' | grep -v '/include/tensorhub/' | grep -q .; then
  echo "an internal header was installed"; exit 1
fi

cmake -S "$source/tests/install/consumer" -B "$work/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DQUICKSTART_SOURCE="$source/examples/quickstart.cpp" > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/cmake-build" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
"$work/cmake-build/quickstart" 2>/dev/null | grep -q "identical: yes"
echo "find_package(TensorHub): built and ran examples/quickstart.cpp"

export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
c++ -O1 -o "$work/quickstart-pc" "$source/examples/quickstart.cpp" $(pkg-config --cflags --libs --static tensorhub)
"$work/quickstart-pc" 2>/dev/null | grep -q "identical: yes"
echo "pkg-config tensorhub: built and ran examples/quickstart.cpp"
