"""slime: a post-write hook that publishes each checkpoint directory slime
writes (``--update-weight-transport disk``)::

    --custom-update-weight-post-write-path tensorhub.integrations.slime.post_write
    TENSORHUB_MODEL=policy TENSORHUB_CONTROL=/run/tensorhub.sock   # or TENSORHUB_PEER_OPTIONS='{json}'
    TENSORHUB_REPLICAS=0   # wait for this many holders before returning

slime calls ``post_write(args, version_dir, rollout_engines)`` after it wrote
``weight_v<N>``; the hook publishes the directory's safetensors files as one
version (in process: served from the files with no copy; through a daemon:
a file the daemon maps), with ``{"slime_dir": version_dir}`` in its
metadata, and keeps it served until the next one. The rollout side reloads
from its node's held copy with ``tensorhub.integrations.sglang.Updater``.

Tested by calling the hook as slime does (its signature from slime's
``update_weight`` code), not against slime."""
from __future__ import annotations

import json
import os
from typing import Any, Optional

from ._common import reach

__all__ = ["post_write"]

_published: dict = {}  # model -> the handle of its newest publication


def post_write(args: Any, version_dir: str, rollout_engines: Any = None, *, hub=None,
               model: Optional[str] = None) -> int:
    """Publishes ``version_dir``; returns the version number."""
    model = model or os.environ.get("TENSORHUB_MODEL", "policy")
    options = os.environ.get("TENSORHUB_PEER_OPTIONS")
    hub = reach(control=os.environ.get("TENSORHUB_CONTROL"), peer=hub,
                peer_options=json.loads(options) if options else None)
    published = hub.publish_safetensors(model, version_dir, metadata={"slime_dir": os.path.abspath(version_dir)})
    replicas = int(os.environ.get("TENSORHUB_REPLICAS", "0"))
    if replicas:
        published.wait_replicated(replicas, timeout=float(os.environ.get("TENSORHUB_TIMEOUT", "600")))
    previous = _published.get(model)
    _published[model] = published
    if previous is not None:
        previous.release()
    return published.version
