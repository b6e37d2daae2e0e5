"""``pyclassify monitor``: follow the JSON-line event stream of ``pyclassify enforce`` (see
``pyclassify.enforce.log``) and print one readable line per event::

    02:25:38.123  deny    10.244.1.2:40000 (ns-a/client) → 10.244.2.2:80 (ns-b/web) TCP
                          ingress deny by tier default, policy ns-b/deny-web, rule 0 (rule)

From stdin (``-``, the default: ``pyclassify enforce ... | pyclassify monitor``) or from a file,
which ``--follow`` keeps reading as it grows, like ``tail -f`` (starting from the beginning, and
from the beginning again if the file is truncated or replaced). ``--only deny,log`` keeps the named
event kinds; ``--json`` prints the kept events unchanged as JSON lines. A line that is not a JSON
object is reported on stderr and skipped.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import IO, Any

from pyclassify.counted import count

EVENTS = ("deny", "log", "allow", "reload", "reload-rejected", "revoke", "start", "stop")
FLOW_EVENTS = ("deny", "log", "allow", "revoke")
KIND_WIDTH = max(len(e) for e in EVENTS)


def parse_only(value: str | None) -> frozenset[str] | None:
    """``"deny,log"`` → the set of event kinds; ``None``/empty → no filter. Unknown names are
    an error (a typo would otherwise silently print nothing)."""
    if not value:
        return None
    kinds = frozenset(k.strip() for k in value.split(",") if k.strip())
    unknown = sorted(kinds - set(EVENTS))
    if unknown:
        raise ValueError(f"unknown event kind(s) {', '.join(unknown)}; expected some of {', '.join(EVENTS)}")
    return kinds or None


def printable(text: str) -> str:
    """``text`` with every control or format character (escape sequences, carriage returns,
    bidirectional overrides) shown as a ``\\xNN``/``\\uNNNN`` escape: what an event carries is
    shown, never played on the terminal."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}") for c in text
    )


def _arrow() -> str:
    from pyclassify.terminal import symbol

    return symbol("→", "->")


def _clock(ts: Any) -> str:
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        return "--:--:--.---"
    try:
        t = datetime.fromtimestamp(ts)
    except (OverflowError, OSError, ValueError):
        return "--:--:--.---"
    return t.strftime("%H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def _end(rec: dict[str, Any], side: str) -> str:
    addr = rec.get(side)
    port = rec.get("sport" if side == "src" else "dport")
    text = "?" if addr is None else str(addr)
    if port is not None:
        text = f"[{text}]:{port}" if ":" in text else f"{text}:{port}"
    ep = rec.get(f"{side}_endpoint")
    if ep:
        text += f" ({ep})"
    return text


def flow_text(rec: dict[str, Any]) -> str:
    return f"{_end(rec, 'src')} {_arrow()} {_end(rec, 'dst')} {rec.get('proto', '?')}"


def _names(tier: Any, policy: Any, rule: Any) -> str:
    parts = []
    if tier:
        parts.append(f"tier {tier}")
    if policy:
        parts.append(f"policy {policy}")
    if rule is not None:
        parts.append(f"rule {rule}")
    return ", ".join(parts) if parts else "no policy"


def decision_text(direction: str, d: Any) -> str:
    if not isinstance(d, dict):
        return f"{direction} -"
    text = f"{direction} {d.get('verdict', '?')} by {_names(d.get('tier'), d.get('policy'), d.get('rule'))}"
    if d.get("reason"):
        text += f" ({d['reason']})"
    return text


def deciding(rec: dict[str, Any]) -> list[str]:
    """The sides that decided: on a deny the side(s) that denied, otherwise both present sides."""
    sides: list[tuple[str, dict[str, Any]]] = [
        (n, d) for n in ("egress", "ingress") if isinstance(d := rec.get(n), dict)
    ]
    if rec.get("event") == "deny":
        denying = [(n, d) for n, d in sides if d.get("verdict") == "deny"]
        sides = denying or sides
    return [decision_text(n, d) for n, d in sides]


#: The longest line read as one event (the daemon's are well under a kilobyte): a longer one ends
#: the stream as not ours, rather than growing without bound (``monitor /dev/zero``).
MAX_LINE = 32 << 20
#: The most characters of one field shown for an event of a kind this monitor does not know.
MAX_FIELD = 200


class LineTooLong(ValueError):
    """A line longer than ``MAX_LINE``: not an event stream of ``pyclassify enforce``."""


def _cut(text: str) -> str:
    return text if len(text) <= MAX_FIELD else f"{text[:MAX_FIELD]}... ({len(text)} characters)"


def _rest(rec: dict[str, Any], skip: tuple[str, ...]) -> str:
    return " ".join(
        f"{_cut(str(k))}={_cut(json.dumps(v, separators=(',', ':')) if isinstance(v, (dict, list)) else str(v))}"
        for k, v in rec.items()
        if k not in skip
    )


def render(rec: dict[str, Any]) -> str:
    """One event as text: a head line (time, kind, flow or summary) and indented detail lines."""
    kind = str(rec.get("event", "?"))
    head = f"{_clock(rec.get('ts'))}  {kind:<{KIND_WIDTH}}  "
    pad = " " * len(head)
    details: list[str] = []
    if kind in FLOW_EVENTS:
        head += flow_text(rec)
        if rec.get("queue") is not None:
            head += f"  queue {rec['queue']}"
        details = deciding(rec)
        for entry in rec.get("logs") or []:
            if isinstance(entry, dict):
                details.append("logged by " + _names(entry.get("tier"), entry.get("policy"), entry.get("rule")))
    elif kind == "reload":
        head += _rest(rec, ("ts", "event"))
    elif kind == "reload-rejected":
        errors = rec.get("errors") or []
        head += f"{count(len(errors), 'error')}, the running policy is kept"
        details = [str(e) for e in errors]
    else:  # start, stop and anything newer
        head += _rest(rec, ("ts", "event"))
    return "\n".join([printable(head.rstrip()), *(pad + printable(d) for d in details)])


def stream_lines(stream: IO[str]) -> Iterator[str]:
    """The lines of ``stream``; a line longer than ``MAX_LINE`` is an error (``LineTooLong``)."""
    number = 0
    while True:
        line = stream.readline(MAX_LINE + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE:
            raise LineTooLong(
                f"line {number} is longer than {MAX_LINE >> 20} MiB: not an event stream of pyclassify enforce"
            )
        yield line


def follow_lines(path: str, stop: threading.Event, poll: float = 0.2) -> Iterator[str]:
    """The file's lines from the start, then new lines as they are appended, until ``stop``;
    reopens from the start when the file is truncated or replaced (log rotation)."""
    f = None
    partial = ""
    try:
        while not stop.is_set():
            if f is None:
                try:
                    f = open(path, encoding="utf-8", errors="replace")
                except FileNotFoundError:
                    stop.wait(poll)
                    continue
                ino = os.fstat(f.fileno()).st_ino
                partial = ""
            chunk = f.readline(MAX_LINE + 1)
            if chunk:
                partial += chunk
                if len(partial) > MAX_LINE:
                    raise LineTooLong(
                        f"a line is longer than {MAX_LINE >> 20} MiB: not an event stream of pyclassify enforce"
                    )
                if partial.endswith("\n"):
                    yield partial
                    partial = ""
                continue
            try:
                st = os.stat(path)
                replaced = st.st_ino != ino or st.st_size < f.tell()
            except FileNotFoundError:
                replaced = False
            if replaced:
                f.close()
                f = None
                continue
            stop.wait(poll)
    finally:
        if f is not None:
            f.close()


def run_monitor(
    lines: Iterator[str], out: IO[str], err: IO[str], only: frozenset[str] | None = None, as_json: bool = False
) -> dict[str, int]:
    """Render (or pass through) each event line; returns counts of shown, filtered and bad lines."""
    counts = {"shown": 0, "filtered": 0, "bad": 0}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if not isinstance(rec, dict):
            counts["bad"] += 1
            err.write(f"line {number}: not a JSON event: {printable(line[:200])}\n")
            err.flush()
            continue
        if only is not None and rec.get("event") not in only:
            counts["filtered"] += 1
            continue
        out.write((line if as_json else render(rec)) + "\n")
        out.flush()
        counts["shown"] += 1
    return counts
