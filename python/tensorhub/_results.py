"""The small results the package returns: which version a head is
(``VersionInfo``, as C++'s ``tensorhub::VersionInfo``) and how far a fetch
has come (``FetchProgress``, as C++'s ``FetchProgressInfo``). Each is a
frozen dataclass read by attribute, like the handles; a dict-style read
(``info["version"]``, ``.get``, ``in``, ``keys()``, ``dict(info)``) stays
for code written when they were dicts. Private module: the classes are
``tensorhub.VersionInfo`` and ``tensorhub.FetchProgress``."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, List, Mapping, Optional, Tuple


class _DictRead:
    """Reads a result's fields as a dict's items. A field that is None (not
    known: a daemon does not say a head's size) reads as absent, as it was
    from the dict."""

    def keys(self) -> List[str]:
        """The names of the known fields. Raises nothing."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None]

    def values(self) -> List[Any]:
        """The values of the known fields. Raises nothing."""
        return [getattr(self, k) for k in self.keys()]

    def items(self) -> List[Tuple[str, Any]]:
        """(name, value) of each known field. Raises nothing."""
        return [(k, getattr(self, k)) for k in self.keys()]

    def __getitem__(self, key: str) -> Any:
        """Raises KeyError for a name that is not a known field."""
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        """The field ``key``, or ``default`` when it is not known. Raises nothing."""
        return getattr(self, key) if key in self.keys() else default

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, type(self)):
            return dataclasses.astuple(self) == dataclasses.astuple(other)
        if isinstance(other, Mapping):  # as the dict it was
            return dict(self.items()) == dict(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(dataclasses.astuple(self))


@dataclass(frozen=True, eq=False)
class VersionInfo(_DictRead):
    """One verified version of a model: ``model``, ``version`` (its number),
    ``manifest_id`` (the manifest's id, hex) and ``nbytes`` (its size;
    None where it is not known: a daemon's ``latest`` and ``wait_for_head``
    do not say it)."""

    model: str
    version: int
    manifest_id: str
    nbytes: Optional[int] = None

    @classmethod
    def _from_native(cls, info: Mapping[str, Any]) -> "VersionInfo":
        return cls(info["model"], info["version"], info["manifest_id"], info.get("nbytes"))


@dataclass(frozen=True, eq=False)
class FetchProgress(_DictRead):
    """How far a fetch has come: bytes and shards verified of the total,
    ``sources`` (peers sending to it now), ``done`` (it ended: verified,
    failed or released; ``wait()`` says which)."""

    bytes_total: int
    bytes_verified: int
    shards_total: int
    shards_verified: int
    sources: int
    done: bool
    bytes_per_second: Optional[float] = None  # None until the binding passes it on
    bytes_received: int = 0  # payload bytes that came over the network for this fetch

    @classmethod
    def _from_native(cls, progress: Mapping[str, Any]) -> "FetchProgress":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in progress.items() if k in names})
