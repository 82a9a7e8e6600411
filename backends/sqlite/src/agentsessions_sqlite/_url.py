"""Where a ``sqlite://`` URL points: a file path or a private in-memory database."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

from agentsessions import InvalidOptionError

__all__ = ["MEMORY", "database_path"]

MEMORY = ":memory:"

_FORMS = "use sqlite:///relative/path.db, sqlite:////absolute/path.db or sqlite:///:memory:"


def database_path(url: str) -> str:
    """The absolute file path of *url* (options already removed), or `MEMORY`.

    A relative path is resolved against the working directory now, when the manager is
    built, so that a later ``os.chdir`` cannot silently move the database.
    """
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite":
        raise InvalidOptionError(f"not a sqlite URL: {parts.scheme}:// ({_FORMS})")
    if parts.netloc:
        raise InvalidOptionError(
            f"URL host: a sqlite URL names a file, not a host (the part after '//' "
            f"must be empty); {_FORMS}"
        )
    if parts.fragment:
        raise InvalidOptionError(f"a sqlite URL has no #fragment; {_FORMS}")
    # "sqlite:///x.db" splits into path "/x.db": the first slash only ends the
    # (empty) authority, so what follows it is the path as the user wrote it.
    path = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
    if not path:
        raise InvalidOptionError(f"a sqlite URL needs a database path; {_FORMS}")
    if path == MEMORY:
        return MEMORY
    if "\x00" in path:
        raise InvalidOptionError("the database path must not contain NUL characters")
    if path.endswith("/"):
        raise InvalidOptionError(f"the database path {path!r} names a directory, not a file")
    return os.path.abspath(path)
