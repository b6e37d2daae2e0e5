"""Every relative link of README.md, CHANGELOG.md and docs/ resolves: to a file of the repository,
and where it names an anchor in a Markdown file, to a heading of that file. `mkdocs build
--strict` checks the links between pages of the site; this also covers README.md, whose links a
reader follows on a clone, and the site's links to files outside docs/."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# [text](target) and ![alt](target); a target may end in "#anchor" and may be followed by a title.
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$", re.M)


def slug(title: str) -> str:
    """A heading's anchor as Python-Markdown's toc writes it (and as the forges do for these
    headings): markup and punctuation dropped, lower case, runs of spaces and hyphens one hyphen."""
    text = re.sub(r"`([^`]*)`", r"\1", title)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {slug(m["title"]) for m in HEADING.finditer(text)}


def broken_links(path: Path, root: Path) -> list[str]:
    """What is wrong with each relative link of the Markdown file at ``path``."""
    text = CODE.sub("", FENCE.sub("", path.read_text()))
    problems = []
    for match in LINK.finditer(text):
        target = match["target"]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}: {target}"
        if not dest.is_relative_to(root):
            problems.append(f"{where}: outside the repository")
        elif not dest.exists():
            problems.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading with that anchor in {dest.relative_to(root)}")
    return problems


def documents() -> list[Path]:
    return [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(path: Path) -> None:
    assert path.is_file(), path
    assert broken_links(path, REPO) == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Exit codes\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/a.md#exit-codes) [gone](docs/b.md) [anchor](docs/a.md#exit-code) [up](../x.md)\n"
        "`[code](docs/c.md)` ![img](docs/a.png) [web](https://example.org/x.md) [self](#nothing)\n"
        "```\n[fenced](docs/d.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "README.md: docs/b.md: no such file",
        "README.md: docs/a.md#exit-code: no heading with that anchor in docs/a.md",
        "README.md: ../x.md: outside the repository",
        "README.md: docs/a.png: no such file",
        "README.md: #nothing: no heading with that anchor in README.md",
    ]
