"""agentsessions: durable, concurrency-safe conversation sessions for AI agents.

Pick a backend by URL with `connect`, then create, get and save `Session` objects
through the `SessionManager` it returns. Backend authors start at
`agentsessions.backend`.
"""

from ._clock import Clock, SystemClock
from ._diagnosis import SEVERITIES, Diagnosis, Finding, Severity
from ._errors import (
    BackendAuthenticationError,
    BackendConflictError,
    BackendLockedError,
    BackendPluginError,
    BackendReadOnlyError,
    BackendTimeoutError,
    BackendUnavailableError,
    DatabaseNotFoundError,
    InvalidInputError,
    InvalidOptionError,
    InvalidSessionIdError,
    ManagerClosedError,
    OperationNotSupportedError,
    PartialSessionError,
    SessionConflictError,
    SessionDecryptionError,
    SessionError,
    SessionExistsError,
    SessionNotFoundError,
    SessionOwnershipError,
    SessionSerializationError,
    SessionTooLargeError,
    StorageFullError,
    UnknownBackendError,
)
from ._instrumentation import instrument, uninstrument
from ._manager import ManagerOptions, SessionManager, check_restorable
from ._memory import MemorySessionManager
from ._models import Event, ForkOrigin, Session, SessionPage, SessionSummary
from ._records import Capabilities
from ._registry import (
    BackendProblem,
    BackendSpec,
    backend_problems,
    connect,
    installed_backends,
    register_backend,
    unregister_backend,
)
from ._urls import mask_url
from ._version import __version__

__all__ = [
    "__version__",
    "backend_problems",
    "BackendAuthenticationError",
    "BackendConflictError",
    "BackendLockedError",
    "BackendPluginError",
    "BackendProblem",
    "BackendReadOnlyError",
    "BackendSpec",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "Capabilities",
    "check_restorable",
    "Clock",
    "connect",
    "DatabaseNotFoundError",
    "Diagnosis",
    "Event",
    "Finding",
    "ForkOrigin",
    "installed_backends",
    "instrument",
    "InvalidInputError",
    "InvalidOptionError",
    "InvalidSessionIdError",
    "ManagerClosedError",
    "ManagerOptions",
    "OperationNotSupportedError",
    "mask_url",
    "MemorySessionManager",
    "PartialSessionError",
    "register_backend",
    "Session",
    "SessionConflictError",
    "SessionDecryptionError",
    "SessionError",
    "SessionExistsError",
    "SessionManager",
    "SessionNotFoundError",
    "SessionOwnershipError",
    "SessionPage",
    "SessionSerializationError",
    "SessionSummary",
    "SessionTooLargeError",
    "SEVERITIES",
    "Severity",
    "StorageFullError",
    "SystemClock",
    "uninstrument",
    "UnknownBackendError",
    "unregister_backend",
]
