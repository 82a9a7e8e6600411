"""Every published distribution carries complete, consistent metadata.

`nox -s dist` checks the built archives (twine, LICENSE inside, the kit on the wheels
alone); this checks the sources they are built from, on every test run.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - pytest depends on tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = {
    "agentsessions": "core",
    "agentsessions-cli": "cli",
    "agentsessions-conformance": "conformance",
    "agentsessions-sqlite": "backends/sqlite",
    "agentsessions-postgres": "backends/postgres",
    "agentsessions-redis": "backends/redis",
    "agentsessions-mongo": "backends/mongo",
    "agentsessions-mysql": "backends/mysql",
}
REPOSITORY = "https://github.com/agentsessions/agentsessions"
URLS = {
    "Homepage": REPOSITORY,
    "Documentation": "https://agentsessions.github.io/agentsessions/",
    "Source": REPOSITORY,
    "Issues": f"{REPOSITORY}/issues",
    "Changelog": f"{REPOSITORY}/blob/main/CHANGELOG.md",
}
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")


def _project(directory: str) -> dict[str, Any]:
    with (ROOT / directory / "pyproject.toml").open("rb") as handle:
        project: dict[str, Any] = tomllib.load(handle)["project"]
    return project


def test_the_test_tooling_cannot_be_uploaded() -> None:
    project = _project("tools/testservers")
    assert "Private :: Do Not Upload" in project["classifiers"]
    assert project["license-files"] == ["LICENSE"]
    assert (ROOT / "tools/testservers/LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()


def test_nox_builds_exactly_these_distributions() -> None:
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    built = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(
            isinstance(target, ast.Name) and target.id == "DISTRIBUTIONS" for target in node.targets
        )
    )
    assert sorted(built) == sorted(PUBLISHED)


@pytest.fixture(scope="module")
def core_version() -> Version:
    return Version(_project("core")["version"])


@pytest.mark.parametrize(("name", "directory"), PUBLISHED.items())
def test_metadata_is_complete(name: str, directory: str) -> None:
    project = _project(directory)
    assert project["name"] == name
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    assert (ROOT / directory / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()
    assert project["authors"]
    assert project["keywords"]
    assert project["urls"] == URLS
    assert project["requires-python"] == ">=3.10"
    classifiers = set(project["classifiers"])
    for python in PYTHONS:
        assert f"Programming Language :: Python :: {python}" in classifiers
    assert {"Framework :: AsyncIO", "Typing :: Typed"} <= classifiers
    assert (ROOT / directory / "src" / name.replace("-", "_") / "py.typed").is_file()


@pytest.mark.parametrize("directory", PUBLISHED.values())
def test_readme_stands_on_its_own(directory: str) -> None:
    """PyPI shows the README without the repository: no relative links, no 'see the repo'."""
    project = _project(directory)
    assert project["readme"] == "README.md"
    text = (ROOT / directory / "README.md").read_text(encoding="utf-8")
    assert len(text) > 1500
    assert "see the repository" not in text.lower()
    for target in _link_targets(text):
        assert target.startswith(("https://", "#")), f"{directory}/README.md links to {target}"


def _link_targets(markdown: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", markdown)


@pytest.mark.parametrize(("name", "directory"), PUBLISHED.items())
def test_one_version_and_a_compatible_core_range(
    name: str, directory: str, core_version: Version
) -> None:
    """All distributions are released together; each requires the core it was built with."""
    project = _project(directory)
    assert Version(project["version"]) == core_version
    requirements = [Requirement(raw) for raw in project["dependencies"]]
    for extra in project.get("optional-dependencies", {}).values():
        requirements += [Requirement(raw) for raw in extra]
    for requirement in requirements:
        if requirement.name in PUBLISHED:
            assert requirement.specifier, f"{name}: {requirement} has no version range"
            assert core_version in requirement.specifier, f"{name}: {requirement}"
            next_minor = Version(f"{core_version.major}.{core_version.minor + 1}")
            assert next_minor not in requirement.specifier, f"{name}: {requirement} is open"
    if name != "agentsessions":
        assert "agentsessions" in {requirement.name for requirement in requirements}


@pytest.mark.parametrize(("name", "directory"), PUBLISHED.items())
def test_version_attribute_comes_from_the_metadata(name: str, directory: str) -> None:
    import importlib
    from importlib.metadata import version

    module = importlib.import_module(name.replace("-", "_"))
    assert module.__version__ == version(name) == _project(directory)["version"]
