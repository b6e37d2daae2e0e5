"""The instruction-count gate: fixed workloads of the core paths counted with callgrind, held to a
committed baseline (``bench/instructions-baseline.json``).

Wall time on a shared machine moves by more than any useful threshold; instructions executed by a
fixed workload do not. Each workload runs under ``valgrind --tool=callgrind`` with collection on
only inside its entry function (``--toggle-collect``): building its inputs, the interpreter and
everything outside the entry are not counted.

- ``classifier``: TupleMerge lookups, ClassBench acl1_1000 and fw1_1000 (pruning as chosen) and
  ipc1_1000 (pruning always; 20,000 trace headers each), in ``gate_classifier`` of
  ``rust/core/examples/instruction_workloads.rs``;
- ``decisions``: the engine's decisions (memo, then the compiled programs) for 20,000 seeded pod
  pairs of the seeded 1,000-pod, 100-policy workload, in ``gate_decisions``;
- ``manifest``: the manifest reader over the bundled ``examples/demo/*.yaml``, 20 times over, in
  ``gate_manifest``;
- ``replay``: replay's inner loop (``judge_lanes`` with one lane and its connection tracker, as
  ``replay`` calls it per batch) over 4,000 of that workload's flows as TCP connections, 28,000
  packets, in ``gate_replay``;
- ``decode``: the capture reader and packet decoder (Cython, ``Reader._parse``) over the bundled
  ``pcaps/*.pcap`` and a generated capture of 4,096 TCP packets, plain and inside VXLAN.

A workload whose count rises more than the baseline's threshold fails, naming the function whose
own instructions grew most (callgrind's functions: what the optimizer did not inline).

    .venv/bin/python -m bench.instructions              # compare with the baseline; exit 1 on a rise
    .venv/bin/python -m bench.instructions --runs 3     # each workload 3 times: the spread
    .venv/bin/python -m bench.instructions --update     # rewrite the baseline (a commit of its own)
    .venv/bin/python -m bench.instructions decisions    # some workloads only
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "bench" / "instructions-baseline.json"
RUST_WORKLOADS = ROOT / "rust" / "target" / "release" / "examples" / "instruction_workloads"
#: A rise past this many percent fails, unless the baseline file says otherwise.
DEFAULT_THRESHOLD = 2.0
#: Functions kept in the baseline: those with at least this share of a workload's instructions,
#: own or inclusive (percent).
KEEP_SELF, KEEP_INCLUSIVE = 0.1, 0.5


@dataclass(frozen=True)
class Workload:
    name: str
    entry: str  # callgrind --toggle-collect pattern
    rust: bool  # the Rust example (else the Python driver below)


WORKLOADS = {
    w.name: w
    for w in (
        Workload("classifier", "instruction_workloads::gate_classifier", True),
        Workload("decisions", "instruction_workloads::gate_decisions", True),
        Workload("manifest", "instruction_workloads::gate_manifest", True),
        Workload("replay", "instruction_workloads::gate_replay", True),
        Workload("decode", "*Reader__parse", False),
    )
}


@dataclass
class Count:
    total: int
    functions: dict[str, dict[str, int]]  # name -> {"self": Ir, "inclusive": Ir}


def build_rust() -> None:
    subprocess.run(
        [
            "cargo",
            "build",
            "-q",
            "--release",
            "--manifest-path",
            str(ROOT / "rust" / "Cargo.toml"),
            "-p",
            "pyclassify-core",
            "--example",
            "instruction_workloads",
        ],
        check=True,
    )


def decode_captures(tmp: Path) -> list[Path]:
    """The captures the decode workload reads: the bundled ones and two generated (plain TCP, and
    the same inside VXLAN)."""
    import numpy as np

    from bench.captures import write_tcp_capture

    i = np.arange(4096, dtype=np.uint32)
    plain = write_tcp_capture(tmp / "tcp.pcap", len(i), 1024 + i % 60000, src_low_bytes=i % 250)
    vxlan = write_tcp_capture(tmp / "vxlan.pcap", len(i), 1024 + i % 60000, src_low_bytes=i % 250, vxlan=True)
    return sorted((ROOT / "pcaps").glob("*.pcap*")) + [plain, vxlan]


def run_decode(paths: list[str]) -> None:
    """The decode workload's driver (run under callgrind): every capture read and decoded 4 times."""
    from pyclassify.capture import open_capture

    packets = 0
    for _ in range(4):
        for path in paths:
            with open_capture(Path(path), batch_size=1024) as cap:
                for batch in cap:
                    packets += len(batch)
    print(f"decode: {packets} packets")


def callgrind(w: Workload, out: Path, captures: list[Path]) -> None:
    if w.rust:
        cmd = [str(RUST_WORKLOADS), w.name]
    else:
        cmd = [sys.executable, "-m", "bench.instructions", "--decode-driver", *map(str, captures)]
    env = dict(os.environ, PYTHONHASHSEED="0")
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", f"--toggle-collect={w.entry}", *cmd],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        sys.exit(f"{w.name}: {' '.join(cmd)} failed under callgrind (exit {proc.returncode}):\n{proc.stderr[-4000:]}")


LINE = re.compile(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$")


def annotate(out: Path, inclusive: bool) -> dict[str, int]:
    text = subprocess.run(
        ["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100", "--auto=no", str(out)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    counts: dict[str, int] = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m or m.group(2) == "PROGRAM TOTALS":
            continue
        # "file:function [object]": the file is "???" without debug information
        name = re.sub(r" \[[^\]]*\]$", "", m.group(2).split(":", 1)[-1])
        ir = int(m.group(1).replace(",", ""))
        counts[name] = max(ir, counts.get(name, 0)) if inclusive else counts.get(name, 0) + ir
    return counts


def count(w: Workload, tmp: Path, captures: list[Path]) -> Count:
    out = tmp / f"{w.name}.callgrind"
    callgrind(w, out, captures)
    total = 0
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            total = int(line.split()[1])
            break
    own, incl = annotate(out, False), annotate(out, True)
    functions = {
        name: {"self": own.get(name, 0), "inclusive": incl.get(name, 0)}
        for name in set(own) | set(incl)
        # the callers above the entry (main, the interpreter) execute nothing of their own here
        if own.get(name, 0) * 100 >= KEEP_SELF * total
        or (own.get(name, 0) and incl.get(name, 0) * 100 >= KEEP_INCLUSIVE * total)
    }
    return Count(total, dict(sorted(functions.items(), key=lambda kv: -kv[1]["inclusive"])))


def grown_most(now: Count, base: dict) -> str:
    """The function whose own instructions grew most, with its inclusive count before and after."""
    before = base.get("functions", {})
    growth = [(f["self"] - before.get(name, {}).get("self", 0), name) for name, f in now.functions.items()]
    delta, name = max(growth, default=(0, "?"))
    if delta <= 0:
        return "no single function grew"
    old = before.get(name)
    if old is None:
        return (
            f"{name} (not among the baseline's functions; now {now.functions[name]['self']:,} instructions of its own)"
        )
    new = now.functions[name]
    return (
        f"{name}: own instructions {old['self']:,} -> {new['self']:,} "
        f"({100 * delta / max(old['self'], 1):+.1f} %), inclusive {old['inclusive']:,} -> {new['inclusive']:,}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*", metavar="WORKLOAD", help=", ".join(WORKLOADS))
    p.add_argument("--update", action="store_true", help="write the counts as the new baseline")
    p.add_argument("--runs", type=int, default=1, help="run each workload this many times (the spread)")
    p.add_argument("--baseline", type=Path, default=BASELINE)
    p.add_argument("--decode-driver", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.decode_driver:
        run_decode(args.decode_driver)
        return 0
    for tool in ("valgrind", "callgrind_annotate"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (Debian valgrind)")
    names = args.workloads or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload {', '.join(unknown)}: {', '.join(WORKLOADS)}")
    baseline = json.loads(args.baseline.read_text()) if args.baseline.exists() else {}
    threshold = float(baseline.get("threshold_percent", DEFAULT_THRESHOLD))
    if any(WORKLOADS[n].rust for n in names):
        build_rust()
    failed = []
    counts: dict[str, Count] = {}
    with tempfile.TemporaryDirectory(prefix="pyclassify-instructions-") as tmpdir:
        tmp = Path(tmpdir)
        captures = decode_captures(tmp) if "decode" in names else []
        for name in names:
            runs = [count(WORKLOADS[name], tmp, captures) for _ in range(args.runs)]
            totals = [c.total for c in runs]
            counts[name] = runs[0]
            spread = 100 * (max(totals) - min(totals)) / min(totals)
            line = f"{name:<11} {runs[0].total:>13,} instructions"
            if args.runs > 1:
                line += f"  ({args.runs} runs: {min(totals):,} .. {max(totals):,}, spread {spread:.3f} %)"
            base = baseline.get("workloads", {}).get(name)
            if base and not args.update:
                worst = max(totals)
                pct = 100 * (worst - base["instructions"]) / base["instructions"]
                line += f"  {pct:+.2f} % vs baseline {base['instructions']:,}"
                if pct > threshold:
                    failed.append(name)
                    line += (
                        f"\n  REGRESSION: {name} executes {pct:+.2f} % instructions (threshold {threshold} %); "
                        f"grew most: {grown_most(max(runs, key=lambda c: c.total), base)}"
                    )
            elif not args.update:
                line += "  (no baseline)"
            print(line, flush=True)
    if args.update:
        kept = baseline.get("workloads", {}) if args.workloads else {}
        kept.update({n: {"instructions": c.total, "functions": c.functions} for n, c in counts.items()})
        args.baseline.write_text(
            json.dumps({"threshold_percent": threshold, "workloads": dict(sorted(kept.items()))}, indent=1) + "\n"
        )
        print(f"wrote {args.baseline.relative_to(ROOT) if args.baseline.is_relative_to(ROOT) else args.baseline}")
    if failed:
        print(f"instruction-count gate: {', '.join(failed)} rose more than {threshold} %", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
