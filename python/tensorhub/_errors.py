"""The package's error type and the argument checks that both the in-process
peer (``__init__``) and the daemon's client (``daemon``) make. Private: the
public names are ``tensorhub.Error``; this module imports nothing of the
package, so neither side imports the other to reach it."""
from __future__ import annotations

import os
from typing import Optional


class Error(RuntimeError):
    """A TensorHub failure, with the one-line reason the peer gives.
    ``code`` names the kind: invalid_argument, corrupt, verify_failed,
    not_found, already_exists, permission_denied, io_error, unavailable,
    timeout, cancelled, internal, resource_exhausted (a limit of the
    peer would be crossed; the message names it) or aborted (work of
    several peers cannot complete: a group's commit, naming each rank at
    fault as ``rank N``)."""

    code = "internal"
    CODES = ("invalid_argument", "corrupt", "verify_failed", "not_found", "already_exists", "permission_denied",
             "io_error", "unavailable", "timeout", "cancelled", "internal", "resource_exhausted", "aborted")

    # The message's prefix as the C++ side writes it (status_code_name).
    _PREFIXES = {"invalid argument": "invalid_argument", "corrupt": "corrupt",
                 "verification failed": "verify_failed", "not found": "not_found",
                 "already exists": "already_exists", "permission denied": "permission_denied",
                 "I/O error": "io_error", "unavailable": "unavailable", "timeout": "timeout",
                 "cancelled": "cancelled", "internal error": "internal", "resource exhausted": "resource_exhausted",
                 "aborted": "aborted"}

    def __init__(self, message: str, code: Optional[str] = None):
        super().__init__(message)
        if code not in self.CODES:  # none, or one this version does not know: "timeout: ..." is a timeout
            prefix = message.split(":", 1)[0].strip() if ":" in message else ""
            code = self._PREFIXES.get(prefix, prefix.replace(" ", "_") if prefix.replace(" ", "_") in self.CODES
                                      else "internal")
        self.code = code


class ArgumentTypeError(Error, TypeError):
    """An argument of the wrong type: an ``Error`` with code
    ``invalid_argument`` (as every refusal of the package) that is also a
    ``TypeError`` (as Python's own calls raise), so either ``except``
    catches it."""

    def __init__(self, message: str):
        super().__init__(message if message.startswith("invalid argument") else "invalid argument: " + message,
                         "invalid_argument")


def check_version(version, call: str, after: str = "", name: str = "version") -> int:
    """``version`` (0: the head, else a version number) of ``call``, or
    raises: ``ArgumentTypeError`` when it is not an int (with ``after``, a
    path given where the version goes names the order: ``call``'s arguments
    are model, version, then ``after``); ``Error`` (``invalid_argument``)
    when it is negative. ``name``: the argument's name."""
    if isinstance(version, (str, bytes, os.PathLike)) and after:
        raise ArgumentTypeError(
            f"{call}(model, version, {after}): the version comes before the {after}, as in the C++ API, and is an "
            f"int (0: the head), not the {type(version).__name__} {version!r}; for the head, name the {after}: "
            f"{call}(model, {after}=...)")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ArgumentTypeError(f"{call}: {name} must be an int (a version number, or 0), not "
                                f"{type(version).__name__} {version!r}"[:300])
    if not 0 <= version < 1 << 64:
        raise Error(f"invalid argument: {call}: {name} must be 0 or a version number, not {version}",
                    "invalid_argument")
    return version


def check_timeout(timeout, call: str) -> Optional[float]:
    """``timeout`` (None: no limit; else seconds, 0 or more), or raises
    ``ArgumentTypeError`` (not a number) or ``Error`` (``invalid_argument``:
    negative or not finite)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ArgumentTypeError(f"{call}: timeout must be seconds (a number) or None, not {type(timeout).__name__} "
                                f"{timeout!r}"[:300])
    if not 0 <= timeout < float("inf"):
        raise Error(f"invalid argument: {call}: timeout must be 0 or more seconds, not {timeout}", "invalid_argument")
    return float(timeout)


# The longest wait the binding takes (its "no limit" is a year).
FOREVER = 365 * 24 * 3600.0


def native_timeout(timeout, call: str) -> Optional[float]:
    """``timeout`` checked (check_timeout) and as the binding takes it."""
    timeout = check_timeout(timeout, call)
    return None if timeout is None or timeout >= FOREVER else timeout
