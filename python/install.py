#!/usr/bin/env python3
"""Installs the tensorhub package (and its compiled tensorhub._native) into
a Python environment: a virtual environment's, or the interpreter's own.

    python/install.py --python /path/to/venv/bin/python [--build-dir build]

It builds the module for that interpreter (reusing --build-dir when its module
has that interpreter's extension suffix, its ABI; otherwise configuring
build/python-<tag> for it), copies the package into the interpreter's
site-packages, and writes its dist-info with the vllm.general_plugins
entry point, so vLLM finds the "tensorhub" weight-transfer engine. Offline:
no pip, no registry. The interpreter needs numpy (and the build, Python's
development headers and pybind11: scripts/install-deps installs both for
Debian's /usr/bin/python3)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VERSION = "0.1.0"
ENTRY_POINTS = "[vllm.general_plugins]\ntensorhub = tensorhub.integrations.vllm:register\n"


def fail(message: str) -> None:
    print(f"install.py: {message}", file=sys.stderr)
    sys.exit(1)


def interpreter_facts(python: str) -> dict:
    probe = ("import json, sys, sysconfig; print(json.dumps({'platlib': sysconfig.get_paths()['platlib'], "
             "'tag': sys.implementation.cache_tag, 'suffix': sysconfig.get_config_var('EXT_SUFFIX')}))")
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        fail(f"cannot run {python}: {e}")
    facts = json.loads(out.stdout)
    if subprocess.run([python, "-c", "import numpy"], capture_output=True).returncode != 0:
        fail(f"{python} cannot import numpy: install it first (pip install numpy, or apt install python3-numpy)")
    return facts


def build(python: str, facts: dict, build_dir: str) -> str:
    """A build directory whose python/tensorhub holds a module that
    ``python`` loads: ``build_dir`` when its module has the interpreter's
    extension suffix (its ABI), else build/python-<tag> configured for it."""
    module = os.path.join("python", "tensorhub", "_native" + facts["suffix"])
    if build_dir and os.path.exists(os.path.join(build_dir, module)):
        directory = build_dir
    else:
        directory = os.path.join(SOURCE, "build", "python-" + facts["tag"])
        subprocess.run(["cmake", "-S", SOURCE, "-B", directory, "-G", "Ninja", "-DTENSORHUB_PYTHON=ON",
                        f"-DPython3_EXECUTABLE={python}", "-DTENSORHUB_BENCH=OFF", "-DTENSORHUB_SIM=OFF",
                        "-DTENSORHUB_CUDA=OFF"], check=True)
    subprocess.run(["cmake", "--build", directory, "--target", "tensorhub_python_native"], check=True)
    return directory


def install(package: str, platlib: str) -> list:
    target = os.path.join(platlib, "tensorhub")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(package, target, ignore=shutil.ignore_patterns("__pycache__"))
    info = os.path.join(platlib, f"tensorhub-{VERSION}.dist-info")
    shutil.rmtree(info, ignore_errors=True)
    os.makedirs(info)
    files = {"METADATA": f"Metadata-Version: 2.1\nName: tensorhub\nVersion: {VERSION}\n"
                         "Summary: Move fresh model weights to every rollout worker, peer to peer\n",
             "entry_points.txt": ENTRY_POINTS, "INSTALLER": "tensorhub-install.py\n", "top_level.txt": "tensorhub\n"}
    for name, text in files.items():
        with open(os.path.join(info, name), "w") as f:
            f.write(text)
    installed = []
    for root, _, names in os.walk(target):
        installed += [os.path.relpath(os.path.join(root, n), platlib) for n in names]
    installed += [os.path.relpath(os.path.join(info, n), platlib) for n in [*files, "RECORD"]]
    with open(os.path.join(info, "RECORD"), "w") as f:
        f.writelines(f"{path},,\n" for path in sorted(installed))
    return installed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter to install for")
    parser.add_argument("--build-dir", default="", help="a build to reuse if configured for that interpreter")
    args = parser.parse_args()
    facts = interpreter_facts(args.python)
    directory = build(args.python, facts, args.build_dir)
    package = os.path.join(directory, "python", "tensorhub")
    if not os.path.isdir(package):
        fail(f"{package} was not built")
    files = install(package, facts["platlib"])
    check = subprocess.run([args.python, "-c", "import tensorhub, tensorhub._native; print(tensorhub.__file__)"],
                           capture_output=True, text=True)
    if check.returncode != 0:
        fail(f"installed, but {args.python} cannot import it: {check.stderr.strip().splitlines()[-1:]}")
    print(f"installed tensorhub {VERSION} ({len(files)} files) for {args.python}: {check.stdout.strip()}")


if __name__ == "__main__":
    main()
