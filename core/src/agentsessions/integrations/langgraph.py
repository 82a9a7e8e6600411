"""A LangGraph checkpointer (``BaseCheckpointSaver``) stored in any agentsessions backend.

::

    from agentsessions import connect
    from agentsessions.integrations.langgraph import AgentSessionsSaver

    saver = AgentSessionsSaver(connect("postgresql://app@db/agents", namespace="graphs"))
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "conversation-42"}})

The store, per thread and checkpoint namespace (``checkpoint_ns``; ``""`` is the root
graph, subgraphs have their own), is one agentsessions session owned by the thread:

* its id is the ``thread_id`` for the root namespace (``lgtid:`` and a SHA-256 of it
  for a thread id that is no usable session id as it stands, such as one longer than
  255 characters: see `thread_owner`), and ``lgns:`` followed by a SHA-256 of thread
  and namespace for a subgraph's; its ``user_id`` is the same stored thread id, so
  `delete_thread` is one ``delete_user`` and a thread's namespaces are one
  ``list_sessions(user_id=...)``;
* each `put` appends one event (author ``checkpoint``) holding the checkpoint and its
  metadata as LangGraph's serializer wrote them (type and base64 of the bytes: JSON
  for every engine and byte-exact), its id and its parent's id;
* each `put_writes` appends one event (author ``writes``) holding the task's writes,
  each serialized the same way, and the id of the checkpoint they belong to;
* the session's state holds the id of the newest checkpoint (``head``) and how many of
  the newest events hold it and all its writes (``reach``; LangGraph may store a task's
  writes while the put of their checkpoint is still in flight, so some can precede it:
  ``early`` counts those), so the latest checkpoint with its pending writes is one read
  of the newest ``reach`` events (``last_events``), whatever the length of the thread's
  history; a write never reads the history.

Writes append only; every write is one atomic, version-checked save, so a checkpoint
and its writes land whole or not at all, and a save refused for its size
(`SessionTooLargeError`) writes nothing. Of two writers continuing one thread from the
same checkpoint, the second gets `CheckpointConflictError` instead of forking the
chain: a `put` whose parent this saver read (or wrote) as the thread's newest
checkpoint lands only if it still is. A `put` from an older checkpoint, as LangGraph's
time travel and ``update_state`` on a past checkpoint make, forks as LangGraph intends.

Duplicate writes of one ``(task_id, idx)`` are resolved on read as LangGraph's
``InMemorySaver`` does: the first stored wins, except for the special channels (errors,
interrupts, resumes), where the last does. TTL is the manager's ``ttl`` option (a thread expires
that many seconds after its last write); `prune` with ``keep_latest`` compacts each
namespace down to its newest checkpoint and that checkpoint's writes.

The blocking methods (`get_tuple`, `put`, ...) run the async ones on a private loop that
the calling thread runs itself for the length of its call.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._driven import DrivenLoop, in_driven_loop
from .._errors import (
    InvalidInputError,
    SessionConflictError,
    SessionExistsError,
    SessionNotFoundError,
)
from .._loops import KeyedLoopLock
from .._manager import MAX_PAGE_SIZE, SessionManager, validate_id
from .._models import Session, new_event
from .._registry import connect
from .._tracking import mark_loaded
from ._langgraph_blocking import BlockingSaver
from ._langgraph_layout import (
    _ABSENT,
    _HEADS_KEPT,
    _HEADS_PER_NAMESPACE,
    _STRATEGIES,
    _TAIL,
    CHECKPOINT_AUTHOR,
    STATE_MARK,
    WRITES_AUTHOR,
    CheckpointConflictError,
    StoredCheckpointError,
    _appended,
    _config_ids,
    _count,
    _decode_b64,
    _Namespace,
    namespace_session_id,
    thread_owner,
)
from ._langgraph_pruning import drop_runs, keep_latest
from ._langgraph_queue import _Queued, update_each
from ._shared import finish_despite_cancellation

__all__ = ["AgentSessionsSaver", "CheckpointConflictError", "StoredCheckpointError"]


class AgentSessionsSaver(BlockingSaver):
    """LangGraph checkpoints kept by a `SessionManager` (any backend).

    Pass a manager (one serves the whole application; this saver neither opens nor
    closes it) or use `from_url`. *serde* is LangGraph's serializer (its
    ``JsonPlusSerializer`` by default, or an ``EncryptedSerializer``); the manager's own
    encryption at rest (``encryption=``) applies on top. *retries* bounds how often a
    write reloads after losing a race to another writer's save.
    """

    def __init__(
        self,
        manager: SessionManager,
        *,
        serde: SerializerProtocol | None = None,
        retries: int = 64,
    ) -> None:
        super().__init__(serde=serde)
        if not isinstance(manager, SessionManager):
            raise InvalidInputError(
                f"manager must be a SessionManager, not {type(manager).__name__}"
            )
        if type(retries) is not int or retries < 0:
            raise InvalidInputError(f"retries must be an int >= 0, not {retries!r}")
        self.manager = manager
        self.retries = retries
        self._owns_manager = False
        # Per (thread, namespace): the checkpoint ids this saver read or wrote while they
        # were the newest. A put continuing one of them must find it still the newest.
        self._heads: OrderedDict[tuple[str, str], dict[str, None]] = OrderedDict()
        self._loop: DrivenLoop | None = None
        self._loop_lock = threading.Lock()
        # Per namespace session: the session as this saver's last read or write of it left
        # it, minus its events (its version and where its events end). The next write
        # appends to it and saves, one round trip instead of a load and a save. Taken out
        # while a write uses it, so two concurrent writes never share it.
        self._held: OrderedDict[str, Session] = OrderedDict()
        # The namespace sessions this saver last read as absent (a new thread's first
        # write creates instead of loading), and whose write is in flight.
        self._absent: OrderedDict[str, bool] = OrderedDict()
        self._writing = KeyedLoopLock()
        # Per namespace session and event loop: the writes waiting for their turn, which
        # the write holding it sends with its own, in one save (see `_append`).
        self._queued: dict[tuple[str, asyncio.AbstractEventLoop], list[_Queued]] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AgentSessionsSaver:
        """A saver on its own manager for *url* (manager options as keywords), closed
        by `close` / `aclose`."""
        serde = options.pop("serde", None)
        retries = options.pop("retries", 64)
        saver = cls(connect(url, **options), serde=serde, retries=retries)
        saver._owns_manager = True
        return saver

    def __repr__(self) -> str:
        return f"<{type(self).__name__} on {self.manager!r}>"

    async def aclose(self) -> None:
        """Close the manager if `from_url` made it, and the blocking methods' loop."""
        if self._owns_manager:
            await self.manager.close()
        self._stop_loop()

    def close(self) -> None:
        """Blocking `aclose`."""
        if self._owns_manager:
            self._run(self.manager.close())
        self._stop_loop()

    async def __aenter__(self) -> AgentSessionsSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> AgentSessionsSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the conflict check's memory -----------------------------------------------

    def _seen_as_head(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        key = (thread_id, ns)
        seen = self._heads.get(key)
        if seen is None:
            seen = self._heads[key] = {}
            if len(self._heads) > _HEADS_KEPT:
                self._heads.popitem(last=False)
        else:
            self._heads.move_to_end(key)
        seen.pop(checkpoint_id, None)
        seen[checkpoint_id] = None
        if len(seen) > _HEADS_PER_NAMESPACE:
            del seen[next(iter(seen))]

    def _forget_head(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        seen = self._heads.get((thread_id, ns))
        if seen is not None:
            seen.pop(checkpoint_id, None)

    def _was_head(self, thread_id: str, ns: str, checkpoint_id: str) -> bool:
        seen = self._heads.get((thread_id, ns))
        return seen is not None and checkpoint_id in seen

    def _forget_thread(self, thread_id: str) -> None:
        for key in [key for key in self._heads if key[0] == thread_id]:
            del self._heads[key]
            self._held.pop(namespace_session_id(*key), None)
            self._absent.pop(namespace_session_id(*key), None)

    # -- encoding ------------------------------------------------------------------

    def _dump(self, value: Any) -> list[str]:
        kind, data = self.serde.dumps_typed(value)
        return [kind, base64.b64encode(data).decode("ascii")]

    def _load(self, typed: object, what: str) -> Any:
        if not (isinstance(typed, list) and len(typed) == 2 and isinstance(typed[0], str)):
            raise StoredCheckpointError(f"{what} is not a serialized value")
        return self.serde.loads_typed((typed[0], _decode_b64(typed[1], what)))

    def _tuple(
        self,
        space: _Namespace,
        stored: dict[str, Any],
        writes: list[dict[str, Any]],
    ) -> CheckpointTuple:
        checkpoint_id = str(stored["id"])
        checkpoint: Checkpoint = self._load(stored["checkpoint"], f"checkpoint {checkpoint_id}")
        metadata: CheckpointMetadata = self._load(
            stored["metadata"], f"metadata of checkpoint {checkpoint_id}"
        )
        parent = stored.get("parent")
        config: RunnableConfig = {
            "configurable": {
                "thread_id": space.thread_id,
                "checkpoint_ns": space.ns,
                "checkpoint_id": checkpoint_id,
            }
        }
        parent_config: RunnableConfig | None = None
        if parent is not None:
            parent_config = {
                "configurable": {
                    "thread_id": space.thread_id,
                    "checkpoint_ns": space.ns,
                    "checkpoint_id": str(parent),
                }
            }
        return CheckpointTuple(
            config=config,
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=parent_config,
            pending_writes=self._pending(writes),
        )

    def _pending(self, events: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
        # (task_id, idx) -> (task_path, channel, typed value): the first stored wins,
        # a special channel's (negative idx) last, as InMemorySaver keeps them (docs/langgraph.md).
        chosen: dict[tuple[str, int], tuple[str, str, Any]] = {}
        for event in events:
            task_id = str(event["task_id"])
            task_path = str(event.get("task_path", ""))
            for idx, channel, typed in event["writes"]:
                key = (task_id, int(idx))
                if key in chosen and key[1] >= 0:
                    continue
                chosen[key] = (task_path, str(channel), typed)
        ordered = sorted(chosen.items(), key=lambda item: (item[1][0], item[0][0], item[0][1]))
        return [
            (task_id, channel, self._load(typed, f"write {task_id}/{idx}"))
            for (task_id, idx), (_path, channel, typed) in ordered
        ]

    # -- reads ---------------------------------------------------------------------

    async def _load_space(self, thread_id: str, ns: str) -> tuple[Session, _Namespace] | None:
        session = await self.manager.get(
            namespace_session_id(thread_id, ns), user_id=thread_owner(thread_id)
        )
        if session is None:
            return None
        contents = [(event.author, event.content) for event in session.events]
        return session, _Namespace(thread_id, ns, contents)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint *config* names (its ``checkpoint_id``), or the newest of its
        thread and namespace, with its pending writes; None if there is none."""
        thread_id, ns, checkpoint_id = _config_ids(config)
        ns = ns or ""
        session_id = namespace_session_id(thread_id, ns)
        session = await self.manager.get(
            session_id, user_id=thread_owner(thread_id), last_events=_TAIL
        )
        if session is None:
            if checkpoint_id is None:
                self._seen_as_head(thread_id, ns, _ABSENT)
            self._absent[session_id] = True
            if len(self._absent) > _HEADS_KEPT:
                self._absent.popitem(last=False)
            return None
        head = session.state.get("head")
        reach = session.state.get("reach", 1)
        if not isinstance(head, str) or type(reach) is not int or reach < 1:
            if checkpoint_id is None:
                self._seen_as_head(thread_id, ns, _ABSENT)
            return None
        if checkpoint_id is None or checkpoint_id == head:
            if reach > len(session.events) and session.first_event_position > 0:
                session = await self.manager.get(
                    session_id, user_id=thread_owner(thread_id), last_events=reach
                )
                if session is None:
                    return None
                if session.state.get("head") != head:  # written in between: read it all
                    return await self._get_from_history(thread_id, ns, checkpoint_id)
            contents = [(event.author, event.content) for event in session.events[-reach:]]
            space = _Namespace(thread_id, ns, contents)
            stored = space.checkpoints.get(head)
            if stored is None:
                raise StoredCheckpointError(
                    f"thread {thread_id!r} (namespace {ns!r}): the newest checkpoint "
                    f"{head!r} is not where the session's state says"
                )
            self._seen_as_head(thread_id, ns, head)
            self._hold(session)
            return self._tuple(space, stored, space.writes.get(head, []))
        return await self._get_from_history(thread_id, ns, checkpoint_id)

    async def _get_from_history(
        self, thread_id: str, ns: str, checkpoint_id: str | None
    ) -> CheckpointTuple | None:
        loaded = await self._load_space(thread_id, ns)
        if loaded is None:
            return None
        session, space = loaded
        head = session.state.get("head")
        wanted = checkpoint_id if checkpoint_id is not None else head
        if not isinstance(wanted, str) or wanted not in space.checkpoints:
            return None
        if wanted == head:
            self._seen_as_head(thread_id, ns, wanted)
        else:
            # Read as a past checkpoint: a put from it is a fork, as LangGraph's time
            # travel means it, not a lost race.
            self._forget_head(thread_id, ns, wanted)
        return self._tuple(space, space.checkpoints[wanted], space.writes.get(wanted, []))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Checkpoints newest first (by id): of *config*'s thread (its namespace if it
        names one, its checkpoint if it names one), or of every thread when None;
        only those whose metadata holds every item of *filter*, older than *before*'s
        checkpoint, at most *limit*."""
        if limit is not None and (type(limit) is not int or limit < 0):
            raise InvalidInputError(f"limit must be None or an int >= 0, not {limit!r}")
        before_id = None if before is None else get_checkpoint_id(before)
        wanted_id: str | None = None
        if config is None:
            spaces = self._every_space()
        else:
            thread_id, ns, wanted_id = _config_ids(config)
            spaces = self._spaces_of(thread_id, ns)
        remaining = limit
        async for space in spaces:
            for checkpoint_id in sorted(space.checkpoints, reverse=True):
                if remaining is not None and remaining <= 0:
                    return
                if wanted_id is not None and checkpoint_id != wanted_id:
                    continue
                if before_id is not None and checkpoint_id >= before_id:
                    continue
                stored = space.checkpoints[checkpoint_id]
                if filter:
                    metadata = self._load(stored["metadata"], f"metadata of {checkpoint_id}")
                    if any(metadata.get(key) != value for key, value in filter.items()):
                        continue
                yield self._tuple(space, stored, space.writes.get(checkpoint_id, []))
                if remaining is not None:
                    remaining -= 1

    async def _spaces_of(self, thread_id: str, ns: str | None) -> AsyncIterator[_Namespace]:
        if ns is not None:
            loaded = await self._load_space(thread_id, ns)
            if loaded is not None:
                yield loaded[1]
            return
        async for session in self._sessions(thread_id):
            space = self._space_of(session)
            if space is not None:
                yield space

    async def _every_space(self) -> AsyncIterator[_Namespace]:
        async for session in self._sessions(None):
            space = self._space_of(session)
            if space is not None:
                yield space

    def _space_of(self, session: Session) -> _Namespace | None:
        thread_id = session.state.get("thread_id")
        ns = session.state.get("checkpoint_ns")
        if session.state.get(STATE_MARK) != 1 or not isinstance(thread_id, str):
            return None
        if not isinstance(ns, str):
            return None
        contents = [(event.author, event.content) for event in session.events]
        return _Namespace(thread_id, ns, contents)

    async def _sessions(self, thread_id: str | None) -> AsyncIterator[Session]:
        """Every LangGraph session of *thread_id* (of every thread when None), loaded
        whole, page by page (bounded by what is stored)."""
        cursor: str | None = None
        owner = None if thread_id is None else thread_owner(thread_id)
        while True:
            page = await self.manager.list_sessions(
                user_id=owner, limit=MAX_PAGE_SIZE, cursor=cursor
            )
            for summary in page.items:
                session = await self.manager.get(summary.session_id)
                if session is not None and session.state.get(STATE_MARK) == 1:
                    yield session
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # -- writes --------------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store *checkpoint* after the one *config* names (its parent), in one append.

        Raises `CheckpointConflictError` if the parent was the newest checkpoint when
        this saver read or wrote it and another one was put since.
        """
        thread_id, ns, parent = _config_ids(config)
        ns = ns or ""
        checkpoint_id = str(checkpoint["id"])
        validate_id(checkpoint_id, "checkpoint id")
        stored_metadata = get_serializable_checkpoint_metadata(config, metadata)
        content: dict[str, Any] = {
            "id": checkpoint_id,
            "parent": parent,
            "checkpoint": self._dump(checkpoint),
            "metadata": self._dump(stored_metadata),
        }
        run_id = stored_metadata.get("run_id")
        event_metadata = {"run_id": run_id} if isinstance(run_id, str) else {}
        event = new_event(CHECKPOINT_AUTHOR, content, event_metadata)
        pinned = self._was_head(thread_id, ns, parent if parent is not None else _ABSENT)

        def append(session: Session) -> None:
            head = session.state.get("head")
            if pinned and head != parent and (head is not None or parent is not None):
                raise CheckpointConflictError(thread_id, ns, parent, str(head))
            session.events.append(event)
            early = session.state.get("early")
            counts = dict(early) if isinstance(early, dict) else {}
            before = _count(counts.pop(checkpoint_id, 0))
            session.state.update(
                {
                    STATE_MARK: 1,
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "head": checkpoint_id,
                    # Its writes stored before it (early) are within the newest events.
                    "reach": before + 1,
                    # Writes that came early for a later checkpoint stay followed.
                    "early": {key: _count(value) + 1 for key, value in counts.items()},
                }
            )

        await self._write(thread_id, ns, append)
        self._seen_as_head(thread_id, ns, checkpoint_id)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's *writes* for the checkpoint *config* names, in one append."""
        thread_id, ns, checkpoint_id = _config_ids(config)
        ns = ns or ""
        if checkpoint_id is None:
            raise InvalidInputError("put_writes: config['configurable'] has no 'checkpoint_id'")
        if not writes:
            return
        encoded = [
            [WRITES_IDX_MAP.get(channel, index), channel, self._dump(value)]
            for index, (channel, value) in enumerate(writes)
        ]
        event = new_event(
            WRITES_AUTHOR,
            {
                "checkpoint_id": checkpoint_id,
                "task_id": str(task_id),
                "task_path": str(task_path),
                "writes": encoded,
            },
        )

        def append(session: Session) -> None:
            session.events.append(event)
            session.state.update({STATE_MARK: 1, "thread_id": thread_id, "checkpoint_ns": ns})
            head = session.state.get("head")
            _appended(session.state, None if checkpoint_id == head else checkpoint_id)

        await self._write(thread_id, ns, append)

    async def _write(self, thread_id: str, ns: str, fn: Callable[[Session], None]) -> None:
        # Finished even if the caller is cancelled, so LangGraph's view and the store
        # agree on whether it landed.
        await finish_despite_cancellation(self._append(thread_id, ns, fn))

    async def _append(self, thread_id: str, ns: str, fn: Callable[[Session], None]) -> None:
        session_id = namespace_session_id(thread_id, ns)
        # One write at a time per namespace session in this saver: LangGraph runs a put
        # and the next step's put_writes concurrently, and two saves of one session
        # would refuse each other (version check) and reload. The write whose turn it
        # is sends every write queued behind it on the same loop in its own save, in
        # the order they came: a step's writes and its checkpoint, submitted together,
        # are one round trip instead of one each.
        key = (session_id, asyncio.get_running_loop())
        entry = _Queued(fn)
        self._queued.setdefault(key, []).append(entry)
        async with self._writing.hold(session_id):
            if not entry.done:
                if not in_driven_loop():  # blocking callers' writes come from other threads
                    await asyncio.sleep(0)  # one pass: the same step's writes queue by then
                batch = self._queued.pop(key, [])
                try:
                    await self._append_in_turn(thread_id, session_id, batch)
                except BaseException as exc:
                    for queued in batch:
                        if not queued.done:
                            queued.fail(exc)
                    raise
        entry.outcome()

    async def _append_in_turn(self, thread_id: str, session_id: str, batch: list[_Queued]) -> None:
        held = self._held.pop(session_id, None)
        if held is None and self._absent.pop(session_id, False):
            # This saver just read it as absent (a new thread): create it, then append,
            # instead of a load that would find nothing first.
            # SessionExistsError: another writer created it since: load and check below.
            with contextlib.suppress(SessionExistsError):
                held = await self.manager.create(session_id, user_id=thread_owner(thread_id))
        if held is not None:
            # Each change may raise CheckpointConflictError from what this saver last
            # saw, before it changes anything: that write fails alone.
            applied = [queued for queued in batch if queued.apply(held)]
            if not applied:
                return
            try:
                await self.manager.save(held)
            except (SessionConflictError, SessionNotFoundError):
                batch = applied  # another writer saved (or deleted) since: one by one below
            except InvalidInputError:
                if len(applied) == 1:
                    raise
                batch = applied  # one of them is refused (too large, say): it fails alone
            else:
                for queued in applied:
                    queued.succeed()
                self._hold(held)
                return
        stored = await update_each(
            self.manager, session_id, thread_owner(thread_id), self.retries, batch
        )
        if stored is not None:
            self._hold(stored)

    def _hold(self, session: Session) -> None:
        loaded = session._loaded
        if loaded is None:
            return
        copy = Session.model_construct(
            session_id=session.session_id,
            user_id=session.user_id,
            events=[],
            state=dict(session.state),
            created_at=session.created_at,
            updated_at=session.updated_at,
            version=session.version,
        )
        end = session.first_event_position + len(session.events)
        mark_loaded(copy, offset=end, partial=True, lineage=loaded.lineage)
        self._held[session.session_id] = copy
        self._held.move_to_end(session.session_id)
        if len(self._held) > _HEADS_KEPT:
            self._held.popitem(last=False)

    # -- threads -------------------------------------------------------------------

    async def adelete_thread(self, thread_id: str) -> None:
        """Erase every checkpoint and write of *thread_id*, in every namespace."""
        thread_id = str(thread_id)
        await self.manager.delete_user(thread_owner(thread_id))
        self._forget_thread(thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to a new one (each namespace
        copied in one atomic write; `SessionExistsError` if the target has one already)."""
        source = str(source_thread_id)
        target = str(target_thread_id)
        thread_owner(source), thread_owner(target)  # both storable, before any I/O
        async for session in self._sessions(source):
            ns = session.state.get("checkpoint_ns")
            if not isinstance(ns, str):
                continue
            copy = Session(
                session_id=namespace_session_id(target, ns),
                user_id=thread_owner(target),
                events=list(session.events),
                state={**session.state, "thread_id": target},
                created_at=session.created_at,
                updated_at=session.updated_at,
                version=session.version,
            )
            await self.manager.restore(copy)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint and its writes, in one
        compaction per namespace; ``delete``: erase the threads."""
        if strategy not in _STRATEGIES:
            raise InvalidInputError(f"strategy must be one of {_STRATEGIES}, not {strategy!r}")
        threads = [str(raw) for raw in thread_ids]
        for thread_id in threads:
            thread_owner(thread_id)  # every id checked before the first is pruned
        for thread_id in threads:
            if strategy == "delete":
                await self.adelete_thread(thread_id)
                continue
            async for session in self._sessions(thread_id):
                await keep_latest(self.manager, session, self.retries)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Erase the checkpoints whose metadata ``run_id`` is one of *run_ids*, and their
        writes, on every thread (a scan of every LangGraph session of the manager)."""
        wanted = {str(run_id) for run_id in run_ids}
        if not wanted:
            return
        async for session in self._sessions(None):
            await drop_runs(self.manager, session, wanted, self.retries)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions as LangGraph's own savers make them: a zero-padded counter and a
        random fraction, so they sort as strings."""
        # An int is what a thread written by a saver counting in ints holds.
        current_v = 0 if current is None else int(str(current).split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"
