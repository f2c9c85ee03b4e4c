"""Every member of a config union, for the tests that each dispatcher builds every kind it may be given: a kind
added to a union without a case in its dispatcher fails them (the dispatcher's `assert_never`), and so does a
kind without a sample config here (the test's lookup names it)."""

from __future__ import annotations

from typing import Annotated, Any, get_args, get_origin

import pytest


def union_members(union: Any) -> tuple[Any, ...]:
    """The members of `A | B`, `Annotated[A | B, Field(discriminator=...)]` or `Literal["a", "b"]`."""
    if get_origin(union) is Annotated:
        return union_members(get_args(union)[0])
    return get_args(union)


def member_id(member: Any) -> str:
    return getattr(member, "__name__", str(member))


def sample_of(samples: dict[Any, Any], member: Any) -> Any:
    """The sample config of `member`; a test failure naming it when the test has none."""
    if member not in samples:
        pytest.fail(
            f"{member_id(member)} is a member of the union but this test has no sample of it: add one"
        )
    return samples[member]
