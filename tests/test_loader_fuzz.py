"""Fuzzing the Rust manifest reader through the loader.

- Differential: generated documents, written as YAML (block and flow, several quoting styles)
  and as JSON (indented and on one line), load to the same plain data and the same field lines
  as the ruamel.yaml round-trip loader (the loader this replaced) and ``json.loads``.
- Robustness: random bytes and mutated valid manifests never raise anything: every failure is a
  ``Problem``, and every document's lines can be recovered.

Bounded so the suite stays fast; run longer with ``HYPOTHESIS_PROFILE=fuzz`` (tests/conftest.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyclassify import loader_ruamel
from pyclassify.documents import Problems
from pyclassify.loader import iter_bytes, load_text

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Scalars a manifest holds, with the texts YAML 1.2 is particular about.
TRICKY_TEXT = st.sampled_from(
    [
        "",
        "yes",
        "no",
        "on",
        "off",
        "y",
        "n",
        "true",
        "False",
        "NULL",
        "~",
        "0o17",
        "017",
        "0x1F",
        "1_000",
        "1e5",
        ".5",
        ".inf",
        "-.inf",
        ".nan",
        "2024-01-01",
        "2024-01-01T10:00:00Z",
        "12:30",
        "<<",
        "=",
        "-",
        "a: b",
        "#x",
        "x #y",
        "'q'",
        '"d"',
        "a\nb",
        " lead",
        "trail ",
        "\ttab",
        "é ü",
        "line\n\nbreaks\n",
    ]
)
TEXT = st.one_of(TRICKY_TEXT, st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=20))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
KEYS = st.one_of(TEXT, st.integers(min_value=-1000, max_value=1000), st.booleans())


def data(keys: st.SearchStrategy) -> st.SearchStrategy:
    return st.recursive(
        SCALARS,
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)),
        max_leaves=25,
    )


def documents(keys: st.SearchStrategy) -> st.SearchStrategy:
    doc = st.dictionaries(TEXT, data(keys), max_size=5).map(lambda d: {**d, "apiVersion": "v1", "kind": "X"})
    return st.lists(doc, min_size=1, max_size=3)


def loaded(text: str) -> tuple[list, list, list[str]]:
    problems = Problems()
    docs = load_text(text, "f", problems)
    return [d.obj for d in docs], [d.lines for d in docs], [str(p) for p in problems]


def ruamel_loaded(text: str) -> tuple[list, list]:
    parsed = list(loader_ruamel.parse_yaml(text))
    return [root for root, _ in parsed], [lines for _, lines in parsed]


@SETTINGS
@given(documents(KEYS), st.sampled_from([None, "'", '"']), st.sampled_from([False, None]), st.booleans())
def test_yaml_loads_as_ruamel_loads_it(docs, quoting, flow, sort_keys):
    text = yaml.safe_dump_all(
        docs,
        default_style=quoting,
        default_flow_style=flow,
        sort_keys=sort_keys,
        allow_unicode=True,
        explicit_start=True,
    )
    objs, lines, problems = loaded(text)
    want_objs, want_lines = ruamel_loaded(text)
    assert problems == []
    assert objs == want_objs
    assert lines == want_lines


@SETTINGS
@given(documents(TEXT).map(lambda docs: docs[0]), st.sampled_from([None, 0, 1, 4, "\t"]))
def test_json_loads_as_json_and_ruamel_load_it(doc, indent):
    text = json.dumps(doc, indent=indent, ensure_ascii=False)
    objs, lines, problems = loaded(text)
    assert problems == []
    assert objs == [json.loads(text)]
    want_objs, want_lines = ruamel_loaded(text)
    assert objs == want_objs
    if indent is not None:  # ruamel's lines inside one-line JSON are its own business
        assert lines == want_lines


def test_json_list_items_load_as_json_loads_them():
    items = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"}, "n": i / 3} for i in range(50)]
    text = json.dumps({"apiVersion": "v1", "items": items, "kind": "List"}, indent=2)
    objs, _, problems = loaded(text)
    assert problems == [] and objs == items


def never_raises(data: bytes) -> None:
    problems = Problems()
    for doc in iter_bytes(data, "f", problems):
        assert isinstance(doc.obj, dict)
        doc.line_of(("metadata", "name"))
        assert all(isinstance(n, int) for n in doc.lines.values())
    assert all(p.line >= 0 and p.message for p in problems)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_random_bytes_are_problems_never_exceptions(data):
    never_raises(data)


SEEDS = [p.read_bytes() for p in sorted(EXAMPLES.rglob("*.yaml"))][:12] + [
    json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [{"kind": "Pod", "apiVersion": "v1", "a": [1, 2.5, None]}]},
        indent=4,
    ).encode(),
    b"apiVersion: v1\nitems:\n- &a {kind: Pod, apiVersion: v1}\n- *a\n- kind: Pod\n  apiVersion: v1\n  x: !!set {a}\nkind: List\n",
    b"%YAML 1.1\n---\napiVersion: v1\nkind: X\nv: yes\n...\n---\n<<: {apiVersion: v1}\nkind: Y\n",
]
MUTATION = st.tuples(
    st.integers(min_value=0),
    st.sampled_from(["delete", "insert", "replace"]),
    st.binary(min_size=1, max_size=4)
    | st.sampled_from([b":", b"-", b"\n", b"  ", b"{", b"[", b"&a", b"*a", b"!!", b"\t", b"'", b'"', b"---"]),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEEDS), st.lists(MUTATION, min_size=1, max_size=6))
def test_mutated_manifests_are_problems_never_exceptions(seed, mutations):
    data = bytearray(seed)
    for at, how, piece in mutations:
        i = at % (len(data) + 1)
        if how == "delete":
            del data[i : i + len(piece)]
        elif how == "insert":
            data[i:i] = piece
        else:
            data[i : i + len(piece)] = piece
    never_raises(bytes(data))


def test_floats_nan_compare_by_text():
    objs, _, _ = loaded("apiVersion: v1\nkind: X\nv: [.nan, .inf, -.inf, 1e500]\n")
    v = objs[0]["v"]
    assert math.isnan(v[0]) and v[1:] == [math.inf, -math.inf, math.inf]
