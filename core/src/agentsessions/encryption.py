"""Encryption at rest: every event's content and metadata and every state, on any backend.

``pip install "agentsessions[encryption]"``, then::

    from agentsessions import connect
    from agentsessions.encryption import Keyring

    manager = connect("postgresql://app@db/agents", encryption=Keyring.from_env())

The manager encrypts before any backend sees the data and decrypts after every read,
so every backend stores ciphertext the same way, and listing, ordering, paging, expiry
and the version checks keep working on what stays in clear: ids, owners, authors,
timestamps, versions and counts.

The cipher is AES-256-GCM (`cryptography`'s ``AESGCM``), authenticated encryption with
associated data. Each ciphertext is bound to its place: the key is derived per
namespace and session with HKDF-SHA256, and the associated data names the position and
the event's clear fields (id, author, timestamp), so a ciphertext copied to another
session, position or namespace, or an altered clear field, fails to decrypt with
`SessionDecryptionError` naming the session and the event, never garbage. Every
ciphertext names the id of its key, so a `Keyring` reads under several keys and writes
under one; `rekey` re-encrypts a store under the current key while it serves.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import re
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pydantic_core

try:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
except ImportError as exc:  # pragma: no cover - exercised by installs without the extra
    raise ImportError(
        "agentsessions.encryption needs the cryptography package: "
        'pip install "agentsessions[encryption]"'
    ) from exc

from ._errors import InvalidOptionError, SessionDecryptionError
from ._models import Event
from ._records import decode_events, to_micros
from ._rekey import rekey_session
from ._sealed import MARKER
from ._sealed import envelope_of as _envelope_of
from ._sealed import envelope_of_text as _envelope_of_text

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = [
    "ENVIRONMENT_VARIABLE",
    "KEY_BYTES",
    "MARKER",
    "Keyring",
    "RekeyProgress",
    "generate_key",
    "rekey",
]

#: The environment variable `Keyring.from_env` reads by default.
ENVIRONMENT_VARIABLE = "AGENTSESSIONS_ENCRYPTION_KEYS"
#: AES-256: a key is 32 bytes (given as base64 text in the environment).
KEY_BYTES = 32
_NONCE_BYTES = 12
_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_VERSION = "agentsessions-aes256gcm-1"
# Derived keys of recently used sessions, so a session's reads and saves derive once.
_CACHE_SIZE = 4096

KeyFetcher = Callable[[str], bytes]


def generate_key() -> str:
    """A new random AES-256 key as base64 text, the form `Keyring.from_env` reads."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode()


def _check_key_id(key_id: object) -> str:
    if type(key_id) is not str or not _KEY_ID.match(key_id):
        raise InvalidOptionError(
            f"key id {key_id!r} must be 1 to 64 characters of A-Z a-z 0-9 _ . -"
        )
    return key_id


def _check_key(key_id: str, key: object) -> bytes:
    # The message names the key id and the length, never a byte of the key.
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise InvalidOptionError(
            f"key {key_id!r} must be bytes (32 of them), not {type(key).__name__}"
        )
    raw = bytes(key)
    if len(raw) != KEY_BYTES:
        raise InvalidOptionError(
            f"key {key_id!r} is {len(raw)} bytes long; AES-256 needs exactly {KEY_BYTES}"
        )
    return raw


class Keyring:
    """The keys a manager encrypts with: one *current* key for writing, any number for reading.

    ``Keyring({"k2": key2, "k1": key1}, current="k2")`` holds the keys themselves (32
    bytes each); ``Keyring(current="k2", fetch=unwrap)`` asks *fetch* for a key the
    first time a key id is needed (for a KMS: *fetch* receives the key id and returns
    the 32 key bytes; it is called once per id and the result kept), and
    `from_env` reads them from an environment variable. Keys never come from the URL,
    and neither they nor anything derived from them appear in a ``repr``, a log line or
    an error message.

    ``accept_plaintext=True`` reads events and states stored without encryption (a
    store written before encryption was turned on) as they are, until `rekey`
    encrypts them. Off by default: whoever can write to the store could otherwise slip
    in unencrypted events that a reader takes for genuine.
    """

    def __init__(
        self,
        keys: Mapping[str, bytes] | None = None,
        *,
        current: str | None = None,
        fetch: KeyFetcher | None = None,
        accept_plaintext: bool = False,
    ) -> None:
        given = dict(keys or {})
        if current is None:
            if len(given) != 1:
                raise InvalidOptionError(
                    "Keyring needs current= (the id of the key to write with) unless it "
                    "holds exactly one key"
                )
            current = next(iter(given))
        self._current = _check_key_id(current)
        self._keys: dict[str, bytes] = {
            _check_key_id(key_id): _check_key(key_id, key) for key_id, key in given.items()
        }
        if fetch is not None and not callable(fetch):
            raise InvalidOptionError(f"fetch must be callable, not {type(fetch).__name__}")
        if fetch is None and self._current not in self._keys:
            raise InvalidOptionError(
                f"the current key {self._current!r} is not among the keys given "
                f"({', '.join(sorted(self._keys)) or 'none'})"
            )
        self._fetch = fetch
        self.accept_plaintext = bool(accept_plaintext)
        self._lock = threading.Lock()
        self._derived: dict[tuple[str, str, str], AESGCM] = {}

    @classmethod
    def from_env(
        cls,
        variable: str = ENVIRONMENT_VARIABLE,
        *,
        accept_plaintext: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> Keyring:
        """The keys in *variable*: ``"k2:BASE64,k1:BASE64"``, the first one current.

        Each entry is a key id, a colon and a 32-byte key in base64 (`generate_key`
        makes one). To rotate, put the new key first and keep the old ones after it
        until `rekey` has run.
        """
        source = os.environ if environ is None else environ
        raw = source.get(variable, "").strip()
        if not raw:
            raise InvalidOptionError(
                f"the environment variable {variable} is not set: it holds the encryption "
                'keys as "keyid:BASE64KEY,..." (the first one encrypts)'
            )
        keys: dict[str, bytes] = {}
        order: list[str] = []
        for number, entry in enumerate(raw.split(","), 1):
            key_id, colon, text = entry.strip().partition(":")
            if not colon:
                raise InvalidOptionError(
                    f"{variable}: entry {number} is not of the form keyid:BASE64KEY"
                )
            key_id = _check_key_id(key_id.strip())
            if key_id in keys:
                raise InvalidOptionError(f"{variable}: key id {key_id!r} is given twice")
            try:
                key = base64.b64decode(text.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise InvalidOptionError(
                    f"{variable}: key {key_id!r} is not valid base64"
                ) from None
            keys[key_id] = _check_key(key_id, key)
            order.append(key_id)
        return cls(keys, current=order[0], accept_plaintext=accept_plaintext)

    @property
    def current(self) -> str:
        """The id of the key new ciphertexts are written with."""
        return self._current

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of the keys held now (with *fetch*, those fetched so far too)."""
        return tuple(sorted(self._keys))

    def __repr__(self) -> str:
        source = ", fetch=..." if self._fetch is not None else ""
        return f"<Keyring current={self._current!r} keys={list(self.key_ids)}{source}>"

    # -- used by SessionManager -------------------------------------------------------

    def _key(self, key_id: str, session_id: str, part: str) -> bytes:
        key = self._keys.get(key_id)
        if key is not None:
            return key
        if self._fetch is None:
            raise SessionDecryptionError(
                session_id,
                part,
                f"encrypted with key {key_id!r}, which the keyring does not hold "
                f"(it holds {', '.join(self.key_ids)})",
                key_id,
            )
        try:
            fetched = self._fetch(key_id)
        except Exception as exc:
            raise SessionDecryptionError(
                session_id,
                part,
                f"the keyring's fetch could not provide key {key_id!r} ({type(exc).__name__})",
                key_id,
            ) from exc
        key = _check_key(key_id, fetched)
        with self._lock:
            self._keys[key_id] = key
        return key

    def _aead(self, key_id: str, namespace: str, session_id: str, part: str) -> AESGCM:
        place = (key_id, namespace, session_id)
        aead = self._derived.get(place)
        if aead is None:
            master = self._key(key_id, session_id, part)
            info = pydantic_core.to_json([_VERSION, namespace, session_id])
            derived = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info)
            aead = AESGCM(derived.derive(master))
            with self._lock:
                if len(self._derived) >= _CACHE_SIZE:
                    self._derived.clear()
                self._derived[place] = aead
        return aead

    def _seal(self, namespace: str, session_id: str, plaintext: bytes, aad: bytes) -> str:
        """``nonce + ciphertext`` in base64, under the current key (its id not included)."""
        aead = self._aead(self._current, namespace, session_id, "writing")
        nonce = os.urandom(_NONCE_BYTES)
        return base64.b64encode(nonce + aead.encrypt(nonce, plaintext, aad)).decode()

    def _open(
        self, namespace: str, session_id: str, envelope: object, aad: bytes, part: str
    ) -> bytes:
        if type(envelope) is not str:
            raise SessionDecryptionError(session_id, part, "holds a malformed ciphertext")
        key_id, colon, text = envelope.partition(":")
        if not colon:
            raise SessionDecryptionError(session_id, part, "holds a malformed ciphertext")
        aead = self._aead(key_id, namespace, session_id, part)
        try:
            blob = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise SessionDecryptionError(
                session_id, part, "holds a malformed ciphertext", key_id
            ) from None
        try:
            return aead.decrypt(blob[:_NONCE_BYTES], blob[_NONCE_BYTES:], aad)
        except InvalidTag:
            raise SessionDecryptionError(
                session_id,
                part,
                f"the ciphertext (key {key_id!r}) does not authenticate: it was altered, "
                "or copied from another session, position or namespace",
                key_id,
            ) from None

    def seal_state(self, namespace: str, session_id: str, state_json: str) -> str:
        """The stored form of a state (JSON text): ``{MARKER: ciphertext}``, as JSON text."""
        sealed = self._seal(namespace, session_id, state_json.encode(), _STATE_AAD)
        return pydantic_core.to_json({MARKER: f"{self._current}:{sealed}"}).decode()

    def open_state(self, namespace: str, session_id: str, stored: str) -> str:
        """The state JSON text that `seal_state` sealed into *stored*."""
        envelope = _envelope_of_text(stored)
        if envelope is None:
            if self.accept_plaintext:
                return stored
            raise SessionDecryptionError(session_id, "state", _NOT_ENCRYPTED)
        return self._open(namespace, session_id, envelope, _STATE_AAD, "state").decode()

    def seal_event(
        self,
        namespace: str,
        session_id: str,
        event: Event,
        position: int,
        encoded: str | None = None,
    ) -> str:
        """The stored JSON text of *event*, sealed at *position*: its content and metadata
        encrypted, the whole event authenticated with its place.

        *position* is the event's position in the session plus the session's shift (see
        `open_events`); it is stored in clear in the envelope, ``kid:position:base64``.
        *encoded* is the event's own JSON (``event.model_dump_json()``), if already made:
        the whole of it is sealed, so a read decodes every event in one pass.
        """
        fields = event.__dict__
        plaintext = (event.model_dump_json() if encoded is None else encoded).encode()
        aad = _event_aad(position, fields["id"], fields["author"], fields["timestamp"])
        sealed = self._seal(namespace, session_id, plaintext, aad)
        wrapper = Event.model_construct(
            id=fields["id"],
            author=fields["author"],
            content=None,
            timestamp=fields["timestamp"],
            metadata={MARKER: f"{self._current}:{position}:{sealed}"},
        )
        return wrapper.model_dump_json()

    def open_archived(self, namespace: str, session_id: str, events: list[Event]) -> list[Event]:
        """Archived events (removed by a compaction), decrypted: each is authenticated
        against the session and the position it was sealed at, which the archive does
        not keep in order across compactions."""
        return self.open_events(namespace, session_id, events, 0, archived=True)[0]

    def open_events(
        self,
        namespace: str,
        session_id: str,
        events: list[Event],
        first_position: int,
        *,
        archived: bool = False,
    ) -> tuple[list[Event], int | None]:
        """The events a backend loaded (*first_position* being that of ``events[0]``),
        decrypted, each one authenticated against its place and clear fields; and the
        session's shift.

        Each event was sealed at its position plus the session's shift, the same for
        all its events: 0 until a compaction replaces a prefix of the history with fewer
        or more events and the positions of the events it keeps move. So a ciphertext
        moved to another position, or events swapped or reordered, stand out: their
        shifts differ from the others'. The shift is None when no event was encrypted.
        """
        if not events:
            return events, None
        plaintexts: list[bytes] = []
        unencrypted: list[int] = []
        aeads: dict[str, AESGCM] = {}
        shift: int | None = None
        for index, event in enumerate(events):
            metadata = event.metadata
            envelope = (
                metadata.get(MARKER) if event.content is None and len(metadata) == 1 else None
            )
            position = first_position + index
            if type(envelope) is not str:
                if envelope is not None or not self.accept_plaintext:
                    problem = "holds a malformed ciphertext" if envelope else _NOT_ENCRYPTED
                    raise SessionDecryptionError(session_id, _event_part(position, event), problem)
                unencrypted.append(index)
                continue
            key_id, _, rest = envelope.partition(":")
            place, _, text = rest.partition(":")
            try:
                sealed_at = int(place)
            except ValueError:
                raise SessionDecryptionError(
                    session_id, _event_part(position, event), "holds a malformed ciphertext"
                ) from None
            if shift is None or archived:
                shift = sealed_at - position
            elif sealed_at - position != shift:
                raise SessionDecryptionError(
                    session_id,
                    _event_part(position, event),
                    "is out of place: it and the events before it were encrypted for other "
                    "relative positions (moved, swapped, reordered or removed from between)",
                    key_id,
                )
            aead = aeads.get(key_id)
            if aead is None:
                part = _event_part(position, event)
                aead = aeads[key_id] = self._aead(key_id, namespace, session_id, part)
            try:
                blob = binascii.a2b_base64(text)
                aad = _event_aad(sealed_at, event.id, event.author, event.timestamp)
                plaintexts.append(aead.decrypt(blob[:_NONCE_BYTES], blob[_NONCE_BYTES:], aad))
            except (InvalidTag, binascii.Error, ValueError):
                raise SessionDecryptionError(
                    session_id,
                    _event_part(position, event),
                    f"the ciphertext (key {key_id!r}) does not authenticate: it was altered, "
                    "or copied from another session, position or namespace",
                    key_id,
                ) from None
        opened = decode_events(plaintexts)
        for index in unencrypted:
            opened.insert(index, events[index])
        return opened, shift

    def stale_parts(self, state: str, events: list[Event]) -> int:
        """How many of a stored session's ciphertexts (state and events, as a backend
        loaded them) are not under the current key: plaintext ones count too."""
        current = self._current
        stale = 0
        envelope = _envelope_of_text(state)
        if not (isinstance(envelope, str) and envelope.startswith(current + ":")):
            stale += 1
        for event in events:
            envelope = _envelope_of(event.metadata) if event.content is None else None
            if not (isinstance(envelope, str) and envelope.startswith(current + ":")):
                stale += 1
        return stale


_STATE_AAD = pydantic_core.to_json([_VERSION, "state"])
_EVENT_AAD = f"{_VERSION}/event/".encode()
_NOT_ENCRYPTED = (
    "is stored unencrypted, and the keyring does not accept plaintext (written before "
    "encryption was turned on? Keyring(..., accept_plaintext=True) reads it until "
    "agentsessions rekey has encrypted it)"
)


def _event_aad(position: int, event_id: str, author: str, timestamp: Any) -> bytes:
    # The id's length first, so that no id/author split reads as another.
    name = event_id.encode()
    prefix = b"%d/%d/%d/" % (position, to_micros(timestamp), len(name))
    return _EVENT_AAD + prefix + name + author.encode()


def _event_part(position: int, event: Event) -> str:
    return f"event {position} (id {event.id!r})"  # archived: its index in the archive


# -- rekey ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RekeyProgress:
    """Where a `rekey` run stands: sessions looked at, of those listed when it started.

    ``rekeyed``: re-encrypted under the current key now; ``current``: already entirely
    under it (a resumed run skips them); ``vanished``: deleted or expired meanwhile.
    """

    done: int
    total: int
    rekeyed: int
    current: int
    vanished: int


async def rekey(
    manager: SessionManager,
    *,
    page_size: int = 100,
    concurrency: int = 8,
    retries: int = 64,
    progress: Callable[[RekeyProgress], None] | None = None,
) -> RekeyProgress:
    """Re-encrypt every session of *manager*'s namespace under its keyring's current key.

    Safe while the service runs: each session is re-encrypted by an ordinary save (a
    rewrite of its events and state, keeping its ``updated_at`` and expiry, so a rekey
    is not activity) that lands only if the session's version is still the one read;
    a save racing it wins, and the rekey reads the session again and retries, so no
    save is ever lost. Resumable: a session already entirely under the current key is
    only read, so running it again after an interruption finishes the rest.
    *progress* is called after each session.
    """
    keyring = manager.encryption
    if keyring is None:
        raise InvalidOptionError(
            "rekey needs a manager with encryption: connect(url, encryption=Keyring(...))"
        )
    counts = {"rekeyed": 0, "current": 0, "vanished": 0}
    total = 0
    async for page in _pages(manager, page_size):
        total += len(page)
    done = 0
    gate = asyncio.Semaphore(max(1, concurrency))

    def snapshot() -> RekeyProgress:
        return RekeyProgress(done, total, counts["rekeyed"], counts["current"], counts["vanished"])

    async def one(session_id: str) -> None:
        nonlocal done
        async with gate:
            outcome = await rekey_session(manager, session_id, retries)
        counts[outcome] += 1
        done += 1
        if progress is not None:
            progress(snapshot())

    # Page by page, so memory stays flat however large the store; sessions created
    # after the count are under the current key already, so none is missed.
    async for page in _pages(manager, page_size):
        results = await asyncio.gather(*(one(s) for s in page), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
    return RekeyProgress(done, max(total, done), *counts.values())


async def _pages(manager: SessionManager, page_size: int) -> AsyncIterator[list[str]]:
    cursor: str | None = None
    while True:
        page = await manager.list_sessions(limit=page_size, cursor=cursor)
        yield [item.session_id for item in page.items]
        if page.next_cursor is None:
            return
        cursor = page.next_cursor
