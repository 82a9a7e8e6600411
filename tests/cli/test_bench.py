"""``agentsessions bench URL``: the verb the benchmark package adds to the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentsessions_cli import main as cli_main


def test_cli_bench_runs_one_url(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    code = cli_main(
        ["bench", "memory://", "--sizes", "0,5", "--rounds", "1", "--ops", "1", "--json", str(out)]
    )
    assert code == 0
    assert "| agentsessions | **ours** |" in capsys.readouterr().out
    stores = json.loads(out.read_text())["stores"]
    assert [s["name"] for s in stores] == ["agentsessions", "raw dict"]
