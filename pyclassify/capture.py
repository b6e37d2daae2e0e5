"""Reading and writing packet captures: pcap/pcapng in, decoded header batches out.

The reading and decoding run in Cython without the GIL (``pyclassify._native.Reader``); this
module is the Python face of it::

    with open_capture("trace.pcapng") as cap:      # a path, "-" for stdin, or a binary file
        for batch in cap:                          # Batch: up to batch_size packets
            engine.classify(batch.headers)          # numpy array of HEADER_DTYPE, C-contiguous
            ...
        print(cap.counts)                          # packets per decode error kind

Files are memory-mapped; stdin and other file objects are streamed in windows. Each batch also
says where each packet's captured bytes are (``batch.data`` + ``offsets``/``caplens``), so that
``CaptureWriter.write(batch, mask)`` can copy selected packets, unchanged, into another capture.

ICMP errors: the 64-byte header has no room for the flow an ICMP error quotes, so
``batch.quotes`` (``QUOTE_DTYPE``, one 40-byte record per packet, beside ``headers``) holds it:
``flags & QUOTE_VALID`` when the quoted flow was decoded (ports, or a quoted ICMP query's type and
identifier in ``icmp_type``/``sport``), ``flags & FLAG_HAS_PORTS`` when its ports were. The layout
is the connection tracker's ``QuotedTuple``. Only packets with ``FLAG_ICMP_ERROR`` have a valid quote.

Tunnels: packets inside VXLAN, Geneve, IP in IP or GRE are decoded as the packet they carry
(``pyclassify.tunnels``; ``tunnels=`` says which UDP ports are VXLAN's and Geneve's, or opens
none); ``headers["encap"]`` names the tunnel and ``batch.outers`` (``OUTER_DTYPE``) holds the
outer header, valid only where ``encap`` is set.
"""

from __future__ import annotations

import mmap
import os
import stat
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import BinaryIO, Final

import numpy as np
import numpy.typing as npt

from pyclassify import _native
from pyclassify.batch import ERROR_NAMES, HEADER_DTYPE, OUTER_DTYPE, QUOTE_DTYPE
from pyclassify.tunnels import DEFAULT_TUNNELS, TunnelPorts

__all__ = [
    "LINKTYPES",
    "QUOTE_DTYPE",
    "QUOTE_HAS_PORTS",
    "QUOTE_VALID",
    "Batch",
    "Capture",
    "CaptureError",
    "CaptureWriter",
    "Interface",
    "ReadAhead",
    "open_capture",
    "read_ahead",
    "read_all",
]

assert QUOTE_DTYPE.itemsize == _native.QUOTE_SIZE
assert OUTER_DTYPE.itemsize == _native.OUTER_SIZE

QUOTE_VALID: Final = 1  # the quoted flow was decoded (ports or ICMP identifier included)
QUOTE_HAS_PORTS: Final = 32  # the quoted ports were decoded (same bit as FLAG_HAS_PORTS)

#: Link types the decoder understands (pcap LINKTYPE_* values).
LINKTYPES: Final[dict[int, str]] = {
    0: "NULL",
    1: "ETHERNET",
    12: "RAW",
    14: "RAW",
    101: "RAW",
    108: "LOOP",
    113: "LINUX_SLL",
    228: "IPV4",
    229: "IPV6",
    276: "LINUX_SLL2",
}

DEFAULT_BATCH: Final = 65536


class CaptureError(ValueError):
    """The input is not a readable pcap/pcapng capture."""


@dataclass(frozen=True)
class Interface:
    """One capture interface. ``index`` is what ``PacketHeader.ifindex`` holds: interfaces are
    numbered across the sections of a pcapng file in order (section 0's first, ...), so it equals
    the pcapng interface id in a single-section file; a pcap file has one interface, 0."""

    index: int
    section: int
    local_id: int
    linktype: int
    tsresol: int  # if_tsresol byte: 10^-n s, or 2^-n s with the top bit set
    tsoffset: int  # if_tsoffset, seconds


class Batch:
    """Up to ``batch_size`` consecutive packets of a capture, decoded."""

    __slots__ = (
        "caplens",
        "data",
        "data_start",
        "headers",
        "linktypes",
        "offsets",
        "outers",
        "quotes",
        "start",
        "tunnels",
    )

    def __init__(
        self,
        headers: npt.NDArray[np.void],
        quotes: npt.NDArray[np.void] | None,
        offsets: npt.NDArray[np.uint64],
        caplens: npt.NDArray[np.uint32],
        linktypes: npt.NDArray[np.uint32],
        data: object,
        data_start: int,
        start: int,
        outers: npt.NDArray[np.void] | None = None,
        tunnels: TunnelPorts = DEFAULT_TUNNELS,
    ) -> None:
        #: decoded headers, ``HEADER_DTYPE``, C-contiguous: hand this to the engine
        self.headers = headers
        #: flows quoted by ICMP errors, ``QUOTE_DTYPE`` (None if the capture was opened without)
        self.quotes = quotes
        #: where each packet's captured bytes start in ``data``
        self.offsets = offsets
        #: captured length of each packet
        self.caplens = caplens
        #: link type of each packet
        self.linktypes = linktypes
        #: the buffer the offsets point into (the mmap of the file, or a stream window)
        self.data = data
        #: file offset of ``data[0]``
        self.data_start = data_start
        #: index of the first packet of the batch in the capture
        self.start = start
        #: outer headers, ``OUTER_DTYPE``, of the packets found inside a tunnel (where
        #: ``headers["encap"]`` is set; other rows mean nothing); None if the batch has none
        self.outers = outers
        #: the tunnels the decoder opened (what ``payload_spans`` must open too)
        self.tunnels = tunnels

    def __len__(self) -> int:
        return len(self.headers)

    @property
    def file_offsets(self) -> npt.NDArray[np.uint64]:
        """File offset of each packet's captured bytes."""
        return self.offsets + np.uint64(self.data_start)

    def packet(self, i: int) -> bytes:
        """The captured bytes of packet ``i`` of the batch, as they are in the file."""
        off = int(self.offsets[i])
        return bytes(memoryview(self.data)[off : off + int(self.caplens[i])])  # type: ignore[arg-type]

    def error_counts(self) -> dict[str, int]:
        """Packets of this batch per decode error kind (kinds with none left out)."""
        counts = np.bincount(self.headers["error_kind"], minlength=len(ERROR_NAMES))
        return {ERROR_NAMES[k]: int(c) for k, c in enumerate(counts) if c and k}


class Capture:
    """An open capture: iterate it for ``Batch``es; see ``open_capture``."""

    def __init__(
        self,
        source: str | os.PathLike[str] | BinaryIO,
        *,
        batch_size: int = DEFAULT_BATCH,
        quotes: bool = True,
        stream: bool = False,
        chunk: int = 1 << 22,
        tunnels: TunnelPorts = DEFAULT_TUNNELS,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.batch_size = batch_size
        self.name: str
        self._quotes = quotes
        self.tunnels = tunnels
        self._outers: npt.NDArray[np.void] | None = None
        self._file: BinaryIO | None = None
        self._mmap: mmap.mmap | None = None
        self._index = 0
        src: object
        if isinstance(source, (str, os.PathLike)):
            if str(source) == "-":
                self.name = "<stdin>"
                src = sys.stdin.buffer
            else:
                self.name = str(source)
                try:
                    self._file = open(source, "rb")  # noqa: SIM115 (closed by close())
                except OSError as e:
                    raise CaptureError(f"{source}: cannot open: {e.strerror or e}") from e
                st = os.fstat(self._file.fileno())
                regular = stat.S_ISREG(st.st_mode)
                if regular and st.st_size == 0:
                    self._file.close()
                    raise CaptureError(f"{source}: empty file, not a pcap or pcapng capture")
                if stream or not regular:
                    # A pipe, a FIFO or a device (``--pcap <(tcpdump -w - ...)``) has no size and
                    # cannot be mapped: read as a stream, as stdin is.
                    src = self._file
                else:
                    self._mmap = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
                    try:
                        self._mmap.madvise(mmap.MADV_SEQUENTIAL)
                    except (AttributeError, OSError):  # pragma: no cover - platform dependent
                        pass
                    src = self._mmap
        else:
            self.name = getattr(source, "name", "<stream>")
            src = source
        try:
            self._reader = _native.Reader(src, chunk, **tunnels.native())
        except ValueError as e:
            self.close()
            raise CaptureError(f"{self.name}: {e}") from None
        if self._reader.format == "pcap":
            why = _pcap_header_problem(bytes(memoryview(self._reader.window)[:24]))
        else:
            why = _pcapng_header_problem(bytes(memoryview(self._reader.window)[:16]))
        if why is not None:
            self.close()
            raise CaptureError(f"{self.name}: {why}")

    # -- reading --

    def __iter__(self) -> Iterator[Batch]:
        while True:
            batch = self.read_batch()
            if batch is None:
                return
            yield batch

    def read_batch(self, size: int | None = None) -> Batch | None:
        """The next batch of up to ``size`` (default ``batch_size``) packets; None at the end."""
        n = size or self.batch_size
        headers = np.empty(n, HEADER_DTYPE)
        quotes = np.empty(n, QUOTE_DTYPE) if self._quotes else None
        # The decoder writes outer headers only for a tunnel's packets: the buffer is kept for the
        # next batch unless this one has some, which then owns it. (A fresh 3 MB array for every
        # batch, untouched, still costs: the allocator then hands each batch's headers fresh pages.)
        outers = None
        if self.tunnels.decapsulate:
            if self._outers is None or len(self._outers) < n:
                self._outers = np.empty(n, OUTER_DTYPE)
            outers = self._outers[:n]
        offsets = np.empty(n, np.uint64)
        caplens = np.empty(n, np.uint32)
        linktypes = np.empty(n, np.uint32)
        tunnelled = self._reader.tunnelled
        got = self._reader.read_into(headers, quotes, offsets, caplens, linktypes, outers)
        if got == 0:
            return None
        if outers is not None:
            if self._reader.tunnelled != tunnelled:
                outers, self._outers = outers[:got], None
            else:
                outers = None
        batch = Batch(
            headers[:got],
            quotes[:got] if quotes is not None else None,
            offsets[:got],
            caplens[:got],
            linktypes[:got],
            self._reader.window,
            self._reader.window_start,
            self._index,
            outers,
            self.tunnels,
        )
        self._index += got
        return batch

    def read_into(
        self,
        headers: npt.NDArray[np.void],
        offsets: npt.NDArray[np.uint64],
        caplens: npt.NDArray[np.uint32],
        linktypes: npt.NDArray[np.uint32],
        quotes: npt.NDArray[np.void] | None = None,
        outers: npt.NDArray[np.void] | None = None,
    ) -> int:
        """Fill caller-owned arrays (reused across calls, for the engine's loop); returns the
        count, 0 at the end. Offsets refer to ``self.window`` until the next call."""
        got: int = self._reader.read_into(headers, quotes, offsets, caplens, linktypes, outers)
        self._index += got
        return got

    @property
    def window(self) -> object:
        return self._reader.window

    # -- what was read --

    @property
    def format(self) -> str:
        """``"pcap"`` or ``"pcapng"``."""
        return str(self._reader.format)

    @property
    def nanosecond(self) -> bool:
        return bool(self._reader.nanosecond)

    @property
    def interfaces(self) -> list[Interface]:
        """Interfaces described so far (for pcapng, those of the blocks read)."""
        return [Interface(*row) for row in self._reader.interfaces]

    @property
    def packets(self) -> int:
        return int(self._reader.packets)

    @property
    def counts(self) -> dict[str, int]:
        """Packets read so far per decode error kind, ``"none"`` for the clean ones; kinds with
        no packet are left out."""
        return {ERROR_NAMES[k]: int(c) for k, c in enumerate(self._reader.counts) if c}

    @property
    def problems(self) -> list[str]:
        """Problems of the file itself (corrupt or truncated records); reading stops at the
        first one, after the packets before it."""
        return [f"{self.name}: {p}" for p in self._reader.problems]

    @property
    def fragment_stats(self) -> dict[str, int]:
        return dict(self._reader.fragment_stats)

    # -- life cycle --

    def close(self) -> None:
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.release()
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:  # a Batch still exports it; it goes with the last reference
                pass
            self._mmap = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _pcap_header_problem(header: bytes) -> str | None:
    """Why a pcap file header (its first 24 bytes) does not describe a capture this reader
    can read — a version other than 2.x, a link type it cannot decode — or None."""
    order = "<" if header[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    import struct

    major, minor = struct.unpack(order + "HH", header[4:8])
    if major != 2:
        return f"offset 4: pcap version {major}.{minor} is not one this reader knows (2.4)"
    linktype = struct.unpack(order + "I", header[20:24])[0] & 0xFFFF
    if linktype not in LINKTYPES:
        known = ", ".join(f"{n} ({v})" for v, n in sorted(LINKTYPES.items()))
        return f"offset 20: link type {linktype} cannot be decoded (known: {known})"
    return None


def _pcapng_header_problem(header: bytes) -> str | None:
    """Why the first pcapng section header (its first 16 bytes) does not describe a section this
    reader can read — a major version other than 1, whose blocks may mean something else — or
    None. (The reader checks the block type, length and byte-order magic itself.)"""
    import struct

    if len(header) < 16:
        return None  # the reader reports the truncation itself
    if header[8:12] == b"\x4d\x3c\x2b\x1a":
        order = "<"
    elif header[8:12] == b"\x1a\x2b\x3c\x4d":
        order = ">"
    else:
        return None
    major, minor = struct.unpack(order + "HH", header[12:16])
    if major != 1:
        return f"offset 12: pcapng version {major}.{minor} is not one this reader knows (1.0)"
    return None


def open_capture(
    source: str | os.PathLike[str] | BinaryIO,
    *,
    batch_size: int = DEFAULT_BATCH,
    quotes: bool = True,
    stream: bool = False,
    tunnels: TunnelPorts = DEFAULT_TUNNELS,
) -> Capture:
    """Open a pcap or pcapng capture: a path (memory-mapped; ``stream=True`` reads it in
    windows instead), ``"-"`` for stdin, or a binary file object (streamed). ``tunnels``: the
    tunnels whose inner packets are decoded (``pyclassify.tunnels``).

    Raises ``CaptureError`` if it cannot be opened or has no pcap/pcapng header.
    """
    return Capture(source, batch_size=batch_size, quotes=quotes, stream=stream, tunnels=tunnels)


def read_all(
    source: str | os.PathLike[str] | BinaryIO, **kwargs: object
) -> tuple[npt.NDArray[np.void], npt.NDArray[np.void], Capture]:
    """Every header and quote of a capture in one array each (for tests and small captures);
    the closed ``Capture`` comes along for its counts and problems."""
    with open_capture(source, **kwargs) as cap:  # type: ignore[arg-type]
        hs, qs = [], []
        for b in cap:
            hs.append(b.headers)
            if b.quotes is not None:
                qs.append(b.quotes)
    headers = np.concatenate(hs) if hs else np.empty(0, HEADER_DTYPE)
    quotes = np.concatenate(qs) if qs else np.empty(0, QUOTE_DTYPE)
    return headers, quotes, cap


class ReadAhead:
    """A capture's batches, each read on a thread of its own while the caller works on the one
    before (``read_ahead``). Beside each batch it keeps what the capture had found by the end
    of that batch (``counts``, ``problems``, as ``Capture`` has them): a caller that stops
    early counts what it took, not the batch read ahead of it."""

    def __init__(self, cap: Capture, pool: ThreadPoolExecutor) -> None:
        self.name = cap.name
        self.counts: dict[str, int] = {}
        self.problems: list[str] = []
        self._cap, self._pool = cap, pool
        self._ahead = pool.submit(self._read)

    def _read(self) -> tuple[Batch | None, dict[str, int], list[str]]:
        batch = self._cap.read_batch()
        return batch, self._cap.counts, self._cap.problems

    def __iter__(self) -> ReadAhead:
        return self

    def settle(self) -> None:
        """Waits for the read under way (its error, if any, is dropped: nothing takes its batch)."""
        self._ahead.exception()

    def __next__(self) -> Batch:
        batch, self.counts, self.problems = self._ahead.result()
        if batch is None:
            raise StopIteration
        self._ahead = self._pool.submit(self._read)
        return batch


@contextmanager
def read_ahead(cap: Capture) -> Iterator[ReadAhead]:
    """``cap``'s batches, each read on a thread while the caller works on the one before (the
    decoder runs without the GIL, as the engine does): on two cores the read costs the caller
    almost nothing. Until this exits nothing else may read ``cap`` or ask it what it has read
    (the thread is writing it); ask the ``ReadAhead`` instead. On exit the read under way
    finishes first, even through a Ctrl-C (the capture is closed after this, and closing it
    under the read would free what the read is reading); the interrupt is raised once the read
    is done. For files, not pipes: a read that waits for input would hold the exit up."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyclassify-read")
    ahead = None
    try:
        ahead = ReadAhead(cap, pool)
        yield ahead
    finally:
        # The read's future, not the thread: a join interrupted once may return early after.
        interrupted: KeyboardInterrupt | None = None
        while ahead is not None:
            try:
                ahead.settle()
                break
            except KeyboardInterrupt as e:
                interrupted = e
        pool.shutdown(wait=False)  # the thread has nothing of the capture's left to do
        if interrupted is not None:
            raise interrupted


class CaptureWriter:
    """Writes packets, unchanged, into a new pcap or pcapng capture (little-endian).

    pcap has one link type: use it when every packet has the same one. pcapng gets one interface
    per entry of ``interfaces`` (link types), each with nanosecond timestamps; a packet's
    ``ifindex`` picks its interface. ``CaptureWriter.like(capture, dest)`` copies the format,
    timestamp precision and interfaces of an open capture.
    """

    def __init__(
        self,
        dest: str | os.PathLike[str] | BinaryIO,
        *,
        format: str = "pcap",  # noqa: A002 - the natural name
        linktype: int = 1,
        nanosecond: bool = True,
        interfaces: list[int] | None = None,
        snaplen: int = 262144,
    ) -> None:
        if format not in ("pcap", "pcapng"):
            raise ValueError(f"format must be pcap or pcapng, not {format!r}")
        self.format = format
        self.nanosecond = nanosecond
        self._own = isinstance(dest, (str, os.PathLike))
        self._f: BinaryIO = open(dest, "wb") if self._own else dest  # type: ignore[arg-type,assignment]  # noqa: SIM115
        self.packets = 0
        if format == "pcap":
            magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
            self._f.write(_pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))
        else:
            self._f.write(_shb())
            for lt in interfaces if interfaces is not None else [linktype]:
                self._f.write(_idb(lt, snaplen))

    @classmethod
    def like(cls, capture: Capture, dest: str | os.PathLike[str] | BinaryIO) -> CaptureWriter:
        """A writer with the format and interfaces of ``capture`` (read at least one batch of it
        first, so that pcapng interfaces are known)."""
        if capture.format == "pcap":
            ifs = capture.interfaces
            return cls(dest, format="pcap", linktype=ifs[0].linktype if ifs else 1, nanosecond=capture.nanosecond)
        return cls(dest, format="pcapng", interfaces=[i.linktype for i in capture.interfaces])

    def write(self, batch: Batch, mask: npt.ArrayLike | None = None) -> int:
        """Write the packets of ``batch`` selected by ``mask`` (bools or indices; all if None)."""
        if mask is None:
            idx = np.arange(len(batch), dtype=np.int64)
        else:
            m = np.asarray(mask)
            idx = np.flatnonzero(m).astype(np.int64) if m.dtype == bool else m.astype(np.int64)
        fmt = 1 if self.format == "pcap" else 2
        self._f.write(
            _native.pack_records(
                fmt, self.nanosecond, batch.data, batch.offsets, batch.caplens, batch.headers, np.ascontiguousarray(idx)
            )
        )
        self.packets += len(idx)
        return len(idx)

    def write_packet(self, data: bytes, ts_ns: int = 0, *, orig_len: int | None = None, ifindex: int = 0) -> None:
        """Write one packet given as bytes."""
        h = np.zeros(1, HEADER_DTYPE)
        h["ts_ns"] = ts_ns
        h["pkt_len"] = len(data) if orig_len is None else orig_len
        h["ifindex"] = ifindex
        fmt = 1 if self.format == "pcap" else 2
        self._f.write(
            _native.pack_records(
                fmt,
                self.nanosecond,
                data,
                np.zeros(1, np.uint64),
                np.array([len(data)], np.uint32),
                h,
                np.zeros(1, np.int64),
            )
        )
        self.packets += 1

    def close(self) -> None:
        if self._own:
            self._f.close()
        else:
            self._f.flush()

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _pack(fmt: str, *values: int) -> bytes:
    import struct

    return struct.pack(fmt, *values)


def _shb() -> bytes:
    # type, length, byte-order magic, version 1.0, section length unknown (-1), length
    return _pack("<IIIHHqI", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1, 28)


def _idb(linktype: int, snaplen: int) -> bytes:
    # if_tsresol = 9 (nanoseconds), then opt_endofopt
    options = _pack("<HHB3x", 9, 1, 9) + _pack("<HH", 0, 0)
    length = 20 + len(options)
    return _pack("<IIHHI", 1, length, linktype, 0, snaplen) + options + _pack("<I", length)
