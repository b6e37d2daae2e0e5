"""The seams between the layers stay where they were put (issue 17, "one home per concept").

- the flow vocabulary (``pyclassify.flow``) is shared: the native engine's facade does not import
  the reference evaluator;
- ``pyclassify.enforce`` reaches the compiled loops only through its facades
  (``pyclassify.nfqueue``, ``pyclassify.bridge``): it never imports ``_native`` nor touches an
  engine's ``_engine``;
- addresses resolve to endpoints in one place (``Inventory.owner_of``);
- label and DNS-name syntax is written in one module (``pyclassify.names``).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pyclassify

PACKAGE = Path(pyclassify.__file__).resolve().parent


def modules(sub: str = "") -> list[Path]:
    return sorted((PACKAGE / sub).rglob("*.py"))


def test_the_engine_does_not_import_the_reference_evaluator() -> None:
    code = "import sys, pyclassify.engine; print('pyclassify.reference' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", "pyclassify.engine pulls in pyclassify.reference"


@pytest.mark.parametrize("path", modules("enforce"), ids=lambda p: p.name)
def test_enforce_goes_through_the_facades(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            assert node.module != "pyclassify._native" and "_native" not in names, f"{path.name}: imports _native"
            assert node.module != "pyclassify._engine" and "_engine" not in names, f"{path.name}: imports _engine"
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith(("pyclassify._native", "pyclassify._engine")) for a in node.names)
        elif isinstance(node, ast.Attribute):
            assert node.attr not in ("_engine", "_native"), f"{path.name}:{node.lineno}: reaches into .{node.attr}"


def test_address_resolution_has_one_home() -> None:
    """Outside ``Inventory``, nothing walks endpoints' addresses to resolve one."""
    for path in modules():
        if path.name == "inventory.py" and path.parent == PACKAGE:
            continue
        text = path.read_text()
        assert "endpoints_at(" not in text, f"{path.relative_to(PACKAGE)}: resolves addresses itself (use owner_of)"


def test_name_patterns_have_one_home() -> None:
    """The DNS label pattern is written once, in pyclassify.names."""
    label = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    holders = [p.relative_to(PACKAGE).as_posix() for p in modules() if label in p.read_text()]
    assert holders == ["names.py"], holders


GUIDE = PACKAGE.parent / "docs" / "contributing.md"


@pytest.mark.skipif(not GUIDE.is_file(), reason="docs/ is not beside the package (installed copy)")
def test_the_layout_table_names_the_tree() -> None:
    """Every module of the package, every source of native/, every subpackage and every top-level
    directory is named in the layout table of docs/contributing.md, and everything the table names
    exists."""
    text = GUIDE.read_text()
    layout = text[text.index("## Layout") : text.index("## Iterating")]
    root = PACKAGE.parent
    wanted = [p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    wanted += [p.name for p in PACKAGE.glob("*.pyi")]
    wanted += [f"{p.name}/" for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    wanted += [p.name for p in (root / "native").iterdir() if p.suffix in (".pyx", ".pxi", ".pxd", ".h")]
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root, capture_output=True, text=True
    )
    if tracked.returncode == 0:
        tops = {line.split("/", 1)[0] for line in tracked.stdout.splitlines() if "/" in line}
        wanted += [f"{d}/" for d in sorted(tops) if d not in (".ci",)] + [".ci/run"]
    missing = [w for w in wanted if w not in layout]
    assert not missing, f"the layout table of docs/contributing.md does not name {missing}"
    if tracked.returncode == 0:
        files = tracked.stdout.splitlines()
        for name in re.findall(r"`([\w./-]+\.(?:py|pyi|pyx|pxi|rs))`", layout):
            base = name.rsplit("/", 1)[-1]
            assert any(f == base or f.endswith("/" + base) for f in files), (
                f"the layout table of docs/contributing.md names {name}, which is not in the tree"
            )
