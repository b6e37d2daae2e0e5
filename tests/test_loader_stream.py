"""The loader beyond tests/test_loader.py: streaming, lines recovered on demand, the YAML 1.2
semantics of ruamel's round-trip loader, and the constructs left to ruamel."""

from __future__ import annotations

import json
import math
import textwrap

import pytest

from pyclassify import loader_ruamel
from pyclassify.documents import Problems
from pyclassify.loader import iter_bytes, iter_text, load_text


def load(text: str, file: str = "m.yaml"):
    problems = Problems()
    docs = load_text(textwrap.dedent(text), file, problems)
    return docs, problems


def ruamel_values(text: str) -> list:
    return [root for root, _ in loader_ruamel.parse_yaml(text)]


@pytest.mark.parametrize(
    "scalar",
    [
        "=",
        "<<",
        "0b101",
        "0o17",
        "017",
        "0x1F",
        "-0x1F",
        "+12",
        "1_000",
        "1__",
        ".5",
        ".5e+3",
        ".5e3",
        "1.",
        "1e5",
        "-.inf",
        ".NaN",
        "-.nan",
        "~",
        "Null",
        "nUll",
        "True",
        "TRUE",
        "tRue",
        "yes",
        "no",
        "on",
        "y",
        "2024-01-01",
        "2024-01-01T10:00:00Z",
        "12:30",
        "1:20:00",
        "-0",
        "00",
        "09",
        "99999999999999999999999",
        "-99999999999999999999",
        "0o",
        "._5",
        "1e",
        "0x",
        "0b2",
        "!foo 12",
        "! 12",
        "!!str 12",
        "!!int '12'",
        "!!float 3",
        "!!bool yes",
        "!!null ''",
        "!!binary aGVsbG8=",
        "!!set {a, b, 1}",
        "!!timestamp 2024-01-01",
        "!foo {a: 1}",
        "!!omap [a: 1]",
        "|\n  x\n  y\n",
        "|+\n  x\n\n",
        ">-\n  x\n  y\n\n  z\n",
        "'a''b'",
        '"\\x41\\u00e9\\t\\N\\_ \\\n  b"',
        "{? [a, b] : c}",
        "plain\n  folded\n\n  lines",
        "[a, {b: c}, [d]]",
    ],
)
def test_scalars_and_tags_read_as_ruamel_reads_them(scalar):
    text = f"apiVersion: v1\nkind: X\nv: {scalar}\n"
    (doc,), problems = load(text)
    (want,) = ruamel_values(text)
    assert not problems.items
    got = doc.obj["v"]
    if isinstance(got, float) and math.isnan(got):
        assert math.isnan(want["v"])
    else:
        assert got == want["v"] and type(got) is type(want["v"])


def test_merge_keys_apply_as_ruamel_applies_them():
    text = textwrap.dedent("""\
        apiVersion: v1
        kind: X
        a: &a {x: 1, y: 2}
        b: &b {x: 5, z: 6}
        v:
          <<: [*a, *b]
          y: 3
        w:
          <<: *a
        """)
    (doc,), problems = load(text)
    assert not problems.items
    assert doc.obj == ruamel_values(text)[0]
    assert doc.obj["v"] == {"x": 1, "y": 3, "z": 6}
    assert doc.lines == next(loader_ruamel.parse_yaml(text))[1]


def test_yaml_1_1_documents_are_read_as_yaml_1_1_by_ruamel():
    docs, problems = load("""\
        apiVersion: v1
        kind: A
        v: yes
        ...
        %YAML 1.1
        ---
        apiVersion: v1
        kind: B
        v: yes
        """)
    assert not problems.items
    assert [(d.kind, d.obj["v"], d.line) for d in docs] == [("A", "yes", 1), ("B", True, 7)]
    assert docs[1].line_of(("v",)) == 9


def test_items_only_ruamel_reads_keep_their_place_and_lines():
    docs, problems = load("""\
        apiVersion: v1
        items:
        - kind: Namespace
          metadata: {name: a}
        - kind: Namespace
          metadata:
            name: b
            labels: !!omap [x: y]
        - kind: Namespace
          metadata: {name: c}
        kind: NamespaceList
        """)
    assert not problems.items
    assert [(d.name, d.line, d.base) for d in docs] == [
        ("a", 3, ("items", 0)),
        ("b", 5, ("items", 1)),
        ("c", 9, ("items", 2)),
    ]
    assert docs[1].obj["metadata"]["labels"] == {"x": "y"}
    assert docs[1].line_of(("metadata", "labels")) == 8


def test_an_invalid_item_is_reported_and_the_others_load():
    docs, problems = load("""\
        apiVersion: v1
        kind: List
        items:
        - {apiVersion: v1, kind: Namespace, metadata: {name: a}}
        - apiVersion: v1
          kind: Namespace
          kind: Namespace
        - just text
        - {apiVersion: v1, kind: Namespace, metadata: {name: c}}
        """)
    assert [d.name for d in docs] == ["a", "c"]
    assert [(p.line, p.path, p.message) for p in problems] == [
        (7, "", 'invalid YAML: found duplicate key "kind"'),
        (8, "items[2]", "a list item must be a mapping, not a string"),
    ]


def test_list_items_are_handed_out_as_they_are_read():
    items = "".join(f"- {{apiVersion: v1, kind: Namespace, metadata: {{name: n{i}}}}}\n" for i in range(3))
    text = f"apiVersion: v1\nitems:\n{items}- {{a: 1, a: 2}}\nkind: List\n"
    problems = Problems()
    stream = iter_text(text, "l.yaml", problems)
    assert next(stream).name == "n0"
    assert not problems.items  # the bad item is not read yet
    assert [d.name for d in stream] == ["n1", "n2"]
    assert [p.line for p in problems] == [6]


def test_lines_are_recovered_only_when_asked_and_equal_ruamels():
    text = textwrap.dedent("""\
        apiVersion: v1
        items:
        - apiVersion: v1
          kind: Pod
          metadata:
            name: a
          spec:
            containers:
            - name: c
              ports: [{containerPort: 80}, {name: x,
                containerPort: 81}]
        kind: List
        """)
    (doc,), _ = load(text)
    assert doc._lines is None  # nothing computed yet
    whole = next(loader_ruamel.parse_yaml(text))[1]
    want = {p[2:]: n for p, n in whole.items() if p[:2] == ("items", 0)}
    assert doc.lines == want
    assert doc.line_of(("spec", "containers", 0, "ports", 1, "containerPort")) == 11


def test_an_item_read_alone_that_refers_outside_reads_its_whole_list_for_lines():
    (a, b), problems = load("""\
        apiVersion: v1
        kind: List
        items:
        - &ns {apiVersion: v1, kind: Namespace, metadata: {name: a}}
        - apiVersion: v1
          kind: ConfigMap
          metadata: {name: b}
          data:
            copy: *ns
        """)
    assert not problems.items
    assert b.obj["data"]["copy"] is a.obj
    assert b.line_of(("data", "copy")) == 9 and b.line == 5


def test_json_list_with_items_before_kind_streams_and_keeps_lines():
    obj = {
        "apiVersion": "v1",
        "items": [{"kind": "Namespace", "metadata": {"name": f"n{i}"}} for i in range(3)],
        "kind": "NamespaceList",
    }
    text = json.dumps(obj, indent=4)
    docs, problems = load(text, "l.json")
    assert not problems.items
    assert [(d.kind, d.api_version, d.name) for d in docs] == [("Namespace", "v1", f"n{i}") for i in range(3)]
    assert docs[2].line_of(("metadata", "name")) == text.splitlines().index('                "name": "n2"') + 1


def test_bom_and_crlf():
    problems = Problems()
    (doc,) = iter_bytes(
        b"\xef\xbb\xbfapiVersion: v1\r\nkind: Namespace\r\nmetadata:\r\n  name: a\r\n", "w.yaml", problems
    )
    assert not problems.items and doc.name == "a" and doc.line_of(("metadata", "name")) == 4


def test_text_with_lone_surrogates_is_a_problem():
    problems = Problems()
    assert list(iter_text("apiVersion: v1\nkind: \ud800\n", "s.yaml", problems)) == []
    assert [(p.line, p.message) for p in problems] == [(2, "not UTF-8 text")]


def test_deep_nesting_is_a_problem_not_a_crash():
    _, problems = load("apiVersion: v1\nkind: X\nv: " + "[" * 5000 + "]" * 5000 + "\n")
    (p,) = problems
    assert "too large, nested too deeply" in p.message or "invalid YAML" in p.message


def test_json_looking_yaml_is_yaml():
    docs, problems = load('{"apiVersion": "v1", "kind": "A"}\n---\n{apiVersion: v1, kind: B}  # flow YAML\n')
    assert not problems.items
    assert [(d.kind, d.line) for d in docs] == [("A", 1), ("B", 3)]
