"""The .pyi stubs of the compiled modules are kept honest.

For each compiled module, the public names in its stub must be exactly the public names the module
has (``__version__`` counts as public); functions must be callable, classes must be classes with
the methods and properties the stub lists, and simply-typed constants must have that type. New names are checked
as soon as they are added to either side.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from types import ModuleType

import pytest

import pyclassify

MODULES = ["pyclassify._engine", "pyclassify._native"]
PUBLIC_DUNDERS = {"__version__"}
TYPE_ALIAS = getattr(ast, "TypeAlias", ())  # Python 3.12+
SIMPLE_TYPES = {"int": int, "str": str, "float": float, "bool": bool, "bytes": bytes}


def is_public(name: str) -> bool:
    return not name.startswith("_") or name in PUBLIC_DUNDERS


def stub_path(module: ModuleType) -> Path:
    path = Path(pyclassify.__file__).with_name(module.__name__.rpartition(".")[2] + ".pyi")
    assert path.is_file(), f"no stub {path} for {module.__name__}"
    return path


def stub_names(tree: ast.Module) -> dict[str, ast.stmt]:
    """Names the stub defines at top level (imports are not definitions)."""
    names: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, TYPE_ALIAS) and isinstance(node.name, ast.Name):  # `type X = ...`
            names[node.name.id] = node
    return {name: node for name, node in names.items() if is_public(name)}


def simple_type(annotation: ast.expr | None) -> type | None:
    """int for `int` or `Final[int]`; None for anything fancier."""
    if (
        isinstance(annotation, ast.Subscript)
        and isinstance(annotation.value, ast.Name)
        and annotation.value.id == "Final"
    ):
        annotation = annotation.slice
    if isinstance(annotation, ast.Name):
        return SIMPLE_TYPES.get(annotation.id)
    return None


@pytest.fixture(params=MODULES)
def compiled(request: pytest.FixtureRequest) -> tuple[ModuleType, dict[str, ast.stmt]]:
    module = importlib.import_module(request.param)
    tree = ast.parse(stub_path(module).read_text(), filename=str(stub_path(module)))
    return module, stub_names(tree)


def test_stub_names_equal_module_names(compiled: tuple[ModuleType, dict[str, ast.stmt]]) -> None:
    module, stubbed = compiled
    actual = {name for name in dir(module) if is_public(name)}
    assert not actual - set(stubbed), f"{module.__name__}: in module, missing from stub"
    assert not set(stubbed) - actual, f"{module.__name__}: in stub, missing from module"


def test_stubbed_objects_have_the_stubbed_kind(compiled: tuple[ModuleType, dict[str, ast.stmt]]) -> None:
    module, stubbed = compiled
    for name, node in stubbed.items():
        obj = getattr(module, name)
        where = f"{module.__name__}.{name}"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert callable(obj) and not inspect.isclass(obj), f"{where} is stubbed as a function"
        elif isinstance(node, ast.ClassDef):
            assert inspect.isclass(obj), f"{where} is stubbed as a class"
            for item in node.body:
                # Methods and properties live on the class; annotated attributes may be
                # per instance (exception fields), so only methods are checked here.
                if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                member = item.name
                if member.startswith("_") and not (member.startswith("__") and member.endswith("__")):
                    continue
                assert hasattr(obj, member), f"{where}.{member} is stubbed but missing"
                if isinstance(item, ast.FunctionDef) and not _is_property(item):
                    assert callable(getattr(obj, member)), f"{where}.{member} is not callable"
        elif isinstance(node, ast.AnnAssign):
            expected = simple_type(node.annotation)
            if expected is not None:
                assert isinstance(obj, expected), (
                    f"{where} is {type(obj).__name__}, stub says {expected.__name__}"
                )


def _is_property(func: ast.FunctionDef) -> bool:
    for deco in func.decorator_list:
        name = deco.attr if isinstance(deco, ast.Attribute) else getattr(deco, "id", "")
        if name in {"property", "setter", "getter", "deleter", "cached_property"}:
            return True
    return False
