"""Hostile URLs and options at connect(), for every installed backend (no I/O).

connect() either returns a manager or raises a documented `SessionError`
(`InvalidOptionError`, `UnknownBackendError`, ...); never a raw exception, and the
password never appears in an error, a ``url`` or a ``repr``. The number of examples
follows AGENTSESSIONS_FUZZ_EXAMPLES, like the kit's fuzz clause.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
from agentsessions import SessionError, connect, installed_backends
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_EXAMPLES = int(os.environ.get("AGENTSESSIONS_FUZZ_EXAMPLES", "60"))
_DEEP = "AGENTSESSIONS_FUZZ_EXAMPLES" in os.environ
# A password no other part of a generated URL can spell: "Zq" and "Kw9" never occur in
# hosts, paths or option values drawn below.
_RESERVED = "#/@?:[]%!$&= "
_PASSWORDS = st.builds(lambda core: f"Zq{core}Kw9", st.text(_RESERVED + "abc", max_size=4))
_HOSTS = st.one_of(
    st.sampled_from(["127.0.0.1", "localhost", "[::1]", "[::1", "::1", "[zz::1]", "", "h1,h2"]),
    st.text("abc.-_[]:%", max_size=8),
)
_PORTS = st.one_of(
    st.none(),
    st.integers(min_value=-1, max_value=10**6).map(str),
    st.sampled_from(["abc", "", "65535", "65536", "0", "\uff11\uff12"]),
)
_PATHS = st.one_of(
    st.sampled_from(["", "/0", "/abc", "/db", "/a.b", "/-1", "/99999", "/a$b", "/x@y", "/%00"]),
    st.text("abcd0123/.$%", max_size=8).map(lambda text: "/" + text),
)
_OPTION_VALUES = st.one_of(
    st.floats(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.text("0123456789.e-+infa", max_size=6),
    st.none(),
    st.booleans(),
)


def _schemes() -> list[str]:
    return sorted(installed_backends())


def _option_names() -> list[str]:
    names: set[str] = set()
    for spec in installed_backends().values():
        names.update(spec.load().Options.model_fields)
    return sorted(names)


@st.composite
def _urls(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    scheme = draw(st.sampled_from(_schemes()))
    password = draw(_PASSWORDS)
    userinfo = draw(st.sampled_from(["", "app:", ":"]))
    authority = f"{userinfo}{password}@" if userinfo else ""
    port = draw(_PORTS)
    host = draw(_HOSTS) + (f":{port}" if port is not None else "")
    url = f"{scheme}://{authority}{host}{draw(_PATHS)}"
    options = draw(st.dictionaries(st.sampled_from(_option_names()), _OPTION_VALUES, max_size=2))
    return url, password, options


@settings(
    max_examples=_EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not _DEEP,
    suppress_health_check=list(HealthCheck),
)
@given(_urls())
def test_connect_never_raises_raw_nor_leaks_the_password(
    case: tuple[str, str, dict[str, Any]],
) -> None:
    url, password, options = case
    try:
        manager = connect(url, **options)
    except SessionError as exc:
        message = str(exc)
    except Exception as exc:  # pragma: no cover - the failure this test exists for
        pytest.fail(f"connect({url!r}, **{options!r}) raised raw {type(exc).__name__}: {exc}")
    else:
        message = ""
    if message:
        assert password not in message and "Zq" not in message, message
        return
    assert "Zq" not in manager.url and "Zq" not in repr(manager)
    for name, value in manager.options.model_dump().items():
        if isinstance(value, float):
            assert math.isfinite(value), f"option {name}={value} accepted"
