"""The branching case of the benchmark, in its quick form: it runs and writes its files.

Structure only (every engine the tests have, tiny sizes); speed is in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentsessions_bench.__main__ import main
from agentsessions_bench._suite import ENGINES

REQUIRE_SERVERS = os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") == "1"


def test_quick_branching_case_measures_every_engine(tmp_path: Path) -> None:
    assert main(["--branching", "--quick", "--out", str(tmp_path)]) == 0
    found = json.loads((tmp_path / "branching.json").read_text(encoding="utf-8"))
    assert found["errors"] == {}
    skipped = {item["engine"] for item in found["skipped"]}
    if REQUIRE_SERVERS:
        assert not skipped, found["skipped"]
    # Every backend of the bench declares branching, so every engine is measured.
    assert found["unsupported"] == [], found["unsupported"]
    assert set(found["branching"]) == set(ENGINES) - skipped
    for sizes in found["branching"].values():
        assert set(sizes) == {"0", "40"}
        assert set(sizes["0"]) == {"fork", "read", "copy"}
        assert {"fork", "fork_half", "read", "copy", "rewind"} <= set(sizes["40"])
        assert all(value > 0 for row in sizes.values() for value in row.values())
    if "sqlite" in found["branching"]:
        assert "sdk_branch" in found["branching"]["sqlite"]["40"]
