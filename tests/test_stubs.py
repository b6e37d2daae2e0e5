"""The .pyi stubs of the compiled modules are kept honest.

For each compiled module, the public names in its stub must be exactly the public names the module
has (``__version__`` counts as public); functions must be callable, classes must be classes with
the methods and properties the stub lists, and simply-typed constants must have that type. New names are checked
as soon as they are added to either side.

Signatures too: every stubbed function, method and constructor has the parameters of the compiled
object — names, order, kinds (positional-only, keyword-only, ``*args``), which have defaults and,
where both sides say, the default values (``...`` in the stub means "has a default"); static
methods and properties are what the stub says; a Cython parameter declared with a C type (``bint``,
``int``, ``double``, ``str``, ``bytes``, an extension type) has the matching annotation. Where the
runtime signatures come from:

- pyo3 (``_engine``): ``__text_signature__``, which pyo3 writes for every function, method and
  constructor (``#[pyo3(signature = ...)]``; a default that is not a Python literal shows as ``...``);
- Cython (``_native``): ``inspect.signature`` of the cyfunctions, plus the C types from the
  signature that ``embedsignature=True`` puts on the first line of each docstring. A constructor
  written as ``__init__`` is in the class docstring the same way; one written as ``__cinit__``
  leaves no trace in the compiled module, so it is read from ``native/*.pyx|pxi`` when the source
  tree is there (and not checked against an installed package without it).
- Exception classes and pyo3 classes without a constructor have no constructor signature to check.

The stubs are the installed ones (beside ``pyclassify.__file__``), so run against an installed
wheel this also proves that the wheel ships them.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

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
                assert isinstance(obj, expected), f"{where} is {type(obj).__name__}, stub says {expected.__name__}"


def _is_property(func: ast.FunctionDef) -> bool:
    for deco in func.decorator_list:
        name = deco.attr if isinstance(deco, ast.Attribute) else getattr(deco, "id", "")
        if name in {"property", "setter", "getter", "deleter", "cached_property"}:
            return True
    return False


# --- signatures ------------------------------------------------------------------------------

P = inspect.Parameter
NATIVE_SOURCES = Path(__file__).resolve().parents[1] / "native"
# C types of Cython parameters -> the Python type the stub must name.
C_INT = re.compile(r"(?:unsigned |signed |long |short )*(?:int|long|short|char|size_t|ssize_t|Py_ssize_t|u?int\d+_t)")
C_TYPES = {"bint": "bool", "bool": "bool", "double": "float", "float": "float", "str": "str", "bytes": "bytes"}


class Default(enum.Enum):
    NONE = "no default"
    SOME = "a default, value not stated"  # `...` in a stub; pyo3's `...` for a non-literal


@dataclass(frozen=True)
class Param:
    name: str
    kind: inspect._ParameterKind
    default: Any = Default.NONE
    ctype: str | None = None  # runtime, Cython: the declared C type
    annotation: ast.expr | None = None  # stub

    def render(self) -> str:
        star = {P.VAR_POSITIONAL: "*", P.VAR_KEYWORD: "**"}.get(self.kind, "")
        ctype = f"{self.ctype} " if self.ctype else ""
        default = (
            "" if self.default is Default.NONE else "=..." if self.default is Default.SOME else f"={self.default!r}"
        )
        return f"{star}{ctype}{self.name}{default}"


def render(params: list[Param]) -> str:
    parts: list[str] = []
    for i, p in enumerate(params):
        if p.kind is P.KEYWORD_ONLY and (i == 0 or params[i - 1].kind not in (P.KEYWORD_ONLY, P.VAR_POSITIONAL)):
            parts.append("*")
        parts.append(p.render())
        if p.kind is P.POSITIONAL_ONLY and (i + 1 == len(params) or params[i + 1].kind is not P.POSITIONAL_ONLY):
            parts.append("/")
    return f"({', '.join(parts)})"


def constant(node: ast.expr) -> Any:
    """The value of a literal default (`1`, `-1`, `1 << 22`, `"x"`, `None`); Default.SOME otherwise."""
    if isinstance(node, ast.Constant):
        return Default.SOME if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = constant(node.operand)
        return -value if isinstance(value, (int, float)) else Default.SOME
    if isinstance(node, ast.BinOp):
        left, right = constant(node.left), constant(node.right)
        ops = {
            ast.LShift: lambda a, b: a << b,
            ast.Mult: lambda a, b: a * b,
            ast.Add: lambda a, b: a + b,
            ast.Sub: lambda a, b: a - b,
            ast.BitOr: lambda a, b: a | b,
        }
        if type(node.op) in ops and isinstance(left, int) and isinstance(right, int):
            return ops[type(node.op)](left, right)
    return Default.SOME


def runtime_default(value: Any) -> Any:
    if value is P.empty:
        return Default.NONE
    if value is Ellipsis:  # pyo3 writes `...` for a default it cannot spell
        return Default.SOME
    return value


def stub_params(func: ast.FunctionDef | ast.AsyncFunctionDef, bound: bool) -> list[Param]:
    """The parameters of a stub function; `bound` drops self/cls."""
    a = func.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[Any] = [Default.NONE] * (len(positional) - len(a.defaults)) + [constant(d) for d in a.defaults]
    params: list[Param] = []
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        # `__x` (not dunder) is the pre-PEP 570 spelling of positional-only.
        posonly = i < len(a.posonlyargs) or (arg.arg.startswith("__") and not arg.arg.endswith("__"))
        params.append(
            Param(
                arg.arg, P.POSITIONAL_ONLY if posonly else P.POSITIONAL_OR_KEYWORD, default, annotation=arg.annotation
            )
        )
    if a.vararg:
        params.append(Param(a.vararg.arg, P.VAR_POSITIONAL, annotation=a.vararg.annotation))
    for arg, kw_default in zip(a.kwonlyargs, a.kw_defaults):
        params.append(
            Param(
                arg.arg,
                P.KEYWORD_ONLY,
                Default.NONE if kw_default is None else constant(kw_default),
                annotation=arg.annotation,
            )
        )
    if a.kwarg:
        params.append(Param(a.kwarg.arg, P.VAR_KEYWORD, annotation=a.kwarg.annotation))
    return params[1:] if bound else params


def cython_params(text: str) -> list[Param]:
    """Parameters of a Cython `def` from the text between its parentheses (C types kept)."""
    params: list[Param] = []
    kind = P.POSITIONAL_OR_KEYWORD
    for part in split_top_level(text):
        if part == "*":
            kind = P.KEYWORD_ONLY
            continue
        if part == "/":
            params = [Param(p.name, P.POSITIONAL_ONLY, p.default, p.ctype) for p in params]
            continue
        decl, eq, default_text = part.partition("=")
        match = re.fullmatch(r"(?P<ctype>.*?)\s*(?P<stars>\*{0,2})(?P<name>\w+)", decl.strip())
        assert match, f"cannot read Cython parameter {part!r}"
        stars, name = match["stars"], match["name"]
        ctype = match["ctype"].strip() or None
        default = constant(ast.parse(default_text.strip(), mode="eval").body) if eq else Default.NONE
        if stars == "*":
            params.append(Param(name, P.VAR_POSITIONAL))
            kind = P.KEYWORD_ONLY
        elif stars == "**":
            params.append(Param(name, P.VAR_KEYWORD))
        else:
            params.append(Param(name, kind, default, ctype))
    return params


def split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def embedded_signature(obj: Any, name: str) -> list[Param] | None:
    """The signature Cython's embedsignature wrote on the first line of the docstring."""
    first = (getattr(obj, "__doc__", None) or "").partition("\n")[0]
    match = re.fullmatch(rf"(?:\w+\.)*{re.escape(name)}\((.*)\)(?:\s*->.*)?", first)
    return cython_params(match[1]) if match else None


def cython_class_source(class_name: str) -> str | None:
    """The body of `cdef class <class_name>` in native/*.pyx|pxi, if the source tree is here."""
    for path in sorted(NATIVE_SOURCES.glob("*.p[yx][xi]")):
        text = path.read_text()
        start = re.search(rf"^cdef class {class_name}\b", text, re.M)
        if start:
            end = re.compile(r"^(?:cdef |cpdef |def |class )", re.M).search(text, start.end())
            return text[start.end() : end.start() if end else len(text)]
    return None


def cinit_from_source(class_name: str) -> list[Param] | None:
    """A Cython class's `__cinit__` parameters (self dropped), read from native/*.pyx|pxi."""
    body = cython_class_source(class_name)
    if body is None:
        return None
    cinit = re.search(r"^\s+def __cinit__\((.*?)\)\s*:", body, re.M | re.S)
    return cython_params(cinit[1])[1:] if cinit else []


def cython_attributes(class_name: str) -> dict[str, tuple[str, str]]:
    """`cdef readonly|public TYPE name` of a Cython class: {name: (readonly|public, TYPE)}."""
    body = cython_class_source(class_name) or ""
    found: dict[str, tuple[str, str]] = {}
    for match in re.finditer(r"^\s+cdef (readonly|public) (.+?)\s*(?:#.*)?$", body, re.M):
        decl = re.fullmatch(r"(?P<ctype>.+?)\s+(?P<names>\w+(?:\s*,\s*\w+)*)", match[2])
        assert decl, f"cannot read Cython attribute {match[0].strip()!r}"
        for attr in decl["names"].split(","):
            found[attr.strip()] = (match[1], decl["ctype"])
    return found


def runtime_params(obj: Any, name: str, bound: bool) -> list[Param]:
    """Parameters of a compiled function or method (self dropped when `bound`)."""
    sig = inspect.signature(obj)
    ctypes = {p.name: p.ctype for p in embedded_signature(obj, name) or []}
    params = [Param(p.name, p.kind, runtime_default(p.default), ctypes.get(p.name)) for p in sig.parameters.values()]
    return params[1:] if bound else params


def runtime_constructor(module: ModuleType, cls: type) -> list[Param] | None:
    """What the class is called with, or None when the compiled module does not say."""
    if issubclass(cls, BaseException):
        return None
    if getattr(cls, "__text_signature__", None) is not None:  # pyo3 #[new] with text_signature
        sig = inspect.signature(cls)
        return [Param(p.name, p.kind, runtime_default(p.default)) for p in sig.parameters.values()]
    if module.__name__.endswith("._native"):
        from_doc = embedded_signature(cls, cls.__name__)  # a Cython __init__
        if from_doc is not None:
            return from_doc
        if NATIVE_SOURCES.is_dir():
            return cinit_from_source(cls.__name__)
    return None


def annotation_names(node: ast.expr | None) -> set[str]:
    if node is None:
        return set()
    return {
        n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))
    }


def python_type_of(ctype: str) -> str | None:
    ctype = ctype.removeprefix("const ").strip()
    if ctype in C_TYPES:
        return C_TYPES[ctype]
    if C_INT.fullmatch(ctype):
        return "int"
    if re.fullmatch(r"\w+", ctype) and ctype != "object":
        return ctype  # an extension type
    return None


def compare(where: str, runtime: list[Param], stub: list[Param], dunder: bool = False) -> list[str]:
    """Differences between a runtime and a stub parameter list, one line each."""
    both = f"runtime {render(runtime)}, stub {render(stub)}"
    if dunder:  # slot wrappers: only the number of operands matters
        return [] if len(runtime) == len(stub) else [f"{where}: {both}"]
    problems: list[str] = []
    if len(runtime) != len(stub):
        return [f"{where}: {len(runtime)} parameters at runtime, {len(stub)} in the stub: {both}"]
    for r, s in zip(runtime, stub):
        at = f"{where}({r.name})"
        if r.kind is P.POSITIONAL_ONLY:
            if s.kind is not P.POSITIONAL_ONLY:
                problems.append(f"{at}: positional-only at runtime, not in the stub: {both}")
        elif r.name != s.name:
            problems.append(f"{at}: named {s.name!r} in the stub: {both}")
        elif r.kind is not s.kind:
            problems.append(f"{at}: {r.kind.description} at runtime, {s.kind.description} in the stub: {both}")
        if (r.default is Default.NONE) != (s.default is Default.NONE):
            has = "has" if r.default is not Default.NONE else "has no"
            problems.append(
                f"{at}: {has} default at runtime, the stub says {s.default.value if isinstance(s.default, Default) else repr(s.default)}: {both}"
            )
        elif not isinstance(r.default, Default) and not isinstance(s.default, Default):
            if r.default != s.default or type(r.default) is not type(s.default):
                problems.append(f"{at}: default {r.default!r} at runtime, {s.default!r} in the stub")
        expected = python_type_of(r.ctype) if r.ctype else None
        names = annotation_names(s.annotation)
        if expected and names and "Any" not in names and expected not in names:
            problems.append(f"{at}: declared {r.ctype} in Cython, annotated {ast.unparse(s.annotation)} in the stub")
    return problems


def decorators(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    return {d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "") for d in func.decorator_list}


def class_problems(module: ModuleType, name: str, node: ast.ClassDef) -> list[str]:
    cls = getattr(module, name)
    where = f"{module.__name__}.{name}"
    problems: list[str] = []
    members: dict[str, ast.stmt] = {}
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            members.setdefault(item.name, item)  # a property's getter, not its setter
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            members[item.target.id] = item

    # Cython attributes: `cdef readonly` is a read-only property in the stub (or Final), `cdef
    # public` a plain annotated attribute (or a property with a setter); both of the C type.
    setters = {
        d.value.id
        for item in node.body
        if isinstance(item, ast.FunctionDef)
        for d in item.decorator_list
        if isinstance(d, ast.Attribute) and d.attr == "setter" and isinstance(d.value, ast.Name)
    }
    if module.__name__.endswith("._native") and NATIVE_SOURCES.is_dir():
        for attr, (access, ctype) in cython_attributes(name).items():
            item = members.get(attr)
            at = f"{where}.{attr}"
            if item is None:
                continue  # a missing member is reported below
            if isinstance(item, ast.AnnAssign):
                writable, annotation = "Final" not in annotation_names(item.annotation), item.annotation
            else:
                assert isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                writable, annotation = attr in setters, item.returns
            if writable != (access == "public"):
                problems.append(
                    f"{at}: `cdef {access}` in Cython, {'writable' if writable else 'read-only'} in the stub"
                )
            expected = python_type_of(ctype)
            names = annotation_names(annotation)
            if expected and names and "Any" not in names and expected not in names:
                problems.append(f"{at}: declared {ctype} in Cython, annotated {ast.unparse(annotation)} in the stub")

    # The constructor: `__new__` or `__init__` in the stub, whatever the runtime builds with.
    constructor = runtime_constructor(module, cls)
    stubbed_ctor = next((members[m] for m in ("__new__", "__init__") if m in members), None)
    if constructor is not None:
        if stubbed_ctor is None:
            if constructor:
                problems.append(f"{where}: constructed with {render(constructor)}, the stub declares no constructor")
        else:
            assert isinstance(stubbed_ctor, (ast.FunctionDef, ast.AsyncFunctionDef))
            problems += compare(f"{where}()", constructor, stub_params(stubbed_ctor, bound=True))

    # Every public member the class has at runtime is in the stub.
    for member, raw in vars(cls).items():
        if member.startswith("_") or member in members:
            continue
        if issubclass(cls, BaseException):
            continue
        problems.append(f"{where}.{member}: at runtime ({type(raw).__name__}), missing from the stub")

    for member, item in members.items():
        if member in ("__new__", "__init__") or not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if member.startswith("_") and not (member.startswith("__") and member.endswith("__")):
            continue
        raw = inspect.getattr_static(cls, member, None)
        at = f"{where}.{member}"
        decos = decorators(item)
        if decos & {"property", "cached_property"}:
            if not inspect.isdatadescriptor(raw) or callable(raw):
                problems.append(f"{at}: a property in the stub, {type(raw).__name__} at runtime")
            continue
        if inspect.isdatadescriptor(raw) and not callable(raw):
            problems.append(f"{at}: a method in the stub, a property/attribute at runtime")
            continue
        is_static = isinstance(raw, staticmethod)
        if is_static != ("staticmethod" in decos):
            problems.append(f"{at}: {'a' if is_static else 'not a'} staticmethod at runtime, the stub says otherwise")
            continue
        dunder = member.startswith("__") and member.endswith("__")
        if raw is None or (dunder and raw is getattr(object, member, None)):
            continue  # inherited from object: nothing compiled to compare with
        runtime = runtime_params(getattr(cls, member), member, bound=not is_static)
        stub = stub_params(item, bound=not is_static and "classmethod" not in decos)
        problems += compare(at, runtime, stub, dunder=dunder)
    return problems


def test_stub_signatures_match_the_compiled_objects(compiled: tuple[ModuleType, dict[str, ast.stmt]]) -> None:
    module, stubbed = compiled
    problems: list[str] = []
    for name, node in stubbed.items():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            obj = getattr(module, name)
            problems += compare(
                f"{module.__name__}.{name}", runtime_params(obj, name, bound=False), stub_params(node, bound=False)
            )
        elif isinstance(node, ast.ClassDef):
            problems += class_problems(module, name, node)
    assert not problems, "stub signatures differ from the compiled module:\n" + "\n".join(problems)


def test_signature_comparison_sees_a_difference() -> None:
    """The comparison itself: a renamed, reordered, re-defaulted or re-kinded parameter is seen."""
    stub = ast.parse("def f(a: int, b: bool = True, *, c: str = ...) -> None: ...").body[0]
    assert isinstance(stub, ast.FunctionDef)
    good = cython_params("int a, bint b=True, *, str c='x'")
    assert compare("f", good, stub_params(stub, bound=False)) == []
    for runtime in (
        "int a, bint b=False, *, str c='x'",  # default value
        "int a, bint b, *, str c='x'",  # default presence
        "int a, bint x=True, *, str c='x'",  # name
        "bint b=True, int a=0, *, str c='x'",  # order
        "int a, bint b=True, str c='x'",  # keyword-only
        "double a, bint b=True, *, str c='x'",  # C type vs annotation
        "int a, bint b=True, *, str c='x', d=None",
    ):  # arity
        assert compare("f", cython_params(runtime), stub_params(stub, bound=False)), runtime
