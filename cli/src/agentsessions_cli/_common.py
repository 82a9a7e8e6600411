"""What every verb shares: exit codes, one-line errors, and terminal-aware output."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import agentsessions
from agentsessions import (
    BackendAuthenticationError,
    BackendConflictError,
    BackendPluginError,
    BackendUnavailableError,
    DatabaseNotFoundError,
    InvalidInputError,
    SessionError,
    SessionManager,
    SessionNotFoundError,
    UnknownBackendError,
)
from rich.console import Console

if TYPE_CHECKING:
    from agentsessions.encryption import Keyring

__all__ = [
    "EXIT_AUTHENTICATION",
    "EXIT_CODES_HELP",
    "EXIT_NO_DATABASE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "CommandError",
    "connect",
    "console",
    "err_console",
    "fail",
    "keyring_from_env",
    "run",
]

#: Set, every verb reads and writes through a keyring of these keys (docs/encryption.md).
KEYS_VARIABLE = "AGENTSESSIONS_ENCRYPTION_KEYS"

EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and found a problem: not found, mismatch, conflict
EXIT_USAGE = 2  # bad arguments or input: unknown scheme, bad option, malformed file, ...
EXIT_UNAVAILABLE = 3  # the backend's server could not be reached
EXIT_AUTHENTICATION = 4  # the server refused the URL's credentials
EXIT_NO_DATABASE = 5  # the server has no database of the URL's name
EXIT_INTERRUPTED = 130

EXIT_CODES_HELP = """exit codes:
  0    success
  1    the command ran and found a problem (not found, mismatch, conflict)
  2    bad usage or input (unknown scheme, broken or conflicting backend plugin, bad
       option, malformed file line, a SQLite file to read that does not exist)
  3    the backend's server could not be reached
  4    the server refused the credentials (user, password)
  5    the database the URL names does not exist on the server
  130  interrupted"""


class _Console(Console):
    """A console that never breaks a line of text it prints to a pipe or a file.

    Piped output is read by grep and by other programs, and a wrapped line breaks the
    URLs and ids it holds. Off a terminal a text line is printed whole unless ``COLUMNS``
    sets a width; tables are still laid out to the width (their cells wrap by design).
    """

    def print(self, *objects: Any, soft_wrap: bool | None = None, **kwargs: Any) -> None:
        if (
            soft_wrap is None
            and not self.is_terminal
            and "COLUMNS" not in os.environ
            and all(isinstance(item, str) for item in objects)
        ):
            soft_wrap = True
        super().print(*objects, soft_wrap=soft_wrap, **kwargs)


# Colour and markup only on a terminal; piped output stays plain text.
console = _Console(highlight=False, soft_wrap=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

T = TypeVar("T")


class CommandError(Exception):
    """A failure the command reports as one line, with its exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def keyring_from_env(*, required: bool = False, accept_plaintext: bool = False) -> Keyring | None:
    """The keyring of `KEYS_VARIABLE`, or None when it is unset (and not *required*)."""
    if not os.environ.get(KEYS_VARIABLE, "").strip():
        if required:
            raise CommandError(
                f"{KEYS_VARIABLE} is not set: it holds the encryption keys as "
                '"keyid:BASE64KEY,..." (the first one encrypts); see docs/encryption.md',
                EXIT_USAGE,
            )
        return None
    try:
        from agentsessions.encryption import Keyring
    except ImportError:
        raise CommandError(
            f"{KEYS_VARIABLE} is set, and encryption needs the encryption extra: "
            "pip install 'agentsessions[encryption]'",
            EXIT_USAGE,
        ) from None
    return Keyring.from_env(KEYS_VARIABLE, accept_plaintext=accept_plaintext)


def connect(url: str, *, keyring: Keyring | None = None) -> SessionManager:
    """`agentsessions.connect`, encrypting with *keyring* or the keys of `KEYS_VARIABLE`."""
    keyring = keyring if keyring is not None else keyring_from_env()
    if keyring is None:
        return agentsessions.connect(url)
    return agentsessions.connect(url, encryption=keyring)


def fail(message: str, code: int) -> int:
    err_console.print(f"agentsessions: error: {message}", markup=False, highlight=False)
    return code


def run(main: Callable[[], Awaitable[int]]) -> int:
    """Run a verb's coroutine, turning every expected failure into one line and an exit code."""
    try:
        return asyncio.run(_call(main))
    except BrokenPipeError:
        # The reader went away (``export | head``): that is how such a pipe ends, not an
        # error. Point stdout at devnull so the interpreter's final flush is quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)
    except CommandError as exc:
        return fail(str(exc), exc.code)
    except BackendAuthenticationError as exc:
        return fail(f"authentication failed: {exc}", EXIT_AUTHENTICATION)
    except DatabaseNotFoundError as exc:
        return fail(f"no such database: {exc}", EXIT_NO_DATABASE)
    except BackendUnavailableError as exc:
        return fail(str(exc), EXIT_UNAVAILABLE)
    except (
        UnknownBackendError,
        BackendConflictError,
        BackendPluginError,
        InvalidInputError,
        ValueError,
    ) as exc:
        return fail(str(exc), EXIT_USAGE)
    except SessionNotFoundError as exc:
        return fail(str(exc), EXIT_FAILED)
    except SessionError as exc:
        return fail(str(exc), EXIT_FAILED)
    except OSError as exc:
        return fail(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), EXIT_USAGE)


async def _call(main: Callable[[], Awaitable[T]]) -> T:
    return await main()
