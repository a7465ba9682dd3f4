#!/usr/bin/env python3
"""The fluid model against SimGrid (the reference) on a small scenario: the
median and last worker completion of every version within 5%.

SimGrid's engine is one per process, so each model runs as its own
tensorhub-sim process. Exits 77 (skipped) when the build has no SimGrid.
Usage: test_model_agreement.py TENSORHUB_SIM SCENARIO.json
"""
import json
import subprocess
import sys

sim, scenario = sys.argv[1], sys.argv[2]


def run(model):
    out = subprocess.run([sim, scenario, "--network", model, "--json", "-", "--reproducible", "--quiet"],
                         capture_output=True, text=True, timeout=300)
    if model == "simgrid" and "has no SimGrid" in out.stderr:
        print("SKIP: this build has no SimGrid")
        sys.exit(77)
    if out.returncode != 0:
        print(f"{model}: exit {out.returncode}\n{out.stdout}\n{out.stderr}")
        sys.exit(1)
    return json.loads(out.stdout)


fluid, reference = run("fluid"), run("simgrid")
worst = 0.0
for f, r in zip(fluid["versions"], reference["versions"], strict=True):
    for key in ("median_s", "last_s"):
        if f[key] is None or r[key] is None:
            print(f"v{f['version']}: {key} missing (fluid {f[key]}, simgrid {r[key]})")
            sys.exit(1)
        gap = abs(f[key] - r[key]) / r[key]
        worst = max(worst, gap)
        print(f"v{f['version']} {key}: fluid {f[key]:.4f} s, simgrid {r[key]:.4f} s ({100 * gap:.2f}%)")
if worst > 0.05:
    print(f"FAIL: the models differ by {100 * worst:.2f}% (> 5%)")
    sys.exit(1)
print(f"agreement within {100 * worst:.2f}%")
