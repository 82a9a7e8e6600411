"""Encryption at rest (agentsessions.encryption) on the reference backend, storage in view.

What is stored is read straight from the memory backend's store, so these tests see the
ciphertexts a backend is handed, tamper with them and move them around.
"""

from __future__ import annotations

import asyncio
import base64
import os
import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from agentsessions import (
    BackendUnavailableError,
    Capabilities,
    Event,
    InvalidOptionError,
    MemorySessionManager,
    SessionDecryptionError,
    SessionTooLargeError,
    connect,
)
from agentsessions._json import INT64_MAX, INT64_MIN
from agentsessions._records import SaveRequest
from agentsessions.encryption import (
    ENVIRONMENT_VARIABLE,
    MARKER,
    Keyring,
    generate_key,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SECRET = "tell-nobody-7f3a"

EVERY_JSON_TYPE: dict[str, Any] = {
    "null": None,
    "true": True,
    "false": False,
    "zero": 0,
    "int64": [INT64_MIN, -1, INT64_MAX],
    "floats": [0.0, -0.0, 1.5, -2.25e-300, 1.7976931348623157e308],
    "text": ["", "plain", "é ß 中文 🙂", "\u2028\x00\x1f", '"quoted" \\ back'],
    "list": [[], [[], [{}]], [1, "a", None]],
    "dict": {"": {"nested": {"deep": [1, {"x": None}]}}, "$key": ".dotted"},
}


def keyring(**keys: bytes) -> Keyring:
    first = next(iter(keys))
    return Keyring(keys, current=first)


def store_of(manager: MemorySessionManager, namespace: str = "") -> dict[str, Any]:
    return manager._store.spaces[namespace]


def fresh_url() -> str:
    return f"memory://enc-{uuid.uuid4().hex}"


async def stored_session(manager: MemorySessionManager, count: int = 3) -> str:
    session_id = f"s-{uuid.uuid4().hex}"
    session = await manager.create(session_id, "ada", state={"secret": SECRET})
    for index in range(count):
        session.add_event("user", f"{SECRET} {index}", note=SECRET)
    await manager.save(session)
    return session_id


def encrypted(url: str, ring: Keyring) -> MemorySessionManager:
    manager = connect(url, encryption=ring)
    assert isinstance(manager, MemorySessionManager)
    return manager


# -- round trips ---------------------------------------------------------------------------


async def test_every_json_type_round_trips_in_content_metadata_and_state() -> None:
    manager = encrypted(fresh_url(), keyring(k1=os.urandom(32)))
    session = await manager.create("s", state=dict(EVERY_JSON_TYPE))
    for name, value in EVERY_JSON_TYPE.items():
        session.add_event("tool", value, **{name: value, "all": EVERY_JSON_TYPE})
    await manager.save(session)
    fresh = manager.with_options()
    loaded = await fresh.get("s")
    assert loaded is not None
    assert loaded.state == EVERY_JSON_TYPE
    assert [event.model_dump() for event in loaded.events] == [
        event.model_dump() for event in session.events
    ]
    tail = await fresh.get("s", last_events=2)
    assert tail is not None
    assert [event.content for event in tail.events] == list(EVERY_JSON_TYPE.values())[-2:]
    stored = store_of(manager)["s"]
    assert all("dotted" not in text and "中文" not in text for text in stored.events)
    assert "int64" not in stored.record.state


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=INT64_MIN, max_value=INT64_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",))),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(st.characters(exclude_categories=("Cs",))), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=_json, metadata=st.dictionaries(st.text(max_size=5), _json, max_size=3))
def test_any_json_round_trips(content: Any, metadata: dict[str, Any]) -> None:
    async def scenario() -> None:
        manager = encrypted(fresh_url(), keyring(k1=os.urandom(32)))
        session = await manager.create("s", state={"v": content})
        session.add_event("user", content, **metadata)
        await manager.save(session)
        loaded = await manager.get("s")
        assert loaded is not None
        assert loaded.state == {"v": content}
        assert loaded.events[0].content == content
        assert loaded.events[0].metadata == metadata

    asyncio.run(scenario())


async def test_storage_holds_no_plaintext_and_clear_fields_stay_readable() -> None:
    manager = encrypted(fresh_url(), keyring(k1=os.urandom(32)))
    session_id = await stored_session(manager)
    stored = store_of(manager)[session_id]
    for text in [stored.record.state, *stored.events]:
        assert SECRET not in text
        assert MARKER in text
    event = Event.model_validate_json(stored.events[0])
    assert event.author == "user"
    assert event.content is None
    assert set(event.metadata) == {MARKER}
    assert event.metadata[MARKER].startswith("k1:")
    page = await manager.list_sessions()
    assert [(item.session_id, item.user_id, item.event_count) for item in page.items] == [
        (session_id, "ada", 3)
    ]


# -- keys ----------------------------------------------------------------------------------


async def test_wrong_key_raises_a_clear_error_naming_the_session() -> None:
    url = fresh_url()
    writer = encrypted(url, keyring(k1=os.urandom(32)))
    session_id = await stored_session(writer)
    impostor = encrypted(url, keyring(k1=os.urandom(32)))
    with pytest.raises(SessionDecryptionError) as caught:
        await impostor.get(session_id)
    error = caught.value
    assert error.session_id == session_id
    assert error.key_id == "k1"
    assert session_id in str(error)
    assert "does not authenticate" in str(error)


async def test_a_key_id_missing_from_the_keyring_is_named() -> None:
    url = fresh_url()
    writer = encrypted(url, keyring(old=os.urandom(32)))
    session_id = await stored_session(writer)
    reader = encrypted(url, keyring(new=os.urandom(32)))
    with pytest.raises(SessionDecryptionError, match=r"key 'old', which the keyring does not hold"):
        await reader.get(session_id)


async def test_rotation_reads_old_and_new_keys_and_writes_with_the_current_one() -> None:
    url = fresh_url()
    old = os.urandom(32)
    new = os.urandom(32)
    first = encrypted(url, Keyring({"old": old}))
    session_id = await stored_session(first, count=2)
    rotated = encrypted(url, Keyring({"new": new, "old": old}, current="new"))
    session = await rotated.get(session_id)
    assert session is not None
    session.add_event("assistant", "after rotation")
    await rotated.save(session)
    stored = store_of(rotated)[session_id]
    kids = [
        Event.model_validate_json(text).metadata[MARKER].split(":")[0] for text in stored.events
    ]
    assert kids == ["old", "old", "new"]
    assert stored.record.state.startswith('{"' + MARKER + '":"new:')
    again = await rotated.with_options().get(session_id)
    assert again is not None
    assert [event.content for event in again.events] == [
        f"{SECRET} 0",
        f"{SECRET} 1",
        "after rotation",
    ]
    # A reader that never got the new key says which key it lacks.
    with pytest.raises(SessionDecryptionError, match="'new'"):
        await first.get(session_id)


async def test_keys_never_appear_in_reprs_or_errors() -> None:
    raw = os.urandom(32)
    ring = Keyring({"k1": raw})
    manager = encrypted(fresh_url(), ring)
    texts = [repr(ring), str(ring), repr(manager), manager.url]
    wrong = encrypted(manager._url, Keyring({"k1": os.urandom(32)}))
    session_id = await stored_session(manager)
    with pytest.raises(SessionDecryptionError) as caught:
        await wrong.get(session_id)
    texts.append(str(caught.value))
    for encoding in (raw.hex(), base64.b64encode(raw).decode(), repr(raw)):
        assert all(encoding not in text for text in texts)
    assert repr(ring) == "<Keyring current='k1' keys=['k1']>"


def test_from_env_reads_keys_first_one_current() -> None:
    one, two = generate_key(), generate_key()
    ring = Keyring.from_env(environ={ENVIRONMENT_VARIABLE: f" k2:{two} , k1:{one}"})
    assert ring.current == "k2"
    assert ring.key_ids == ("k1", "k2")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "is not set"),
        ("k1", "entry 1 is not of the form keyid:BASE64KEY"),
        ("k1:not base64!", "key 'k1' is not valid base64"),
        (f"k1:{base64.b64encode(b'short').decode()}", "key 'k1' is 5 bytes long"),
        ("bad id:" + base64.b64encode(bytes(32)).decode(), "key id 'bad id'"),
        ("k1:{0},k1:{0}".format(base64.b64encode(bytes(32)).decode()), "given twice"),
    ],
)
def test_from_env_refuses_bad_values_without_showing_them(value: str, problem: str) -> None:
    with pytest.raises(InvalidOptionError, match=problem) as caught:
        Keyring.from_env(environ={ENVIRONMENT_VARIABLE: value})
    _, _, key_text = value.partition(":")
    if len(key_text) > 8:
        assert key_text not in str(caught.value)


def test_keyring_refuses_bad_construction() -> None:
    with pytest.raises(InvalidOptionError, match="current="):
        Keyring({"a": bytes(32), "b": bytes(32)})
    with pytest.raises(InvalidOptionError, match="not among the keys"):
        Keyring({"a": bytes(32)}, current="b")
    with pytest.raises(InvalidOptionError, match="31 bytes"):
        Keyring({"a": bytes(31)})
    with pytest.raises(InvalidOptionError, match="must be bytes"):
        Keyring({"a": "x" * 32})  # type: ignore[dict-item]
    with pytest.raises(InvalidOptionError, match="Keyring"):
        connect("memory://", encryption="k1:abc")  # type: ignore[arg-type]


async def test_fetch_asks_a_callable_once_per_key_id() -> None:
    keys = {"kms-2": os.urandom(32), "kms-1": os.urandom(32)}
    asked: list[str] = []

    def unwrap(key_id: str) -> bytes:
        asked.append(key_id)
        return keys[key_id]

    url = fresh_url()
    old = encrypted(url, Keyring(current="kms-1", fetch=unwrap))
    session_id = await stored_session(old)
    ring = Keyring(current="kms-2", fetch=unwrap)
    manager = encrypted(url, ring)
    for _ in range(3):
        assert await manager.get(session_id) is not None
    await stored_session(manager)
    assert asked == ["kms-1", "kms-1", "kms-2"]  # the first keyring, then this one's two
    missing = encrypted(url, Keyring(current="kms-2", fetch=lambda key_id: keys["nope"]))
    with pytest.raises(SessionDecryptionError, match=r"could not provide key 'kms-1' \(KeyError\)"):
        await missing.get(session_id)


# -- tampering and moved ciphertexts ----------------------------------------------------------


async def test_swapped_events_are_detected_naming_the_event() -> None:
    manager = encrypted(fresh_url(), keyring(k1=os.urandom(32)))
    session_id = await stored_session(manager)
    events = store_of(manager)[session_id].events
    first_id = Event.model_validate_json(events[0]).id
    events[0], events[1] = events[1], events[0]
    with pytest.raises(SessionDecryptionError) as caught:
        await manager.get(session_id)
    # Event 0 fixes the session's shift, event 1 contradicts it.
    assert caught.value.part == f"event 1 (id {first_id!r})"
    assert "out of place" in str(caught.value)


async def test_ciphertext_copied_to_another_session_or_namespace_fails() -> None:
    url = fresh_url()
    manager = encrypted(url, keyring(k1=os.urandom(32)))
    other_ns = manager.with_options(namespace="tenant_b")
    source = await stored_session(manager)
    target = await stored_session(manager)
    elsewhere = await stored_session(other_ns)
    mine = store_of(manager)
    theirs = store_of(manager, "tenant_b")
    # The same event text moved into another session at the same position.
    mine[target].events[0] = mine[source].events[0]
    with pytest.raises(SessionDecryptionError, match=r"event 0 .* does not authenticate"):
        await manager.get(target, last_events=3)
    # The state copied into another namespace's session of the same id.
    theirs[elsewhere].record = replace(theirs[elsewhere].record, state=mine[source].record.state)
    with pytest.raises(SessionDecryptionError, match="state"):
        await other_ns.get(elsewhere)
    # Whole session copied under its own id into another namespace.
    theirs[source] = mine[source]
    with pytest.raises(SessionDecryptionError):
        await other_ns.get(source)


async def test_an_event_copied_over_another_of_its_session_is_out_of_place() -> None:
    manager = encrypted(fresh_url(), keyring(k1=os.urandom(32)))
    session_id = await stored_session(manager)
    events = store_of(manager)[session_id].events
    events[2] = events[0]
    with pytest.raises(SessionDecryptionError, match=r"event 2 .* is out of place"):
        await manager.get(session_id)
    with pytest.raises(SessionDecryptionError, match="out of place"):
        await manager.get(session_id, last_events=2)


async def test_compaction_keeps_every_event_readable_and_sealed() -> None:
    manager = encrypted(fresh_url(), keyring(k1=os.urandom(32)))
    session_id = await stored_session(manager, count=6)
    session = await manager.get(session_id, last_events=4)
    assert session is not None
    summary = [Event(author="summary", content=f"{SECRET} summary", metadata={"k": SECRET})]
    await manager.compact(session, session.events[1].id, summary, archive=True)
    session.add_event("user", "after")
    await manager.save(session)  # sealed with the shift the compaction left
    await manager.update(session_id, lambda s: s.add_event("user", "tail"), last_events=0)
    loaded = await manager.with_options().get(session_id)
    assert loaded is not None
    assert [event.content for event in loaded.events] == [
        f"{SECRET} summary",
        f"{SECRET} 4",
        f"{SECRET} 5",
        "after",
        "tail",
    ]
    assert loaded.events[0].metadata == {"k": SECRET}
    archived = await manager.archived_events(session_id)
    assert [event.content for event in archived] == [f"{SECRET} {n}" for n in range(4)]
    stored = store_of(manager)[session_id]
    assert all(SECRET not in text for text in stored.events)
    # A second compaction, over a window loaded from the tail, and a full rewrite.
    tail = await manager.get(session_id, last_events=3)
    assert tail is not None
    await manager.compact(tail, tail.events[0].id, [Event(author="summary", content="s2")])
    again = await manager.get(session_id)
    assert again is not None
    assert [event.content for event in again.events] == ["s2", "after", "tail"]
    again.events[0] = again.events[0].model_copy(update={"content": "rewritten"})
    await manager.save(again)
    final = await manager.get(session_id)
    assert final is not None
    assert [event.content for event in final.events] == ["rewritten", "after", "tail"]


async def test_an_event_removed_from_the_middle_is_detected() -> None:
    manager = encrypted(fresh_url(), keyring(k1=os.urandom(32)))
    session_id = await stored_session(manager, count=4)
    stored = store_of(manager)[session_id]
    del stored.events[1]
    stored.record = replace(stored.record, event_count=3)
    with pytest.raises(SessionDecryptionError, match=r"event 1 .* out of place"):
        await manager.get(session_id)


@pytest.mark.parametrize("field", ["id", "author", "timestamp", "ciphertext"])
async def test_altered_clear_fields_or_ciphertext_fail(field: str) -> None:
    manager = encrypted(fresh_url(), keyring(k1=os.urandom(32)))
    session_id = await stored_session(manager)
    events = store_of(manager)[session_id].events
    event = Event.model_validate_json(events[2])
    if field == "ciphertext":
        place, _, blob = event.metadata[MARKER].rpartition(":")
        raw = bytearray(base64.b64decode(blob))
        raw[-1] ^= 1
        changed = {"metadata": {MARKER: f"{place}:{base64.b64encode(bytes(raw)).decode()}"}}
    elif field == "timestamp":
        changed = {"timestamp": event.timestamp + timedelta(microseconds=1)}
    else:
        changed = {field: "mallory"}
    events[2] = event.model_copy(update=changed).model_dump_json()
    with pytest.raises(SessionDecryptionError) as caught:
        await manager.get(session_id)
    assert caught.value.part.startswith("event 2")


async def test_plaintext_is_refused_unless_accepted() -> None:
    url = fresh_url()
    plain = connect(url)
    session = await plain.create("s", state={"a": 1})
    session.add_event("user", "written before encryption")
    await plain.save(session)
    strict = encrypted(url, keyring(k1=os.urandom(32)))
    with pytest.raises(SessionDecryptionError, match="stored unencrypted"):
        await strict.get("s")
    lenient = encrypted(url, Keyring({"k1": os.urandom(32)}, accept_plaintext=True))
    loaded = await lenient.get("s")
    assert loaded is not None
    assert loaded.state == {"a": 1}
    assert loaded.events[0].content == "written before encryption"


async def test_a_manager_without_keys_refuses_an_encrypted_session() -> None:
    url = fresh_url()
    session_id = await stored_session(encrypted(url, keyring(k1=os.urandom(32))))
    with pytest.raises(SessionDecryptionError, match="this manager has no keyring"):
        await connect(url).get(session_id)


# -- the manager's paths ---------------------------------------------------------------------


async def test_every_write_path_encrypts() -> None:
    url = fresh_url()
    manager = encrypted(url, keyring(k1=os.urandom(32)))
    session = await manager.create("s", state={"k": SECRET})
    session.add_event("user", SECRET)
    await manager.save(session)  # append
    session.events[0] = session.events[0].model_copy(update={"content": SECRET + "!"})
    await manager.save(session)  # rewrite
    await manager.update("s", lambda s: s.add_event("user", SECRET), last_events=0)
    loaded = await manager.get("s")
    assert loaded is not None
    await manager.restore(loaded.model_copy(update={"session_id": "copy"}))
    for session_id in ("s", "copy"):
        stored = store_of(manager)[session_id]
        assert all(SECRET not in text for text in [stored.record.state, *stored.events])
    copy = await manager.get("copy")
    assert copy is not None
    assert [event.content for event in copy.events] == [SECRET + "!", SECRET]
    assert copy.state == {"k": SECRET}


async def test_with_options_keeps_the_keyring() -> None:
    ring = keyring(k1=os.urandom(32))
    manager = encrypted(fresh_url(), ring)
    assert manager.with_options(namespace="x").encryption is ring


class _AmbiguousMemory(MemorySessionManager):
    """Lands a save, then reports the connection lost once: the outcome looks unknown."""

    fail_next = False

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        await super()._save(request, now)
        if self.fail_next:
            self.fail_next = False
            raise BackendUnavailableError(self.url, "connection lost after the write")


async def test_a_retried_ambiguous_save_resends_the_same_ciphertext() -> None:
    manager = _AmbiguousMemory(fresh_url())
    manager.encryption = keyring(k1=os.urandom(32))
    session = await manager.create("s")
    session.add_event("user", "once")
    manager.fail_next = True
    with pytest.raises(BackendUnavailableError):
        await manager.save(session)
    sent = list(store_of(manager)["s"].events)
    await manager.save(session)  # recognised by its token: nothing written again
    assert store_of(manager)["s"].events == sent
    loaded = await manager.get("s")
    assert loaded is not None
    assert [event.content for event in loaded.events] == ["once"]
    assert loaded.version == 2


def test_sealed_events_name_only_what_stays_clear() -> None:
    ring = keyring(k1=os.urandom(32))
    when = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2)))
    event = Event(id="e1", author="user", content=SECRET, timestamp=when, metadata={"m": 1})
    stored = Event.model_validate_json(ring.seal_event("ns", "s", event, 0))
    assert (stored.id, stored.author, stored.timestamp, stored.content) == (
        "e1",
        "user",
        when,
        None,
    )
    opened, shift = ring.open_events("ns", "s", [stored], 0)
    assert opened[0].model_dump() == event.model_dump()
    assert shift == 0


class _LimitedMemory(MemorySessionManager):
    capabilities = Capabilities(
        persistent=False, shared=True, max_event_bytes=20_000, max_state_bytes=9_000
    )


async def test_size_limits_are_those_of_the_plaintext_that_fits_once_encrypted() -> None:
    manager = _LimitedMemory(fresh_url())
    manager.encryption = keyring(k1=os.urandom(32))
    limit = manager.capabilities.max_event_bytes
    assert limit is not None and 10_000 < limit < 15_000  # about 3/4, less the clear fields
    assert manager.with_options().capabilities == manager.capabilities
    session = await manager.create("s")
    blank = Event(id="x" * 255, author="\x01" * 255, content="")
    size = len(blank.model_dump_json().encode())
    session.events.append(blank.model_copy(update={"content": "y" * (limit - size)}))
    await manager.save(session)  # the largest event with the longest clear fields fits
    assert len(store_of(manager)["s"].events[0].encode()) <= 20_000
    session.events.append(Event(id="e2", author="a", content="z" * limit))
    with pytest.raises(SessionTooLargeError, match=str(limit)):
        await manager.save(session)
    state_limit = manager.capabilities.max_state_bytes
    assert state_limit is not None
    session.events.pop()
    session.state["big"] = "s" * (state_limit - 10)
    await manager.save(session)
    session.state["big"] = "s" * state_limit
    with pytest.raises(SessionTooLargeError, match="state"):
        await manager.save(session)
    manager.encryption = None
    assert manager.capabilities.max_event_bytes == 20_000
