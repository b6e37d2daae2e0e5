"""AWS VPC Flow Logs in Parquet (as delivered to S3 with ``FileFormat=parquet``), read with
pyarrow a row group's batch at a time into the header batch and counts (``records``), column by
column: addresses split and converted by Arrow's compute kernels, IPv6 ones once per distinct
address; no Python per record. pyarrow is the optional extra ``pyclassify[parquet]``.

Columns are VPC's field names with ``_`` for ``-`` (``srcaddr``, ``pkt_srcaddr``, ``log_status``,
``tcp_flags``...); the rules for which end opened the connection are the text reader's
(``rust/core/src/records/vpc.rs``): SYN without ACK states it; a service port (below 32768)
talking to an ephemeral one (32768 and up) is the reply, turned around."""

from __future__ import annotations

import ipaddress
from typing import IO, Any, Iterator

import numpy as np
import numpy.typing as npt

from pyclassify.batch import FLOW_COUNTS_DTYPE, HEADER_DTYPE

COLUMNS = ("srcaddr", "dstaddr", "pkt_srcaddr", "pkt_dstaddr", "srcport", "dstport", "protocol", "packets", "bytes",
           "start", "end", "action", "log_status", "tcp_flags")
BATCH = 1 << 16
FLAG_HAS_PORTS = 32
SECOND = 1_000_000_000


def _pyarrow() -> tuple[Any, Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        from pyclassify.records import RecordError

        raise RecordError("Parquet flow logs need pyarrow: pip install 'pyclassify[parquet]'") from None
    return pa, pc, pq


def _addresses(col: Any, pc: Any) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.bool_], npt.NDArray[np.uint8]]:
    """16-byte addresses (IPv4 mapped), whether each was one, and its IP version."""
    n = len(col)
    out = np.zeros((n, 16), np.uint8)
    ok = np.zeros(n, bool)
    version = np.zeros(n, np.uint8)
    col = pc.fill_null(col.cast("string"), "-")
    v4 = np.asarray(pc.match_substring_regex(col, r"^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$"), dtype=bool)
    if v4.any():
        parts = pc.list_flatten(pc.split_pattern(pc.filter(col, v4), "."))
        octets = np.asarray(parts.cast("int32")).reshape(-1, 4)
        good = (octets <= 255).all(axis=1)
        rows = np.flatnonzero(v4)
        out[rows, 10:12] = 0xFF
        out[rows, 12:] = octets.astype(np.uint8)
        ok[rows] = good
        version[rows] = 4
    v6 = np.asarray(pc.match_substring(col, ":"), dtype=bool)
    if v6.any():
        rows = np.flatnonzero(v6)
        texts = pc.filter(col, v6)
        uniq = pc.unique(texts)
        table = {}
        for t in uniq.to_pylist():  # once per distinct address
            try:
                table[t] = ipaddress.IPv6Address(t).packed
            except ValueError:
                table[t] = None
        index = np.asarray(pc.index_in(texts, uniq))
        packed = [table[t] for t in uniq.to_pylist()]
        for j, row in enumerate(rows.tolist()):
            b = packed[index[j]]
            if b is not None:
                out[row] = np.frombuffer(b, np.uint8)
                ok[row] = True
                version[row] = 6
    return out, ok, version


def read(stream: IO[bytes], head: bytes, name: str, problems: dict[str, int] | None = None,
         path: str | None = None) -> Iterator[tuple[npt.NDArray[Any], npt.NDArray[Any]]]:
    """(headers, counts) batches of a Parquet file of VPC Flow Logs; records lacking an
    address or protocol, or with a log status other than OK, are skipped and counted in
    ``problems``. ``path``: the file itself, read a row group at a time; else (stdin, a
    compressed file) ``stream`` is read whole, since Parquet's footer is at its end."""
    pa, pc, pq = _pyarrow()
    import io

    try:
        f = pq.ParquetFile(path) if path is not None else pq.ParquetFile(io.BytesIO(head + stream.read()))
    except Exception as e:  # noqa: BLE001 - pyarrow raises its own error types
        from pyclassify.records import RecordError

        raise RecordError(f"{name}: not a Parquet file pyarrow can read: {e}") from None
    names = {n.replace("-", "_"): n for n in f.schema_arrow.names}
    if not ({"srcaddr", "pkt_srcaddr"} & names.keys() and {"dstaddr", "pkt_dstaddr"} & names.keys() and "protocol" in names):
        from pyclassify.records import RecordError

        raise RecordError(f"{name}: the Parquet columns name no source or destination address or no protocol "
                          f"(unknown field order): {', '.join(f.schema_arrow.names)}")
    problems = problems if problems is not None else {}
    position = 0
    for batch in f.iter_batches(batch_size=BATCH, columns=[names[c] for c in COLUMNS if c in names]):
        cols = {c: batch.column(batch.schema.get_field_index(names[c])) for c in COLUMNS if c in names}
        n = batch.num_rows

        def ints(c: str) -> npt.NDArray[np.int64]:
            if c not in cols:
                return np.zeros(n, np.int64)
            return np.asarray(pc.fill_null(cols[c].cast("int64"), 0))

        src, src_ok, src_v = _addresses(cols.get("srcaddr", pa.nulls(n)), pc)
        dst, dst_ok, dst_v = _addresses(cols.get("dstaddr", pa.nulls(n)), pc)
        for pkt, plain, plain_ok in (("pkt_srcaddr", src, src_ok), ("pkt_dstaddr", dst, dst_ok)):
            if pkt in cols:
                a, a_ok, _ = _addresses(cols[pkt], pc)
                plain[a_ok] = a[a_ok]
                plain_ok |= a_ok
        status_ok = np.ones(n, bool)
        if "log_status" in cols:
            status_ok = np.asarray(pc.fill_null(pc.equal(cols["log_status"], "OK"), False), dtype=bool)
        proto = ints("protocol")
        keep = src_ok & dst_ok & status_ok & (proto >= 0) & (proto < 256)
        for reason, mask in (("nodata", ~status_ok), ("bad_address", status_ok & ~(src_ok & dst_ok))):
            k = int(np.count_nonzero(mask))
            if k:
                problems[reason] = problems.get(reason, 0) + k
        rows = np.flatnonzero(keep)
        h = np.zeros(len(rows), HEADER_DTYPE)
        c = np.zeros(len(rows), FLOW_COUNTS_DTYPE)
        sport, dport = ints("srcport")[rows].astype(np.uint16), ints("dstport")[rows].astype(np.uint16)
        p = proto[rows].astype(np.uint8)
        flags = ints("tcp_flags")[rows]
        syn_only = (p == 6) & (flags & 0x12 == 0x02)
        reply = ~syn_only & (sport < 32768) & (dport >= 32768)
        s, d = src[rows], dst[rows]
        h["src_addr"] = np.where(reply[:, None], d, s)
        h["dst_addr"] = np.where(reply[:, None], s, d)
        h["sport"] = np.where(reply, dport, sport)
        h["dport"] = np.where(reply, sport, dport)
        h["protocol"] = p
        h["ip_version"] = np.where(src_v[rows] > 0, src_v[rows], dst_v[rows])
        ported = np.isin(p, (6, 17, 132, 136))
        h["flags"] = np.where(ported, FLAG_HAS_PORTS, 0)
        h["sport"][~ported] = 0
        h["dport"][~ported] = 0
        h["tcp_flags"] = np.where(p == 6, 2, 0)
        h["icmp_type"] = np.where(p == 1, 8, np.where(p == 58, 128, 0))
        start, end = ints("start")[rows], ints("end")[rows]
        h["ts_ns"] = start.astype(np.uint64) * SECOND
        c["first_ns"] = h["ts_ns"]
        c["last_ns"] = end.astype(np.uint64) * SECOND
        c["packets"] = ints("packets")[rows].astype(np.uint64)
        c["bytes"] = ints("bytes")[rows].astype(np.uint64)
        c["flows"] = (~reply).astype(np.uint64)
        c["position"] = position + rows.astype(np.uint64) + 1  # row number, from 1
        c["src_name"] = c["dst_name"] = 0xFFFFFFFF
        if "action" in cols:
            action = cols["action"]
            accept = np.asarray(pc.fill_null(pc.equal(action, "ACCEPT"), False), dtype=bool)[rows]
            reject = np.asarray(pc.fill_null(pc.equal(action, "REJECT"), False), dtype=bool)[rows]
            c["reported"] = np.where(accept, 1, np.where(reject, 2, 0))
        c["orientation"] = np.where(reply, 2, np.where(syn_only, 1, 0))
        c["has_src"] = c["has_dst"] = 1
        position += n
        yield h, c
