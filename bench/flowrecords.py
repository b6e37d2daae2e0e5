"""Flow record files of a generated cluster's traffic, for the record benchmarks: the
connections ``bench.cluster.capture_flows`` draws (edges the teams intend, random, DNS,
inbound, outbound, blocked), repeated to any number of records, written as Hubble JSON lines,
VPC Flow Logs text, conntrack -L lines, IPFIX messages (numpy, no Python per record) or
Parquet (with pyarrow)."""

from __future__ import annotations

import json
import struct
from ipaddress import IPv4Address
from pathlib import Path

import numpy as np

from bench.cluster import Cluster, capture_flows

START = 1_767_225_600  # 2026-01-01T00:00:00Z
CHUNK = 100_000


def _flows(cluster: Cluster, distinct: int, seed: int) -> dict[str, np.ndarray]:
    flows = capture_flows(cluster, distinct, seed)
    return {
        "src": np.array([int(IPv4Address(f.src)) for f in flows], np.uint32),
        "dst": np.array([int(IPv4Address(f.dst)) for f in flows], np.uint32),
        "proto": np.array([6 if f.proto == "TCP" else 17 for f in flows], np.uint8),
        "sport": np.array([f.sport for f in flows], np.uint16),
        "dport": np.array([f.dport for f in flows], np.uint16),
    }


def _pick(base: dict[str, np.ndarray], start: int, n: int, g: np.random.Generator) -> dict[str, np.ndarray]:
    idx = g.integers(0, len(base["src"]), n)
    out = {k: v[idx] for k, v in base.items()}
    out["sport"] = (32768 + (out["sport"].astype(np.int64) + np.arange(start, start + n)) % 28000).astype(np.uint16)
    out["packets"] = g.integers(1, 200, n).astype(np.uint64)
    out["bytes"] = out["packets"] * g.integers(60, 1500, n).astype(np.uint64)
    out["t"] = (START + (np.arange(start, start + n) // 1000)).astype(np.uint64)
    return out


def _ip(v: np.ndarray) -> list[str]:
    b = v.astype(">u4").view(np.uint8).reshape(-1, 4)
    return [f"{a}.{c}.{d}.{e}" for a, c, d, e in b.tolist()]


def write(cluster: Cluster, path: Path, fmt: str, records: int, distinct: int = 50_000, seed: int = 1) -> Path:
    """``records`` records of ``distinct`` connections in format ``fmt``."""
    base = _flows(cluster, distinct, seed)
    g = np.random.default_rng(seed)
    if fmt == "parquet":
        return _parquet(base, path, records, g)
    with open(path, "wb") as f:
        if fmt == "vpc":
            f.write(
                b"version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action log-status\n"
            )
        for at in range(0, records, CHUNK):
            n = min(CHUNK, records - at)
            r = _pick(base, at, n, g)
            f.write(_render(fmt, r))
    return path


def _render(fmt: str, r: dict[str, np.ndarray]) -> bytes:
    if fmt == "ipfix":
        return _ipfix(r)
    src, dst = _ip(r["src"]), _ip(r["dst"])
    rows = zip(
        src,
        dst,
        r["proto"].tolist(),
        r["sport"].tolist(),
        r["dport"].tolist(),
        r["packets"].tolist(),
        r["bytes"].tolist(),
        r["t"].tolist(),
    )
    if fmt == "hubble":
        lines = []
        for s, d, p, sp, dp, _pk, _by, t in rows:
            l4 = "TCP" if p == 6 else "UDP"
            flags = ',"flags":{"SYN":true}' if p == 6 else ""
            lines.append(
                f'{{"flow":{{"time":"2026-01-01T00:{(t - START) // 60 % 60:02d}:{(t - START) % 60:02d}.000000000Z",'
                f'"uuid":"00000000-0000-0000-0000-000000000000","verdict":"FORWARDED","ethernet":{{"source":"02:00:00:00:00:01","destination":"02:00:00:00:00:02"}},'
                f'"IP":{{"source":"{s}","destination":"{d}","ipVersion":"IPv4"}},"l4":{{"{l4}":{{"source_port":{sp},"destination_port":{dp}{flags}}}}},'
                f'"source":{{"ID":1234,"identity":5678,"namespace":"ns","labels":["k8s:app=a"],"pod_name":"a-1"}},'
                f'"destination":{{"ID":4321,"identity":8765,"namespace":"ns","labels":["k8s:app=b"],"pod_name":"b-1"}},'
                f'"Type":"L3_L4","node_name":"node-1","event_type":{{"type":4}},"traffic_direction":"EGRESS","is_reply":false,'
                f'"trace_observation_point":"TO_ENDPOINT","Summary":"TCP Flags: SYN"}},"node_name":"node-1","time":"2026-01-01T00:00:00Z"}}'
            )
        return ("\n".join(lines) + "\n").encode()
    if fmt == "vpc":
        return (
            "\n".join(
                f"2 123456789012 eni-0123456789abcdef0 {s} {d} {sp} {dp} {p} {pk} {by} {t} {t + 60} ACCEPT OK"
                for s, d, p, sp, dp, pk, by, t in rows
            )
            + "\n"
        ).encode()
    if fmt == "conntrack":
        return (
            "\n".join(
                f"{'tcp' if p == 6 else 'udp'}      {p} 431999 {'ESTABLISHED ' if p == 6 else ''}src={s} dst={d} "
                f"sport={sp} dport={dp} packets={pk} bytes={by} src={d} dst={s} sport={dp} dport={sp} "
                f"packets=1 bytes=60 [ASSURED] mark=0 use=1"
                for s, d, p, sp, dp, pk, by, t in rows
            )
            + "\n"
        ).encode()
    raise ValueError(fmt)


# IPFIX template 256: src, dst, sport, dport, protocol, packets (8), octets (8), start ms, end ms
_FIELDS = [(8, 4), (12, 4), (7, 2), (11, 2), (4, 1), (2, 8), (1, 8), (152, 8), (153, 8)]
_REC = np.dtype(
    [
        ("src", ">u4"),
        ("dst", ">u4"),
        ("sport", ">u2"),
        ("dport", ">u2"),
        ("proto", "u1"),
        ("packets", ">u8"),
        ("bytes", ">u8"),
        ("start", ">u8"),
        ("end", ">u8"),
    ]
)
_PER_MESSAGE = 1400 // _REC.itemsize


def _ipfix(r: dict[str, np.ndarray]) -> bytes:
    n = len(r["src"])
    rec = np.zeros(n, _REC)
    for k in ("src", "dst", "sport", "dport", "proto", "packets", "bytes"):
        rec[k] = r[k]
    rec["start"] = r["t"] * 1000
    rec["end"] = r["t"] * 1000 + 60_000
    template = struct.pack(">HH", 256, len(_FIELDS)) + b"".join(struct.pack(">HH", i, ln) for i, ln in _FIELDS)
    template_set = struct.pack(">HH", 2, 4 + len(template)) + template
    out = []
    for k, at in enumerate(range(0, n, _PER_MESSAGE)):
        body = rec[at : at + _PER_MESSAGE].tobytes()
        sets = (template_set if k == 0 else b"") + struct.pack(">HH", 256, 4 + len(body)) + body
        out.append(struct.pack(">HHIII", 10, 16 + len(sets), START, k, 1) + sets)
    return b"".join(out)


def _parquet(base: dict[str, np.ndarray], path: Path, records: int, g: np.random.Generator) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    for at in range(0, records, CHUNK * 5):
        n = min(CHUNK * 5, records - at)
        r = _pick(base, at, n, g)
        table = pa.table(
            {
                "version": pa.array(np.full(n, 2, np.int32)),
                "account_id": pa.array(["123456789012"] * n),
                "interface_id": pa.array(["eni-0123456789abcdef0"] * n),
                "srcaddr": pa.array(_ip(r["src"])),
                "dstaddr": pa.array(_ip(r["dst"])),
                "srcport": pa.array(r["sport"].astype(np.int32)),
                "dstport": pa.array(r["dport"].astype(np.int32)),
                "protocol": pa.array(r["proto"].astype(np.int32)),
                "packets": pa.array(r["packets"].astype(np.int64)),
                "bytes": pa.array(r["bytes"].astype(np.int64)),
                "start": pa.array(r["t"].astype(np.int64)),
                "end": pa.array((r["t"] + 60).astype(np.int64)),
                "action": pa.array(["ACCEPT"] * n),
                "log_status": pa.array(["OK"] * n),
            }
        )
        if writer is None:
            writer = pq.ParquetWriter(str(path), table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()
    return path


__all__ = ["write", "json"]
