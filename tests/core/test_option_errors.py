"""An options error names the options at fault, a check across several options too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest
from agentsessions import (
    InvalidOptionError,
    MemorySessionManager,
    connect,
    register_backend,
    unregister_backend,
)
from agentsessions.backend import ManagerOptions, OptionConflict
from pydantic import model_validator


class PairOptions(ManagerOptions):
    low: int = 1
    high: int = 10
    plain: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> PairOptions:
        if self.low > self.high:
            raise OptionConflict(("low", "high"), f"low ({self.low}) is above high ({self.high})")
        if self.plain and self.low == 0:
            raise ValueError("plain needs a low above 0")
        return self


class PairManager(MemorySessionManager):
    Options: ClassVar[type[ManagerOptions]] = PairOptions


@pytest.fixture(autouse=True)
def _pair_scheme() -> Iterator[None]:
    register_backend("pairtest", PairManager)
    yield None
    unregister_backend("pairtest")


def _error(url: str, **options: object) -> str:
    with pytest.raises(InvalidOptionError) as caught:
        connect(url, **options)
    return str(caught.value)


def test_a_conflict_names_its_options_and_their_values() -> None:
    message = _error("pairtest://?low=5&high=2")
    assert message == (
        "options 'low' and 'high': low (5) is above high (2) (got low='5', high='2')"
    )


def test_a_conflict_with_a_default_names_only_what_was_given() -> None:
    assert _error("pairtest://", low=11) == (
        "options 'low' and 'high': low (11) is above high (10) (got low=11)"
    )


def test_a_plain_value_error_across_fields_is_not_blamed_on_an_option_named_options() -> None:
    message = _error("pairtest://?plain=true&low=0")
    assert message == (
        "the options together: plain needs a low above 0 (got low='0', plain='true')"
    )
    assert "'options'" not in message


def test_a_field_error_still_names_its_field() -> None:
    assert _error("pairtest://?low=x").startswith("option 'low': ")


def test_with_options_reports_a_conflict_the_same_way() -> None:
    manager = connect("pairtest://?low=5")
    with pytest.raises(InvalidOptionError, match=r"^options 'low' and 'high': "):
        manager.with_options(high=1)
