"""docs/backend-reference.md is what `agentsessions._reference` renders from the code today.

It is committed so that it reads on GitHub without a docs build; this test regenerates
it and fails on any difference, saying how to regenerate it.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from agentsessions import _hooks, _reference, backend
from agentsessions.backend import SessionManager

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "backend-reference.md"
REGENERATE = "uv run python -m agentsessions._reference docs/backend-reference.md"


@pytest.fixture(scope="module")
def committed() -> str:
    return REFERENCE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def rendered() -> str:
    return _reference.render()


def test_the_committed_reference_is_generated_from_the_code(committed: str, rendered: str) -> None:
    if committed != rendered:
        old, new = committed.splitlines(), rendered.splitlines()
        line = next(
            (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
            min(len(old), len(new)),
        )
        pytest.fail(
            f"docs/backend-reference.md differs from the code from line {line + 1} on; "
            f"regenerate it with: {REGENERATE}",
            pytrace=False,
        )


def test_every_export_has_a_section(rendered: str) -> None:
    headings = set(re.findall(r"^### `(\w+)`$", rendered, re.MULTILINE))
    missing = sorted(set(backend.__all__) - headings - {"SessionManager"})
    assert not missing, f"the reference does not render {missing}"
    assert "### `SessionManager.__init__`" in rendered


@pytest.mark.parametrize("name", [*_hooks.HOOKS, "per_loop", "_unavailable", "_quietly"])
def test_a_hook_or_helper_docstring_is_rendered_whole(rendered: str, name: str) -> None:
    doc = inspect.getdoc(getattr(SessionManager, name))
    assert doc
    assert _reference.markdown(doc) in rendered
    # Every word of the docstring, in order: nothing of it is left out.
    words = re.findall(r"[\w']+", doc)
    after = rendered.split(f"### `SessionManager.{name}`", 1)[1]
    section = re.split(r"\n##+ ", after, maxsplit=1)[0]
    assert re.findall(r"[\w']+", section)[-len(words) :] == words


def test_the_signature_is_the_source_text(rendered: str) -> None:
    assert (
        "async def _load(\n    self, session_id: str, last_events: int | None, now: datetime\n"
        ") -> LoadedSession | None\n"
    ) in rendered
    assert "Timeout = Annotated[float, Field(gt=0, le=MAX_TIMEOUT, allow_inf_nan=False)]" in (
        rendered
    )


def test_every_contents_link_has_its_heading(rendered: str) -> None:
    links = re.findall(r"\]\(#([\w-]+)\)", rendered)
    anchors = {_reference.slug(h) for h in re.findall(r"^#+ (.+)$", rendered, re.MULTILINE)}
    assert links, "the reference has no contents"
    assert set(links) <= anchors, sorted(set(links) - anchors)


def test_an_export_no_group_lists_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "__all__", [*backend.__all__, "brand_new_helper"])
    with pytest.raises(LookupError, match="brand_new_helper"):
        _reference.render()


def test_check_mode_fails_on_a_stale_file_and_says_how_to_regenerate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rendered: str
) -> None:
    stale = tmp_path / "reference.md"
    stale.write_text(rendered.replace("Insert a new session", "Insert a session"), "utf-8")
    assert _reference.main([str(stale), "--check"]) == 1
    assert REGENERATE in capsys.readouterr().err
    assert _reference.main([str(stale)]) == 0
    assert _reference.main([str(stale), "--check"]) == 0
    assert stale.read_text("utf-8") == rendered


@pytest.mark.parametrize("page", ["docs/backend-authors.md", "conformance/README.md"])
def test_the_guide_and_the_kit_link_to_it(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    assert "backend-reference.md" in text


def test_the_site_has_it_in_its_nav() -> None:
    assert "backend-reference.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
