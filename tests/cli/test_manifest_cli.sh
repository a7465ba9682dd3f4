#!/usr/bin/env bash
# End-to-end test of the manifest commands of the tensorhub CLI: every command
# as a user runs it, with the exit codes and one-line errors it promises.
# Usage: test_manifest_cli.sh PATH/TO/tensorhub
set -uo pipefail
th=$(realpath "${1:?usage: $0 PATH/TO/tensorhub}")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
failures=0

# expect CODE "TEXT" -- command...: runs it, checks the exit code and that
# stdout+stderr contain TEXT.
expect() {
  local code=$1 text=$2
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL: $* -> exit $rc (want $code), output:"
    sed 's/^/    /' <<<"$out"
    echo "    (wanted text: $text)"
    failures=$((failures + 1))
  fi
}

# Keys
expect 0 "peer id" -- "$th" keygen --out pub.key
[ "$(stat -c %a pub.key)" = 600 ] || { echo "FAIL: key file mode $(stat -c %a pub.key)"; failures=$((failures + 1)); }
expect 2 "already exists" -- "$th" keygen --out pub.key
expect 0 "" -- "$th" keygen --out other.key
pub=$("$th" pubkey --key pub.key)
other=$("$th" pubkey --key other.key)
[ ${#pub} -eq 64 ] || { echo "FAIL: pubkey printed '$pub'"; failures=$((failures + 1)); }
cp pub.key open.key && chmod 644 open.key
expect 2 "chmod 600" -- "$th" pubkey --key open.key

# Models and manifests
expect 0 "wrote v1.safetensors" -- "$th" synth-model --out v1.safetensors --size 3000KiB --tensor-size 96KiB --seed 1
expect 0 "changed" -- "$th" synth-model --from v1.safetensors --out v2.safetensors --seed 2 --change 0.2
expect 0 "wrote v1.manifest" -- "$th" manifest create v1.safetensors --model policy --version 1 --key pub.key \
  --shard-size 256KiB --out v1.manifest
expect 0 "wrote v2.manifest" -- "$th" manifest create v2.safetensors --model policy --version 2 --key pub.key \
  --shard-size 256KiB --parent v1.manifest --out v2.manifest
expect 2 "must exceed the parent's version" -- "$th" manifest create v2.safetensors --model policy --version 1 \
  --key pub.key --parent v1.manifest --out bad.manifest
expect 2 "not 'critic'" -- "$th" manifest create v2.safetensors --model critic --version 2 --key pub.key \
  --parent v1.manifest --out bad.manifest
expect 2 "power of two" -- "$th" manifest create v1.safetensors --model policy --version 1 --key pub.key \
  --shard-size 3MiB --out bad.manifest
expect 2 "unknown unit" -- "$th" manifest create v1.safetensors --model policy --version 1 --key pub.key \
  --shard-size 12XB --out bad.manifest
expect 2 "may hold only" -- "$th" manifest create v1.safetensors --model 'bad name' --version 1 --key pub.key \
  --out bad.manifest
expect 2 "required" -- "$th" manifest create v1.safetensors --version 1 --key pub.key --out bad.manifest
expect 0 "Usage" -- "$th" manifest create --help

# Verify: all checks hold
expect 0 "signature, chain, 12 shards of data verified" -- "$th" manifest verify v2.manifest --data v2.safetensors \
  --parent v1.manifest --publisher "$pub"
expect 0 "no --publisher given" -- "$th" manifest verify v1.manifest
expect 0 "verified" -- "$th" manifest verify v1.manifest --publisher "$other" --publisher "$pub"
# Verify: each failure, exit 1, one line naming it
expect 1 "not a trusted key" -- "$th" manifest verify v1.manifest --publisher "$other"
expect 1 "chain:" -- "$th" manifest verify v1.manifest --parent v2.manifest
expect 1 "does not match its hash" -- "$th" manifest verify v2.manifest --data v1.safetensors
cp v1.safetensors tampered.safetensors
printf '\x01' | dd of=tampered.safetensors bs=1 seek=1000000 conv=notrunc status=none
expect 1 "shard 3 (bytes 786432..1048576) does not match its hash; it holds model.layers." -- \
  "$th" manifest verify v1.manifest --data tampered.safetensors
cp v1.manifest tampered.manifest
printf '\x00' | dd of=tampered.manifest bs=1 seek=40 conv=notrunc status=none
expect 1 "" -- "$th" manifest verify tampered.manifest --publisher "$pub"
head -c 100 v1.manifest >truncated.manifest
expect 1 "malformed at byte offset" -- "$th" manifest verify truncated.manifest
expect 2 "expected 64 hex characters" -- "$th" manifest verify v1.manifest --publisher abc
expect 2 "cannot open" -- "$th" manifest verify missing.manifest
lines=$("$th" manifest verify v2.manifest --data v1.safetensors 2>&1 | wc -l)
[ "$lines" -eq 1 ] || { echo "FAIL: verify printed $lines lines on failure, want 1"; failures=$((failures + 1)); }

# Show and diff
expect 0 "parent     (none: first version)" -- "$th" manifest show v1.manifest
expect 0 "shards     12 of 256 KiB, xxh3-128" -- "$th" manifest show v2.manifest --tensors --shards
"$th" manifest show v2.manifest --json >show.json &&
  python3 -c 'import json,sys; j=json.load(open("show.json")); assert j["version"]==2 and len(j["shards"])==12 and j["parent"], j' ||
  { echo "FAIL: show --json"; failures=$((failures + 1)); }
expect 0 "policy v1 -> v2:" -- "$th" manifest diff v1.manifest v2.manifest
"$th" manifest diff v1.manifest v2.manifest --json >diff.json &&
  python3 -c 'import json; j=json.load(open("diff.json")); assert j["comparable"] and 0 < len(j["changed"]) < 12, j' ||
  { echo "FAIL: diff --json"; failures=$((failures + 1)); }

# Secure mode
expect 0 "blake2b-256" -- "$th" manifest create v1.safetensors --model policy --version 1 --key pub.key \
  --hash blake2b-256 --out secure.manifest
expect 0 "verified" -- "$th" manifest verify secure.manifest --data v1.safetensors --publisher "$pub"
expect 1 "does not match" -- "$th" manifest verify secure.manifest --data tampered.safetensors

expect 2 "" -- "$th"
expect 2 "" -- "$th" frobnicate
if [ "$failures" -ne 0 ]; then
  echo "$failures CLI checks failed"
  exit 1
fi
echo "all CLI checks passed"
