"""The codec between the manager and its backend: stored text as is, or sealed with a keyring.

`connect()` (or assigning `SessionManager.encryption`) picks one for a manager with
`select`: `PLAIN` stores the encoded JSON text as it is, `SealingCodec` encrypts event
content and metadata and the state (`agentsessions.encryption`). Every operation goes
through the codec it was given, so none of them asks whether encryption is on, and
only `SealingCodec` knows about envelopes and the shift of a session's sealed events.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ._errors import InvalidOptionError, SessionDecryptionError
from ._input import check_size
from ._models import Event
from ._records import Capabilities, EventRecord, SaveRequest
from ._sealed import envelope_of_text, sealed_capabilities

if TYPE_CHECKING:
    from ._hooks import BackendHooks
    from .encryption import Keyring as Keyring

__all__ = ["PLAIN", "Codec", "SealingCodec", "select"]


class Codec:
    """The plain codec: what the backend stores is the encoded text itself.

    Subclassed by `SealingCodec`; the methods say what each operation hands over and
    gets back, so that an operation is written once for both.
    """

    #: The keyring sealing what is stored (None: stored as it is).
    keyring: Keyring | None = None
    #: The backend's own capabilities while sealing (None: `capabilities` are its own).
    unsealed: Capabilities | None = None
    #: Whether stored text means the same under another session id, so that the engine
    #: may copy it between sessions (a fork); sealed text is bound to its session.
    portable: bool = True

    def seal_state(self, session_id: str, state_json: str) -> str:
        """The state as stored: *state_json* itself, or sealed when encrypting."""
        return state_json

    def open_state(self, session_id: str, stored: str) -> str:
        """The state JSON text of a stored state; raises `SessionDecryptionError`."""
        if envelope_of_text(stored) is not None:
            raise SessionDecryptionError(
                session_id,
                "state",
                "is encrypted, and this manager has no keyring: connect(url, "
                "encryption=Keyring(...)) with the keys it was written with",
            )
        return stored

    def seal_events(
        self,
        session_id: str,
        events: list[Event],
        start: int,
        records: list[EventRecord],
        shift: int = 0,
    ) -> list[EventRecord]:
        """*records* (encoded from ``events[start:]``) as stored: sealed when encrypting,
        each at its position plus *shift* (the session's: see `Keyring.open_events`)."""
        return records

    def open_events(
        self, session_id: str, events: list[Event], first: int
    ) -> tuple[list[Event], int | None]:
        """Loaded events (``events[0]`` at position *first*), decrypted when encrypting,
        and the shift they were sealed with (None: not known from these events)."""
        return events, None

    def kept_shift(self, known: int | None, keep: int) -> int | None:
        """The shift a save's new events are sealed with, after *keep* stored events
        whose shift is *known* (None: not known); None: `stored_shift` must tell."""
        return 0

    async def stored_shift(self, manager: BackendHooks, session_id: str) -> int:
        """The shift of a session's stored events, read from its last one: for a save
        that keeps events it did not load (``last_events=0``)."""
        return 0

    def seal_save(
        self, request: SaveRequest, events: list[Event], start: int, shift: int
    ) -> SaveRequest:
        """*request* as sent to the backend: sealed (new events at their position plus
        *shift*) when encrypting."""
        return request

    def open_archived(self, session_id: str, events: list[Event]) -> list[Event]:
        """Archived events as read back, decrypted when encrypting."""
        return events

    def check_rekey(self) -> None:
        """Raise `InvalidOptionError` unless this codec can rekey (it has a keyring)."""
        raise InvalidOptionError("rekey needs a manager with encryption")

    def stale(self, stored_state: str, events: list[Event]) -> bool:
        """Whether a stored session holds parts not sealed under the current key."""
        return False


#: The codec of a manager without a keyring.
PLAIN = Codec()


class SealingCodec(Codec):
    """The encrypting codec: event content and metadata and the state are sealed with
    *keyring* for *namespace*, and must fit the backend's own capabilities *unsealed*."""

    portable = False

    def __init__(self, keyring: Keyring, namespace: str, unsealed: Capabilities) -> None:
        self.keyring: Keyring = keyring
        self.unsealed: Capabilities = unsealed
        self._namespace = namespace

    def seal_state(self, session_id: str, state_json: str) -> str:
        sealed = self.keyring.seal_state(self._namespace, session_id, state_json)
        check_size(sealed, self.unsealed.max_state_bytes, "state (encrypted)")
        return sealed

    def open_state(self, session_id: str, stored: str) -> str:
        return self.keyring.open_state(self._namespace, session_id, stored)

    def seal_events(
        self,
        session_id: str,
        events: list[Event],
        start: int,
        records: list[EventRecord],
        shift: int = 0,
    ) -> list[EventRecord]:
        keyring, namespace = self.keyring, self._namespace
        limit = self.unsealed.max_event_bytes
        sealed = []
        for index, record in enumerate(records):
            data = keyring.seal_event(
                namespace, session_id, events[start + index], record.position + shift, record.data
            )
            # Cannot fail when the plaintext was checked against `capabilities`: a guard.
            check_size(data, limit, f"events[{start + index}] (encrypted)")
            sealed.append(EventRecord(record.position, data))
        return sealed

    def open_events(
        self, session_id: str, events: list[Event], first: int
    ) -> tuple[list[Event], int | None]:
        return self.keyring.open_events(self._namespace, session_id, events, first)

    def kept_shift(self, known: int | None, keep: int) -> int | None:
        return 0 if not keep else known

    async def stored_shift(self, manager: BackendHooks, session_id: str) -> int:
        tail = await manager._load(session_id, 1, manager.clock.now())
        if tail is None or not tail.events:
            return 0  # the save that follows finds it gone, or conflicts
        _, shift = self.open_events(session_id, tail.events, tail.record.event_count - 1)
        return 0 if shift is None else shift

    def seal_save(
        self, request: SaveRequest, events: list[Event], start: int, shift: int
    ) -> SaveRequest:
        session_id = request.record.session_id
        state = self.seal_state(session_id, request.record.state)
        return replace(
            request,
            record=replace(request.record, state=state),
            new_events=self.seal_events(session_id, events, start, request.new_events, shift),
        )

    def open_archived(self, session_id: str, events: list[Event]) -> list[Event]:
        return self.keyring.open_archived(self._namespace, session_id, events)

    def check_rekey(self) -> None:
        return None

    def stale(self, stored_state: str, events: list[Event]) -> bool:
        return bool(self.keyring.stale_parts(stored_state, events))


def select(manager: BackendHooks, keyring: Keyring | None) -> Codec:
    """The codec for *manager* with *keyring* (None: `PLAIN`), its ``capabilities``
    set to those of the plaintext whose sealed form fits the backend's own."""
    own = manager._codec.unsealed or manager.capabilities
    if keyring is None:
        manager.capabilities = own
        return PLAIN
    manager.capabilities = sealed_capabilities(own)
    return SealingCodec(keyring, manager.options.namespace, own)
