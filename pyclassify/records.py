"""Flow records as input: files of Hubble flows, Calico/Goldmane flow logs, VPC Flow Logs,
conntrack output, NetFlow/IPFIX messages (``pyclassify replay --traffic``, ``diff --traffic``,
``usage``).

A file is read in chunks (gzip and zstd decompressed on the way, by their C libraries) and each
chunk handed to the Rust reader of its format (``_engine.RecordStream``), which returns the
records it completed as a header batch (``HEADER_DTYPE``: the record as the packet that opens
its connection) and a parallel ``FLOW_COUNTS_DTYPE`` array (packets, bytes, flows, time range,
the record's own verdict). Python sees arrays, never a record: memory stays flat whatever the
file's size. Parquet (VPC Flow Logs) is read with pyarrow, column batches at a time.

Records that name endpoints instead of addresses (Goldmane, aggregated Calico flow logs) are
placed here, once per distinct name: a pod by namespace and name (a name ending in ``*``, as
Calico aggregates a workload's pods, stands for the first pod by name with that prefix), a host
endpoint or network set by name. What cannot be placed is counted, never judged silently.
"""

from __future__ import annotations

import gzip
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from pyclassify import _engine, batch
from pyclassify.batch import FLOW_COUNTS_DTYPE, HEADER_DTYPE
from pyclassify.inventory import EndpointKind, Inventory

#: Every format of ``--traffic``, as (name, what it is).
FORMATS: dict[str, str] = dict(_engine.record_formats())
#: The formats read as flow records (the rest: ``pcap``).
RECORD_FORMATS = tuple(f for f in FORMATS if f != "pcap")
CHUNK = 1 << 20  # bytes read at a time
BATCH = 1 << 16  # records judged at a time (at most; a chunk may complete fewer)
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
NO_NAME = 0xFFFFFFFF
REPORTED = {0: None, 1: "allow", 2: "deny", 3: "other"}
#: ``FlowCounts.reported_at``: the end whose decision a record's own verdict is (None: the connection).
REPORTED_AT = {0: None, 1: "egress", 2: "ingress"}
ORIENTATION = {0: "as recorded", 1: "stated", 2: "turned around"}


class RecordError(ValueError):
    """An input that cannot be read as asked (its message names the file)."""


def _zstd_reader(raw: IO[bytes], name: str) -> IO[bytes]:
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python >= 3.14

        return zstd.ZstdFile(raw)
    except ImportError:
        pass
    try:
        import zstandard
    except ImportError:
        raise RecordError(
            f"{name}: zstd-compressed: reading it needs Python 3.14 or the zstandard package "
            "(pip install 'pyclassify[zstd]')"
        ) from None
    return zstandard.ZstdDecompressor().stream_reader(raw)


def open_input(path: str) -> tuple[IO[bytes], bytes, str | None]:
    """The file (``-``: stdin) opened for reading, decompressed when it is gzip or zstd, with
    its first bytes (already read: hand them on first) and the compression found."""
    name = "<stdin>" if path == "-" else path
    try:
        raw: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115 - the caller closes it
    except OSError as e:
        raise RecordError(f"{name}: cannot open: {e.strerror or e}") from None
    head = raw.read(4)
    compression = None
    stream: IO[bytes] = raw
    if head.startswith(GZIP_MAGIC) or head == ZSTD_MAGIC:
        compression = "gzip" if head.startswith(GZIP_MAGIC) else "zstd"
        rest = _Prefixed(head, raw)
        if compression == "gzip":
            # both decompressors only read() it; typeshed asks a whole file object (seek, ...)
            stream = gzip.GzipFile(fileobj=rest, mode="rb")  # type: ignore[call-overload]
        else:
            stream = _zstd_reader(rest, name)  # type: ignore[arg-type]
        head = b""
        while len(head) < 4096:  # in small reads: a file cut short still gives what it holds
            try:
                piece = stream.read(256)
            except Exception as e:  # noqa: BLE001 - zlib.error, zstandard.ZstdError, OSError, EOFError...
                if not head:
                    raise RecordError(f"{name}: {compression}-compressed but cannot be decompressed: {e}") from None
                stream = _Failed(e, stream)  # type: ignore[assignment]
                break
            if not piece:
                break
            head += piece
    else:
        head += raw.read(4092)
    return stream, head, compression


def _read_into(stream: IO[bytes], buffer: bytearray) -> memoryview:
    """The next bytes of ``stream`` read into ``buffer`` (up to its size; none: the end), as a
    view of the part filled."""
    readinto = getattr(stream, "readinto", None)
    if readinto is None:
        data = stream.read(len(buffer))
        buffer[: len(data)] = data
        return memoryview(buffer)[: len(data)]
    return memoryview(buffer)[: readinto(buffer)]


class _Failed:
    """A stream whose next read raises what the one it stands for raised."""

    def __init__(self, error: Exception, stream: IO[bytes]) -> None:
        self.error, self.stream = error, stream

    def read(self, n: int = -1) -> bytes:
        raise OSError(str(self.error))

    def close(self) -> None:
        self.stream.close()


class _Prefixed:
    """A binary stream with bytes already read put back in front."""

    def __init__(self, head: bytes, raw: IO[bytes]) -> None:
        self.head, self.raw = head, raw

    def read(self, n: int = -1) -> bytes:
        if self.head:
            if n is None or n < 0:
                data, self.head = self.head + self.raw.read(), b""
                return data
            data, self.head = self.head[:n], self.head[n:]
            if len(data) < n:
                data += self.raw.read(n - len(data))
            return data
        return self.raw.read(n)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.raw.close()


def _regular(path: str) -> bool:
    """Whether ``path`` is a regular file (one that can be read twice); a path that cannot be
    stat'ed is left for opening it to report."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True


@dataclass
class RecordChunk:
    """Records read together: parallel ``headers``/``counts``, and the file they came from."""

    headers: npt.NDArray[Any]
    counts: npt.NDArray[Any]
    file: int  # index into ``RecordReader.files``


@dataclass
class JudgedChunk:
    """Records judged together, for per-record output: ``headers``, ``counts``, ``verdicts``
    (``VERDICT_DTYPE``; zeroed where a record was not placed) and ``services`` (the Service
    entry each was judged through, -1: none), parallel; and the file they came from."""

    headers: npt.NDArray[Any]
    counts: npt.NDArray[Any]
    verdicts: npt.NDArray[Any]
    services: npt.NDArray[np.int64]
    file: int
    #: the four arrays' bytes, as the judge returned them (``_engine.RecordLines`` reads these)
    raw: tuple[bytes, bytes, bytes, bytes]

    @classmethod
    def of(cls, kept: tuple[bytes, bytes, bytes, bytes], file: int) -> JudgedChunk:
        from pyclassify.batch import VERDICT_DTYPE

        h, c, v, s = kept
        return cls(
            np.frombuffer(h, HEADER_DTYPE),
            np.frombuffer(c, FLOW_COUNTS_DTYPE),
            np.frombuffer(v, VERDICT_DTYPE),
            np.frombuffer(s, np.int64),
            file,
            kept,
        )


@dataclass
class FileReport:
    """What one input file gave: its format, records, and problems by reason (the first few
    with their line, or byte offset for binary formats)."""

    name: str
    format: str
    compression: str | None = None
    records: int = 0
    problems: dict[str, int] = field(default_factory=dict)
    first: list[tuple[str, int, str]] = field(default_factory=list)
    #: a part of the file read alone: (first row group, end row group, first row) of a Parquet file
    part: tuple[int, int, int] | None = None

    KEPT = 3  # problems kept with their position, per reason (as the readers keep them)

    def continued_by(self, later: FileReport) -> bool:
        """Whether ``later`` reports the part of the same file right after this one's."""
        return (
            self.part is not None
            and later.part is not None
            and self.name == later.name
            and self.part[1] == later.part[0]
        )

    def joined(self, later: FileReport) -> FileReport:
        """This part's report and the next part's (``continued_by``), as one."""
        assert self.part is not None and later.part is not None
        problems = dict(self.problems)
        for reason, n in later.problems.items():
            problems[reason] = problems.get(reason, 0) + n
        first = list(self.first)
        kept: dict[str, int] = {}
        for reason, _, _ in first:
            kept[reason] = kept.get(reason, 0) + 1
        for reason, position, detail in later.first:
            if kept.get(reason, 0) < self.KEPT:
                first.append((reason, position, detail))
                kept[reason] = kept.get(reason, 0) + 1
        return FileReport(
            self.name,
            self.format,
            self.compression,
            self.records + later.records,
            problems,
            first,
            (self.part[0], later.part[1], self.part[2]),
        )

    @property
    def unit(self) -> str:
        return "byte" if self.format == "netflow" else "line"

    def problem_lines(self) -> list[str]:
        """Each problem kept, as ``file:line: reason: detail`` (``file: byte N: ...``)."""
        return [f"{where(self.name, self.unit, reason, pos)}: {reason}: {detail}" for reason, pos, detail in self.first]

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.name,
            "format": self.format,
            "compression": self.compression,
            "records": self.records,
            "problems": dict(sorted(self.problems.items())),
            "first": [{"reason": r, self.unit: p, "detail": d} for r, p, d in self.first],
        }


class RecordReader:
    """Reads flow record files in order, as batches of at most ``BATCH`` records.

    ``format`` None: each file's format from its content; a file of another format than the one
    asked is an error naming both. Names the records use are placed in ``inventory`` once each
    (``placements``). ``names``: what to call each file in reports, when not its path (a
    file read on another machine by another path)."""

    def __init__(
        self,
        paths: list[str],
        inventory: Inventory,
        format: str | None = None,
        names: list[str] | None = None,
        parts: list[tuple[int, int, int] | None] | None = None,
    ) -> None:
        if format is not None and format not in FORMATS:
            raise RecordError(f"--format {format}: not one of {', '.join(FORMATS)}")
        self.paths = paths
        self.display = names if names is not None else ["<stdin>" if p == "-" else p for p in paths]
        #: per path, the row groups of a Parquet file to read alone (None: all of it)
        self.parts = parts if parts is not None else [None] * len(paths)
        self.format = format
        self.placer = NamePlacer(inventory)
        self.files: list[FileReport] = []
        #: per file, the names its records used, by number
        self.names: list[list[tuple[str, str, str]]] = []

    def prepare(self) -> None:
        """Checks every input before any is judged: each opens, and is of a format ``--traffic``
        reads (and the one ``--format`` asks, when given), so that a mistaken file fails the run
        at once, naming it, rather than after the files before it were judged (standard input
        is checked when it is read). Loads what reading them needs beyond the standard library
        (pyarrow for a Parquet file), so that the time of reading them is not the time of
        importing it."""
        parquet_needed = False
        for path, name, part in zip(self.paths, self.display, self.parts):
            if path == "-" or not _regular(path):
                continue  # a pipe or a device is read once, when it is judged
            stream, head, _ = open_input(path)
            try:
                fmt = self._format(name, head, part)
            finally:
                stream.close()
            parquet_needed |= fmt == "parquet"
        if parquet_needed:
            from pyclassify import parquet

            try:
                parquet.load_pyarrow()
            except parquet.ParquetError as e:
                raise RecordError(str(e)) from None

    def _format(self, name: str, head: bytes, part: tuple[int, int, int] | None) -> str:
        """The format of the input ``name`` begins with ``head``, as ``--traffic`` may read it;
        raises ``RecordError`` naming the file when it may not."""
        found = _engine.detect_format(head)
        fmt = self.format or found
        if fmt is None:
            raise RecordError(
                f"{name}: not a format --traffic reads (a pcap/pcapng capture, or flow records: "
                f"{', '.join(RECORD_FORMATS)}); name it with --format if it is one"
            )
        if self.format is not None and found is not None and found != self.format:
            raise RecordError(f"{name}: --format {self.format} asked, but the file is {FORMATS[found]}")
        if fmt == "pcap":
            raise RecordError(f"{name}: a pcap/pcapng capture: give captures with --pcap, or in a run of their own")
        if part is not None and fmt != "parquet":
            raise RecordError(f"{name}: only a Parquet file is read by row groups, not {FORMATS[fmt]}")
        return fmt

    def judged(self, judge: Any, keep: bool = False) -> Iterator[JudgedChunk | None]:
        """Reads every file into ``judge`` (``_engine.RecordJudge``): one native call per chunk
        reads it, another judges and sums what it completed; Python sees no record. Yields
        once per chunk: with ``keep``, its records with their verdicts (per-record output),
        else None."""
        for path, name, part in zip(self.paths, self.display, self.parts):
            yield from self._read(path, name, judge, keep, part)

    def __iter__(self) -> Iterator[RecordChunk]:
        """The records as header batches, unjudged (``BATCH`` at most each)."""
        for path, name in zip(self.paths, self.display):
            yield from self._read(path, name, None, False)

    def _read(
        self, path: str, name: str, judge: Any, keep: bool, part: tuple[int, int, int] | None = None
    ) -> Iterator[Any]:
        stream, head, compression = open_input(path)
        try:
            fmt = self._format(name, head, part)
            report = FileReport(name, fmt, compression, part=part)
            self.files.append(report)
            self.names.append([])
            index = len(self.files) - 1
            if fmt == "parquet":
                from pyclassify import parquet

                plain = path if compression is None and path != "-" else None
                try:
                    for columns in parquet.read(stream, head, name, report.problems, plain, report.first, part):
                        report.records += len(columns)
                        if judge is None:
                            yield RecordChunk(*parquet.arrays(columns), index)
                            continue
                        kept = judge.judge_columns(columns, index, keep)
                        yield None if kept is None else JudgedChunk.of(kept, index)
                except parquet.ParquetError as e:
                    raise RecordError(str(e)) from None
                return
            reader = _engine.RecordStream(fmt)
            chunk: bytes | memoryview = head
            # two buffers refilled in turn (the one read last is handed on while the next is
            # read): a fresh 1 MiB object per chunk would be fresh pages faulted in each time
            # wherever malloc returns large blocks to the kernel (Dask sets its workers so)
            buffers = (bytearray(CHUNK), bytearray(CHUNK))
            turn = 0
            pending: list[tuple[bytes, bytes]] = []
            pending_n = 0
            read = len(head)
            broken = None
            while True:
                try:
                    nxt = _read_into(stream, buffers[turn])
                except Exception as e:  # noqa: BLE001 - a decompressor's own error types
                    if compression is None and not isinstance(e, OSError):
                        raise
                    nxt, broken = memoryview(b""), f"{e}"
                turn ^= 1
                read += len(nxt)
                last = not nxt
                if judge is not None:
                    reader.read(chunk, last)
                    self._place(reader, index)
                    kept = judge.judge_stream(reader, index, keep)
                    yield None if kept is None else JudgedChunk.of(kept, index)
                else:
                    h, c = reader.feed(chunk, last)
                    if h:
                        pending.append((h, c))
                        pending_n += len(h) // HEADER_DTYPE.itemsize
                    self._place(reader, index)
                    if pending and (pending_n >= BATCH or last):
                        yield self._chunk(pending, index)
                        pending, pending_n = [], 0
                if last:
                    break
                chunk = nxt
            report.records = reader.records
            problem_counts, first = reader.problems()
            report.problems = dict(problem_counts)
            report.first = [(r, int(p), d) for r, p, d in first]
            if broken is not None:
                # what came before is judged; the position is in the decompressed bytes
                report.problems["unreadable_rest"] = 1
                report.first.append(
                    (
                        "unreadable_rest",
                        read,
                        f"cannot read on ({compression or 'the file'}): {broken}; the {read:,} bytes before are read",
                    )
                )
        except (OSError, EOFError) as e:
            raise RecordError(f"{name}: cannot be read: {getattr(e, 'strerror', None) or e}") from None
        finally:
            if path != "-":
                stream.close()

    def _place(self, reader: Any, index: int) -> None:
        """Places the names ``reader`` (of file ``index``) met since the last call, in the reader."""
        if reader.name_count > reader.placed:
            names = reader.names_since(reader.placed)
            self.names[index].extend(names)
            reader.place(self.placer.add(names))

    def describe(self, file: int, name: int) -> str:
        """Name number ``name`` of file ``file``, as a person reads it."""
        kind, namespace, text = self.names[file][name]
        return f"{kind or 'endpoint'} {namespace + '/' if namespace else ''}{text}"

    def _chunk(self, pending: list[tuple[bytes, bytes]], index: int) -> RecordChunk:
        headers = np.frombuffer(b"".join(h for h, _ in pending), dtype=HEADER_DTYPE)
        counts = np.frombuffer(b"".join(c for _, c in pending), dtype=FLOW_COUNTS_DTYPE)
        if not (counts["has_src"].all() and counts["has_dst"].all()):
            headers, counts = headers.copy(), counts.copy()
            self.placer.place(headers, counts)
        return RecordChunk(headers, counts, index)


def where(name: str, unit: str, reason: str, position: int) -> str:
    """``file:line`` or ``file: byte N`` (binary formats, and the decompressed bytes read before
    a file could not be read on)."""
    if unit == "byte" or reason == "unreadable_rest":
        return f"{name}: byte {position}"
    return f"{name}:{position}"


def addr16(ip: Any) -> bytes:
    """An address as the header batch stores it: 16 bytes, IPv4 mapped into IPv6."""
    if ip.version == 4:
        return b"\x00" * 10 + b"\xff\xff" + ip.packed
    return bytes(ip.packed)


class NamePlacer:
    """Endpoint names of records (``RecordStream.names_since``) to addresses of the inventory,
    each name once: ``table`` (16 bytes an entry) and ``known`` (whether it was placed)."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.names: list[tuple[str, str, str]] = []
        self.table = np.zeros((0, 16), dtype=np.uint8)
        self.known = np.zeros(0, dtype=bool)
        self.versions = np.zeros(0, dtype=np.uint8)
        self._pods: dict[str, list[Any]] | None = None

    def add(self, names: list[tuple[str, str, str]]) -> list[tuple[bytes, int] | None]:
        """Places ``names`` (the next ones in order); returns each's (address, IP version) or None."""
        rows, known, versions = [], [], []
        found: list[tuple[bytes, int] | None] = []
        for kind, namespace, name in names:
            ip = self._address(kind, namespace, name)
            found.append(None if ip is None else (addr16(ip), ip.version))
            rows.append(np.frombuffer(addr16(ip), dtype=np.uint8) if ip is not None else np.zeros(16, np.uint8))
            known.append(ip is not None)
            versions.append(0 if ip is None else ip.version)
        self.names.extend(names)
        if rows:
            self.table = np.vstack([self.table, np.array(rows, dtype=np.uint8)])
            self.known = np.concatenate([self.known, np.array(known, dtype=bool)])
            self.versions = np.concatenate([self.versions, np.array(versions, dtype=np.uint8)])
        return found

    def _address(self, kind: str, namespace: str, name: str) -> Any:
        inv = self.inventory
        if kind in ("wep", ""):
            if self._pods is None:
                self._pods = {}
                for e in sorted(inv.pods(), key=lambda e: (e.namespace or "", e.name)):
                    if e.ips:
                        self._pods.setdefault(e.namespace or "", []).append(e)
            pods = self._pods.get(namespace, [])
            prefix = name[:-1] if name.endswith("*") else None
            for e in pods:
                if e.name == name or (prefix is not None and e.name.startswith(prefix)):
                    return e.ips[0]
            return None
        if kind == "hep":
            for e in inv.endpoints:
                if e.kind is EndpointKind.HOST and e.name == name and e.ips:
                    return e.ips[0]
            return None
        if kind == "ns":
            for s in inv.network_sets:
                if s.name == name and (s.namespace or "") == namespace and s.nets:
                    return next(iter(s.nets)).network_address
            return None
        return None  # "net": pub/pvt, a network no address stands for

    def place(self, headers: npt.NDArray[Any], counts: npt.NDArray[Any]) -> None:
        """Fills the addresses records lack from their names, where placed (in place)."""
        for end, has, name in (("src_addr", "has_src", "src_name"), ("dst_addr", "has_dst", "dst_name")):
            missing = np.flatnonzero(counts[has] == 0)
            if len(missing) == 0:
                continue
            ids = counts[name][missing]
            named = ids != NO_NAME
            rows, ids = missing[named], ids[named].astype(np.int64)
            ok = self.known[ids]
            rows, ids = rows[ok], ids[ok]
            headers[end][rows] = self.table[ids]
            counts[has][rows] = 1
            version = headers["ip_version"][rows]
            headers["ip_version"][rows] = np.where(version == 0, self.versions[ids], version)

    def describe(self, index: int) -> str:
        kind, namespace, name = self.names[index]
        return f"{kind or 'endpoint'} {namespace + '/' if namespace else ''}{name}"


def address_text(raw: npt.NDArray[np.uint8]) -> str:
    """A 16-byte address as text, its IP version told by the IPv4-mapped prefix."""
    return batch.address_text(raw, 4 if bytes(raw[:12]) == b"\x00" * 10 + b"\xff\xff" else 6)


def file_size(paths: list[str]) -> int | None:
    if any(p == "-" for p in paths):
        return None
    return sum(os.stat(p).st_size for p in paths)
