"""What encryption at rest costs: the same turn and the same 5,000-event read, in one run.

Per engine, our store without and with encryption (``connect(url, encryption=...)``), and
on SQLite the OpenAI Agents SDK's `SQLiteSession` without and with its `EncryptedSession`
wrapper (Fernet, a key derived per session). The arms take turns operation by operation,
in an order rotated each time, so drift on a shared machine falls on all of them alike.
Each operation is timed on the wall clock and in this process's CPU time (all threads):
encryption is CPU work in this process, and a loaded machine inflates wall-clock times,
not our CPU time.
"""

from __future__ import annotations

import base64
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from ._ours import OurStore
from ._peers import SdkSqliteStore
from ._runner import Config, Log, _no_gc, _quiet_gc
from ._store import Store, StoreUnavailable, new_session_id

__all__ = ["ARMS", "measure_encryption", "render_encryption"]

#: The history of a turn's session, and of the read-alone case.
TURN_HISTORY = 100
READ_HISTORY = 5_000
#: Sessions per arm for turns: each grows by two events per turn, spread over these.
_SESSIONS = 10

#: Arm -> what it is, in table order. The SDK arms exist on SQLite only.
ARMS = {
    "plain": "agentsessions",
    "encrypted": "agentsessions, encryption on",
    "sdk": "OpenAI SQLiteSession",
    "sdk_encrypted": "OpenAI EncryptedSession(SQLiteSession)",
}


class SdkEncryptedSqliteStore(SdkSqliteStore):
    """`agents.extensions.memory.EncryptedSession` over `SQLiteSession` on a file."""

    name = "OpenAI EncryptedSession(SQLiteSession)"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._key = base64.urlsafe_b64encode(os.urandom(32)).decode()

    async def open(self) -> None:
        await super().open()
        try:
            from agents.extensions.memory import EncryptedSession  # noqa: F401
        except ImportError as exc:
            raise StoreUnavailable(f"EncryptedSession needs cryptography ({exc})") from exc

    def _make(self, session_id: str) -> Any:
        from agents import SQLiteSession
        from agents.extensions.memory import EncryptedSession

        # A day: its items expire after ttl seconds (and are then skipped silently).
        return EncryptedSession(
            session_id, SQLiteSession(session_id, self._path), encryption_key=self._key, ttl=86400
        )


async def _read(store: Store, session_id: str) -> None:
    """A full read alone, through each store's public API."""
    if isinstance(store, OurStore):
        await store._manager.get(session_id)
    else:
        assert isinstance(store, SdkSqliteStore)
        await store._session(session_id).get_items()


def _arms(engine: str, url: str, workdir: Path) -> dict[str, Store]:
    from agentsessions.encryption import Keyring

    def our_url(name: str) -> str:
        # A file each: two managers on one SQLite file flush each other's page caches.
        return f"sqlite:///{workdir / f'enc-{name}.db'}" if engine == "sqlite" else url

    keyring = Keyring({"bench": os.urandom(32)})
    arms: dict[str, Store] = {
        "plain": OurStore(our_url("plain")),
        "encrypted": OurStore(our_url("encrypted"), encryption=keyring),
    }
    if engine == "sqlite":
        arms["sdk"] = SdkSqliteStore(str(workdir / "enc-sdk.db"))
        arms["sdk_encrypted"] = SdkEncryptedSqliteStore(str(workdir / "enc-sdk-encrypted.db"))
    return arms


async def _timed(
    names: list[str],
    step: int,
    run: Callable[[str], Awaitable[None]],
    into: dict[str, dict[str, list[float]]],
) -> None:
    shift = step % len(names)
    for name in names[shift:] + names[:shift]:
        with _no_gc():
            started, cpu_started = time.perf_counter(), time.process_time()
            await run(name)
            into["wall"][name].append(time.perf_counter() - started)
            into["cpu"][name].append(time.process_time() - cpu_started)


async def _one_round(
    engine: str, url: str, workdir: Path, turns: int, reads: int, histories: tuple[int, int]
) -> dict[str, dict[str, dict[str, float]]]:
    round_dir = workdir / f"round-{os.urandom(4).hex()}"
    round_dir.mkdir(parents=True)
    arms = _arms(engine, url, round_dir)
    names = list(arms)
    samples: dict[str, dict[str, dict[str, list[float]]]] = {
        case: {"wall": {n: [] for n in names}, "cpu": {n: [] for n in names}}
        for case in ("turn", "read")
    }
    opened: list[Store] = []
    try:
        sessions: dict[str, list[str]] = {}
        big: dict[str, str] = {}
        for name, store in arms.items():
            await store.open()
            opened.append(store)
            sessions[name] = [new_session_id(f"enc-{name}") for _ in range(_SESSIONS)]
            for session_id in sessions[name]:
                await store.create(session_id, histories[0])
                await store.turn(session_id, None)  # warm-up, untimed
            big[name] = new_session_id(f"enc-big-{name}")
            await store.create(big[name], histories[1])
            await _read(store, big[name])  # warm-up, untimed
        _quiet_gc()

        async def turn(name: str, index: int) -> None:
            session_id = sessions[name][index % _SESSIONS]
            arms[name].forget(session_id)
            await arms[name].turn(session_id, None)

        async def read(name: str) -> None:
            await _read(arms[name], big[name])

        for index in range(turns):

            async def this_turn(name: str, index: int = index) -> None:
                await turn(name, index)

            await _timed(names, index, this_turn, samples["turn"])
        for index in range(reads):
            await _timed(names, index, read, samples["read"])
    finally:
        for store in opened:
            await store.close()
    return {
        case: {
            name: {
                "wall": statistics.median(found["wall"][name]),
                "cpu": statistics.median(found["cpu"][name]),
            }
            for name in names
        }
        for case, found in samples.items()
    }


async def measure_encryption(
    urls: dict[str, str],
    config: Config,
    workdir: Path,
    log: Log | None = None,
    histories: tuple[int, int] = (TURN_HISTORY, READ_HISTORY),
) -> list[dict[str, Any]]:
    """Per engine (SQLite, PostgreSQL), case and arm: median wall ms and CPU µs, over rounds.

    *histories*: the events of a turn's session and of the read-alone session.
    """
    turns = max(20, config.overhead_turns // 3)
    reads = max(4, config.ops)
    rows: list[dict[str, Any]] = []
    for engine in ("sqlite", "postgres"):
        url = urls.get(engine)
        if url is None:
            continue
        rounds = [
            await _one_round(engine, url, workdir, turns, reads, histories)
            for _ in range(config.overhead_rounds)
        ]
        for case, count in (("turn", turns), ("read", reads)):
            for arm in rounds[0][case]:
                rows.append(
                    {
                        "engine": engine,
                        "case": case,
                        "arm": arm,
                        "store": ARMS[arm],
                        "history": histories[0] if case == "turn" else histories[1],
                        "ops": count,
                        "rounds": len(rounds),
                        "wall_ms": statistics.median(r[case][arm]["wall"] for r in rounds) * 1e3,
                        "cpu_us": statistics.median(r[case][arm]["cpu"] for r in rounds) * 1e6,
                    }
                )
        if log:
            for row in rows[-len(rounds[0]["turn"]) * 2 :]:
                log(f"  encryption {engine} {row['case']} {row['arm']}: {row['wall_ms']:.3f} ms")
    return rows


def render_encryption(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The encryption table, as Markdown lines: each arm with its ratio to its plain twin."""
    if not rows:
        return []
    by_key = {(r["engine"], r["case"], r["arm"]): r for r in rows}
    first = rows[0]
    lines = [
        "| engine | operation | store | wall, ms | wall vs unencrypted | CPU, µs "
        "| CPU vs unencrypted |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        twin = {"encrypted": "plain", "sdk_encrypted": "sdk"}.get(row["arm"])
        base = by_key.get((row["engine"], row["case"], twin)) if twin else None
        wall_ratio = f"{row['wall_ms'] / base['wall_ms']:.2f}x" if base else "1 (baseline)"
        cpu_ratio = f"{row['cpu_us'] / base['cpu_us']:.2f}x" if base else "1 (baseline)"
        operation = (
            f"turn ({row['history']}-event history, full read + 2 appended)"
            if row["case"] == "turn"
            else f"full read of {row['history']} events"
        )
        lines.append(
            f"| {row['engine']} | {operation} | {row['store']} | {row['wall_ms']:.3f} "
            f"| {wall_ratio} | {row['cpu_us']:.0f} | {cpu_ratio} |"
        )
    lines += [
        "",
        f"{first['rounds']} round(s); per round {by_key_ops(rows, 'turn')} turns and "
        f"{by_key_ops(rows, 'read')} reads per store, stores alternating; medians per "
        "operation, median over rounds. CPU is this process's, all threads.",
    ]
    return lines


def by_key_ops(rows: Sequence[dict[str, Any]], case: str) -> int:
    return next((int(r["ops"]) for r in rows if r["case"] == case), 0)
