"""The peers the benchmarks measure pyclassify beside, in the same run (issue 15): small C
programs in this folder built against the system's library of each peer, in the benchmark's
temporary folder. A peer whose library is not installed is a skip that names the Debian package,
never a missing column passed off as measured.

- ``rte_acl_bench.c``: DPDK's ``rte_acl`` (Debian ``dpdk-dev``) on a ClassBench ruleset and trace;
- ``pcap_loop.c``: a libpcap ``pcap_next_ex`` read loop (Debian ``libpcap-dev``);
- the libnetfilter_queue consumer lives with the enforcement tests (``tests/enforce/c``).

pyclassify's own side of a comparison that does not go through the Python package (the ClassBench
classifiers, which the engine's decisions do not use and the shipped extension does not carry) is
a binary of ``rust/core`` built with its ``bench`` feature: :func:`cargo_bin`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

#: peer -> (pkg-config module, Debian package, extra compiler flags)
PEERS = {
    "rte_acl_bench": ("libdpdk", "dpdk-dev", ("-O3", "-march=native")),
    "pcap_loop": ("libpcap", "libpcap-dev", ("-O2",)),
}


class PeerMissing(RuntimeError):
    """The peer cannot be built here; the message says why and what to install."""


def build(name: str, out_dir: Path) -> Path:
    """``<name>.c`` compiled into ``out_dir`` against its library; raises :class:`PeerMissing`."""
    module, package, flags = PEERS[name]
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise PeerMissing("no C compiler (gcc) in PATH")
    if shutil.which("pkg-config") is None:
        raise PeerMissing("no pkg-config in PATH (Debian pkg-config)")
    cfg = subprocess.run(["pkg-config", "--cflags", "--libs", module], capture_output=True, text=True)
    if cfg.returncode != 0:
        raise PeerMissing(f"{module} not installed (Debian {package}): {cfg.stderr.strip()}")
    exe = out_dir / name
    proc = subprocess.run(
        [gcc, *flags, "-o", str(exe), str(HERE / f"{name}.c"), *cfg.stdout.split()], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise PeerMissing(f"gcc {name}.c against {module}: {proc.stderr.strip()[-2000:]}")
    return exe


def cargo_bin(name: str) -> Path:
    """The release build of ``rust/core``'s binary ``name`` (cargo builds it if it is not up to
    date, in the workspace's target directory); raises :class:`PeerMissing` without cargo."""
    cargo = shutil.which("cargo")
    if cargo is None:
        raise PeerMissing("no cargo in PATH (the Rust toolchain builds pyclassify's side)")
    manifest = HERE.parents[1] / "rust" / "Cargo.toml"
    proc = subprocess.run(
        [cargo, "build", "--release", "--manifest-path", str(manifest), "-p", "pyclassify-core", "--bin", name]
        + ["--message-format=json-render-diagnostics"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"cargo build --bin {name}: {proc.stderr.strip()[-2000:]}")
    for line in proc.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["target"]["name"] == name:
            return Path(msg["executable"])
    raise RuntimeError(f"cargo build --bin {name} named no executable")


def build_or_skip(name: str, out_dir: Path) -> Path:
    try:
        return build(name, out_dir)
    except PeerMissing as e:
        pytest.skip(f"peer {name} not measured: {e}")


def run_json(cmd: list[str], timeout: float = 600) -> dict:
    """Run a peer; its last stdout line is its JSON report (the lines before it: ``"_stdout"``)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    *before, last = proc.stdout.strip().splitlines()
    return {**json.loads(last), "_stdout": "\n".join(before)}
