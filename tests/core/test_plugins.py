"""Third-party plugins cannot break other schemes, nor take ours over silently.

Each test installs fake distributions (a ``*.dist-info`` directory with its entry
points, and the plugin module next to it) in a temporary directory on ``sys.path``,
as pip would have installed them, and uses a fresh registry that sees them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from agentsessions import (
    BackendConflictError,
    BackendPluginError,
    MemorySessionManager,
    _registry,
    connect,
)

_GOOD_PLUGIN = """
from agentsessions.backend import BackendSpec, hookimpl

@hookimpl
def agentsessions_backends():
    return [BackendSpec(schemes={schemes!r}, manager="{module}:Manager")]

from agentsessions import MemorySessionManager

class Manager(MemorySessionManager):
    pass
"""


def install(
    site: Path,
    dist: str,
    entry_points: dict[str, str],
    modules: dict[str, str],
    version: str = "0.1",
) -> None:
    """A distribution as pip leaves it: metadata, entry points, and its modules."""
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = "\n".join(f"{name} = {value}" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[agentsessions.backends]\n{lines}\n")
    for module, source in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source))


def good_plugin(module: str, *schemes: str) -> dict[str, str]:
    return {module: _GOOD_PLUGIN.format(schemes=tuple(schemes), module=module)}


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on sys.path for fake distributions, and a registry that sees them."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(_registry, "_registry", _registry._Registry())
    monkeypatch.delenv(_registry.OVERRIDE_ENV, raising=False)
    return root


def test_a_broken_plugin_breaks_only_its_own_scheme(site: Path, tmp_path: Path) -> None:
    install(
        site,
        "acme-broken",
        {"acme": "acme_broken_plugin"},
        {"acme_broken_plugin": "import a_module_that_is_not_installed\n"},
    )
    assert isinstance(connect("memory://"), MemorySessionManager)
    connect(f"sqlite:///{tmp_path / 'still.db'}")
    with pytest.raises(BackendPluginError) as info:
        connect("acme://x")
    message = str(info.value)
    assert "acme-broken 0.1" in message
    assert "ModuleNotFoundError" in message and "a_module_that_is_not_installed" in message
    assert "Reinstall or upgrade acme-broken, or uninstall it" in message
    assert info.value.scheme == "acme"


def test_schemes_are_loaded_lazily(site: Path) -> None:
    install(
        site,
        "acme-broken",
        {"acme": "acme_lazy_plugin"},
        {"acme_lazy_plugin": "raise RuntimeError('imported')\n"},
    )
    connect("memory://")
    assert "acme_lazy_plugin" not in sys.modules, "connect(memory://) loaded another plugin"


def test_a_plugin_failing_hook_validation_is_a_clear_error(site: Path) -> None:
    install(
        site,
        "acme-invalid",
        {"invalid": "acme_invalid_plugin"},
        {
            "acme_invalid_plugin": """
            from agentsessions.backend import hookimpl

            @hookimpl
            def agentsessions_backends(unexpected_argument):
                return []
            """
        },
    )
    with pytest.raises(BackendPluginError, match=r"acme-invalid 0\.1.*PluginValidationError"):
        connect("invalid://x")
    assert isinstance(connect("memory://"), MemorySessionManager)


def test_a_plugin_that_does_not_provide_its_scheme_is_named(site: Path) -> None:
    install(site, "acme-ghost", {"ghost": "acme_ghost"}, good_plugin("acme_ghost", "other"))
    with pytest.raises(BackendPluginError, match=r"acme-ghost 0\.1.*no BackendSpec for 'ghost'"):
        connect("ghost://x")


def test_two_third_parties_claiming_a_scheme_conflict_until_one_is_chosen(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(site, "acme-one", {"shared": "acme_one"}, good_plugin("acme_one", "shared"))
    install(site, "acme-two", {"shared": "acme_two"}, good_plugin("acme_two", "shared"))
    with pytest.raises(BackendConflictError) as info:
        connect("shared://x")
    message = str(info.value)
    assert "acme-one 0.1" in message and "acme-two 0.1" in message
    assert "Uninstall all but one" in message and _registry.OVERRIDE_ENV in message
    assert isinstance(connect("memory://"), MemorySessionManager)

    monkeypatch.setenv(_registry.OVERRIDE_ENV, "shared=acme-two")
    monkeypatch.setattr(_registry, "_registry", _registry._Registry())
    assert type(connect("shared://x")).__module__ == "acme_two"


def test_our_scheme_is_not_taken_over_without_the_override(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(site, "acme-memory", {"memory": "acme_memory"}, good_plugin("acme_memory", "memory"))
    with pytest.warns(RuntimeWarning, match="also declared by acme-memory 0.1; it is ignored"):
        manager = connect("memory://")
    assert type(manager) is MemorySessionManager
    problems = _registry.backend_problems()
    assert [(p.scheme, p.usable) for p in problems] == [("memory", True)]
    assert f"{_registry.OVERRIDE_ENV}=memory=acme-memory" in str(problems[0].error)

    monkeypatch.setenv(_registry.OVERRIDE_ENV, "memory=acme-memory")
    monkeypatch.setattr(_registry, "_registry", _registry._Registry())
    assert type(connect("memory://")).__module__ == "acme_memory"
    assert _registry.installed_backends()["memory"].distribution == "acme-memory"


def test_the_override_must_name_a_distribution_that_declares_the_scheme(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_registry.OVERRIDE_ENV, "memory=nobody")
    with pytest.raises(BackendConflictError, match=r"chooses 'nobody'.*declared only by"):
        connect("memory://")


def test_backends_lists_every_scheme_and_every_problem_without_crashing(site: Path) -> None:
    install(
        site,
        "acme-broken",
        {"acme": "acme_cli_broken"},
        {"acme_cli_broken": "raise ImportError('the plugin module is broken')\n"},
    )
    install(site, "acme-redis", {"unix": "acme_unix"}, good_plugin("acme_unix", "unix"))
    env = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "250", "NO_COLOR": "1"}
    env.pop(_registry.OVERRIDE_ENV, None)
    command = [sys.executable, "-W", "ignore", "-m", "agentsessions_cli", "backends"]
    text = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "Traceback" not in text.stderr + text.stdout
    assert "acme-broken 0.1" in text.stdout and "the plugin module is broken" in text.stdout
    assert "acme-redis 0.1" in text.stdout
    raw = subprocess.run([*command, "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert raw.returncode == 0, raw.stderr
    data = json.loads(raw.stdout)
    schemes = {row["scheme"]: row for row in data["backends"]}
    assert schemes["sqlite"]["distribution"] == "agentsessions-sqlite"
    assert schemes["sqlite"]["version"]
    assert schemes["unix"]["distribution"] == "agentsessions-redis"
    problems = {row["scheme"]: row for row in data["problems"]}
    assert problems["acme"]["distributions"] == ["acme-broken 0.1"]
    assert problems["acme"]["error"].startswith("BackendPluginError: ")
    assert problems["unix"]["usable"] is True
    assert "acme-redis 0.1" in problems["unix"]["distributions"]
