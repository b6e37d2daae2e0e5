"""Peak memory of the commands that compile a policy set, on the heavy sets of
bench/heavy_policies.py: ``explain`` and ``render`` (one flow, one endpoint) and the daemon's
load (``PolicySource.load``, what ``enforce`` holds), each in a process of its own, its peak
resident set read from the kernel (``wait4``'s ``ru_maxrss``). With ``--python`` the same runs
use another interpreter (another checkout's virtualenv: the figures before a change).

    .venv/bin/python -m bench.memory                              # every shape, this checkout
    .venv/bin/python -m bench.memory --python /other/.venv/bin/python --json before.json
    .venv/bin/python -m bench.memory --shapes wide,ipblocks-repeated
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import heavy_policies

#: name -> (generator, its arguments, repeated)
SHAPES: dict[str, tuple[str, dict[str, int], bool]] = {
    "wide": ("wide", {"policies": 700}, False),
    "wide-repeated": ("wide", {"policies": 700}, True),
    "selectors": ("selectors", {"policies": 2000, "terms": 300}, False),
    "selectors-repeated": ("selectors", {"policies": 2000, "terms": 300}, True),
    "ipblocks": ("ipblocks", {"policies": 500, "blocks": 200}, False),
    "ipblocks-repeated": ("ipblocks", {"policies": 500, "blocks": 200}, True),
}

#: The daemon's load of a policy directory, and the estimate it holds the set to.
LOAD = """
import json, sys
from pyclassify.enforce.file_source import PolicySource
source = PolicySource([sys.argv[1]])
loaded = source.load()
print(json.dumps({"policies": len(loaded.project.policy_set.policies),
                  "estimate": source.footprint() if hasattr(source, "footprint") else None}))
"""

FLOW = ("--from", "payments/pod-0", "--to", "checkout/pod-1", "--port", "8080")


def commands(python: str, path: str) -> dict[str, list[str]]:
    cli = [python, "-m", "pyclassify"]
    return {
        "explain": [*cli, "explain", path, *FLOW],
        "render": [*cli, "render", path, "--endpoint", "payments/pod-0"],
        "enforce load": [python, "-c", LOAD, path],
    }


#: Runs argv[2:] and writes its peak RSS (KiB) and exit code to the file argv[1]. A process's
#: ru_maxrss starts from that of the process it was forked from (Linux keeps the high-water
#: mark across exec): forked from this one, which holds a heavy set's objects, every command
#: would seem to take at least as much. Forked from a bare interpreter, the floor is ~10 MiB.
LAUNCH = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{usage.ru_maxrss} {os.waitstatus_to_exitcode(status)}")
"""


def peak(argv: list[str]) -> tuple[int, float, str]:
    """Runs ``argv``; its peak RSS in bytes, its seconds, its standard output."""
    t = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.NamedTemporaryFile("r") as figures:
        subprocess.run(
            [sys.executable, "-S", "-c", LAUNCH, figures.name, *argv], stdout=out, stderr=subprocess.DEVNULL, check=True
        )
        maxrss_kib, code = map(int, figures.read().split())
        out.seek(0)
        text = out.read().decode(errors="replace")
    if code != 0:
        raise RuntimeError(f"{' '.join(argv[:5])}... exited {code}")
    return maxrss_kib * 1024, time.monotonic() - t, text


def write_shape(name: str, directory: Path) -> tuple[Path, int]:
    kind, args, repeated = SHAPES[name]
    objects = getattr(heavy_policies, kind)(**args, repeated=repeated)
    path = heavy_policies.write(objects, directory / name)
    return path.parent, path.stat().st_size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="the interpreter to run pyclassify with")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    results: list[dict[str, Any]] = []
    baseline, _, _ = peak(
        [
            args.python,
            "-m",
            "pyclassify",
            "explain",
            str(Path(__file__).parents[1] / "examples" / "demo"),
            "--from",
            "frontend/web",
            "--to",
            "backend/api",
            "--port",
            "8080",
        ]
    )
    print(f"explain on examples/demo (the interpreter and its libraries): {baseline / 2**20:,.0f} MiB", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.shapes.split(","):
            path, size = write_shape(name, Path(tmp))
            row: dict[str, Any] = {"shape": name, "bytes": size}
            for what, cmd in commands(args.python, str(path)).items():
                rss, seconds, out = peak(cmd)
                row[what] = {"peak_bytes": rss, "seconds": round(seconds, 1)}
                if what == "enforce load":
                    row[what].update(json.loads(out.strip().splitlines()[-1]))
                print(
                    f"{name:20s} {size / 2**20:6.1f} MB  {what:13s} {rss / 2**20:8,.0f} MiB  {seconds:6.1f} s",
                    flush=True,
                )
            results.append(row)
    if args.json is not None:
        args.json.write_text(
            json.dumps({"python": args.python, "baseline_bytes": baseline, "shapes": results}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
