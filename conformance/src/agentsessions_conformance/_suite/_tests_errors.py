"""Error mapping: a wrong password and a missing database are the documented error types.

The URLs are derived from the adopter's (`ErrorMappingTests.wrong_password_url`,
`missing_database_url`); a backend without the part (no password in the URL, no database
in its path, databases made on first use) skips the clause with the reason, and an
adopter overrides either hook for a layout the kit cannot derive. Each error must name
no password, and the failed manager must have written nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from agentsessions import (
    BackendAuthenticationError,
    DatabaseNotFoundError,
    SessionError,
    SessionManager,
)

from ._base import SuiteBase

#: Seconds a refused open may take before the kit calls it hung.
_OPEN_LIMIT = 30.0


class ErrorMappingTests(SuiteBase):
    def wrong_password_url(self, manager: SessionManager) -> str | None:
        """*manager*'s URL with a wrong password, or None (the clause then skips). Derived
        only when the URL holds a password: without one the server may not check any. A
        server that ignores passwords (PostgreSQL ``trust``) fails the clause though the
        backend is right: override this to return None there."""
        parts = urlsplit(manager._url)
        if parts.password is None or "," in parts.netloc:
            return None
        host = parts.netloc.rpartition("@")[2]
        netloc = f"{parts.username or ''}:kit-wrong-{uuid.uuid4().hex[:12]}@{host}"
        return urlunsplit(parts._replace(netloc=netloc))

    def missing_database_url(self, manager: SessionManager) -> str | None:
        """*manager*'s URL naming a database that does not exist, or None (the clause then
        skips). Derived when the path is one database name (not a number, not a file)."""
        parts = urlsplit(manager._url)
        name = parts.path.strip("/")
        scheme = parts.scheme.lower()
        if "," in parts.netloc or not parts.hostname or not name or "/" in name or name.isdigit():
            return None
        if scheme.startswith("mongodb"):
            return None  # MongoDB makes a database on its first write
        return urlunsplit(parts._replace(path=f"/kit_missing_{uuid.uuid4().hex[:16]}"))

    async def _refused_open(
        self, manager: SessionManager, url: str, kind: type[SessionError]
    ) -> SessionError:
        other = type(manager)(url, manager.parse_options({"timeout": 10}))
        try:
            with pytest.raises(kind) as caught:
                await asyncio.wait_for(other.open(), _OPEN_LIMIT)
        finally:
            await asyncio.wait_for(other.close(), _OPEN_LIMIT)
        password = urlsplit(url).password
        if password:
            assert password not in str(caught.value), "the error names the password"
            assert password not in repr(caught.value), "the error names the password"
        return caught.value

    async def test_wrong_password_is_backend_authentication_error(
        self, manager: SessionManager
    ) -> None:
        """A wrong password is BackendAuthenticationError at open(), naming no password."""
        url = self.wrong_password_url(manager)
        if url is None:
            pytest.skip("the URL holds no password to get wrong (override wrong_password_url)")
        await self._refused_open(manager, url, BackendAuthenticationError)

    async def test_missing_database_is_database_not_found(self, manager: SessionManager) -> None:
        """A URL naming a database that does not exist is DatabaseNotFoundError at open(),
        naming no password, and the database is not created."""
        url = self.missing_database_url(manager)
        if url is None:
            pytest.skip(
                "the URL names no database the kit can replace, or the engine makes "
                "databases on first use (override missing_database_url)"
            )
        await self._refused_open(manager, url, DatabaseNotFoundError)
        # Written nothing: the database still does not exist.
        await self._refused_open(manager, url, DatabaseNotFoundError)
