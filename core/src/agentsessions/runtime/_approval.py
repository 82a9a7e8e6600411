"""Tools, and the records that let a tool call wait for a human between runs.

A call that needs approval cannot simply block: the human may answer minutes later,
from another process. So the call is written into ``session.state`` as a
`PendingToolCall` (plain JSON, validated back into the model when a later run
restores it) and the run ends saying it is waiting. The run that carries the
`Approval` resumes it.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from .. import _json
from .._errors import InvalidInputError, SessionSerializationError
from .._manager import MAX_ID_LENGTH
from .._models import utcnow

__all__ = [
    "PENDING_CALLS_KEY",
    "Approval",
    "PendingToolCall",
    "PendingToolCalls",
    "Tool",
    "ToolCallNotFoundError",
    "ToolOutcome",
    "Toolbox",
    "UnknownToolError",
    "jsonable_result",
    "new_call_id",
]

#: The ``session.state`` key holding the calls that wait for a decision.
PENDING_CALLS_KEY = "agentsessions:pending_tool_calls"

ToolFunction = Callable[..., Any]


def new_call_id() -> str:
    """A short random id: long enough never to collide within one session, short enough to type."""
    return "call_" + uuid.uuid4().hex[:12]


class PendingToolCall(BaseModel):
    """A tool call that waits for a human's decision, as stored in ``session.state``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(default_factory=new_call_id, min_length=1, max_length=MAX_ID_LENGTH)
    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    requested_at: AwareDatetime = Field(default_factory=utcnow)
    reason: str = ""


class PendingToolCalls(BaseModel):
    """Every call of one session that waits, oldest first (the stored form)."""

    model_config = ConfigDict(extra="forbid")

    calls: list[PendingToolCall] = Field(default_factory=list)


class Approval(BaseModel):
    """A human's decision on one pending call, carried by the run that resumes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    call_id: str = Field(min_length=1)
    approved: bool
    note: str = ""


class ToolCallNotFoundError(InvalidInputError, LookupError):
    """An `Approval` names a call that is not pending (mistyped, or already decided)."""

    def __init__(self, call_id: str, session_id: str | None, pending: list[str]) -> None:
        where = f"session {session_id!r}" if session_id is not None else "this run"
        waiting = ", ".join(repr(call) for call in pending) or "none"
        super().__init__(
            f"no pending tool call {call_id!r} in {where} (pending: {waiting}); "
            "it may have been approved or denied already"
        )
        self.call_id = call_id


class UnknownToolError(InvalidInputError, LookupError):
    """A call names a tool that is not registered."""

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(
            f"no tool named {name!r} is registered (known: {', '.join(sorted(known)) or 'none'})"
        )
        self.name = name


@dataclass(frozen=True)
class Tool:
    """A plain sync or async callable that an agent may call with keyword arguments."""

    name: str
    function: ToolFunction
    requires_approval: bool = False
    description: str = ""

    async def invoke(self, arguments: Mapping[str, Any]) -> Any:
        result = self.function(**arguments)
        if inspect.isawaitable(result):
            result = await result
        return result


class Toolbox:
    """The tools one agent may call, by name."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools or []:
            self.add(tool)

    def add(self, tool: Tool) -> Tool:
        if not tool.name:
            raise InvalidInputError("a tool needs a non-empty name")
        if tool.name in self._tools:
            raise InvalidInputError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def register(
        self,
        function: ToolFunction,
        *,
        name: str | None = None,
        requires_approval: bool = False,
        description: str | None = None,
    ) -> Tool:
        """Register *function* (sync or async) under *name* (default: its ``__name__``)."""
        doc = inspect.getdoc(function) or ""
        return self.add(
            Tool(
                name=name or function.__name__,
                function=function,
                requires_approval=requires_approval,
                description=description if description is not None else doc,
            )
        )

    def tool(
        self, *, name: str | None = None, requires_approval: bool = False
    ) -> Callable[[ToolFunction], ToolFunction]:
        """Decorator form of `register`; returns the function unchanged."""

        def decorate(function: ToolFunction) -> ToolFunction:
            self.register(function, name=name, requires_approval=requires_approval)
            return function

        return decorate

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name, list(self._tools)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)


@dataclass(frozen=True)
class ToolOutcome:
    """What became of one tool call in this run.

    ``status`` is ``"done"`` (it ran; ``result`` holds its JSON result), ``"failed"``
    (it raised; ``error`` says what), ``"pending"`` (it waits for approval) or
    ``"denied"`` (a human refused it; ``note`` is their reason).
    """

    call: PendingToolCall
    status: Literal["done", "failed", "pending", "denied"]
    result: Any = None
    error: str | None = None
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "done"


def jsonable_result(value: Any) -> Any:
    """A tool's return value as JSON that a session can store.

    Models are dumped; anything else that is not plain JSON is stored as its ``str``
    rather than failing the save, because by then the tool has already run and its
    effect must be recorded.
    """
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        _json.check_json(value, "result")
    except SessionSerializationError:
        return str(value)
    return value
