"""The pytest plugin: known divergences, the report header, the JSON report, URL mode.

pytest loads this module in every run where the kit is installed (``pytest11`` entry
point), so without ``--session-url`` it only watches: it collects nothing, and it acts
only on test classes that subclass `SessionManagerTests`.

URL mode (``--session-url URL``, ini ``session_url`` or ``AGENTSESSIONS_SESSION_URL``)
adds the kit's own test module, which ships inside this package, to the paths pytest
collects. If no paths were given on the command line it replaces the default ones
(``testpaths`` / the current directory), so ``pytest -p agentsessions_conformance
--session-url URL`` runs the kit alone; paths given explicitly run as well.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from ._state import RECORDER_KEY, BackendInfo, Recorder, recorder_of

# Before anything imports the clause modules: their asserts then show compared values.
pytest.register_assert_rewrite("agentsessions_conformance._suite")

URL_ENV = "AGENTSESSIONS_SESSION_URL"
URL_KEY = pytest.StashKey[str]()
_URL_SUITE = Path(__file__).parent / "_suite" / "session_url_suite.py"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentsessions-conformance", "agentsessions conformance kit")
    group.addoption(
        "--session-url",
        metavar="URL",
        default=None,
        help=f"run the conformance kit against URL (or ini session_url, env {URL_ENV})",
    )
    group.addoption(
        "--conformance-report",
        metavar="PATH",
        default=None,
        help="write a JSON report of every conformance clause's outcome to PATH",
    )
    group.addoption(
        "--conformance-time-limit",
        metavar="SECONDS",
        default=None,
        help="seconds each conformance clause may take before it fails as hung (default 60)",
    )
    group.addoption(
        "--conformance-machine-examples",
        metavar="N",
        type=int,
        default=None,
        help="Hypothesis runs of the kit's state machine clause (default 25)",
    )
    parser.addini("session_url", "backend URL to run the conformance kit against", default="")
    parser.addini("conformance_time_limit", "seconds each conformance clause may take", default="")


def session_url(config: pytest.Config) -> str | None:
    """The URL of URL mode, from the option, the ini key or the environment (in that order)."""
    url = config.getoption("session_url") or config.getini("session_url") or os.environ.get(URL_ENV)
    return str(url) if url else None


def _shareable(url: str) -> str:
    # ``memory://`` gives each manager a private store, yet the kit reads back through a
    # second manager; a per-run named store (``memory://NAME``) is shared in process.
    base, sep, query = url.partition("?")
    scheme, _, rest = base.partition("://")
    if scheme.lower() == "memory" and not rest.strip("/"):
        return f"memory://agentsessions-conformance-{uuid.uuid4().hex[:12]}{sep}{query}"
    return url


def pytest_configure(config: pytest.Config) -> None:
    recorder = Recorder()
    config.stash[RECORDER_KEY] = recorder
    config.pluginmanager.register(recorder, "agentsessions-conformance-recorder")
    url = session_url(config)
    if url is None:
        return
    from agentsessions import SessionError, connect

    url = _shareable(url)
    try:
        manager = connect(url)  # connects lazily: this only checks the URL and the backend
    except SessionError as exc:
        raise pytest.UsageError(f"--session-url: {exc}") from None
    config.stash[URL_KEY] = url
    recorder.url_backend = BackendInfo.of(manager)
    suite = str(_URL_SUITE)
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        config.args.append(suite)
    else:
        config.args[:] = [suite]


def pytest_report_header(config: pytest.Config) -> list[str]:
    recorder = recorder_of(config)
    if recorder is None or recorder.url_backend is None:
        return []
    return [f"agentsessions conformance: {recorder.url_backend.describe()}"]


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    recorder = recorder_of(config)
    if recorder is None:
        return
    checked: set[type] = set()
    for item in items:
        cls = _suite_class(item)
        if cls is None:
            continue
        if cls not in checked:
            checked.add(cls)
            _check_divergence_names(cls)
        known: dict[str, str] = getattr(cls, "known_divergences", {})
        reason = known.get(item.name) or known.get(getattr(item, "originalname", item.name))
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))


def pytest_collection_finish(session: pytest.Session) -> None:
    # After deselection (-k, -m): only the clauses that will run are expected.
    recorder = recorder_of(session.config)
    if recorder is None:
        return
    for item in session.items:
        cls = _suite_class(item)
        if cls is None:
            continue
        function = getattr(item, "function", None)
        doc = (getattr(function, "__doc__", None) or "").strip().splitlines()
        recorder.expect(item, _suite_name(item, cls), doc[0] if doc else "")


def _check_divergence_names(cls: type) -> None:
    # Checked against the class, not the collected items, so ``-k`` does not trip it.
    known: dict[str, str] = getattr(cls, "known_divergences", {})
    tests = {name for name in dir(cls) if name.startswith("test")}
    unknown = sorted(name for name in known if name.partition("[")[0] not in tests)
    if unknown:
        raise pytest.UsageError(
            f"{cls.__qualname__}.known_divergences names tests that do not exist: {unknown}"
        )


def _suite_class(item: pytest.Item) -> type | None:
    cls = getattr(item, "cls", None)
    if cls is None or "_conformance_harness" not in dir(cls):
        return None
    from ._suite import SessionManagerTests

    return cls if issubclass(cls, SessionManagerTests) else None


def _suite_name(item: pytest.Item, cls: type) -> str:
    parent = item.getparent(pytest.Class)
    if parent is not None and not parent.nodeid.startswith("::"):
        return parent.nodeid
    # A module outside the rootdir (URL mode's suite) has no path in its node id.
    return f"{cls.__module__}.{cls.__qualname__}"


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    recorder = recorder_of(config)
    if recorder is None or not recorder.results:
        return
    terminalreporter.section("agentsessions conformance")
    for suite, info in recorder.backends.items():
        terminalreporter.write_line(f"{suite}: {info.describe()}")
    counts = recorder.to_json()["summary"]
    terminalreporter.write_line(
        "clauses: " + ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items()))
    )
    path = config.getoption("conformance_report")
    if path:
        terminalreporter.write_line(f"report written to {path}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    recorder = recorder_of(session.config)
    path = session.config.getoption("conformance_report")
    if recorder is not None and path:
        recorder.write(path)
