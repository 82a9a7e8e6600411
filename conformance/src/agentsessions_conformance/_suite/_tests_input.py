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
                assert isinstance(info.value, ValueError)
                assert not isinstance(info.value, ManagerClosedError)
        assert snapshot(await self.readback(manager, sentinel.session_id)) == before
        assert await manager.get(sentinel.session_id + "-x") is None

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
        assert stored is not None
        assert stored.session_id == odd
        assert stored.state == {"id": odd}
        assert [e.content for e in stored.events] == [odd]
        listed = {item.session_id for item in (await manager.list_sessions(user_id=user)).items}
        assert listed == {odd, sentinel.session_id}
        assert await manager.delete(session_id) is True
        assert await manager.get(session_id) is None
        assert snapshot(await self.readback(manager, sentinel.session_id)) == before

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
            assert (await manager.list_sessions(user_id=user_pattern)).items == []
        assert {sid: snapshot(await self.readback(manager, sid)) for sid in plain} == expected

    @pytest.mark.parametrize("value", list(NOT_JSON.values()), ids=list(NOT_JSON))
    async def test_non_json_values_rejected(self, manager: SessionManager, value: object) -> None:
        """Non-JSON values raise SessionSerializationError naming the path; nothing is written."""
        session = await self.session_with_events(manager, 1)
        before = snapshot(await self.readback(manager, session.session_id))
        new_id = self.new_id()
        with pytest.raises(SessionSerializationError) as info:
            await manager.create(new_id, state={"pending": {"when": value}})
        assert "state['pending']['when']" in str(info.value)
        assert await self.readback(manager, new_id) is None
        session.state["pending"] = {"when": value}
        with pytest.raises(SessionSerializationError) as info:
            await manager.save(session)
        assert "state['pending']['when']" in str(info.value)
        del session.state["pending"]
        session.add_event("user", {"parts": [1, value]})
        with pytest.raises(SessionSerializationError) as info:
            await manager.save(session)
        assert "events[1].content['parts'][1]" in str(info.value)
        session.events.pop()
        session.add_event("user", "fine", extra=value)
        with pytest.raises(SessionSerializationError) as info:
            await manager.save(session)
        assert "events[1].metadata['extra']" in str(info.value)
        assert isinstance(info.value, ValueError)
        assert snapshot(await self.readback(manager, session.session_id)) == before

    @pytest.mark.parametrize("last_events", [-1, 1.5, "3", True])
    async def test_invalid_last_events_rejected(
        self, manager: SessionManager, last_events: object
    ) -> None:
        """get(last_events=...) with a negative or non-int value raises InvalidInputError."""
        session = await self.session_with_events(manager, 1)
        with pytest.raises(InvalidInputError):
            await manager.get(session.session_id, last_events=last_events)  # type: ignore[arg-type]
