"""python/install.py puts the package into a virtual environment, with the
entry point that lets vLLM find the "tensorhub" weight-transfer engine."""
import os
import subprocess
import sys

import pytest

BUILD = os.environ.get("TENSORHUB_BUILD_DIR")
INSTALL = os.path.join(os.path.dirname(__file__), "..", "..", "python", "install.py")


@pytest.mark.skipif(not BUILD, reason="TENSORHUB_BUILD_DIR names no build")
def test_install_into_a_virtual_environment(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    for _ in range(2):  # installing again replaces the first
        out = subprocess.run([python, INSTALL, "--python", python, "--build-dir", BUILD],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
    probe = ("import tensorhub, tensorhub.integrations.vllm, tensorhub._native; "
             "from importlib.metadata import entry_points, version; "
             "print(tensorhub.__file__); print(version('tensorhub')); "
             "print([e.value for e in entry_points(group='vllm.general_plugins') if e.name == 'tensorhub'])")
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=str(tmp_path),
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    where, version, plugins = out.stdout.splitlines()
    assert where.startswith(str(venv)) and version == "0.1.0"
    assert plugins == "['tensorhub.integrations.vllm:register']"
