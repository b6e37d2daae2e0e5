"""A bad-input sweep of the whole command line, as one table.

Every case runs the real CLI as a user does (``python -m pyclassify ...`` in a subprocess, its
working directory a temporary directory of generated inputs) under a time bound, and holds it
to: the expected exit code; a specific fragment of its message (the file, the line, what is
wrong: one line a person can act on); no traceback, Rust panic or crash by signal; no hang (a
``TimeoutExpired`` fails the case as "hang"); and output of bounded size, without the raw
control bytes (NUL, ESC, a bidi override) a hostile input carries.

Inputs cover every command (check, explain, matrix, diff, replay, render, selector, admit,
admission-webhook, monitor, enforce, report): YAML/JSON syntax errors, empty files and directories,
binary garbage, files of 50-300 MB, symlink loops and dangling links, unreadable paths,
non-UTF-8 bytes in labels and file names, labels that are not strings, hostile selectors (1 MiB,
10,000 parentheses, 100,000 ``!``, NUL bytes), pcap and pcapng captures cut at every structural
boundary or with corrupt lengths, magics, versions, link types and snap lengths, output files
that cannot be written.

``CASES`` is the table (``Case``: id, command, input, code, fragment; ``CASE_TABLE`` the same as
plain tuples), ``OBSERVED`` what each case did in this run (id -> outcome), ``table()`` both
together; with ``PYCLASSIFY_BAD_INPUT_TABLE=FILE`` (``.json`` or Markdown) the module writes the
table there when it ends.

``enforce`` cases are only those that fail before touching the kernel (argument checks, the
first load of the policy), run in a fresh network namespace when this runs as root, and with
``--duration``: should one ever get further, it changes nothing outside that namespace and ends.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "examples" / "demo")
ADMISSION = REPO / "examples" / "admission"
POLICIES = str(ADMISSION / "policies")
POD = str(ADMISSION / "resources" / "pod-pass.yaml")
PCAP = REPO / "pcaps" / "demo.pcap"
PCAPNG = REPO / "pcaps" / "demo.pcapng"

TIMEOUT = 60.0  # seconds: past it, a case "hangs"
MAX_OUTPUT = 100_000  # bytes of stdout+stderr: a hostile input is not echoed whole
FORBIDDEN = ("Traceback", "panicked", "RUST_BACKTRACE", "Segmentation fault")
RAW_BYTES = ("\x00", "\x1b", "\u202e")  # what a hostile input carries and a message must escape

IS_ROOT = os.geteuid() == 0
NETNS = ["unshare", "--net"] if IS_ROOT and shutil.which("unshare") else []
NOBODY = 65534
SETPRIV = (
    ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all"]
    if IS_ROOT and shutil.which("setpriv")
    else []
)

# Sizes of the generated large inputs (written once per session, see ``inputs``).
HUGE_DOCS = 110_000  # ConfigMaps of 8 lines, ~500 bytes each: ~55 MB of YAML
HUGE_ERROR_LINE = 8 * HUGE_DOCS + 5  # an unclosed flow mapping after them: the reader stops at the end
HUGE_LINE_HEAD = '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k": "'
HUGE_LINE_BYTES = len(HUGE_LINE_HEAD) + 60_000_000 + 3  # one JSON line of a 60 MB string
SPARSE_BYTES = 300 * 1024 * 1024  # over the 256 MiB manifest limit, without using the disk
HUGE_PCAP_COPIES = 7_000  # copies of demo.pcap's 48 records: ~49 MB, 336,000 packets

# Hostile command-line arguments. One argument is at most 128 KiB (MAX_ARG_STRLEN): a 1 MiB
# selector goes through a manifest instead (check-selector-1mib).
ARG_100K = "x" * 100_000
SELECTOR_120K = 'a == "' + "x" * 120_000 + '"'
SELECTOR_PARENS = "(" * 10_000 + "has(a)" + ")" * 10_000
SELECTOR_OPEN_PARENS = "(" * 10_000 + "has(a)"
SELECTOR_BANGS = "!" * 100_000 + "has(a)"
SELECTOR_ANDS = " && ".join(f"has(k{i})" for i in range(8_000))  # 108 kB
NON_UTF8 = os.fsdecode(b"front\xffend/web")  # a command-line byte that is not UTF-8


@dataclass(frozen=True)
class Case:
    """One row of the table. ``args`` are relative to the inputs directory (the working
    directory); ``fragment`` must appear in ``stream`` ("stderr", "stdout" or "any"); a tuple
    of fragments must all appear; ``None``: no output at all."""

    id: str
    command: str
    input: str  # what is wrong with the input, for the table
    code: int
    fragment: str | tuple[str, ...] | None
    args: tuple[str, ...] = field(default=(), repr=False)
    stream: str = "stderr"
    stdin: str | None = None  # an input file (or device) read as stdin
    stdin_pipe: bool = False  # stdin through a pipe, not the file itself
    stdout_to: str | None = None  # stdout to this file (not captured), e.g. /dev/full
    env: tuple[tuple[str, str], ...] = ()
    runner: str = ""  # "netns", "nobody", "netns+nobody"
    timeout: float = TIMEOUT
    max_output: int = MAX_OUTPUT
    mem_limit: int | None = None  # RLIMIT_AS of the process, bytes

    @property
    def fragments(self) -> tuple[str, ...]:
        if self.fragment is None:
            return ()
        return (self.fragment,) if isinstance(self.fragment, str) else self.fragment

    @property
    def fragment_text(self) -> str:
        return " ... ".join(self.fragments) if self.fragment is not None else "(no output)"


def case(
    id: str,
    command: str,
    input: str,
    code: int,
    fragment: str | tuple[str, ...] | None,
    *args: str,
    xfail: str | None = None,
    **kw: Any,
) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
    return pytest.param(Case(id, command, input, code, fragment, tuple(args), **kw), id=id, marks=marks)


def enforce(id: str, input: str, code: int, fragment: str | tuple[str, ...], *args: str, **kw: Any) -> Any:
    """An ``enforce`` case: in a network namespace of its own (as root), bounded by --duration."""
    kw.setdefault("runner", "netns")
    return case(id, "enforce", input, code, fragment, *args, "--duration", "5", **kw)


def webhook(id: str, input: str, code: int, fragment: str | tuple[str, ...], *args: str, **kw: Any) -> Any:
    """An ``admission-webhook`` case: it must exit, not serve (a short bound says "hang" sooner)."""
    return case(id, "admission-webhook", input, code, fragment, *args, timeout=20.0, **kw)


def replay(id: str, input: str, code: int, fragment: str | tuple[str, ...], pcap: str, *args: str, **kw: Any) -> Any:
    kw.setdefault("stream", "any")
    return case(id, "replay", input, code, fragment, DEMO, "--pcap", pcap, *args, **kw)


def traffic(id: str, input: str, code: int, fragment: str | tuple[str, ...], path: str, *args: str, **kw: Any) -> Any:
    kw.setdefault("stream", "any")
    return case(id, "replay", input, code, fragment, DEMO, "--traffic", path, *args, **kw)


TRUNCATED = "capture ends inside a record"
LENGTH = "pcapng block length out of range or not a multiple of 4"
TRAILER = "pcapng block's trailing length differs from its leading length"
OUT_OF_RANGE = "record length out of range (corrupt capture)"
UNREADABLE = "could not be read as a capture"

CASES = [
    # --- check: syntax, emptiness, encodings ------------------------------------------------
    case(
        "check-yaml-syntax-error",
        "check",
        "YAML: unclosed flow mapping",
        1,
        "syn.yaml:4: invalid YAML: while parsing a flow mapping",
        "syn.yaml",
    ),
    case(
        "check-json-syntax-error",
        "check",
        "JSON: double comma",
        1,
        "syn.json:1: invalid JSON: Expecting property name",
        "syn.json",
    ),
    case(
        "check-json-truncated", "check", "JSON cut before its last brace", 1, "trunc.json:1: invalid JSON", "trunc.json"
    ),
    case(
        "check-yaml-tab-indent",
        "check",
        "YAML indented with a tab",
        1,
        "tabs.yaml:4: invalid YAML: tabs disallowed",
        "tabs.yaml",
    ),
    case(
        "check-yaml-duplicate-key",
        "check",
        "YAML mapping with `kind` twice",
        1,
        'dupkeys.yaml:3: invalid YAML: found duplicate key "kind"',
        "dupkeys.yaml",
    ),
    case(
        "check-empty-file",
        "check",
        "empty file",
        1,
        "warning: empty.yaml: no documents found: nothing to read here",
        "empty.yaml",
    ),
    case(
        "check-million-empty-documents",
        "check",
        "1,000,000 lines of `---` (4 MB, no document)",
        1,
        "manydocs.yaml: no documents found",
        "manydocs.yaml",
    ),
    case(
        "check-empty-directory",
        "check",
        "empty directory",
        1,
        "emptydir: no manifest files (.yaml, .yml, .json) found",
        "emptydir",
    ),
    case(
        "check-binary-garbage",
        "check",
        "4 KiB of random bytes (NULs included) as .yaml",
        1,
        "garbage.yaml:1: not UTF-8 text",
        "garbage.yaml",
    ),
    case(
        "check-nul-bytes",
        "check",
        "4 KiB of NUL bytes as .yaml",
        1,
        "nuls.yaml:1: invalid YAML: found unprintable character",
        "nuls.yaml",
    ),
    case(
        "check-raw-nul-in-yaml",
        "check",
        "a raw NUL byte inside a YAML line",
        1,
        "rawnul.yaml:2: invalid YAML: found unprintable character",
        "rawnul.yaml",
    ),
    case("check-utf16-file", "check", "manifest in UTF-16 (with BOM)", 1, "utf16.yaml:1: not UTF-8 text", "utf16.yaml"),
    case(
        "check-latin1-label-value",
        "check",
        "Latin-1 byte (0xE9) in a YAML label value",
        1,
        "latin1.yaml:7: not UTF-8 text",
        "latin1.yaml",
    ),
    case(
        "check-latin1-label-value-json",
        "check",
        "Latin-1 byte (0xE9) in a JSON label value",
        1,
        "latin1.json:1: not UTF-8 text",
        "latin1.json",
    ),
    case(
        "check-latin1-name",
        "check",
        "bytes 0xFF 0xFE in metadata.name",
        1,
        "latin1name.yaml:4: not UTF-8 text",
        "latin1name.yaml",
    ),
    case(
        "check-lone-surrogate-label",
        "check",
        "JSON \\ud800 escape (lone surrogate) as a label value",
        1,
        "surrogate.json:1: metadata.labels.app: invalid label value",
        "surrogate.json",
    ),
    case(
        "check-label-values-not-strings",
        "check",
        "label values 5, [a, b], {a: 1}, true",
        1,
        (
            "labelnum.yaml:7: metadata.labels.app: Invalid value: 5: must be of type string, not integer (quote it)",
            "labelnum.yaml:8: metadata.labels.tier: must be of type string, not array",
            "labelnum.yaml:11: metadata.labels.z: Invalid value: true: must be of type string, not boolean (quote it)",
        ),
        "labelnum.yaml",
    ),
    case(
        "check-label-keys-not-strings",
        "check",
        "label keys 5, null, [a, b], {a: 1} (complex keys)",
        1,
        (
            "labelkeys.yaml:7: metadata.labels[5]: label key 5 must be a string",
            "labelkeys.yaml:8: metadata.labels[None]: label key None must be a string",
            "labelkeys.yaml:9: metadata.labels.[a, b]: invalid label key '[a, b]'",
            "labelkeys.yaml:11: metadata.labels.{a: 1}: invalid label key '{a: 1}'",
        ),
        "labelkeys.yaml",
    ),
    case(
        "check-label-key-newline-and-bidi",
        "check",
        "label keys with a newline and U+202E",
        1,
        (
            "labelnl.yaml:7: metadata.labels['bad\\nkey']: invalid label key 'bad\\nkey'",
            "labelnl.yaml:8: metadata.labels['k\\u202e']: invalid label key",
        ),
        "labelnl.yaml",
    ),
    case(
        "check-label-nul-and-control-bytes",
        "check",
        "label value \\x00\\x01 and key with a NUL",
        1,
        (
            "labelctl.yaml:7: metadata.labels.app: invalid label value '\\x00\\x01'",
            "labelctl.yaml:8: metadata.labels['bad key\\x00']: invalid label key",
        ),
        "labelctl.yaml",
    ),
    case(
        "check-labels-not-a-mapping",
        "check",
        "metadata.labels is a string",
        1,
        "labelstr.yaml:6: metadata.labels: Invalid value: 'notamap': must be of type object, not string",
        "labelstr.yaml",
    ),
    case(
        "check-hep-interface-name",
        "check",
        "HostEndpoint interfaceName with a space and an iptables flag",
        1,
        "hepif.yaml:6: spec.interfaceName: 'eth0 -j ACCEPT' is not an interface name",
        "hepif.yaml",
    ),
    case(
        "check-document-is-a-string",
        "check",
        "a document that is a plain string",
        1,
        "scalar.yaml:1: a manifest must be a mapping, not a string",
        "scalar.yaml",
    ),
    case(
        "check-document-is-a-list",
        "check",
        "a document that is a sequence",
        1,
        "list.yaml:1: a manifest must be a mapping, not a list",
        "list.yaml",
    ),
    case(
        "check-kind-not-a-string", "check", "kind: 5", 1, "kindnum.yaml:2: kind: kind must be a string", "kindnum.yaml"
    ),
    case("check-kind-missing", "check", "no kind", 1, "nokind.yaml:1: kind is required", "nokind.yaml"),
    case(
        "check-list-items-not-a-list",
        "check",
        "kind: List with items: 5",
        1,
        "kindlist.yaml:3: items: items must be a list, not a number",
        "kindlist.yaml",
    ),
    case(
        "check-integer-5000-digits",
        "check",
        "containerPort of 5000 digits",
        1,
        "bigint.yaml:4: a number of 5000 digits is too large to read",
        "bigint.yaml",
    ),
    case(
        "check-yaml-nested-100000-deep",
        "check",
        "100,000 nested YAML flow sequences",
        1,
        "deepyaml.yaml:1: invalid YAML: recursion limit exceeded",
        "deepyaml.yaml",
    ),
    case(
        "check-json-nested-100000-deep",
        "check",
        "100,000 nested JSON arrays",
        1,
        "deepjson.json:1: document too large, nested too deeply",
        "deepjson.json",
    ),
    case(
        "check-yaml-mappings-3000-deep",
        "check",
        "3,000 nested block mappings",
        1,
        "deepmap.yaml:257: document too large, nested too deeply",
        "deepmap.yaml",
    ),
    case(
        "check-alias-inside-its-anchor",
        "check",
        "metadata: &m {self: *m}",
        1,
        "aliasloop.yaml:3: document too large, nested too deeply or recursive (an alias inside its own anchor)",
        "aliasloop.yaml",
    ),
    case(
        "check-billion-laughs",
        "check",
        "9 levels of 9 aliases (not expanded)",
        0,
        "valid, 0 warnings",
        "laughs.yaml",
        stream="stdout",
    ),
    case(
        "check-compiled-past-memory-bound",
        "check",
        "a GlobalNetworkPolicy of 12,000 rules, each its own CIDR and port range (compiled form past the bound)",
        0,
        "not compiled: the ingress policies of 1 endpoint(s) (default/p) would compile to",
        "compileblowup.json",
    ),
    # --- check: size ---------------------------------------------------------------------------
    case(
        "check-huge-yaml-error-at-end",
        "check",
        f"{HUGE_DOCS:,} ConfigMaps (~55 MB), then a syntax error",
        1,
        (f"hugebad.yaml:{HUGE_ERROR_LINE}: invalid YAML", f"{HUGE_DOCS} documents"),
        "hugebad.yaml",
        stream="any",
    ),
    case(
        "check-huge-single-line",
        "check",
        "one 60 MB JSON line",
        1,
        f"hugeline.json:1: object of {HUGE_LINE_BYTES} bytes is larger than the limit of 3145728 bytes",
        "hugeline.json",
    ),
    case(
        "check-file-over-limit",
        "check",
        "300 MiB (sparse) file",
        1,
        "sparse.yaml: manifest of 314572800 bytes is larger than the limit of 268435456 bytes",
        "sparse.yaml",
    ),
    case(
        "check-dev-zero",
        "check",
        "/dev/zero (a device: no size, no end) as PATH",
        1,
        "/dev/zero: a character device, not a regular file: skipped, never read",
        "/dev/zero",
    ),
    case(
        "check-fifo-in-a-directory",
        "check",
        "a FIFO nobody writes, named like a manifest, beside a good one",
        0,
        ("fifodir/policy.yaml: a FIFO, not a regular file: skipped, never read", "valid"),
        "fifodir",
        stream="any",
    ),
    case(
        "check-fifo-as-path",
        "check",
        "a FIFO nobody writes as PATH",
        1,
        "fifodir/policy.yaml: a FIFO, not a regular file: skipped, never read",
        "fifodir/policy.yaml",
    ),
    case(
        "check-stdin-over-limit",
        "check",
        "stdin larger than PYCLASSIFY_MAX_MANIFEST_BYTES",
        1,
        "<stdin>: manifest of more than 100 bytes is larger than the limit of 100 bytes",
        "-",
        stdin="labelnum.yaml",
        env=(("PYCLASSIFY_MAX_MANIFEST_BYTES", "100"),),
    ),
    # --- check: paths ---------------------------------------------------------------------------
    case(
        "check-stdin-binary",
        "check",
        "binary garbage on stdin",
        1,
        "<stdin>:1: not UTF-8 text",
        "-",
        stdin="garbage.yaml",
    ),
    case(
        "check-stdin-empty", "check", "empty stdin", 1, "warning: <stdin>: no documents found", "-", stdin="/dev/null"
    ),
    case(
        "check-stdin-latin1",
        "check",
        "Latin-1 label value on stdin",
        1,
        "<stdin>:7: not UTF-8 text",
        "-",
        stdin="latin1.yaml",
    ),
    case(
        "check-symlink-loop",
        "check",
        "PATH a -> b -> a",
        1,
        "loopa: symbolic link loop (too many levels of symbolic links)",
        "loopa",
    ),
    case(
        "check-dangling-symlink",
        "check",
        "PATH a link to nothing",
        1,
        "dangling.yaml: dangling link (to nowhere.yaml)",
        "dangling.yaml",
    ),
    case(
        "check-directory-link-loop",
        "check",
        "directory holding a link to its parent",
        1,
        ("dirloop/sub/up: directory already read as dirloop", "dirloop: no manifest files"),
        "dirloop",
    ),
    case(
        "check-directory-of-dangling-links",
        "check",
        "directory whose only file is a dangling link",
        1,
        ("danglingdir/gone.yaml: dangling link (to nowhere.yaml): skipped", "danglingdir: no manifest files"),
        "danglingdir",
    ),
    case(
        "check-missing-path",
        "check",
        "PATH that does not exist",
        1,
        "nonexist.yaml: no such file or directory",
        "nonexist.yaml",
    ),
    case(
        "check-path-through-a-file",
        "check",
        "PATH file/child",
        1,
        "garbage.yaml/x.yaml: cannot read: not a directory",
        "garbage.yaml/x.yaml",
    ),
    case(
        "check-non-utf8-file-name",
        "check",
        "directory holding bad\\xff.yaml (invalid)",
        1,
        "nonutf8dir/bad\\udcff.yaml:4: invalid YAML",
        "nonutf8dir",
    ),
    case(
        "check-newline-in-file-name",
        "check",
        "directory holding 'a\\nb.yaml' (invalid)",
        1,
        "nldir/a\\nb.yaml:4: invalid YAML",
        "nldir",
    ),
    case(
        "check-file-named-twice",
        "check",
        "a file named, inside a directory named, and linked to",
        0,
        ("twicedir/same.yaml: file already read as twicedir/ns.yaml", "twicedir/ns.yaml: file already read", "valid"),
        "twicedir",
        "twicedir/ns.yaml",
        stream="any",
    ),
    case(
        "check-helm-values-beside-manifests",
        "check",
        "a directory holding values.yaml and Chart.yaml beside a manifest",
        0,
        ("valuesdir/values.yaml:1: not a Kubernetes object", "not a Kubernetes object (no kind, no metadata) x2"),
        "valuesdir",
        stream="any",
    ),
    case(
        "check-helm-values-only",
        "check",
        "a directory holding only a values.yaml",
        1,
        ("valuesonly/values.yaml:1: not a Kubernetes object", "valuesonly: no Kubernetes object found"),
        "valuesonly",
    ),
    case(
        "check-unreadable-file",
        "check",
        "file with mode 000 (run as nobody)",
        2,
        "Path 'secret.yaml' is not readable",
        "secret.yaml",
        runner="nobody",
    ),
    case(
        "check-unreadable-directory",
        "check",
        "directory with mode 000 (run as nobody)",
        2,
        "Path 'locked' is not readable",
        "locked",
        runner="nobody",
    ),
    case(
        "check-unreadable-subdirectory",
        "check",
        "readable directory holding one with mode 000 (as nobody)",
        1,
        "outer/locked: cannot read directory: permission denied",
        "outer",
        runner="nobody",
    ),
    # --- check: hostile selectors in manifests -------------------------------------------------
    case(
        "check-selector-1mib",
        "check",
        "spec.selector of 1 MiB + 7 bytes",
        1,
        ("sel1m.json:1: spec.selector: invalid selector", "selector longer than 1048576 bytes"),
        "sel1m.json",
    ),
    case(
        "check-selector-1mib-of-terms",
        "check",
        "spec.selector of 70,000 || terms (~1 MB, valid)",
        0,
        "valid, 0 warnings",
        "selterms.json",
        stream="stdout",
    ),
    case(
        "check-selector-10000-parens",
        "check",
        "spec.selector nested 10,000 parentheses deep",
        1,
        ("seldeep.json:1: spec.selector: invalid selector", "selector nests deeper than 128 levels"),
        "seldeep.json",
    ),
    case(
        "check-selector-100000-bangs",
        "check",
        "spec.selector of 100,000 '!'",
        1,
        ("selbang.json:1: spec.selector: invalid selector", "selector nests deeper than 128 levels"),
        "selbang.json",
    ),
    case(
        "check-selector-nul-in-label-name",
        "check",
        "spec.selector has(a\\0b)",
        1,
        "selnul.json:1: spec.selector: invalid selector 'has(a\\x00b)'",
        "selnul.json",
    ),
    case(
        "check-selector-nul-in-string",
        "check",
        "spec.selector a == 'x\\0y' (a NUL in a literal)",
        0,
        "valid, 0 warnings",
        "selnul2.json",
        stream="stdout",
    ),
    # --- check: kubeconfig, output ---------------------------------------------------------------
    case(
        "check-kubeconfig-binary",
        "check",
        "--kubeconfig of binary garbage",
        2,
        "cannot read the cluster: kubeconfig garbage.yaml: not UTF-8 text",
        "--kubeconfig",
        "garbage.yaml",
    ),
    case(
        "check-kubeconfig-missing",
        "check",
        "--kubeconfig that does not exist",
        2,
        "cannot read the cluster: kubeconfig nonexist.yaml: no such file",
        "--kubeconfig",
        "nonexist.yaml",
    ),
    case(
        "check-kubeconfig-yaml-syntax",
        "check",
        "--kubeconfig with a YAML syntax error",
        2,
        "cannot read the cluster: kubeconfig syn.yaml: while parsing a flow mapping",
        "--kubeconfig",
        "syn.yaml",
    ),
    case(
        "check-kubeconfig-empty",
        "check",
        "--kubeconfig of an empty file",
        2,
        "cannot read the cluster: kubeconfig empty.yaml",
        "--kubeconfig",
        "empty.yaml",
    ),
    case(
        "check-stdout-full",
        "check",
        "stdout on /dev/full",
        1,
        "error: cannot write the output (stdout): No space left on device",
        DEMO,
        stdout_to="/dev/full",
    ),
    # --- explain ---------------------------------------------------------------------------------
    case(
        "explain-yaml-syntax-error",
        "explain",
        "YAML syntax error",
        1,
        ("syn.yaml:4: invalid YAML", "1 error: fix the manifests"),
        "syn.yaml",
        "--from",
        "10.0.0.1",
        "--to",
        "10.0.0.2",
    ),
    case(
        "explain-binary-garbage",
        "explain",
        "binary garbage",
        1,
        "garbage.yaml:1: not UTF-8 text",
        "garbage.yaml",
        "--from",
        "10.0.0.1",
        "--to",
        "10.0.0.2",
    ),
    case(
        "explain-empty-directory",
        "explain",
        "empty directory",
        1,
        "emptydir: no manifest files",
        "emptydir",
        "--from",
        "10.0.0.1",
        "--to",
        "10.0.0.2",
    ),
    case(
        "explain-symlink-loop",
        "explain",
        "PATH a -> b -> a",
        1,
        "loopa: symbolic link loop",
        "loopa",
        "--from",
        "10.0.0.1",
        "--to",
        "10.0.0.2",
    ),
    case(
        "explain-stdin-latin1",
        "explain",
        "Latin-1 label value on stdin",
        1,
        "<stdin>:7: not UTF-8 text",
        "-",
        "--from",
        "10.0.0.1",
        "--to",
        "10.0.0.2",
        stdin="latin1.yaml",
    ),
    case(
        "explain-ipv6-to-ipv4-only-pod",
        "explain",
        "--from an IPv6 address to a pod with IPv4 only",
        2,
        "'app/web' has no IPv6 address of its own",
        "lifecycle.yaml",
        "--from",
        "fd00::1",
        "--to",
        "app/web",
    ),
    case(
        "explain-pods-share-no-family",
        "explain",
        "--from an IPv6-only pod to an IPv4-only pod",
        2,
        "'app/v6' (fd00::6) and 'app/web' (10.1.0.3) share no address family",
        "lifecycle.yaml",
        "--from",
        "app/v6",
        "--to",
        "app/web",
    ),
    case(
        "explain-addresses-of-two-families",
        "explain",
        "--from an IPv4 address --to an IPv6 address",
        2,
        "'10.1.0.3' is IPv4 and 'fd00::2' is IPv6: a flow keeps one address family",
        "lifecycle.yaml",
        "--from",
        "10.1.0.3",
        "--to",
        "fd00::2",
    ),
    case(
        "explain-finished-pod",
        "explain",
        "--from a pod whose phase is Succeeded",
        2,
        "'app/job' is a pod that holds no address (phase Succeeded",
        "lifecycle.yaml",
        "--from",
        "app/job",
        "--to",
        "app/web",
    ),
    case(
        "explain-compiled-past-memory-bound",
        "explain",
        "a GlobalNetworkPolicy of 12,000 rules, each its own CIDR and port range (decided by walking its rules)",
        0,
        "allow",
        "compileblowup.json",
        "--from",
        "100.64.0.3",
        "--to",
        "default/p",
        "--proto",
        "TCP",
        "--port",
        "1054",
        stream="stdout",
    ),
    case(
        "explain-huge-single-line",
        "explain",
        "one 60 MB JSON line",
        1,
        f"hugeline.json:1: object of {HUGE_LINE_BYTES} bytes is larger than the limit",
        "hugeline.json",
        "--from",
        "10.0.0.1",
        "--to",
        "10.0.0.2",
    ),
    case(
        "explain-unknown-field",
        "explain",
        "a NetworkPolicy with `spce:`",
        1,
        ("spce.yaml:4: spce: unknown field 'spce' (did you mean 'spec'?)", "1 error: fix the manifests"),
        DEMO,
        "spce.yaml",
        "--from",
        "10.0.0.1",
        "--to",
        "10.0.0.2",
    ),
    case(
        "explain-resolve-not-name-ip",
        "explain",
        "--resolve without NAME=",
        2,
        "Invalid value for --resolve: 'api.example.com' is not NAME=ADDRESS",
        DEMO,
        "--from",
        "10.0.1.10",
        "--to",
        "10.0.2.20",
        "--resolve",
        "api.example.com",
    ),
    case(
        "explain-resolve-bad-address",
        "explain",
        "--resolve with an address that is none",
        2,
        "Invalid value for --resolve: 'a.com=999.1.1.1': '999.1.1.1' is not an IP address",
        DEMO,
        "--from",
        "10.0.1.10",
        "--to",
        "10.0.2.20",
        "--resolve",
        "a.com=999.1.1.1",
    ),
    case(
        "explain-pre-dnat-not-to-a-host",
        "explain",
        "--pre-dnat with --to a pod",
        2,
        "Invalid value for --pre-dnat: --to must be a host endpoint",
        DEMO,
        "--from",
        "10.0.1.10",
        "--to",
        "10.0.2.20",
        "--pre-dnat",
        "10.0.2.20:80",
    ),
    case(
        "explain-pre-dnat-garbage",
        "explain",
        "--pre-dnat that is no address",
        2,
        "Invalid value for --pre-dnat: 'node:port' is not ADDRESS[:PORT]",
        DEMO,
        "--from",
        "10.0.1.10",
        "--to",
        "node1-eth0",
        "--pre-dnat",
        "node:port",
    ),
    case(
        "check-unknown-field-spec",
        "check",
        "a NetworkPolicy with `spce:` (its spec misspelt)",
        1,
        "spce.yaml:4: spce: unknown field 'spce' (did you mean 'spec'?)",
        "spce.yaml",
    ),
    case(
        "check-unknown-field-capitalised",
        "check",
        "a GlobalNetworkPolicy with `Metadata:` and `Spec:`",
        1,
        (
            "capitalised.yaml:3: Metadata: unknown field 'Metadata' (did you mean 'metadata'?)",
            "capitalised.yaml:5: Spec: unknown field 'Spec' (did you mean 'spec'?)",
        ),
        "capitalised.yaml",
    ),
    case(
        "check-unknown-fields-metadata-port-status",
        "check",
        "a Pod with metadata.lables, ports[].nmae, status.podIPz",
        1,
        (
            "typos.yaml:6: metadata.lables: unknown field 'lables' (did you mean 'labels'?)",
            "typos.yaml:11: spec.containers[0].ports[0].nmae: unknown field 'nmae' (did you mean 'name'?)",
            "typos.yaml:13: status.podIPz: unknown field 'podIPz' (did you mean 'podIP'?)",
        ),
        "typos.yaml",
    ),
    case(
        "check-networkpolicy-port-quoted-number",
        "check",
        'a NetworkPolicy port "8080" (a string)',
        1,
        "quotedport.yaml:7: spec.ingress[0].ports[0].port: Invalid value: '8080': must contain at least one letter (a-z)",
        "quotedport.yaml",
    ),
    case(
        "check-container-port-a-string",
        "check",
        'containerPort: "8080" (a string)',
        1,
        "portstring.yaml:7: spec.containers[0].ports[0].containerPort: Invalid value: '8080': must be of type integer, "
        "not string",
        "portstring.yaml",
    ),
    case(
        "check-unknown-field-calico-rule",
        "check",
        "a Calico rule with `sourec:`",
        1,
        "gnptypo.yaml:7: spec.ingress[0].sourec: unknown field 'sourec' (did you mean 'source'?)",
        "gnptypo.yaml",
    ),
    case(
        "check-unknown-field-anp-port",
        "check",
        "an AdminNetworkPolicy portNumber with `protocl:`",
        1,
        "anptypo.yaml:8: spec.ingress[0].ports[0].portNumber.protocl: unknown field 'protocl' (did you mean 'protocol'?)",
        "anptypo.yaml",
    ),
    case(
        "check-unknown-field-list",
        "check",
        "a `kind: List` with `itmes:`",
        1,
        "listtypo.yaml:3: itmes: unknown field 'itmes' (did you mean 'items'?)",
        "listtypo.yaml",
    ),
    case(
        "check-unknown-version-of-a-kind",
        "check",
        "batch/v1beta1 Job (CronJob only was batch/v1beta1)",
        1,
        "jobv1beta1.yaml:1: apiVersion: unknown version 'batch/v1beta1' of Job: this tool reads batch/v1",
        "jobv1beta1.yaml",
    ),
    case(
        "check-service-port-names-dns-labels",
        "check",
        "Service and EndpointSlice port names 8001-8000, https-metrics-endpoint (valid)",
        0,
        "valid, 0 warnings",
        "svcports.yaml",
        stream="stdout",
    ),
    case(
        "check-staged-bad-action",
        "check",
        "a StagedNetworkPolicy with stagedAction: Sett",
        1,
        "staged.yaml:6: spec.stagedAction: Unsupported value: 'Sett'",
        "staged.yaml",
    ),
    case(
        "replay-dns-malformed-answer",
        "replay",
        "a DNS answer cut short inside its record",
        0,
        "dns: 4 answers taught 3 name-address facts (1 truncated: learned nothing)",
        DEMO,
        str(REPO / "examples" / "domains"),
        "--pcap",
        str(REPO / "pcaps" / "domains.pcap"),
        stream="stdout",
    ),
    case(
        "explain-request-no-path",
        "explain",
        "--request without a path",
        2,
        "Invalid value for --request: 'GET': want METHOD /PATH [HOST]",
        DEMO,
        str(REPO / "examples" / "http"),
        "--from",
        "frontend/web",
        "--to",
        "backend/api",
        "--port",
        "8080",
        "--request",
        "GET",
    ),
    case(
        "explain-request-udp",
        "explain",
        "--request with --proto UDP",
        2,
        "--request needs --proto TCP, not UDP",
        DEMO,
        "--from",
        "frontend/web",
        "--to",
        "backend/api",
        "--proto",
        "UDP",
        "--request",
        "GET /",
    ),
    case(
        "explain-in-via-a-pod",
        "explain",
        "--in-via naming a pod",
        2,
        "Invalid value for --in-via: 'backend/api' is not a host endpoint",
        DEMO,
        "--from",
        "203.0.113.9",
        "--to",
        "frontend/web",
        "--port",
        "8080",
        "--in-via",
        "backend/api",
    ),
    case(
        "replay-http-not-http",
        "replay",
        "a TLS ClientHello where an HTTP request is awaited",
        0,
        "1  deny  the HTTP request stream cannot be judged (not_http)",
        DEMO,
        str(REPO / "examples" / "http"),
        "--pcap",
        str(REPO / "pcaps" / "http.pcap"),
        stream="stdout",
    ),
    case(
        "explain-from-100kb",
        "explain",
        "--from of 100,000 characters",
        2,
        ("Invalid value for --from: 'xxxxxxxx", "(100000 characters) is not a pod"),
        DEMO,
        "--from",
        ARG_100K,
        "--to",
        "frontend/web",
        "--port",
        "80",
    ),
    case(
        "explain-from-non-utf8",
        "explain",
        "--from with byte 0xFF",
        2,
        "Invalid value for '--from': not valid UTF-8 text: '\\udcff' at position 5",
        DEMO,
        "--from",
        NON_UTF8,
        "--to",
        "backend/api",
    ),
    case(
        "explain-to-unknown",
        "explain",
        "--to naming no endpoint",
        2,
        "Invalid value for --to: 'nowhere/x' is not a pod",
        DEMO,
        "--from",
        "frontend/web",
        "--to",
        "nowhere/x",
    ),
    case(
        "explain-proto-999",
        "explain",
        "--proto 999",
        2,
        "Invalid value for --proto: protocol number 999 is outside 0-255",
        DEMO,
        "--from",
        "frontend/web",
        "--to",
        "backend/api",
        "--proto",
        "999",
    ),
    case(
        "explain-port-70000",
        "explain",
        "--port 70000",
        2,
        "70000 is not in the range 0<=x<=65535",
        DEMO,
        "--from",
        "frontend/web",
        "--to",
        "backend/api",
        "--port",
        "70000",
    ),
    case(
        "explain-port-with-icmp",
        "explain",
        "--proto ICMP --port 80",
        2,
        "--port needs a protocol with ports (TCP, UDP, SCTP or UDPLite), not ICMP",
        DEMO,
        "--from",
        "frontend/web",
        "--to",
        "backend/api",
        "--proto",
        "ICMP",
        "--port",
        "80",
    ),
    # --- matrix ----------------------------------------------------------------------------------
    case("matrix-json-syntax-error", "matrix", "JSON syntax error", 1, "syn.json:1: invalid JSON", "syn.json"),
    case("matrix-empty-file", "matrix", "empty file", 1, "empty.yaml: no documents found", "empty.yaml"),
    case(
        "matrix-label-value-not-string",
        "matrix",
        "label value 5",
        1,
        "labelnum.yaml:7: metadata.labels.app: Invalid value: 5: must be of type string, not integer (quote it)",
        "labelnum.yaml",
    ),
    case(
        "matrix-unknown-field",
        "matrix",
        "a NetworkPolicy with `spce:`",
        1,
        ("spce.yaml:4: spce: unknown field 'spce' (did you mean 'spec'?)", "1 error: fix the manifests"),
        DEMO,
        "spce.yaml",
    ),
    case(
        "matrix-file-over-limit",
        "matrix",
        "300 MiB (sparse) file",
        1,
        "sparse.yaml: manifest of 314572800 bytes is larger than the limit",
        "sparse.yaml",
    ),
    case(
        "matrix-proto-100kb",
        "matrix",
        "--proto of 100,000 characters",
        2,
        ("Invalid value for --proto: unknown protocol 'xxxxxxxx", "(100000 characters)"),
        DEMO,
        "--proto",
        ARG_100K,
    ),
    case(
        "matrix-port-any-with-reference",
        "matrix",
        "--port any --engine reference",
        2,
        "--engine reference judges one port",
        DEMO,
        "--port",
        "any",
        "--engine",
        "reference",
    ),
    case(
        "matrix-selector-unclosed",
        "matrix",
        "--selector with an unclosed set",
        2,
        "Invalid value for '--selector': at position 8",
        DEMO,
        "--selector",
        "app in {",
    ),
    case(
        "matrix-output-unknown",
        "matrix",
        "--output pdf",
        2,
        "Invalid value for '--output': 'pdf' is not one of",
        DEMO,
        "--output",
        "pdf",
    ),
    # --- report ----------------------------------------------------------------------------------
    case("report-json-syntax-error", "report", "JSON syntax error", 1, "syn.json:1: invalid JSON", "syn.json"),
    case(
        "report-against-and-apply",
        "report",
        "--against NEW and --apply FILE both",
        2,
        "--against NEW... (a whole policy set) or --apply FILE",
        DEMO,
        "--against",
        DEMO,
        "--apply",
        str(REPO / "examples" / "changes" / "db-behind-pgbouncer.yaml"),
    ),
    case("report-out-is-a-directory", "report", "-o a directory", 2, "is a directory", DEMO, "-o", "."),
    # --- diff ------------------------------------------------------------------------------------
    case(
        "diff-no-new-side",
        "diff",
        "OLD only, neither --against nor --apply",
        2,
        "--against NEW... (a whole policy set) or --apply FILE",
        DEMO,
    ),
    case(
        "diff-new-side-syntax-error",
        "diff",
        "NEW: JSON syntax error",
        1,
        "syn.json:1: invalid JSON",
        DEMO,
        "--against",
        "syn.json",
    ),
    case(
        "diff-apply-invalid-policy",
        "diff",
        "--apply: a label value 5 (an inventory object)",
        1,
        "labelnum.yaml:7: metadata.labels.app: Invalid value: 5: must be of type string, not integer (quote it)",
        DEMO,
        "--apply",
        "labelnum.yaml",
    ),
    case(
        "diff-apply-unknown-field",
        "diff",
        "--apply: a NetworkPolicy with `spce:`",
        1,
        "spce.yaml:4: spce: unknown field 'spce' (did you mean 'spec'?)",
        DEMO,
        "--apply",
        "spce.yaml",
    ),
    case(
        "diff-apply-empty-file",
        "diff",
        "--apply: empty file",
        1,
        "empty.yaml: no documents found",
        DEMO,
        "--apply",
        "empty.yaml",
    ),
    case(
        "diff-apply-file-over-limit",
        "diff",
        "--apply: 300 MiB (sparse) file",
        1,
        "sparse.yaml: manifest of 314572800 bytes is larger than the limit",
        DEMO,
        "--apply",
        "sparse.yaml",
    ),
    case(
        "diff-unknown-option",
        "diff",
        "an option diff does not have",
        2,
        "no such option: --port",
        DEMO,
        "--port",
        "80",
        "--against",
        DEMO,
    ),
    # --- render ----------------------------------------------------------------------------------
    case(
        "render-binary-garbage",
        "render",
        "binary garbage",
        1,
        "garbage.yaml:1: not UTF-8 text",
        "garbage.yaml",
        "--endpoint",
        "a/b",
    ),
    case(
        "render-unknown-field",
        "render",
        "a NetworkPolicy with `spce:`",
        1,
        "spce.yaml:4: spce: unknown field 'spce' (did you mean 'spec'?)",
        DEMO,
        "spce.yaml",
        "--endpoint",
        "frontend/web",
    ),
    case(
        "render-dangling-symlink",
        "render",
        "PATH a link to nothing",
        1,
        "dangling.yaml: dangling link",
        "dangling.yaml",
        "--endpoint",
        "a/b",
    ),
    case(
        "render-selector-10000-parens",
        "render",
        "policy selector nested 10,000 deep",
        1,
        "seldeep.json:1: spec.selector: invalid selector",
        "seldeep.json",
        "--endpoint",
        "a/b",
    ),
    case(
        "render-endpoint-100kb",
        "render",
        "--endpoint of 100,000 characters",
        2,
        ("Invalid value for --endpoint: no endpoint 'xxxxxxxx", "(100000 characters) in the manifests"),
        DEMO,
        "--endpoint",
        ARG_100K,
    ),
    case(
        "render-endpoint-non-utf8",
        "render",
        "--endpoint with byte 0xFF",
        2,
        "Invalid value for '--endpoint': not valid UTF-8 text",
        DEMO,
        "--endpoint",
        NON_UTF8,
    ),
    case(
        "render-endpoint-unknown",
        "render",
        "--endpoint naming nothing",
        2,
        "Invalid value for --endpoint: no endpoint 'nowhere/x' in the manifests",
        DEMO,
        "--endpoint",
        "nowhere/x",
    ),
    # --- selector --------------------------------------------------------------------------------
    case(
        "selector-120kib-literal",
        "selector",
        'a == "x..." of 120 KiB (the largest argument)',
        0,
        'a == "xxxxxxxx',
        SELECTOR_120K,
        stream="stdout",
        max_output=200_000,
    ),
    case(
        "selector-8000-terms",
        "selector",
        "8,000 has() joined by && (108 kB)",
        0,
        "(has(k0) && has(k1)",
        SELECTOR_ANDS,
        stream="stdout",
        max_output=200_000,
    ),
    case(
        "selector-10000-parens",
        "selector",
        "has(a) in 10,000 parentheses",
        1,
        "error: selector: selector nests deeper than 128 levels (at position 128)",
        SELECTOR_PARENS,
    ),
    case(
        "selector-10000-unclosed-parens",
        "selector",
        "10,000 '(' never closed",
        1,
        "error: selector: selector nests deeper than 128 levels (at position 128)",
        SELECTOR_OPEN_PARENS,
    ),
    case(
        "selector-100000-bangs",
        "selector",
        "'!' repeated 100,000 times",
        1,
        "error: selector: selector nests deeper than 128 levels (at position 128)",
        SELECTOR_BANGS,
    ),
    case(
        "selector-label-100kb",
        "selector",
        "a label name of 100,000 characters",
        1,
        "error: selector: label longer than 512 characters (at position 0)",
        ARG_100K,
    ),
    case(
        "selector-control-byte",
        "selector",
        "has(a) followed by \\x01",
        1,
        "error: selector: unexpected character '\\u{1}' (at position 6)",
        "has(a)\x01",
    ),
    case(
        "selector-escape-sequence",
        "selector",
        "has(a) followed by ESC [2J (clear screen)",
        1,
        ("error: selector: unexpected character '\\u{1b}' (at position 6)", "  has(a)\\x1b[2J"),
        "has(a)\x1b[2J",
    ),
    case(
        "selector-unterminated-string",
        "selector",
        "a == 'x",
        1,
        "error: selector: unterminated string literal (at position 5)",
        "a == 'x",
    ),
    case(
        "selector-non-utf8",
        "selector",
        "byte 0xE9 in EXPR",
        2,
        "Invalid value for 'EXPR': not valid UTF-8 text: '\\udce9' at position 6",
        os.fsdecode(b'a == "\xe9"'),
    ),
    case(
        "selector-labels-non-utf8",
        "selector",
        "byte 0xFF in --labels",
        2,
        "Invalid value for '--labels': not valid UTF-8 text",
        "has(a)",
        "--labels",
        os.fsdecode(b"a=\xff"),
    ),
    case(
        "selector-labels-key-twice",
        "selector",
        "--labels a=b,a=c",
        2,
        "label 'a' is given twice (a=b and a=c)",
        "has(a)",
        "--labels",
        "a=b,a=c",
    ),
    case(
        "selector-labels-no-key",
        "selector",
        "--labels =v",
        2,
        "label '=v' is not key=value",
        "has(a)",
        "--labels",
        "=v",
    ),
    # --- replay: classic pcap ------------------------------------------------------------------
    replay(
        "replay-pcap-empty-file",
        "0-byte file",
        1,
        "p_empty.pcap: empty file, not a pcap or pcapng capture",
        "p_empty.pcap",
    ),
    replay(
        "replay-pcap-magic-only",
        "the 4-byte magic alone",
        1,
        "p_magic.pcap: truncated pcap file header (24 bytes expected)",
        "p_magic.pcap",
    ),
    replay(
        "replay-pcap-truncated-in-global-header",
        "cut at byte 10 of the 24-byte file header",
        1,
        "p_in_ghdr.pcap: truncated pcap file header (24 bytes expected)",
        "p_in_ghdr.pcap",
    ),
    replay(
        "replay-pcap-zero-records",
        "the file header alone (0 records)",
        0,
        "0 packets in 0 flows",
        "p_ghdr_only.pcap",
        stream="stdout",
    ),
    replay(
        "replay-pcap-truncated-in-record-header",
        "cut 8 bytes into the first record header",
        1,
        (f"p_in_rhdr.pcap: offset 24: {TRUNCATED} (8 of 16 bytes)", f"p_in_rhdr.pcap: {UNREADABLE}"),
        "p_in_rhdr.pcap",
    ),
    replay(
        "replay-pcap-truncated-after-record-header",
        "cut right after the first record header",
        1,
        (f"p_after_rhdr.pcap: offset 24: {TRUNCATED} (16 of 105 bytes)", UNREADABLE),
        "p_after_rhdr.pcap",
    ),
    replay(
        "replay-pcap-truncated-in-record-body",
        "cut 40 bytes into the first packet",
        1,
        (f"p_in_body.pcap: offset 24: {TRUNCATED} (56 of 105 bytes)", UNREADABLE),
        "p_in_body.pcap",
    ),
    replay(
        "replay-pcap-truncated-in-second-record-header",
        "one whole record, then 5 bytes of the next header",
        0,
        ("1 packet in 1 flow", f"p_in_2nd_rhdr.pcap: offset 129: {TRUNCATED} (5 of 16 bytes)"),
        "p_in_2nd_rhdr.pcap",
        stream="stdout",
    ),
    replay(
        "replay-pcap-truncated-in-last-record-body",
        "the last packet 10 bytes short",
        0,
        ("47 packets in 15 flows", f"p_in_last_body.pcap: offset 6766: {TRUNCATED} (248 of 258 bytes)"),
        "p_in_last_body.pcap",
        stream="stdout",
    ),
    replay(
        "replay-pcap-wrong-magic",
        "magic 0xdeadbeef",
        1,
        "p_bad_magic.pcap: not a pcap or pcapng capture: unknown magic 0xefbeadde",
        "p_bad_magic.pcap",
    ),
    replay(
        "replay-pcap-version-3",
        "pcap version 3.0",
        1,
        "p_version3.pcap: offset 4: pcap version 3.0 is not one this reader knows (2.4)",
        "p_version3.pcap",
    ),
    replay(
        "replay-pcap-unknown-linktype",
        "link type 147 (USER0)",
        1,
        "p_linktype_147.pcap: offset 20: link type 147 cannot be decoded",
        "p_linktype_147.pcap",
    ),
    replay(
        "replay-pcap-linktype-all-ones",
        "link type field 0xFFFFFFFF",
        1,
        "p_linktype_ffff.pcap: offset 20: link type 65535 cannot be decoded",
        "p_linktype_ffff.pcap",
    ),
    replay(
        "replay-pcap-snaplen-0xffffffff",
        "snaplen 0xFFFFFFFF, records intact",
        0,
        "48 packets in 15 flows",
        "p_snap_ffff.pcap",
        stream="stdout",
    ),
    replay(
        "replay-pcap-snaplen-0",
        "snaplen 0, records intact",
        0,
        "48 packets in 15 flows",
        "p_snap_0.pcap",
        stream="stdout",
    ),
    replay(
        "replay-pcap-caplen-above-snaplen",
        "a 70,000-byte record under snaplen 65,535",
        0,
        "48 packets in 15 flows",
        "p_caplen_gt_snap.pcap",
        stream="stdout",
    ),
    replay(
        "replay-pcap-caplen-above-origlen",
        "caplen 89 > original length 10",
        0,
        "48 packets in 15 flows",
        "p_caplen_gt_orig.pcap",
        stream="stdout",
    ),
    replay(
        "replay-tunnel-gre-erspan",
        "a GRE packet carrying ERSPAN (0x88be)",
        0,
        (
            "1 denied as not judged (inside a tunnel that could not be read)",
            "tunnels: gre packets not judged: 1 tunnel_unsupported",
        ),
        "t_gre_erspan.pcap",
        stream="stdout",
    ),
    replay(
        "replay-tunnel-vxlan-inner-cut",
        "a VXLAN packet cut by the snap length inside the pod's TCP header",
        0,
        "tunnels: vxlan packets not judged: 1 truncated_l4",
        "t_vxlan_cut.pcap",
        stream="stdout",
    ),
    replay(
        "replay-tunnel-nested-too-deep",
        "IPv4 in IPv4 four times over",
        0,
        "tunnels: ipip packets not judged: 1 tunnel_too_deep",
        "t_ipip_deep.pcap",
        stream="stdout",
    ),
    replay(
        "replay-vxlan-port-0",
        "--vxlan-port 0",
        2,
        "Invalid value for '--vxlan-port': 0 is not in the range",
        "t_gre_erspan.pcap",
        "--vxlan-port",
        "0",
    ),
    replay(
        "replay-vxlan-port-nine-times",
        "--vxlan-port given nine times",
        2,
        "at most 8 VXLAN ports, not 9",
        "t_gre_erspan.pcap",
        *[a for p in range(9) for a in ("--vxlan-port", str(5000 + p))],
    ),
    replay(
        "replay-vxlan-port-is-geneve-port",
        "--vxlan-port 6081 (Geneve's)",
        2,
        "port 6081 given for both VXLAN and Geneve",
        "t_gre_erspan.pcap",
        "--vxlan-port",
        "6081",
    ),
    replay(
        "replay-no-decap-with-ports",
        "--no-decap with --vxlan-port",
        2,
        "--no-decap opens no tunnel",
        "t_gre_erspan.pcap",
        "--no-decap",
        "--vxlan-port",
        "4789",
    ),
    replay(
        "replay-pcap-caplen-1gib",
        "first record claims 1 GiB",
        1,
        (f"p_caplen_1g.pcap: offset 24: {OUT_OF_RANGE}", UNREADABLE),
        "p_caplen_1g.pcap",
    ),
    replay(
        "replay-pcap-caplen-0xffffffff",
        "first record claims 0xFFFFFFFF bytes",
        1,
        (f"p_caplen_ffff.pcap: offset 24: {OUT_OF_RANGE}", UNREADABLE),
        "p_caplen_ffff.pcap",
    ),
    replay(
        "replay-pcap-snaplen-max-caplen-1gib",
        "snaplen 0xFFFFFFFF and a record of 1 GiB",
        1,
        (f"p_snapmax_caplen1g.pcap: offset 24: {OUT_OF_RANGE}", UNREADABLE),
        "p_snapmax_caplen1g.pcap",
    ),
    replay(
        "replay-pcap-microseconds-overflow",
        "timestamp fraction 0xFFFFFFFF us",
        0,
        "48 packets in 15 flows",
        "p_usec_overflow.pcap",
        stream="stdout",
    ),
    replay(
        "replay-pcap-header-then-garbage",
        "valid file header, then 4 KiB of random bytes",
        1,
        (f"p_header_garbage.pcap: offset 24: {OUT_OF_RANGE}", UNREADABLE),
        "p_header_garbage.pcap",
    ),
    replay(
        "replay-pcap-1000-empty-records",
        "1,000 records of 0 bytes",
        0,
        ("1000 packets in 0 flows", "decode: 1000 packets truncated_link"),
        "p_zero_len.pcap",
        stream="stdout",
    ),
    replay(
        "replay-pcap-binary-garbage",
        "4 KiB of random bytes",
        1,
        "p_garbage.pcap: not a pcap or pcapng capture: unknown magic",
        "p_garbage.pcap",
    ),
    replay(
        "replay-pcap-nul-bytes",
        "4 KiB of NUL bytes",
        1,
        "p_nuls.pcap: not a pcap or pcapng capture: unknown magic 0x00000000",
        "p_nuls.pcap",
    ),
    replay(
        "replay-pcap-is-yaml",
        "a YAML file as --pcap",
        1,
        "syn.yaml: not a pcap or pcapng capture: unknown magic",
        "syn.yaml",
    ),
    replay(
        "replay-pcap-huge-truncated-at-end",
        f"{HUGE_PCAP_COPIES * 48:,} packets (~49 MB), last record cut",
        0,
        (
            f"{HUGE_PCAP_COPIES * 48} packets in 15 flows",
            f"huge.pcap: offset {24 + HUGE_PCAP_COPIES * 7000}: {TRUNCATED} (20 of 105 bytes)",
        ),
        "huge.pcap",
        stream="stdout",
    ),
    # --- replay: pcapng ------------------------------------------------------------------------
    replay(
        "replay-pcapng-truncated-in-shb-header",
        "cut 8 bytes into the section header block",
        1,
        (f"n_in_shb_hdr.pcapng: offset 0: {TRUNCATED} (8 of 12 bytes)", UNREADABLE),
        "n_in_shb_hdr.pcapng",
    ),
    replay(
        "replay-pcapng-truncated-in-shb-body",
        "cut 20 bytes into the 28-byte section header block",
        1,
        (f"n_in_shb.pcapng: offset 0: {TRUNCATED} (20 of 28 bytes)", UNREADABLE),
        "n_in_shb.pcapng",
    ),
    replay(
        "replay-pcapng-shb-only",
        "a section header block alone",
        0,
        "0 packets in 0 flows",
        "n_shb_only.pcapng",
        stream="stdout",
    ),
    replay(
        "replay-pcapng-truncated-in-idb-header",
        "cut 10 bytes into the first interface block",
        1,
        (f"n_in_idb_hdr.pcapng: offset 28: {TRUNCATED} (10 of 12 bytes)", UNREADABLE),
        "n_in_idb_hdr.pcapng",
    ),
    replay(
        "replay-pcapng-truncated-in-idb-body",
        "cut 16 bytes into the 20-byte interface block",
        1,
        (f"n_in_idb.pcapng: offset 28: {TRUNCATED} (16 of 20 bytes)", UNREADABLE),
        "n_in_idb.pcapng",
    ),
    replay(
        "replay-pcapng-interfaces-no-packets",
        "section and interface blocks, no packet",
        0,
        "0 packets in 0 flows",
        "n_after_idbs.pcapng",
        stream="stdout",
    ),
    replay(
        "replay-pcapng-truncated-in-epb-header",
        "cut 6 bytes into the first packet block",
        1,
        (f"n_in_epb_hdr.pcapng: offset 84: {TRUNCATED} (6 of 12 bytes)", UNREADABLE),
        "n_in_epb_hdr.pcapng",
    ),
    replay(
        "replay-pcapng-truncated-in-epb-body",
        "cut 50 bytes into the first packet block",
        1,
        (f"n_in_epb.pcapng: offset 84: {TRUNCATED} (50 of 92 bytes)", UNREADABLE),
        "n_in_epb.pcapng",
    ),
    replay(
        "replay-pcapng-truncated-in-last-epb",
        "the last packet block 6 bytes short",
        0,
        ("17 packets in 8 flows", f"n_in_last_epb.pcapng: offset 3404: {TRUNCATED} (1270 of 1276 bytes)"),
        "n_in_last_epb.pcapng",
        stream="stdout",
    ),
    replay(
        "replay-pcapng-block-length-not-multiple-of-4",
        "packet block length 93",
        1,
        (f"n_len_not4.pcapng: offset 84: {LENGTH}", UNREADABLE),
        "n_len_not4.pcapng",
    ),
    replay(
        "replay-pcapng-block-length-huge",
        "packet block length 0xFFFFFFF0",
        1,
        (f"n_len_huge.pcapng: offset 84: {LENGTH}", UNREADABLE),
        "n_len_huge.pcapng",
    ),
    replay(
        "replay-pcapng-block-length-0",
        "packet block length 0",
        1,
        (f"n_len_0.pcapng: offset 84: {LENGTH}", UNREADABLE),
        "n_len_0.pcapng",
    ),
    replay(
        "replay-pcapng-block-length-8",
        "packet block length 8 (under the 12-byte minimum)",
        1,
        (f"n_len_8.pcapng: offset 84: {LENGTH}", UNREADABLE),
        "n_len_8.pcapng",
    ),
    replay(
        "replay-pcapng-block-length-12",
        "packet block length 12 (no body)",
        1,
        (f"n_len_12.pcapng: offset 84: {TRAILER}", UNREADABLE),
        "n_len_12.pcapng",
    ),
    replay(
        "replay-pcapng-block-trailer-mismatch",
        "leading and trailing block lengths differ",
        1,
        (f"n_trailer.pcapng: offset 84: {TRAILER}", UNREADABLE),
        "n_trailer.pcapng",
    ),
    replay(
        "replay-pcapng-shb-length-0",
        "section header block length 0",
        1,
        (f"n_shb_len_0.pcapng: offset 0: {LENGTH}", UNREADABLE),
        "n_shb_len_0.pcapng",
    ),
    replay(
        "replay-pcapng-shb-length-huge",
        "section header block length 0x7FFFFFF0",
        1,
        (f"n_shb_len_huge.pcapng: offset 0: {LENGTH}", UNREADABLE),
        "n_shb_len_huge.pcapng",
    ),
    replay(
        "replay-pcapng-idb-length-0",
        "interface block length 0",
        1,
        (f"n_idb_len_0.pcapng: offset 28: {LENGTH}", UNREADABLE),
        "n_idb_len_0.pcapng",
    ),
    replay(
        "replay-pcapng-bad-byte-order-magic",
        "byte-order magic 0xdeadbeef",
        1,
        ("n_bad_bom.pcapng: offset 0: pcapng section header with an unknown byte-order magic", UNREADABLE),
        "n_bad_bom.pcapng",
    ),
    replay(
        "replay-pcapng-version-2",
        "section header version 2.0",
        1,
        "n_version2.pcapng: offset 12: pcapng version 2.0 is not one this reader knows (1.0)",
        "n_version2.pcapng",
    ),
    replay(
        "replay-pcapng-unknown-interface-id",
        "a packet block naming interface 99 of 3",
        0,
        (
            "18 packets in 8 flows",
            "n_bad_ifid.pcapng: 1 packet names an interface that no Interface Description Block describes",
        ),
        "n_bad_ifid.pcapng",
        stream="stdout",
    ),
    replay(
        "replay-pcapng-packets-before-any-idb",
        "packet blocks before the first interface block",
        0,
        ("18 packets in 0 flows", "n_no_idb.pcapng: 18 packets name an interface that no Interface"),
        "n_no_idb.pcapng",
        stream="stdout",
    ),
    replay(
        "replay-pcapng-simple-packet-without-idb",
        "a simple packet block, no interface block",
        0,
        ("1 packet in 0 flows", "n_spb_no_idb.pcapng: 1 packet names an interface that no Interface"),
        "n_spb_no_idb.pcapng",
        stream="stdout",
    ),
    replay(
        "replay-pcapng-all-interfaces-unknown-linktype",
        "every interface of link type 147",
        0,
        ("18 packets in 0 flows", "decode: 18 packets unknown_linktype"),
        "n_all_lt147.pcapng",
        stream="stdout",
    ),
    replay(
        "replay-pcapng-unused-interface-unknown-linktype",
        "the unused interface of link type 147",
        0,
        "18 packets in 8 flows",
        "n_idb0_lt147.pcapng",
        stream="stdout",
    ),
    replay(
        "replay-pcapng-snaplen-0xffffffff",
        "every interface with snaplen 0xFFFFFFFF",
        0,
        "18 packets in 8 flows",
        "n_snap_ffff.pcapng",
        stream="stdout",
    ),
    replay(
        "replay-pcapng-caplen-1gib",
        "first packet block claims 1 GiB",
        1,
        (f"n_caplen_1g.pcapng: offset 176: {OUT_OF_RANGE}", UNREADABLE),
        "n_caplen_1g.pcapng",
    ),
    replay(
        "replay-pcapng-caplen-0xffffffff",
        "first packet block claims 0xFFFFFFFF bytes",
        1,
        (f"n_caplen_ffff.pcapng: offset 176: {OUT_OF_RANGE}", UNREADABLE),
        "n_caplen_ffff.pcapng",
    ),
    replay(
        "replay-pcapng-unknown-block-type",
        "a block of type 0x0BADBEEF among the packets",
        0,
        "18 packets in 8 flows",
        "n_unknown_block.pcapng",
        stream="stdout",
    ),
    replay(
        "replay-pcapng-shb-then-garbage",
        "section header, then 4 KiB of random bytes",
        1,
        (f"n_shb_garbage.pcapng: offset 28: {LENGTH}", UNREADABLE),
        "n_shb_garbage.pcapng",
    ),
    replay(
        "replay-pcapng-second-section-truncated",
        "a whole capture, then 20 bytes of a second section",
        0,
        ("18 packets in 8 flows", f"n_two_sections.pcapng: offset 4680: {TRUNCATED} (20 of 28 bytes)"),
        "n_two_sections.pcapng",
        stream="stdout",
    ),
    # --- replay: stdin, paths, outputs ------------------------------------------------------------
    replay(
        "replay-stdin-binary",
        "binary garbage on stdin",
        1,
        "error: <stdin>: not a pcap or pcapng capture: unknown magic",
        "-",
        stdin="p_garbage.pcap",
    ),
    replay(
        "replay-stdin-empty",
        "empty stdin",
        1,
        "error: <stdin>: not a pcap or pcapng capture: shorter than a file header",
        "-",
        stdin="/dev/null",
    ),
    replay(
        "replay-stdin-truncated-pcap",
        "pcap cut in its second record header, on stdin",
        0,
        f"<stdin>: offset 129: {TRUNCATED} (5 of 16 bytes)",
        "-",
        stdin="p_in_2nd_rhdr.pcap",
        stream="stdout",
    ),
    replay(
        "replay-stdin-truncated-pcapng",
        "pcapng cut in its first packet block, on stdin",
        1,
        (f"<stdin>: offset 84: {TRUNCATED}", f"error: <stdin>: {UNREADABLE}"),
        "-",
        stdin="n_in_epb.pcapng",
    ),
    replay(
        "replay-stdin-unknown-linktype",
        "pcap of link type 147 on stdin",
        1,
        "error: <stdin>: offset 20: link type 147 cannot be decoded",
        "-",
        stdin="p_linktype_147.pcap",
    ),
    replay(
        "replay-pcap-through-a-pipe",
        "--pcap /dev/stdin fed through a pipe (as <(...) is)",
        0,
        "48 packets in 15 flows",
        "/dev/stdin",
        stdin=str(PCAP),
        stdin_pipe=True,
        stream="stdout",
    ),
    replay(
        "replay-pcap-dev-zero",
        "--pcap /dev/zero",
        1,
        "error: /dev/zero: not a pcap or pcapng capture: unknown magic 0x00000000",
        "/dev/zero",
    ),
    replay(
        "replay-pcap-missing",
        "--pcap that does not exist",
        1,
        "error: nonexist.pcap: cannot open: No such file or directory",
        "nonexist.pcap",
    ),
    replay(
        "replay-pcap-directory", "--pcap a directory", 1, "error: emptydir: cannot open: Is a directory", "emptydir"
    ),
    replay(
        "replay-pcap-symlink-loop",
        "--pcap a -> b -> a",
        1,
        "error: loopa: cannot open: Too many levels of symbolic links",
        "loopa",
    ),
    replay(
        "replay-pcap-dangling-symlink",
        "--pcap a link to nothing",
        1,
        "error: dangling.yaml: cannot open: No such file or directory",
        "dangling.yaml",
    ),
    replay(
        "replay-pcap-unreadable",
        "--pcap with mode 000 (run as nobody)",
        2,
        "Path 'secret.pcap' is not readable",
        "secret.pcap",
        runner="nobody",
    ),
    replay(
        "replay-second-capture-garbage",
        "a good capture, then a garbage one",
        1,
        "error: p_garbage.pcap: not a pcap or pcapng capture",
        str(PCAP),
        "--pcap",
        "p_garbage.pcap",
    ),
    case(
        "replay-manifest-yaml-syntax",
        "replay",
        "manifests with a YAML syntax error",
        1,
        "syn.yaml:4: invalid YAML",
        "syn.yaml",
        "--pcap",
        str(PCAP),
    ),
    case(
        "replay-manifest-unknown-field",
        "replay",
        "manifests: a NetworkPolicy with `spce:`",
        1,
        "spce.yaml:4: spce: unknown field 'spce' (did you mean 'spec'?)",
        DEMO,
        "spce.yaml",
        "--pcap",
        str(PCAP),
    ),
    case(
        "replay-manifest-empty-directory",
        "replay",
        "manifests: an empty directory",
        1,
        "emptydir: no manifest files",
        "emptydir",
        "--pcap",
        str(PCAP),
    ),
    replay(
        "replay-out-in-missing-directory",
        "--out in a directory that does not exist",
        1,
        "error: --out /nonexistent/dir/v.jsonl: cannot open for writing: No such file or directory",
        str(PCAP),
        "--out",
        "/nonexistent/dir/v.jsonl",
    ),
    replay(
        "replay-allowed-in-missing-directory",
        "--allowed in a directory that does not exist",
        1,
        "error: --allowed /nonexistent/dir/a.pcap: cannot open for writing: No such file or directory",
        str(PCAP),
        "--allowed",
        "/nonexistent/dir/a.pcap",
    ),
    replay(
        "replay-out-full-disk-flows",
        "--out /dev/full --flows",
        1,
        "error: --out /dev/full: cannot write: No space left on device",
        str(PCAP),
        "--out",
        "/dev/full",
        "--flows",
    ),
    replay(
        "replay-out-full-disk",
        "--out /dev/full",
        1,
        "error: --out /dev/full: cannot write: No space left on device",
        str(PCAP),
        "--out",
        "/dev/full",
    ),
    replay(
        "replay-denied-full-disk",
        "--denied /dev/full",
        1,
        "error: --denied /dev/full: cannot write: No space left on device",
        str(PCAP),
        "--denied",
        "/dev/full",
    ),
    replay(
        "replay-out-is-a-directory",
        "--out a directory",
        2,
        "Invalid value for '--out': File 'emptydir' is a directory",
        str(PCAP),
        "--out",
        "emptydir",
    ),
    replay(
        "replay-out-is-the-input",
        "--out the capture being read",
        2,
        f"--out {PCAP} is the input --pcap {PCAP} (the same file): refusing to overwrite it",
        str(PCAP),
        "--out",
        str(PCAP),
    ),
    replay(
        "replay-flows-without-out", "--flows without --out", 2, "--flows says what --out holds", str(PCAP), "--flows"
    ),
    replay(
        "replay-out-symlink",
        "--out a symbolic link to another file",
        2,
        "--out outlink.jsonl is a symbolic link (to victim.txt): refusing to write through it",
        str(PCAP),
        "--out",
        "outlink.jsonl",
    ),
    replay(
        "replay-arp-only",
        "a capture of ARP frames only",
        0,
        ("2 passed as not IP", "0 denied as malformed"),
        "p_arp.pcap",
        stream="stdout",
    ),
    replay(
        "replay-stdout-full",
        "stdout on /dev/full",
        1,
        "error: cannot write the output (stdout): No space left on device",
        str(PCAP),
        stdout_to="/dev/full",
    ),
    # --- admit -----------------------------------------------------------------------------------
    case(
        "admit-resource-binary",
        "admit",
        "--resource of binary garbage",
        1,
        "error: garbage.yaml:1: not UTF-8 text",
        POLICIES,
        "--resource",
        "garbage.yaml",
    ),
    case(
        "admit-resource-stdin-binary",
        "admit",
        "binary garbage on stdin as --resource -",
        1,
        "error: <stdin>:1: not UTF-8 text",
        POLICIES,
        "--resource",
        "-",
        stdin="garbage.yaml",
    ),
    case(
        "admit-resource-stdin-empty",
        "admit",
        "empty stdin as --resource -",
        1,
        "warning: <stdin>: no documents found",
        POLICIES,
        "--resource",
        "-",
        stdin="/dev/null",
    ),
    case(
        "admit-resource-yaml-syntax",
        "admit",
        "--resource with a YAML syntax error",
        1,
        "error: syn.yaml:4: invalid YAML",
        POLICIES,
        "--resource",
        "syn.yaml",
    ),
    case(
        "admit-resource-latin1",
        "admit",
        "--resource with a Latin-1 label value",
        1,
        "error: latin1.yaml:7: not UTF-8 text",
        POLICIES,
        "--resource",
        "latin1.yaml",
    ),
    case(
        "admit-resource-labels-not-strings",
        "admit",
        "--resource with label values 5, [a, b], true",
        1,
        "error: labelnum.yaml:7: metadata.labels.app: Invalid value: 5: must be of type string, not integer (quote it)",
        POLICIES,
        "--resource",
        "labelnum.yaml",
    ),
    case(
        "admit-resource-unknown-field",
        "admit",
        "--resource a Pod with metadata.lables, ports[].nmae",
        1,
        "error: typos.yaml:6: metadata.lables: unknown field 'lables' (did you mean 'labels'?)",
        POLICIES,
        "--resource",
        "typos.yaml",
    ),
    case(
        "admit-policy-unknown-field",
        "admit",
        "PATH a ContainerAdmissionPolicy with `rulse:`",
        1,
        "error: captypo.yaml:5: spec.rulse: unknown field 'rulse' (did you mean 'rules'?)",
        "captypo.yaml",
        "--resource",
        POD,
    ),
    case(
        "admit-resource-not-pod-creating",
        "admit",
        "--resource a ConfigMap",
        1,
        "error: cm.yaml:2: kind: not a pod-creating resource: v1/ConfigMap",
        POLICIES,
        "--resource",
        "cm.yaml",
    ),
    case(
        "admit-resource-symlink-loop",
        "admit",
        "--resource a -> b -> a",
        1,
        "error: loopa: symbolic link loop",
        POLICIES,
        "--resource",
        "loopa",
    ),
    case(
        "admit-resource-missing",
        "admit",
        "--resource that does not exist",
        1,
        "error: nonexist.yaml: no such file or directory",
        POLICIES,
        "--resource",
        "nonexist.yaml",
    ),
    case(
        "admit-resource-empty-directory",
        "admit",
        "--resource an empty directory",
        1,
        "warning: emptydir: no manifest files",
        POLICIES,
        "--resource",
        "emptydir",
    ),
    case(
        "admit-policies-empty-directory",
        "admit",
        "PATH an empty directory (no policy at all)",
        1,
        "warning: emptydir: no manifest files",
        "emptydir",
        "--resource",
        POD,
    ),
    case(
        "admit-policies-binary",
        "admit",
        "PATH binary garbage",
        1,
        "error: garbage.yaml:1: not UTF-8 text",
        "garbage.yaml",
        "--resource",
        POD,
    ),
    case(
        "admit-scans-binary",
        "admit",
        "--scans binary garbage",
        1,
        "error: garbage.yaml:1: not UTF-8 text",
        POLICIES,
        "--resource",
        POD,
        "--scans",
        "garbage.yaml",
    ),
    case(
        "admit-scans-empty-directory",
        "admit",
        "--scans an empty directory",
        1,
        "warning: emptydir: no manifest files",
        POLICIES,
        "--resource",
        POD,
        "--scans",
        "emptydir",
    ),
    case(
        "admit-now-not-a-time",
        "admit",
        "--now yesterday",
        2,
        "Invalid value for --now: 'yesterday' is not an RFC 3339 time",
        POLICIES,
        "--resource",
        POD,
        "--now",
        "yesterday",
    ),
    case(
        "admit-resource-unreadable",
        "admit",
        "--resource with mode 000 (run as nobody)",
        2,
        "Path 'secret.yaml' is not readable",
        POLICIES,
        "--resource",
        "secret.yaml",
        runner="nobody",
    ),
    # --- admission-webhook: must exit, not serve ---------------------------------------------------
    webhook(
        "webhook-cert-missing",
        "--tls-cert that does not exist",
        2,
        "Invalid value for '--tls-cert': File 'nonexist.pem' does not exist",
        POLICIES,
        "--tls-cert",
        "nonexist.pem",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-cert-binary",
        "--tls-cert of binary garbage",
        1,
        "error: --tls-cert garbage.yaml: no PEM certificate in it",
        POLICIES,
        "--tls-cert",
        "garbage.yaml",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-cert-empty",
        "--tls-cert of an empty file",
        1,
        "error: --tls-cert empty.yaml: no PEM certificate in it",
        POLICIES,
        "--tls-cert",
        "empty.yaml",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-cert-corrupt",
        "--tls-cert with a PEM header and a corrupt body",
        1,
        "error: --tls-cert badcert.pem: not a valid PEM certificate",
        POLICIES,
        "--tls-cert",
        "badcert.pem",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-key-corrupt",
        "--tls-key with a PEM header and a corrupt body",
        1,
        "error: --tls-key badkey.pem: not a valid PEM private key for --tls-cert cert.pem",
        POLICIES,
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "badkey.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-key-encrypted",
        "--tls-key encrypted with a passphrase (OpenSSL would prompt)",
        1,
        "error: --tls-key enckey.pem: an encrypted private key (it needs a passphrase)",
        POLICIES,
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "enckey.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-key-binary",
        "--tls-key of binary garbage",
        1,
        "error: --tls-key garbage.yaml: no PEM private key in it",
        POLICIES,
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "garbage.yaml",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-cert-and-key-swapped",
        "--tls-cert the key, --tls-key the certificate",
        1,
        "error: --tls-cert key.pem: no PEM certificate in it",
        POLICIES,
        "--tls-cert",
        "key.pem",
        "--tls-key",
        "cert.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-key-of-another-cert",
        "--tls-key of another certificate",
        1,
        "error: --tls-key key2.pem is not the key of the certificate in --tls-cert cert.pem",
        POLICIES,
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "key2.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-cert-directory",
        "--tls-cert a directory",
        2,
        "Invalid value for '--tls-cert': File 'emptydir' is a directory",
        POLICIES,
        "--tls-cert",
        "emptydir",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-cert-symlink-loop",
        "--tls-cert a -> b -> a",
        2,
        "Invalid value for '--tls-cert': File 'loopa' does not exist",
        POLICIES,
        "--tls-cert",
        "loopa",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-listen-port-99999",
        "--listen 127.0.0.1:99999",
        2,
        "Invalid value for --listen: '127.0.0.1:99999': port must be 0-65535",
        POLICIES,
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:99999",
    ),
    webhook(
        "webhook-listen-no-port",
        "--listen nonsense",
        2,
        "Invalid value for --listen: 'nonsense' is not host:port",
        POLICIES,
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "key.pem",
        "--listen",
        "nonsense",
    ),
    webhook(
        "webhook-listen-port-not-a-number",
        "--listen 127.0.0.1:abc",
        2,
        "port 'abc' is not a number",
        POLICIES,
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:abc",
    ),
    webhook(
        "webhook-self-signed-no-names",
        "--tls-self-signed with neither --service nor --tls-san",
        2,
        "--tls-self-signed needs --service or --tls-san",
        POLICIES,
        "--tls-self-signed",
    ),
    webhook(
        "webhook-self-signed-service-not-namespaced",
        "--service without its namespace",
        2,
        "Invalid value for --service: 'hook' is not NAMESPACE/NAME",
        POLICIES,
        "--tls-self-signed",
        "--service",
        "hook",
    ),
    webhook(
        "webhook-self-signed-rotation-period-bad",
        "--tls-rotation-period soon",
        2,
        "Invalid value for --tls-rotation-period: 'soon' is not a duration",
        POLICIES,
        "--tls-self-signed",
        "--tls-san",
        "127.0.0.1",
        "--tls-rotation-period",
        "soon",
    ),
    webhook(
        "webhook-self-signed-secret-without-cluster",
        "--tls-secret with no cluster to keep it in",
        2,
        "--tls-secret and --webhook-configuration need --kubeconfig or --in-cluster",
        POLICIES,
        "--tls-self-signed",
        "--tls-san",
        "127.0.0.1",
        "--tls-secret",
        "ns/hook-tls",
    ),
    webhook(
        "webhook-listen-address-not-here",
        "--listen 203.0.113.1:8443 (no such local address)",
        1,
        "error: cannot listen on 203.0.113.1:8443: Cannot assign requested address",
        POLICIES,
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "key.pem",
        "--listen",
        "203.0.113.1:8443",
    ),
    webhook(
        "webhook-listen-unresolvable-host",
        "--listen no.such.host.invalid:8443",
        1,
        "error: cannot listen on no.such.host.invalid:8443",
        POLICIES,
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "key.pem",
        "--listen",
        "no.such.host.invalid:8443",
    ),
    webhook(
        "webhook-listen-port-in-use",
        "--listen on a port another socket listens on",
        1,
        ("error: cannot listen on 127.0.0.1:", "Address already in use"),
        POLICIES,
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:{busy_port}",
    ),
    webhook(
        "webhook-policies-binary",
        "PATH binary garbage",
        1,
        "error: garbage.yaml:1: not UTF-8 text",
        "garbage.yaml",
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-policies-yaml-syntax",
        "PATH with a YAML syntax error",
        1,
        "error: syn.yaml:4: invalid YAML",
        "syn.yaml",
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-policy-unknown-field",
        "PATH a ContainerAdmissionPolicy with `rulse:`",
        1,
        "error: captypo.yaml:5: spec.rulse: unknown field 'rulse' (did you mean 'rules'?)",
        "captypo.yaml",
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-kubeconfig-binary",
        "--kubeconfig of binary garbage",
        2,
        "cannot read the cluster: kubeconfig garbage.yaml: not UTF-8 text",
        "--kubeconfig",
        "garbage.yaml",
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    webhook(
        "webhook-no-path",
        "neither PATH nor a cluster",
        2,
        "Missing argument 'PATHS...'",
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "key.pem",
        "--listen",
        "127.0.0.1:0",
    ),
    # --- monitor ---------------------------------------------------------------------------------
    case(
        "monitor-binary-stdin",
        "monitor",
        "8 KiB of random bytes on stdin",
        0,
        "line 1: not a JSON event: ",
        stdin="mon_garbage.bin",
    ),
    case(
        "monitor-garbage-lines",
        "monitor",
        "non-JSON lines, JSON that is no event object, blank lines",
        0,
        ("line 1: not a JSON event: not json", "line 3: not a JSON event: [1,2]"),
        stdin="mon_lines.jsonl",
    ),
    case(
        "monitor-latin1-line",
        "monitor",
        "a JSON event with a Latin-1 byte in a string",
        0,
        "deny             caf\\udce9",
        stdin="mon_latin1.jsonl",
        stream="stdout",
    ),
    case("monitor-empty-stdin", "monitor", "empty stdin", 0, None, stdin="/dev/null"),
    case(
        "monitor-missing-file",
        "monitor",
        "FILE that does not exist",
        1,
        "Error: nonexist.jsonl: No such file or directory",
        "nonexist.jsonl",
    ),
    case("monitor-directory", "monitor", "FILE a directory", 2, "File 'emptydir' is a directory", "emptydir"),
    case(
        "monitor-symlink-loop",
        "monitor",
        "FILE a -> b -> a",
        1,
        "Error: loopa: Too many levels of symbolic links",
        "loopa",
    ),
    case(
        "monitor-only-unknown-kind",
        "monitor",
        "--only bogus",
        2,
        "Invalid value for --only: unknown event kind(s) bogus",
        "--only",
        "bogus",
        stdin="/dev/null",
    ),
    case(
        "monitor-16mb-line",
        "monitor",
        "one 16 MB line that is not JSON",
        0,
        "line 1: not a JSON event: zzzz",
        "monline.txt",
    ),
    case(
        "monitor-60mb-json-object",
        "monitor",
        "one 60 MB JSON object that is no known event",
        1,
        "hugeline.json: line 1 is longer than 32 MiB: not an event stream of pyclassify enforce",
        "hugeline.json",
    ),
    case(
        "monitor-20mb-unknown-event",
        "monitor",
        "one 20 MB JSON event of an unknown kind",
        0,
        "(20000000 characters)",
        "bigevent.json",
        stream="stdout",
    ),
    case(
        "monitor-dev-zero",
        "monitor",
        "FILE /dev/zero (one endless line), RLIMIT_AS 1 GiB",
        1,
        "/dev/zero: line 1 is longer than 32 MiB",
        "/dev/zero",
        mem_limit=1 << 30,
        timeout=30.0,
    ),
    # --- enforce: only what fails before touching the kernel --------------------------------------
    enforce(
        "enforce-missing-path",
        "PATH that does not exist",
        2,
        "Invalid value for '[PATHS]...': Path 'nonexist.yaml' does not exist",
        "nonexist.yaml",
        "--queue",
        "0",
    ),
    enforce(
        "enforce-yaml-syntax",
        "PATH with a YAML syntax error",
        1,
        "error: syn.yaml:4: invalid YAML",
        "syn.yaml",
        "--queue",
        "0",
    ),
    enforce(
        "enforce-binary-garbage",
        "PATH binary garbage",
        1,
        "error: garbage.yaml:1: not UTF-8 text",
        "garbage.yaml",
        "--queue",
        "0",
    ),
    enforce(
        "enforce-latin1-label",
        "Latin-1 label value",
        1,
        "error: latin1.yaml:7: not UTF-8 text",
        "latin1.yaml",
        "--queue",
        "0",
    ),
    enforce(
        "enforce-label-not-string",
        "label values that are not strings",
        1,
        "labelnum.yaml:7: metadata.labels.app: Invalid value: 5: must be of type string, not integer (quote it)",
        "labelnum.yaml",
        "--queue",
        "0",
    ),
    enforce(
        "enforce-unknown-field",
        "a NetworkPolicy with `spce:` (first load)",
        1,
        "spce.yaml:4: spce: unknown field 'spce' (did you mean 'spec'?)",
        DEMO,
        "spce.yaml",
        "--queue",
        "0",
    ),
    enforce(
        "enforce-selector-10000-parens",
        "policy selector nested 10,000 deep",
        1,
        "seldeep.json:1: spec.selector: invalid selector",
        "seldeep.json",
        "--bridge",
        "a,b",
    ),
    enforce(
        "enforce-huge-single-line",
        "one 60 MB JSON line",
        1,
        f"hugeline.json:1: object of {HUGE_LINE_BYTES} bytes is larger than the limit",
        "hugeline.json",
        "--queue",
        "0",
    ),
    enforce("enforce-symlink-loop", "PATH a -> b -> a", 2, "Path 'loopa' does not exist", "loopa", "--queue", "0"),
    enforce(
        "enforce-dangling-symlink",
        "PATH a link to nothing",
        2,
        "Path 'dangling.yaml' does not exist",
        "dangling.yaml",
        "--queue",
        "0",
    ),
    enforce(
        "enforce-queues-not-a-range", "--queues abc", 2, "queue range 'abc': expected N or N-M", DEMO, "--queues", "abc"
    ),
    enforce(
        "enforce-queues-reversed",
        "--queues 5-3",
        2,
        "queue range '5-3': expected 0 <= N <= M <= 65535",
        DEMO,
        "--queues",
        "5-3",
    ),
    enforce(
        "enforce-queues-out-of-range",
        "--queues 1-70000",
        2,
        "queue range '1-70000': expected 0 <= N <= M <= 65535",
        DEMO,
        "--queues",
        "1-70000",
    ),
    enforce(
        "enforce-queue-out-of-range",
        "--queue 70000",
        2,
        "70000 is not in the range 0<=x<=65535",
        DEMO,
        "--queue",
        "70000",
    ),
    enforce(
        "enforce-bridge-one-interface",
        "--bridge eth0",
        2,
        "--bridge wants two interfaces as IF1,IF2, got 'eth0'",
        DEMO,
        "--bridge",
        "eth0",
    ),
    enforce(
        "enforce-bridge-same-twice",
        "--bridge eth0,eth0",
        2,
        "--bridge wants two different interfaces",
        DEMO,
        "--bridge",
        "eth0,eth0",
    ),
    enforce(
        "enforce-bridge-name-too-long",
        "--bridge of a 20-character interface",
        2,
        "invalid interface name",
        DEMO,
        "--bridge",
        "x" * 20 + ",b",
    ),
    enforce(
        "enforce-queue-and-bridge",
        "--queue 0 --bridge a,b",
        2,
        "give exactly one of --queue N, --queues N-M or --bridge IF1,IF2",
        DEMO,
        "--queue",
        "0",
        "--bridge",
        "a,b",
    ),
    enforce(
        "enforce-deny-action-unknown",
        "--deny-action ignore",
        2,
        "'ignore' is not one of 'drop', 'reject'",
        DEMO,
        "--queue",
        "0",
        "--deny-action",
        "ignore",
    ),
    enforce(
        "enforce-on-stop-unknown",
        "--on-stop forget",
        2,
        "'forget' is not one of 'keep', 'remove'",
        DEMO,
        "--queue",
        "0",
        "--on-stop",
        "forget",
    ),
    enforce(
        "enforce-uninstall-with-path",
        "--uninstall with PATH and --queue",
        2,
        "--uninstall takes no PATH, cluster, --queue(s) or --bridge",
        DEMO,
        "--queue",
        "0",
        "--uninstall",
    ),
    enforce(
        "enforce-neither-queue-nor-bridge",
        "no --queue, --queues or --bridge",
        2,
        "give exactly one of --queue N, --queues N-M or --bridge IF1,IF2",
        DEMO,
    ),
    enforce(
        "enforce-path-and-kubeconfig",
        "PATH and --kubeconfig",
        2,
        "give PATH or --kubeconfig/--in-cluster, not both",
        DEMO,
        "--kubeconfig",
        "garbage.yaml",
        "--queue",
        "0",
    ),
    enforce(
        "enforce-kubeconfig-binary",
        "--kubeconfig of binary garbage",
        1,
        "cannot read the cluster: kubeconfig garbage.yaml: not UTF-8 text",
        "--kubeconfig",
        "garbage.yaml",
        "--queue",
        "0",
    ),
    enforce(
        "enforce-not-root-queue",
        "valid policy, --queue 0, run as nobody (no CAP_NET_ADMIN)",
        6,
        "error: cannot bind NFQUEUE 0: Operation not permitted: enforce needs root (or CAP_NET_ADMIN)",
        DEMO,
        "--queue",
        "0",
        runner="netns+nobody",
    ),
    enforce(
        "enforce-not-root-bridge-absent-interfaces",
        "valid policy, --bridge of absent interfaces, as nobody",
        7,
        "error: cannot start the bridge pcx-absent0,pcx-absent1",
        DEMO,
        "--bridge",
        "pcx-absent0,pcx-absent1",
        runner="netns+nobody",
    ),
    enforce(
        "enforce-metrics-not-host-port",
        "--metrics nonsense",
        2,
        "expected HOST:PORT with a port from 1 to 65535, got 'nonsense'",
        DEMO,
        "--queue",
        "0",
        "--metrics",
        "nonsense",
    ),
    enforce(
        "enforce-metrics-port-99999",
        "--metrics 127.0.0.1:99999",
        2,
        "expected HOST:PORT with a port from 1 to 65535, got '127.0.0.1:99999'",
        DEMO,
        "--queue",
        "0",
        "--metrics",
        "127.0.0.1:99999",
    ),
    # flow records (replay --traffic): bad records counted per reason with file and line (or
    # byte offset), the rest judged; exit 1 only when nothing could be read
    traffic(
        "traffic-hubble-truncated-record",
        "a Hubble line cut in the middle, after a good one",
        0,
        ("1 record truncated record", "r_hubble_cut.jsonl:2: truncated_record"),
        "r_hubble_cut.jsonl",
    ),
    traffic(
        "traffic-hubble-not-json",
        "a line that is not JSON between Hubble flows",
        0,
        "r_hubble_notjson.jsonl:2: not_json",
        "r_hubble_notjson.jsonl",
    ),
    traffic(
        "traffic-hubble-nothing-readable",
        "every line is not JSON (--format hubble)",
        1,
        "no record could be read",
        "r_garbage.txt",
        "--format",
        "hubble",
    ),
    case(
        "report-traffic-nothing-readable",
        "report",
        "every line of --traffic is not JSON (--format hubble)",
        1,
        "no record could be read",
        DEMO,
        "--traffic",
        "r_garbage.txt",
        "--format",
        "hubble",
        "--no-redundant",
        "-o",
        "-",
        stream="any",
    ),
    traffic(
        "traffic-hubble-out-of-order",
        "a Hubble flow earlier than the one before it",
        0,
        "r_hubble_order.jsonl:2: out_of_order",
        "r_hubble_order.jsonl",
    ),
    traffic(
        "traffic-vpc-unknown-field-order",
        "a VPC header naming fields no version has",
        1,
        ("r_vpc_unknown.txt:1: unknown_field_order", "no record could be read"),
        "r_vpc_unknown.txt",
        "--format",
        "vpc",
    ),
    traffic(
        "traffic-vpc-short-record",
        "a VPC record with fewer fields than its header",
        0,
        "r_vpc_short.txt:3: truncated_record",
        "r_vpc_short.txt",
    ),
    traffic(
        "traffic-parquet-not-an-integer",
        "a VPC Parquet file whose srcport column holds 1.5",
        1,
        "r_vpc_float.parquet: row 2: srcport: 1.5 is not an integer",
        "r_vpc_float.parquet",
    ),
    traffic(
        "traffic-netflow-v9-missing-template",
        "NetFlow v9 data flowset before any template",
        1,
        ("missing_template", "r_v9_notemplate.bin: byte 20"),
        "r_v9_notemplate.bin",
    ),
    traffic(
        "traffic-ipfix-corrupt",
        "an IPFIX message whose set length runs past it, then a good one",
        0,
        ("corrupt_message", "r_ipfix_corrupt.bin: byte 16"),
        "r_ipfix_corrupt.bin",
    ),
    traffic(
        "traffic-conntrack-truncated",
        "a conntrack line cut before its tuple",
        0,
        "r_conntrack_cut.txt:2: truncated_record",
        "r_conntrack_cut.txt",
    ),
    traffic(
        "traffic-format-mismatch",
        "Hubble flows given as --format vpc",
        1,
        "r_hubble_cut.jsonl: --format vpc asked, but the file is Cilium Hubble flows",
        "r_hubble_cut.jsonl",
        "--format",
        "vpc",
    ),
    traffic(
        "traffic-unknown-format",
        "text of no flow record format",
        1,
        "r_garbage.txt: not a format --traffic reads",
        "r_garbage.txt",
    ),
    traffic(
        "traffic-gzip-truncated",
        "gzip-compressed Hubble flows cut short (the flows before are judged)",
        0,
        ("r_hubble_cut.jsonl.gz: byte", "unreadable_rest"),
        "r_hubble_cut.jsonl.gz",
    ),
    traffic(
        "traffic-gzip-corrupt",
        "a gzip header over garbage",
        1,
        "r_corrupt.gz: gzip-compressed but cannot be decompressed",
        "r_corrupt.gz",
    ),
]

#: The same table as plain tuples: (id, command, input, exit code, message fragment).
CASE_TABLE = [
    (p.values[0].id, p.values[0].command, p.values[0].input, p.values[0].code, p.values[0].fragment_text) for p in CASES
]

#: What each case did in this run: id -> "exit N: <the line holding the fragment>", "hang", ...
OBSERVED: dict[str, str] = {}


def table() -> list[dict[str, Any]]:
    """Every case with what this run observed (for a report)."""
    rows = []
    for p in CASES:
        c: Case = p.values[0]
        rows.append(
            {
                "id": c.id,
                "command": c.command,
                "input": c.input,
                "code": c.code,
                "fragment": c.fragment_text,
                "xfail": bool(p.marks),
                "observed": OBSERVED.get(c.id, "not run"),
            }
        )
    return rows


def write_table(path: str) -> None:
    rows = table()
    if path.endswith(".json"):
        Path(path).write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
        return
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| id | command | input | exit | message fragment | observed |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {cell(r['id'])}{' (xfail)' if r['xfail'] else ''} | {cell(r['command'])} | {cell(r['input'])} | "
        f"{r['code']} | {cell(r['fragment'])} | {cell(r['observed'])} |"
        for r in rows
    ]
    Path(path).write_text("\n".join(lines) + "\n")


def test_case_ids_are_unique_and_every_command_is_covered():
    ids = [row[0] for row in CASE_TABLE]
    assert len(ids) == len(set(ids))
    commands = {row[1] for row in CASE_TABLE}
    assert commands == {
        "check",
        "explain",
        "matrix",
        "diff",
        "replay",
        "render",
        "selector",
        "admit",
        "admission-webhook",
        "monitor",
        "enforce",
        "report",
    }


# --- the inputs ----------------------------------------------------------------------------------


def _gnp(selector: str) -> str:
    return json.dumps(
        {
            "apiVersion": "projectcalico.org/v3",
            "kind": "GlobalNetworkPolicy",
            "metadata": {"name": "p"},
            "spec": {"selector": selector, "ingress": [{"action": "Allow"}]},
        }
    )


POD_HEAD = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: default\n"


def _write_manifests(d: Path, rng: random.Random) -> None:
    text = {
        "syn.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: a\n  namespace: [x\n",
        "staged.yaml": (
            "apiVersion: projectcalico.org/v3\nkind: StagedNetworkPolicy\n"
            "metadata: {name: s, namespace: shop}\nspec:\n  selector: all()\n  stagedAction: Sett\n"
        ),
        "syn.json": '{"apiVersion": "v1", "kind": "Pod",, }\n',
        "trunc.json": '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "d"',
        "tabs.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n\tname: d\n",
        "dupkeys.yaml": "apiVersion: v1\nkind: Namespace\nkind: Pod\nmetadata: {name: d}\n",
        "empty.yaml": "",
        "manydocs.yaml": "---\n" * 1_000_000,
        "labelnum.yaml": POD_HEAD
        + "  labels:\n    app: 5\n    tier: [a, b]\n    x: {a: 1}\n    y: null\n    z: true\n",
        "labelkeys.yaml": POD_HEAD + "  labels:\n    5: x\n    null: y\n    ? [a, b]\n    : z\n    ? {a: 1}\n    : w\n",
        "labelnl.yaml": POD_HEAD + '  labels:\n    "bad\\nkey": v\n    "k\\u202e": v\n',
        "labelctl.yaml": POD_HEAD + '  labels:\n    app: "\\x00\\x01"\n    "bad key\\x00": v\n',
        "labelstr.yaml": POD_HEAD + '  labels: "notamap"\n',
        "hepif.yaml": (
            "apiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata: {name: gw}\nspec:\n"
            "  node: n1\n  interfaceName: eth0 -j ACCEPT\n"
        ),
        "scalar.yaml": "just a string\n",
        "list.yaml": "- a\n- b\n",
        "kindnum.yaml": "apiVersion: v1\nkind: 5\n",
        "nokind.yaml": "apiVersion: v1\nmetadata: {name: d}\n",
        "kindlist.yaml": "apiVersion: v1\nkind: List\nitems: 5\n",
        "bigint.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: d}\n"
        "spec: {containers: [{name: c, image: i, ports: [{containerPort: " + "9" * 5000 + "}]}]}\n",
        "deepyaml.yaml": "a: " + "[" * 100_000 + "]" * 100_000 + "\n",
        "deepjson.json": '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":'
        + "[" * 100_000
        + "]" * 100_000
        + "}",
        "deepmap.yaml": "".join("  " * i + f"k{i}:\n" for i in range(3000)),
        "aliasloop.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: &m {name: x, self: *m}\n",
        "surrogate.json": '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default",'
        '"labels":{"app":"\\ud800"}}}',
        "cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: d}\n",
        "sel1m.json": _gnp('a == "' + "x" * (1 << 20) + '"'),
        "selterms.json": _gnp(" || ".join(f"has(k{i})" for i in range(70_000))),
        "seldeep.json": _gnp("(" * 10_000 + "has(a)" + ")" * 10_000),
        "selbang.json": _gnp("!" * 100_000 + "has(a)"),
        "selnul.json": _gnp("has(a\x00b)"),
        "selnul2.json": _gnp("a == 'x\x00y'"),
        "mon_lines.jsonl": 'not json\n{"event": 5}\n[1,2]\n{"event":"deny","ts":"x","src":null}\n{}\n\n',
        # Fields the API schema of the kind does not know, values of another type (strict decoding)
        "spce.yaml": (
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: db, namespace: shop}\n"
            "spce:\n  podSelector: {}\n"
        ),
        "capitalised.yaml": (
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nMetadata:\n  name: deny\n"
            "Spec:\n  selector: all()\n"
        ),
        "typos.yaml": (
            POD_HEAD + "  lables: {app: web}\nspec:\n  containers:\n  - name: web\n    image: nginx\n"
            "    ports: [{nmae: http, containerPort: 80}]\nstatus:\n  podIPz: 10.0.0.1\n"
        ),
        "quotedport.yaml": (
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: db, namespace: shop}\n"
            'spec:\n  podSelector: {}\n  ingress:\n  - ports: [{port: "8080"}]\n'
        ),
        "portstring.yaml": POD_HEAD + 'spec:\n  containers: [{name: c, image: i, ports: [{containerPort: "8080"}]}]\n',
        "gnptypo.yaml": (
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: deny}\nspec:\n"
            "  selector: all()\n  ingress:\n  - {action: Deny, sourec: {nets: [10.0.0.0/8]}}\n"
        ),
        "jobv1beta1.yaml": "apiVersion: batch/v1beta1\nkind: Job\nmetadata: {name: j}\n",
        "listtypo.yaml": "apiVersion: v1\nkind: List\nitmes:\n- {apiVersion: v1, kind: Namespace, metadata: {name: a}}\n",
        "anptypo.yaml": (
            "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata: {name: a}\n"
            "spec:\n  priority: 10\n  subject: {namespaces: {}}\n  ingress:\n"
            "  - {action: Deny, from: [{namespaces: {}}], ports: [{portNumber: {protocl: TCP, port: 22}}]}\n"
        ),
        "captypo.yaml": (
            "apiVersion: containersecurity.tigera.io/v1beta1\nkind: ContainerAdmissionPolicy\n"
            "metadata: {name: p}\nspec:\n  rulse: [{action: Allow}]\n"
        ),
        "svcports.yaml": (
            "apiVersion: v1\nkind: Service\nmetadata: {name: api, namespace: shop}\nspec:\n  ports:\n"
            "  - {name: 8001-8000, port: 8001, targetPort: 8000}\n"
            "  - {name: https-metrics-endpoint, port: 8443, targetPort: metrics}\n---\n"
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: api-1, namespace: shop, "
            "labels: {kubernetes.io/service-name: api}}\naddressType: IPv4\n"
            "endpoints: [{addresses: [10.0.0.2]}]\nports: [{name: 8001-8000, port: 8000}]\n"
        ),
    }
    for name, content in text.items():
        (d / name).write_text(content)
    # Policies whose compiled form would exceed the engine's memory bound: thousands of rules,
    # each its own address and port atom (the identity's decisions walk its rules instead).
    from bench.cluster import adversarial_policy

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}]},
    }
    blowup = {"apiVersion": "v1", "kind": "List", "items": [pod, adversarial_policy(12000, 1, 1)]}
    (d / "compileblowup.json").write_text(json.dumps(blowup))
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(9)
    )
    (d / "laughs.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n"
        + "".join("  " + line for line in laughs.splitlines(True))
    )
    raw = {
        "garbage.yaml": rng.randbytes(4096) + b"\x00\xff",
        "nuls.yaml": b"\x00" * 4096,
        "rawnul.yaml": b"apiVersion: v1\nkind: Namespace\x00\nmetadata: {name: d}\n",
        "utf16.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: d}\n".encode("utf-16"),
        "latin1.yaml": POD_HEAD.encode() + b"  labels:\n    app: caf\xe9\n",
        "latin1.json": b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default",'
        b'"labels":{"app":"caf\xe9"}}}',
        "latin1name.yaml": b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\xff\xfe\n  namespace: default\n",
        "mon_garbage.bin": rng.randbytes(8192).replace(b"\n", b"\x00") + b"\n",
        "mon_latin1.jsonl": b'{"event": "deny", "src": "caf\xe9"}\n',
    }
    for name, content in raw.items():
        (d / name).write_bytes(content)
    (d / "emptydir").mkdir()
    (d / "loopa").symlink_to("b")
    (d / "b").symlink_to("loopa")
    (d / "dangling.yaml").symlink_to("nowhere.yaml")
    (d / "dirloop" / "sub").mkdir(parents=True)
    (d / "dirloop" / "sub" / "up").symlink_to("..", target_is_directory=True)
    (d / "danglingdir").mkdir()
    (d / "danglingdir" / "gone.yaml").symlink_to("nowhere.yaml")
    ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: app}\n"
    (d / "twicedir").mkdir()
    (d / "twicedir" / "ns.yaml").write_text(ns)
    (d / "twicedir" / "same.yaml").symlink_to("ns.yaml")
    (d / "valuesdir").mkdir()
    (d / "valuesdir" / "ns.yaml").write_text(ns)
    (d / "valuesdir" / "values.yaml").write_text("replicaCount: 2\nimage: {repository: nginx}\n")
    (d / "valuesdir" / "Chart.yaml").write_text("apiVersion: v2\nname: web\nversion: 0.1.0\n")
    (d / "valuesonly").mkdir()
    (d / "valuesonly" / "values.yaml").write_text("replicaCount: 2\n")
    (d / "lifecycle.yaml").write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- {apiVersion: v1, kind: Pod, metadata: {name: web, namespace: app}, status: {phase: Running, podIP: 10.1.0.3}}\n"
        "- {apiVersion: v1, kind: Pod, metadata: {name: db, namespace: app},"
        " status: {phase: Running, podIP: 10.1.0.2, podIPs: [{ip: 10.1.0.2}, {ip: 'fd00::2'}]}}\n"
        "- {apiVersion: v1, kind: Pod, metadata: {name: job, namespace: app}, status: {phase: Succeeded, podIP: 10.1.0.9}}\n"
        "- {apiVersion: v1, kind: Pod, metadata: {name: v6, namespace: app}, status: {phase: Running, podIP: 'fd00::6'}}\n"
    )
    (d / "victim.txt").write_text("another file\n")
    (d / "outlink.jsonl").symlink_to("victim.txt")
    (d / "fifodir").mkdir()
    os.mkfifo(d / "fifodir" / "policy.yaml")
    shutil.copy(Path(DEMO) / "00-namespaces.yaml", d / "fifodir" / "good.yaml")
    for sub, name in (("nonutf8dir", b"bad\xff.yaml"), ("nldir", b"a\nb.yaml")):
        (d / sub).mkdir()
        (d / sub / os.fsdecode(name)).write_text((d / "syn.yaml").read_text())


LARGE_FILES = (
    "hugebad.yaml",
    "hugeline.json",
    "sparse.yaml",
    "monline.txt",
    "bigevent.json",
    "manydocs.yaml",
    "huge.pcap",
)


def _write_large(d: Path) -> None:
    with open(d / "hugebad.yaml", "w") as f:
        value = "x" * 400
        chunk = []
        for i in range(HUGE_DOCS):
            chunk.append(
                f"---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n  namespace: default\n"
                f"data:\n  key: {value}\n"
            )
            if len(chunk) == 10_000:
                f.write("".join(chunk))
                chunk = []
        f.write("".join(chunk))
        f.write("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: [\n")
    with open(d / "hugeline.json", "w") as f:
        f.write(HUGE_LINE_HEAD + "y" * 60_000_000 + '"}}')
    with open(d / "sparse.yaml", "wb") as f:
        f.truncate(SPARSE_BYTES)
    with open(d / "monline.txt", "w") as f:
        f.write("z" * 16_000_000 + "\n")
    with open(d / "bigevent.json", "w") as f:
        f.write('{"ts": 1, "event": "future-kind", "detail": "' + "q" * 20_000_000 + '"}\n')


def _write_tls(d: Path) -> None:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    for cert_name, key_name in (("cert.pem", "key.pem"), ("cert2.pem", "key2.pem")):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .sign(key, hashes.SHA256())
        )
        (d / cert_name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (d / key_name).write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        if key_name == "key.pem":
            (d / "enckey.pem").write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.BestAvailableEncryption(b"passphrase"),
                )
            )
    (d / "badcert.pem").write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all !!!\n-----END CERTIFICATE-----\n")
    (d / "badkey.pem").write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")


def _blocks(ng: bytes) -> list[tuple[int, int, int]]:
    out, off = [], 0
    while off < len(ng):
        bt, bl = struct.unpack("<II", ng[off : off + 8])
        out.append((off, bt, bl))
        off += bl
    return out


def _tunnel_captures(d: Path) -> None:
    """One-packet captures of overlay tunnels replay cannot read (``pyclassify.tunnels``)."""

    def ip(proto: int, body: bytes, src: str = "192.168.77.1", dst: str = "192.168.77.2") -> bytes:
        return (
            struct.pack(
                ">BBHHHBBH4s4s",
                0x45,
                0,
                20 + len(body),
                0,
                0,
                64,
                proto,
                0,
                socket.inet_aton(src),
                socket.inet_aton(dst),
            )
            + body
        )

    eth = b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00"
    syn = struct.pack(">HHIIBBHHH", 40000, 5432, 1, 0, 0x50, 0x02, 65535, 0, 0)
    pod = ip(6, syn, "10.0.1.10", "10.0.2.30")  # examples/demo's web -> db:5432
    vxlan = eth + ip(
        17,
        struct.pack(">HHHH", 50000, 4789, 8 + 8 + 14 + len(pod), 0)
        + struct.pack(">BxxxI", 0x08, 4096 << 8)
        + eth
        + pod,
    )
    frames = {
        "t_gre_erspan.pcap": (eth + ip(47, struct.pack(">HHI", 0x1000, 0x88BE, 1) + bytes(24)), None),
        "t_vxlan_cut.pcap": (vxlan[:-10], len(vxlan)),
        "t_ipip_deep.pcap": (eth + ip(4, ip(4, ip(4, ip(4, pod)))), None),
    }
    for name, (frame, wire) in frames.items():
        record = struct.pack("<IIII", 1767225600, 0, len(frame), wire or len(frame)) + frame
        (d / name).write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1) + record)


def _arp_record(ts: int, fraction: int) -> bytes:
    """A pcap record of an Ethernet ARP request (who has 10.0.2.20, tell 10.0.1.10)."""
    frame = (
        b"\xff" * 6
        + b"\x02\x00\x00\x00\x00\x01"
        + b"\x08\x06"
        + struct.pack(">HHBBH", 1, 0x0800, 6, 4, 1)
        + b"\x02\x00\x00\x00\x00\x01"
        + bytes([10, 0, 1, 10])
        + b"\x00" * 6
        + bytes([10, 0, 2, 20])
    )
    return struct.pack("<IIII", ts, fraction, len(frame), len(frame)) + frame


def _write_records(d: Path) -> None:
    """Flow record files with one thing wrong each (``traffic`` cases)."""

    def hubble(t: str, sport: int) -> str:
        return json.dumps(
            {
                "flow": {
                    "time": t,
                    "verdict": "FORWARDED",
                    "IP": {"source": "10.0.1.10", "destination": "10.0.2.20"},
                    "l4": {"TCP": {"source_port": sport, "destination_port": 8080, "flags": {"SYN": True}}},
                }
            }
        )

    good = hubble("2024-05-01T10:00:00Z", 40000)
    (d / "r_hubble_cut.jsonl").write_text(good + "\n" + good[:60] + "\n")
    (d / "r_hubble_notjson.jsonl").write_text(
        good + "\nnot json at all\n" + hubble("2024-05-01T10:00:01Z", 40001) + "\n"
    )
    (d / "r_hubble_order.jsonl").write_text(
        hubble("2024-05-01T10:00:05Z", 40000) + "\n" + hubble("2024-05-01T10:00:01Z", 40001) + "\n"
    )
    (d / "r_garbage.txt").write_text("lorem ipsum dolor\nsit amet\n")
    (d / "r_vpc_unknown.txt").write_text("version colour flavour\n2 red sweet\n")
    header = "version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action log-status"
    row = "2 123456789012 eni-1 10.0.1.10 10.0.2.20 40000 8080 6 3 180 1714557600 1714557660 ACCEPT OK"
    (d / "r_vpc_short.txt").write_text(f"{header}\n{row}\n2 123456789012 eni-1 10.0.1.10\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table(
            {
                "srcaddr": ["10.0.1.10"] * 2,
                "dstaddr": ["10.0.2.20"] * 2,
                "protocol": [6, 6],
                "srcport": [40000.0, 1.5],
                "dstport": [8080, 8080],
            }
        ),
        str(d / "r_vpc_float.parquet"),
    )
    # v9: header (20 bytes), then a data flowset of template 256 that was never sent
    v9 = struct.pack(">HHIIII", 9, 1, 1000, 1714557600, 1, 0) + struct.pack(">HH", 256, 12) + bytes(8)
    (d / "r_v9_notemplate.bin").write_bytes(v9)
    template = struct.pack(">HH", 256, 2) + struct.pack(">HHHH", 8, 4, 12, 4)
    tset = struct.pack(">HH", 2, 4 + len(template)) + template
    dset = struct.pack(">HH", 256, 12) + bytes([10, 0, 1, 10, 10, 0, 2, 20])
    good_msg = struct.pack(">HHIII", 10, 16 + len(tset) + len(dset), 1714557600, 0, 1) + tset + dset
    bad_set = struct.pack(">HH", 256, 400) + bytes(8)  # says 400 bytes, has 12
    bad_msg = struct.pack(">HHIII", 10, 16 + len(bad_set), 1714557600, 1, 1) + bad_set
    (d / "r_ipfix_corrupt.bin").write_bytes(bad_msg + good_msg)
    ct = (
        "tcp      6 431999 ESTABLISHED src=10.0.1.10 dst=10.0.2.20 sport=40000 dport=8080 src=10.0.2.20 "
        "dst=10.0.1.10 sport=8080 dport=40000 [ASSURED] mark=0 use=1"
    )
    (d / "r_conntrack_cut.txt").write_text(ct + "\ntcp      6 431999 ESTABLISHED\n")
    many = gzip.compress(
        ("\n".join(hubble(f"2024-05-01T10:00:{i:02d}Z", 40000 + i) for i in range(40)) + "\n").encode()
    )
    (d / "r_hubble_cut.jsonl.gz").write_bytes(many[: len(many) * 2 // 3])
    (d / "r_corrupt.gz").write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(256)) * 4)


def _write_captures(d: Path, rng: random.Random) -> None:
    pcap, ng = PCAP.read_bytes(), PCAPNG.read_bytes()
    head = pcap[:24]
    ts, us, caplen, origlen = struct.unpack("<IIII", pcap[24:40])
    assert (caplen, len(pcap)) == (89, 7024), "pcaps/demo.pcap changed: the offsets below are its"
    first_record_end = 24 + 16 + caplen
    caps = {
        "p_empty.pcap": b"",
        "p_magic.pcap": pcap[:4],
        "p_in_ghdr.pcap": pcap[:10],
        "p_ghdr_only.pcap": head,
        "p_in_rhdr.pcap": pcap[: 24 + 8],
        "p_after_rhdr.pcap": pcap[: 24 + 16],
        "p_in_body.pcap": pcap[: 24 + 16 + 40],
        "p_in_2nd_rhdr.pcap": pcap[: first_record_end + 5],
        "p_in_last_body.pcap": pcap[:-10],
        "p_bad_magic.pcap": b"\xef\xbe\xad\xde" + pcap[4:],
        "p_version3.pcap": pcap[:4] + struct.pack("<HH", 3, 0) + pcap[8:],
        "p_linktype_147.pcap": pcap[:20] + struct.pack("<I", 147) + pcap[24:],
        "p_linktype_ffff.pcap": pcap[:20] + struct.pack("<I", 0xFFFFFFFF) + pcap[24:],
        "p_snap_ffff.pcap": pcap[:16] + struct.pack("<I", 0xFFFFFFFF) + pcap[20:],
        "p_snap_0.pcap": pcap[:16] + struct.pack("<I", 0) + pcap[20:],
        "p_caplen_gt_snap.pcap": head
        + struct.pack("<IIII", ts, us, 70000, 70000)
        + pcap[40:first_record_end]
        + b"\0" * (70000 - caplen)
        + pcap[first_record_end:],
        "p_caplen_gt_orig.pcap": head + struct.pack("<IIII", ts, us, caplen, 10) + pcap[40:],
        "p_caplen_1g.pcap": head + struct.pack("<IIII", ts, us, 1 << 30, 1 << 30) + pcap[40:],
        "p_caplen_ffff.pcap": head + struct.pack("<IIII", ts, us, 0xFFFFFFFF, 0xFFFFFFFF) + pcap[40:],
        "p_snapmax_caplen1g.pcap": pcap[:16]
        + struct.pack("<I", 0xFFFFFFFF)
        + pcap[20:24]
        + struct.pack("<IIII", ts, us, 1 << 30, 1 << 30)
        + pcap[40:],
        "p_usec_overflow.pcap": head + struct.pack("<IIII", ts, 0xFFFFFFFF, caplen, origlen) + pcap[40:],
        "p_header_garbage.pcap": head + b"\xff\xff\xff\x7f" * 3 + rng.randbytes(4084),
        "p_zero_len.pcap": head + struct.pack("<IIII", 0, 0, 0, 0) * 1000,
        "p_garbage.pcap": b"\x6f\xa1\x3c\xad" + rng.randbytes(4092),
        "p_nuls.pcap": b"\x00" * 4096,
        "huge.pcap": head + pcap[24:] * HUGE_PCAP_COPIES + pcap[24:44],
        "p_arp.pcap": head + _arp_record(ts, 1) + _arp_record(ts, 2),
    }
    blocks = _blocks(ng)
    epb = next(off for off, bt, _ in blocks if bt == 6)
    epb_len = struct.unpack("<I", ng[epb + 4 : epb + 8])[0]
    assert (epb, epb_len, len(ng)) == (84, 92, 4680), "pcaps/demo.pcapng changed: the offsets below are its"

    def length(data: bytes, at: int, new: int, trailer: bool = True) -> bytes:
        old = struct.unpack("<I", data[at + 4 : at + 8])[0]
        b = bytearray(data)
        b[at + 4 : at + 8] = struct.pack("<I", new)
        if trailer:
            b[at + old - 4 : at + old] = struct.pack("<I", new)
        return bytes(b)

    def patched(at: int, raw: bytes, data: bytes = ng) -> bytes:
        return data[:at] + raw + data[at + len(raw) :]

    idbs = [off for off, bt, _ in blocks if bt == 1]
    all_lt147, snap_ffff = ng, ng
    for off in idbs:
        all_lt147 = patched(off + 8, struct.pack("<H", 147), all_lt147)
        snap_ffff = patched(off + 12, struct.pack("<I", 0xFFFFFFFF), snap_ffff)
    caps.update(
        {
            "n_in_shb_hdr.pcapng": ng[:8],
            "n_in_shb.pcapng": ng[:20],
            "n_shb_only.pcapng": ng[:28],
            "n_in_idb_hdr.pcapng": ng[: 28 + 10],
            "n_in_idb.pcapng": ng[: 28 + 16],
            "n_after_idbs.pcapng": ng[:epb],
            "n_in_epb_hdr.pcapng": ng[: epb + 6],
            "n_in_epb.pcapng": ng[: epb + 50],
            "n_in_last_epb.pcapng": ng[:-6],
            "n_len_not4.pcapng": length(ng, epb, epb_len + 1),
            "n_len_huge.pcapng": length(ng, epb, 0xFFFFFFF0),
            "n_len_0.pcapng": length(ng, epb, 0),
            "n_len_8.pcapng": length(ng, epb, 8),
            "n_len_12.pcapng": length(ng, epb, 12),
            "n_trailer.pcapng": length(ng, epb, epb_len + 4, trailer=False),
            "n_shb_len_0.pcapng": length(ng, 0, 0),
            "n_shb_len_huge.pcapng": length(ng, 0, 0x7FFFFFF0),
            "n_idb_len_0.pcapng": length(ng, 28, 0),
            "n_bad_bom.pcapng": patched(8, b"\xde\xad\xbe\xef"),
            "n_version2.pcapng": patched(12, struct.pack("<HH", 2, 0)),
            "n_bad_ifid.pcapng": patched(epb + 8, struct.pack("<I", 99)),
            "n_no_idb.pcapng": ng[:28] + ng[epb:],
            "n_spb_no_idb.pcapng": ng[:28] + struct.pack("<III", 3, 20, 60) + b"abcd" + struct.pack("<I", 20),
            "n_all_lt147.pcapng": all_lt147,
            "n_idb0_lt147.pcapng": patched(28 + 8, struct.pack("<H", 147)),
            "n_snap_ffff.pcapng": snap_ffff,
            "n_caplen_1g.pcapng": patched(epb + 20, struct.pack("<I", 1 << 30)),
            "n_caplen_ffff.pcapng": patched(epb + 20, struct.pack("<I", 0xFFFFFFFF)),
            "n_unknown_block.pcapng": ng[:epb]
            + struct.pack("<II", 0x0BADBEEF, 16)
            + b"abcd"
            + struct.pack("<I", 16)
            + ng[epb:],
            "n_shb_garbage.pcapng": ng[:28] + b"\x01\x00\x00\x00\x03\x00\x00\x00" + rng.randbytes(4088),
            "n_two_sections.pcapng": ng + ng[:20],
        }
    )
    for name, data in caps.items():
        (d / name).write_bytes(data)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every input, written once: the working directory of every case."""
    d = tmp_path_factory.mktemp("bad-input")
    rng = random.Random(20240613)  # the same bytes every run
    _write_manifests(d, rng)
    _write_large(d)
    _write_tls(d)
    _write_captures(d, rng)
    _tunnel_captures(d)
    _write_records(d)
    yield d
    if os.environ.get("PYCLASSIFY_BAD_INPUT_TABLE"):
        write_table(os.environ["PYCLASSIFY_BAD_INPUT_TABLE"])
    for name in LARGE_FILES:  # pytest keeps the last runs' directories: not ~180 MB of them each
        (d / name).unlink(missing_ok=True)


@pytest.fixture(scope="module")
def nobody_dir() -> Iterator[Path]:
    """A directory another user can enter (pytest's own are the runner's alone), holding paths
    that user cannot read: a file and a directory of mode 000, and a readable directory that
    holds an unreadable one."""
    d = Path(tempfile.mkdtemp(prefix="pyclassify-bad-input-"))
    d.chmod(0o755)
    ns = (REPO / "examples" / "demo" / "00-namespaces.yaml").read_text()
    (d / "secret.yaml").write_text(ns)
    (d / "secret.pcap").write_bytes(PCAP.read_bytes())
    (d / "locked").mkdir()
    (d / "locked" / "ns.yaml").write_text(ns)
    (d / "outer" / "locked").mkdir(parents=True)
    (d / "outer" / "ns.yaml").write_text(ns)
    (d / "outer" / "locked" / "ns.yaml").write_text(ns)
    for p in (d / "secret.yaml", d / "secret.pcap", d / "locked", d / "outer" / "locked"):
        p.chmod(0)
    (d / "outer").chmod(0o755)
    yield d
    for p in (d / "locked", d / "outer" / "locked"):
        p.chmod(0o755)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    """A port another socket listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


# --- the sweep -----------------------------------------------------------------------------------


def _prefix(runner: str) -> list[str]:
    prefix: list[str] = []
    if "netns" in runner:
        prefix += NETNS
    if "nobody" in runner and IS_ROOT:
        if not SETPRIV:
            pytest.skip("running as root without setpriv: cannot run as an unprivileged user")
        prefix += SETPRIV
    return prefix


def _limit_memory(limit: int | None) -> Any:
    if limit is None:
        return None

    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def _observed(code: int, out: str, err: str, fragments: tuple[str, ...]) -> str:
    text = err + "\n" + out
    for fragment in fragments:
        for line in text.splitlines():
            if fragment in line:
                return f"exit {code}: {line.strip()[:300]}"
    first = next((line for line in text.splitlines() if line.strip()), "(no output)")
    return f"exit {code}: {first.strip()[:300]}"


@pytest.mark.parametrize("c", CASES)
def test_bad_input(c: Case, inputs: Path, nobody_dir: Path, busy_port: int) -> None:
    cwd = nobody_dir if "nobody" in c.runner else inputs
    args = [a.replace("{busy_port}", str(busy_port)) for a in c.args]
    argv = [*_prefix(c.runner), sys.executable, "-m", "pyclassify", c.command, *args]
    env = {**os.environ, **dict(c.env)}
    env.pop("NODE_NAME", None)
    stdin_path = None if c.stdin is None else (c.stdin if os.path.isabs(c.stdin) else str(inputs / c.stdin))
    stdin: Any = subprocess.DEVNULL
    data = None
    stdout: Any = subprocess.PIPE
    opened = []
    try:
        if stdin_path is not None:
            if c.stdin_pipe:
                stdin, data = subprocess.PIPE, Path(stdin_path).read_bytes()
            else:
                stdin = open(stdin_path, "rb")  # noqa: SIM115 - closed below
                opened.append(stdin)
        if c.stdout_to is not None:
            stdout = open(c.stdout_to, "wb")  # noqa: SIM115 - closed below
            opened.append(stdout)
        started = time.monotonic()
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            preexec_fn=_limit_memory(c.mem_limit),
            start_new_session=True,
        )
        try:
            raw_out, raw_err = proc.communicate(data, timeout=c.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            OBSERVED[c.id] = f"hang (killed after {c.timeout:.0f} s)"
            pytest.fail(f"hang: no exit within {c.timeout:.0f} s")
        seconds = time.monotonic() - started
    finally:
        for f in opened:
            f.close()
    out = (raw_out or b"").decode("utf-8", "backslashreplace")
    err = (raw_err or b"").decode("utf-8", "backslashreplace")
    code = proc.returncode
    OBSERVED[c.id] = (
        f"killed by signal {-code}" if code < 0 else _observed(code, out, err, c.fragments)
    ) + f" ({seconds:.1f} s)"
    both = out + err
    where = f"exit {code}\n--- stdout\n{out[:3000]}\n--- stderr\n{err[:3000]}"
    assert code >= 0, f"killed by signal {-code}\n{where}"
    for marker in FORBIDDEN:
        assert marker not in both, f"{marker!r} in the output\n{where}"
    assert code == c.code, where
    stream = {"stderr": err, "stdout": out, "any": both}[c.stream]
    if c.fragment is None:
        assert both == "", where
    for fragment in c.fragments:
        assert fragment in stream, f"{fragment!r} not in {c.stream}\n{where}"
    assert len(raw_out or b"") + len(raw_err or b"") <= c.max_output, (
        f"{len(both)} bytes of output: a hostile input echoed whole?\n{where[:2000]}"
    )
    for raw in RAW_BYTES:
        assert raw not in both, f"raw {raw!r} in the output: a message is not one honest line\n{where}"
