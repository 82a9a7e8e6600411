"""`agentsessions.encryption.rekey`: every session under the current key, while writers save."""

from __future__ import annotations

import asyncio
import os
import random
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from agentsessions import InvalidOptionError, SessionManager, connect
from agentsessions._records import SaveRequest
from agentsessions.encryption import Keyring, RekeyProgress, rekey

OLD = os.urandom(32)
NEW = os.urandom(32)


def old_ring() -> Keyring:
    return Keyring({"old": OLD})


def rotated_ring() -> Keyring:
    return Keyring({"new": NEW, "old": OLD}, current="new")


async def fill(manager: SessionManager, count: int, events: int = 3) -> list[str]:
    ids = []
    for number in range(count):
        session_id = f"s{number:03d}-{uuid.uuid4().hex[:6]}"
        session = await manager.create(session_id, "ada", state={"n": number})
        for index in range(events):
            session.add_event("user", f"{session_id}/{index}")
        await manager.save(session)
        ids.append(session_id)
    return ids


async def stale_sessions(manager: SessionManager, ids: list[str]) -> list[str]:
    keyring = manager.encryption
    assert keyring is not None
    stale = []
    for session_id in ids:
        loaded = await manager._load(session_id, None, manager.clock.now())
        assert loaded is not None
        if keyring.stale_parts(loaded.record.state, loaded.events):
            stale.append(session_id)
    return stale


async def test_rekey_rewrites_every_session_keeping_content_and_updated_at() -> None:
    url = f"memory://rekey-{uuid.uuid4().hex}"
    ids = await fill(connect(url, encryption=old_ring()), 7)
    manager = connect(url, encryption=rotated_ring())
    before = {session_id: await manager.get(session_id) for session_id in ids}
    assert len(await stale_sessions(manager, ids)) == 7
    seen: list[RekeyProgress] = []
    result = await rekey(manager, page_size=3, progress=seen.append)
    assert result == RekeyProgress(done=7, total=7, rekeyed=7, current=0, vanished=0)
    assert [p.done for p in seen] == list(range(1, 8))
    assert all(p.total == 7 for p in seen)
    assert await stale_sessions(manager, ids) == []
    for session_id, old in before.items():
        new = await manager.get(session_id)
        assert old is not None and new is not None
        assert new.version == old.version + 1
        assert new.updated_at == old.updated_at
        assert new.state == old.state
        assert [e.model_dump() for e in new.events] == [e.model_dump() for e in old.events]
    # Nothing is left under the old key: a keyring without it reads everything.
    only_new = connect(url, encryption=Keyring({"new": NEW}))
    assert all([await only_new.get(session_id) for session_id in ids])
    again = await rekey(manager)
    assert (again.rekeyed, again.current) == (0, 7)


async def test_an_interrupted_rekey_resumes_where_it_stopped() -> None:
    url = f"memory://rekey-{uuid.uuid4().hex}"
    ids = await fill(connect(url, encryption=old_ring()), 9)
    manager = connect(url, encryption=rotated_ring())

    class Interrupted(Exception):
        pass

    def interrupt(progress: RekeyProgress) -> None:
        if progress.done == 3:
            raise Interrupted

    with pytest.raises(Interrupted):
        await rekey(manager, page_size=2, concurrency=1, progress=interrupt)
    left = await stale_sessions(manager, ids)
    assert 0 < len(left) <= 6
    resumed = await rekey(manager)
    assert resumed.rekeyed == len(left)
    assert resumed.current == 9 - len(left)
    assert await stale_sessions(manager, ids) == []


async def test_rekey_encrypts_a_store_written_without_encryption() -> None:
    url = f"memory://rekey-{uuid.uuid4().hex}"
    ids = await fill(connect(url), 4)
    manager = connect(url, encryption=Keyring({"k1": NEW}, accept_plaintext=True))
    result = await rekey(manager)
    assert result.rekeyed == 4
    strict = connect(url, encryption=Keyring({"k1": NEW}))
    for session_id in ids:
        session = await strict.get(session_id)
        assert session is not None
        assert session.events[2].content == f"{session_id}/2"


async def test_rekey_needs_a_keyring() -> None:
    with pytest.raises(InvalidOptionError, match="rekey needs a manager with encryption"):
        await rekey(connect("memory://"))


async def test_a_save_racing_the_rekey_wins_and_the_rekey_retries(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'race.db'}"
    async with connect(url, encryption=old_ring()) as first:
        [session_id] = await fill(first, 1)
    async with (
        connect(url, encryption=rotated_ring()) as rekeyer,
        connect(url, encryption=rotated_ring()) as writer,
    ):
        calls = 0
        original = rekeyer._save

        async def save_after_a_writer(request: SaveRequest, now: datetime) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:  # between the rekey's read and its write, a writer saves
                await writer.update(session_id, lambda s: s.add_event("user", "racing"))
            await original(request, now)

        rekeyer._save = save_after_a_writer  # type: ignore[method-assign]
        result = await rekey(rekeyer)
        assert result.rekeyed == 1
        assert calls == 2  # the first write conflicted and wrote nothing
        session = await writer.get(session_id)
        assert session is not None
        assert [e.content for e in session.events][-2:] == [f"{session_id}/2", "racing"]
        assert session.version == 4  # create+save, the writer's save, the rekey
        assert await stale_sessions(rekeyer, [session_id]) == []


async def test_rekey_under_concurrent_writers_loses_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    async with connect(url, encryption=old_ring()) as first:
        ids = await fill(first, 12, events=2)
    expected = {session_id: [f"{session_id}/0", f"{session_id}/1"] for session_id in ids}
    async with (
        connect(url, encryption=rotated_ring()) as rekeyer,
        connect(url, encryption=rotated_ring()) as writers,
    ):

        async def writer(number: int) -> None:
            rng = random.Random(number)
            for turn in range(15):
                session_id = rng.choice(ids)
                text = f"w{number}-{turn}"
                await writers.update(session_id, lambda s, text=text: s.add_event("tool", text))
                expected[session_id].append(text)

        results = await asyncio.wait_for(
            asyncio.gather(rekey(rekeyer, page_size=5), *(writer(n) for n in range(4))), 120
        )
        assert results[0].done == 12
        for session_id in ids:
            session = await rekeyer.get(session_id)
            assert session is not None
            contents = [event.content for event in session.events]
            # Each writer's events in its own order, none lost, none doubled.
            assert sorted(contents) == sorted(expected[session_id])
            for number in range(4):
                mine = [c for c in contents if c.startswith(f"w{number}-")]
                assert mine == [c for c in expected[session_id] if c.startswith(f"w{number}-")]
        # Writers write under the new key, the rekey did the rest: nothing under "old".
        assert await stale_sessions(rekeyer, ids) == []
