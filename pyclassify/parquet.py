"""AWS VPC Flow Logs in Parquet (as delivered to S3 with ``FileFormat=parquet``), read with
pyarrow a row group at a time; the Arrow buffers go straight to Rust (``_engine.VpcColumns``),
which makes the header batch and counts (``records``) with the text reader's rules: no Python
per record. Text columns the file stores dictionary-encoded (as Parquet writers, AWS's among
them, store such columns) are read as Arrow dictionaries: Rust works out each distinct address,
action and log status once and maps the rows through their indices; other text columns go over
as Arrow strings (32- or 64-bit offsets), int32 and int64 columns as they are (a null is the
text's ``-``). pyarrow is the optional extra ``pyclassify[parquet]``.

Columns are VPC's field names with ``_`` for ``-`` (``srcaddr``, ``pkt_srcaddr``, ``log_status``,
``tcp_flags``...); the rules for which end opened the connection are the text reader's
(``rust/core/src/records/vpc.rs``): SYN without ACK states it; a service port (below 32768)
talking to an ephemeral one (32768 and up) is the reply, turned around."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from pyclassify import _engine
from pyclassify.batch import FLOW_COUNTS_DTYPE, HEADER_DTYPE

COLUMNS = (
    "srcaddr",
    "dstaddr",
    "pkt_srcaddr",
    "pkt_dstaddr",
    "srcport",
    "dstport",
    "protocol",
    "packets",
    "bytes",
    "start",
    "end",
    "action",
    "log_status",
    "tcp_flags",
)
TEXT_COLUMNS = ("srcaddr", "dstaddr", "pkt_srcaddr", "pkt_dstaddr", "action", "log_status")
# Rows handed to Rust at a time (a row group's dictionaries are worked out once per slice).
BATCH = 1 << 16
KEPT = 3  # problems kept with their row, per reason and file (as the text readers keep them)
# A number as VPC's text writes one: other text in a column of integers reads as its `-`.
_DIGITS = "^[0-9]{1,18}$"


class ParquetError(ValueError):
    """A Parquet file read as VPC Flow Logs that cannot be: the message names the file, and the
    row and field where one is at fault (``records`` says it as a ``RecordError``)."""


def _error(message: str) -> ParquetError:
    return ParquetError(message)


def load_pyarrow() -> tuple[Any, Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        raise _error("Parquet flow logs need pyarrow: pip install 'pyclassify[parquet]'") from None
    return pa, pc, pq


@contextlib.contextmanager
def _reading_pool(pa: Any) -> Iterator[None]:
    """Readers made inside allocate their row groups from the system allocator: a row group's
    buffers are freed before the next is read, and pyarrow's default mimalloc hands such large
    blocks back to the kernel, so every row group would fault in freshly zeroed pages; malloc
    keeps them for the next (bench/parquet_pool.py measures the two). ``ParquetFile`` takes no
    pool: its reader keeps the default pool of the moment it is made."""
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(previous)


def _dictionary_columns(f: Any, names: dict[str, str]) -> list[str]:
    """The text columns every row group stores with a dictionary (read as Arrow dictionaries)."""
    md = f.metadata
    leaf = {md.schema.column(j).path: j for j in range(md.num_columns)}
    out = []
    for c in TEXT_COLUMNS:
        j = leaf.get(names.get(c, ""))
        if j is not None and all(md.row_group(r).column(j).has_dictionary_page for r in range(md.num_row_groups)):
            out.append(names[c])
    return out


def _width(pa: Any, t: Any) -> int:
    return 8 if t == pa.large_string() else 4


def _text(pa: Any, col: Any, what: str) -> tuple[Any, ...]:
    """A text column's buffers for ``VpcColumns.read``: a dictionary's strings with the rows'
    indices, or the strings row by row."""
    strings = (pa.string(), pa.large_string())
    if pa.types.is_dictionary(col.type):
        if col.type.index_type == pa.int32() and col.type.value_type in strings:
            d, ix = col.dictionary, col.indices
            d_valid, d_offsets, d_data = d.buffers()
            i_valid, i_data = ix.buffers()
            return (
                d_offsets,
                d_data if d_data is not None else b"",
                d_valid,
                d.offset,
                _width(pa, d.type),
                (i_data, i_valid, ix.offset),
            )
        col = col.dictionary_decode()
    if col.type not in strings:
        try:
            col = col.cast(pa.large_string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise _error(f"{what}: a {col.type} column, not text: {e}") from None
    valid, offsets, data = col.buffers()
    return offsets, data if data is not None else b"", valid, col.offset, _width(pa, col.type), None


def _first_bad(pa: Any, col: Any) -> tuple[int, Any]:
    """The first row (from 0) of ``col`` that does not cast to int64, and its value (only
    on the error's path)."""
    for i, v in enumerate(col.to_pylist()):
        try:
            pa.array([v], col.type).cast(pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return i, v
    return 0, None


def _ints(pa: Any, pc: Any, col: Any, what: str, first_row: int) -> tuple[Any, ...]:
    """An integer column's buffers for ``VpcColumns.read``: int32 and int64 as they are, others
    cast to int64 (text that is not a number as a null, as the text reader's ``-``)."""
    if col.type not in (pa.int32(), pa.int64()):
        if pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col = pc.if_else(pc.match_substring_regex(col, _DIGITS), col, pa.scalar(None, col.type))
        try:
            col = col.cast(pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            i, v = _first_bad(pa, col)
            raise _error(f"{what.format(row=first_row + i)}: {v!r} is not an integer ({col.type}): {e}") from None
    valid, data = col.buffers()
    return data, valid, col.offset, col.type.bit_width // 8


def read(
    stream: IO[bytes],
    head: bytes,
    name: str,
    problems: dict[str, int] | None = None,
    path: str | None = None,
    first_problems: list[tuple[str, int, str]] | None = None,
    row_groups: tuple[int, int, int] | None = None,
) -> Iterator[_engine.VpcColumns]:
    """The records of a Parquet file of VPC Flow Logs, a batch at a time, each batch held in
    Rust by the same ``VpcColumns`` (judge it, or take its ``arrays``, before the next); records lacking an
    address or protocol, or with a log status other than OK, are skipped and counted in
    ``problems`` (the first ``KEPT`` of each reason in ``first_problems``). ``path``: the file
    itself, read a row group at a time; else (stdin, a compressed file) ``stream`` is read
    whole, since Parquet's footer is at its end. ``row_groups``: (first, end, the first one's
    first row): only those row groups, rows numbered as in the whole file."""
    pa, pc, pq = load_pyarrow()
    try:
        whole = None if path is not None else pa.py_buffer(head + stream.read())
        with _reading_pool(pa):
            f = pq.ParquetFile(path if whole is None else pa.BufferReader(whole))
            names = {n.replace("-", "_"): n for n in f.schema_arrow.names}
            dictionary = _dictionary_columns(f, names)
            if dictionary:  # opened again to read those columns as dictionaries
                f = pq.ParquetFile(
                    path if whole is None else pa.BufferReader(whole), metadata=f.metadata, read_dictionary=dictionary
                )
    except Exception as e:  # noqa: BLE001 - pyarrow raises its own error types
        raise _error(f"{name}: not a Parquet file pyarrow can read: {e}") from None
    if not (
        {"srcaddr", "pkt_srcaddr"} & names.keys() and {"dstaddr", "pkt_dstaddr"} & names.keys() and "protocol" in names
    ):
        raise _error(
            f"{name}: the Parquet columns name no source or destination address or no protocol "
            f"(unknown field order): {', '.join(f.schema_arrow.names)}"
        )
    problems = problems if problems is not None else {}
    columns = _engine.VpcColumns()
    present = [c for c in COLUMNS if c in names]
    position = 0 if row_groups is None else row_groups[2]
    groups = range(f.metadata.num_row_groups) if row_groups is None else range(row_groups[0], row_groups[1])
    for group in groups:
        try:
            table = f.read_row_group(group, columns=[names[c] for c in present])
        except Exception as e:  # noqa: BLE001 - pyarrow raises its own error types
            raise _error(f"{name}: row group {group} (rows from {position + 1}): pyarrow cannot read it: {e}") from None
        for batch in table.to_batches(max_chunksize=BATCH):
            n = batch.num_rows
            text, ints = {}, {}
            for i, c in enumerate(present):
                col = batch.column(i)
                if c in TEXT_COLUMNS:
                    text[c] = _text(pa, col, f"{name}: rows {position + 1}-{position + n}: {names[c]}")
                else:
                    ints[c] = _ints(pa, pc, col, f"{name}: row {{row}}: {names[c]}", position + 1)
            counts, first = columns.read(n, position + 1, text, ints)
            before = dict(problems)
            for reason, k in counts:
                problems[reason] = problems.get(reason, 0) + k
            if first_problems is not None:
                for r, p, d in first:
                    if before.get(r, 0) < KEPT:
                        first_problems.append((r, int(p), d))
                        before[r] = before.get(r, 0) + 1
            position += n
            yield columns


def arrays(columns: _engine.VpcColumns) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """A batch's records as (headers, counts) arrays of their own."""
    headers, counts = columns.arrays()
    return np.frombuffer(headers, HEADER_DTYPE), np.frombuffer(counts, FLOW_COUNTS_DTYPE)
