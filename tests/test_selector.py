"""The selector language through its Python face: API behaviour and properties.

The property tests generate selector trees, render them with random spacing, quoting and
operator spellings, and check that the Rust parser agrees with the tree's own meaning, and
that canonical text survives print -> parse -> print unchanged.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyclassify.selector import MAX_DEPTH, Selector, SelectorError, parse_labels

# --- a tiny independent model of selector meaning, for the generated trees only --------------


@dataclass(frozen=True)
class Gen:
    text: Callable[[st.DrawFn], str]  # renders with random spelling
    holds: Callable[[dict[str, str]], bool]


KEYS = st.sampled_from(["a", "b", "app", "k8s-app", "calico/k8s_ns", "x.y/z_1"])
VALUES = st.sampled_from(["", "a", "b", "web", "v1", "x y", "it's", 'say "hi"', "/"])
SPACE = st.sampled_from(["", " ", "  ", "\t"])


def quote(draw, v: str) -> str:
    if '"' in v:
        return f"'{v}'"
    if "'" in v:
        return f'"{v}"'
    return draw(st.sampled_from([f'"{v}"', f"'{v}'"]))


@st.composite
def leaf(draw) -> Gen:
    k, v = draw(KEYS), draw(VALUES)
    vs = draw(st.lists(VALUES, max_size=4))
    kind = draw(st.sampled_from(["eq", "ne", "in", "notin", "has", "contains", "starts", "ends", "all"]))
    s = draw(SPACE)
    if kind == "all":
        return Gen(f"all({s})", lambda lb: True)
    if kind == "has":
        return Gen(f"has({s}{k}{s})", lambda lb: k in lb)
    if kind in ("in", "notin"):
        op = "in" if kind == "in" else draw(st.sampled_from(["not in", "not  in", "notin"]))
        body = ("," + draw(SPACE)).join(quote(draw, x) for x in vs)
        text = f"{k} {op} {{{body}}}"
        if kind == "in":
            return Gen(text, lambda lb: lb.get(k) in vs)
        return Gen(text, lambda lb: lb.get(k) not in vs)
    ops: dict[str, tuple[list[str], Callable[[str], bool]]] = {
        "eq": (["=="], lambda x: x == v),
        "ne": (["!="], lambda x: x != v),
        "contains": (["contains"], lambda x: v in x),
        "starts": (["starts with", "startswith", "starts  with"], lambda x: x.startswith(v)),
        "ends": (["ends with", "endswith"], lambda x: x.endswith(v)),
    }
    spellings, pred = ops[kind]
    op = draw(st.sampled_from(spellings))
    # A word operator needs a space after the label ("acontains" is one label).
    before = s if op in ("==", "!=") else (s or " ")
    text = f"{k}{before}{op}{draw(SPACE)}{quote(draw, v)}"
    if kind == "ne":
        return Gen(text, lambda lb: lb.get(k) != v)
    return Gen(text, lambda lb: k in lb and pred(lb[k]))


def combine(children: st.SearchStrategy[Gen]) -> st.SearchStrategy[Gen]:
    @st.composite
    def node(draw) -> Gen:
        kind = draw(st.sampled_from(["not", "and", "or", "paren"]))
        if kind == "not":
            c = draw(children)
            return Gen(f"!{draw(SPACE)}({c.text})", lambda lb: not c.holds(lb))
        if kind == "paren":
            c = draw(children)
            return Gen(f"({draw(SPACE)}{c.text}{draw(SPACE)})", c.holds)
        cs = draw(st.lists(children, min_size=2, max_size=3))
        op = " && " if kind == "and" else " || "
        text = op.join(f"({c.text})" for c in cs)
        if kind == "and":
            return Gen(text, lambda lb: all(c.holds(lb) for c in cs))
        return Gen(text, lambda lb: any(c.holds(lb) for c in cs))

    return node()


SELECTORS = st.recursive(leaf(), combine, max_leaves=8)
LABELS = st.dictionaries(KEYS, VALUES, max_size=4)


@settings(max_examples=300, deadline=None)
@given(SELECTORS, LABELS)
def test_parser_agrees_with_the_meaning_of_generated_selectors(gen, labels):
    assert Selector(gen.text).matches(labels) is gen.holds(labels)


@settings(max_examples=300, deadline=None)
@given(SELECTORS, LABELS)
def test_canonical_round_trip(gen, labels):
    sel = Selector(gen.text)
    again = Selector(sel.canonical)
    assert again.canonical == sel.canonical
    assert again == sel and hash(again) == hash(sel)
    assert again.matches(labels) is sel.matches(labels)


@settings(max_examples=200, deadline=None)
@given(SELECTORS, LABELS)
def test_restrictions_are_necessary_conditions(gen, labels):
    sel = Selector(gen.text)
    if not sel.matches(labels):
        return
    for key, r in sel.restrictions().items():
        if r.must_be_present:
            assert key in labels
        if r.must_be_absent:
            assert key not in labels
        if r.must_have_one_of_values is not None:
            assert labels.get(key) in r.must_have_one_of_values


# --- API behaviour ---------------------------------------------------------------------------


def test_error_names_the_position():
    with pytest.raises(SelectorError) as info:
        Selector('a == "b" && %')
    assert info.value.position == 12
    assert "position 12" in str(info.value)
    assert info.value.kind == "syntax"


def test_position_counts_characters_not_bytes():
    with pytest.raises(SelectorError) as info:
        Selector('a == "é" && %')
    assert info.value.position == 12


def test_label_selector_compiles_and_names_bad_fields():
    sel = Selector.from_label_selector(
        {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}
    )
    assert sel.canonical == '(app == "web" && tier not in {"db"})'
    assert sel.matches({"app": "web"}) and not sel.matches({"app": "web", "tier": "db"})
    assert Selector.from_label_selector({}).is_all
    with pytest.raises(SelectorError) as info:
        Selector.from_label_selector({"matchExpressions": [{"key": "k", "operator": "Bogus"}]})
    assert info.value.field == "matchExpressions[0].operator"
    with pytest.raises(SelectorError) as info:
        Selector.from_label_selector({"matchExpressions": [{"key": "k", "operator": "In", "values": []}]})
    assert info.value.field == "matchExpressions[0].values"
    with pytest.raises(SelectorError) as info:
        Selector.from_label_selector({"matchLabel": {}})
    assert info.value.field == "matchLabel"


def test_hostile_input_errors_quickly():
    for text in ["(" * 100_000, "!" * 100_000 + "all()", "a in {" + '"x",' * 10 + "", "a" * 10_000 + " == 'b'"]:
        with pytest.raises(SelectorError):
            Selector(text)
    with pytest.raises(SelectorError) as info:
        Selector("(" * (MAX_DEPTH + 1) + "all()" + ")" * (MAX_DEPTH + 1))
    assert info.value.kind == "too-long"


def test_global_flags_and_composition():
    assert Selector("global()").is_global and Selector("global() && has(a)").contains_global
    assert not Selector("global() && has(a)").is_global
    both = Selector("has(a)") & Selector("b == 'c'")
    assert both.canonical == '(has(a) && b == "c")'
    assert Selector("has(a) && b == 'c'").keys() == ["a", "b"]


def test_pickles_and_accepts_any_mapping():
    from types import MappingProxyType

    sel = Selector("a in {'x', 'y'}")
    assert pickle.loads(pickle.dumps(sel)) == sel
    assert sel.matches(MappingProxyType({"a": "x"}))
    with pytest.raises(TypeError):
        sel.matches({"a": 1})


def test_parse_labels():
    assert parse_labels("a=b, c=1,") == {"a": "b", "c": "1"}
    assert parse_labels("") == {}
    with pytest.raises(ValueError):
        parse_labels("novalue")
