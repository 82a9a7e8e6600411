"""Retry pacing: the jittered, growing pause every retry loop takes between attempts."""

from __future__ import annotations

import asyncio
import random

__all__ = ["DEFAULT_UPDATE_RETRIES", "backoff", "backoff_delay"]

#: How many lost races `SessionManager.update` retries unless told otherwise.
DEFAULT_UPDATE_RETRIES = 64


def backoff_delay(attempt: int, cap: float = 0.05) -> float:
    """A jittered, growing moment (at most *cap* seconds) to wait before retry
    *attempt*, so that contending writers spread out instead of colliding again."""
    return random.uniform(0, min(cap, 0.001 * 2 ** min(attempt, 20)))


async def backoff(attempt: int, cap: float = 0.05) -> None:
    """Sleep `backoff_delay` (used by every retry loop)."""
    await asyncio.sleep(backoff_delay(attempt, cap))
