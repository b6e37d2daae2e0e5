"""Fuzzing the selector parser through the extension: any text either parses (and then
round-trips) or raises SelectorError; never another exception, a panic, or a hang.

Bounded so the suite stays fast; run longer with ``--hypothesis-seed`` and
``HYPOTHESIS_PROFILE=fuzz`` (see tests/conftest.py)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyclassify.selector import Selector, SelectorError

# Pieces of the language, so random sequences get deep into the parser, plus arbitrary text.
ATOMS = [
    "a",
    "b.c/d-e_f",
    "==",
    "!=",
    "!",
    "&&",
    "||",
    "&",
    "|",
    "(",
    ")",
    "{",
    "}",
    ",",
    "in",
    "not in",
    "notin",
    "contains",
    "starts with",
    "endswith",
    "has(",
    "has(a)",
    "all()",
    "global()",
    '"v"',
    "'v'",
    '"',
    "'",
    " ",
    "=",
    "%",
    "\x00",
    "é",
    "{}",
]
TEXT = st.one_of(
    st.lists(st.sampled_from(ATOMS), max_size=30).map(" ".join),
    st.lists(st.sampled_from(ATOMS), max_size=30).map("".join),
    st.text(max_size=200),
)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT)
def test_parser_never_fails_other_than_selector_error(text):
    try:
        sel = Selector(text)
    except SelectorError as e:
        assert e.message and (e.position is None or 0 <= e.position <= len(text))
        return
    assert Selector(sel.canonical) == sel
