"""What history compaction costs, and what it saves a turn (``--compaction``).

Per engine, on a session of ``history`` events (stored in one `restore`, so building it
is not what is measured):

* ``compact``: `SessionManager.compact` replacing all but the newest ``kept`` events
  with one summary, from a session loaded with ``last_events=kept + 1`` (what the store
  op needs: it never reads what it replaces);
* ``compact_archive``: the same with ``archive=True`` (the replaced events copied to
  the archive first);
* ``rewrite``: what an application without `compact` does for the same result: load
  the whole history and save it rewritten as the summary plus the kept events;
* ``turn_before`` / ``turn_after``: one turn that reads the whole history, appends a
  user and an assistant event and saves, on the long history and once compacted.

Each figure is the median of ``repeats`` fresh sessions (a compaction consumes its
history); turns are the median of ``turns`` turns per session. All of them come from
one run, side by side, so their ratios compare like with like.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from agentsessions import Event, Session, SessionManager, connect

__all__ = ["CompactionConfig", "measure_compaction", "render_compaction"]

Log = Callable[[str], None]
_BORN = datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class CompactionConfig:
    history: int = 5000
    kept: int = 20
    repeats: int = 5
    turns: int = 20

    @classmethod
    def smoke(cls) -> CompactionConfig:
        return cls(history=60, kept=5, repeats=1, turns=2)


def _history(session_id: str, count: int) -> Session:
    return Session(
        session_id=session_id,
        events=[
            Event(
                author="user" if index % 2 == 0 else "assistant",
                content={"text": f"message {index} " + "lorem ipsum " * 8},
                timestamp=_BORN + timedelta(seconds=index),
            )
            for index in range(count)
        ],
        version=1,
    )


async def _ms(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1e3


async def _turn(manager: SessionManager, session_id: str) -> None:
    session = await manager.get(session_id)
    assert session is not None
    session.add_event("user", {"text": "one more question"})
    session.add_event("assistant", {"text": "one more answer"})
    await manager.save(session)


async def _turns(manager: SessionManager, session_id: str, count: int) -> float:
    return statistics.median([await _ms(lambda: _turn(manager, session_id)) for _ in range(count)])


def _summary() -> list[Event]:
    return [Event(author="summary", content={"text": "what was said so far " * 20})]


async def _one_engine(manager: SessionManager, config: CompactionConfig) -> dict[str, float]:
    samples: dict[str, list[float]] = {
        "compact": [],
        "compact_archive": [],
        "rewrite": [],
        "turn_before": [],
        "turn_after": [],
    }
    history = _history("template", config.history)
    for _ in range(config.repeats):
        ids = {name: f"bench-compaction-{name}-{uuid.uuid4().hex}" for name in samples}
        for name in ("compact", "compact_archive", "rewrite"):
            await manager.restore(history.model_copy(update={"session_id": ids[name]}))
        samples["turn_before"].append(await _turns(manager, ids["compact"], config.turns))
        for name, archive in (("compact", False), ("compact_archive", True)):
            tail = await manager.get(ids[name], last_events=config.kept + 1)
            assert tail is not None
            started = time.perf_counter()
            await manager.compact(tail, tail.events[0].id, _summary(), archive=archive)
            samples[name].append((time.perf_counter() - started) * 1e3)

        async def rewrite(session_id: str = ids["rewrite"]) -> None:
            whole = await manager.get(session_id)
            assert whole is not None
            whole.events = [*_summary(), *whole.events[-config.kept :]]
            await manager.save(whole)

        samples["rewrite"].append(await _ms(rewrite))
        samples["turn_after"].append(await _turns(manager, ids["compact"], config.turns))
        for name in ("compact", "compact_archive", "rewrite"):
            await manager.delete(ids[name])
    return {name: round(statistics.median(values), 3) for name, values in samples.items()}


async def measure_compaction(
    urls: dict[str, str], config: CompactionConfig, log: Log | None = None
) -> dict[str, Any]:
    """The figures of every engine in *urls* (engine -> URL of our store)."""
    rows: dict[str, dict[str, float]] = {}
    errors: dict[str, str] = {}
    for engine, url in urls.items():
        if log is not None:
            log(f"compaction {engine}")
        try:
            # Building and rewriting 5,000-event sessions on a loaded machine can take
            # longer than the default 10 s deadline of one call.
            async with connect(url) as base, base.with_options(timeout=300) as manager:
                if not manager.capabilities.compaction:
                    errors[engine] = "the backend does not compact"
                    continue
                rows[engine] = await _one_engine(manager, config)
        except Exception as exc:
            errors[engine] = f"{type(exc).__name__}: {exc}"
    return {"config": asdict(config), "compaction": rows, "errors": errors}


def render_compaction(found: dict[str, Any]) -> str:
    """The Markdown table of `measure_compaction`'s figures (milliseconds, medians)."""
    config = found["config"]
    history, kept = config["history"], config["kept"]
    lines = [
        f"Compacting {history:,} events into 1 summary + {kept} kept, and a turn (full read, "
        f"two appends, save) before and after; medians of {config['repeats']} sessions "
        f"({config['turns']} turns each), milliseconds.",
        "",
        "| engine | compact | compact, archived | load and rewrite | rewrite / compact "
        "| turn before | turn after | after / before |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for engine, row in found["compaction"].items():
        lines.append(
            f"| {engine} | {row['compact']:.2f} | {row['compact_archive']:.2f} "
            f"| {row['rewrite']:.2f} | {row['rewrite'] / row['compact']:.1f}x "
            f"| {row['turn_before']:.2f} | {row['turn_after']:.2f} "
            f"| {row['turn_after'] / row['turn_before']:.3f}x |"
        )
    for engine, error in found["errors"].items():
        lines.append(f"| {engine} | not measured: {error} | | | | | | |")
    return "\n".join(lines) + "\n"
