"""SQLite options and URLs are checked at connect()."""

from __future__ import annotations

from typing import Any

import pytest
from agentsessions import InvalidOptionError, connect


@pytest.mark.parametrize(
    ("url", "options", "named"),
    [
        ("sqlite:///x.db", {"busy_timeout": float("inf")}, "'busy_timeout'"),
        ("sqlite:///x.db", {"busy_timeout": 1e9}, "'busy_timeout'"),
        ("sqlite:///x.db", {"ttl": float("inf")}, "'ttl'"),
        ("sqlite:///x.db", {"ttl": 1e12}, "'ttl'"),
        ("sqlite://host/x.db", {}, "host"),
        ("sqlite:///x.db#frag", {}, "fragment"),
    ],
)
def test_bad_urls_and_options_fail_at_connect(
    url: str, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidOptionError, match=named):
        connect(url, **options)
