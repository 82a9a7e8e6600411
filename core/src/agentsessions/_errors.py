"""The exceptions agentsessions raises.

Every error a caller can act on derives from `SessionError`, and input that is
wrong before any I/O happens also derives from `ValueError`, so
``except ValueError`` keeps working for code that validates its own input::

    SessionError
    ├── SessionExistsError           create() of an id that is already stored
    ├── SessionNotFoundError         save() or update() of a session that is not stored
    ├── SessionConflictError         save() of a copy whose version is stale
    ├── SessionOwnershipError        a user_id that does not own the session
    ├── SessionSerializationError    a value in state or events that is not JSON (also ValueError)
    │   └── SessionTooLargeError     an encoded event or state past the backend's size limit
    ├── PartialSessionError          an edit a session loaded with last_events cannot express
    ├── SessionDecryptionError       a stored ciphertext that fails to decrypt (altered, moved)
    ├── InvalidInputError            bad input, rejected before any I/O (also ValueError)
    │   ├── InvalidSessionIdError    empty, blank, too long or not a string
    │   └── InvalidOptionError       an unknown connect() option or a bad value for one
    ├── UnknownBackendError          no installed backend handles the URL's scheme
    ├── OperationNotSupportedError   an optional operation the backend lacks (NotImplementedError)
    ├── BackendConflictError         several distributions claim one URL scheme
    ├── BackendPluginError           the plugin serving a URL scheme is broken
    ├── BackendUnavailableError      the server cannot be reached (the URL is masked)
    │   ├── BackendAuthenticationError  the server refused the credentials
    │   ├── DatabaseNotFoundError    the database the URL names does not exist
    │   ├── BackendTimeoutError      the call did not finish within its deadline (``timeout``)
    │   │   └── BackendLockedError   a write gave up waiting for a lock another process held
    │   ├── StorageFullError         the server refuses writes because it is out of space
    │   └── BackendReadOnlyError     the server is a standby or replica: it refuses writes
    └── ManagerClosedError           a call on a manager after close()
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "BackendAuthenticationError",
    "DatabaseNotFoundError",
    "BackendConflictError",
    "BackendLockedError",
    "BackendPluginError",
    "BackendReadOnlyError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "InvalidInputError",
    "InvalidOptionError",
    "InvalidSessionIdError",
    "ManagerClosedError",
    "OperationNotSupportedError",
    "PartialSessionError",
    "SessionConflictError",
    "SessionDecryptionError",
    "SessionError",
    "SessionExistsError",
    "SessionNotFoundError",
    "SessionOwnershipError",
    "SessionSerializationError",
    "SessionTooLargeError",
    "StorageFullError",
    "UnknownBackendError",
]


class SessionError(Exception):
    """Base class of every error agentsessions raises on purpose."""


class SessionExistsError(SessionError):
    """`create()` was asked for an id that is already stored; nothing was written."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} already exists")
        self.session_id = session_id


class SessionNotFoundError(SessionError):
    """The session is not stored (never created, deleted, or expired)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session {session_id!r} does not exist (never created, deleted or expired)"
        )
        self.session_id = session_id


class SessionConflictError(SessionError):
    """Another save landed since this copy was loaded; nothing was written.

    Reload the session and apply the change again, or use
    `SessionManager.update`, which does exactly that in a loop.
    """

    def __init__(self, session_id: str, expected_version: int, detail: str = "") -> None:
        message = (
            f"session {session_id!r} was saved by someone else since it was loaded "
            f"at version {expected_version}; reload it and retry"
        )
        super().__init__(f"{message} ({detail})" if detail else message)
        self.session_id = session_id
        self.expected_version = expected_version


class SessionOwnershipError(SessionError):
    """The session belongs to another user than the one asked for."""

    def __init__(self, session_id: str, user_id: str) -> None:
        # The owner is deliberately not named: the error may reach the other user.
        super().__init__(f"session {session_id!r} does not belong to user {user_id!r}")
        self.session_id = session_id
        self.user_id = user_id


class SessionSerializationError(SessionError, ValueError):
    """A value in state, content or metadata is not plain JSON; nothing was written."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class PartialSessionError(SessionError):
    """A session loaded with ``last_events`` was edited in a way it cannot save."""


class SessionDecryptionError(SessionError):
    """Stored data of a session cannot be decrypted, so nothing of it is returned.

    ``session_id`` names the session and ``part`` what failed (``"state"`` or
    ``"event 3 (id 'e1')"``); ``key_id`` is the key id the ciphertext names, if any.
    The causes: the ciphertext was altered, or copied from another session, position or
    namespace; it names a key the keyring does not hold; it is not encrypted at all
    (written before encryption was turned on) and the keyring does not accept
    plaintext; or a manager without encryption read an encrypted session.
    """

    def __init__(self, session_id: str, part: str, problem: str, key_id: str | None = None) -> None:
        super().__init__(f"session {session_id!r}, {part}: {problem}")
        self.session_id = session_id
        self.part = part
        self.key_id = key_id


class InvalidInputError(SessionError, ValueError):
    """Input rejected before any I/O."""


class SessionTooLargeError(SessionSerializationError, InvalidInputError):
    """An encoded event or state is larger than the backend stores; nothing was written.

    The message states the size and the limit, never the value itself.
    """

    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(
            path, f"encodes to {size} bytes; this backend stores at most {limit} bytes"
        )
        self.size = size
        self.limit = limit


class InvalidSessionIdError(InvalidInputError):
    """A session or user id that is not a non-empty string of bounded length."""


class InvalidOptionError(InvalidInputError):
    """An unknown option, or a bad value for a known one, given to `connect()`."""


class UnknownBackendError(SessionError):
    """No installed backend handles the URL's scheme."""

    def __init__(self, scheme: str, installed: Iterable[str], hint: str = "") -> None:
        known = ", ".join(sorted(installed)) or "none"
        message = f"no backend is installed for URL scheme {scheme!r} (installed: {known})"
        super().__init__(f"{message}; {hint}" if hint else message)
        self.scheme = scheme


class OperationNotSupportedError(SessionError, NotImplementedError):
    """The backend does not implement this optional operation (its capability is off);
    nothing was read or written. Also a `NotImplementedError`, as for compaction."""

    def __init__(self, backend: str, operation: str, capability: str) -> None:
        super().__init__(
            f"{backend} does not support {operation}() (capabilities.{capability} is False)"
        )
        self.operation = operation
        self.capability = capability


class BackendConflictError(SessionError):
    """Several installed distributions claim one URL scheme and none is chosen.

    Only that scheme is affected; the message names the distributions and how to
    choose one (uninstall the others, or the ``AGENTSESSIONS_BACKENDS`` override).
    """


class BackendPluginError(SessionError):
    """The installed plugin serving a URL scheme cannot be used: its module fails to
    import, fails pluggy's hook validation, or does not provide the scheme.

    Only that scheme is affected; ``distributions`` names the one at fault.
    """

    def __init__(self, scheme: str, distributions: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.scheme = scheme
        self.distributions = distributions


class BackendUnavailableError(SessionError):
    """The backend's server could not be reached or failed mid-operation.

    ``url`` is masked: it never holds a password.
    """

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"backend at {url} is unavailable: {reason}")
        self.url = url
        self.reason = reason


class BackendAuthenticationError(BackendUnavailableError):
    """The server refused the credentials (wrong password, unknown user or role).

    Not a reason to retry: fix the URL's user or password.
    """


class DatabaseNotFoundError(BackendUnavailableError):
    """The server answered, but the database the URL names does not exist there.

    Not a reason to retry: fix the URL, or create the database.
    """


class BackendTimeoutError(BackendUnavailableError):
    """A call did not finish within its deadline, the manager's ``timeout`` option.

    Also raised when a driver timeout shorter than the deadline (an engine-specific
    option such as ``socket_timeout``) gave up first; ``reason`` then says which.
    ``operation`` names the public method (``"save"``), ``timeout`` the deadline in
    seconds. Whatever the call was doing was abandoned and its connection discarded.
    """

    def __init__(self, url: str, operation: str, timeout: float, reason: str = "") -> None:
        detail = f"{operation}() did not finish within its {timeout:g} s deadline"
        super().__init__(url, f"{detail} ({reason})" if reason else detail)
        self.operation = operation
        self.timeout = timeout


class BackendLockedError(BackendTimeoutError):
    """A write waited for a lock another connection or process held (a file engine's
    write lock), for as long as the backend's lock wait allows (SQLite's
    ``busy_timeout``), and gave up; nothing was written.

    A definite refusal, not an unknown outcome: `update()` raises it at once instead
    of re-sending until its deadline. ``wait`` is the lock wait in seconds.
    """

    def __init__(self, url: str, operation: str, timeout: float, wait: float, reason: str) -> None:
        detail = f"{operation}() gave up after waiting {wait:g} s for a lock; nothing was written"
        BackendUnavailableError.__init__(self, url, f"{detail} ({reason})")
        self.operation = operation
        self.timeout = timeout
        self.wait = wait


class StorageFullError(BackendUnavailableError):
    """The server refused a write because it is full (Redis at ``maxmemory``, a full
    disk); nothing was written. Free space or raise the limit, then retry."""


class BackendReadOnlyError(BackendUnavailableError):
    """The server refused a write because it accepts none: a standby or read-only
    replica, or a primary being demoted in a failover. Nothing was written.

    Retryable: the manager drops its connections to that server, so once one of the
    URL's hosts is the primary (a standby promoted), the next call writes there. A URL
    none of whose hosts accepts writes raises it at connect time too.
    """


class ManagerClosedError(SessionError):
    """The manager was closed; open a new one with `connect()`."""


# Shown as ``agentsessions.SessionConflictError`` in tracebacks and reprs, where callers
# import them from, rather than as this private module's.
for _name in __all__:
    globals()[_name].__module__ = "agentsessions"
del _name
