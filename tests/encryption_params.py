"""Keyrings for the tests that run with encryption on (the kit per backend included)."""

from __future__ import annotations

import os

from agentsessions.encryption import Keyring

__all__ = ["make_keyring"]


def make_keyring(**kwargs: object) -> Keyring:
    """A keyring of two fresh random keys, ``new`` writing and ``old`` readable."""
    return Keyring({"new": os.urandom(32), "old": os.urandom(32)}, current="new", **kwargs)  # type: ignore[arg-type]
