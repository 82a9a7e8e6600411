"""Make the benchmark package (bench/, not a workspace member) importable for its smoke test."""

from __future__ import annotations

import sys
from pathlib import Path

_BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(_BENCH) not in sys.path:
    sys.path.insert(0, str(_BENCH))
