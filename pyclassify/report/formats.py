"""``matrix`` and ``diff`` in other tools' formats: CSV, Markdown, Graphviz dot, and SVG drawn
from the dot by Graphviz.

A matrix is a square table over names (namespaces, identity groups or pods), each cell the pod
pairs the row may reach the column (``allowed``) of all of them (``pairs``); its graph draws an
edge where some are allowed, labelled by the flow, green where all are, amber where some. A
diff's graph draws each change as an edge, blue where it opens, black where it closes,
labelled by its flows. Rule usage's graph draws the rules in evaluation order, a box per
policy inside a box per tier, each rule with what it decided; a shadowed rule hangs from the
rule that covers it.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

ALLOW_COLOUR, SOME_COLOUR, OPENED_COLOUR, CLOSED_COLOUR = "#2e8b57", "#e08e0b", "#1e6fd9", "#111111"


@dataclass
class Table:
    """Reachability over ``names``: ``allowed[i, j]`` pod pairs of ``pairs[i, j]``, grouped into
    ``clusters`` (a namespace per name; None: not drawn in clusters)."""

    names: list[str]
    allowed: npt.NDArray[np.int64]
    pairs: npt.NDArray[np.int64]
    flow: str  # "TCP 8080", "TCP on some port"
    by: str
    clusters: list[str] | None = None
    #: pairs that share no address family: no flow, neither allowed nor denied (pods, groups)
    no_flow: npt.NDArray[np.bool_] | None = None

    def flowless(self, i: int, j: int) -> bool:
        return self.no_flow is not None and bool(self.no_flow[i, j])


def cell_text(table: Table, i: int, j: int, plain: bool) -> str:
    a, p = int(table.allowed[i, j]), int(table.pairs[i, j])
    if table.by != "namespace":
        if table.flowless(i, j):
            return "" if plain else "·"
        return ("y" if a else "n") if plain else ("✓" if a else "✗")
    return f"{a}/{p}"


def table_csv(table: Table) -> str:
    """One row per name; each cell ``true``/``false`` (pods and groups; empty: no flow, the two
    share no address family) or ``allowed/pairs`` (namespaces)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["from \\ to", *table.names])
    for i, name in enumerate(table.names):
        if table.by == "namespace":
            w.writerow([name, *(cell_text(table, i, j, True) for j in range(len(table.names)))])
        else:
            w.writerow(
                [
                    name,
                    *("" if table.flowless(i, j) else "true" if a else "false" for j, a in enumerate(table.allowed[i])),
                ]
            )
    return buf.getvalue()


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table_md(table: Table) -> str:
    head = f"{table.flow}: may the row reach the column?"
    lines = [
        head,
        "",
        "| from \\ to | " + " | ".join(_md(n) for n in table.names) + " |",
        "| --- |" + " :-: |" * len(table.names),
    ]
    for i, name in enumerate(table.names):
        lines.append(
            f"| {_md(name)} | " + " | ".join(cell_text(table, i, j, False) for j in range(len(table.names))) + " |"
        )
    return "\n".join(lines) + "\n"


def _dot_id(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def table_dot(table: Table) -> str:
    """The graph of who may reach whom: a node per name (in a cluster per namespace below the
    namespace level), an edge per pair where some pod pair is allowed."""
    out = [
        "digraph reachability {",
        f"  label={_dot_id(f'{table.flow}: who may reach whom (by {table.by})')};",
        "  labelloc=t; rankdir=LR; node [shape=box, style=rounded, fontname=Helvetica];",
        "  edge [fontname=Helvetica, fontsize=10];",
    ]
    if table.clusters is not None:
        by_ns: dict[str, list[int]] = {}
        for k, ns in enumerate(table.clusters):
            by_ns.setdefault(ns, []).append(k)
        for c, (ns, members) in enumerate(by_ns.items()):
            out.append(f"  subgraph cluster_{c} {{ label={_dot_id('namespace ' + ns)}; style=dashed;")
            out.extend(f"    n{k} [label={_dot_id(table.names[k])}];" for k in members)
            out.append("  }")
    else:
        out.extend(f"  n{k} [label={_dot_id(table.names[k])}];" for k in range(len(table.names)))
    for i, j in np.argwhere(table.allowed > 0):
        a, p = int(table.allowed[i, j]), int(table.pairs[i, j])
        label = table.flow if a == p or table.by != "namespace" else f"{table.flow}\n{a} of {p} pod pairs"
        colour = ALLOW_COLOUR if a == p else SOME_COLOUR
        style = "" if a == p else ", style=dashed"
        out.append(
            f"  n{i} -> n{j} [label={_dot_id(label)}, color={_dot_id(colour)}, fontcolor={_dot_id(colour)}{style}];"
        )
    out.append("}")
    return "\n".join(out) + "\n"


@dataclass
class Edge:
    """One change drawn between two ends: opened or closed, and the flows it covers."""

    src: str
    dst: str
    opened: bool
    flows: str
    src_cluster: str | None = None
    dst_cluster: str | None = None


def changes_csv(edges: Iterable[Edge]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["change", "from", "to", "flows"])
    for e in edges:
        w.writerow(["opened" if e.opened else "closed", e.src, e.dst, e.flows])
    return buf.getvalue()


def changes_md(edges: Iterable[Edge]) -> str:
    lines = ["| change | from | to | flows |", "| --- | --- | --- | --- |"]
    lines += [f"| {'opened' if e.opened else 'closed'} | {_md(e.src)} | {_md(e.dst)} | {_md(e.flows)} |" for e in edges]
    return "\n".join(lines) + "\n"


def changes_dot(edges: Sequence[Edge], title: str) -> str:
    """Each change an edge between its ends: blue where it opens, black where it closes."""
    nodes: dict[str, int] = {}
    clusters: dict[str | None, list[str]] = {}
    for e in edges:
        for name, cluster in ((e.src, e.src_cluster), (e.dst, e.dst_cluster)):
            if name not in nodes:
                nodes[name] = len(nodes)
                clusters.setdefault(cluster, []).append(name)
    out = [
        "digraph changes {",
        f"  label={_dot_id(title)}; labelloc=t; rankdir=LR;",
        "  node [shape=box, style=rounded, fontname=Helvetica]; edge [fontname=Helvetica, fontsize=10];",
    ]
    for c, (cluster, names) in enumerate(clusters.items()):
        if cluster is not None:
            out.append(f"  subgraph cluster_{c} {{ label={_dot_id('namespace ' + cluster)}; style=dashed;")
        out.extend(f"    n{nodes[n]} [label={_dot_id(n)}];" for n in names)
        if cluster is not None:
            out.append("  }")
    for e in edges:
        colour = OPENED_COLOUR if e.opened else CLOSED_COLOUR
        label = ("+ " if e.opened else "- ") + e.flows
        style = "" if e.opened else ", style=bold"
        out.append(
            f"  n{nodes[e.src]} -> n{nodes[e.dst]} [label={_dot_id(label)}, color={_dot_id(colour)}, "
            f"fontcolor={_dot_id(colour)}{style}];"
        )
    out.append("}")
    return "\n".join(out) + "\n"


class GraphvizMissing(RuntimeError):
    pass


def svg(dot: str) -> str:
    """The graph drawn by Graphviz's ``dot``."""
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizMissing(
            "--output svg draws with Graphviz: its 'dot' is not on PATH "
            "(Debian/Ubuntu: apt-get install graphviz), or take --output dot"
        )
    done = subprocess.run([exe, "-Tsvg"], input=dot.encode("utf-8"), capture_output=True, check=False)
    if done.returncode != 0:
        raise GraphvizMissing(f"Graphviz's dot failed: {done.stderr.decode('utf-8', 'replace').strip()}")
    return done.stdout.decode("utf-8")


USAGE_COLUMNS = (
    "tier",
    "policy",
    "direction",
    "rule",
    "action",
    "records",
    "flows",
    "packets",
    "bytes",
    "never_hit",
    "shadowed_by",
    "policy_redundant",
)


def usage_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """``usage --json``'s document as one row per rule: its counts (None without traffic, and
    for a Log rule when what it logged was not counted), whether it decided nothing, the
    earlier rule that covers it, and whether its policy changes no verdict (None: not looked
    for)."""
    counted = doc["traffic"] is not None
    covered = {(s["policy"], s["direction"], str(s["rule"])): s["covered_by"] for s in doc["shadowed"]}
    redundant = None if doc["redundant"] is None else {r["policy"] for r in doc["redundant"]}
    rows = []
    for r in doc["rules"]:
        live = counted and r["counted"]
        rows.append(
            {
                "tier": r["tier"],
                "policy": r["policy"],
                "direction": r["direction"],
                "rule": r["rule"],
                "action": r["action"],
                **{m: r[m] if live else None for m in ("records", "flows", "packets", "bytes")},
                "never_hit": (r["records"] == 0 and r["flows"] == 0) if live else None,
                "shadowed_by": covered.get((r["policy"], r["direction"], str(r["rule"]))),
                "policy_redundant": None if redundant is None else r["policy"] in redundant,
            }
        )
    return rows


def _plain(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def usage_csv(doc: dict[str, Any]) -> str:
    """One row per rule; empty cells: not counted (no traffic) or nothing covers the rule."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(USAGE_COLUMNS)
    for row in usage_rows(doc):
        w.writerow([_plain(row[c]) for c in USAGE_COLUMNS])
    return buf.getvalue()


def usage_md(doc: dict[str, Any]) -> str:
    t = doc["traffic"]
    head = (
        "Rule usage (no traffic: nothing counted)"
        if t is None
        else f"Rule usage over {t['records']:,} records ({t['flows']:,} flows, {t['packets']:,} packets, "
        f"{t['bytes']:,} bytes)"
    )
    lines = [
        head,
        "",
        "| " + " | ".join(c.replace("_", " ") for c in USAGE_COLUMNS) + " |",
        "|" + " --- |" * 5 + " --: |" * 4 + " :-: | --- | :-: |",
    ]
    for row in usage_rows(doc):
        lines.append("| " + " | ".join(_md(_plain(row[c])) for c in USAGE_COLUMNS) + " |")
    return "\n".join(lines) + "\n"


ACTION_COLOURS = {"Allow": ALLOW_COLOUR, "Deny": "#c0392b"}
UNUSED_COLOUR = "#8a8a8a"


def usage_dot(doc: dict[str, Any]) -> str:
    """``usage``'s rules as a graph: a node per rule, in a cluster per policy in a cluster per
    tier, top to bottom in evaluation order, labelled with what it decided (or "never hit",
    dashed; without traffic, nothing counted), coloured by its action; a grey edge from each
    covering rule to the rule it shadows; a redundant policy's box says so."""
    rows = usage_rows(doc)
    redundant = {r["policy"] for r in doc["redundant"] or ()}
    node: dict[tuple[str, str, str], int] = {}
    tiers: dict[str, dict[str, list[int]]] = {}
    for k, row in enumerate(rows):
        node[(row["policy"], row["direction"], str(row["rule"]))] = k
        tiers.setdefault(row["tier"], {}).setdefault(row["policy"], []).append(k)
    t = doc["traffic"]
    title = (
        "Rule usage (no traffic: nothing counted)"
        if t is None
        else f"Rule usage over {t['records']:,} records ({t['flows']:,} flows)"
    )
    out = [
        "digraph usage {",
        f"  label={_dot_id(title)}; labelloc=t; rankdir=TB;",
        "  node [shape=box, style=rounded, fontname=Helvetica]; edge [fontname=Helvetica, fontsize=10];",
    ]
    c = 0
    for tier, policies in tiers.items():
        out.append(f"  subgraph cluster_{c} {{ label={_dot_id('tier ' + tier)}; style=dashed;")
        c += 1
        for policy, members in policies.items():
            label = policy + (" (redundant: changes no verdict)" if policy in redundant else "")
            out.append(f"    subgraph cluster_{c} {{ label={_dot_id(label)}; style=solid;")
            c += 1
            for k in members:
                row = rows[k]
                if row["flows"] is None:
                    counted = ""
                elif row["never_hit"]:
                    counted = "\nnever hit"
                else:
                    counted = f"\n{row['flows']:,} flows, {row['packets']:,} packets"
                colour = (
                    UNUSED_COLOUR
                    if row["never_hit"] or row["shadowed_by"] is not None
                    else ACTION_COLOURS.get(row["action"], CLOSED_COLOUR)
                )
                style = "rounded,dashed" if row["never_hit"] or row["shadowed_by"] is not None else "rounded"
                text = _dot_id(f"{row['direction']} rule {row['rule']}: {row['action']}{counted}")
                out.append(
                    f"      r{k} [label={text}, color={_dot_id(colour)}, fontcolor={_dot_id(colour)}, "
                    f"style={_dot_id(style)}];"
                )
            out.append("    }")
        out.append("  }")
    # top to bottom in evaluation order: Graphviz orders unconnected boxes as it likes
    out.extend(f"  r{k} -> r{k + 1} [style=invis];" for k in range(len(rows) - 1))
    for k, row in enumerate(rows):
        if row["shadowed_by"] is not None:
            by = node.get((row["policy"], row["direction"], str(row["shadowed_by"])))
            if by is not None:
                out.append(
                    f'  r{by} -> r{k} [label="covers", color={_dot_id(UNUSED_COLOUR)}, '
                    f"fontcolor={_dot_id(UNUSED_COLOUR)}, style=dashed, constraint=false];"
                )
    out.append("}")
    return "\n".join(out) + "\n"
