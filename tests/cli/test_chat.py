"""``agentsessions chat`` and ``agentsessions demo``, each run as real separate processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentsessions import connect


def agentsessions(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("FORCE_COLOR", None)
    return subprocess.run(
        [sys.executable, "-m", "agentsessions_cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def chat(cwd: Path, *args: str) -> str:
    done = agentsessions(cwd, "chat", *args)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def flat(text: str) -> str:
    """*text* with line wrapping undone, for phrases a narrow console may have split."""
    return " ".join(text.split())


def test_two_processes_on_one_session_share_the_conversation(tmp_path: Path) -> None:
    assert chat(tmp_path, "--session", "s1", "Hi, I'm Ada") == "Nice to meet you, Ada!\n"
    # The default store is a SQLite file in the working directory.
    assert (tmp_path / "agentsessions.db").is_file()
    assert chat(tmp_path, "--session", "s1", "What's", "my", "name?") == "Your name is Ada.\n"
    # Another session knows nothing of it.
    assert chat(tmp_path, "--session", "s2", "What's my name?").startswith(
        "I don't know your name yet"
    )


def test_without_session_runs_are_independent_and_store_nothing(tmp_path: Path) -> None:
    first = chat(tmp_path, "Hi, I'm Ada")
    second = chat(tmp_path, "What's my name?")
    note = "(no --session given: this run is independent and nothing was stored)"
    assert first == f"Nice to meet you, Ada!\n{note}\n"
    assert second.startswith("I don't know your name yet")
    assert second.endswith(note + "\n")
    assert not (tmp_path / "agentsessions.db").exists()


def test_json_output_and_an_approval_across_processes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"

    def turn(message: str) -> dict[str, Any]:
        out = chat(tmp_path, "--url", url, "--session", "n", "--user", "ada", "--json", message)
        result: dict[str, Any] = json.loads(out)
        return result

    waiting = turn("send a note to Bob saying hello")
    assert waiting["status"] == "waiting_for_approval"
    assert waiting["stored"] is True and waiting["user_id"] == "ada"
    [pending] = waiting["pending"]
    assert pending["tool"] == "send_note"
    assert pending["arguments"] == {"to": "Bob", "text": "hello"}
    done = turn("approve")
    assert done["status"] == "completed" and done["pending"] == []
    assert done["reply"] == "Done: I sent a note to Bob: 'hello'."
    assert done["pid"] != waiting["pid"]
    assert done["version"] > waiting["version"]


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    message = flat(done.stderr)
    assert message.startswith("agentsessions: error: ")
    return message


def test_unknown_scheme_is_one_clear_error(tmp_path: Path) -> None:
    done = agentsessions(tmp_path, "chat", "--url", "nosuch://x", "--session", "s", "hi")
    assert done.returncode == 2
    assert "no backend is installed for URL scheme 'nosuch'" in one_line_error(done)


def test_unreachable_server_masks_the_password(tmp_path: Path) -> None:
    url = "redis://:Sup3rSecret@127.0.0.1:1/0"  # port 1: refused at once
    done = agentsessions(tmp_path, "chat", "--url", url, "--session", "s", "hi")
    message = one_line_error(done)
    assert done.returncode == 3
    assert "Sup3rSecret" not in done.stderr
    assert "redis://:***@127.0.0.1:1/0" in message


def test_another_users_session_is_refused(tmp_path: Path) -> None:
    chat(tmp_path, "--session", "mine", "--user", "ada", "Hi, I'm Ada")
    done = agentsessions(tmp_path, "chat", "--session", "mine", "--user", "eve", "Who am I?")
    assert done.returncode == 1
    assert "session 'mine' does not belong to user 'eve'" in one_line_error(done)


def test_demo_refuses_a_store_that_dies_with_each_process(tmp_path: Path) -> None:
    done = agentsessions(tmp_path, "demo", "--url", "memory://demo")
    assert done.returncode == 2
    assert "needs a store that outlives a process" in one_line_error(done)


@pytest.mark.slow
def test_demo_plays_a_conversation_across_processes(tmp_path: Path) -> None:
    done = agentsessions(tmp_path, "demo")
    assert done.returncode == 0, done.stderr
    out = flat(done.stdout)
    assert "\x1b[" not in done.stdout  # no colour codes when not on a terminal
    session_id = re.search(r"Session (demo-[0-9a-f]{8}) ", out)
    assert session_id is not None, out
    pids = re.findall(r"Run \d+ process (\d+),", out)
    assert len(pids) == 7 and len(set(pids)) == 7  # every turn its own process
    assert "you: What's my name? agent: Your name is Ada." in out
    assert "agent: I need your approval to send a note to Bob: 'the cat is fine'." in out
    assert "waiting for approval: send_note" in out
    assert "you: approve agent: Done: I sent a note to Bob: 'the cat is fine'." in out
    assert f"agentsessions chat --session {session_id[1]} --user ada" in out

    async def stored() -> tuple[int, int, dict[str, Any]]:
        async with connect(f"sqlite:///{tmp_path / 'agentsessions.db'}") as manager:
            session = await manager.get(session_id[1])
            assert session is not None
            return len(session.events), session.version, session.state

    import asyncio

    events, version, state = asyncio.run(stored())
    assert f"Stored session {session_id[1]}: {events} events, version {version}" in out
    assert state == {}  # nothing left pending
