"""Placeholder: this verb group is being written."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register this module's subcommands (none yet)."""
