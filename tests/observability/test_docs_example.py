"""docs/observability.md's example runs and prints the spans of one agent turn."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
MARKER = "<!-- example:turn -->\n```python\n"


def _example() -> str:
    text = DOCS.read_text(encoding="utf-8")
    assert MARKER in text, "the example block lost its marker"
    return text.split(MARKER, 1)[1].split("```", 1)[0]


def _run(script: Path, cwd: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.splitlines()


def test_the_example_prints_the_spans_of_one_turn(tmp_path: Path) -> None:
    script = tmp_path / "turn.py"
    script.write_text(_example(), encoding="utf-8")
    first = _run(script, tmp_path)
    assert [line.split()[0] if line.strip() else "" for line in first] == [
        "open",
        "agent",
        "get",
        "create",
        "save",
    ]
    assert [line.startswith("  ") for line in first] == [False, False, True, True, True]
    assert "found=False" in first[2]
    assert "events.written=2" in first[4]
    second = _run(script, tmp_path)  # the session exists now: no create
    assert [line.split()[0] for line in second] == ["open", "agent", "get", "save"]
    assert "found=True" in second[2] and "events.read=2" in second[2]
    assert "version=3" in second[3]
