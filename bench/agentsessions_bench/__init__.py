"""Benchmarks of agentsessions against raw drivers and the stores users would pick instead.

``python -m agentsessions_bench`` runs the whole suite (see ``--help``);
``agentsessions bench URL`` runs our store on one URL against its engine's floor.
"""

from ._api import RESULTS_DIR, profile_operation, publish, run_engines, run_url
from ._report import render_markdown
from ._runner import Config, StoreResult, run_suite
from ._store import Store, StoreUnavailable
from ._suite import ENGINES

__all__ = [
    "ENGINES",
    "RESULTS_DIR",
    "Config",
    "Store",
    "StoreResult",
    "StoreUnavailable",
    "profile_operation",
    "publish",
    "render_markdown",
    "run_engines",
    "run_suite",
    "run_url",
]
