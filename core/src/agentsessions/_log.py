"""What an operator needs to know, as standard `logging` records of the ``agentsessions`` logger.

Each record has a readable message and, for log processors, structured fields set as
record attributes: ``event`` (``connection_opened``, ``connection_failed``,
``connection_lost``, ``connection_recovered``, ``migrations_applied``,
``retries_exhausted``, ``plugin_failed``), ``url`` (password masked), ``backend`` (the
``db.system.name``) and the event's own fields. Session and user ids are never logged,
and every message from a driver has the URL's password scrubbed out.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ._urls import scrub_secret

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = [
    "connection_failed",
    "connection_lost",
    "connection_opened",
    "connection_recovered",
    "logger",
    "migrations_applied",
    "plugin_failed",
    "retries_exhausted",
    "still_unavailable",
]

logger = logging.getLogger("agentsessions")
# A library configures no output: without this, an application that set up no logging
# gets WARNING records on stderr from logging's last-resort handler (a CLI error would
# then be followed by a second, raw copy of it).
logger.addHandler(logging.NullHandler())


def _emit(level: int, manager: SessionManager, event: str, message: str, **fields: Any) -> None:
    if not logger.isEnabledFor(level):
        return
    url = manager.url
    backend = type(manager).db_system or url.partition("://")[0].lower()
    logger.log(
        level,
        f"{message} ({url})",
        extra={"event": event, "url": url, "backend": backend, **fields},
    )


def _reason(manager: SessionManager, error: BaseException) -> str:
    return scrub_secret(f"{type(error).__name__}: {error}", manager._url)


def connection_opened(manager: SessionManager) -> None:
    _emit(logging.INFO, manager, "connection_opened", "connection opened")


def connection_failed(manager: SessionManager, error: BaseException) -> None:
    reason = _reason(manager, error)
    _emit(logging.WARNING, manager, "connection_failed", f"cannot connect: {reason}", reason=reason)


def connection_lost(manager: SessionManager, error: BaseException) -> None:
    reason = _reason(manager, error)
    _emit(logging.WARNING, manager, "connection_lost", f"connection lost: {reason}", reason=reason)


def still_unavailable(manager: SessionManager, error: BaseException, failures: int) -> None:
    reason = _reason(manager, error)
    _emit(
        logging.DEBUG,
        manager,
        "connection_lost",
        f"still unavailable ({failures} failed calls): {reason}",
        reason=reason,
        failures=failures,
    )


def connection_recovered(manager: SessionManager, downtime: float, failures: int) -> None:
    _emit(
        logging.INFO,
        manager,
        "connection_recovered",
        f"connection recovered after {downtime:.1f} s and {failures} failed calls",
        downtime_s=round(downtime, 3),
        failures=failures,
    )


def migrations_applied(manager: SessionManager, from_version: int, to_version: int) -> None:
    _emit(
        logging.INFO,
        manager,
        "migrations_applied",
        f"schema migrated from version {from_version} to {to_version}",
        from_version=from_version,
        to_version=to_version,
    )


def retries_exhausted(manager: SessionManager, retries: int) -> None:
    _emit(
        logging.WARNING,
        manager,
        "retries_exhausted",
        f"update() gave up after {retries} retries: every attempt lost a race with "
        "another writer of the session",
        retries=retries,
    )


def plugin_failed(manager: SessionManager, hook: str) -> None:
    import sys

    error = sys.exc_info()[1]
    reason = "unknown error" if error is None else _reason(manager, error)
    _emit(
        logging.ERROR,
        manager,
        "plugin_failed",
        f"an instrumentation plugin failed in {hook}: {reason}",
        hook=hook,
        reason=reason,
    )
