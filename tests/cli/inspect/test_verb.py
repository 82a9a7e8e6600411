"""``agentsessions inspect`` as an operator runs it: after the README's demo, on loopback."""

from __future__ import annotations

import os
import re
import selectors
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

Run = Callable[..., subprocess.CompletedProcess[str]]


def _first_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The first line the server prints (its address), waiting at most *timeout* seconds."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise AssertionError(f"agentsessions inspect printed nothing in {timeout} s")
    return process.stdout.readline().strip()


class _Servers:
    """The ``agentsessions inspect`` processes one test started, stopped by their handles."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.started: list[subprocess.Popen[str]] = []

    def start(self, *args: str) -> str:
        """Start a server; returns the address it printed."""
        process = subprocess.Popen(
            [sys.executable, "-m", "agentsessions_cli", "inspect", *args],
            cwd=self.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "NO_COLOR": "1"},
        )
        self.started.append(process)
        return _first_line(process, 120)

    def stop_last(self) -> str:
        return _stop(self.started[-1])


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[_Servers]:
    running = _Servers(tmp_path)
    yield running
    for process in running.started:
        if process.returncode is None:  # not stopped by the test already
            _stop(process)


def _stop(process: subprocess.Popen[str]) -> str:
    """Stop a server this test started (by its own handle); returns what it wrote to stderr."""
    if process.poll() is None:
        process.terminate()
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate(timeout=30)
    return err or ""


def test_inspect_after_the_readme_demo(cli: Run, servers: _Servers, tmp_path: Path) -> None:
    demo = cli("demo", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    with socket.socket() as probe:  # a port free a moment ago, for --port
        probe.bind(("127.0.0.1", 0))
        chosen = probe.getsockname()[1]
    address = servers.start("sqlite:///agentsessions.db", "--port", str(chosen))
    match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/\?token=([\w-]{20,})", address)
    assert match is not None, address
    assert int(match.group(1)) == chosen
    with httpx.Client(follow_redirects=True, timeout=120) as client:
        listing = client.get(address)
        assert listing.status_code == 200
        session_id = re.search(r'class="sid" href="[^"]*">(demo-[0-9a-f]+)</a>', listing.text)
        assert session_id is not None, listing.text
        base = address.split("/?")[0]
        page = client.get(f"{base}/session", params={"id": session_id.group(1)}).text
        # The conversation, the approval it waited for and its resumption in a later run.
        assert "Hi, I&#39;m Ada" in page or "Hi, I'm Ada" in page
        for kind in ("tool_call", "approval_requested", "approval", "tool_result"):
            assert f"kind-{kind}" in page
        assert '<li class="item call done"' in page
        assert "Done: I sent a note to Bob" in page
        # Read-only: a write is refused, whatever the form holds.
        refused = client.post(f"{base}/session/delete", data={"id": session_id.group(1)})
        assert refused.status_code == 403
        assert client.get(f"{base}/session", params={"id": session_id.group(1)}).status_code == 200
        # localhost names the same server; another name is refused (DNS rebinding).
        port, token = match.groups()
        local = client.get(f"http://localhost:{port}/", params={"token": token})
        assert local.status_code == 200
        assert session_id.group(1) in local.text
        rebound = client.get(base + "/", headers={"host": f"attacker.example:{port}"})
        assert rebound.status_code == 421
    # Without the token, nothing.
    assert httpx.get(base + "/", timeout=120).status_code == 401
    logged = servers.stop_last()
    assert token not in logged  # no access log: the token stays in the terminal's one line
    # Without --port, any free port; each start has a token of its own.
    other = re.fullmatch(
        r"http://127\.0\.0\.1:(\d+)/\?token=([\w-]{20,})",
        servers.start("sqlite:///agentsessions.db"),
    )
    assert other is not None
    assert other.group(2) != token
    with httpx.Client(follow_redirects=True, timeout=120) as client:
        assert client.get(other.group(0)).status_code == 200
    # The first server's token does not open the second (a fresh client: no cookie).
    stale = httpx.get(other.group(0).replace(other.group(2), token), timeout=120)
    assert stale.status_code == 401


def test_inspect_refuses_a_missing_database_and_a_bad_port(cli: Run, tmp_path: Path) -> None:
    missing = cli("inspect", "sqlite:///nothing-here.db", cwd=tmp_path)
    assert missing.returncode == 2
    assert "no SQLite database" in missing.stderr
    assert not (tmp_path / "nothing-here.db").exists()
    bad = cli("inspect", "memory://", "--port", "70000", cwd=tmp_path)
    assert bad.returncode == 2
    assert "not a port number" in bad.stderr


def test_inspect_without_its_extra_says_what_to_install(tmp_path: Path) -> None:
    # As if the extra were not installed: the import of uvicorn fails.
    code = (
        "import sys; sys.modules['uvicorn'] = None; from agentsessions_cli import main; "
        "sys.exit(main(['inspect', 'memory://']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert done.returncode == 2
    assert "pip install 'agentsessions-cli[inspect]'" in done.stderr
    assert done.stdout == ""  # no address printed: no server started
