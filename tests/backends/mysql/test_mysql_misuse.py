"""MySQL URLs and options are checked at connect(), never echoing the password."""

from __future__ import annotations

from typing import Any

import pytest
from agentsessions import InvalidOptionError, connect
from agentsessions_mysql import MySQLSessionManager

PASSWORD = "zq9kw"
BASE = "mysql://app@127.0.0.1:3306/db"


@pytest.mark.parametrize(
    ("url", "options", "named"),
    [
        ("mysql://app@127.0.0.1:99999/db", {}, "port"),
        ("mysql://app@127.0.0.1:abc/db", {}, "port"),
        ("mysql://app@[::1/db", {}, "host"),
        ("mysql://app@h1:3306,h2:3306/db", {}, "host"),
        (f"mysql://app:{PASSWORD}#1@127.0.0.1/db", {}, "percent-encoded"),
        (f"mysql://app:{PASSWORD}/1@127.0.0.1/db", {}, "percent-encoded"),
        (f"mysql://app:{PASSWORD}@127.0.0.1:3306", {}, "name the database"),
        (f"mysql://app:{PASSWORD}@127.0.0.1:3306/{'d' * 65}", {}, "64 characters"),
        (f"mysql://app:{PASSWORD}@127.0.0.1/db?sslmode=require", {}, "sslmode"),
        (BASE, {"connect_timeout": float("nan")}, "'connect_timeout'"),
        (BASE, {"max_pool_size": 10**9}, "'max_pool_size'"),
        (BASE, {"min_pool_size": 5, "max_pool_size": 2}, "min_pool_size"),
        (BASE, {"lock_wait_timeout": 0}, "'lock_wait_timeout'"),
        (BASE, {"ssl_cert": "/c.pem"}, "ssl_key"),
        (BASE, {"ttl": 1e12}, "'ttl'"),
        (BASE, {"namespace": "no spaces"}, "'namespace'"),
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
        ({"ssl_cert": "/c.pem"}, "options 'ssl_cert' and 'ssl_key': "),
        ({"ssl_key": "/k.pem"}, "options 'ssl_cert' and 'ssl_key': "),
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


@pytest.mark.parametrize("scheme", ["mysql", "mariadb"])
def test_both_schemes_and_a_percent_encoded_password(scheme: str) -> None:
    manager = connect(f"{scheme}://app:zq%23%2F%40kw@[::1]:3307/db?max_pool_size=3")
    assert isinstance(manager, MySQLSessionManager)
    assert manager.options.max_pool_size == 3
    assert "zq" not in manager.url and "zq" not in repr(manager)
    assert manager._connect_args["password"] == "zq#/@kw"
    assert (manager._connect_args["host"], manager._connect_args["port"]) == ("::1", 3307)
