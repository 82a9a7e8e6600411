"""What a fork and a rewind cost against a full read of the same session (``--branching``).

Per engine and history size (sessions stored with one `restore`, so building them is
not what is measured):

* ``fork``: `SessionManager.fork` of the whole history into a new id;
* ``fork_half``: the same, cut at the middle event (the engine finds the cut);
* ``read``: ``get()`` of the same session, whole;
* ``copy``: what an application without `fork` does: ``get()`` the source whole and
  `restore` it under a new id (the events travel through the client twice);
* ``rewind``: `SessionManager.rewind` dropping the newer half, from a session loaded
  with ``last_events=half + 1`` (what the store op needs);
* on SQLite, ``sdk_branch``: the OpenAI Agents SDK's
  ``AdvancedSQLiteSession.create_branch_from_turn`` at its last turn (a copy of the
  whole history but the last turn, the closest thing it offers), when installed.

Each figure is the median of ``repeats`` runs on fresh sessions, in milliseconds.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from agentsessions import Event, Session, SessionManager, connect

__all__ = ["BranchingConfig", "measure_branching", "render_branching"]

Log = Callable[[str], None]
_BORN = datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class BranchingConfig:
    sizes: tuple[int, ...] = (0, 1000, 5000, 50000)
    repeats: int = 3

    @classmethod
    def short(cls) -> BranchingConfig:
        """The sizes a short run measures (no 50,000-event sessions)."""
        return cls(sizes=(0, 1000, 5000), repeats=3)

    @classmethod
    def smoke(cls) -> BranchingConfig:
        return cls(sizes=(0, 40), repeats=1)


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


async def _ms(call: Awaitable[Any]) -> float:
    """Milliseconds *call* (a coroutine not started yet) takes to complete."""
    started = time.perf_counter()
    await call
    return (time.perf_counter() - started) * 1e3


async def _copy(manager: SessionManager, source: str, target: str) -> None:
    whole = await manager.get(source)
    assert whole is not None
    await manager.restore(whole.model_copy(update={"session_id": target}))


async def _one_size(manager: SessionManager, size: int, repeats: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {
        "fork": [],
        "fork_half": [],
        "read": [],
        "copy": [],
        "rewind": [],
    }
    history = _history("template", size)
    half = size // 2
    for _ in range(repeats):
        source = f"bench-branching-{uuid.uuid4().hex}"
        await manager.restore(history.model_copy(update={"session_id": source}))
        made = [source]
        target = f"{source}-fork"
        samples["fork"].append(await _ms(manager.fork(source, target)))
        made.append(target)
        if size:
            cut = history.events[half].id
            target_half = f"{source}-half"
            samples["fork_half"].append(
                await _ms(manager.fork(source, target_half, through_event_id=cut))
            )
            made.append(target_half)
        samples["read"].append(await _ms(manager.get(source)))
        target_copy = f"{source}-copy"
        samples["copy"].append(await _ms(_copy(manager, source, target_copy)))
        made.append(target_copy)
        if size:
            tail = await manager.get(source, last_events=size - half)
            assert tail is not None
            samples["rewind"].append(await _ms(manager.rewind(tail, tail.events[0].id)))
        for session_id in made:
            await manager.delete(session_id)
    return {name: round(statistics.median(values), 3) for name, values in samples.items() if values}


async def _sdk_branch(size: int, repeats: int, workdir: Path) -> float | None:
    """``AdvancedSQLiteSession.create_branch_from_turn`` on a *size*-item session, or
    None when the SDK is not installed (or the session has no turn to branch from)."""
    try:
        from agents.extensions.memory.advanced_sqlite_session import AdvancedSQLiteSession
    except ImportError:
        return None
    turns = size // 2
    if turns < 1:
        return None
    timings = []
    for _ in range(repeats):
        path = workdir / f"sdk-{uuid.uuid4().hex}.db"
        sdk = AdvancedSQLiteSession(session_id="bench", db_path=path, create_tables=True)
        items: list[Any] = []
        for index in range(turns):
            items.append({"role": "user", "content": f"message {index} " + "lorem ipsum " * 8})
            items.append({"role": "assistant", "content": f"answer {index}"})
        await sdk.add_items(items)
        started = time.perf_counter()
        await sdk.create_branch_from_turn(turns)
        timings.append((time.perf_counter() - started) * 1e3)
        sdk.close()
        path.unlink(missing_ok=True)
    return round(statistics.median(timings), 3)


async def measure_branching(
    urls: dict[str, str], config: BranchingConfig, workdir: Path, log: Log | None = None
) -> dict[str, Any]:
    """The figures of every engine in *urls* (engine -> URL of our store)."""
    rows: dict[str, dict[str, dict[str, float]]] = {}
    errors: dict[str, str] = {}
    unsupported: list[str] = []
    for engine, url in urls.items():
        if log is not None:
            log(f"branching {engine}")
        try:
            # 50,000-event sessions on a loaded machine outlast the default 10 s deadline.
            async with connect(url) as base, base.with_options(timeout=600) as manager:
                if not manager.capabilities.branching:
                    unsupported.append(engine)  # nothing to measure: not an error
                    continue
                per_size: dict[str, dict[str, float]] = {}
                for size in config.sizes:
                    row = await _one_size(manager, size, config.repeats)
                    if engine == "sqlite":
                        sdk = await _sdk_branch(size, config.repeats, workdir)
                        if sdk is not None:
                            row["sdk_branch"] = sdk
                    per_size[str(size)] = row
                rows[engine] = per_size
        except Exception as exc:
            errors[engine] = f"{type(exc).__name__}: {exc}"
    return {
        "config": asdict(config),
        "branching": rows,
        "errors": errors,
        "unsupported": unsupported,
    }


def _cell(row: dict[str, float], name: str) -> str:
    return f"{row[name]:.2f}" if name in row else "-"


def render_branching(found: dict[str, Any]) -> str:
    """The Markdown table of `measure_branching`'s figures (milliseconds, medians)."""
    config = found["config"]
    lines = [
        f"Fork and rewind against a full read of the same session; medians of "
        f"{config['repeats']} fresh sessions, milliseconds. fork: the whole history; at "
        "half: cut at the middle event; rewind: the newer half dropped; SDK branch: "
        "`AdvancedSQLiteSession.create_branch_from_turn` at the last turn (SQLite only); "
        "read + restore: the copy an application makes without fork.",
        "",
        "| engine | events | fork | fork at half | full read | fork / read "
        "| read + restore | rewind | SDK branch |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for engine, sizes in found["branching"].items():
        for size, row in sizes.items():
            ratio = f"{row['fork'] / row['read']:.2f}x" if row.get("read") else "-"
            lines.append(
                f"| {engine} | {int(size):,} | {_cell(row, 'fork')} | {_cell(row, 'fork_half')} "
                f"| {_cell(row, 'read')} | {ratio} | {_cell(row, 'copy')} "
                f"| {_cell(row, 'rewind')} | {_cell(row, 'sdk_branch')} |"
            )
    for engine, error in found["errors"].items():
        lines.append(f"| {engine} | not measured: {error} | | | | | | | |")
    for engine in found.get("unsupported", []):
        lines.append(f"| {engine} | not measured: the backend does not branch | | | | | | | |")
    return "\n".join(lines) + "\n"
