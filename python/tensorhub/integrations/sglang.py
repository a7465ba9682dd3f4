"""SGLang: a driver that moves a running SGLang server to version v of a
model. Run it on the server's node (it reaches that node's daemon)::

    from tensorhub.integrations import sglang
    updater = sglang.Updater("http://127.0.0.1:30000", "policy", control="/run/tensorhub.sock",
                             base_dir="/models/Qwen3-8B")   # config and tokenizer files
    updater.update(v)   # v: the version the trainer published

``update`` has the daemon hold version v (one fetch for the node, while the
server keeps generating), then pauses generation, calls
``/update_weights_from_disk`` with a model directory over the held file and
``weight_version=str(v)``, and continues generation. A failed reload leaves
the server paused and raises: SGLang may have applied part of the weights,
and serving a mix of versions is worse than not serving (reload again, or
restart the server). The version stays held until the next update.

Tested against a fake SGLang HTTP server written from SGLang's
``http_server.py`` (tests/python/test_integrations.py), not against SGLang."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from typing import Optional

import tensorhub as th

from ._common import explicit_version, reach

__all__ = ["Updater"]

# Files of a checkpoint directory that are weights: the held version replaces them.
_WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json", ".bin", ".pt")


class Updater:
    def __init__(self, url: str, model: str, *, control: str = "/run/tensorhub.sock", base_dir: Optional[str] = None,
                 pause_mode: str = "abort", flush_cache: bool = True, timeout: float = 600.0, hub=None):
        """``url``: the SGLang server; ``model``: the name the trainer
        publishes under; ``base_dir``: a model directory whose other files
        (config, tokenizer) the reload needs beside the weights (without it,
        the held file's own folder is passed: enough for a server that keeps
        its config); ``pause_mode``: abort (the only mode in which SGLang can
        flush its cache), retract or in_place."""
        if pause_mode not in ("abort", "retract", "in_place"):
            raise th.Error(f"invalid argument: pause_mode {pause_mode!r}: abort, retract or in_place")
        self.url, self.model, self.base_dir = url.rstrip("/"), model, base_dir
        self.pause_mode, self.flush_cache, self.timeout = pause_mode, flush_cache, timeout
        self.hub = reach(control=control, peer=hub)
        self.held = None  # the version the server runs
        self._dirs = tempfile.mkdtemp(prefix="tensorhub-sglang-")

    def update(self, version: int) -> dict:
        """Moves the server to ``version``; returns SGLang's answer."""
        version = explicit_version(version)
        self.hub.wait_for_head(self.model, after=version - 1, timeout=self.timeout)
        held = self.hub.hold(self.model, version)  # fetched while the server still generates
        try:
            model_path = self._model_dir(held)
            self._post("/pause_generation", {"mode": self.pause_mode})
        except BaseException:
            held.release()
            raise
        answer = self._post("/update_weights_from_disk", {
            "model_path": model_path, "weight_version": str(version), "flush_cache": self.flush_cache})
        if not answer.get("success", False):
            held.release()
            raise th.Error(f"unavailable: SGLang at {self.url} did not load {self.model} v{version}: "
                           f"{answer.get('message', 'no reason given')}; generation stays paused")
        self._post("/continue_generation", {})
        previous, self.held = self.held, held
        if previous is not None:
            previous.release()
            shutil.rmtree(os.path.join(self._dirs, f"v{previous.version}"), ignore_errors=True)  # links only
        return answer

    def close(self) -> None:
        if self.held is not None:
            self.held.release()
            self.held = None
        shutil.rmtree(self._dirs, ignore_errors=True)

    def _model_dir(self, held) -> str:
        """A model directory: the base directory's other files and the held
        weights, as symbolic links (nothing is copied)."""
        if self.base_dir is None:
            return held.dir
        path = os.path.join(self._dirs, f"v{held.version}")
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(self.base_dir):
            if not name.endswith(_WEIGHT_SUFFIXES) and not os.path.lexists(os.path.join(path, name)):
                os.symlink(os.path.join(os.path.abspath(self.base_dir), name), os.path.join(path, name))
        link = os.path.join(path, "model.safetensors")
        if not os.path.lexists(link):
            os.symlink(held.path, link)
        return path

    def _post(self, route: str, body: dict) -> dict:
        request = urllib.request.Request(self.url + route, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            if route != "/update_weights_from_disk":
                raise th.Error(f"unavailable: SGLang at {self.url}{route} answered {e.code}: {text[:200]}") from None
        except (urllib.error.URLError, OSError) as e:
            raise th.Error(f"unavailable: cannot reach SGLang at {self.url}{route}: {e}") from None
        try:
            answer = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            answer = {"message": text[:200]}
        return answer if isinstance(answer, dict) else {"message": str(answer)[:200]}
