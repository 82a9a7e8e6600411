"""The LangGraph saver's blocking methods: each runs its async twin on the saver's private
event loop, which the calling thread runs itself while its call runs (`DrivenLoop`), so a
call does not cross to another thread and back."""

from __future__ import annotations

import threading
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from .._driven import DrivenLoop

T = TypeVar("T")


class BlockingSaver(BaseCheckpointSaver[str]):
    """`BaseCheckpointSaver`'s blocking methods over its async ones; do not call them
    from the saver's own loop."""

    _loop: DrivenLoop | None = None
    _loop_lock: threading.Lock

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._loop_lock:
            if self._loop is None:
                self._loop = DrivenLoop()
            loop = self._loop
        return loop.run(coro)

    def _stop_loop(self) -> None:
        with self._loop_lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.close()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Blocking `aget_tuple`."""
        return self._run(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Blocking `alist` (collected, then yielded)."""

        async def collect() -> list[CheckpointTuple]:
            return [
                item async for item in self.alist(config, filter=filter, before=before, limit=limit)
            ]

        yield from self._run(collect())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Blocking `aput`."""
        return self._run(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Blocking `aput_writes`."""
        self._run(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Blocking `adelete_thread`."""
        self._run(self.adelete_thread(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Blocking `acopy_thread`."""
        self._run(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Blocking `aprune`."""
        self._run(self.aprune(thread_ids, strategy=strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Blocking `adelete_for_runs`."""
        self._run(self.adelete_for_runs(run_ids))
