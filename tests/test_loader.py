"""Loading manifests: YAML/JSON, multi-document files, Lists, directories, stdin, line numbers."""

from __future__ import annotations

import io
import json
import textwrap

import pytest

from pyclassify.documents import Problems
from pyclassify.loader import load_paths, load_text, manifest_files


def load(text: str, file: str = "m.yaml"):
    problems = Problems()
    docs = load_text(textwrap.dedent(text), file, problems)
    return docs, problems


def test_multi_document_file_with_empty_documents():
    docs, problems = load(
        """\
        ---
        apiVersion: v1
        kind: Namespace
        metadata:
          name: a
        ---
        ---
        # only a comment
        ---
        apiVersion: v1
        kind: Namespace
        metadata:
          name: b
        """
    )
    assert not problems.items
    assert [(d.name, d.line) for d in docs] == [("a", 2), ("b", 10)]
    assert docs[1].line_of(("metadata", "name")) == 13


def test_line_numbers_of_nested_fields():
    docs, _ = load(
        """\
        apiVersion: networking.k8s.io/v1
        kind: NetworkPolicy
        metadata:
          name: np
        spec:
          podSelector: {}
          ingress:
          - from:
            - podSelector: {}
            - ipBlock:
                cidr: 10.0.0.0/8
                except:
                - 10.1.0.0/16
                - 10.2.0.0/16
        """
    )
    (doc,) = docs
    assert doc.line_of(("spec", "ingress", 0)) == 8
    assert doc.line_of(("spec", "ingress", 0, "from", 1, "ipBlock", "cidr")) == 11
    assert doc.line_of(("spec", "ingress", 0, "from", 1, "ipBlock", "except", 1)) == 14
    # A path below the deepest known field falls back to that field's line.
    assert doc.line_of(("spec", "ingress", 0, "from", 1, "ipBlock", "except", 1, "nope")) == 14


def test_kubectl_get_list_items_are_documents_with_their_own_lines():
    # `kubectl get pods -o yaml` prints kind: List after the items.
    docs, problems = load(
        """\
        apiVersion: v1
        items:
        - apiVersion: v1
          kind: Pod
          metadata:
            name: a
            namespace: x
            creationTimestamp: "2024-05-01T10:00:00Z"
        - apiVersion: v1
          kind: Pod
          metadata:
            name: b
          spec:
            containers:
            - name: c
        kind: List
        metadata:
          resourceVersion: ""
        """
    )
    assert not problems.items
    assert [d.name for d in docs] == ["a", "b"]
    a, b = docs
    assert (a.line, b.line) == (3, 9)
    assert a.base == ("items", 0) and b.base == ("items", 1)
    # Lines are relative to the item: paths start at the item, not at the List.
    assert b.line_of(("spec", "containers", 0, "name")) == 15
    assert ("items", 1) not in b.lines


def test_typed_list_items_inherit_kind_and_api_version():
    docs, problems = load(
        """\
        apiVersion: v1
        kind: NamespaceList
        items:
        - metadata:
            name: a
        - kind: Namespace
          apiVersion: v1
          metadata:
            name: b
        """
    )
    assert not problems.items
    assert [(d.kind, d.api_version, d.name) for d in docs] == [("Namespace", "v1", "a"), ("Namespace", "v1", "b")]


def test_items_of_a_plain_list_must_say_their_kind():
    docs, problems = load(
        """\
        apiVersion: v1
        kind: List
        items:
        - metadata:
            name: a
        """
    )
    assert docs == []
    assert [(p.line, p.message) for p in problems] == [(4, "apiVersion is required"), (4, "kind is required")]


def test_json_with_tabs_and_line_numbers():
    text = '{\n\t"apiVersion": "v1",\n\t"kind": "Pod",\n\t"metadata": {\n\t\t"name": "p",\n\t\t"labels": {"a": "b"}\n\t}\n}\n'
    docs, problems = load(text, "p.json")
    assert not problems.items
    (doc,) = docs
    assert doc.obj == {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}}}
    assert doc.line_of(("metadata", "labels", "a")) == 6


def test_json_list_from_kubectl():
    obj = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in ("a", "b")],
    }
    docs, problems = load(json.dumps(obj, indent=4), "l.json")
    assert not problems.items
    assert [d.name for d in docs] == ["a", "b"]
    assert (
        docs[1].line_of(("metadata", "name"))
        == json.dumps(obj, indent=4).splitlines().index('                "name": "b"') + 1
    )


def test_plain_types_not_ruamel_types():
    docs, _ = load(
        """\
        apiVersion: v1
        kind: Pod
        metadata:
          name: p
          labels: &l {a: b}
        spec:
          n: 3
          f: 1.5
          t: true
          s: |
            text
          z: null
          when: 2024-01-01T00:00:00Z
        """
    )
    spec = docs[0].obj["spec"]
    assert spec == {"n": 3, "f": 1.5, "t": True, "s": "text\n", "z": None, "when": "2024-01-01T00:00:00Z"}
    assert type(docs[0].obj) is dict and type(docs[0].obj["metadata"]["labels"]) is dict
    assert [type(v) for v in spec.values()] == [int, float, bool, str, type(None), str]


def test_invalid_yaml_names_file_and_line():
    docs, problems = load(
        """\
        apiVersion: v1
        kind: Namespace
        metadata:
          name: a
          labels: [unclosed
        """,
        "bad.yaml",
    )
    assert docs == []
    (p,) = problems
    assert p.file == "bad.yaml" and p.line in (5, 6) and "invalid YAML" in p.message


def test_documents_before_a_syntax_error_are_kept():
    docs, problems = load(
        """\
        apiVersion: v1
        kind: Namespace
        metadata: {name: a}
        ---
        a: b: c
        """
    )
    assert [d.name for d in docs] == ["a"]
    assert [p.line for p in problems] == [5]


def test_invalid_json_names_line():
    docs, problems = load('{\n  "apiVersion": "v1",\n  "kind": "Pod",,\n}\n', "bad.json")
    assert docs == []
    (p,) = problems
    assert (p.file, p.line) == ("bad.json", 3)


def test_duplicate_keys_are_an_error():
    _, problems = load("apiVersion: v1\nkind: Pod\nkind: Pod\n")
    (p,) = problems
    assert p.line == 3 and "duplicate key" in p.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "a manifest must be a mapping, not a list"),
        ("just text\n", "a manifest must be a mapping, not a string"),
        ("kind: Pod\nmetadata: {name: p}\n", "apiVersion is required"),
        ("apiVersion: v1\nmetadata: {name: p}\n", "kind is required"),
    ],
)
def test_documents_that_are_not_objects(text, message):
    docs, problems = load(text)
    assert docs == []
    assert [p.message for p in problems] == [message]
    assert problems.items[0].line == 1


def test_directory_recursion_is_sorted_and_skips_other_files(tmp_path):
    for rel in [
        "b.yaml",
        "a/z.yml",
        "a/y/x.json",
        "a.yaml",
        "notes.txt",
        ".git/config.yaml",
        "c/.hidden.yaml",
        "C.YAML",
    ]:
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        name = rel.replace("/", "-").replace(".", "-").lower()
        f.write_text(f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n")
    files = [f.relative_to(tmp_path).as_posix() for f in manifest_files(tmp_path)]
    assert files == ["C.YAML", "a/y/x.json", "a/z.yml", "a.yaml", "b.yaml"]
    problems = Problems()
    docs = load_paths([str(tmp_path)], problems)
    assert [d.name for d in docs] == ["c-yaml", "a-y-x-json", "a-z-yml", "a-yaml", "b-yaml"]
    assert docs[0].file == str(tmp_path / "C.YAML")


def test_explicit_file_is_read_whatever_its_suffix(tmp_path):
    f = tmp_path / "manifest.txt"
    f.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n")
    problems = Problems()
    assert [d.name for d in load_paths([str(f)], problems)] == ["a"]


def test_stdin(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n"))
    problems = Problems()
    (doc,) = load_paths(["-"], problems)
    assert (doc.name, doc.file, doc.line) == ("a", "<stdin>", 1)


def test_missing_path_is_a_problem(tmp_path):
    problems = Problems()
    assert load_paths([str(tmp_path / "nope.yaml")], problems) == []
    (p,) = problems
    assert p.file.endswith("nope.yaml") and "no such file" in p.message


def test_non_utf8_file_is_a_problem(tmp_path):
    f = tmp_path / "bin.yaml"
    f.write_bytes(b"apiVersion: v1\nkind: \xff\n")
    problems = Problems()
    assert load_paths([str(f)], problems) == []
    assert [(p.line, p.message) for p in problems] == [(2, "not UTF-8 text")]


def test_aliases_are_shared_not_expanded():
    # Each level refers 10 times to the one before: 10**8 strings if aliases were copied.
    levels = ["a: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    docs, problems = load("apiVersion: v1\nkind: ConfigMap\n" + "\n".join(levels) + "\n")
    assert not problems.items
    (doc,) = docs
    assert doc.obj["l8"][0] is doc.obj["l8"][1]
    assert doc.obj["l1"][0] == ["x"] * 10
    assert doc.line_of(("l8",)) == 11


def test_json_that_yaml_rejects_still_loads():
    # YAML caps implicit keys at 1024 characters; JSON does not.
    long_key = "k" * 1100
    text = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {long_key: "v"}})
    docs, problems = load(text, "big.json")
    assert not problems.items
    assert docs[0].obj["data"] == {long_key: "v"} and docs[0].line == 1


# --- each file once; what is no Kubernetes object ------------------------------------------------

NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n"


def test_a_file_reached_twice_is_read_once(tmp_path):
    """Named and inside a directory named, or through a link: one read, a warning, no
    duplicate-object error (the API server would see one object)."""
    d = tmp_path / "dir"
    d.mkdir()
    (d / "ns.yaml").write_text(NAMESPACE)
    (d / "again.yaml").symlink_to(d / "ns.yaml")
    problems = Problems()
    docs = load_paths([str(d), str(d / "ns.yaml")], problems)
    assert [doc.name for doc in docs] == ["a"]
    assert not problems.errors and not problems.empty_inputs
    assert sum("already read as" in p.message for p in problems.warnings) == 2


def test_a_directory_with_a_values_file_warns_and_goes_on(tmp_path):
    (tmp_path / "ns.yaml").write_text(NAMESPACE)
    (tmp_path / "values.yaml").write_text("replicaCount: 2\nimage: {repository: nginx, tag: stable}\n")
    (tmp_path / "Chart.yaml").write_text("apiVersion: v2\nname: web\nversion: 0.1.0\n")
    problems = Problems()
    docs = load_paths([str(tmp_path)], problems)
    assert [doc.name for doc in docs] == ["a"]
    assert not problems.errors and not problems.empty_inputs
    skipped = [p for p in problems.warnings if "not a Kubernetes object" in p.message]
    assert sorted(p.file.rsplit("/", 1)[-1] for p in skipped) == ["Chart.yaml", "values.yaml"]
    assert problems.not_objects == 2


def test_only_values_files_is_nothing_to_read(tmp_path):
    (tmp_path / "values.yaml").write_text("replicaCount: 2\n")
    problems = Problems()
    assert load_paths([str(tmp_path)], problems) == []
    assert problems.empty_inputs == [str(tmp_path)]
    assert any("no Kubernetes object found" in p.message for p in problems.warnings)


def test_a_misspelt_kind_is_still_an_error():
    """``Kind:``/``Metadata:`` mean an object: reported, not skipped as another file."""
    docs, problems = load("apiVersion: v1\nKind: Namespace\nMetadata: {name: a}\n")
    assert docs == [] and any("kind is required" in p.message for p in problems.errors)
