"""How the LangGraph saver lays out a thread in sessions: the event authors, the state that
finds the newest checkpoint, the session id of a namespace, and the decoding of what it stored."""

from __future__ import annotations

import base64
import binascii
import hashlib
import sys
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import get_checkpoint_id

from .._errors import InvalidInputError, SessionConflictError, SessionError
from .._models import Event
from ._shared import mapped_id

CHECKPOINT_AUTHOR = "checkpoint"
WRITES_AUTHOR = "writes"
#: Marks a session as a LangGraph namespace (``state["langgraph"]``), so listing all
#: threads skips any other session of the manager's namespace.
STATE_MARK = "langgraph"
#: Events read for the latest checkpoint before ``reach`` is known: a checkpoint
#: and one task's writes, the common step. More would decode older checkpoints (each
#: holds every channel value) for nothing; a step of parallel tasks reads again.
_TAIL = 2
#: How many thread namespaces, and checkpoints per namespace, this saver remembers as
#: read or written as the newest (what the conflict check of `put` compares against).
_HEADS_KEPT = 4096
_HEADS_PER_NAMESPACE = 64
_ABSENT = ""  # a namespace read while it had no checkpoint (checkpoint ids are never empty)
_STRATEGIES = ("keep_latest", "delete")
#: Checkpoint ids whose writes arrived before them that a session's state follows.
_EARLY_KEPT = 8


def _reach_of(events: Sequence[Event], head: object) -> int:
    """How many of the newest *events* hold checkpoint *head* and all its writes."""
    first = next(
        (
            index
            for index, event in enumerate(events)
            if (event.author == CHECKPOINT_AUTHOR and event.content.get("id") == head)
            or (event.author == WRITES_AUTHOR and event.content.get("checkpoint_id") == head)
        ),
        len(events),
    )
    return len(events) - first


def _count(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0


def _appended(state: dict[str, Any], early_for: str | None) -> None:
    """Account in *state* for one event appended after the newest ones."""
    state["reach"] = _count(state.get("reach")) + 1
    early = state.get("early")
    counts = dict(early) if isinstance(early, dict) else {}
    counts = {key: _count(value) + 1 for key, value in counts.items()}
    if early_for is not None and early_for not in counts:
        counts[early_for] = 1
        while len(counts) > _EARLY_KEPT:
            del counts[next(iter(counts))]
    state["early"] = counts


_ROOT_PREFIX = "lgns:"
# The stored id of a thread id that is not one of ours as it stands (`thread_owner`).
_THREAD_PREFIX = "lgtid:"


class CheckpointConflictError(SessionConflictError):
    """Another writer put a checkpoint on this thread (namespace) after the one this
    `put` continues from, which this saver had read as the newest: nothing was written,
    and the thread's chain is not forked. Read the thread again and retry the step."""

    def __init__(self, thread_id: str, checkpoint_ns: str, parent: str | None, head: str) -> None:
        SessionError.__init__(
            self,
            f"thread {thread_id!r} (namespace {checkpoint_ns!r}): checkpoint {head!r} was put "
            f"by another writer after {parent!r}, which this put continues from; nothing "
            "was written",
        )
        self.session_id = thread_id
        self.expected_version = 0
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.parent_checkpoint_id = parent
        self.head_checkpoint_id = head


class StoredCheckpointError(SessionError):
    """A stored event of a LangGraph session is not one this saver wrote (edited by
    hand, or another tool's session under a LangGraph id)."""


def thread_owner(thread_id: str) -> str:
    """The stored id of *thread_id*: the root namespace's session id and the owner of
    every session of the thread.

    LangGraph takes any string as a thread id, ours are at most `MAX_ID_LENGTH`
    characters and never blank: a thread id that is not a usable id as it stands (too
    long, empty or blank), or that starts with the prefix of the mapped ones (so that
    no thread id can name another's mapping), is stored as that prefix and the SHA-256
    of the whole id. The original is kept in every session's state (``thread_id``),
    which listings report.
    """
    return mapped_id(thread_id, "thread_id", _THREAD_PREFIX)


def namespace_session_id(thread_id: str, checkpoint_ns: str) -> str:
    """The id of the session holding *thread_id*'s checkpoints in *checkpoint_ns*."""
    if checkpoint_ns == "":
        return thread_owner(thread_id)
    digest = hashlib.sha256(f"{thread_id}\0{checkpoint_ns}".encode()).hexdigest()
    return f"{_ROOT_PREFIX}{digest}"


def _config_ids(config: RunnableConfig) -> tuple[str, str | None, str | None]:
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None:
        raise InvalidInputError("config['configurable'] has no 'thread_id'")
    thread_id = str(thread_id)
    thread_owner(thread_id)  # refuses what no engine can store (NUL, lone surrogates)
    ns = configurable.get("checkpoint_ns")
    if ns is not None and not isinstance(ns, str):
        raise InvalidInputError(f"checkpoint_ns must be a str, not {type(ns).__name__}")
    return thread_id, ns, get_checkpoint_id(config)


def _decode_b64(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise StoredCheckpointError(f"{what} is not base64 text")
    try:
        return _strict_b64(text)
    except (binascii.Error, ValueError):
        raise StoredCheckpointError(f"{what} is not base64 text") from None


if sys.version_info >= (3, 11):

    def _strict_b64(text: str) -> bytes:
        # The C decoder's own strict check: base64.b64decode(validate=True) runs a regular
        # expression over the whole text first, which costs more than the decoding.
        return binascii.a2b_base64(text, strict_mode=True)

else:

    def _strict_b64(text: str) -> bytes:
        return base64.b64decode(text.encode("ascii"), validate=True)


class _Namespace:
    """The checkpoints and writes of one loaded namespace session, decoded lazily."""

    def __init__(self, thread_id: str, ns: str, contents: list[tuple[str, Any]]) -> None:
        self.thread_id = thread_id
        self.ns = ns
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.writes: dict[str, list[dict[str, Any]]] = {}
        for author, content in contents:
            if not isinstance(content, dict):
                raise StoredCheckpointError(
                    f"thread {thread_id!r}: a {author!r} event holds no object"
                )
            if author == CHECKPOINT_AUTHOR:
                self.checkpoints[str(content["id"])] = content
            elif author == WRITES_AUTHOR:
                self.writes.setdefault(str(content["checkpoint_id"]), []).append(content)
