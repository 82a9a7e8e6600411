"""The clause tests, one focused mixin per area of the contract, and the class combining them.

This package is imported only when a test module subclasses `SessionManagerTests`
(or in ``--session-url`` mode), and the plugin registers it for pytest's assertion
rewriting first, so failed clauses show the compared values.
"""

from __future__ import annotations

from ._base import SuiteBase
from ._tests_branching import BranchingTests
from ._tests_compaction import CompactionTests
from ._tests_concurrency import ConcurrencyTests
from ._tests_create import CreateTests
from ._tests_delete import DeleteTests
from ._tests_erasure import ErasureTests
from ._tests_erasure_races import ErasureRaceTests
from ._tests_errors import ErrorMappingTests
from ._tests_every_operation import EveryOperationTests
from ._tests_fidelity import FidelityTests
from ._tests_file_lock import FileLockTests
from ._tests_get import GetTests
from ._tests_history import HistoryTests
from ._tests_ids import IdTests
from ._tests_input import InputTests
from ._tests_isolation import IsolationTests
from ._tests_layout_sizes import LayoutBoundaryTests
from ._tests_lifecycle import LifecycleTests
from ._tests_listing import ListingTests
from ._tests_loops import LoopTests
from ._tests_lost_replies import LostReplyTests
from ._tests_misuse import MisuseFuzzTests, MisuseTests
from ._tests_model import ModelTests
from ._tests_newops_namespaces import NewOpsNamespaceTests
from ._tests_newops_races import NewOpsRaceTests
from ._tests_newops_rules import NewOpsRuleTests
from ._tests_newops_ttl import NewOpsExpiryTests
from ._tests_refresh import RefreshTests
from ._tests_restore import RestoreTests
from ._tests_save import SaveTests
from ._tests_save_tokens import SaveTokenTests
from ._tests_ttl import TtlTests
from ._tests_update import UpdateTests
from ._tests_wire import WireFaultTests

__all__ = ["SessionManagerTests"]


class SessionManagerTests(
    # pytest collects the last base's tests first: this runs create, get, save, ... first.
    LoopTests,
    ModelTests,
    LifecycleTests,
    MisuseTests,
    MisuseFuzzTests,
    IdTests,
    InputTests,
    FidelityTests,
    TtlTests,
    IsolationTests,
    ConcurrencyTests,
    HistoryTests,
    ErrorMappingTests,
    WireFaultTests,
    FileLockTests,
    SaveTokenTests,
    LostReplyTests,
    NewOpsRaceTests,
    NewOpsRuleTests,
    NewOpsNamespaceTests,
    NewOpsExpiryTests,
    EveryOperationTests,
    LayoutBoundaryTests,
    CompactionTests,
    BranchingTests,
    RestoreTests,
    ListingTests,
    ErasureRaceTests,
    ErasureTests,
    DeleteTests,
    RefreshTests,
    UpdateTests,
    SaveTests,
    GetTests,
    CreateTests,
    SuiteBase,
):
    """Every clause of the SessionManager contract, run against the ``manager`` fixture.

    Subclass it in a test module (name the subclass ``Test...``) and provide one async
    fixture ``manager`` that yields an opened `SessionManager` and closes it after.
    Required: the storage hook ``raw_inventory``. Optional: ``known_divergences`` and
    ``time_limit``.
    """
