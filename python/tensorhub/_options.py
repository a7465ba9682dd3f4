"""The checks of ``Peer.start``'s options: each is of the type the C++
peer takes, or the call raises ``tensorhub.Error`` (``invalid_argument``)
naming it. Private."""
from __future__ import annotations

from ._errors import Error


def _bad_option(name, wanted, value):
    return Error(f"invalid argument: {name} must be {wanted}, not {type(value).__name__} {value!r}"[:300],
                 "invalid_argument")


def _str_option(name, value, optional=False):
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _bad_option(name, "a str", value)
    return value


def _strs_option(name, value):
    # A str is iterable too: "a:b" would be read a character at a time.
    if isinstance(value, (str, bytes)):
        raise _bad_option(name, "a list of str (one string is not a list)", value)
    try:
        items = list(value)
    except TypeError:
        raise _bad_option(name, "a list of str", value) from None
    for item in items:
        if not isinstance(item, str):
            raise _bad_option(name, "a list of str", item)
    return items


def _int_option(name, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad_option(name, "an int", value)
    if value < 0 or value >= 1 << 63:
        raise Error(f"invalid argument: {name} must be a non-negative int, not {value}", "invalid_argument")
    return value


def _bool_option(name, value):
    if not isinstance(value, bool):
        raise _bad_option(name, "True or False", value)
    return value


def _seconds_option(name, value, least, most):
    """``value`` seconds, ``least`` to ``most``, as whole milliseconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not least <= value <= most:
        raise _bad_option(name, f"{least} to {most} seconds", value)
    return int(value * 1000)
