"""Two builds of the read+decode loop side by side: this checkout's ``pyclassify._native`` and
another build's ``_native*.so`` (a copy kept from before a change), run in turns in one process
over the same capture, so that load on a shared machine falls on both alike. Prints each one's
best and median rate (CPU time of the loop: ``time.process_time``).

    .venv/bin/python -m bench.ab_decode OTHER/_native.cpython-311-x86_64-linux-gnu.so [--rounds 40] [--vxlan]

The capture is ``bench/test_bench_decode.py``'s (1,048,576 Ethernet/IPv4/TCP frames; ``--vxlan``:
each inside VXLAN), written to a temp dir. Both builds read it through ``Reader.read_into`` into
reused arrays, with their default tunnels (a build without them decodes the outer header).

Instructions, which load does not change: ``--single baseline|current`` makes one pass over the
first 65,536 packets with one build, for callgrind to count the reader's loop alone:

    valgrind --tool=callgrind --toggle-collect='*Reader__parse*' .venv/bin/python -m bench.ab_decode OTHER.so --single current
"""

from __future__ import annotations

import argparse
import importlib.util
import mmap
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np

from bench.captures import write_tcp_capture

N = 1 << 20
BATCH = 65536


def load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("baseline._native", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rate(native: ModuleType, path: Path, n_expected: int = N) -> float:
    """Packets per CPU second of one pass over the capture."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        headers = np.empty(BATCH, np.dtype((np.void, 64)))
        offsets, caplens, linktypes = np.empty(BATCH, np.uint64), np.empty(BATCH, np.uint32), np.empty(BATCH, np.uint32)
        reader = native.Reader(mm)
        n = 0
        t0 = time.process_time()
        while got := reader.read_into(headers, None, offsets, caplens, linktypes):
            n += got
        seconds = time.process_time() - t0
        reader.release()
    assert n == n_expected
    return n / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("baseline", help="the other build's _native*.so")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--vxlan", action="store_true", help="the frames inside VXLAN")
    ap.add_argument("--single", choices=["baseline", "current"], help="one pass over 65,536 packets (for callgrind)")
    args = ap.parse_args()
    import pyclassify._native as current

    builds = {"baseline": load(args.baseline), "this checkout": current}
    with tempfile.TemporaryDirectory() as tmp:
        n = BATCH if args.single else N
        i = np.arange(n, dtype=np.uint32)
        path = write_tcp_capture(
            Path(tmp) / "million.pcap", n, 1024 + i % 60000, src_low_bytes=i % 250, vxlan=args.vxlan
        )
        if args.single:
            rate(builds["baseline" if args.single == "baseline" else "this checkout"], path, n)
            return
        rates: dict[str, list[float]] = {name: [] for name in builds}
        for _ in range(args.rounds):
            for name, native in builds.items():
                rates[name].append(rate(native, path))
    for name, rs in rates.items():
        rs.sort()
        print(
            f"{name}: best {rs[-1] / 1e6:.2f} M packets/s, median {rs[len(rs) // 2] / 1e6:.2f} "
            f"({args.rounds} rounds, in turns)"
        )
    base, ours = sorted(rates["baseline"]), sorted(rates["this checkout"])
    print(
        f"this checkout / baseline: {ours[len(ours) // 2] / base[len(base) // 2]:.3f} (medians), "
        f"{ours[-1] / base[-1]:.3f} (best)"
    )


if __name__ == "__main__":
    main()
