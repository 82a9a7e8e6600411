"""`CompactionPolicy`: keep a long conversation short by summarising its oldest events.

After a turn has been saved, the policy checks the stored history; past its threshold
(``every`` events beyond the overlap, or ``max_bytes`` of encoded events) it asks the
application's summarizer for a summary of the oldest events and replaces them with it
through `SessionManager.compact`, keeping the newest ``keep_last`` events verbatim.

Nothing appended concurrently is ever lost: `compact` is version-checked, so if another
run saved after the history the summarizer read, the compaction writes nothing, and the
policy reloads the session and summarises the fresh history again (up to ``retries``
times; then it leaves the session as it is, logs a warning, and the next turn tries).

The cut never separates events that belong together: the events of one tool call
(``tool_call``, ``approval_requested``, ``approval``, ``tool_result``, ...; the
events sharing a ``call_id`` in their metadata) are all replaced or all kept, and the
events of a call still waiting for approval are always kept. State is never written by
a compaction, so pending approvals and every other state key survive untouched.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from .._errors import InvalidInputError, SessionConflictError
from .._manager import SessionManager, backoff
from .._models import Event, Session

__all__ = ["CompactionPolicy", "Summary", "Summarizer", "choose_cut", "compact_session"]

logger = logging.getLogger("agentsessions")

#: What a summarizer returns: one event, several, or a text (stored as one event by
#: ``summary_author`` with ``metadata={"kind": "summary"}``).
Summary = Event | Sequence[Event] | str
#: The application's summarizer: takes the events to replace, oldest first (a previous
#: summary included), returns their summary; sync or async.
Summarizer = Callable[[list[Event]], Summary | Awaitable[Summary]]


@dataclass(frozen=True)
class CompactionPolicy:
    """When and how to compact a session after a turn.

    ``summarizer``: called with the events to replace; returns the summary (see
    `Summary`), sync or async. It may be called again, with fresher events, when a
    concurrent run saved meanwhile, so it must not have side effects that matter.
    ``every``: compact once the session holds ``every + keep_last`` events or more (each
    compaction then replaces at least ``every`` of them, the previous summary included).
    ``max_bytes``: compact once the events' JSON adds up to more than this many bytes
    (this needs the whole history: a context loaded with ``last_events`` reloads it).
    At least one of the two is required. ``keep_last``: the newest events kept verbatim
    (the overlap the model still sees word for word). ``archive``: keep the replaced
    events in the store's archive (`SessionManager.archived_events`). ``retries``: how
    many times a compaction that lost a race is tried again on fresh data.
    """

    summarizer: Summarizer
    every: int | None = None
    max_bytes: int | None = None
    keep_last: int = 20
    archive: bool = False
    retries: int = 8
    summary_author: str = "summary"

    def __post_init__(self) -> None:
        if not callable(self.summarizer):
            raise InvalidInputError(f"summarizer must be callable, not {self.summarizer!r}")
        if self.every is None and self.max_bytes is None:
            raise InvalidInputError("a CompactionPolicy needs every=N events or max_bytes=B")
        for name in ("every", "max_bytes"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise InvalidInputError(f"{name} must be None or an int >= 1, not {value!r}")
        for name in ("keep_last", "retries"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise InvalidInputError(f"{name} must be an int >= 0, not {value!r}")

    def due(self, session: Session) -> bool:
        """Whether *session* (its stored history) is past this policy's threshold."""
        count = session.first_event_position + len(session.events)
        if self.every is not None and count >= self.every + self.keep_last:
            return True
        if self.max_bytes is not None and not session.is_partial:
            size = sum(len(event.model_dump_json().encode()) for event in session.events)
            return size > self.max_bytes
        return False

    @property
    def needs_full_history(self) -> bool:
        return self.max_bytes is not None

    async def summarize(self, events: list[Event]) -> list[Event]:
        """The summarizer's answer for *events*, as a list of events."""
        result = self.summarizer(list(events))
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, str):
            return [Event(author=self.summary_author, content=result, metadata={"kind": "summary"})]
        if isinstance(result, Event):
            return [result]
        if isinstance(result, Sequence):
            events = [item for item in result if isinstance(item, Event)]
            if len(events) == len(result):
                return events
        raise InvalidInputError(
            f"the summarizer must return an Event, a list of Event or a str, not {result!r}"
        )


def choose_cut(events: Sequence[Event], keep_last: int, pending: set[str]) -> int:
    """The index of the last event to replace (-1: nothing can be), keeping at least the
    newest *keep_last* events and never splitting the events of one tool call (those
    sharing a ``call_id``); the events of the calls in *pending* are always kept."""
    cut = len(events) - keep_last - 1
    if cut < 0:
        return -1
    first_of: dict[str, int] = {}
    for index, event in enumerate(events):
        call_id = event.metadata.get("call_id")
        if isinstance(call_id, str):
            first_of.setdefault(call_id, index)
    for call_id in pending:
        if call_id in first_of:
            cut = min(cut, first_of[call_id] - 1)
    # Moving the cut earlier keeps more events, which may belong to earlier calls: the
    # cut only ever moves back, so this settles in at most len(events) rounds.
    while cut >= 0:
        kept_calls = {
            event.metadata.get("call_id")
            for event in events[cut + 1 :]
            if isinstance(event.metadata.get("call_id"), str)
        }
        earliest = min((first_of[call_id] for call_id in kept_calls), default=cut + 1)  # type: ignore[index]
        if earliest > cut:
            return cut
        cut = earliest - 1
    return -1


async def compact_session(
    manager: SessionManager,
    session: Session,
    policy: CompactionPolicy,
    *,
    user_id: str | None = None,
    pending: Callable[[Session], set[str]] = lambda session: set(),
) -> tuple[Session, int]:
    """Compact *session* under *policy* if it is due: (the session as stored, events replaced).

    *session* is used as it is when it holds the whole history at its stored version;
    otherwise (partial, or after a lost race) the session is reloaded whole. Returns the
    compacted session (or the latest one read) and how many events were replaced (0
    when not due, when nothing may be cut, or when every attempt lost a race).
    """
    current: Session | None = session
    for attempt in range(policy.retries + 1):
        if current is not None and current.is_partial:
            # The newest events and the count are known: reload only when needed.
            if not policy.needs_full_history and not policy.due(current):
                return current, 0
            current = None
        if current is None:
            current = await manager.get(session.session_id, user_id=user_id)
            if current is None:
                return session, 0
        if not policy.due(current):
            return current, 0
        cut = choose_cut(current.events, policy.keep_last, pending(current))
        if cut < 0:
            return current, 0
        replaced = current.events[: cut + 1]
        summary = await policy.summarize(replaced)
        try:
            await manager.compact(current, replaced[-1].id, summary, archive=policy.archive)
        except SessionConflictError:
            current = None  # someone saved since we read: summarise what is there now
            await backoff(attempt)
            continue
        return current, len(replaced)
    logger.warning(
        "compaction of session %r gave up after %d retries: every attempt lost a race "
        "with another writer (the session is unchanged; the next turn tries again)",
        session.session_id,
        policy.retries,
        extra={"event": "compaction_gave_up", "session_id": session.session_id},
    )
    return session, 0
