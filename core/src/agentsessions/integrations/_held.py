"""A value held for each of some live objects, by identity, and dropped with the object.

For objects that cannot be keys of a `weakref.WeakKeyDictionary` (pydantic models
define ``__eq__`` and so are unhashable) but can be weakly referenced.
"""

from __future__ import annotations

import weakref
from typing import Generic, TypeVar

__all__ = ["HeldFor"]

K = TypeVar("K")
V = TypeVar("V")


class HeldFor(Generic[K, V]):
    """``held.put(obj, value)``, ``held.get(obj)``, ``held.drop(obj)``; an entry lives as
    long as its object."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[K], V]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, owner: K, value: V) -> None:
        key = id(owner)
        entries = self._entries
        entry = entries.get(key)
        if entry is not None and entry[0]() is owner:
            entries[key] = (entry[0], value)
            return

        def forget(ref: weakref.ref[K]) -> None:
            # Only the entry of this very object: its id may be reused once it is gone.
            current = entries.get(key)
            if current is not None and current[0] is ref:
                entries.pop(key, None)

        entries[key] = (weakref.ref(owner, forget), value)

    def get(self, owner: K) -> V | None:
        entry = self._entries.get(id(owner))
        if entry is None or entry[0]() is not owner:
            return None
        return entry[1]

    def drop(self, owner: K) -> None:
        entry = self._entries.get(id(owner))
        if entry is not None and entry[0]() is owner:
            self._entries.pop(id(owner), None)
