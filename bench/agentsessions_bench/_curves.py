"""Cost curves: how each operation's cost grows with what the store holds.

The suite measures a few history sizes against floors and peers; these curves follow
our store alone, through the public API, out to large sizes, and say whether each
curve has the shape the design promises:

* **history**: one session grown 10 -> 50,000 events. A turn with a full read, and
  the client memory the loaded session holds, should grow linearly; a turn reading
  the newest 20, and an append alone, should stay flat.
* **pages**: ``list_sessions`` walking 100,000 sessions page by page (1,000 pages of
  100): the page at depth 1,000 should cost what the first one does (keyset paging).
* **delete_user** of 10 -> 1,000 sessions and **purge_expired** of 1,000 -> 100,000
  expired sessions: linear in the sessions removed, nothing worse.
* **store**: 1,000,000 events across 10,000 sessions (PostgreSQL, Redis, SQLite): the
  time to write them, the space they take, and a turn on one 100-event session of
  that full store next to the same turn on an empty one (should be equal).

The full sizes take a long time on a small machine: ``--curves`` runs reduced sizes
(printed with the results), ``--curves --full`` the sizes above.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import math
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ._ours import _content
from ._store import LAST_EVENTS

__all__ = ["CurveConfig", "measure_curves", "render_curves", "write_curve_plots"]

Log = Callable[[str], None]


@dataclass(frozen=True)
class CurveConfig:
    history_sizes: tuple[int, ...] = (10, 100, 1_000, 5_000, 20_000)
    #: Timed repetitions per point (the median is reported).
    repeats: int = 7
    sessions: int = 10_000
    page_size: int = 10
    page_depths: tuple[int, ...] = (1, 10, 100, 1_000)
    delete_user_sessions: tuple[int, ...] = (10, 100, 1_000)
    purge_sessions: tuple[int, ...] = (1_000, 10_000)
    store_sessions: int = 1_000
    store_events_per_session: int = 100
    #: Engines the "store" curve runs on (the issue asks for these three).
    store_engines: tuple[str, ...] = ("sqlite", "postgres", "redis")
    full: bool = False

    @classmethod
    def full_size(cls) -> CurveConfig:
        return cls(
            history_sizes=(10, 100, 1_000, 10_000, 50_000),
            sessions=100_000,
            page_size=100,
            purge_sessions=(1_000, 10_000, 100_000),
            store_sessions=10_000,
            full=True,
        )

    @classmethod
    def smoke(cls) -> CurveConfig:
        """Tiny sizes: checks that every curve runs and renders, says nothing of speed."""
        return cls(
            history_sizes=(10, 60),
            repeats=2,
            sessions=30,
            page_size=3,
            page_depths=(1, 10),
            delete_user_sessions=(2, 5),
            purge_sessions=(3, 6),
            store_sessions=6,
            store_events_per_session=4,
        )


class _ShiftedClock:
    """The system clock moved by a fixed amount: steps past a ttl without sleeping."""

    def __init__(self, shift: timedelta) -> None:
        self._shift = shift

    def now(self) -> datetime:
        return datetime.now(timezone.utc) + self._shift


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(1)


async def _timed(call: Callable[[], Awaitable[Any]]) -> float:
    with _no_gc():
        started = time.perf_counter()
        await call()
        return time.perf_counter() - started


async def _median_ms(call: Callable[[], Awaitable[Any]], repeats: int) -> float:
    return (await _medians_ms(call, repeats))[0]


async def _medians_ms(call: Callable[[], Awaitable[Any]], repeats: int) -> tuple[float, float]:
    """Median wall time and median CPU time of this process (all its threads: SQLite's
    worker included) in ms. CPU time does not count waiting for a server, and is barely
    moved by other processes competing for the cores, which wall time is."""
    walls, cpus = [], []
    for _ in range(repeats):
        cpu = time.process_time()
        walls.append(await _timed(call))
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3


async def _chunked(calls: list[Callable[[], Awaitable[Any]]], width: int = 64) -> None:
    for start in range(0, len(calls), width):
        await asyncio.gather(*(call() for call in calls[start : start + width]))


@contextlib.asynccontextmanager
async def _manager(url: str, **options: Any) -> AsyncIterator[Any]:
    import agentsessions

    options.setdefault("namespace", f"curves_{uuid.uuid4().hex[:10]}")
    # A curve measures cost at sizes far beyond one call's default 10 s deadline
    # (purging 100,000 sessions on a loaded machine): the deadline is not under test.
    options.setdefault("timeout", 3600)
    manager = agentsessions.connect(url, **options)
    await manager.open()
    try:
        yield manager
    finally:
        await manager.close()


async def _wipe(manager: Any) -> None:
    """Delete every session of the manager's namespace (all this run created)."""
    while True:
        page = await manager.list_sessions(limit=1000)
        if not page.items:
            return
        await _chunked([functools.partial(manager.delete, s.session_id) for s in page.items])


def _add_turns(session: Any, count: int) -> None:
    for index in range(count):
        author = "user" if index % 2 == 0 else "assistant"
        session.add_event(author, _content(author, index))


# -- the curves ----------------------------------------------------------------------


async def _turn(manager: Any, session_id: str, last: int | None) -> None:
    loaded = await manager.get(session_id, last_events=last)
    _add_turns(loaded, 2)
    await manager.save(loaded)


async def _append(manager: Any, held: Any) -> None:
    _add_turns(held, 2)
    await manager.save(held)


async def _history_curve(url: str, config: CurveConfig) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    async with _manager(url) as manager:
        try:
            await manager.create("history")
            for size in config.history_sizes:
                # Grow the one session to *size*, 500 events per save (untimed).
                session = await manager.get("history", last_events=0)
                stored = session.first_event_position
                while stored < size:
                    _add_turns(session, min(500, size - stored))
                    await manager.save(session)
                    stored = session.first_event_position + len(session.events)
                del session
                gc.collect()
                repeats = config.repeats
                point: dict[str, Any] = {"size": size}
                point["turn_full_ms"], point["turn_full_cpu_ms"] = await _medians_ms(
                    functools.partial(_turn, manager, "history", None), repeats
                )
                point["turn_last_ms"], point["turn_last_cpu_ms"] = await _medians_ms(
                    functools.partial(_turn, manager, "history", LAST_EVENTS), repeats
                )
                held = await manager.get("history", last_events=0)
                point["append_ms"], point["append_cpu_ms"] = await _medians_ms(
                    functools.partial(_append, manager, held), repeats
                )
                del held
                point["memory_full_kib"], point["peak_full_kib"] = await _memory(manager, None)
                point["memory_last_kib"], point["peak_last_kib"] = await _memory(
                    manager, LAST_EVENTS
                )
                points.append(point)
        finally:
            await manager.delete("history")
    return points


async def _memory(manager: Any, last: int | None) -> tuple[float, float]:
    """KiB the loaded session keeps alive, and the peak while loading it (tracemalloc,
    so every Python allocation of the client counts: driver buffers, decoding)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        loaded = await manager.get("history", last_events=last)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del loaded
    return (current - before) / 1024, (peak - before) / 1024


async def _pages_curve(url: str, config: CurveConfig) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    async with _manager(url) as manager:
        try:
            await _chunked(
                [functools.partial(manager.create, f"p{n:07d}") for n in range(config.sessions)]
            )
            wanted = sorted(
                d for d in config.page_depths if d * config.page_size <= config.sessions
            )
            cursors: dict[int, str | None] = {}
            cursor: str | None = None
            for depth in range(1, max(wanted) + 1):
                if depth in wanted:
                    cursors[depth] = cursor
                page = await manager.list_sessions(limit=config.page_size, cursor=cursor)
                cursor = page.next_cursor
                if cursor is None:
                    break
            for depth in wanted:
                if depth not in cursors:
                    continue
                fetch = functools.partial(_fetch_page, manager, config.page_size, cursors[depth])
                points.append(
                    {"depth": depth, "ms": await _median_ms(fetch, max(3, config.repeats))}
                )
        finally:
            await _wipe(manager)
    return points


async def _fetch_page(manager: Any, size: int, cursor: str | None) -> None:
    page = await manager.list_sessions(limit=size, cursor=cursor)
    assert len(page.items) == size


async def _counted(call: Callable[[], Awaitable[int]], into: list[int]) -> None:
    into.append(await call())


async def _delete_user_curve(url: str, config: CurveConfig) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    async with _manager(url) as manager:
        try:
            for count in config.delete_user_sessions:
                user = f"user-{count}"
                await _chunked(
                    [functools.partial(manager.create, f"d{count}-{n}", user) for n in range(count)]
                )
                removed: list[int] = []
                elapsed = await _timed(
                    functools.partial(
                        _counted, functools.partial(manager.delete_user, user), removed
                    )
                )
                assert removed == [count], (removed, count)
                points.append({"sessions": count, "ms": elapsed * 1e3})
        finally:
            await _wipe(manager)
    return points


async def _purge_curve(url: str, config: CurveConfig) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    for count in config.purge_sessions:
        # Sessions with a one-hour ttl, purged by a manager whose clock is two hours
        # ahead: every one is expired by our clock (on Redis the keys still exist, so
        # each is deleted by the purge, the costlier of its two paths).
        namespace = f"curves_{uuid.uuid4().hex[:10]}"
        async with _manager(url, namespace=namespace, ttl=3600) as manager:
            await _chunked([functools.partial(manager.create, f"x{n:07d}") for n in range(count)])
            manager.clock = _ShiftedClock(timedelta(hours=2))
            purged: list[int] = []
            elapsed = await _timed(functools.partial(_counted, manager.purge_expired, purged))
            assert purged == [count], (purged, count)
            points.append({"sessions": count, "ms": elapsed * 1e3})
    return points


async def _store_curve(url: str, engine: str, config: CurveConfig) -> dict[str, Any]:
    per = config.store_events_per_session
    async with _manager(url) as manager:
        try:

            async def turn_ms(session_id: str) -> float:
                async def turn() -> None:
                    loaded = await manager.get(session_id)
                    _add_turns(loaded, 2)
                    await manager.save(loaded)

                return await _median_ms(turn, max(5, config.repeats))

            async def fill(session_id: str) -> None:
                session = await manager.create(session_id)
                _add_turns(session, per)
                await manager.save(session)

            await fill("probe-empty")
            empty_ms = await turn_ms("probe-empty")
            size_before = await _store_bytes(engine, manager)
            started = time.perf_counter()
            await _chunked(
                [functools.partial(fill, f"bulk{n:07d}") for n in range(config.store_sessions)],
                32,
            )
            write_s = time.perf_counter() - started
            size_after = await _store_bytes(engine, manager)
            probe = f"bulk{config.store_sessions // 2:07d}"
            right_after_ms = await turn_ms(probe)
            # Right after a write burst the turns on SQLite wait for the checkpoint of
            # the burst's WAL (wall time many times its CPU time): let it settle, then
            # measure the store's size effect alone.
            await asyncio.sleep(3)
            full_ms = await turn_ms(probe)
        finally:
            await _wipe(manager)
    events = config.store_sessions * per
    return {
        "engine": engine,
        "sessions": config.store_sessions,
        "events": events,
        "write_s": write_s,
        "events_per_s": events / write_s,
        "bytes": None if size_after is None or size_before is None else size_after - size_before,
        "turn_empty_ms": empty_ms,
        "turn_full_store_ms": full_ms,
        "turn_right_after_writes_ms": right_after_ms,
    }


async def _store_bytes(engine: str, manager: Any) -> int | None:
    """The space the store takes, as its engine counts it (None if not measurable)."""
    if engine == "sqlite":
        path = Path(manager._url.partition("sqlite:///")[2].partition("?")[0])
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())
    if engine == "postgres":
        import asyncpg  # type: ignore[import-untyped,unused-ignore]

        conn = await asyncpg.connect(manager._url.partition("?")[0])
        try:
            return int(await conn.fetchval("SELECT pg_database_size(current_database())"))
        finally:
            await conn.close()
    if engine == "redis":
        client = manager.client
        total = 0
        async for key in client.scan_iter(match=f"agentsessions:{manager.options.namespace}:*"):
            total += int(await client.memory_usage(key) or 0)
        return total
    return None


# -- the run -------------------------------------------------------------------------

_CURVES: dict[str, Callable[[str, CurveConfig], Awaitable[Any]]] = {
    "history": _history_curve,
    "pages": _pages_curve,
    "delete_user": _delete_user_curve,
    "purge": _purge_curve,
}


async def measure_curves(
    urls: dict[str, str], config: CurveConfig, log: Log | None = None
) -> dict[str, Any]:
    """Every curve on every engine of *urls* (engine -> our store's URL)."""
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    found: dict[str, Any] = {"config": asdict(config), "engines": {}, "store": [], "errors": []}
    workdir = Path(tempfile.mkdtemp(prefix="agentsessions-curves-"))
    try:
        for engine, url in urls.items():
            curves: dict[str, Any] = {}
            for name, curve in _CURVES.items():
                where = _fresh_url(engine, url, workdir, name)
                started = time.perf_counter()
                try:
                    curves[name] = await curve(where, config)
                except Exception as exc:
                    found["errors"].append(f"{engine} {name}: {type(exc).__name__}: {exc}")
                    say(f"  curves {engine} {name}: FAILED ({exc})")
                    continue
                say(f"  curves {engine} {name}: {time.perf_counter() - started:.1f}s")
            found["engines"][engine] = curves
            if engine in config.store_engines:
                started = time.perf_counter()
                try:
                    found["store"].append(
                        await _store_curve(
                            _fresh_url(engine, url, workdir, "store"), engine, config
                        )
                    )
                except Exception as exc:
                    found["errors"].append(f"{engine} store: {type(exc).__name__}: {exc}")
                    say(f"  curves {engine} store: FAILED ({exc})")
                else:
                    say(f"  curves {engine} store: {time.perf_counter() - started:.1f}s")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    found["verdicts"] = verdicts(found)
    return found


def _fresh_url(engine: str, url: str, workdir: Path, tag: str) -> str:
    """A SQLite curve gets a file of its own, so one curve's data never sizes another's."""
    if engine != "sqlite":
        return url
    return "sqlite:///" + str(workdir / f"{tag}-{uuid.uuid4().hex[:8]}.db")


# -- shapes --------------------------------------------------------------------------


def _exponent(points: list[tuple[float, float]]) -> float | None:
    """The growth exponent between the first and last point on a log-log scale: about
    0 for a flat curve, 1 for a linear one."""
    usable = [(x, y) for x, y in points if x > 0 and y > 0]
    if len(usable) < 2:
        return None
    (x0, y0), (x1, y1) = usable[0], usable[-1]
    if x1 == x0:
        return None
    return math.log(y1 / y0) / math.log(x1 / x0)


#: curve, metric -> the shape the design promises.
DESIGN = {
    ("history", "turn_full_ms"): "linear",
    ("history", "memory_full_kib"): "linear",
    ("history", "turn_last_ms"): "flat",
    ("history", "append_ms"): "flat",
    ("history", "memory_last_kib"): "flat",
    ("pages", "ms"): "flat",
    ("delete_user", "ms"): "linear",
    ("purge", "ms"): "linear",
}
_IN_PROCESS = frozenset({"memory", "sqlite"})
_X = {"history": "size", "pages": "depth", "delete_user": "sessions", "purge": "sessions"}


def _judge(design: str, exponent: float | None) -> str:
    """*exponent* is the growth ratio (last / first) for a flat design, the log-log
    slope for a linear one."""
    if exponent is None:
        return "n/a"
    if design == "flat":
        # The flatness goal of the suite: at most 1.3x from the smallest to the largest.
        return "flat" if exponent <= 1.3 else "grows slightly" if exponent <= 2 else "NOT flat"
    if exponent > 1.25:
        return "worse than linear"
    return "linear" if exponent > 0.6 else "sublinear (fixed costs dominate)"


def verdicts(found: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for engine, curves in found["engines"].items():
        for (curve, metric), design in DESIGN.items():
            points = curves.get(curve)
            if not points:
                continue
            # In process (memory, SQLite) the client's CPU time is the cost, and it is
            # robust to a loaded machine; a server's cost shows only in wall time.
            cpu = metric.replace("_ms", "_cpu_ms")
            if engine in _IN_PROCESS and cpu in points[0]:
                metric = cpu
            pairs = [(float(p[_X[curve]]), float(p[metric])) for p in points]
            # Flat: the growth from the first point to the last. Linear: the slope where
            # the sizes are large, as fixed per-call costs hide it at the small end.
            if design == "flat":
                exponent = pairs[-1][1] / pairs[0][1] if pairs[0][1] > 0 else None
            else:
                exponent = _exponent(pairs[-2:])
            rows.append(
                {
                    "engine": engine,
                    "curve": curve,
                    "metric": metric,
                    "design": design,
                    "exponent": exponent,
                    "first": pairs[0],
                    "last": pairs[-1],
                    "verdict": _judge(design, exponent),
                }
            )
    for row in found.get("store", []):
        ratio = row["turn_full_store_ms"] / row["turn_empty_ms"] if row["turn_empty_ms"] else None
        rows.append(
            {
                "engine": row["engine"],
                "curve": "store",
                "metric": f"turn at {row['events'] // row['sessions']} events, "
                "full store / empty store",
                "design": "flat",
                "exponent": ratio,
                "first": None,
                "last": None,
                "verdict": _judge("flat", ratio),
            }
        )
    return rows


# -- report --------------------------------------------------------------------------


def _f(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.{digits}f}"


def render_curves(found: dict[str, Any], plots: dict[str, str] | None = None) -> str:
    config = found["config"]
    lines = [
        (
            "Full sizes."
            if config.get("full")
            else "Reduced sizes (`--curves --full` runs the full ones): "
            f"history up to {max(config['history_sizes']):,} events, "
            f"{config['sessions']:,} sessions listed {config['page_size']} per page, "
            f"purge of up to {max(config['purge_sessions']):,} sessions, a store of "
            f"{config['store_sessions'] * config['store_events_per_session']:,} events "
            f"in {config['store_sessions']:,} sessions."
        ),
        "",
        f"Medians of {config['repeats']} timed repetitions per point (delete_user and "
        "purge: one run each, they consume what they measure); milliseconds. CPU: this "
        "process's CPU time, all threads (for memory and SQLite the whole cost, and the "
        "figure their shapes are judged on; for a server, the client's share).",
    ]
    for engine, curves in found["engines"].items():
        lines += ["", f"#### {engine}", ""]
        history = curves.get("history") or []
        if history:
            lines += _rows(
                [
                    "events",
                    "turn, full read",
                    "CPU",
                    "turn, last 20",
                    "CPU",
                    "append",
                    "CPU",
                    "memory held, full read (KiB)",
                    "peak, full read (KiB)",
                    "memory held, last 20 (KiB)",
                ],
                [
                    [
                        f"{p['size']:,}",
                        _f(p["turn_full_ms"]),
                        _f(p.get("turn_full_cpu_ms")),
                        _f(p["turn_last_ms"]),
                        _f(p.get("turn_last_cpu_ms")),
                        _f(p["append_ms"]),
                        _f(p.get("append_cpu_ms")),
                        _f(p["memory_full_kib"], 1),
                        _f(p["peak_full_kib"], 1),
                        _f(p["memory_last_kib"], 1),
                    ]
                    for p in history
                ],
            )
        small = []
        for name, label in (
            ("pages", "page at depth"),
            ("delete_user", "delete_user of"),
            ("purge", "purge_expired of"),
        ):
            for p in curves.get(name) or []:
                x = p["depth"] if name == "pages" else p["sessions"]
                small.append([label, f"{x:,}", _f(p["ms"])])
        if small:
            lines += ["", *_rows(["operation", "n", "ms"], small)]
    if found.get("store"):
        per = config["store_events_per_session"]
        lines += ["", "#### A full store", ""]
        lines += _rows(
            [
                "engine",
                "sessions",
                "events",
                "write, s",
                "events/s",
                "space, MiB",
                f"turn @{per} in an empty store, ms",
                f"turn @{per} in the full store, ms",
                "the same, right after the writes, ms",
            ],
            [
                [
                    r["engine"],
                    f"{r['sessions']:,}",
                    f"{r['events']:,}",
                    _f(r["write_s"], 1),
                    f"{r['events_per_s']:,.0f}",
                    "-" if r["bytes"] is None else f"{r['bytes'] / 2**20:.1f}",
                    _f(r["turn_empty_ms"]),
                    _f(r["turn_full_store_ms"]),
                    _f(r.get("turn_right_after_writes_ms")),
                ]
                for r in found["store"]
            ],
        )
    if found.get("verdicts"):
        lines += [
            "",
            "#### Shapes",
            "",
            "Measured: for a curve meant to be flat, its growth from the first point "
            "to the last (flat: at most 1.3x, the suite's flatness goal); for one meant "
            "to be linear, its slope on a log-log scale between the last two points (1: "
            "linear; fixed per-call costs hide the slope at the small end); for the "
            "full store, the ratio of the two turns.",
            "",
        ]
        lines += _rows(
            ["engine", "curve", "metric", "design", "measured", "verdict"],
            [
                [
                    r["engine"],
                    r["curve"],
                    r["metric"],
                    r["design"],
                    _f(r["exponent"], 2),
                    r["verdict"] if r["verdict"] == r["design"] else f"**{r['verdict']}**",
                ]
                for r in found["verdicts"]
            ],
        )
    for error in found.get("errors", []):
        lines.append(f"- failed: {error}")
    for name, path in (plots or {}).items():
        lines += ["", f"![{name}]({path})"]
    return "\n".join(lines) + "\n"


def _rows(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(row) + " |" for row in rows]


def write_curve_plots(found: dict[str, Any], directory: Path) -> dict[str, Path]:
    """curves-history.png and curves-scale.png (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    written: dict[str, Path] = {}
    engines = found["engines"]
    panels = (
        ("turn_full_ms", "turn, full read (ms)"),
        ("turn_last_ms", "turn, last 20 read (ms)"),
        ("append_ms", "append alone (ms)"),
        ("memory_full_kib", "memory held after a full read (KiB)"),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(18, 4.4))
    for ax, (metric, title) in zip(axes, panels, strict=True):
        for engine, curves in engines.items():
            points = curves.get("history") or []
            if points:
                ax.plot(
                    [p["size"] for p in points],
                    [max(p[metric], 1e-3) for p in points],
                    marker="o",
                    label=engine,
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("events in the session")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Cost against history size (log-log: slope 1 is linear, 0 is flat)")
    fig.tight_layout()
    path = directory / "curves-history.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written["history"] = path

    panels2 = (
        ("pages", "depth", "list_sessions page at depth (ms)"),
        ("delete_user", "sessions", "delete_user of n sessions (ms)"),
        ("purge", "sessions", "purge_expired of n sessions (ms)"),
    )
    fig, axes = plt.subplots(1, len(panels2), figsize=(15, 4.4))
    for ax, (curve, x, title) in zip(axes, panels2, strict=True):
        for engine, curves in engines.items():
            points = curves.get(curve) or []
            if points:
                ax.plot(
                    [p[x] for p in points],
                    [max(p["ms"], 1e-3) for p in points],
                    marker="o",
                    label=engine,
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel(x)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Listing, deleting and purging at scale (log-log)")
    fig.tight_layout()
    path = directory / "curves-scale.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written["scale"] = path
    return written
