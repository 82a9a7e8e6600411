"""Strict JSON: the one encoding every backend stores, checked before anything is written.

Python's ``json`` module silently turns ``{1: "a"}`` into ``{"1": "a"}``, tuples into
lists and ``nan`` into invalid JSON, and pydantic happily serialises datetimes: each of
those is a value that does not come back as it went in. `check_json` rejects them
with the path of the offending value, so a save either stores what the caller holds or
raises `SessionSerializationError` before any I/O.
"""

from __future__ import annotations

import math
from typing import Any

import pydantic_core

from ._errors import SessionSerializationError

__all__ = ["INT64_MAX", "INT64_MIN", "check_json", "check_text", "dumps", "loads"]

# Every engine we support stores integers exactly up to 64 bits (BSON int64, SQLite
# INTEGER); accepting more would mean some backends silently round.
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
_MAX_DEPTH = 100  # MongoDB and most JSON parsers stop a little above this


def check_json(value: Any, path: str) -> None:
    """Raise `SessionSerializationError` unless *value* is plain, portable JSON."""
    try:
        _check(value, 0)
    except _Refused as refused:
        # The path is built only here, on the way out: every save checks every new
        # event's content, and formatting a path per item cost more than the check.
        where = path + "".join(reversed(refused.parts))
        raise SessionSerializationError(where, refused.reason) from None


class _Refused(Exception):
    """Why a value is not JSON; *parts* ("[key]" / "[index]") collected innermost first."""

    def __init__(self, reason: str, part: str = "") -> None:
        self.reason = reason
        self.parts = [part] if part else []


def check_text(value: str, path: str) -> None:
    """Raise `SessionSerializationError` if *value* holds an unpaired surrogate
    (``"\\ud800"``): no UTF-8 encoding, so no engine, can store it."""
    # isascii() is O(1) in CPython, so plain text costs nothing here.
    if not value.isascii():
        reason = _surrogate(value)
        if reason is not None:
            raise SessionSerializationError(path, reason)


def _surrogate(value: str) -> str | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"string holds an unpaired surrogate at index {exc.start}"
    return None


def _check(value: Any, depth: int) -> None:
    if value is None or value is True or value is False:
        return
    kind = type(value)
    if kind is str:
        if not value.isascii():
            reason = _surrogate(value)
            if reason is not None:
                raise _Refused(reason)
        return
    if kind is int:
        if not INT64_MIN <= value <= INT64_MAX:
            raise _Refused(f"integer {value} does not fit in 64 bits")
        return
    if kind is float:
        if not math.isfinite(value):
            raise _Refused(f"float {value!r} is not valid JSON")
        return
    if depth >= _MAX_DEPTH:
        raise _Refused(f"nested deeper than {_MAX_DEPTH} levels")
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise _Refused(f"key of type {type(key).__name__}, expected str", f"[{key!r}]")
            if not key.isascii():
                reason = _surrogate(key)
                if reason is not None:
                    raise _Refused(reason, f"[{key!r}] (the key)")
            # Scalars settled inline: a recursive call per item cost more than the check.
            of = type(item)
            if (
                (of is str and item.isascii())
                or (of is int and INT64_MIN <= item <= INT64_MAX)
                or item is None
                or of is bool
            ):
                continue
            try:
                _check(item, depth + 1)
            except _Refused as refused:
                refused.parts.append(f"[{key!r}]")
                raise
        return
    if kind is list:
        for index, item in enumerate(value):
            # Scalars settled inline: a recursive call per item cost more than the check.
            of = type(item)
            if (
                (of is str and item.isascii())
                or (of is int and INT64_MIN <= item <= INT64_MAX)
                or item is None
                or of is bool
            ):
                continue
            try:
                _check(item, depth + 1)
            except _Refused as refused:
                refused.parts.append(f"[{index}]")
                raise
        return
    # bool/int/str/dict/list subclasses (IntEnum, OrderedDict, ...) would not come back
    # as the same type, so they are rejected too rather than silently converted.
    raise _Refused(f"value of type {kind.__name__} is not JSON")


def dumps(value: Any) -> str:
    """Encode already-checked JSON compactly (pydantic-core: fast, no per-item Python)."""
    return pydantic_core.to_json(value).decode()


def loads(data: str | bytes) -> Any:
    """Decode JSON text stored by `dumps`."""
    return pydantic_core.from_json(data, allow_inf_nan=False)
