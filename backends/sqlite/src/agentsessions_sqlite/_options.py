"""The options a ``sqlite://`` URL accepts, beyond core's ``ttl`` and ``namespace``."""

from __future__ import annotations

from typing import Literal

from agentsessions.backend import ManagerOptions, Timeout
from pydantic import Field, field_validator

__all__ = ["SQLiteOptions"]


class SQLiteOptions(ManagerOptions):
    """Options of `SQLiteSessionManager`, from the URL's query string or keyword arguments.

    ``journal_mode`` is deliberately not an option: the concurrency model (readers
    never block the writer, several processes on one file) rests on WAL, and the
    setups where WAL cannot work (network filesystems) are ones SQLite itself does not
    support for concurrent writers in any journal mode.
    """

    busy_timeout: Timeout = Field(
        default=10.0,
        description=(
            "seconds a write waits for another connection or process to release the "
            "database before failing with BackendUnavailableError"
        ),
    )
    synchronous: Literal["normal", "full"] = Field(
        default="normal",
        description=(
            "'normal' survives application crashes (a commit is in the OS before it "
            "returns); 'full' also survives power loss, at an fsync per save"
        ),
    )

    @field_validator("synchronous", mode="before")
    @classmethod
    def _lower_case(cls, value: object) -> object:
        # PRAGMA values are case-insensitive in SQLite; accept them the same way.
        return value.lower() if isinstance(value, str) else value
