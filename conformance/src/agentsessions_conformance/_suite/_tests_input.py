"""Bad input: rejected before any I/O, with an error naming what was wrong; odd ids are just ids."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from agentsessions import (
    InvalidInputError,
    InvalidSessionIdError,
    ManagerClosedError,
    Session,
    SessionManager,
    SessionSerializationError,
)

from ._base import SuiteBase, snapshot

BAD_IDS: dict[str, object] = {
    "empty": "",
    "blank": "   \t\n",
    "too-long": "x" * 256,
    "int": 42,
    "none": None,
    "mongo-operator-dict": {"$ne": None},
    "list": ["a"],
    "bytes": b"abc",
}

# Ids that break engines splicing them into queries, patterns, keys or paths.
ODD_IDS: dict[str, str] = {
    "sql": "'; DROP TABLE x; --",
    "sql-quote": "O'Reilly\"s",
    "star": "*",
    "question": "?",
    "brace-pair": "{a}",
    "brace-open": "{",
    "brace-close": "}",
    "redis-glob": "[a-z]*",
    "mongo-where": "$where",
    "mongo-ne": "$ne",
    "dotted": "a.b.c",
    "dotdot-slash": "../",
    "dotdot-backslash": "..\\",
    "percent": "%",
    "underscore": "_",
    "colon": ":",
    "newline": "line\nbreak",
    "crlf": "line\r\nbreak",
    "tab": "tab\there",
    "only-newline-and-text": "\n.",
    "emoji": "🤖💬",
    "max-length": "m" * 255,
    "max-length-unicode": "é" * 255,
    "space-padded": "  padded  ",
}

NOT_JSON: dict[str, object] = {
    "datetime": datetime(2024, 1, 1, tzinfo=timezone.utc),
    "set": {1, 2},
    "tuple": (1, 2),
    "bytes": b"raw",
    "object": object(),
    "nan": float("nan"),
    "inf": float("inf"),
    "int-keys": {1: "a"},
}


class InputTests(SuiteBase):
    @pytest.mark.parametrize("bad", list(BAD_IDS.values()), ids=list(BAD_IDS))
    async def test_invalid_ids_rejected_before_io(
        self, manager: SessionManager, bad: object
    ) -> None:
        """Empty, blank, over-long and non-string ids raise InvalidSessionIdError before any I/O."""
        # On a closed manager any I/O would raise ManagerClosedError instead, so getting
        # InvalidSessionIdError proves the id was checked before anything was touched.
        closed = manager.with_options()
        await closed.close()
        sentinel = await self.session_with_events(manager, 1)
        before = snapshot(await self.readback(manager, sentinel.session_id))
        value: Any = bad
        calls: list[Callable[[SessionManager], Awaitable[object]]] = [
            lambda m: m.create(value),
            lambda m: m.get(value),
            lambda m: m.get_or_create(value),
            lambda m: m.update(value, lambda s: None, create=True),
            lambda m: m.delete(value),
            lambda m: m.delete_user(value),
            lambda m: m.save(Session.model_construct(session_id=value, state={}, events=[])),
        ]
        if bad is not None:  # user_id=None means "any user", so None is valid there
            calls += [
                lambda m: m.create(sentinel.session_id + "-x", value),
                lambda m: m.get(sentinel.session_id, user_id=value),
                lambda m: m.list_sessions(user_id=value),
                lambda m: m.delete(sentinel.session_id, user_id=value),
            ]
        for call in calls:
            for target in (closed, manager):
                with pytest.raises(InvalidSessionIdError) as info:
                    await call(target)
                assert isinstance(info.value, ValueError), (
                    f"an operation given the invalid id {value!r} must raise an "
                    "InvalidSessionIdError that is also a ValueError: it raised "
                    f"{type(info.value).__qualname__}: {info.value}"
                )
                assert not isinstance(info.value, ManagerClosedError), (
                    f"an operation given the invalid id {value!r} must reject it before any "
                    "I/O, so even a closed manager raises InvalidSessionIdError and not "
                    f"ManagerClosedError: it raised {type(info.value).__qualname__}: {info.value}"
                )
        assert snapshot(await self.readback(manager, sentinel.session_id)) == before, (
            f"operations rejected for the invalid id {value!r} must write nothing: the "
            f"untouched session {sentinel.session_id!r} reads back changed"
        )
        assert await manager.get(sentinel.session_id + "-x") is None, (
            f"create({sentinel.session_id + '-x'!r}, user_id={value!r}) raised "
            "InvalidSessionIdError, so it must not have created the session: get() found it"
        )

    async def _private(self, manager: SessionManager) -> tuple[SessionManager, bool]:
        """A fresh namespace when the backend has them: bare ids like ``*`` then collide
        with nothing on a shared server. Otherwise the caller prefixes a random part."""
        if manager.capabilities.namespaces:
            return await self.variant(manager, namespace=self.new_namespace()), True
        return manager, False

    @pytest.mark.parametrize("odd", list(ODD_IDS.values()), ids=list(ODD_IDS))
    async def test_metacharacter_ids_round_trip(self, manager: SessionManager, odd: str) -> None:
        """Ids full of SQL/Redis/Mongo/path metacharacters are plain ids, touching nothing else."""
        manager, private = await self._private(manager)
        user = self.new_user()
        sentinel = await self.session_with_events(manager, 2, user_id=user)
        before = snapshot(await self.readback(manager, sentinel.session_id))
        if not private:  # the variant's namespace is purged after the test; this is not
            odd = self.track((self.new_id("m") + odd)[:255])
        session_id = odd
        session = await manager.create(session_id, user, state={"id": odd})
        session.add_event("user", odd, id=odd)
        await manager.save(session)
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({odd!r}) (read-back) returned None after create() and save(): an id full of "
            "metacharacters is a plain id and must be found"
        )
        assert stored.session_id == odd, (
            f"get({odd!r}) must return the session with exactly that id: found "
            f"session_id={stored.session_id!r}"
        )
        assert stored.state == {"id": odd}, (
            f"get({odd!r}) must return the state saved under that id: expected {{'id': {odd!r}}}"
            f", read back {stored.state!r}"
        )
        assert [e.content for e in stored.events] == [odd], (
            f"get({odd!r}) must return the one event saved (content and id {odd!r}): found "
            f"{[e.content for e in stored.events[:8]]!r}"
        )
        listed = {item.session_id for item in (await manager.list_sessions(user_id=user)).items}
        assert listed == {odd, sentinel.session_id}, (
            f"list_sessions(user_id={user!r}) must list exactly the user's two sessions, "
            f"{odd!r} and {sentinel.session_id!r}: found {sorted(listed)[:8]!r}"
        )
        assert await manager.delete(session_id) is True, (
            f"delete({odd!r}) of a stored session must return True: it returned something else"
        )
        assert await manager.get(session_id) is None, (
            f"get({odd!r}) after delete() must return None: the session is still found"
        )
        assert snapshot(await self.readback(manager, sentinel.session_id)) == before, (
            f"create(), save() and delete() of the id {odd!r} must touch no other session: "
            f"{sentinel.session_id!r} reads back changed"
        )

    async def test_pattern_ids_do_not_match_other_sessions(self, manager: SessionManager) -> None:
        """Glob, LIKE and regex characters in ids and user ids never match other sessions."""
        manager, private = await self._private(manager)
        user = self.new_user()
        stem = "" if private else self.new_id("p")
        plain = [stem + suffix for suffix in ("abc", "a_c", "aXc", "a")]
        if not private:
            for session_id in plain:
                self.track(session_id)
        for session_id in plain:
            await manager.create(session_id, user)
        expected = {sid: snapshot(await self.readback(manager, sid)) for sid in plain}
        for pattern in ("*", "a*", "a%", "%", "_", "a_c", "a?c", "a[b]c", ".*", "a.c", "^a", "a$"):
            session_id = stem + pattern
            if session_id in plain:
                continue
            assert await manager.get(session_id) is None, f"get({pattern!r}) matched another id"
            assert await manager.delete(session_id) is False, f"delete({pattern!r}) matched"
        user_patterns = [
            user[:6] + "*",
            user[:6] + "%",
            user[:-1] + "_",
            user[:-1] + "?",
            user[:6] + ".*",
        ]
        if private:
            user_patterns += ["*", "%", "u-*", ".*", "_", "?"]
        for user_pattern in user_patterns:
            assert await manager.delete_user(user_pattern) == 0, user_pattern
            assert (await manager.list_sessions(user_id=user_pattern)).items == [], (
                f"list_sessions(user_id={user_pattern!r}) must treat the user id as a plain "
                f"string, not a pattern: it listed sessions of user {user!r}"
            )
        assert {sid: snapshot(await self.readback(manager, sid)) for sid in plain} == expected, (
            "get() and delete() of pattern ids, and delete_user() of pattern user ids, must "
            f"leave the sessions {plain!r} untouched: one of them reads back changed or missing"
        )

    @pytest.mark.parametrize("value", list(NOT_JSON.values()), ids=list(NOT_JSON))
    async def test_non_json_values_rejected(self, manager: SessionManager, value: object) -> None:
        """Non-JSON values raise SessionSerializationError naming the path; nothing is written."""
        session = await self.session_with_events(manager, 1)
        before = snapshot(await self.readback(manager, session.session_id))
        new_id = self.new_id()
        with pytest.raises(SessionSerializationError) as info:
            await manager.create(new_id, state={"pending": {"when": value}})
        assert "state['pending']['when']" in str(info.value), (
            f"create(state={{'pending': {{'when': {value!r}}}}}) must raise a "
            "SessionSerializationError naming the path state['pending']['when']: the error "
            f"says {str(info.value)!r}"
        )
        assert await self.readback(manager, new_id) is None, (
            f"create({new_id!r}) with a non-JSON value in its state raised, so it must write "
            "nothing: get() found the session"
        )
        session.state["pending"] = {"when": value}
        with pytest.raises(SessionSerializationError) as info:
            await manager.save(session)
        assert "state['pending']['when']" in str(info.value), (
            f"save() of a state holding {value!r} at state['pending']['when'] must raise a "
            f"SessionSerializationError naming that path: the error says {str(info.value)!r}"
        )
        del session.state["pending"]
        session.add_event("user", {"parts": [1, value]})
        with pytest.raises(SessionSerializationError) as info:
            await manager.save(session)
        assert "events[1].content['parts'][1]" in str(info.value), (
            f"save() of an event whose content holds {value!r} at ['parts'][1] must raise a "
            "SessionSerializationError naming the path events[1].content['parts'][1]: the "
            f"error says {str(info.value)!r}"
        )
        session.events.pop()
        session.add_event("user", "fine", extra=value)
        with pytest.raises(SessionSerializationError) as info:
            await manager.save(session)
        assert "events[1].metadata['extra']" in str(info.value), (
            f"save() of an event whose metadata holds {value!r} under 'extra' must raise a "
            "SessionSerializationError naming the path events[1].metadata['extra']: the error "
            f"says {str(info.value)!r}"
        )
        assert isinstance(info.value, ValueError), (
            "SessionSerializationError raised by save() must also be a ValueError: it is "
            f"{type(info.value).__qualname__}"
        )
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            f"save() calls rejected for a non-JSON value ({value!r}) must write nothing: "
            f"{session.session_id!r} reads back changed"
        )

    @pytest.mark.parametrize("last_events", [-1, 1.5, "3", True])
    async def test_invalid_last_events_rejected(
        self, manager: SessionManager, last_events: object
    ) -> None:
        """get(last_events=...) with a negative or non-int value raises InvalidInputError."""
        session = await self.session_with_events(manager, 1)
        with pytest.raises(InvalidInputError):
            await manager.get(session.session_id, last_events=last_events)  # type: ignore[arg-type]
