"""Floods for the enforce tests and benchmarks: the C sender (tests/enforce/c/flood.c) and the
C libnetfilter_queue baseline consumer (c/nfq_accept.c), compiled once per session with gcc,
and a UDP counter for the receiving pod. Every flood stays between the tests' namespaces."""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests.enforce.netns import PY, Topology, sh

C = Path(__file__).resolve().parent / "c"

# In a pod: count UDP datagrams on a port until told to stop (a line on stdin), print the count.
COUNTER = r"""
import socket, sys, threading
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], int(sys.argv[2]))); s.settimeout(0.2)
n, done = 0, threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), done.set()), daemon=True).start()
print("ready", flush=True)
while not done.is_set():
    try:
        s.recv(64); n += 1
    except OSError:
        pass
print(n, flush=True)
"""


def compile_c(name: str, out_dir: Path, libs: tuple[str, ...] = ()) -> Path:
    """``c/<name>.c`` built into ``out_dir``; raises with the compiler's message."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise RuntimeError("no C compiler (gcc) in PATH")
    exe = out_dir / name
    proc = subprocess.run([gcc, "-O2", "-o", str(exe), str(C / f"{name}.c"), *libs], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"gcc {name}.c: {proc.stderr.strip()}")
    return exe


def flood(
    topo: Topology,
    exe: Path,
    src: int,
    dst: int,
    proto: str,
    port: int,
    seconds: float,
    first_host: int = 10,
    hosts: int = 200,
    pps: int = 0,
) -> int:
    """From pod ``src``: ``proto`` ("tcp" SYNs or "udp") to pod ``dst``'s ``port`` from ``hosts``
    addresses of pod ``src``'s /24 (spoofed: none is a pod) and many ports; returns packets sent."""
    net = topo.ips[src].rsplit(".", 1)[0]
    out = sh(
        "ip",
        "netns",
        "exec",
        topo.pods[src],
        str(exe),
        topo.ips[dst],
        str(port),
        proto,
        net,
        str(first_host),
        str(hosts),
        str(seconds),
        str(pps),
    ).stdout
    return int(out.split()[-1])


def kernel_queue(topo: Topology, queue: int = 0) -> dict[str, int]:
    """The node namespace's /proc/net/netfilter/nfnetlink_queue row of ``queue``."""
    text = sh("ip", "netns", "exec", topo.node, "cat", "/proc/net/netfilter/nfnetlink_queue").stdout
    for line in text.splitlines():
        cols = line.split()
        if cols and int(cols[0]) == queue:
            return {
                "depth": int(cols[2]),
                "queue_dropped": int(cols[5]),
                "user_dropped": int(cols[6]),
                "id_sequence": int(cols[7]),
            }
    return {}


def queued_by_rules(topo: Topology, chain: str = "PYCLASSIFY-FORWARD") -> int:
    """Packets that reached the NFQUEUE rule of ``chain`` (iptables counters)."""
    text = sh("ip", "netns", "exec", topo.node, "iptables", "-t", "filter", "-L", chain, "-v", "-x", "-n").stdout
    return sum(int(line.split()[0]) for line in text.splitlines() if "NFQUEUE" in line)


class Counter:
    """A UDP datagram counter in pod ``pod`` on ``port``."""

    def __init__(self, topo: Topology, pod: int, port: int) -> None:
        self.proc = topo.spawn(topo.pods[pod], [PY, "-c", COUNTER, topo.ips[pod], str(port)], stdin=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())


class Pinger:
    """``with Pinger(held):`` pings a held connection every ``every`` seconds in a thread of its
    own while the block runs; ``results`` has each ping's outcome."""

    def __init__(self, held: Any, every: float = 0.2) -> None:
        self.held, self.every = held, every
        self.results: list[bool] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.results.append(self.held.ping())

    def __enter__(self) -> Pinger:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
