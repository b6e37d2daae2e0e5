"""Reading manifests: YAML and JSON files, directories and stdin into ``Document`` objects.

Input is what ``kubectl get -o yaml`` and ``calicoctl get -o yaml`` print: multi-document YAML,
JSON, ``kind: List`` and the typed ``*List`` kinds (``PodList``, ``NamespaceList``, ...), whose
items become documents of their own. Nothing here raises on bad input: it becomes a ``Problem``.

The Rust reader (``_engine.ManifestReader``, YAML 1.2 as ruamel.yaml reads it, and JSON) parses
at input speed and hands out one document at a time — the items of a List one at a time too,
even when the List is one huge document — so the ``iter_*`` functions stream: a caller that
drops each document holds one at a time. Every error can still name ``file:line: field``: a
``Document`` knows the line it starts on, and recovers the line of every other field from its
own span of the file's bytes the first time it is asked (most documents never are). A List's own
fields (beside its items) are checked against its schema when the List is read whole; a List the
reader streams hands out only its kind and apiVersion beside its items. The few
YAML constructs only ruamel reads (``!!set``, ``!!binary``, ``%YAML 1.1`` ...) go, one document
or List item at a time, through ``pyclassify.loader_ruamel``.
"""

from __future__ import annotations

import copy
import errno
import os
import re
import stat
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pyclassify import loader_ruamel
from pyclassify._engine import ManifestError, ManifestReader, manifest_lines
from pyclassify.documents import Document, FieldPath, Problem, Problems, format_path
from pyclassify.kinds import schema

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_NODES_PER_DOCUMENT = loader_ruamel.MAX_NODES_PER_DOCUMENT
STDIN = "-"
STDIN_NAME = "<stdin>"
TOO_LARGE = "document too large, nested too deeply or recursive (an alias inside its own anchor)"

# (start byte, end byte (0: to the end of the data), line, column) of a document or item
Span = tuple[int, int, int, int]


#: The largest manifest file (or stdin) read, in bytes; larger ones are rejected before they are
#: read. ``PYCLASSIFY_MAX_MANIFEST_BYTES`` sets it (a 100k-pod cluster as one List is ~150 MB).
DEFAULT_MAX_MANIFEST_BYTES = 256 * 1024 * 1024
MAX_MANIFEST_ENV = "PYCLASSIFY_MAX_MANIFEST_BYTES"


#: The largest single object (a document, or one item of a List): the API server takes no
#: request over 3 MiB, so no object of a cluster is larger. Checked on the span the reader
#: reports, before the object goes anywhere slower (the ruamel path reads ~2 MB/s).
#: ``PYCLASSIFY_MAX_OBJECT_BYTES`` sets it.
DEFAULT_MAX_OBJECT_BYTES = 3 * 1024 * 1024
MAX_OBJECT_ENV = "PYCLASSIFY_MAX_OBJECT_BYTES"


def _bound(env: str, default: int) -> int:
    text = os.environ.get(env)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        return default
    return value if value > 0 else default


def max_manifest_bytes() -> int:
    return _bound(MAX_MANIFEST_ENV, DEFAULT_MAX_MANIFEST_BYTES)


def max_object_bytes() -> int:
    return _bound(MAX_OBJECT_ENV, DEFAULT_MAX_OBJECT_BYTES)


def _object_too_large(data: bytes, file: str, span: Span | None, problems: Problems, limit: int) -> bool:
    """Whether the object at ``span`` is over ``limit`` bytes (reported as an error if so)."""
    if span is None:
        return False
    start, end, line, _ = span
    size = (end or len(data)) - start
    if size <= limit:
        return False
    problems.add(
        Problem(
            file,
            line,
            "",
            f"object of {size} bytes is larger than the limit of {limit} bytes "
            f"(the API server takes at most 3 MiB; set {MAX_OBJECT_ENV} to "
            "raise it); not read",
        )
    )
    return True


def _too_large(name: str, size: int, limit: int, more_than: bool = False) -> Problem:
    """``more_than``: only the first ``size`` bytes were read (a stream or a device): the input
    is at least that large, not exactly."""
    what = f"more than {limit} bytes" if more_than else f"{size} bytes"
    return Problem(
        name,
        0,
        "",
        f"manifest of {what} is larger than the limit of {limit} bytes (set {MAX_MANIFEST_ENV} to raise it); not read",
    )


#: What a path that is not a regular file is, as a message says it.
_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def special_file(mode: int) -> str | None:
    """What a file of this mode is when it is not a regular file or a directory (a FIFO, a
    socket, a device), else None. Such a file is never opened for reading: a FIFO nobody writes
    blocks its reader for ever, a device may never end."""
    for test, what in _SPECIAL:
        if test(mode):
            return what
    return None


def _skipped(name: str, what: str) -> Problem:
    return Problem(
        name,
        0,
        "",
        f"{what}, not a regular file: skipped, never read (manifests are regular files; give - to read standard input)",
        "warning",
    )


def read_bounded(f: Any, size: int, chunk: int = 1 << 20) -> Any:
    """At most ``size`` bytes (or characters) of ``f``, read in chunks: no buffer of ``size``
    is allocated up front for what is usually a small input."""
    parts = []
    got = 0
    while got < size:
        part = f.read(min(chunk, size - got))
        if not part:
            break
        parts.append(part)
        got += len(part)
    if not parts:
        return f.read(0)  # b"" or "", as the stream gives
    return parts[0][:0].join(parts)


def _missing(path: str) -> str:
    """Why ``path``, which does not resolve to anything, cannot be read: a link loop and a
    dangling link say so (``no such file or directory`` would send one looking for a file)."""
    try:
        os.stat(path)
    except OSError as exc:
        if os.path.islink(path):
            if exc.errno == errno.ELOOP:
                return "symbolic link loop (too many levels of symbolic links): not read"
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            return f"dangling link (to {target}): nothing to read"
        if exc.errno == errno.ELOOP:
            return "symbolic link loop in the path (too many levels of symbolic links): not read"
        if exc.errno not in (errno.ENOENT, None):
            return f"cannot read: {(exc.strerror or str(exc)).lower()}"
    return "no such file or directory"


# Python's own wording for an integer too long to convert, which the manifest reader passes on.
_INT_DIGITS = re.compile(
    r"Exceeds the limit \((\d+) digits\) for integer string conversion(?:: value has (\d+) digits)?"
)


def _readable(message: str) -> str:
    """A reader's message in the user's terms (not the interpreter's)."""
    m = _INT_DIGITS.search(message)
    if m is not None:
        digits = f"{m.group(2)} digits" if m.group(2) else f"more than {m.group(1)} digits"
        return f"a number of {digits} is too large to read (Kubernetes numbers are 64-bit)"
    return message


class ParseCache:
    """The documents of files read before, for a reader that reads the same paths again and
    again (``pyclassify enforce`` on every change): a file is read again unless its device, inode,
    size, modification and change times are those it had when read, and it had not been modified
    for ``settle`` seconds then (file times are coarse: a file rewritten in place within one
    clock tick may keep its size and times; one that had settled has none of that doubt). A file
    with errors is not kept."""

    def __init__(self, settle: float = 1.0) -> None:
        self.settle_ns = int(settle * 1e9)
        self._files: dict[str, tuple[tuple[int, ...], list[Document], list[Problem], dict[int, Any]]] = {}
        self._seen: set[str] = set()
        #: files the last pass read (not from the cache)
        self.read: list[str] = []

    def begin(self) -> None:
        self._seen, self.read = set(), []

    def memo(self, name: str) -> dict[int, Any]:
        """A place for what a reader derives from the documents of file ``name``, by ``id`` of
        the document: it lives as long as those document objects stay cached (a file read
        again gets an empty one)."""
        hit = self._files.get(name)
        return hit[3] if hit is not None else {}

    def forget(self, names: Iterable[str]) -> None:
        """Read these files again next time (what was read from them was not taken)."""
        for name in names:
            self._files.pop(name, None)

    def end(self) -> None:
        """Forget the files the pass since ``begin`` did not see (deleted, moved away)."""
        for name in [n for n in self._files if n not in self._seen]:
            del self._files[name]

    def documents(self, file: Path, problems: Problems) -> Iterator[Document]:
        name = str(file)
        self._seen.add(name)
        try:
            st = os.stat(file)
            sig: tuple[int, ...] | None = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            sig = None
        hit = self._files.get(name)
        if sig is not None and hit is not None and hit[0] == sig:
            for p in hit[2]:
                problems.add(p)
            yield from hit[1]
            return
        self.read.append(name)
        own = Problems()
        docs = list(iter_file(file, own))
        for p in own:
            problems.add(p)
        settled = sig is not None and time.time_ns() - sig[3] >= self.settle_ns
        if settled and sig is not None and not own.errors:
            self._files[name] = (sig, docs, list(own), {})
        else:
            self._files.pop(name, None)
        yield from docs


def iter_paths(paths: Iterable[str], problems: Problems, cache: ParseCache | None = None) -> Iterator[Document]:
    """Every document of every path (files, directories recursively, ``-`` for stdin), one at
    a time. A path that holds no document at all (an empty directory, a file of comments) is
    warned about and listed in ``problems.empty_inputs``. With ``cache``, files unchanged since
    an earlier pass are not read again (``ParseCache``)."""
    read: dict[tuple[int, int], str] = {}  # files read, by device and inode: each read once
    for path in paths:
        found = 0
        errors_before = len(problems.errors)
        not_objects_before = problems.not_objects
        if path == STDIN:
            limit = max_manifest_bytes()
            buffer = getattr(sys.stdin, "buffer", None)
            data = read_bounded(buffer if buffer is not None else sys.stdin, limit + 1)
            if len(data) > limit:
                problems.add(_too_large(STDIN_NAME, len(data), limit, more_than=True))
                continue
            docs = (
                iter_bytes(data, STDIN_NAME, problems)
                if isinstance(data, bytes)
                else iter_text(data, STDIN_NAME, problems)
            )
            for doc in docs:
                found += 1
                yield doc
        else:
            p = Path(path)
            if p.is_dir():
                files: Iterable[Path] = manifest_files(p, problems)
            elif p.exists():
                files = [p]
            else:
                problems.add(Problem(str(path), 0, "", _missing(str(path))))
                continue
            for file in files:
                try:
                    st = os.stat(file)
                    key: tuple[int, int] | None = (st.st_dev, st.st_ino)
                except OSError:
                    key = None  # iter_file says why it cannot be read
                first = read.get(key) if key is not None else None
                if first is not None:
                    # named twice, named and inside a directory named, or through a link
                    what = "file already read" if first == str(file) else f"file already read as {first}"
                    problems.add(Problem(str(file), 0, "", f"{what}: not read again", "warning"))
                    found += 1
                    continue
                if key is not None:
                    read[key] = str(file)
                for doc in iter_file(file, problems) if cache is None else cache.documents(file, problems):
                    found += 1
                    yield doc
        if not found and len(problems.errors) == errors_before:
            name = STDIN_NAME if path == STDIN else str(path)
            what = "no manifest files (.yaml, .yml, .json)" if path != STDIN and Path(path).is_dir() else "no documents"
            if problems.not_objects > not_objects_before:
                what = "no Kubernetes object"
            problems.add(Problem(name, 0, "", f"{what} found: nothing to read here", "warning"))
            problems.empty_inputs.append(name)


def load_paths(paths: Iterable[str], problems: Problems) -> list[Document]:
    return list(iter_paths(paths, problems))


def manifest_files(root: Path, problems: Problems | None = None) -> list[Path]:
    """The manifest files under ``root``, recursively, in a stable order (sorted by path parts;
    hidden files and directories such as ``.git`` are not manifests). Links to directories are
    followed, each directory read once (a link back to a directory above is a loop, warned
    about and not followed again); a dangling link is skipped with a warning."""
    found: list[Path] = []
    seen: dict[tuple[int, int], str] = {}

    def warn(path: str, message: str) -> None:
        if problems is not None:
            problems.add(Problem(path, 0, "", message, "warning"))

    def unreadable(exc: OSError) -> None:
        # A directory that cannot be listed may hold manifests: an error, not a silent skip.
        if problems is not None:
            where = exc.filename if exc.filename is not None else str(root)
            problems.add(Problem(str(where), 0, "", f"cannot read directory: {(exc.strerror or str(exc)).lower()}"))

    try:
        st = os.stat(root)
        seen[(st.st_dev, st.st_ino)] = str(root)
    except OSError:
        pass
    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable, followlinks=True):
        keep = []
        for d in sorted(dirnames):
            if d.startswith("."):
                continue
            full = os.path.join(dirpath, d)
            try:
                st = os.stat(full)
            except OSError:
                continue
            first = seen.get((st.st_dev, st.st_ino))
            if first is not None:
                warn(full, f"directory already read as {first} (a link loop or a second link): not read again")
                continue
            seen[(st.st_dev, st.st_ino)] = full
            keep.append(d)
        dirnames[:] = keep
        for name in filenames:
            if name.startswith("."):
                continue
            full = os.path.join(dirpath, name)
            if os.path.islink(full) and not os.path.exists(full):
                warn(full, f"dangling link (to {os.readlink(full)}): skipped")
                continue
            if name.lower().endswith(MANIFEST_SUFFIXES):
                try:
                    what = special_file(os.stat(full).st_mode)
                except OSError:
                    what = None  # gone since it was listed: reading it says so
                if what is not None:
                    if problems is not None:
                        problems.add(_skipped(full, what))
                    continue
                found.append(Path(full))
    return sorted(found, key=lambda f: f.relative_to(root).parts)


def iter_file(path: Path, problems: Problems) -> Iterator[Document]:
    """The documents of one regular file. Anything else (a FIFO, a socket, a device) is
    skipped with a warning: it is opened without blocking (a FIFO nobody writes would block an
    ordinary open for ever) only to find what it is, and never read."""
    name = str(path)
    limit = max_manifest_bytes()
    try:
        what = special_file(os.stat(path).st_mode)  # a socket cannot even be opened to ask
        if what is not None:
            problems.add(_skipped(name, what))
            return
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        problems.add(Problem(name, 0, "", f"cannot read: {exc.strerror or exc}"))
        return
    try:
        st = os.fstat(fd)
        what = special_file(st.st_mode)
        if what is not None or not stat.S_ISREG(st.st_mode):
            problems.add(_skipped(name, what or "not a file"))
            return
        if st.st_size > limit:
            problems.add(_too_large(name, st.st_size, limit))
            return
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = read_bounded(f, limit + 1)
        if len(data) > limit:  # grew while read
            problems.add(_too_large(name, len(data), limit, more_than=True))
            return
    except OSError as exc:
        problems.add(Problem(name, 0, "", f"cannot read: {exc.strerror or exc}"))
        return
    finally:
        os.close(fd)
    yield from iter_bytes(data, name, problems)


def load_file(path: Path, problems: Problems) -> list[Document]:
    return list(iter_file(path, problems))


def iter_text(text: str, file: str, problems: Problems) -> Iterator[Document]:
    """The documents of one file's text (YAML or JSON)."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates
        problems.add(Problem(file, text[: exc.start].count("\n") + 1, "", "not UTF-8 text"))
        return
    yield from iter_bytes(data, file, problems)


def load_text(text: str, file: str, problems: Problems) -> list[Document]:
    return list(iter_text(text, file, problems))


def iter_bytes(data: bytes, file: str, problems: Problems) -> Iterator[Document]:
    """The documents of one file's bytes (UTF-8 YAML or JSON, a byte order mark skipped)."""
    reader = ManifestReader(data)
    syntax = reader.syntax
    limit = max_object_bytes()
    streamed: Document | None = None  # the List whose items are coming, if its type is valid
    streamed_region: Span = (0, 0, 1, 0)
    for record in reader:
        what = record[0]
        if what == "item":
            _, item, index, line, span = record
            if streamed is not None and not _object_too_large(data, file, span, problems, limit):
                positions = _Positions(data, syntax, span, streamed_region, index)
                yield from _list_item(streamed, item, index, line, positions, problems)
        elif what == "document":
            _, root, line, region = record
            if _object_too_large(data, file, region, problems, limit):
                continue
            yield from _documents(root, file, line, problems, _Positions(data, syntax, region))
        elif what == "list":
            _, kind, api_version, line, streamed_region = record
            header: dict[str, Any] = {"kind": kind}
            if api_version is not None:
                header["apiVersion"] = api_version
            lst = Document(header, file, line, positions=_Positions(data, syntax, streamed_region))
            streamed = lst if _has_type(lst, problems) else None
        elif what == "fallback":
            _, line, region, index, span = record
            if _object_too_large(data, file, region if index is None else span, problems, limit):
                continue
            yield from _fallback(data, file, line, region, index, span, streamed, problems)
        else:  # "problem"
            _, line, message = record
            problems.add(Problem(file, line, "", _readable(message)))


class _Positions:
    """The lines of one document or List item, recovered from its span of the file's bytes
    when first asked for (``Document.lines``). If the item cannot be read alone (an alias to an
    anchor outside it), its whole List document is read for it."""

    __slots__ = ("data", "syntax", "span", "region", "item")

    def __init__(self, data: bytes, syntax: str, span: Span, region: Span | None = None, item: int | None = None):
        self.data, self.syntax, self.span, self.region, self.item = data, syntax, span, region, item

    def __call__(self) -> dict[FieldPath, int]:
        try:
            return manifest_lines(self.data, self.syntax, *self.span)
        except ManifestError:
            if self.region is None:
                return {}
        start, _, line, col = self.region
        try:
            return manifest_lines(self.data, self.syntax, start, 0, line, col, self.item)
        except ManifestError:
            return {}


def _fallback(
    data: bytes,
    file: str,
    line: int,
    region: Span,
    index: int | None,
    span: Span | None,
    streamed: Document | None,
    problems: Problems,
) -> Iterator[Document]:
    """A document, or one item of a streamed List, that only ruamel reads."""
    if index is None:
        parsed = _ruamel_first(data, region, file, problems)
        if parsed is not None:
            root, lines = parsed
            yield from _documents(root, file, lines.get((), line), problems, lines=lines)
        return
    if streamed is None or span is None:
        return
    parsed = _ruamel_first(data, span, file, problems, quiet=True)
    if parsed is None:  # not readable alone: read its whole List document
        whole = _ruamel_first(data, (region[0], 0, region[2], region[3]), file, problems)
        if whole is None:
            return
        root, lines = whole
        prefix = ("items", index)
        parsed = (root["items"][index], {p[2:]: n for p, n in lines.items() if p[:2] == prefix})
    item, lines = parsed
    yield from _list_item(streamed, item, index, lines.get((), line), lambda: lines, problems)


def _ruamel_first(
    data: bytes, span: Span, file: str, problems: Problems, quiet: bool = False
) -> tuple[Any, dict[FieldPath, int]] | None:
    start, end, line, col = span
    text = " " * col + data[start : end or len(data)].decode("utf-8")
    try:
        for parsed in loader_ruamel.parse_yaml(text, line):
            return parsed
        return None, {}
    except loader_ruamel.MarkedYAMLError as exc:
        if not quiet:
            problems.add(
                Problem(file, loader_ruamel.yaml_error_line(exc, line), "", loader_ruamel.yaml_error_message(exc))
            )
    except loader_ruamel.YAMLError as exc:
        if not quiet:
            problems.add(Problem(file, line, "", f"invalid YAML: {exc}"))
    except (loader_ruamel.TooLarge, RecursionError):
        if not quiet:
            problems.add(Problem(file, line, "", TOO_LARGE))
    except Exception as exc:  # ruamel crashes on some invalid input (IndexError, AttributeError...)
        if not quiet:
            problems.add(Problem(file, line, "", _readable(f"invalid YAML: {type(exc).__name__}: {exc}")))
    return None


def documents_of(obj: Any, file: str, problems: Problems) -> list[Document]:
    """Documents of an object already decoded (a Kubernetes watch event, a test case's manifest):
    Lists are expanded as in files; no line numbers are known, so everything is at line 1."""
    return list(_documents(copy.deepcopy(obj), file, 1, problems, lines={}))


def _documents(
    root: Any,
    file: str,
    line: int,
    problems: Problems,
    positions: Any = None,
    lines: dict[FieldPath, int] | None = None,
) -> Iterator[Document]:
    if root is None:
        return  # an empty document (a lone ---) is not an object
    if not isinstance(root, dict):
        problems.add(Problem(file, line, "", f"a manifest must be a mapping, not {_type_name(root)}"))
        return
    if not _object_like(root):
        problems.not_objects += 1
        problems.add(
            Problem(
                file, line, "", f"not a Kubernetes object (no kind, no metadata: {NOT_AN_OBJECT}): skipped", "warning"
            )
        )
        return
    doc = Document(root, file, line, lines, positions=positions)
    if not _has_type(doc, problems):
        return
    if doc.kind.endswith("List") and "items" in root:
        if isinstance(root["items"], list):
            schema.check(doc, problems)  # the List's own fields; its items are documents of their own
        yield from _list_items(doc, problems)
    else:
        yield doc


#: What a mapping without kind or metadata usually is, beside manifests.
NOT_AN_OBJECT = "a Helm values file, a chart's Chart.yaml, a tool's configuration"


def _object_like(root: dict[Any, Any]) -> bool:
    """Whether a mapping means to be a Kubernetes object: every object has a kind and metadata,
    so one with neither (in any spelling: ``Kind:``, ``Metadata:`` are mistakes to report) is
    another file that lives beside manifests, skipped with a warning."""
    return any(isinstance(k, str) and k.lower() in ("kind", "metadata") for k in root)


def _has_type(doc: Document, problems: Problems) -> bool:
    ok = True
    for field in ("apiVersion", "kind"):
        value = doc.obj.get(field)
        if not value:
            problems.error(doc, (), f"{field} is required")
            ok = False
        elif not isinstance(value, str):
            problems.error(doc, (field,), f"{field} must be a string")
            ok = False
    return ok


def _list_items(lst: Document, problems: Problems) -> Iterator[Document]:
    """The items of a ``kind: List`` or typed ``FooList`` document read whole (a List inside a
    List, one read by ruamel, one decoded elsewhere); the lines of all items are split once."""
    items = lst.obj["items"]
    if items is None:
        return
    if not isinstance(items, list):
        problems.error(lst, ("items",), f"items must be a list, not {_type_name(items)}")
        return
    by_item: dict[int, dict[FieldPath, int]] = {}
    for path, n in lst.lines.items():
        if len(path) >= 2 and path[0] == "items" and isinstance(path[1], int):
            by_item.setdefault(path[1], {})[path[2:]] = n
    for i, item in enumerate(items):
        sub_lines = by_item.get(i, {})
        line = sub_lines.get((), lst.line_of(("items", i)))
        yield from _list_item(lst, item, i, line, lambda lines=sub_lines: lines, problems)


def _list_item(
    lst: Document, item: Any, index: int, line: int, positions: Any, problems: Problems
) -> Iterator[Document]:
    """One item of a List as a document of its own.

    Items of a typed list may omit ``kind`` and ``apiVersion`` (kubectl prints them without):
    they are the list's item kind in the list's API version. Items of ``kind: List`` must say.
    """
    path: FieldPath = ("items", index)
    if not isinstance(item, dict):
        problems.add(
            Problem(lst.file, line, format_path(path), f"a list item must be a mapping, not {_type_name(item)}")
        )
        return
    item_kind = lst.kind[: -len("List")]
    if item_kind:
        item.setdefault("kind", item_kind)
        item.setdefault("apiVersion", lst.api_version)
    doc = Document(item, lst.file, line, base=lst.base + path, positions=positions)
    if not _has_type(doc, problems):
        return
    if doc.kind.endswith("List") and "items" in item:
        yield from _list_items(doc, problems)  # a List inside a List: still objects
    else:
        yield doc


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return type(value).__name__
