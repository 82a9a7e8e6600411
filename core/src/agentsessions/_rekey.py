"""Rekeying one session: an ordinary conditional save of it, sealed again under the current key."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from . import _deadline
from ._errors import SessionConflictError, SessionNotFoundError
from ._ids import new_token
from ._input import check_event_sizes
from ._records import SaveRequest, encode_event
from ._retry import backoff

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = ["rekey_session"]


async def rekey_session(
    manager: SessionManager, session_id: str, retries: int
) -> Literal["rekeyed", "current", "vanished"]:
    """Rewrite one session under the keyring's current key (see `encryption.rekey`).

    An ordinary conditional save of the whole session that keeps its ``updated_at``
    (and so its expiry): a save racing it wins and this one reads again.
    """
    codec = manager._codec
    codec.check_rekey()
    for attempt in range(retries + 1):
        async with _deadline.call(manager, "rekey"):
            await manager._ready()
            loaded = await manager._load(session_id, None, manager.clock.now())
            if loaded is None:
                return "vanished"
            record = loaded.record
            if not codec.stale(record.state, loaded.events):
                return "current"
            first = record.event_count - len(loaded.events)
            events, _ = codec.open_events(session_id, loaded.events, first)
            plain = [
                encode_event(event, position, f"events[{position}]")
                for position, event in enumerate(events)
            ]
            check_event_sizes(plain, 0, manager.capabilities.max_event_bytes)
            sealed = codec.seal_events(session_id, events, 0, plain)
            state = codec.seal_state(session_id, codec.open_state(session_id, record.state))
            request = SaveRequest(
                record=replace(
                    record,
                    state=state,
                    version=record.version + 1,
                    expires_at=manager._expiry(record.updated_at),
                    event_count=len(sealed),
                ),
                expected_version=record.version,
                stored_event_count=record.event_count,
                keep=0,
                new_events=sealed,
                token=new_token(),
                expected_lineage=record.lineage,
            )
            try:
                await manager._save(request, manager.clock.now())
            except SessionNotFoundError:
                return "vanished"
            except SessionConflictError:
                if attempt >= retries:
                    raise
            else:
                return "rekeyed"
        await backoff(attempt)
    raise AssertionError("unreachable")  # pragma: no cover
