"""Test automation: ``nox`` runs lint, typecheck, the project's tests and the kit per backend.

Each conformance session installs only core, the kit and ONE backend, so a backend
that forgot to declare a dependency fails there instead of passing by accident.
Servers are found by the test-server tooling (tools/testservers, installed in every
session that runs tests): set AGENTSESSIONS_REQUIRE_SERVERS=1 (CI does) to turn a
missing server into a failure instead of a skip.
"""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["lint", "typecheck", "tests", "conformance"]

PYTHON = os.environ.get("AGENTSESSIONS_NOX_PYTHON") or None  # None: the Python running nox
BACKENDS = ("memory", "sqlite", "postgres", "redis", "mongo")
# Finds or starts the database servers; every session that runs tests needs it.
TESTSERVERS = "tools/testservers"
# Core with the command line and its framework extras: the adapters are type-checked and
# tested against them. The bench package brings the `bench` verb and its smoke test.
MEMBERS = (
    "core[cli,openai-agents,adk]",
    "conformance",
    *(f"backends/{name}" for name in BACKENDS[1:]),
    "bench",
    TESTSERVERS,
)
TEST_DEPS = ("pytest>=8.3", "pytest-asyncio>=1.0", "hypothesis>=6.100")


def _editable(*paths: str) -> list[str]:
    args: list[str] = []
    for path in paths:
        args += ["-e", path]
    return args


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and format check on the whole tree."""
    session.install("ruff>=0.8")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on core and the kit (configured in pyproject.toml)."""
    session.install("mypy>=1.13", *TEST_DEPS, *_editable(*MEMBERS))
    session.run("mypy")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The project's own tests: core, kit self-tests, runtime, CLI, tools, cross-backend.

    tests/backends (memory included) is run per backend by `conformance`.
    """
    session.install(*TEST_DEPS, "redis>=5.2", *_editable(*MEMBERS))
    session.run("pytest", "tests", "--ignore=tests/backends", *session.posargs)


@nox.session(python=PYTHON)
@nox.parametrize("backend", BACKENDS)
def conformance(session: nox.Session, backend: str) -> None:
    """The conformance kit and the backend's own tests, with only that backend installed."""
    members = ["core", "conformance", TESTSERVERS]
    if backend != "memory":
        members.append(f"backends/{backend}")
    session.install(*TEST_DEPS, *_editable(*members))
    session.run("pytest", f"tests/backends/{backend}", *session.posargs)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks against the raw drivers and the OpenAI SDK / Google ADK stores (~11 min).

    Not a default session: it installs the peers into its own environment, and the
    figures mean something only on a quiet machine. ``nox -s bench -- --quick``.
    """
    session.install(
        *_editable(
            "core",
            *(f"backends/{name}" for name in BACKENDS[1:]),
            "bench[peers,plot,profile]",
            TESTSERVERS,
        )
    )
    session.run("python", "-m", "agentsessions_bench", *session.posargs)
