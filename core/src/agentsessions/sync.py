"""The blocking API, for code with no event loop: ``agentsessions.sync.connect(url)``.

It has the async manager's contract and raises its exceptions; see `SyncSessionManager`
for how it runs (a private event loop in one background thread).
"""

from ._sync import SyncSessionManager, connect

__all__ = ["SyncSessionManager", "connect"]
