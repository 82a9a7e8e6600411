"""Ids are data: no two different ids, or namespace and id pairs, ever name one session."""

from __future__ import annotations

import contextlib
import uuid

from agentsessions import SessionManager

from ._base import SuiteBase


def _look_alikes(base: str) -> list[str]:
    # Each differs from the others only in case, surrounding whitespace, or a character
    # some engine treats specially (key separators, hash tags, paths, LIKE and globs).
    return [
        base,
        base.upper(),
        base.capitalize(),
        f" {base}",
        f"{base} ",
        f"\t{base}",
        f"{base}\n",
        f"{base}:x",
        f"{base}:",
        f":{base}",
        f"{{{base}}}",
        f"{base}{{x}}",
        f"}}{base}{{",
        f"{base}/x",
        f"{base}/",
        f"/{base}",
        f"{base}%",
        f"{base}%x",
        f"{base}_",
        f"{base}*",
        f"{base}*x",
        f"*{base}",
        f"{base}?",
        f"{base}[x]",
        f"{base}.",
        f"{base}\\",
    ]


class IdTests(SuiteBase):
    async def test_ids_differing_in_case_space_or_metacharacters_are_distinct(
        self, manager: SessionManager
    ) -> None:
        """Ids differing only in case, leading/trailing whitespace or in : { } / % * ? [ ] . \\
        are distinct sessions for create, get, list, delete and delete_user, in every namespace."""
        for space in await self.namespaced(manager):
            ids = [self.track(i) for i in _look_alikes(f"kit{uuid.uuid4().hex[:10]}")]
            user = self.new_user()
            for index, session_id in enumerate(ids):
                session = await space.create(session_id, user, state={"index": index})
                session.add_event("user", session_id)
                await space.save(session)
            for index, session_id in enumerate(ids):
                stored = await space.get(session_id)
                assert stored is not None, f"{session_id!r} is gone"
                assert stored.session_id == session_id, (
                    f"get({session_id!r}) must return the session with exactly that id: found "
                    f"session_id={stored.session_id!r}"
                )
                assert (stored.state, [e.content for e in stored.events]) == (
                    {"index": index},
                    [session_id],
                ), f"{session_id!r} holds another id's session"
                tail = await space.get(session_id, last_events=1)
                assert tail is not None and [e.content for e in tail.events] == [session_id], (
                    f"get({session_id!r}, last_events=1) must return that id's own one event "
                    f"{session_id!r}: found "
                    f"{'None' if tail is None else [e.content for e in tail.events[:8]]!r}"
                )
            listed = [item.session_id for item in await self.list_all(space, user_id=user)]
            assert sorted(listed) == sorted(ids), (
                f"list_sessions(user_id={user!r}) must list each of the {len(ids)} look-alike "
                f"ids once, as a distinct session: listed {len(listed)}: {sorted(listed)[:8]!r}"
            )
            assert await space.delete(ids[0]) is True, (
                f"delete({ids[0]!r}) of a stored session must return True: it returned "
                "something else"
            )
            for session_id in ids[1:]:
                assert await space.get(session_id) is not None, (
                    f"delete({ids[0]!r}) also removed {session_id!r}"
                )
            assert await space.delete_user(user) == len(ids) - 1, (
                f"delete_user({user!r}) must count each remaining look-alike id as its own "
                f"session: expected {len(ids) - 1}, it returned another count"
            )
            for session_id in ids:
                await self.check_erased(space, session_id, "delete_user() returned")

    async def test_namespace_and_id_never_collide(self, manager: SessionManager) -> None:
        """Namespace + id pairs that concatenate to one string (with or without a separator
        such as : / _ .) are distinct sessions; none sees, lists or deletes another."""
        self.require(manager, "namespaces")
        namespace = self.new_namespace()
        default = manager
        if manager.options.namespace:
            default = await self.variant(manager, namespace="")
        spaced = await self.variant(manager, namespace=namespace)
        shorter = await self.variant(manager, namespace=namespace[:-2])
        tail = namespace[-2:]
        pairs = [
            (spaced, "x"),
            (default, f"{namespace}x"),
            (default, f"{namespace}:x"),
            (default, f"{namespace}/x"),
            (default, f"{namespace}_x"),
            (default, f"{namespace}.x"),
            (default, f"{namespace}\x01x"),
            (shorter, f"{tail}x"),
            (shorter, f"{tail}:x"),
        ]
        user = self.new_user()
        try:
            for index, (space, session_id) in enumerate(pairs):
                await space.create(session_id, user, state={"pair": index})
            for index, (space, session_id) in enumerate(pairs):
                stored = await space.get(session_id)
                assert stored is not None and stored.state == {"pair": index}, (
                    f"({space.options.namespace!r}, {session_id!r}) collides with another pair"
                )
            for space in (spaced, shorter):
                own = {sid for s, sid in pairs if s is space}
                listed = {item.session_id for item in await self.list_all(space, user_id=user)}
                assert listed == own, f"namespace {space.options.namespace!r} lists {listed}"
            assert await spaced.delete_user(user) == 1, (
                f"delete_user({user!r}) in namespace {namespace!r} must count only the one "
                "session of that namespace, not pairs that concatenate to the same string: "
                "it returned another count"
            )
            for index, (space, session_id) in enumerate(pairs[1:], start=1):
                stored = await space.get(session_id)
                assert stored is not None and stored.state == {"pair": index}, (
                    f"delete_user in {namespace!r} erased ({space.options.namespace!r}, "
                    f"{session_id!r})"
                )
        finally:
            # The default namespace is not a fresh one: take back exactly what was made.
            for space, session_id in pairs:
                with contextlib.suppress(Exception):
                    await space.delete(session_id)
