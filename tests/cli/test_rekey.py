"""``agentsessions rekey URL``, and every verb reading an encrypted store through the variable."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agentsessions import connect
from agentsessions.encryption import Keyring

CLI = [sys.executable, "-m", "agentsessions_cli"]
OLD = os.urandom(32)
NEW = os.urandom(32)
ROTATED = f"new:{base64.b64encode(NEW).decode()},old:{base64.b64encode(OLD).decode()}"


def _env(keys: str | None) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("AGENTSESSIONS_ENCRYPTION_KEYS", None)
    if keys is not None:
        env["AGENTSESSIONS_ENCRYPTION_KEYS"] = keys
    return env


def _cli(*args: str, keys: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=_env(keys), timeout=300
    )


async def _populate(url: str, count: int) -> list[str]:
    async with connect(url, encryption=Keyring({"old": OLD})) as manager:
        ids = []
        for index in range(count):
            session = await manager.create(f"s{index:03d}", "ada", state={"n": index})
            session.add_event("user", f"secret {index}")
            await manager.save(session)
            ids.append(session.session_id)
        return ids


async def _all_readable_with_new_key_only(url: str, ids: list[str]) -> list[str]:
    async with connect(url, encryption=Keyring({"new": NEW})) as manager:
        contents = []
        for session_id in ids:
            session = await manager.get(session_id)
            assert session is not None
            contents.extend(str(event.content) for event in session.events)
        return contents


def test_rekey_then_resume_reports_and_leaves_nothing_under_the_old_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    ids = asyncio.run(_populate(url, 5))
    done = _cli("rekey", url, keys=ROTATED)
    assert done.returncode == 0, done.stderr
    assert "5 sessions re-encrypted under key 'new', 0 already were" in done.stderr
    assert base64.b64encode(NEW).decode() not in done.stderr + done.stdout
    contents = asyncio.run(_all_readable_with_new_key_only(url, ids))
    assert contents == [f"secret {index}" for index in range(5)]
    again = _cli("rekey", url, keys=ROTATED)
    assert again.returncode == 0, again.stderr
    assert "0 sessions re-encrypted under key 'new', 5 already were" in again.stderr


def test_rekey_while_writers_save_loses_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    ids = asyncio.run(_populate(url, 30))

    async def scenario() -> list[str]:
        process = await asyncio.create_subprocess_exec(
            *CLI,
            "rekey",
            url,
            "--concurrency",
            "4",
            env=_env(ROTATED),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        written: list[str] = []
        during = 0
        keyring = Keyring.from_env(environ={"AGENTSESSIONS_ENCRYPTION_KEYS": ROTATED})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        async with connect(url, encryption=keyring) as writer:
            # Writers keep saving for as long as the rekey runs (bounded), then 20 more.
            turn = 0
            while loop.time() < deadline and (process.returncode is None or turn < during + 20):
                session_id = ids[turn % len(ids)]
                text = f"w{turn}"
                await writer.update(session_id, lambda s, text=text: s.add_event("tool", text))
                written.append(text)
                if process.returncode is None:
                    during = turn + 1
                turn += 1
                await asyncio.sleep(0.001)
        _, stderr = await asyncio.wait_for(process.communicate(), 120)
        assert process.returncode == 0, stderr.decode()
        assert "30 sessions re-encrypted" in stderr.decode()
        assert during >= 20  # saves really raced the rekey
        return written

    written = asyncio.run(scenario())
    contents = asyncio.run(_all_readable_with_new_key_only(url, ids))
    assert sorted(c for c in contents if c.startswith("w")) == sorted(written)
    assert [c for c in contents if c.startswith("secret")] == [f"secret {i}" for i in range(30)]


def test_every_verb_reads_an_encrypted_store_through_the_variable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    asyncio.run(_populate(url, 2))
    shown = _cli("show", url, "s001", "--json", keys=ROTATED)
    assert shown.returncode == 0, shown.stderr
    assert "secret 1" in shown.stdout
    keyless = _cli("show", url, "s001", keys=None)
    assert keyless.returncode == 1
    assert "is encrypted, and this manager has no keyring" in keyless.stderr
    assert len(keyless.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (None, "AGENTSESSIONS_ENCRYPTION_KEYS is not set"),
        ("k1:short", "key 'k1' is not valid base64"),
    ],
)
def test_rekey_without_usable_keys_is_a_usage_error(
    tmp_path: Path, keys: str | None, message: str
) -> None:
    done = _cli("rekey", f"sqlite:///{tmp_path / 'x.db'}", keys=keys)
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
