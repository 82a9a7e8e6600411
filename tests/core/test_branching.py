"""fork() and rewind() in the core: input checks, the capability gate, encryption, sync."""

from __future__ import annotations

import uuid

import pytest
from agentsessions import (
    Capabilities,
    Event,
    InvalidInputError,
    InvalidSessionIdError,
    MemorySessionManager,
    OperationNotSupportedError,
    SessionDecryptionError,
    SessionSerializationError,
)
from agentsessions.encryption import MARKER
from agentsessions.sync import connect as connect_sync
from encryption_params import make_keyring


class NoBranching(MemorySessionManager):
    """A backend that does not declare branching (as a third-party one may not)."""

    capabilities = Capabilities(persistent=False, shared=True, compaction=True)


def _named() -> str:
    return f"memory://branching-{uuid.uuid4().hex}"


async def test_bad_arguments_are_refused_before_any_io() -> None:
    async with MemorySessionManager(_named()) as manager:
        await manager.create("src")
        with pytest.raises(InvalidSessionIdError):
            await manager.fork("src", "")
        with pytest.raises(InvalidSessionIdError):
            await manager.fork(1, "new")  # type: ignore[arg-type]
        with pytest.raises(InvalidSessionIdError):
            await manager.fork("src", "new", through_event_id=" ")
        with pytest.raises(InvalidInputError, match="new id"):
            await manager.fork("src", "src")
        with pytest.raises(SessionSerializationError):
            await manager.fork("src", "new", state={"x": object()})
        session = await manager.get("src")
        assert session is not None
        with pytest.raises(InvalidInputError):
            await manager.rewind("src", "e")  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="archive"):
            await manager.rewind(session, "e", archive=1)  # type: ignore[arg-type]
        assert await manager.get("new") is None


async def test_a_backend_without_branching_refuses_clearly() -> None:
    async with NoBranching(_named()) as manager:
        session = await manager.create("src")
        session.add_event("user", "hi")
        await manager.save(session)
        with pytest.raises(OperationNotSupportedError, match=r"fork\(\).*branching") as caught:
            await manager.fork("src", "new")
        assert isinstance(caught.value, NotImplementedError)
        with pytest.raises(OperationNotSupportedError):
            await manager.rewind(session, session.events[0].id)
        with pytest.raises(OperationNotSupportedError):
            await manager.list_sessions(forked_from="src")
        assert await manager.get("new") is None


async def test_an_encrypted_fork_is_sealed_for_its_own_id() -> None:
    manager = MemorySessionManager(_named())
    manager.encryption = make_keyring()
    async with manager:
        source = await manager.create("src", "ada", state={"secret": "top secret!"})
        for index in range(4):
            source.add_event("user", f"secret {index}")
        await manager.save(source)
        await manager.fork("src", "fork", through_event_id=source.events[1].id)
        fork = await manager.get("fork")
        assert fork is not None
        assert [e.content for e in fork.events] == ["secret 0", "secret 1"]
        assert fork.state == {"secret": "top secret!"}
        stored = manager._store.spaces[""]["fork"]
        assert all(MARKER in text and "secret" not in text for text in stored.events)
        assert "top secret!" not in stored.record.state
        # What a naive copy of the source's ciphertexts would store does not open as the
        # fork's: the reason an encrypted fork seals again instead of copying.
        stored.events[:] = manager._store.spaces[""]["src"].events[:2]
        with pytest.raises(SessionDecryptionError):
            await manager.get("fork")


async def test_an_encrypted_rewind_keeps_the_rest_readable() -> None:
    manager = MemorySessionManager(_named())
    manager.encryption = make_keyring()
    async with manager:
        session = await manager.create("s")
        for index in range(6):
            session.add_event("user", f"m{index}")
        await manager.save(session)
        tail = await manager.get("s", last_events=3)
        assert tail is not None
        await manager.rewind(tail, tail.events[0].id, archive=True)
        tail.add_event("user", "after")
        await manager.save(tail)
        stored = await manager.get("s")
        assert stored is not None
        assert [e.content for e in stored.events] == ["m0", "m1", "m2", "m3", "after"]
        assert [e.content for e in await manager.archived_events("s")] == ["m4", "m5"]


def test_the_blocking_twin_forks_rewinds_and_lists() -> None:
    with connect_sync(_named()) as manager:
        session = manager.create("src", "ada")
        first = session.add_event("user", "one")
        session.add_event("user", "two")
        manager.save(session)
        summary = manager.fork("src", "fork", through_event_id=first.id, user_id="ada")
        assert summary.event_count == 1 and summary.forked_from is not None
        assert [s.session_id for s in manager.list_sessions(forked_from="src").items] == ["fork"]
        manager.rewind(session, first.id)
        stored = manager.get("src")
        assert stored is not None and [e.content for e in stored.events] == ["one"]


@pytest.mark.parametrize("blank", [" ", "\t", "\u2028", "\x1c"])
@pytest.mark.parametrize("how", ["save", "restore", "compact"])
async def test_a_blank_event_id_is_refused_wherever_an_event_is_written(
    blank: str, how: str
) -> None:
    # One rule for ids: fork and rewind refuse a blank through_event_id, so no write
    # may store an event id they could never name.
    async with MemorySessionManager(_named()) as manager:
        session = await manager.create("s")
        first = session.add_event("user", "kept")
        await manager.save(session)
        event = Event(id=blank, author="user", content="x")
        if how == "save":
            session.events.append(event)
            write = manager.save(session)
        elif how == "restore":
            copy = session.model_copy(update={"session_id": "r"})
            copy.events.append(event)
            write = manager.restore(copy)
        else:
            write = manager.compact(session, first.id, [event])
        with pytest.raises(SessionSerializationError, match=r"\.id.*blank") as caught:
            await write
        assert "events" in str(caught.value), f"the error must name the event: {caught.value}"
        stored = await manager.get("s")
        assert stored is not None
        assert [e.id for e in stored.events] == [first.id], (
            f"{how} with a blank event id must write nothing, found {stored.events}"
        )
        assert await manager.get("r") is None, "a refused restore must store nothing"
        with pytest.raises(InvalidSessionIdError):
            await manager.rewind(stored, blank)
