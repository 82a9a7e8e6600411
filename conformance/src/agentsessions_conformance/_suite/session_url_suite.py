"""The suite of ``--session-url`` mode: the kit run against a URL, no adopter code.

The plugin adds this file to the paths pytest collects when a URL is given; pytest
collects a file named on its command line whatever ``python_files`` says.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from agentsessions import SessionManager, connect

from .._inventory import Inventory, url_mode_inventory
from ..plugin import URL_KEY
from . import SessionManagerTests


class TestSessionUrl(SessionManagerTests):
    """The whole contract against the backend named by ``--session-url``."""

    @pytest_asyncio.fixture
    async def manager(self, request: pytest.FixtureRequest) -> AsyncIterator[SessionManager]:
        async with connect(request.config.stash[URL_KEY]) as manager:
            yield manager

    async def raw_inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        # URL mode knows the storage of memory and SQLite only; any other backend needs
        # a subclass with its own hook, and its storage clauses fail until then.
        found = await url_mode_inventory(manager, session_id)
        if found is None:
            return await super().raw_inventory(manager, session_id)
        return found
