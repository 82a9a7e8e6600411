"""Sizes that cross layout boundaries: every read, compaction and rewind whose cut lands
exactly at, one before and one after each power of two and round size up to 2,100 events.

Engines store a history in pieces: buckets of a fixed number of events (MongoDB), pages
and batches of a driver, slices of a read that loops. An off-by-one at a piece's edge
(a bucket one event too large, a slice that overlaps the next) shows only when a read
or a cut lands at that edge, so these clauses build one history through saves of every
size from 1 up (their ends cross every boundary at many offsets) and check each size of
`BOUNDARIES`, event by event.
"""

from __future__ import annotations

from agentsessions import Event, Session, SessionManager

from ._base import SuiteBase

#: The longest history the clauses build.
LONGEST = 2100


def _boundaries(limit: int) -> list[int]:
    """1 before, at and 1 after every power of two and round size, up to *limit*."""
    edges = {2**k for k in range(1, 12)} | {10, 100, 500, 1000, 2000}
    sizes = {size + delta for size in edges for delta in (-1, 0, 1)}
    return sorted(size for size in sizes | {limit} if 0 < size <= limit)


#: The sizes every clause checks (2,100 included).
BOUNDARIES = _boundaries(LONGEST)


def _summary(cut: int) -> Event:
    return Event(author="summarizer", content={"summary_through": cut})


class LayoutBoundaryTests(SuiteBase):
    async def _long_history(self, manager: SessionManager, length: int = LONGEST) -> Session:
        """A session of *length* events (content = position), saved in batches of 1, 2,
        3, ... events, so that saves end at every offset of any piece size."""
        session = await manager.create(self.new_id("layout"), state={"n": 0})
        batch = 1
        while len(session.events) < length:
            for _ in range(min(batch, length - len(session.events))):
                session.add_event("user", len(session.events))
            await manager.save(session)
            batch += 1
        return session

    async def test_reads_of_every_boundary_size_return_exactly_those_events(
        self, manager: SessionManager
    ) -> None:
        """A history of 2,100 events saved in batches of growing size reads back whole,
        event by event, and get(last_events=N) returns exactly the newest N events for
        every N, and for every window start, at, one before and one after each power of
        two and round size."""
        session = await self._long_history(manager)
        ids = [event.id for event in session.events]
        stored = await self.readback(manager, session.session_id)
        assert stored is not None, f"get({session.session_id!r}) found nothing after the saves"
        found = [event.id for event in stored.events]
        assert found == ids, (
            f"get() of a {LONGEST}-event history saved in growing batches must return every "
            f"event in order: expected {len(ids)} events, found {len(found)}; first "
            f"difference at position {_first_difference(ids, found)}"
        )
        for size in BOUNDARIES:
            tail = await self.readback(manager, session.session_id, last_events=size)
            assert tail is not None, f"get(last_events={size}) found nothing"
            got = [event.id for event in tail.events]
            assert got == ids[-size:], (
                f"get(last_events={size}) of a {LONGEST}-event history must return exactly "
                f"the newest {size} events (positions {LONGEST - size}..{LONGEST - 1}): "
                f"found {len(got)} events; first difference at "
                f"{_first_difference(ids[-size:], got)} of the window"
            )
            assert [event.content for event in tail.events] == list(
                range(LONGEST - size, LONGEST)
            ), f"get(last_events={size}) returned the right ids with other contents"
        # And windows starting exactly at, one before and one after each boundary: where
        # a bucket or slice of the layout begins or ends.
        for start in BOUNDARIES:
            if start >= LONGEST:
                continue
            tail = await self.readback(manager, session.session_id, last_events=LONGEST - start)
            assert tail is not None, f"get(last_events={LONGEST - start}) found nothing"
            got = [event.id for event in tail.events]
            assert got == ids[start:], (
                f"get(last_events={LONGEST - start}) of a {LONGEST}-event history must start "
                f"at position {start}: found {len(got)} events; first difference at "
                f"{_first_difference(ids[start:], got)} of the window"
            )
        await self.check_positions(manager, session.session_id, LONGEST)

    async def test_compactions_cut_at_every_boundary_keep_and_archive_exactly(
        self, manager: SessionManager
    ) -> None:
        """Compactions (archive=True) whose cuts land at, one before and one after each
        boundary, one after the other on one 2,100-event history: each keeps exactly
        the summary and the events after its cut, and the archive holds every replaced
        event once, in order."""
        self.require(manager, "compaction")
        session = await self._long_history(manager)
        originals = list(session.events)
        archived: list[str] = []
        kept_head: Event | None = None  # the previous compaction's summary
        done = 0
        for cut in BOUNDARIES:
            if cut >= LONGEST:
                break
            # The prefix replaced: the previous summary (if any) and the originals up to
            # the cut. On success *session* holds the compacted history for the next one.
            summary = _summary(cut)
            await manager.compact(session, originals[cut - 1].id, [summary], archive=True)
            archived += ([] if kept_head is None else [kept_head.id]) + [
                event.id for event in originals[done:cut]
            ]
            kept_head, done = summary, cut
            stored = await self.readback(manager, session.session_id)
            assert stored is not None, f"compact(through position {cut - 1}) erased the session"
            expected = [summary.id] + [event.id for event in originals[cut:]]
            found = [event.id for event in stored.events]
            assert found == expected, (
                f"compact() through position {cut - 1} must leave the summary and the "
                f"{LONGEST - cut} events after the cut: expected {len(expected)} events, "
                f"found {len(found)}; first difference at {_first_difference(expected, found)}"
            )
        history = [event.id for event in await manager.archived_events(session.session_id)]
        assert history == archived, (
            f"archived_events() after compactions cut at every boundary must hold every "
            f"replaced event once, oldest first: expected {len(archived)}, found "
            f"{len(history)} ({len(history) - len(set(history))} twice); first difference "
            f"at {_first_difference(archived, history)}"
        )

    async def test_rewinds_cut_at_every_boundary_drop_exactly_the_tail(
        self, manager: SessionManager
    ) -> None:
        """Rewinds (archive=True) to, one before and one after each boundary, from the
        longest down, on one 2,100-event history: each keeps exactly the events before
        its cut, and the archive holds every dropped event once."""
        self.require(manager, "branching")
        session = await self._long_history(manager)
        originals = list(session.events)
        for keep in reversed(BOUNDARIES):
            if keep >= LONGEST:
                continue
            # On success *session* holds the kept events, for the next rewind.
            await manager.rewind(session, originals[keep - 1].id, archive=True)
            stored = await self.readback(manager, session.session_id)
            assert stored is not None, f"rewind(to {keep} events) erased the session"
            expected = [event.id for event in originals[:keep]]
            found = [event.id for event in stored.events]
            assert found == expected, (
                f"rewind() through position {keep - 1} must keep exactly the first {keep} "
                f"events: found {len(found)}; first difference at "
                f"{_first_difference(expected, found)}"
            )
            await self.check_positions(manager, session.session_id, keep)
        history = [event.id for event in await manager.archived_events(session.session_id)]
        first_kept = min(size for size in BOUNDARIES if size < LONGEST)
        assert sorted(history) == sorted(event.id for event in originals[first_kept:]), (
            f"archived_events() after rewinds to every boundary must hold each dropped "
            f"event once: expected {LONGEST - first_kept}, found {len(history)} "
            f"({len(history) - len(set(history))} twice)"
        )


def _first_difference(expected: list[str], found: list[str]) -> int | str:
    for index, (want, got) in enumerate(zip(expected, found, strict=False)):
        if want != got:
            return index
    return "the end" if len(expected) == len(found) else min(len(expected), len(found))
