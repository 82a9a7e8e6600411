"""PostgreSQL URLs and options are checked at connect(), never echoing the password."""

from __future__ import annotations

from typing import Any

import pytest
from agentsessions import InvalidOptionError, connect

PASSWORD = "zq9kw"
BASE = "postgresql://app@127.0.0.1:5432/db"


@pytest.mark.parametrize(
    ("url", "options", "named"),
    [
        ("postgresql://app@127.0.0.1:99999/db", {}, "port"),
        ("postgresql://app@127.0.0.1:abc/db", {}, "port"),
        ("postgresql://app@127.0.0.1/db?port=70000", {}, "port"),
        ("postgresql://app@[::1/db", {}, "host"),
        ("postgresql://app@[fe80::zz]:5432/db", {}, "host"),
        (f"postgresql://app:{PASSWORD}#1@127.0.0.1/db", {}, "percent-encoded"),
        (f"postgresql://app:{PASSWORD}/1@127.0.0.1/db", {}, "percent-encoded"),
        (f"postgresql://app:{PASSWORD}@x@127.0.0.1/db", {}, "percent-encoded"),
        (BASE, {"statement_timeout": float("inf")}, "'statement_timeout'"),
        (BASE, {"statement_timeout": 1e9}, "'statement_timeout'"),
        (BASE, {"connect_timeout": float("nan")}, "'connect_timeout'"),
        (BASE, {"max_pool_size": 10**9}, "'max_pool_size'"),
        (BASE, {"ttl": 1e12}, "'ttl'"),
    ],
)
def test_bad_urls_and_options_fail_at_connect(
    url: str, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidOptionError, match=named) as caught:
        connect(url, **options)
    assert PASSWORD not in str(caught.value)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"min_pool_size": 5, "max_pool_size": 2}, "options 'min_pool_size' and 'max_pool_size': "),
        ({"min_pool_size": 11}, "options 'min_pool_size' and 'max_pool_size': "),
        ({"schema": "pg_mine"}, "option 'schema': "),
    ],
)
def test_a_check_across_options_names_them(options: dict[str, Any], named: str) -> None:
    # pydantic reports a model validator's error under no field: it must still name
    # the options involved, never "options" (which is also a driver parameter's name).
    with pytest.raises(InvalidOptionError) as caught:
        connect(BASE, **options)
    message = str(caught.value)
    assert message.startswith(named), message
    assert "'options'" not in message


def test_a_percent_encoded_password_is_accepted_and_masked() -> None:
    manager = connect("postgresql://app:zq%23%2F%40kw@[::1]:5433,127.0.0.1:5434/db")
    assert "zq" not in manager.url and "***" in manager.url
