"""Strict JSON: what is stored comes back equal, and everything else is refused with its path."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

import pytest
from agentsessions import SessionSerializationError
from agentsessions._json import INT64_MAX, INT64_MIN, check_json, dumps, loads
from hypothesis import given
from hypothesis import strategies as st

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(INT64_MIN, INT64_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5)
    ),
    max_leaves=30,
)


@given(json_values)
def test_checked_values_round_trip(value: Any) -> None:
    check_json(value, "v")
    assert loads(dumps(value)) == value


class Colour(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize(
    ("value", "path", "problem"),
    [
        ({"when": dt.datetime(2026, 1, 1)}, "v['when']", "datetime"),
        ({"a": [1, {2}]}, "v['a'][1]", "set"),
        ({"a": (1, 2)}, "v['a']", "tuple"),
        ({"b": b"x"}, "v['b']", "bytes"),
        ({1: "x"}, "v[1]", "key of type int"),
        ({"n": float("nan")}, "v['n']", "not valid JSON"),
        ({"n": float("inf")}, "v['n']", "not valid JSON"),
        ({"big": 2**63}, "v['big']", "64 bits"),
        ({"small": -(2**63) - 1}, "v['small']", "64 bits"),
        ({"c": Colour.RED}, "v['c']", "Colour"),
        ({"o": object()}, "v['o']", "object"),
        # Paths are put together only once a value is refused, innermost part last.
        ({"a": [{"b": [0, {"c": {2}}]}]}, "v['a'][0]['b'][1]['c']", "set"),
        ([[], [1, {"k": {3: 0}}]], "v[1][1]['k'][3]", "key of type int"),
        ({"a": {"\ud800": 1}}, "v['a']['\\ud800'] (the key)", "unpaired surrogate"),
        ([{"t": "ok"}, {"t": "x\udfff"}], "v[1]['t']", "unpaired surrogate at index 1"),
    ],
)
def test_non_json_is_refused_with_its_path(value: Any, path: str, problem: str) -> None:
    with pytest.raises(SessionSerializationError) as info:
        check_json(value, "v")
    assert info.value.path == path
    assert problem in str(info.value)


def test_nesting_is_bounded() -> None:
    deep: Any = "leaf"
    for _ in range(99):
        deep = [deep]
    check_json(deep, "v")
    with pytest.raises(SessionSerializationError, match="nested deeper"):
        check_json([deep, [[deep]]], "v")


def test_extremes_round_trip() -> None:
    value = [INT64_MAX, INT64_MIN, 1e308, 5e-324, -0.0, "\u0000", "e\u0301", "😀", "שלום"]
    check_json(value, "v")
    assert loads(dumps(value)) == value
