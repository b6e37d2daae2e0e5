"""Calico's selector test tables (``selectors.json`` of the conformance data kept outside the
repository, ``tests.shared_data``) through the Python API."""

from __future__ import annotations

import pytest

from pyclassify.selector import Selector, SelectorError, tokenize
from tests.conftest import CASES, load_cases
from tests.shared_data import missing

DATA = load_cases("selectors.json") if (CASES / "selectors.json").exists() else None
MISSING = missing(CASES / "selectors.json", "Calico's selector cases")
needs_data = pytest.mark.skipif(DATA is None, reason=MISSING)


def _cases(section: str) -> list:
    if DATA is None:
        return [pytest.param(None, id="no-data", marks=pytest.mark.skip(reason=MISSING))]
    value = DATA[section]
    return value["cases"] if isinstance(value, dict) else value


@needs_data
@pytest.mark.parametrize("case", _cases("match_cases"), ids=lambda c: f"{c['selector']!r}-{c['labels']}")
def test_match(case):
    sel = Selector(case["selector"])
    assert sel.matches(case["labels"]) is case["match"]
    again = Selector(sel.canonical)
    assert again.matches(case["labels"]) is case["match"]
    assert again == sel


@needs_data
@pytest.mark.parametrize("case", _cases("valid_selectors"), ids=lambda c: repr(c["selector"]))
def test_valid(case):
    Selector(case["selector"])


@needs_data
@pytest.mark.parametrize("case", _cases("invalid_selectors"), ids=lambda c: repr(c["selector"])[:60])
def test_invalid(case):
    with pytest.raises(SelectorError) as info:
        Selector(case["selector"])
    assert info.value.message


@needs_data
@pytest.mark.parametrize("case", _cases("canonical_cases"), ids=lambda c: repr(c["selector"]))
def test_canonical(case):
    assert Selector(case["selector"]).canonical == case["canonical"]


@needs_data
@pytest.mark.parametrize("case", _cases("prefix_visitor_cases"), ids=lambda c: c["description"])
def test_prefix_visitor(case):
    sel = Selector(case["selector"]).with_key_prefix(case["prefix"])
    assert sel.canonical == case["output_after_prefix_visitor"]


@needs_data
@pytest.mark.parametrize("case", _cases("tokenizer_cases"), ids=lambda c: repr(c["selector"])[:60])
def test_tokenizer(case):
    want = [(t["kind"], t.get("value")) for t in case["tokens"]]
    assert tokenize(case["selector"]) == want


def _restrictions(sel: Selector):
    got = {}
    for key, r in sel.restrictions().items():
        entry = {}
        if r.must_be_present:
            entry["MustBePresent"] = True
        if r.must_be_absent:
            entry["MustBeAbsent"] = True
        if r.must_have_one_of_values is not None:
            entry["MustHaveOneOfValues"] = r.must_have_one_of_values
        got[key] = entry
    return got or None


@needs_data
@pytest.mark.parametrize("case", _cases("label_restriction_cases"), ids=lambda c: repr(c["selector"]))
def test_label_restrictions(case):
    assert _restrictions(Selector(case["selector"])) == case["restrictions"]
    if case["selector"].strip():
        assert _restrictions(Selector(f"all() && ({case['selector']})")) == case["restrictions"]
