"""`RedisSessionManager`: sessions in Redis or a Redis Cluster, one script per operation.

A session is two keys sharing one hash tag (see `_keys`), so each operation on it is
one server-side script on one node: atomic, and one round trip (on a single server, a
load of thousands of events takes a second one, a plain MULTI/EXEC: see
`_load_plainly`). The listing indexes
are sorted sets; on a single server the scripts maintain them in the same atomic
step, in a cluster they live on other nodes and are maintained right around the
session write (see README: "Listing in a cluster").
"""

from __future__ import annotations

import asyncio
import secrets
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, TypeVar

import pydantic_core  # pydantic's own parser, a dependency of agentsessions (pydantic)
from agentsessions import (
    BackendAuthenticationError,
    BackendReadOnlyError,
    BackendTimeoutError,
    BackendUnavailableError,
    InvalidInputError,
    InvalidOptionError,
    SessionExistsError,
    SessionNotFoundError,
    SessionOwnershipError,
    SessionSummary,
    StorageFullError,
)
from agentsessions.backend import (
    Capabilities,
    CompactRequest,
    ErrorRule,
    EventRecord,
    Finding,
    ForkRequest,
    LoadedSession,
    ManagerOptions,
    RewindRequest,
    SaveRequest,
    SessionManager,
    SessionRecord,
    decode_events,
    decode_record,
    expiry_millis,
    fork_by_copy,
    fork_fields,
    fork_origin,
    refused,
    scrub_secret,
    to_micros,
    unstamp_lineage,
)
from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, SentinelConnectionPool
from redis.backoff import ExponentialWithJitterBackoff
from redis.commands.core import AsyncScript

from . import _diagnosis, _scripts
from ._client import CLUSTER_SCHEMES, SENTINEL_SCHEMES, check_url, make_client
from ._keys import KeyLayout, global_member, split_global_member
from ._options import DRIVER_QUERY_PARAMS, RedisOptions, parse_address_map

__all__ = ["RedisSessionManager"]

T = TypeVar("T")
E = TypeVar("E")

#: The most events the load script returns itself on a single server; a load of more
#: reads them with plain commands (`_scripts.LOAD`). Below it, the script's one round
#: trip costs less than a second one; above it, copying the list through Lua costs more.
#: In a cluster the script returns them all: the oldest redis-py this backend supports
#: has no transactions in cluster pipelines.
INLINE_EVENTS = 1000


def _demoted(exc: BaseException) -> bool:
    return str(exc) == "The previous master is now a slave"  # redis.asyncio.sentinel's


def _sentinels_refused(exc: BaseException) -> bool:
    text = str(exc)
    return "AuthenticationError" in text and not any(
        other in text for other in ("ConnectionError", "TimeoutError")
    )


# Errors that mean "the server could not be reached or cannot serve right now".
_DRIVER_ERRORS = (
    # At maxmemory a script's first write is refused, so nothing was written.
    ErrorRule((redis_errors.OutOfMemoryError,), StorageFullError),
    # min-replicas-to-write refuses a script's first write the same way: nothing written.
    ErrorRule((redis_errors.ResponseError,), when=lambda exc: str(exc).startswith("NOREPLICAS")),
    ErrorRule((redis_errors.TimeoutError, asyncio.TimeoutError), BackendTimeoutError),
    ErrorRule(
        (redis_errors.AuthenticationError, redis_errors.AuthenticationWrongNumberOfArgsError),
        BackendAuthenticationError,
    ),
    # A replica refuses a script's first write: nothing written. Through Sentinel,
    # redis-py turns that READONLY into a ConnectionError and asks the Sentinels again.
    ErrorRule((redis_errors.ReadOnlyError,), BackendReadOnlyError),
    ErrorRule((redis_errors.ConnectionError,), BackendReadOnlyError, when=_demoted),
    # Every Sentinel refused its password (each one's error is in the message).
    ErrorRule((MasterNotFoundError,), BackendAuthenticationError, when=_sentinels_refused),
    ErrorRule(
        (
            redis_errors.ConnectionError,  # also AuthenticationError, BusyLoadingError, pool
            redis_errors.ClusterError,  # ClusterDownError, MasterDownError
            redis_errors.TryAgainError,
            redis_errors.RedisClusterException,  # no reachable startup node, slot not covered
            OSError,
        )
    ),
    # The cluster client's reconnect path can use a connection another task just
    # dropped ("'NoneType' object has no attribute 'writelines'"): a lost connection.
    ErrorRule((AttributeError,), raised_in="redis."),
)

# How many scripts delete_user / purge keep in flight at once.
_FANOUT = 64
# A pool size no burst reaches: no limit in practice.
_UNBOUNDED_POOL = 2**31 - 1
_SCAN_BATCH = 500


@dataclass(frozen=True, slots=True)
class _Entry:
    """One listing index entry, as read from a sorted set."""

    index: str
    member: bytes
    score: int
    session_id: bytes
    user_id: bytes | None


@dataclass(frozen=True, slots=True)
class _Fix:
    """Index upkeep found by a reader: move *entry* to *new_score*, or drop it (None)."""

    entry: _Entry
    new_score: int | None


class RedisSessionManager(SessionManager):
    """Sessions in Redis (``redis://``, ``rediss://``, ``redis+unix://``), a Redis Cluster
    (``redis+cluster://host:port,host:port``) or a primary found by Redis Sentinel
    (``redis+sentinel://host:26379,host:26379/service/db``), through redis.asyncio."""

    Options: ClassVar[type[ManagerOptions]] = RedisOptions
    driver_errors = _DRIVER_ERRORS
    driver_query_params: ClassVar[frozenset[str]] = DRIVER_QUERY_PARAMS
    capabilities = Capabilities(
        persistent=True, shared=True, ttl=True, namespaces=True, compaction=True, branching=True
    )
    db_system = "redis"
    default_port = 6379

    #: In a cluster a create writes its index entries before the session itself, so a
    #: reader may see an entry whose session is about to appear; readers leave entries
    #: younger than this alone (they only filter them out). Microseconds.
    cluster_index_grace_us: int = 2_000_000

    options: RedisOptions

    def __init__(self, url: str, options: ManagerOptions | None = None) -> None:
        super().__init__(url, options)
        scheme = url.partition("://")[0].lower()
        if scheme == "unix":
            warnings.warn(
                "the unix:// URL scheme is deprecated: use redis+unix:// (same form)",
                DeprecationWarning,
                stacklevel=4,
            )
        self.cluster = scheme in CLUSTER_SCHEMES
        if self.cluster and self.options.wait_replicas:
            # WAIT counts the replicas of the node the connection talks to, and a write
            # here may span several nodes: not supported rather than half-true.
            raise InvalidOptionError("option 'wait_replicas' is not supported in a Redis Cluster")
        if self.options.address_map and not (self.cluster or scheme in SENTINEL_SCHEMES):
            raise InvalidOptionError(
                "option 'address_map' applies only to redis+cluster:// and redis+sentinel:// URLs"
            )
        self.db = check_url(url)  # a malformed URL fails at connect(), not at first use
        self.keys = KeyLayout(self.options.namespace)
        # redis-py's connections belong to the loop that opened them: one client
        # (and its registered scripts) per event loop.
        self._links = self.per_loop(self._new_link, _close_link)

    # -- plumbing -----------------------------------------------------------------------

    @property
    def client(self) -> Redis | RedisCluster:
        """The running event loop's redis-py client (for tests and tools), once opened."""
        try:
            return self._links.current().client
        except RuntimeError:
            raise RuntimeError(f"{self!r} is not open in this event loop") from None

    @property
    def _link(self) -> _Link:
        return self._links.current()

    async def _write(
        self,
        script: AsyncScript,
        keys: Sequence[str],
        args: list[Any],
        wrote: Callable[[Any], bool],
    ) -> Any:
        """Run a script that writes a session; with ``wait_replicas``, then WAIT for them.

        WAIT counts acknowledgements of the writes made on its own connection, so it is
        pipelined with the script: one connection, one round trip. *wrote(result)* says
        whether the script wrote anything; one that refused (a conflict, say) raises
        its own error whatever the replicas did.
        """
        wanted = self.options.wait_replicas
        if not wanted:
            return await script(keys, args)
        waited = self._remaining(self.options.wait_timeout)
        # Never 0, which would mean "wait forever".
        milliseconds = max(1, int(waited * 1000))
        client = self.client
        assert isinstance(client, Redis)  # never a cluster: see __init__
        async with client.pipeline(transaction=False) as pipe:
            await script(keys, args, client=pipe)
            pipe.execute_command("WAIT", wanted, milliseconds)
            result, acknowledged = await pipe.execute()
        if wrote(result) and int(acknowledged) < wanted:
            raise BackendUnavailableError(
                self.url,
                f"the write reached the primary, but only {acknowledged} of {wanted} "
                f"replicas (wait_replicas) acknowledged it within {waited:.3g} s: it may be "
                "lost if the primary fails now",
            )
        return result

    async def _new_link(self) -> _Link:
        o = self.options
        # Retries (a dropped connection, a failover) happen inside the call's deadline,
        # which cuts them short; each wait alone is bounded by the timeout too.
        retry = Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.5), o.retries)
        settings: dict[str, Any] = {
            "socket_connect_timeout": o.bounded(o.connect_timeout),
            "decode_responses": False,
            "retry": retry,
        }
        # Only when asked for: every call already runs under its deadline (which cancels
        # it, and redis-py then drops the connection), while a socket timeout makes
        # redis-py wrap each send in a task and each read in a timer. None is passed
        # explicitly: redis-py 8 otherwise applies a default of its own.
        asked = o.socket_timeout is not None and o.socket_timeout < o.timeout
        settings["socket_timeout"] = o.socket_timeout if asked else None
        # redis-py's pools hold 100 connections (per node in a cluster) by default and
        # raise MaxConnectionsError, rather than wait, when a burst needs more: one
        # delete_user fans out past that. Without a limit asked for, there is none.
        settings["max_connections"] = (
            _UNBOUNDED_POOL if o.max_connections is None else o.max_connections
        )
        try:
            address_map = o.address_map and parse_address_map(o.address_map)
            client = make_client(self._url, settings, address_map or None)
        except (ValueError, TypeError, redis_errors.RedisClusterException) as exc:
            reason = scrub_secret(str(exc), self._url)
            raise InvalidOptionError(f"cannot use {self.url}: {reason}") from None
        try:
            if isinstance(client, RedisCluster):
                await client.initialize()
            else:
                await client.ping()
        except redis_errors.ResponseError as exc:
            await client.aclose()
            if "DB index is out of range" in str(exc):
                raise InvalidOptionError(
                    f"option 'db': {self.url} has no database {self.db}"
                ) from None
            raise self._unavailable(exc) from None
        except BaseException:
            await client.aclose()
            raise
        return _Link(
            client,
            load=client.register_script(_scripts.LOAD),
            load_since=client.register_script(_scripts.LOAD_SINCE),
            create=client.register_script(_scripts.CREATE),
            save=client.register_script(_scripts.SAVE),
            delete=client.register_script(_scripts.DELETE),
            move=client.register_script(_scripts.MOVE_INDEX_ENTRY),
            compact=client.register_script(_scripts.COMPACT),
            archived=client.register_script(_scripts.ARCHIVED),
            fork=client.register_script(_scripts.FORK),
            rewind=client.register_script(_scripts.REWIND),
        )

    async def _diagnose(self, now: datetime) -> list[Finding]:
        found = await _diagnosis.diagnose(self.client, self.options.ttl, self.options.wait_replicas)
        return [*found, _diagnosis.encryption(self.encryption is not None)]

    # -- one session --------------------------------------------------------------------

    async def _create(self, record: SessionRecord, now: datetime) -> None:
        await self._insert(record, [], now)

    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        await self._insert(record, events, now)

    async def _insert(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        """The one script that writes a new session: empty (create) or whole (restore)."""
        session_id, user_id = record.session_id, record.user_id
        keys = self.keys.session(session_id)
        created = to_micros(record.created_at)
        member = global_member(session_id, user_id)
        user_index = self.keys.user_index(user_id) if user_id is not None else ""
        args: list[Any] = [
            to_micros(now),
            secrets.token_hex(16),
            session_id,
            user_id or "",
            record.state,
            created,
            *_expiry_args(record.expires_at),
            member,
            user_index,
            record.version,
            to_micros(record.updated_at),
            record.event_count,
            record.lineage,
            *self._fork_args(record),
        ]
        args.extend(event.data for event in events)
        if not self.cluster:
            index_keys = [self.keys.index] + ([user_index] if user_index else [])
            script_keys = [*keys.every, *index_keys]
            result = await self._write(
                self._link.create, script_keys, args, lambda r: bool(r[0] == 1)
            )
            if result[0] != 1:
                raise SessionExistsError(session_id)
            return
        # Cluster: the index entries first, so a crash after them leaves at worst an entry
        # readers filter out, never a session that listing and delete_user cannot find.
        entries = self._entries_of(
            session_id.encode(), None if user_id is None else user_id.encode(), created
        )
        if record.forked_from is not None:
            fork_index = self.keys.fork_index(record.forked_from.session_id)
            owner = None if user_id is None else user_id.encode()
            entries.append(
                _Entry(fork_index, session_id.encode(), created, session_id.encode(), owner)
            )
        client = self.client
        added = await asyncio.gather(
            *(client.zadd(e.index, {e.member: e.score}, nx=True) for e in entries)
        )
        result = await self._link.create(keys.every, args)
        if result[0] == 1:
            # NX kept an older entry's score, and a concurrent reader may have dropped
            # ours while the session did not exist yet: set the final score now.
            await asyncio.gather(*(client.zadd(e.index, {e.member: e.score}) for e in entries))
            if len(result) > 1:
                await self._drop_replaced(session_id.encode(), result, entries)
            return
        await self._apply_fixes(
            [_Fix(e, None) for e, was_added in zip(entries, added, strict=True) if was_added]
        )
        raise SessionExistsError(session_id)

    async def _drop_replaced(
        self, session_id: bytes, replaced: list[Any], kept: list[_Entry]
    ) -> None:
        """Drop the index entries of the expired life a cluster create replaced
        (``replaced``: the CREATE script's {1, owner, created_at, fork index}), but those
        the new life shares with it (the same owner: the same members, now its score)."""
        fork_index = replaced[3] if len(replaced) > 3 else None
        stale = self._life_entries(session_id, replaced[1], int(replaced[2]), fork_index)
        ours = {(entry.index, entry.member) for entry in kept}
        for entry in stale:
            if (entry.index, entry.member) not in ours:
                await self._apply_fixes([_Fix(entry, None)])

    def _fork_args(self, record: SessionRecord) -> tuple[str | int, ...]:
        """The CREATE script's fork origin arguments ("" each for a session that is no fork)."""
        source, version, event_id = fork_fields(record)
        if source is None:
            return ("", "", "", "")
        return (source, version or "", event_id or "", self.keys.fork_index(source))

    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        if self.cluster:
            # The two sessions hash to two slots, which no script may touch together.
            return await fork_by_copy(self, request, now)
        source_id, new_id = request.source_id, request.session_id
        source, new = self.keys.session(source_id), self.keys.session(new_id)
        through = request.through_event_id
        prefix = "" if through is None else '{"id":' + pydantic_core.to_json(through).decode() + ","
        keys = [
            source.hash,
            source.events,
            new.hash,
            new.events,
            new.archive,
            self.keys.index,
            self.keys.fork_index(source_id),
            new.tokens,
        ]
        args: list[Any] = [
            to_micros(now),
            secrets.token_hex(16),
            new_id,
            request.user_id or "",
            request.state or "",
            to_micros(request.created_at),
            *_expiry_args(request.expires_at),
            request.lineage,
            prefix,
            through or "",
            "1" if request.state is None else "",
        ]
        result = await self._write(self._link.fork, keys, args, lambda r: int(r[0]) == 1)
        verdict = int(result[0])
        if verdict == -1:
            raise SessionNotFoundError(source_id)
        if verdict == -2:
            raise SessionOwnershipError(source_id, request.user_id or "")
        if verdict == -3:
            raise InvalidInputError(f"session {source_id!r} holds no event with id {through!r}")
        if verdict == -4:
            raise SessionExistsError(new_id)
        stored_owner = None if result[1] is None else result[1].decode()
        return SessionRecord(
            session_id=new_id,
            user_id=stored_owner,
            state=result[4].decode(),
            version=1,
            created_at=request.created_at,
            updated_at=request.created_at,
            expires_at=request.expires_at,
            event_count=int(result[3]),
            lineage=request.lineage,
            forked_from=fork_origin(source_id, int(result[2]), through),
        )

    async def _rewind(self, request: RewindRequest, now: datetime) -> None:
        keys = self.keys.session(request.session_id)
        args: list[Any] = [
            to_micros(now),
            request.expected_version,
            request.token,
            request.keep,
            request.version,
            to_micros(request.updated_at),
            *_expiry_args(request.expires_at),
            "1" if request.archive else "",
            request.lineage,
            request.expected_lineage,
        ]
        result = await self._write(self._link.rewind, keys.every, args, lambda r: r == 1)
        if result != 1:
            raise refused(request, live=result != 0)

    async def _list_forks(
        self,
        source_id: str,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        index = self.keys.fork_index(source_id)
        position = None if after is None else (to_micros(after[0]), after[1].encode())
        now_us = to_micros(now)
        wanted_owner = None if user_id is None else user_id.encode()
        found: list[SessionSummary] = []
        fixes: list[_Fix] = []
        while len(found) < limit:
            fetch = limit - len(found) + 4
            entries = await self._index_page(index, None, position, fetch)
            if not entries:
                break
            records = await self._read_records([e.session_id for e in entries])
            for entry, fields in zip(entries, records, strict=True):
                if fields is None or fields[0] is None or fields[9] != source_id.encode():
                    # Gone, or the id now holds another session: a leftover entry.
                    if self._may_drop(entry, now_us):
                        fixes.append(_Fix(entry, None))
                    continue
                expires = fields[6]
                if int(fields[4] or 0) != entry.score or (
                    expires is not None and int(expires) <= now_us
                ):
                    continue
                if wanted_owner is not None and fields[1] != wanted_owner:
                    continue
                found.append(_record(fields).summary())
            last = entries[-1]
            position = (last.score, last.session_id)
            if len(entries) < fetch:
                break
        await self._apply_fixes(fixes)
        return found[:limit]

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        keys = self.keys.session(session_id)
        wanted = -1 if last_events is None else last_events
        inline = -1 if self.cluster else INLINE_EVENTS
        result = await self._link.load([keys.hash, keys.events], [to_micros(now), wanted, inline])
        if result is None:
            return None
        if len(result) == 2:
            fields, texts = result
            return LoadedSession(_loaded_record(fields), decode_events(texts))
        return await self._load_plainly(keys.hash, keys.events, wanted, now)

    async def _load_plainly(
        self, hash_key: str, events_key: str, wanted: int, now: datetime
    ) -> LoadedSession | None:
        """The record and the *wanted* newest events (-1: all) in one MULTI/EXEC.

        For more events than `INLINE_EVENTS`, on a single server (never in a cluster, see
        `INLINE_EVENTS`): the load script said so, and the session may have changed,
        expired or gone since, so the record is read again with the events, atomically,
        and checked here as the script would.
        """
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hmget(hash_key, _scripts.HASH_FIELDS)
            pipe.lrange(events_key, 0 if wanted < 0 else -wanted, -1)
            fields, texts = await pipe.execute()
        expires = fields[6]
        if fields[0] is None or (expires is not None and int(expires) <= to_micros(now)):
            return None
        return LoadedSession(_record(fields), decode_events(texts))

    async def _load_since(
        self, session_id: str, event_count: int, lineage: str, now: datetime
    ) -> LoadedSession | None:
        keys = self.keys.session(session_id)
        result = await self._link.load_since(
            [keys.hash, keys.events], [to_micros(now), event_count, lineage]
        )
        if result is None:
            return None
        fields, texts = result
        return LoadedSession(_loaded_record(fields), decode_events(texts))

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        record = request.record
        keys = self.keys.session(record.session_id)
        expected_lineage = request.expected_lineage
        # The script derives the rest: the event count (keep plus the new events), the
        # PEXPIREAT from expires_at, and the lineage when it is the expected one.
        args: list[Any] = [
            to_micros(now),
            request.expected_version,
            request.token,
            request.keep,
            record.state,
            record.version,
            to_micros(record.updated_at),
            "" if record.expires_at is None else to_micros(record.expires_at),
            "" if record.lineage == expected_lineage else record.lineage,
            expected_lineage,
        ]
        args.extend(event.data for event in request.new_events)
        result = await self._write(self._link.save, keys.every, args, lambda r: bool(r == 1))
        if result != 1:
            raise refused(request, live=result != 0)

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        keys = self.keys.session(request.session_id)
        args: list[Any] = [
            to_micros(now),
            request.expected_version,
            request.token,
            request.replaced,
            request.version,
            to_micros(request.updated_at),
            *_expiry_args(request.expires_at),
            request.event_count,
            "1" if request.archive else "",
            request.lineage,
            request.expected_lineage,
        ]
        args.extend(event.data for event in request.new_events)
        result = await self._write(self._link.compact, keys.every, args, lambda r: r == 1)
        if result != 1:
            raise refused(request, live=result != 0)

    async def _archived(self, session_id: str, now: datetime) -> list[str]:
        keys = self.keys.session(session_id)
        texts = await self._link.archived([keys.hash, keys.archive], [to_micros(now)])
        return [text.decode() for text in texts]

    async def _delete(self, session_id: str, now: datetime) -> bool:
        outcome = await self._delete_one(session_id, "any", None, to_micros(now))
        return outcome == 1

    async def _delete_one(
        self, session_id: str, mode: str, user_id: str | None, now_us: int
    ) -> int:
        """Run the delete script; in a cluster also drop the index entries it orphaned.

        Returns the script's verdict: 1 deleted live, 0 deleted expired, -1 absent,
        -2 kept (owned by another user, or live in 'expired' mode).
        """
        keys = self.keys.session(session_id)
        script_keys = keys.every
        if not self.cluster:
            script_keys.append(self.keys.index)
        result = await self._write(
            self._link.delete,
            script_keys,
            [now_us, mode, user_id or ""],
            lambda r: int(r[0]) in (0, 1),
        )
        verdict = int(result[0])
        if self.cluster and verdict in (0, 1):
            owner = result[1]
            created = int(result[2])
            # One at a time: delete_user and purge run up to _FANOUT of these at once, and
            # nesting a fan-out in each exhausted a cluster node's connection pool.
            fork_index = result[3] if len(result) > 3 else None
            for entry in self._life_entries(session_id.encode(), owner, created, fork_index):
                await self._apply_fixes([_Fix(entry, None)])
        return verdict

    def _life_entries(
        self, session_id: bytes, owner: bytes | None, created: int, fork_index: bytes | None
    ) -> list[_Entry]:
        """The index entries of one life of an id, from what the DELETE or CREATE script
        returns of it: its owner, creation time and fork index key (None: no fork)."""
        entries = self._entries_of(session_id, owner, created)
        if fork_index:
            entries.append(_Entry(fork_index.decode(), session_id, created, session_id, owner))
        return entries

    def _entries_of(self, session_id: bytes, user_id: bytes | None, score: int) -> list[_Entry]:
        """The index entries a session with this id, owner and creation time has."""
        member = session_id + b"\x00" + (user_id or b"")
        entries = [_Entry(self.keys.index, member, score, session_id, user_id)]
        if user_id:
            index = self.keys.user_index(user_id.decode())
            entries.append(_Entry(index, session_id, score, session_id, user_id))
        return entries

    # -- many sessions ------------------------------------------------------------------

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        index = self.keys.user_index(user_id)
        user = user_id.encode()
        pairs = _scored(
            await self.client.zrange(index, 0, -1, withscores=True, score_cast_func=int)
        )
        entries = [_Entry(index, member, score, member, user) for member, score in pairs]
        now_us = to_micros(now)
        verdicts = await _bounded(
            lambda e: self._delete_one(e.session_id.decode(), "user", user_id, now_us), entries
        )
        stale: list[_Fix] = []
        for entry, verdict in zip(entries, verdicts, strict=True):
            if verdict == -1 and self._may_drop(entry, now_us):
                # Redis expired it: its global index entry is left over too.
                stale.extend(
                    _Fix(e, None) for e in self._entries_of(entry.session_id, user, entry.score)
                )
            elif verdict == -2 and self._may_drop(entry, now_us):
                stale.append(_Fix(entry, None))  # the id now holds another user's session
        await self._apply_fixes(stale)
        return sum(1 for verdict in verdicts if verdict == 1)

    async def _list(
        self,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        index = self.keys.index if user_id is None else self.keys.user_index(user_id)
        user = None if user_id is None else user_id.encode()
        position = None if after is None else (to_micros(after[0]), after[1].encode())
        now_us = to_micros(now)
        found: list[SessionSummary] = []
        fixes: list[_Fix] = []
        while len(found) < limit:
            # Ask for a little more than needed: stale entries are filtered out here.
            fetch = limit - len(found) + 4
            entries = await self._index_page(index, user, position, fetch)
            if not entries:
                break
            records = await self._read_records([e.session_id for e in entries])
            for entry, fields in zip(entries, records, strict=True):
                summary, fix = self._judge(entry, fields, now_us)
                if summary is not None:
                    found.append(summary)
                if fix is not None:
                    fixes.append(fix)
            last = entries[-1]
            position = (last.score, last.session_id)
            if len(entries) < fetch:
                break
        await self._apply_fixes(fixes)
        return found[:limit]

    async def _purge_expired(self, now: datetime) -> int:
        """Drop the index entries of sessions Redis expired, and delete sessions that are
        expired by our clock but not yet by the server's; how many sessions that was."""
        now_us = to_micros(now)
        purged = 0
        seen: set[bytes] = set()
        batch: list[_Entry] = []
        async for entry in self._scan_index():
            if entry.member in seen:
                continue  # ZSCAN may return an element twice
            seen.add(entry.member)
            batch.append(entry)
            if len(batch) >= _SCAN_BATCH:
                purged += await self._purge_batch(batch, now_us)
                batch = []
        if batch:
            purged += await self._purge_batch(batch, now_us)
        return purged

    async def _purge_batch(self, entries: list[_Entry], now_us: int) -> int:
        records = await self._read_records([e.session_id for e in entries])
        fixes: list[_Fix] = []
        doomed: list[_Entry] = []
        purged = 0
        for entry, fields in zip(entries, records, strict=True):
            if fields is None or fields[0] is None:
                if self._may_drop(entry, now_us):
                    purged += 1  # Redis expired it; only its index entries are left
                    fixes.extend(
                        _Fix(e, None)
                        for e in self._entries_of(entry.session_id, entry.user_id, entry.score)
                    )
                continue
            expires = fields[6]
            if (
                expires is not None
                and int(expires) <= now_us
                and fields[1] == entry.user_id
                and int(fields[4] or 0) == entry.score
            ):
                doomed.append(entry)
                continue
            _, fix = self._judge(entry, fields, now_us)
            if fix is not None:
                fixes.append(fix)
        verdicts = await _bounded(
            lambda e: self._delete_one(e.session_id.decode(), "expired", None, now_us), doomed
        )
        purged += sum(1 for verdict in verdicts if verdict == 0)
        await self._apply_fixes(fixes)
        return purged

    # -- index reading and upkeep -------------------------------------------------------

    async def _index_page(
        self, index: str, user: bytes | None, position: tuple[int, bytes] | None, count: int
    ) -> list[_Entry]:
        """Up to *count* entries in listing order, strictly after *position*."""
        client = self.client
        if position is None:
            pairs = await client.zrange(
                index, "+inf", "-inf", desc=True, byscore=True, offset=0, num=count,
                withscores=True, score_cast_func=int,
            )  # fmt: skip
            return [self._entry(index, user, m, s) for m, s in _scored(pairs)]
        score, session_id = position
        async with client.pipeline(transaction=False) as pipe:
            # Same key, so one node and one round trip even in a cluster. Members
            # tied on the score sort by id (the member starts with it).
            pipe.zrange(index, score, score, byscore=True)
            pipe.zrange(
                index, f"({score}", "-inf", desc=True, byscore=True, offset=0, num=count,
                withscores=True, score_cast_func=int,
            )  # fmt: skip
            ties, rest = await pipe.execute()
        entries = [self._entry(index, user, m, score) for m in reversed(ties)]
        entries = [e for e in entries if e.session_id < session_id]
        entries.extend(self._entry(index, user, m, s) for m, s in _scored(rest))
        return entries[:count]

    def _entry(self, index: str, user: bytes | None, member: bytes, score: int) -> _Entry:
        if index == self.keys.index:
            session_id, owner = split_global_member(member)
            return _Entry(index, member, score, session_id, owner)
        return _Entry(index, member, score, member, user)

    async def _scan_index(self) -> AsyncIterator[_Entry]:
        index = self.keys.index
        iterator = self.client.zscan_iter(index, count=_SCAN_BATCH)
        while True:
            try:
                member, score = await iterator.__anext__()
            except StopAsyncIteration:
                return
            yield self._entry(index, None, member, int(score))

    async def _read_records(self, session_ids: list[bytes]) -> list[list[bytes | None] | None]:
        """The hash fields of each session, in one pipelined round trip (per node)."""
        if not session_ids:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for session_id in session_ids:
                pipe.hmget(self.keys.session(session_id.decode()).hash, _scripts.HASH_FIELDS)
            results: list[list[bytes | None] | None] = await pipe.execute()
        return results

    def _may_drop(self, entry: _Entry, now_us: int) -> bool:
        """Whether a reader may remove an entry whose session it could not find."""
        return not self.cluster or entry.score < now_us - self.cluster_index_grace_us

    def _judge(
        self, entry: _Entry, fields: list[bytes | None] | None, now_us: int
    ) -> tuple[SessionSummary | None, _Fix | None]:
        """The summary this entry stands for, if it is live, and any upkeep it needs."""
        if fields is None or fields[0] is None or fields[1] != entry.user_id:
            # Gone (Redis expired or someone deleted it), or the id now holds a session
            # of another user: a leftover entry.
            return None, (_Fix(entry, None) if self._may_drop(entry, now_us) else None)
        created = int(fields[4])  # type: ignore[arg-type]
        expires = fields[6]
        expired = expires is not None and int(expires) <= now_us
        if created != entry.score:
            # The entry of an earlier life of this id, or a create that crashed between
            # its session and index writes: point it at the session's real position.
            if not self._may_drop(entry, now_us):
                return None, None
            return None, _Fix(entry, None if expired else created)
        if expired:
            # Expired by our clock but still stored: the entry stays, so purge_expired finds
            # and erases the session (and counts it); once Redis expires the keys, the
            # "gone" branch above drops the entry.
            return None, None
        return _record(fields).summary(), None

    async def _apply_fixes(self, fixes: list[_Fix]) -> None:
        if not fixes:
            return

        def move(fix: _Fix) -> Awaitable[Any]:
            new_score = "" if fix.new_score is None else fix.new_score
            return self._link.move(
                [fix.entry.index], [fix.entry.member, fix.entry.score, new_score]
            )

        await _bounded(move, fixes)


# -- helpers ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Link:
    """One event loop's client and its scripts."""

    client: Redis | RedisCluster
    load: AsyncScript
    load_since: AsyncScript
    create: AsyncScript
    save: AsyncScript
    delete: AsyncScript
    move: AsyncScript
    compact: AsyncScript
    archived: AsyncScript
    fork: AsyncScript
    rewind: AsyncScript


async def _close_link(link: _Link) -> None:
    await link.client.aclose()
    pool = getattr(link.client, "connection_pool", None)  # a cluster has one per node
    if isinstance(pool, SentinelConnectionPool):
        # The Sentinels' clients are not the primary's: closing that one leaves them open.
        for sentinel in pool.sentinel_manager.sentinels:
            await sentinel.aclose()


def _expiry_args(expires: datetime | None) -> tuple[int | str, int | str]:
    """The scripts' expires_at (microseconds) and PEXPIREAT (milliseconds), or two ""."""
    return ("", "") if expires is None else (to_micros(expires), expiry_millis(expires))


def _scored(pairs: Any) -> list[tuple[bytes, int]]:
    """redis-py's ZRANGE WITHSCORES reply (typed loosely by redis-py), as what it is."""
    return [(member, int(score)) for member, score in pairs]


def _record(fields: list[bytes | None]) -> SessionRecord:
    """The record a load script read (`_scripts.HASH_FIELDS`, the fork origin last)."""
    return decode_record((*fields[:8], unstamp_lineage(fields[8], fields[3]), *fields[9:12]))


def _loaded_record(encoded: bytes) -> SessionRecord:
    """The record a load script read, as the JSON array it encoded (false: missing)."""
    fields = [None if value is False else value for value in pydantic_core.from_json(encoded)]
    return decode_record((*fields[:8], unstamp_lineage(fields[8], fields[3]), *fields[9:12]))


async def _bounded(call: Callable[[E], Awaitable[T]], items: Sequence[E]) -> list[T]:
    """``call(item)`` for every item, at most `_FANOUT` in flight; results in order."""
    results: list[T] = []
    for start in range(0, len(items), _FANOUT):
        chunk = items[start : start + _FANOUT]
        results.extend(await asyncio.gather(*(call(item) for item in chunk)))
    return results
