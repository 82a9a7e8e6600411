"""The compaction case of the benchmark, in its quick form: it runs and writes its files.

Structure only (every engine the tests have, tiny sizes); speed is in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentsessions_bench.__main__ import main
from agentsessions_bench._suite import ENGINES

REQUIRE_SERVERS = os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") == "1"


def test_quick_compaction_case_measures_every_engine(tmp_path: Path) -> None:
    assert main(["--compaction", "--quick", "--out", str(tmp_path)]) == 0
    found = json.loads((tmp_path / "compaction.json").read_text(encoding="utf-8"))
    assert found["errors"] == {}
    skipped = {item["engine"] for item in found["skipped"]}
    if REQUIRE_SERVERS:
        assert not skipped, found["skipped"]
    assert set(found["compaction"]) == set(ENGINES) - skipped
    for row in found["compaction"].values():
        assert set(row) == {"compact", "compact_archive", "rewrite", "turn_before", "turn_after"}
        assert all(value > 0 for value in row.values())
