"""AWS VPC Flow Logs in Parquet (as delivered to S3 with ``FileFormat=parquet``), read with
pyarrow a row group's batch at a time; the batch's Arrow buffers (strings as they are, with
32- or 64-bit offsets) go straight to Rust
(``_engine.vpc_columns``), which makes the header batch and counts (``records``) with the text
reader's rules: no Python per record. pyarrow is the optional extra ``pyclassify[parquet]``.

Columns are VPC's field names with ``_`` for ``-`` (``srcaddr``, ``pkt_srcaddr``, ``log_status``,
``tcp_flags``...); the rules for which end opened the connection are the text reader's
(``rust/core/src/records/vpc.rs``): SYN without ACK states it; a service port (below 32768)
talking to an ephemeral one (32768 and up) is the reply, turned around."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from pyclassify import _engine
from pyclassify.batch import FLOW_COUNTS_DTYPE, HEADER_DTYPE

COLUMNS = ("srcaddr", "dstaddr", "pkt_srcaddr", "pkt_dstaddr", "srcport", "dstport", "protocol", "packets", "bytes",
           "start", "end", "action", "log_status", "tcp_flags")
TEXT_COLUMNS = ("srcaddr", "dstaddr", "pkt_srcaddr", "pkt_dstaddr", "action", "log_status")
BATCH = 1 << 16
KEPT = 3  # problems kept with their row, per reason and file (as the text readers keep them)


def _pyarrow() -> tuple[Any, Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        from pyclassify.records import RecordError

        raise RecordError("Parquet flow logs need pyarrow: pip install 'pyclassify[parquet]'") from None
    return pa, pc, pq


def read(stream: IO[bytes], head: bytes, name: str, problems: dict[str, int] | None = None,
         path: str | None = None, first_problems: list[tuple[str, int, str]] | None = None,
         row_groups: tuple[int, int, int] | None = None) -> Iterator[tuple[npt.NDArray[Any], npt.NDArray[Any]]]:
    """(headers, counts) batches of a Parquet file of VPC Flow Logs; records lacking an
    address or protocol, or with a log status other than OK, are skipped and counted in
    ``problems`` (the first ``KEPT`` of each reason in ``first_problems``). ``path``: the file
    itself, read a row group at a time; else (stdin, a compressed file) ``stream`` is read
    whole, since Parquet's footer is at its end. ``row_groups``: (first, end, the first one's
    first row): only those row groups, rows numbered as in the whole file."""
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
    position = 0 if row_groups is None else row_groups[2]
    groups = None if row_groups is None else list(range(row_groups[0], row_groups[1]))
    for batch in f.iter_batches(batch_size=BATCH, row_groups=groups, columns=[names[c] for c in COLUMNS if c in names]):
        n = batch.num_rows
        text, ints = {}, {}
        for c in COLUMNS:
            if c not in names:
                continue
            col = batch.column(batch.schema.get_field_index(names[c]))
            if c in TEXT_COLUMNS:
                # Arrow strings as they are (32- or 64-bit offsets): no copy; other types cast
                if col.type not in (pa.string(), pa.large_string()):
                    col = col.cast(pa.large_string())
                valid, offsets, data = col.buffers()
                text[c] = (offsets, data if data is not None else b"", valid, col.offset,
                           4 if col.type == pa.string() else 8)
            else:
                ints[c] = np.ascontiguousarray(np.asarray(pc.fill_null(col.cast(pa.int64()), 0)), dtype=np.int64)
        h, flow_counts, (counts, first) = _engine.vpc_columns(n, position + 1, text, ints)
        before = dict(problems)
        for reason, k in counts:
            problems[reason] = problems.get(reason, 0) + k
        if first_problems is not None:
            for r, p, d in first:
                if before.get(r, 0) < KEPT:
                    first_problems.append((r, int(p), d))
                    before[r] = before.get(r, 0) + 1
        position += n
        yield np.frombuffer(h, HEADER_DTYPE), np.frombuffer(flow_counts, FLOW_COUNTS_DTYPE)
