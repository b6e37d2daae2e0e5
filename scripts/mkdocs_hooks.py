"""MkDocs hook: links from docs/ to files of the repository outside it (`../bench/README.md`).

Such a link reads right where the Markdown is read (a clone, a forge), but the built site holds
only docs/. Each one whose file exists is rewritten to the file's path in the repository, as
code; one whose file does not exist is left as it is, so `mkdocs build --strict` fails on it
like on any other broken link.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

# [text](target) and [text](target#anchor); images (![...]) are left alone.
LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]+)\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")


def on_page_markdown(markdown, page, config, files):
    docs_dir = Path(config["docs_dir"]).resolve()
    repo = docs_dir.parent
    page_dir = posixpath.dirname(page.file.src_uri)

    def rewrite(match: re.Match) -> str:
        target = match["target"]
        if "://" in target or target.startswith(("/", "mailto:")):
            return match[0]
        path = (docs_dir / page_dir / target).resolve()
        if path.is_relative_to(docs_dir) or not path.is_relative_to(repo) or not path.exists():
            return match[0]
        where = path.relative_to(repo).as_posix()
        text = match["text"]
        return f"`{where}`" if text.strip("`") == where else f"{text} (`{where}`)"

    return LINK.sub(rewrite, markdown)
