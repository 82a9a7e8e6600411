"""Every Python example in the READMEs and the docs runs as written.

Each ```python block is a complete program: it is saved as a script and run in a fresh
interpreter, in an empty working directory, and must exit 0. A block that is not meant
to run (it needs a server, or it is part of a distribution that does not exist) is
preceded by the line ``<!-- example: fragment (why) -->``: it is only compiled. Blocks
that run may reach no network: their URLs are sqlite, memory or loopback ones.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted(
    {
        ROOT / "README.md",
        *ROOT.glob("core/README.md"),
        *ROOT.glob("cli/README.md"),
        *ROOT.glob("conformance/README.md"),
        *ROOT.glob("backends/*/README.md"),
        *ROOT.glob("tools/*/README.md"),
        *ROOT.glob("docs/**/*.md"),
    }
)
FRAGMENT = re.compile(r"<!--\s*example:\s*fragment\b.*-->")
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)$")
URL = re.compile(r"\b(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<netloc>[^/\s\"'?#]*)")
LOOPBACK = re.compile(r"^(127(\.\d{1,3}){3}|localhost|\[::1\])(:\d+)?$")
EXAMPLE_TIMEOUT = 120  # seconds; an example that hangs fails instead of stalling the run


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    code: str
    fragment: bool

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def python_blocks(path: Path) -> list[Block]:
    """The fenced ```python blocks of a Markdown file, each marked fragment or not."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        start = index
        info = match["info"].strip().split()
        end = start + 1
        while end < len(lines) and not re.match(rf"^{match['indent']}```\s*$", lines[end]):
            end += 1
        if end == len(lines):
            raise AssertionError(f"{path}:{start + 1}: code fence is never closed")
        if info[:1] in (["python"], ["py"]):
            previous = next((line for line in reversed(lines[:start]) if line.strip()), "")
            indent = len(match["indent"])
            code = "\n".join(line[indent:] for line in lines[start + 1 : end]) + "\n"
            blocks.append(Block(path, start + 1, code, bool(FRAGMENT.search(previous))))
        index = end + 1
    return blocks


BLOCKS = [block for path in DOCUMENTS for block in python_blocks(path)]
RUNNABLE = [block for block in BLOCKS if not block.fragment]


def test_the_documents_hold_examples() -> None:
    assert ROOT / "README.md" in DOCUMENTS
    assert len(DOCUMENTS) >= 10
    assert len(RUNNABLE) >= 15, [block.name for block in RUNNABLE]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.name)
def test_example_compiles(block: Block) -> None:
    """Fragments too: they may use top-level ``await`` but must be valid Python."""
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if block.fragment else 0
    compile(block.code, block.name, "exec", flags=flags, dont_inherit=True)


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda block: block.name)
def test_example_reaches_only_loopback(block: Block) -> None:
    for match in URL.finditer(block.code):
        scheme, netloc = match["scheme"], match["netloc"].rpartition("@")[2]
        if scheme == "memory" or not netloc:
            continue
        for host in netloc.split(","):
            assert LOOPBACK.match(host), (
                f"{block.name}: {match[0]} is not a loopback URL; "
                "mark the block <!-- example: fragment (why) --> or use sqlite/memory"
            )


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda block: block.name)
def test_example_runs(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(block.code, encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, (
        f"{block.name} exited with {result.returncode}\n{result.stdout}\n{result.stderr}"
    )
