"""The figures conformance/README.md states are the kit's: its clause count, measured.

The report example's summary is a real run of the memory backend in URL mode; its
total must be the number of clauses the kit collects there today, and so must the
count the text states.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

from agentsessions.backend import Capabilities

README = Path(__file__).resolve().parents[2] / "conformance" / "README.md"
COLLECT = ("-p", "agentsessions_conformance", "--session-url", "memory://", "--collect-only")
COLLECT += ("-q", "-p", "no:cacheprovider")


def _report_example() -> dict[str, object]:
    text = README.read_text(encoding="utf-8")
    block = text.split("`--conformance-report PATH` writes JSON:", 1)[1]
    example = block.split("```json\n", 1)[1].split("```", 1)[0]
    parsed: dict[str, object] = json.loads(example)
    return parsed


def _collected_in_url_mode(cwd: Path) -> int:
    # Collection only, in a directory of its own so no project configuration applies.
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *COLLECT],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = re.search(r"^(\d+) tests? collected", done.stdout, re.MULTILINE)
    assert found, done.stdout[-2000:] + done.stderr[-2000:]
    return int(found.group(1))


def test_the_stated_clause_count_is_the_kits(tmp_path: Path) -> None:
    collected = _collected_in_url_mode(tmp_path)
    summary = _report_example()["summary"]
    assert isinstance(summary, dict)
    stated = re.findall(r"the kit has (\d+) clauses", README.read_text(encoding="utf-8"))
    assert stated, "conformance/README.md no longer states the clause count"
    assert [int(n) for n in stated] == [collected], (
        f"conformance/README.md says the kit has {stated} clauses; URL mode on memory:// "
        f"collects {collected}: update it and the report example's summary (run "
        "`agentsessions conformance memory:// --report r.json` for the real one)"
    )
    assert sum(summary.values()) == collected, (
        f"the report example's summary {summary} does not add up to the {collected} "
        "clauses the kit has: take it from a real run on memory://"
    )


def test_the_report_example_shows_every_capability() -> None:
    backends = _report_example()["backends"]
    assert isinstance(backends, dict)
    (backend,) = backends.values()
    fields = [field.name for field in dataclasses.fields(Capabilities)]
    assert list(backend["capabilities"]) == fields
