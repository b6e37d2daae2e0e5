"""The HTML report: one file, its script, style and data inlined, opened offline.

The page's data is JSON (namespaces, groups and their pods, the decisions, the namespace
counts) and the group cells a deflated block of typed arrays (base64), which the browser
inflates with ``DecompressionStream``: at 10k pods the cells are millions of group pairs, and
they compress well (rows of one identity repeat).
"""

from __future__ import annotations

import base64
import html
import json
import zlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np

from pyclassify import reachability as reach
from pyclassify.kinds.common import protocol_name
from pyclassify.report.grid import ALLOW, CLOSED, OPENED, Grid


def _asset(name: str) -> str:
    return resources.files("pyclassify.report").joinpath(name).read_text("utf-8")


def _flow_classes(classes: Sequence[Any]) -> list[dict[str, str]]:
    """Each flow class as text, and as explain's options for a flow of it."""
    out = []
    for c in classes:
        args = f"--proto {protocol_name(c.protocol) if c.protocol != -1 else c.number}"
        text = c.protocol_text()
        if c.dport is not None:
            args += f" --port {c.dport[0]}"
            text += f" {c.dport[0]}" if c.dport[0] == c.dport[1] else f" {c.dport[0]}-{c.dport[1]}"
        out.append({"text": text, "args": args})
    return out


def _cells(grid: Grid) -> tuple[str, list[dict[str, Any]]]:
    """The group cells as one deflated buffer (base64) and where each array sits in it; wider
    arrays first so every typed array view is aligned."""
    wide = np.uint16 if len(grid.decisions) < 1 << 16 else np.uint32
    arrays: list[tuple[str, int, np.ndarray]] = []
    for s, side in enumerate(grid.sides):
        arrays.append(("egress", s, side.egress.astype(wide)))
        arrays.append(("ingress", s, side.ingress.astype(wide)))
    for s, side in enumerate(grid.sides):
        if side.klass is not None:
            arrays.append(("klass", s, side.klass.astype(np.uint16)))
    for s, side in enumerate(grid.sides):
        arrays.append(("verdict", s, side.verdict))
    if grid.change is not None:
        arrays.append(("change", 1, grid.change))
    layout = []
    chunks = []
    offset = 0
    for name, s, a in arrays:
        layout.append({"name": name, "side": s, "type": {1: "u8", 2: "u16", 4: "u32"}[a.itemsize], "offset": offset})
        b = np.ascontiguousarray(a).tobytes()
        chunks.append(b)
        offset += len(b)
    packed = zlib.compress(b"".join(chunks), 6)
    return base64.b64encode(packed).decode("ascii"), layout


def _page(title: str, data: dict[str, Any], cells: str = "") -> str:
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return _asset("page.html").format(
        title=html.escape(title), style=_asset("page.css"), data=payload, cells=cells, script=_asset("page.js")
    )


def usage_data(doc: dict[str, Any]) -> dict[str, Any]:
    """``usage --json``'s document as the page shows it: a row per rule (``formats.usage_rows``),
    the decisions no rule made, the redundant policies and the traffic counted."""
    from pyclassify.report.formats import usage_rows

    return {
        "rules": usage_rows(doc),
        "other_decisions": doc["other_decisions"],
        "redundant": doc["redundant"],
        "traffic": doc["traffic"],
    }


def render_usage(doc: dict[str, Any], title: str, paths: Sequence[str]) -> str:
    """The report's rule usage panel alone (``usage --output html``)."""
    return _page(title, {"paths": " ".join(paths), "usage": usage_data(doc)})


def render(
    grid: Grid,
    title: str,
    paths: Sequence[str],
    changes: list[dict[str, Any]] | None = None,
    policies_changed: Sequence[str] = (),
    usage: dict[str, Any] | None = None,
    observed: dict[str, Any] | None = None,
) -> str:
    """The report's HTML; with traffic, its rule usage (``usage --json``'s document) and, of a
    change, the observed connections it flips (``observed``: ``trafficdiff`` rows placed on
    the grid by ``command``)."""
    cells, layout = _cells(grid)
    port = "" if grid.port is None else " on some port" if grid.port == "any" else f" {grid.port}"
    data: dict[str, Any] = {
        "flow": f"{protocol_name(grid.protocol)}{port}",
        "paths": " ".join(paths),
        "namespaces": grid.namespaces,
        "ns_start": grid.ns_start,
        "ns_pods": grid.namespace_pods().tolist(),
        "ns_allowed": [grid.namespace_counts(side.verdict == ALLOW).ravel().tolist() for side in grid.sides],
        "groups": [
            {"text": t, "labels": labels, "pods": [e.name for e in g.endpoints], "family": g.family}
            for g, t, labels in zip(grid.groups, grid.group_text, grid.group_labels)
        ],
        "dual": reach.dual_stack(grid.groups),
        "decisions": grid.decisions,
        "classes": _flow_classes(grid.classes),
        "sides": ["old", "new"] if len(grid.sides) == 2 else ["policy"],
        "layout": layout,
        "changes": changes,
        "policies_changed": list(policies_changed),
        "usage": None if usage is None else usage_data(usage),
        "observed": observed,
    }
    if grid.change is not None:
        data["ns_opened"] = grid.namespace_counts((grid.change & OPENED) != 0).ravel().tolist()
        data["ns_closed"] = grid.namespace_counts((grid.change & CLOSED) != 0).ravel().tolist()
    return _page(title, data, cells)
