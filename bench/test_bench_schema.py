"""What strict field validation costs at cluster size, and why it is native.

The generated cluster of ``bench.cluster`` (10k pods by default: 12,702 documents as kubectl
prints them) is read once; then, alternating round by round in the same process (best CPU time
of ``PYCLASSIFY_SCHEMA_ROUNDS``, 9), on the same documents:

- normalize (``build_project``) with the schema check, and without it (``kinds.schema.check``
  replaced by a no-op): the cost of the check inside the real load path;
- the native check alone (``_engine.SchemaChecker.check`` on every document), which the load
  path runs;
- the alternatives it was chosen over: the detailed Python walk (``kinds.schema._walk``, the
  same rules, which only runs for an object the native check refused), and fastjsonschema, a
  JSON Schema library compiling each kind's schema to Python (the bundled schemas with
  ``additionalProperties: false`` wherever strict decoding refuses unknown fields).

    .venv/bin/python -m pytest bench/test_bench_schema.py -s -p no:cacheprovider
    PYCLASSIFY_SCHEMA_PODS=1000 .venv/bin/python -m pytest bench/test_bench_schema.py -s -p no:cacheprovider
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.cluster import generate, write_yaml
from pyclassify.bulk import collector_paused
from pyclassify.documents import Problems
from pyclassify.kinds import schema
from pyclassify.loader import iter_paths
from pyclassify.project import build_project

PODS = int(os.environ.get("PYCLASSIFY_SCHEMA_PODS", "10000"))
ROUNDS = int(os.environ.get("PYCLASSIFY_SCHEMA_ROUNDS", "9"))


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> list:
    out = tmp_path_factory.mktemp("schema")
    write_yaml(generate(PODS, seed=1), out / "cluster.yaml")
    with collector_paused():
        return list(iter_paths([str(out / "cluster.yaml")], Problems()))


def _fastjsonschema(docs: list) -> Callable[[], int] | None:
    """Every document through fastjsonschema validators of the bundled schemas, made strict."""
    try:
        import fastjsonschema
    except ImportError:
        return None
    folder = Path(schema.__file__).resolve().parents[1] / "schemas"
    definitions: dict[str, Any] = {}
    kinds: dict[str, Any] = {}
    for name in schema.SCHEMA_FILES:
        data = json.loads((folder / name).read_text())
        definitions.update(data["definitions"])
        kinds.update(data["kinds"])

    def strict(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        node = dict(node)
        if "properties" in node:
            node["properties"] = {k: strict(v) for k, v in node["properties"].items()}
        for key in ("items", "additionalProperties"):
            if key in node:
                node[key] = strict(node[key])
        if node.pop("x-kubernetes-int-or-string", False):
            node["type"] = ["integer", "string"]
        preserve = node.pop("x-kubernetes-preserve-unknown-fields", False)
        node.pop("format", None)
        strict_object = "properties" in node and "additionalProperties" not in node and not preserve
        if node.get("type") == "object" and strict_object:
            node["additionalProperties"] = False
        if "type" in node:  # null is taken anywhere, as the API server does
            node["type"] = [*([node["type"]] if isinstance(node["type"], str) else node["type"]), "null"]
        return node

    definitions = {name: strict(node) for name, node in definitions.items()}
    validators: dict[tuple[str, str], Any] = {}
    for doc in docs:
        key = (doc.api_version, doc.kind)
        if key not in validators:
            entry = kinds.get(f"{key[0]}/{key[1]}")
            ref = (entry.get("anyOf") or [entry])[0]["$ref"] if entry else None
            validators[key] = fastjsonschema.compile({"$ref": ref, "definitions": definitions}) if ref else None
    pairs = [(validators[(d.api_version, d.kind)], d.obj) for d in docs]

    def run() -> int:
        refused = 0
        for validate, obj in pairs:
            if validate is not None:
                try:
                    validate(obj)
                except fastjsonschema.JsonSchemaException:
                    refused += 1
        return refused

    return run


def test_cost_of_strict_fields(docs: list, monkeypatch: pytest.MonkeyPatch) -> None:
    checker = schema._checker()
    python = schema.schemas()
    objs = [d.obj for d in docs]

    def native() -> int:
        return sum(checker.check(o) is False for o in objs)

    def walk() -> int:
        refused = 0
        for o in objs:
            roots = python.roots(o["apiVersion"], o["kind"])
            if roots:
                found: list = []
                schema._walk(o, roots[0], (), found)
                refused += bool(found)
        return refused

    library = _fastjsonschema(docs)
    real_check = schema.check

    def without_check() -> Any:
        monkeypatch.setattr(schema, "check", lambda doc, problems: False)
        try:
            return build_project(docs, Problems())
        finally:
            monkeypatch.setattr(schema, "check", real_check)

    runs: dict[str, Callable[[], Any]] = {
        "normalize with the check": lambda: build_project(docs, Problems()),
        "normalize without it": without_check,
        "native check alone": native,
        "Python walk alone": walk,
    }
    if library is not None:
        runs["fastjsonschema alone"] = library
    best = {name: float("inf") for name in runs}
    with collector_paused():
        for run in runs.values():  # warm: schemas compiled, validators built
            run()
        assert native() == 0 and walk() == 0 and (library is None or library() == 0)
        for _ in range(ROUNDS):
            for name, run in runs.items():
                t = time.process_time()
                run()
                best[name] = min(best[name], time.process_time() - t)
    base = best["normalize without it"]
    print(f"\n{len(docs)} documents ({PODS} pods), best CPU of {ROUNDS} rounds each:")
    for name, t in best.items():
        per_doc = t / len(docs) * 1e6
        share = f"{t / base:+.0%} of normalize" if "alone" in name else ""
        print(f"  {name:26} {t:.3f} s  ({per_doc:.1f} µs a document)  {share}")
    print(
        f"  the check in the load path: normalize {base:.3f} -> {best['normalize with the check']:.3f} s "
        f"({best['normalize with the check'] / base - 1:+.0%})"
    )
    if library is None:
        print("  fastjsonschema: not installed (pip install '.[test]'), its row left out")
