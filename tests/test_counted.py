"""Counted nouns (``pyclassify.counted``): the noun agrees with its number."""

from __future__ import annotations

import pytest

from pyclassify.counted import count, plural


@pytest.mark.parametrize(
    "noun,many",
    [
        ("policy", "policies"),
        ("packet", "packets"),
        ("address", "addresses"),
        ("flow class", "flow classes"),
        ("entry", "entries"),
        ("key", "keys"),
        ("staged policy", "staged policies"),
        ("match", "matches"),
    ],
)
def test_plural(noun: str, many: str) -> None:
    assert plural(noun) == many


def test_count() -> None:
    assert count(1, "policy") == "1 policy"
    assert count(0, "policy") == "0 policies"
    assert count(2, "pod pair") == "2 pod pairs"
    assert count(3, "child", "children") == "3 children"
