"""The suite of ``--session-url`` mode: the kit run against a URL, no adopter code.

The plugin adds this file to the paths pytest collects when a URL is given; pytest
collects a file named on its command line whatever ``python_files`` says. The storage
hook is the inventory the backend's distribution registers (`SuiteBase.raw_inventory`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from agentsessions import SessionManager, connect

from ..plugin import URL_KEY
from . import SessionManagerTests


class TestSessionUrl(SessionManagerTests):
    """The whole contract against the backend named by ``--session-url``."""

    @pytest_asyncio.fixture
    async def manager(self, request: pytest.FixtureRequest) -> AsyncIterator[SessionManager]:
        async with connect(request.config.stash[URL_KEY]) as manager:
            yield manager
