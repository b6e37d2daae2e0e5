"""Read + decode throughput of the packet path (issue 5, item 6: the read+decode part).

A capture of 1,048,576 Ethernet/IPv4/TCP packets (74-byte frames, varying ports and addresses) is
generated in a temp dir with numpy (no scapy), then read and decoded into header batches by
``pyclassify.capture`` (Cython, mmap, nogil), by a plain-``struct`` Python loop, and by dpkt, all
extracting the same fields. Each prints packets/s and ns/packet; the last test prints the ratios.
The same packets inside VXLAN (124-byte frames, as on a node's uplink) are read by pyclassify too:
what opening the tunnel costs.

    .venv/bin/python -m pytest bench/test_bench_decode.py -s --benchmark-columns=min,mean,rounds
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from bench.captures import write_tcp_capture
from pyclassify.capture import open_capture

N = 1 << 20
RESULTS: dict[str, float] = {}  # name -> packets/s (best round)


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    i = np.arange(N, dtype=np.uint32)
    path = tmp_path_factory.mktemp("bench") / "million.pcap"
    return write_tcp_capture(path, N, 1024 + i % 60000, src_low_bytes=i % 250)


@pytest.fixture(scope="module")
def vxlan_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    i = np.arange(N, dtype=np.uint32)
    path = tmp_path_factory.mktemp("bench") / "million-vxlan.pcap"
    return write_tcp_capture(path, N, 1024 + i % 60000, src_low_bytes=i % 250, vxlan=True)


def report(name: str, benchmark: object, n: int) -> None:
    stats = benchmark.stats.stats  # type: ignore[attr-defined]
    rate = n / stats.min
    RESULTS[name] = rate
    print(f"\n{name}: {rate / 1e6:.2f} M packets/s, {1e9 / rate:.1f} ns/packet (best of {stats.rounds})")


def pyclassify_decode(path: Path) -> int:
    total = 0
    ports = 0
    with open_capture(path, batch_size=65536, quotes=False) as cap:
        for b in cap:
            total += len(b)
            ports += int(b.headers["dport"][-1])  # touch the result
    return total


def struct_decode(path: Path) -> int:
    data = path.read_bytes()
    out = []
    pos = 24
    rec = struct.Struct("<IIII").unpack_from
    ipf = struct.Struct(">BxHHHBB2x4s4s").unpack_from
    ports = struct.Struct(">HHIIxB").unpack_from
    end = len(data)
    while pos + 16 <= end:
        sec, usec, caplen, origlen = rec(data, pos)
        p = pos + 16
        if data[p + 12 : p + 14] == b"\x08\x00":
            vihl, total, ident, frag, ttl, proto, src, dst = ipf(data, p + 14)
            l4 = p + 14 + (vihl & 15) * 4
            sport = dport = flags = 0
            if proto in (6, 17) and not frag & 0x1FFF:
                sport, dport, _, _, flags = ports(data, l4)
            out.append((sec * 10**9 + usec * 1000, src, dst, proto, sport, dport, flags, origlen))
        pos = p + caplen
    return len(out)


def dpkt_decode(path: Path) -> int:
    dpkt = pytest.importorskip("dpkt")
    out = []
    with open(path, "rb") as f:
        for ts, buf in dpkt.pcap.Reader(f):
            eth = dpkt.ethernet.Ethernet(buf)
            ip = eth.data
            if isinstance(ip, dpkt.ip.IP):
                l4 = ip.data
                sport = getattr(l4, "sport", 0)
                dport = getattr(l4, "dport", 0)
                out.append((ts, ip.src, ip.dst, ip.p, sport, dport, getattr(l4, "flags", 0), len(buf)))
    return len(out)


@pytest.mark.parametrize(
    ("name", "fn", "rounds"),
    [("pyclassify", pyclassify_decode, 5), ("struct", struct_decode, 1), ("dpkt", dpkt_decode, 1)],
)
def test_read_decode(benchmark: object, capture: Path, name: str, fn: Callable[[Path], int], rounds: int) -> None:
    n = benchmark.pedantic(fn, args=(capture,), rounds=rounds, iterations=1, warmup_rounds=0)  # type: ignore[attr-defined]
    assert n == N
    report(name, benchmark, n)


def test_read_decode_vxlan(benchmark: object, vxlan_capture: Path) -> None:
    n = benchmark.pedantic(
        pyclassify_decode,
        args=(vxlan_capture,),
        rounds=5,
        iterations=1,  # type: ignore[attr-defined]
        warmup_rounds=0,
    )
    assert n == N
    report("pyclassify, inside VXLAN", benchmark, n)


def test_ratios() -> None:
    if "pyclassify" not in RESULTS:
        pytest.skip("run with the decode benchmarks")
    ours = RESULTS["pyclassify"]
    for base in ("struct", "dpkt"):
        if base in RESULTS:
            print(
                f"\npyclassify read+decode is {ours / RESULTS[base]:.0f}x {base} "
                f"({ours / 1e6:.2f} vs {RESULTS[base] / 1e6:.3f} M packets/s)"
            )
    if "pyclassify, inside VXLAN" in RESULTS:
        print(
            f"\ninside VXLAN, read+decode runs at {RESULTS['pyclassify, inside VXLAN'] / ours:.2f}x the plain capture's rate"
        )
    print(f"(measured {time.strftime('%Y-%m-%d')}, same capture, same run)")
