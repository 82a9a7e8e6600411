"""MongoDB URLs, database names and options are checked at connect()."""

from __future__ import annotations

from typing import Any

import pytest
from agentsessions import InvalidOptionError, connect

PASSWORD = "zq9kw"
BASE = "mongodb://127.0.0.1:27017/db"


@pytest.mark.parametrize(
    ("url", "options", "named"),
    [
        ("mongodb://127.0.0.1:99999/db", {}, "port"),
        ("mongodb://127.0.0.1:abc/db", {}, "port"),
        ("mongodb://[::1/db", {}, "host"),
        ("mongodb://127.0.0.1/a.b", {}, "database name"),
        ("mongodb://127.0.0.1/a$b", {}, "database name"),
        ("mongodb://127.0.0.1/a%20b", {}, "database name"),
        ("mongodb://127.0.0.1/" + "d" * 64, {}, "at most 63 bytes"),
        ("mongodb+srv://cluster.example:27017/db", {}, "port"),
        (f"mongodb://app:{PASSWORD}#1@127.0.0.1/db", {}, "percent-encoded"),
        (f"mongodb://app:{PASSWORD}/1@127.0.0.1/db", {}, "percent-encoded"),
        (BASE, {"server_selection_timeout": float("inf")}, "'server_selection_timeout'"),
        (BASE, {"socket_timeout": 1e12}, "'socket_timeout'"),
        (BASE, {"connect_timeout": -1}, "'connect_timeout'"),
        (BASE, {"ttl": float("inf")}, "'ttl'"),
    ],
)
def test_bad_urls_and_options_fail_at_connect(
    url: str, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidOptionError, match=named) as caught:
        connect(url, **options)
    assert PASSWORD not in str(caught.value)
