"""Passwords never escape, and URL options are split without guessing."""

from __future__ import annotations

import pytest
from agentsessions import InvalidOptionError, mask_url
from agentsessions._urls import parse_server_url, scrub_secret, split_url


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://app:s3cret@db:5432/x", "postgresql://app:***@db:5432/x"),
        ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
        (
            "mongodb://u:p%40ss@h1:1,h2:2/db?replicaSet=rs",
            "mongodb://u:***@h1:1,h2:2/db?replicaSet=rs",
        ),
        ("redis://cache:6379/0?password=s3cret&db=1", "redis://cache:6379/0?password=***&db=1"),
        ("sqlite:///sessions.db", "sqlite:///sessions.db"),
        (
            "mongodb://h/db?tls=true&tlsCertificateKeyFilePassword=s3cret",
            "mongodb://h/db?tls=true&tlsCertificateKeyFilePassword=***",
        ),
        ("postgresql://app@db/x", "postgresql://app@db/x"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_scrub_secret_removes_the_password_from_driver_messages() -> None:
    url = "postgresql://app:hunter2@db/x"
    text = scrub_secret(f"could not connect to {url}: password hunter2 rejected", url)
    assert "hunter2" not in text
    assert "postgresql://app:***@db/x" in text


def test_scrub_secret_removes_query_passwords_in_both_forms() -> None:
    url = "redis+sentinel://:p%40ss@h:26379/mymaster/0?sentinel_password=s%3Ant&db=0"
    text = scrub_secret(f"{url}: AUTH p@ss failed, AUTH s:nt failed, s%3Ant", url)
    for secret in ("p@ss", "s:nt", "s%3Ant", "p%40ss"):
        assert secret not in text
    assert "sentinel_password=***" in text


def test_split_url_takes_our_options_and_keeps_the_drivers() -> None:
    base, options = split_url(
        "postgresql://h/db?ttl=60&sslmode=require&namespace=a", frozenset({"sslmode"})
    )
    assert base == "postgresql://h/db?sslmode=require"
    assert options == {"ttl": "60", "namespace": "a"}


def test_driver_parameters_are_matched_ignoring_case() -> None:
    base, options = split_url("mongodb://h/db?replicaset=rs&ttl=1", frozenset({"replicaSet"}))
    assert base == "mongodb://h/db?replicaset=rs"
    assert options == {"ttl": "1"}


def test_split_url_keeps_an_empty_authority() -> None:
    assert split_url("memory://?ttl=1") == ("memory://", {"ttl": "1"})


def test_an_option_given_twice_is_an_error() -> None:
    with pytest.raises(InvalidOptionError, match="'ttl' is given twice"):
        split_url("memory://?ttl=1&ttl=2")


# -- parse_server_url: every part checked at connect(), the password never echoed -------


@pytest.mark.parametrize(
    ("url", "part"),
    [
        ("redis://127.0.0.1:99999/0", "port"),
        ("redis://127.0.0.1:0/0", "port"),
        ("redis://127.0.0.1:abc/0", "port"),
        ("redis://127.0.0.1:/0", "port"),
        ("postgresql://u@[::1/db", "host"),
        ("postgresql://u@[zz::1]:5432/db", "host"),
        ("postgresql://u@::1:5432/db", "host"),
        ("postgresql://u@[::1]x/db", "host"),
        ("postgresql://u@ho st/db", "host"),
        ("redis://h1:1,h2:2/0", "host"),
        ("mongodb://h/db#frag", "fragment"),
    ],
)
def test_malformed_url_parts_are_named(url: str, part: str) -> None:
    with pytest.raises(InvalidOptionError, match=f"URL {part}"):
        parse_server_url(url)


@pytest.mark.parametrize(
    ("url", "password"),
    [
        ("redis://:zq#kw@127.0.0.1:6379/0", "zq#kw"),
        ("postgresql://app:zq/kw@127.0.0.1/db", "zq/kw"),
        ("postgresql://app:98/kw@127.0.0.1:5432/db", "98/kw"),
        ("mongodb://app:zq@kw@127.0.0.1/db", "zq@kw"),
        ("redis://:zq?kw@127.0.0.1:6379/0", "zq?kw"),
    ],
)
def test_unencoded_reserved_characters_in_a_password_say_how_to_encode(
    url: str, password: str
) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        parse_server_url(url, multi_host=True)
    message = str(caught.value)
    assert "percent-encoded" in message and "quote(password, safe='')" in message
    for piece in (password, password[:2], password[-2:]):
        assert piece not in message, message


def test_a_well_formed_url_is_split_into_its_parts() -> None:
    parts = parse_server_url(
        "mongodb://app:p%40ss%2F%23@h1:1,[::1]:2,h3/my%20db?replicaSet=rs", multi_host=True
    )
    assert parts.scheme == "mongodb"
    assert (parts.username, parts.password) == ("app", "p@ss/#")
    assert parts.hosts == (("h1", 1), ("::1", 2), ("h3", None))
    assert parts.path == "my db"
    assert parts.query == {"replicaSet": "rs"}
    assert parse_server_url("postgresql:///db?host=/tmp").hosts == (("", None),)
