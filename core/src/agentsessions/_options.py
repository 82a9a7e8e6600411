"""`ManagerOptions`, the options every backend accepts, and the bounds of their values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._errors import InvalidOptionError

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_POOL_SIZE",
    "MAX_TIMEOUT",
    "MAX_TTL",
    "ManagerOptions",
    "OptionConflict",
    "PoolSize",
    "SchemaTooNewError",
    "Timeout",
    "validate_options",
]

#: Seconds every call may take end to end, unless the ``timeout`` option says otherwise.
DEFAULT_TIMEOUT = 10.0
#: The longest ``ttl``: a century (``None`` means sessions never expire).
MAX_TTL = 100 * 365 * 24 * 3600
#: The longest timeout option (one day), far below what any driver's milliseconds take.
MAX_TIMEOUT = 24 * 3600
#: The largest connection pool option.
MAX_POOL_SIZE = 10_000


class SchemaTooNewError(Exception):
    """Raised by a backend's migration: the store holds a schema from a newer release.

    The base class turns it into a `BackendUnavailableError` telling the user to upgrade
    the backend's distribution (older code could corrupt such a store). *where* names
    the store ("the database", "schema 'app'").
    """

    def __init__(self, found: int, known: int, where: str = "the database") -> None:
        super().__init__(found, known, where)
        self.found, self.known, self.where = found, known, where


class OptionConflict(ValueError):
    """Raised by an options model's validator: options valid one by one, not together.

    A check across fields has no field of its own, so pydantic would report it under
    the model as a whole; `SessionManager.parse_options` reports it under *options*,
    the fields involved, instead: ``OptionConflict(("min_pool_size", "max_pool_size"),
    "min_pool_size (5) is larger than max_pool_size (2)")`` becomes ``options
    'min_pool_size' and 'max_pool_size': min_pool_size (5) is larger than max_pool_size
    (2) (got min_pool_size='5', max_pool_size='2')``.
    """

    def __init__(self, options: tuple[str, ...], problem: str) -> None:
        super().__init__(problem)
        self.options, self.problem = options, problem


#: A timeout option: finite seconds, more than 0, at most `MAX_TIMEOUT`.
Timeout = Annotated[float, Field(gt=0, le=MAX_TIMEOUT, allow_inf_nan=False)]
#: A connection pool size option: 1 to `MAX_POOL_SIZE`.
PoolSize = Annotated[int, Field(ge=1, le=MAX_POOL_SIZE)]


class ManagerOptions(BaseModel):
    """Options every backend accepts; a backend extends this with its own fields.

    Every field is range-checked (finite, positive where it must be, bounded), so a
    value that would fail at first use fails at `connect()`, naming the option.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttl: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TTL,
        allow_inf_nan=False,
        description="seconds of inactivity after which a session expires",
    )
    namespace: str = Field(
        default="",
        max_length=48,
        pattern=r"^[A-Za-z0-9_]*$",
        description="isolates applications that share one server",
    )
    timeout: float = Field(
        default=DEFAULT_TIMEOUT,
        gt=0,
        le=3600,
        description="seconds any one call may take end to end (connecting, waiting for a "
        "pooled connection and retries included) before it raises BackendTimeoutError",
    )

    def bounded(self, seconds: float | None) -> float:
        """*seconds* for one driver wait (connect, reply), or the ``timeout`` when None;
        never longer than the ``timeout``, which bounds the whole call anyway."""
        return self.timeout if seconds is None else min(seconds, self.timeout)


OptionsT = TypeVar("OptionsT", bound=ManagerOptions)


def validate_options(model: type[OptionsT], raw: Mapping[str, Any]) -> OptionsT:
    """*raw* validated against *model*, or an `InvalidOptionError` naming each bad option."""
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            name = ".".join(str(part) for part in error["loc"])
            if error["type"] == "extra_forbidden":
                known = ", ".join(sorted(model.model_fields))
                problems.append(f"unknown option {name!r} (known: {known})")
            elif name:
                problems.append(f"option {name!r}: {error['msg']} (got {error['input']!r})")
            else:  # a check across fields, by the model's own validator
                problems.append(_across_fields(error.get("ctx", {}).get("error"), raw))
        raise InvalidOptionError("; ".join(problems)) from None


def _across_fields(error: object, raw: Mapping[str, Any]) -> str:
    """The problem a model validator found, named by the options an `OptionConflict`
    says it involves (pydantic reports it under no field at all)."""
    if not isinstance(error, OptionConflict) or not error.options:
        given = ", ".join(f"{name}={value!r}" for name, value in sorted(raw.items()))
        return f"the options together: {error} (got {given or 'the defaults'})"
    quoted = [repr(name) for name in error.options]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"
    given = ", ".join(f"{name}={raw[name]!r}" for name in error.options if name in raw)
    plural = "s" * (len(quoted) > 1)
    return f"option{plural} {listed}: {error.problem} (got {given or 'the defaults'})"
