"""Test automation: ``nox`` runs lint, typecheck, the project's tests and the kit per backend,
the distributions as built, the lowest dependency versions allowed, and the docs: the
session ``all`` runs each of them as its own ``nox -s NAME`` in two parallel lanes
(``AGENTSESSIONS_NOX_JOBS`` sets how many), and ``nox -s NAME`` runs one alone.

Each conformance session installs only core, the kit and ONE backend, so a backend
that forgot to declare a dependency fails there instead of passing by accident.
Servers are found by the test-server tooling (tools/testservers, installed in every
session that runs tests): set AGENTSESSIONS_REQUIRE_SERVERS=1 (CI does) to turn a
missing server into a failure instead of a skip.

Sessions run on the Python running nox. ``AGENTSESSIONS_NOX_PYTHON=3.12`` (or a comma
list, or ``all`` for 3.10 to 3.14) runs the tests and the kit on those interpreters
instead; an interpreter that is not installed is skipped, never downloaded (pass
``--error-on-missing-interpreters`` to make that a failure, as the GitHub workflow does).
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nox
import nox.virtualenv

nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = False
nox.options.download_python = "never"
# Plain `nox` runs `all`, which runs every check below in parallel lanes (see `all`).
nox.options.sessions = ["all"]

# What `all` runs, longest first, so the long sessions start at once and the short ones fill
# the gaps; `nox -s NAME` still runs any one of them on its own.
CHECKS = (
    "tests",
    "conformance(backend='postgres')",
    "conformance(backend='mongo')",
    "conformance(backend='mysql')",
    "lowest",
    "faults",
    "conformance(backend='redis')",
    "ha",
    "conformance(backend='sqlite')",
    "typecheck",
    "dist",
    "conformance(backend='memory')",
    "openai_agents",
    "docs",
    "lint",
)

SUPPORTED_PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")


def _pythons(raw: str) -> list[str] | None:
    if not raw:
        return None  # the Python running nox
    if raw == "all":
        return list(SUPPORTED_PYTHONS)
    return [version.strip() for version in raw.split(",") if version.strip()]


PYTHON = _pythons(os.environ.get("AGENTSESSIONS_NOX_PYTHON", ""))
BACKENDS = ("memory", "sqlite", "postgres", "redis", "mongo", "mysql")
# Finds or starts the database servers; every session that runs tests needs it.
TESTSERVERS = "tools/testservers"
# Core with its framework extras and OpenTelemetry, and the command line (cli/, which the
# cli extra requires: listed so that it comes from this tree, not from an index): type-
# checked and tested against them. The bench package brings the `bench` verb and its
# smoke test. The cli's inspect extra brings the web inspector (`agentsessions inspect`).
MEMBERS = (
    "core[cli,openai-agents,adk,langgraph,otel,encryption]",
    "cli[inspect]",
    "conformance",
    *(f"backends/{name}" for name in BACKENDS[1:]),
    "bench",
    TESTSERVERS,
)
TEST_DEPS = ("pytest>=8.3", "pytest-asyncio>=1.0", "hypothesis>=6.100")
# The instrumentation tests read spans and metrics back from the SDK's in-memory exporters.
OTEL_TEST_DEPS = ("opentelemetry-sdk>=1.30",)
# LangGraph's own conformance suite for checkpointers, which tests/integrations runs.
LANGGRAPH_TEST_DEPS = ("langgraph-checkpoint-conformance>=0.0.2",)
# The inspector's tests: Starlette's TestClient needs httpx; the browser tests drive the
# system's chromium through its chromedriver with Selenium (.ci/run installs both).
INSPECT_TEST_DEPS = ("httpx>=0.27", "selenium>=4.20")
# The doctor's report is validated against its committed JSON schema.
DOCTOR_TEST_DEPS = ("jsonschema>=4.20",)


def _editable(*paths: str) -> list[str]:
    args: list[str] = []
    for path in paths:
        args += ["-e", path]
    return args


def _selection(check: str) -> list[str]:
    """nox arguments selecting *check*, whatever interpreters AGENTSESSIONS_NOX_PYTHON names
    (``conformance(backend='x')`` is then ``conformance-3.12(backend='x')``)."""
    name, _, param = check.partition("(")
    if not param:
        return ["--session", name]
    value = param.partition("=")[2].rstrip(")").strip("'")
    return ["--session", name, "--keywords", value]


def _lanes() -> int:
    raw = os.environ.get("AGENTSESSIONS_NOX_JOBS", "").strip()
    if not raw:
        return 2
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"AGENTSESSIONS_NOX_JOBS must be a whole number >= 1, not {raw!r}")
    return int(raw)


@nox.session(name="all", python=False)
def all_checks(session: nox.Session) -> None:
    """Every check in ``CHECKS``, in parallel lanes: what plain ``nox`` and CI run.

    Each check is its own ``nox -s NAME`` process (its own virtualenv, as when run alone),
    with its output kept in ``.nox/_logs/NAME.log`` and printed whole when it ends, so the
    lanes never interleave. Most of the time of these sessions is spent waiting on servers,
    deadlines and installs, so two lanes finish well before one would on two cores.
    ``AGENTSESSIONS_NOX_JOBS`` sets the number of lanes (1 runs them one after another);
    ``nox -s all -- NAME ...`` runs only those. Fails if any check fails, after all ended.
    """
    names = list(session.posargs) or list(CHECKS)
    known = {check.split("(")[0] for check in CHECKS}
    unknown = [name for name in names if name.split("(")[0] not in known]
    if unknown:
        session.error(f"unknown sessions {unknown}; the checks are {list(CHECKS)}")
    logs = Path(".nox") / "_logs"
    logs.mkdir(parents=True, exist_ok=True)
    printing = threading.Lock()
    results: dict[str, tuple[int, float]] = {}

    def check(name: str) -> None:
        log = logs / (name.replace("'", "").replace("(", "-").replace(")", "") + ".log")
        started = time.monotonic()
        with printing:
            print(f"== {name}: started", flush=True)
        with log.open("w", encoding="utf-8") as out:
            code = subprocess.call(
                [sys.executable, "-m", "nox", *_selection(name)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        took = time.monotonic() - started
        results[name] = (code, took)
        with printing:
            status = "ok" if code == 0 else f"FAILED (exit {code})"
            print(f"\n== {name}: {status} in {took:.0f} s; its output:", flush=True)
            sys.stdout.write(log.read_text(encoding="utf-8", errors="replace"))
            sys.stdout.flush()

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=_lanes()) as pool:
        list(pool.map(check, names))
    print(f"\n== all: {len(names)} checks in {time.monotonic() - started:.0f} s", flush=True)
    for name in names:
        code, took = results[name]
        print(f"   {'ok' if code == 0 else 'FAILED':6} {took:6.0f} s  {name}", flush=True)
    failed = [name for name in names if results[name][0] != 0]
    if failed:
        session.error(f"failed: {', '.join(failed)}")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and format check on the whole tree."""
    session.install("ruff>=0.8")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on core, the kit, the backends, the bench and the tools (pyproject.toml)."""
    # The stubs are backends/postgres's dev group, which `uv sync` installs and nox does not.
    session.install("mypy>=1.13", "asyncpg-stubs>=0.30", *TEST_DEPS, *_editable(*MEMBERS))
    session.run("mypy")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The project's own tests: core, kit self-tests, runtime, CLI, tools, cross-backend.

    tests/backends (memory included) is run per backend by `conformance`.
    """
    session.install(
        *TEST_DEPS,
        *OTEL_TEST_DEPS,
        *LANGGRAPH_TEST_DEPS,
        *INSPECT_TEST_DEPS,
        *DOCTOR_TEST_DEPS,
        "redis>=5.3",
        *_editable(*MEMBERS),
    )
    # tests/core/test_install.py builds a fresh venv with the uv nox itself uses.
    session.env.setdefault("AGENTSESSIONS_UV", shutil.which("uv") or nox.virtualenv.UV)
    session.run(
        "pytest",
        "tests",
        "--ignore=tests/backends",
        "--ignore=tests/faults",
        "--ignore=tests/ha",
        *session.posargs,
    )


@nox.session(python=PYTHON)
@nox.parametrize("backend", BACKENDS)
def conformance(session: nox.Session, backend: str) -> None:
    """The conformance kit and the backend's own tests, with only that backend installed.

    The kit runs twice on each backend, the second time with encryption on (core's
    ``encryption`` extra), and the backend's own tests check its storage holds no plaintext.
    """
    members = ["core[encryption]", "conformance", TESTSERVERS]
    if backend != "memory":
        members.append(f"backends/{backend}")
    session.install(*TEST_DEPS, *_editable(*members))
    session.run("pytest", f"tests/backends/{backend}", *session.posargs)


@nox.session(python=PYTHON)
def faults(session: nox.Session) -> None:
    """Fault injection against private servers: deadlines, restarts, freezes, kill -9.

    Every backend at once, on servers this run starts and stops itself (never the
    machine's own); prints a summary of calls, errors by type, lost and doubled saves
    and recovery times. ``-s`` shows it with pytest's output.
    """
    session.install(*TEST_DEPS, *_editable(*MEMBERS))
    session.run("pytest", "tests/faults", "-rA", *session.posargs)


@nox.session(python=PYTHON)
def ha(session: nox.Session) -> None:
    """Failover drills: a primary killed under load, on deployments this run starts.

    Redis: a primary, a replica and three Sentinels; PostgreSQL: a primary and a
    streaming standby. Prints, per drill, writes attempted and acknowledged,
    acknowledged writes lost, time until writes succeed again and the error types seen.
    """
    members = ["core", "conformance", *(f"backends/{name}" for name in BACKENDS[1:]), TESTSERVERS]
    session.install(*TEST_DEPS, *_editable(*members))
    session.run("pytest", "tests/ha", "-rA", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks against the raw drivers and the OpenAI SDK / Google ADK stores (~30 min).

    Not a default session: it installs the peers into its own environment, and the
    figures mean something only on a quiet machine. ``nox -s bench -- --quick``.
    """
    session.install(
        *_editable(
            "core",
            *(f"backends/{name}" for name in BACKENDS[1:]),
            "bench[peers,plot,profile,otel]",
            TESTSERVERS,
        )
    )
    session.run("python", "-m", "agentsessions_bench", *session.posargs)


# The distributions published from this repository (tests/test_packaging.py checks their
# sources against this list); other workspace members (test tooling) are not published.
DISTRIBUTIONS = (
    "agentsessions",
    "agentsessions-cli",
    "agentsessions-conformance",
    "agentsessions-sqlite",
    "agentsessions-postgres",
    "agentsessions-redis",
    "agentsessions-mongo",
    "agentsessions-mysql",
)


def _normalized(name: str) -> str:
    return name.replace("-", "_")


def _check_license(archive: Path, names: list[str], read: Callable[[str], bytes]) -> None:
    expected = Path("LICENSE").read_bytes()
    licenses = [name for name in names if name.rsplit("/", 1)[-1] == "LICENSE"]
    if not licenses:
        raise RuntimeError(f"{archive.name} holds no LICENSE file")
    for name in licenses:
        if read(name) != expected:
            raise RuntimeError(f"{archive.name}: {name} differs from the repository's LICENSE")


def _console_scripts(names: list[str], read: Callable[[str], bytes]) -> set[str]:
    found = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    if not found:
        return set()
    parser = configparser.ConfigParser()
    parser.read_string(read(found[0]).decode("utf-8"))
    return set(parser["console_scripts"]) if parser.has_section("console_scripts") else set()


def check_built(out: Path) -> tuple[list[Path], list[Path]]:
    """Check what `uv build` made in *out*: one sdist and one wheel per distribution, each
    holding the LICENSE (the wheel in its ``.dist-info/licenses``), and the `agentsessions`
    script declared by the command line's wheel alone (the library's never installs it).
    Returns (wheels, sdists).
    """
    wheels = sorted(out.glob("*.whl"))
    sdists = sorted(out.glob("*.tar.gz"))
    expected = sorted(_normalized(name) for name in DISTRIBUTIONS)
    for kind, files in (("wheel", wheels), ("sdist", sdists)):
        built = sorted(path.name.split("-")[0] for path in files)
        if built != expected:
            raise RuntimeError(f"{kind}s built: {built}; expected exactly {expected}")
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            _check_license(wheel, names, archive.read)
            if not any(".dist-info/licenses/LICENSE" in name for name in names):
                raise RuntimeError(f"{wheel.name}: LICENSE is not in .dist-info/licenses")
            scripts = _console_scripts(names, archive.read)
            expected_scripts = (
                {"agentsessions"} if wheel.name.startswith("agentsessions_cli-") else set()
            )
            if scripts != expected_scripts:
                raise RuntimeError(
                    f"{wheel.name}: console scripts {sorted(scripts)}, "
                    f"expected {sorted(expected_scripts)}"
                )
    for sdist in sdists:
        with tarfile.open(sdist) as archive:
            members = archive.getnames()

            def read(name: str, archive: tarfile.TarFile = archive) -> bytes:
                handle = archive.extractfile(name)
                assert handle is not None
                return handle.read()

            _check_license(sdist, members, read)
            top = members[0].split("/")[0]
            if f"{top}/LICENSE" not in members:
                raise RuntimeError(f"{sdist.name}: LICENSE is not at the top of the sdist")
    return wheels, sdists


@nox.session(reuse_venv=False)
def dist(session: nox.Session) -> None:
    """Build every sdist and wheel, check them, and run the kit on the wheels alone.

    ``twine check --strict`` renders each README as PyPI would; every archive must hold
    the LICENSE; then the wheels (and only they: no source tree on the path) go into a
    fresh virtualenv, where the conformance kit runs against memory and SQLite. The
    release workflow runs this session before it publishes. ``-- --keep DIR`` copies
    the archives to DIR.
    """
    session.install("twine>=6.1")
    tmp = Path(session.create_tmp()).resolve()
    out = tmp / "dist"
    shutil.rmtree(out, ignore_errors=True)
    # One by one: the workspace also holds unpublished members (bench, tools/testservers).
    for name in DISTRIBUTIONS:
        session.run(
            "uv", "build", "--package", name, "--quiet", "--out-dir", str(out), external=True
        )
    wheels, sdists = check_built(out)
    session.run("twine", "check", "--strict", *map(str, wheels + sdists))

    venv = tmp / "wheels-venv"
    shutil.rmtree(venv, ignore_errors=True)
    session.run(
        "uv",
        "venv",
        "--quiet",
        "--python",
        str(Path(session.bin) / "python"),
        str(venv),
        external=True,
    )
    python = str(venv / "bin" / "python")
    session.run(
        "uv", "pip", "install", "--quiet", "--python", python, *map(str, wheels), external=True
    )
    work = tmp / "kit"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    # Its own ini file, so that pytest takes this directory as its rootdir and the
    # repository's configuration (pythonpath, conftest files) does not apply.
    (work / "pytest.ini").write_text("[pytest]\n")
    with session.chdir(work):
        # Imported from the wheels, not from this checkout.
        session.run(python, "-c", _FROM_WHEELS, str(venv), external=True)
        # The command from the cli wheel, with the kit's verb from the kit's wheel.
        session.run(str(venv / "bin" / "agentsessions"), "conformance", "--help", external=True)
        for url in ("memory://", f"sqlite:///{work / 'kit.db'}"):
            session.run(
                python,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "--session-url",
                url,
                external=True,
            )
    if "--keep" in session.posargs:
        keep = Path(session.posargs[session.posargs.index("--keep") + 1])
        keep.mkdir(parents=True, exist_ok=True)
        for path in wheels + sdists:
            shutil.copy2(path, keep)


_FROM_WHEELS = """
import sys, importlib
venv = sys.argv[1]
for name in ("agentsessions", "agentsessions_cli", "agentsessions_conformance",
             "agentsessions_sqlite", "agentsessions_postgres", "agentsessions_redis",
             "agentsessions_mongo", "agentsessions_mysql"):
    path = importlib.import_module(name).__file__
    assert path.startswith(venv), f"{name} imported from {path}, not from the wheel"
"""


@nox.session(python=PYTHON, reuse_venv=False)
def lowest(session: nox.Session) -> None:
    """The tests and the kit with every dependency at the LOWEST version the metadata allows.

    uv's ``--resolution lowest-direct`` takes each distribution's floors (pydantic,
    pluggy, aiosqlite, asyncpg, redis, pymongo, pytest, ...), so a floor that is declared
    but broken fails here instead of on a user's machine. Twice: without the framework
    extras (their own floors would lift pydantic's), then the adapters' tests with them.

    By default it runs what touches the dependencies' APIs, within a few minutes: core's
    tests, every backend's own tests, and the kit against memory and SQLite (the server
    backends' kit runs take most of the time, and their drivers' calls are the ones their
    own tests make); slow-marked tests and the 10,000-event clause are left out.
    ``nox -s lowest -- tests`` runs pytest on everything instead.
    """
    lowest = ("--resolution", "lowest-direct")
    deps = (*TEST_DEPS, *OTEL_TEST_DEPS, *DOCTOR_TEST_DEPS, "redis>=5.3")
    # The cli, otel and encryption extras are light and their tests are among those run here.
    members = [("core[cli,otel,encryption]" if m.startswith("core[") else m) for m in MEMBERS]
    session.install(*lowest, *deps, *_editable(*members))
    session.run("uv", "pip", "list", external=True)
    quick = ["-m", "not slow", "-k", "not ten_thousand"]
    servers_kit = [
        f"--ignore=tests/backends/{name}/test_{name}_conformance.py" for name in BACKENDS[2:]
    ]
    args = session.posargs or [*quick, *servers_kit, "tests/core", "tests/backends"]
    session.run("pytest", *args, "--ignore=tests/integrations")
    session.install(*lowest, *deps, *LANGGRAPH_TEST_DEPS, *_editable(*MEMBERS))
    session.run("uv", "pip", "list", external=True)
    session.run("pytest", *([] if session.posargs else quick), "tests/integrations")


# The Agents SDK adapter implements the SDK's private compaction hooks, whose arguments
# change between releases without notice (0.24 added prune_prefix): its tests run at the
# floor core declares and at the newest release, so such a change is seen the day it ships.
OPENAI_AGENTS_TESTS = tuple(
    f"tests/integrations/test_openai_agents{name}.py"
    for name in ("", "_branches", "_compaction", "_compaction_flows", "_loops")
)


def _openai_agents_floor() -> str:
    """The ``openai-agents>=X`` floor of core's extra, read from core/pyproject.toml."""
    for line in Path("core/pyproject.toml").read_text().splitlines():
        if line.startswith("openai-agents = "):
            floor = line.partition('"openai-agents>=')[2].partition('"')[0]
            if floor:
                return floor
    raise RuntimeError("core/pyproject.toml declares no openai-agents>= floor")


@nox.session(python=PYTHON)
@nox.parametrize("sdk", ["floor", "newest"])
def openai_agents(session: nox.Session, sdk: str) -> None:
    """The Agents SDK adapter's tests at the SDK's declared floor and its newest release.

    On the memory backend only, about a minute each: what the SDK passes its hooks does
    not depend on the backend, and every backend runs these tests in `tests` (newest
    versions) and `lowest` (floors). ``nox -s openai_agents -- -k postgres`` picks another.
    """
    session.install(*TEST_DEPS, *_editable("core[openai-agents,encryption]", TESTSERVERS))
    if sdk == "floor":
        session.install(f"openai-agents=={_openai_agents_floor()}")
    else:
        # --refresh-package: a release published today, not the one uv's cache knew.
        session.install("--upgrade", "--refresh-package", "openai-agents", "openai-agents")
    session.run("python", "-c", "import agents; print('openai-agents', agents.__version__)")
    selection = session.posargs or ["-k", "memory"]
    session.run("pytest", "-q", *OPENAI_AGENTS_TESTS, *selection)


DOCS_DEPS = ("mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.29")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site (mkdocs.yml) with ``--strict``: any warning fails.

    The runtime API page is generated from the docstrings of `agentsessions.runtime`,
    read from the source tree; the backend reference is committed Markdown
    (docs/backend-reference.md, regenerated by ``python -m agentsessions._reference``).
    ``nox -s docs -- serve`` serves it on 127.0.0.1:8000 instead.
    """
    session.install(*DOCS_DEPS)
    session.env["NO_MKDOCS_2_WARNING"] = "1"  # Material's banner about its successor
    site = Path(session.create_tmp()) / "site"
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", "--strict", "--dev-addr", "127.0.0.1:8000")
    else:
        session.run("mkdocs", "build", "--strict", "--site-dir", str(site))
