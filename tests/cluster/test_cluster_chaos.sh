#!/usr/bin/env bash
# The cluster's chaos and bad-input checks, small enough for CI: 8 network-
# namespace hosts at 1 Gbit/s and a 128 MiB version.
#  - two chaos runs (fixed seeds): two workers SIGKILLed (one restarted with
#    its key), one SIGSTOPped for 5 s, one link down for 3 s;
#  - a host without the swarm key sending garbage to every port, while a
#    member serves corrupted shards.
# Every live host must end with a verified, byte-identical copy within the
# bound. Skips (exit 77) where network namespaces cannot be made (not root).
# Usage: test_cluster_chaos.sh PATH/TO/tensorhub
set -euo pipefail
binary=$1
here=$(cd "$(dirname "$0")" && pwd)
runner=$here/../../bench/cluster/run-cluster
if [[ $(id -u) != 0 ]] || ! ip netns add th-probe-$$ 2>/dev/null; then
  echo "SKIP: network namespaces need root"
  exit 77
fi
ip netns del th-probe-$$
for seed in 1 2; do
  "$runner" --binary "$binary" --hosts 8 --size 128MiB --chaos "$seed" --timeout 150
done
rc=0
out=$("$runner" --binary "$binary" --hosts 8 --size 128MiB --hostile --corrupt-host 3 --timeout 150) || rc=$?
echo "$out"
[[ $rc == 0 ]] || { echo "FAIL: the hostile/corrupt run exited with $rc"; exit 1; }
grep -q "corrupt shards detected" <<<"$out" || { echo "FAIL: the corrupt host was never caught"; exit 1; }
