"""A third party's backend, as a distribution outside this repository would ship it.

``opaque://NAME`` keeps sessions in the in-memory store NAME, through a manager that is
not a `MemorySessionManager`, so the kit knows nothing of its storage until the
distribution registers an inventory (entry point group ``agentsessions_conformance``).
`write_distribution` makes the ``.dist-info`` that declares both entry points.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agentsessions import Capabilities, ManagerOptions, MemorySessionManager, SessionManager
from agentsessions.backend import BackendSpec
from agentsessions.backend import hookimpl as backend_hookimpl
from agentsessions_conformance import Inventory, hookimpl, memory_inventory

__all__ = ["OpaqueManager", "write_distribution"]


class OpaqueManager(SessionManager):
    """Every hook handed to an inner memory manager on the same named store."""

    capabilities = Capabilities(persistent=False, shared=True, compaction=True)
    db_system = "opaque"

    def __init__(self, url: str, options: ManagerOptions | None = None) -> None:
        super().__init__(url, options)
        self.inner = MemorySessionManager("memory://" + url.partition("://")[2], options)

    async def _open(self) -> None:
        pass

    async def _close(self) -> None:
        pass


def _delegate(name: str) -> Callable[..., Awaitable[Any]]:
    async def hook(self: OpaqueManager, *args: Any) -> Any:
        return await getattr(self.inner, name)(*args)

    hook.__name__ = name
    return hook


for _name in (
    "_create",
    "_restore",
    "_load",
    "_load_since",
    "_save",
    "_compact",
    "_archived",
    "_delete",
    "_delete_user",
    "_list",
    "_purge_expired",
):
    setattr(OpaqueManager, _name, _delegate(_name))
OpaqueManager.__abstractmethods__ = frozenset()


async def opaque_inventory(manager: SessionManager, session_id: str) -> Inventory:
    assert isinstance(manager, OpaqueManager)
    return memory_inventory(manager.inner, session_id)


@backend_hookimpl
def agentsessions_backends() -> list[BackendSpec]:
    return [BackendSpec(schemes=("opaque",), manager=OpaqueManager)]


@hookimpl
def agentsessions_conformance_inventory(
    manager: SessionManager,
) -> Callable[[SessionManager, str], Awaitable[Inventory]] | None:
    return opaque_inventory if isinstance(manager, OpaqueManager) else None


def write_distribution(directory: Path, *, inventory: bool) -> None:
    """An installed distribution ``opaque-backend`` in *directory* (put it on sys.path):
    the backend's entry point, and the inventory's when *inventory*."""
    info = directory / "opaque_backend-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: opaque-backend\nVersion: 1.0\n", encoding="utf-8"
    )
    points = "[agentsessions.backends]\nopaque = conformance.thirdparty\n"
    if inventory:
        points += "\n[agentsessions_conformance]\nopaque = conformance.thirdparty\n"
    (info / "entry_points.txt").write_text(points, encoding="utf-8")
