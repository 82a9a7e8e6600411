"""docs/doctor.md documents every check the code can report, under the anchor its
findings link to, and no check the code does not have."""

from __future__ import annotations

import re
from pathlib import Path

from agentsessions.backend import finding

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "doctor.md"
SOURCES = [
    ROOT / "core/src/agentsessions/_diagnosis.py",
    ROOT / "core/src/agentsessions/_manager.py",
    ROOT / "core/src/agentsessions/_hooks.py",
    ROOT / "core/src/agentsessions/_memory.py",
    *sorted(ROOT.glob("backends/*/src/*/_diagnosis.py")),
    *sorted(ROOT.glob("backends/*/src/*/_manager.py")),
]
CHECK = re.compile(r'"((?:common|backend|memory|redis|postgres|sqlite|mongo|mysql)\.[a-z_]+)"')
HEADING = re.compile(r"^### (?P<check>[a-z_.]+) \{#(?P<anchor>[a-z-]+)\}$", re.MULTILINE)


def _checks_in_code() -> set[str]:
    found: set[str] = set()
    for path in SOURCES:
        found |= set(CHECK.findall(path.read_text(encoding="utf-8")))
    return found


def test_every_check_has_its_section_and_every_section_a_check() -> None:
    code = _checks_in_code()
    assert len(code) >= 25  # the regex still sees the checks
    sections = {m["check"]: m["anchor"] for m in HEADING.finditer(PAGE.read_text("utf-8"))}
    assert code - set(sections) == set(), "checks without a section in docs/doctor.md"
    assert set(sections) - code == set(), "sections of docs/doctor.md for no check"
    for check, anchor in sections.items():
        assert finding(check, "ok", "").docs.endswith(f"/doctor/#{anchor}")
