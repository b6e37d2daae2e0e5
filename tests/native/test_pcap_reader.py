"""The pcap/pcapng reader against captures written by another tool (scapy) or built by hand here
with ``struct`` from the format specifications: formats, byte orders, timestamp resolutions,
link types, interfaces and sections, streaming, the writer, and broken files."""

from __future__ import annotations

import io
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Packet
from scapy.utils import PcapNgWriter, PcapWriter, RawPcapWriter, rdpcap

from pyclassify.batch import ERR_NONE, ERR_UNKNOWN_LINKTYPE, FLAG_HAS_PORTS, FLAG_ICMP_ERROR, HEADER_DTYPE
from pyclassify.capture import (
    QUOTE_HAS_PORTS,
    QUOTE_VALID,
    CaptureError,
    CaptureWriter,
    open_capture,
    read_ahead,
    read_all,
)

REPO = Path(__file__).resolve().parents[2]
Expect = Callable[[Packet], dict[str, Any]]
Check = Callable[[np.void, dict[str, Any]], None]


def sample_ip_packets() -> list[Packet]:
    """IP packets (no link layer) of several kinds."""
    return [
        IP(src="10.0.1.10", dst="10.0.2.20", id=1) / TCP(sport=43210, dport=8080, flags="S"),
        IP(src="10.0.2.20", dst="10.0.1.10", id=2) / TCP(sport=8080, dport=43210, flags="SA"),
        IP(src="10.0.1.10", dst="10.96.0.10", id=3) / UDP(sport=41000, dport=53) / b"q",
        IP(src="10.0.3.40", dst="10.0.1.10", id=4) / ICMP(type=8, id=5, seq=1),
        IPv6(src="fd00::1", dst="fd00::2") / TCP(sport=1, dport=22, flags="PA") / b"x",
        IPv6(src="fd00::2", dst="fd00::1") / UDP(sport=5353, dport=5353),
    ]


def ts_of(i: int) -> Decimal:
    return Decimal(1767225600) + Decimal(i) + Decimal("0.123456789")


# --- pcap -------------------------------------------------------------------------------------


@pytest.mark.parametrize("nano", [False, True], ids=["usec", "nsec"])
@pytest.mark.parametrize("endian", ["<", ">"], ids=["le", "be"])
def test_pcap_written_by_scapy(tmp_path: Path, nano: bool, endian: str, expect: Expect, check_row: Check) -> None:
    pkts = []
    for i, ip in enumerate(sample_ip_packets()):
        p = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / ip
        p.time = ts_of(i)
        pkts.append(p)
    path = tmp_path / "t.pcap"
    w = PcapWriter(str(path), linktype=1, nano=nano, endianness=endian)
    for p in pkts:
        w.write(p)
    w.close()

    headers, _, cap = read_all(path)
    assert cap.format == "pcap" and cap.nanosecond == nano
    assert len(headers) == len(pkts) and cap.counts == {"none": len(pkts)} and not cap.problems
    for i, (row, p) in enumerate(zip(headers, rdpcap(str(path)))):
        check_row(row, expect(p))
        assert int(row["ts_ns"]) == int(Decimal(p.time) * 10**9)  # scapy's own reading
        assert abs(int(row["ts_ns"]) - int(ts_of(i) * 10**9)) < (1 if nano else 1000)
        assert int(row["pkt_len"]) == len(p) and int(row["ifindex"]) == 0


def link_frame(linktype: int, ip: Packet) -> bytes:
    """The frame of an IP packet under a link type, built from the link types' specifications."""
    raw = bytes(ip)
    v6 = isinstance(ip, IPv6)
    ethertype = 0x86DD if v6 else 0x0800
    if linktype == 0:  # DLT_NULL: AF_ value in the capturing host's order (here: little-endian)
        return struct.pack("<I", 30 if v6 else 2) + raw
    if linktype == 108:  # DLT_LOOP: AF_ value in network order
        return struct.pack(">I", 24 if v6 else 2) + raw
    if linktype == 113:  # SLL: packet type, ARPHRD, addr len, addr[8], protocol
        return struct.pack(">HHH8sH", 0, 1, 6, b"\x02\0\0\0\0\x01\0\0", ethertype) + raw
    if linktype == 276:  # SLL2: protocol, reserved, ifindex, ARPHRD, packet type, addr len, addr[8]
        return struct.pack(">HHIHBB8s", ethertype, 0, 3, 1, 4, 6, b"\x02\0\0\0\0\x01\0\0") + raw
    if linktype == 1:
        return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / ip)
    return raw  # 12, 14, 101, 228, 229: the IP packet itself


LINKTYPES = [0, 1, 12, 14, 101, 108, 113, 228, 229, 276]


@pytest.mark.parametrize("linktype", LINKTYPES)
def test_every_link_type(tmp_path: Path, linktype: int, expect: Expect, check_row: Check) -> None:
    ips = sample_ip_packets()
    if linktype == 228:
        ips = [p for p in ips if isinstance(p, IP)]
    if linktype == 229:
        ips = [p for p in ips if isinstance(p, IPv6)]
    path = tmp_path / f"lt{linktype}.pcap"
    w = RawPcapWriter(str(path), linktype=linktype)
    for ip in ips:
        w.write(link_frame(linktype, ip))
    w.close()
    if linktype == 0:  # scapy takes linktype=0 for "unset" and writes 1: put DLT_NULL back
        data = bytearray(path.read_bytes())
        struct.pack_into("<I", data, 20, 0)
        path.write_bytes(bytes(data))
    headers, _, cap = read_all(path)
    assert [i.linktype for i in cap.interfaces] == [linktype]
    assert len(headers) == len(ips)
    for row, ip in zip(headers, ips):
        check_row(row, expect(ip))


def test_wrong_ip_version_for_link_type_is_flagged(tmp_path: Path) -> None:
    path = tmp_path / "t.pcap"
    w = RawPcapWriter(str(path), linktype=228)  # IPv4 only, but an IPv6 packet inside
    w.write(bytes(IPv6(src="::1", dst="::2") / UDP()))
    w.close()
    headers, _, cap = read_all(path)
    assert cap.counts == {"bad_ip_version": 1}
    assert not headers[0]["flags"] & FLAG_HAS_PORTS


# --- pcapng -----------------------------------------------------------------------------------


def test_pcapng_by_scapy_several_interfaces_and_link_types(tmp_path: Path, expect: Expect, check_row: Check) -> None:
    path = tmp_path / "t.pcapng"
    w = PcapNgWriter(str(path))
    frames = []
    for i, ip in enumerate(sample_ip_packets()):
        if i % 2 or isinstance(ip, IPv6):  # tun0 gets the link type of its first packet: IPv4
            p: Packet = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=7) / ip
            p.sniffed_on = "eth0"
        else:
            p = IP(bytes(ip)) if isinstance(ip, IP) else IPv6(bytes(ip))
            p.sniffed_on = "tun0"
        p.time = ts_of(i)
        w.write(p)
        frames.append(p)
    w.close()
    headers, _, cap = read_all(path)
    assert cap.format == "pcapng"
    by_index = {i.index: i for i in cap.interfaces}
    for row, p in zip(headers, frames):
        check_row(row, expect(p))
        iface = by_index[int(row["ifindex"])]
        # scapy picks the raw-IP link type for tun0 (228 or 229 by the first packet's layer)
        assert (iface.linktype == 1) == (p.sniffed_on == "eth0")
        assert abs(int(row["ts_ns"]) - int(Decimal(p.time) * 10**9)) < 1000
    assert len({int(r["ifindex"]) for r in headers}) == 2


class NgBuilder:
    """pcapng blocks per the specification (draft-ietf-opsawg-pcapng), either byte order."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.e = "<"

    def block(self, btype: int, body: bytes) -> None:
        body += b"\0" * (-len(body) % 4)
        n = 12 + len(body)
        self.out += struct.pack(self.e + "II", btype, n) + body + struct.pack(self.e + "I", n)

    def shb(self, endian: str) -> None:
        self.e = endian
        self.block(0x0A0D0D0A, struct.pack(endian + "IHHq", 0x1A2B3C4D, 1, 0, -1))

    def idb(self, linktype: int, tsresol: int | None = None, tsoffset: int | None = None) -> None:
        opts = b""
        if tsresol is not None:
            opts += struct.pack(self.e + "HHB3x", 9, 1, tsresol)
        if tsoffset is not None:
            opts += struct.pack(self.e + "HHq", 14, 8, tsoffset)
        opts += struct.pack(self.e + "HH", 2, 4) + b"eth\0"  # if_name, an option we skip
        opts += struct.pack(self.e + "HH", 0, 0)
        self.block(1, struct.pack(self.e + "HHI", linktype, 0, 65535) + opts)

    def epb(self, ifid: int, ticks: int, data: bytes, orig: int | None = None) -> None:
        self.block(
            6,
            struct.pack(
                self.e + "IIIII", ifid, ticks >> 32, ticks & 0xFFFFFFFF, len(data), len(data) if orig is None else orig
            )
            + data,
        )

    def opb(self, ifid: int, ticks: int, data: bytes) -> None:
        self.block(
            2, struct.pack(self.e + "HHIIII", ifid, 0, ticks >> 32, ticks & 0xFFFFFFFF, len(data), len(data)) + data
        )

    def spb(self, data: bytes, orig: int | None = None) -> None:
        self.block(3, struct.pack(self.e + "I", len(data) if orig is None else orig) + data)

    def nrb(self) -> None:  # name resolution block: skipped by readers
        self.block(4, struct.pack(self.e + "HH", 1, 8) + bytes([10, 0, 1, 10]) + b"web\0" + b"\0\0\0\0")

    def isb(self) -> None:  # interface statistics: skipped
        self.block(5, struct.pack(self.e + "III", 0, 0, 0))


def ip_frames() -> list[tuple[Packet, bytes]]:
    return [(ip, bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / ip)) for ip in sample_ip_packets()]


def test_pcapng_sections_byte_orders_resolutions_and_block_kinds(expect: Expect, check_row: Check) -> None:
    b = NgBuilder()
    frames = ip_frames()
    want: list[tuple[Packet, int, int]] = []  # (ip, ts_ns, ifindex)
    t = 1767225600
    # Section 0, big-endian: Ethernet at 10^-9 and raw IP at 2^-10 with an offset, and an OPB.
    b.shb(">")
    b.idb(1, tsresol=9)
    b.idb(101, tsresol=0x80 | 10, tsoffset=100)
    b.nrb()
    b.epb(0, t * 10**9 + 5, frames[0][1])
    want.append((frames[0][0], t * 10**9 + 5, 0))
    b.epb(1, (t << 10) + 512, bytes(frames[3][0]))
    want.append((frames[3][0], (t + 100) * 10**9 + 500_000_000, 1))
    b.opb(0, t * 10**9 + 7, frames[1][1])
    want.append((frames[1][0], t * 10**9 + 7, 0))
    b.isb()
    # Section 1, little-endian: interface ids restart; default resolution (usec), millisecond, SPB.
    b.shb("<")
    b.idb(1)
    b.idb(229, tsresol=3)
    b.epb(1, t * 1000 + 250, bytes(frames[4][0]))
    want.append((frames[4][0], t * 10**9 + 250_000_000, 3))
    b.spb(frames[2][1])
    want.append((frames[2][0], 0, 2))  # SPB: first interface of its section, no timestamp
    b.epb(0, t * 10**6 + 1, frames[5][1])
    want.append((frames[5][0], t * 10**9 + 1000, 2))

    for source in (io.BytesIO(bytes(b.out)), bytes(b.out)):
        cap = open_capture(source) if isinstance(source, io.BytesIO) else None
        if cap is None:
            from pyclassify import _native

            reader = _native.Reader(source)
            headers = np.empty(16, HEADER_DTYPE)
            n = reader.read_into(
                headers, None, np.empty(16, np.uint64), np.empty(16, np.uint32), np.empty(16, np.uint32)
            )
            headers = headers[:n]
            assert reader.sections == 2
        else:
            with cap:
                headers = np.concatenate([bt.headers for bt in cap])
                ifs = cap.interfaces
            assert [(i.section, i.local_id, i.linktype) for i in ifs] == [
                (0, 0, 1),
                (0, 1, 101),
                (1, 0, 1),
                (1, 1, 229),
            ]
        assert len(headers) == len(want)
        for row, (ip, ts, ifindex) in zip(headers, want):
            check_row(row, expect(ip))
            assert int(row["ts_ns"]) == ts and int(row["ifindex"]) == ifindex


def test_pcapng_packet_naming_an_undescribed_interface_is_counted() -> None:
    b = NgBuilder()
    b.shb("<")
    b.idb(1)
    b.epb(3, 0, ip_frames()[0][1])
    headers, _, cap = read_all(io.BytesIO(bytes(b.out)))
    assert cap.counts == {"unknown_linktype": 1}
    assert headers[0]["error_kind"] == ERR_UNKNOWN_LINKTYPE and not headers[0]["flags"] & FLAG_HAS_PORTS


# --- streaming, batching, stdin ---------------------------------------------------------------


def big_capture(tmp_path: Path, n: int = 3000) -> Path:
    path = tmp_path / "many.pcap"
    w = PcapWriter(str(path), linktype=1)
    base = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    for i in range(n):
        # sizes vary up to beyond the smallest stream window (4 KiB)
        w.write(
            base
            / IP(src="10.0.0.1", dst="10.0.0.2", id=i)
            / UDP(sport=i % 60000 + 1, dport=53)
            / (b"x" * ((i * 37) % 9000))
        )
    w.close()
    return path


def test_stream_equals_mmap_whatever_the_window_and_batch(tmp_path: Path) -> None:
    path = big_capture(tmp_path)
    mm, _, _ = read_all(path, batch_size=1000)
    assert len(mm) == 3000 and (mm["sport"] == np.arange(3000) % 60000 + 1).all()
    for batch_size in (1, 7, 4096):
        with open(path, "rb") as f:
            cap = open_capture(f, batch_size=batch_size)
            cap._reader = type(cap._reader)(open(path, "rb"), 4096)  # smallest windows
            streamed = np.concatenate([b.headers for b in cap])
            assert not cap.problems
        assert (streamed == mm).all()
    st, _, _ = read_all(path, stream=True)
    assert (st == mm).all()


def test_read_ahead_hands_out_what_plain_reading_does_with_its_data(tmp_path: Path) -> None:
    path = big_capture(tmp_path)
    headers, _, _ = read_all(path)
    payloads = [bytes(b.packet(i)) for b in open_capture(path) for i in range(len(b))]
    with open_capture(path, stream=True, batch_size=97) as cap:
        cap._reader = type(cap._reader)(open(path, "rb"), 4096)  # a new window every few packets
        with read_ahead(cap) as batches:
            # every batch kept until the end: a window the reader has moved past stays readable
            ahead = list(batches)
    assert len(ahead) > len(headers) // 97
    assert (np.concatenate([b.headers for b in ahead]) == headers).all()
    assert [bytes(b.packet(i)) for b in ahead for i in range(len(b))] == payloads
    assert batches.counts == {"none": 3000} and batches.problems == []


def test_read_ahead_tells_what_the_batches_taken_held_not_the_one_read_ahead() -> None:
    data = (REPO / "pcaps" / "demo.pcap").read_bytes()
    cut = data[: len(data) - 10]  # the last record cut: a problem, found by the last read
    whole, _, _ = read_all(io.BytesIO(cut))
    with open_capture(io.BytesIO(cut), batch_size=len(whole) // 2) as cap, read_ahead(cap) as batches:
        first = next(batches)
        assert batches.counts == {"none": len(first)} and batches.problems == []  # the cap is further
        rest = list(batches)
    assert sum(len(b) for b in [first, *rest]) == len(whole)
    assert batches.counts == {"none": len(whole)} and len(batches.problems) == 1
    assert batches.problems == cap.problems


def test_read_ahead_raises_what_the_read_raised(tmp_path: Path) -> None:
    path = big_capture(tmp_path, 50)
    with open_capture(path, stream=True, batch_size=10) as cap:
        cap.read_batch = lambda: 1 / 0  # type: ignore[method-assign]
        with pytest.raises(ZeroDivisionError), read_ahead(cap) as batches:
            next(batches)


def test_read_ahead_finishes_its_read_through_a_ctrl_c_before_the_capture_closes(tmp_path: Path) -> None:
    path = big_capture(tmp_path, 50)
    reads: list[str] = []
    interrupts: list[float] = []

    def interrupt(signum: int, frame: Any) -> None:
        interrupts.append(time.monotonic())
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupt)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    try:
        with open_capture(path, stream=True, batch_size=10) as cap:
            read = cap.read_batch

            def slow() -> Any:
                reads.append("started")
                time.sleep(2.0 if len(reads) > 1 else 0)  # the second read outlasts the interrupt
                batch = read()
                reads.append("done")
                return batch

            cap.read_batch = slow  # type: ignore[method-assign]
            with pytest.raises(KeyboardInterrupt), read_ahead(cap) as batches:
                next(batches)
                timer.start()  # lands while the exit waits for the second read
            # raised only once the read under way was done, before the capture closes
            assert interrupts and reads == ["started", "done", "started", "done"]
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)


def test_stdin(tmp_path: Path) -> None:
    path = REPO / "pcaps" / "demo.pcap"
    code = (
        "from pyclassify.capture import read_all\n"
        "h, q, c = read_all('-')\n"
        "print(len(h), int(h['sport'].sum()), c.format)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], stdin=open(path, "rb"), capture_output=True, text=True, check=True
    ).stdout.split()
    h, _, cap = read_all(path)
    assert out == [str(len(h)), str(int(h["sport"].sum())), "pcap"]


# --- the writer -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["demo.pcap", "demo.pcapng"])
def test_writer_copies_selected_packets_unchanged(tmp_path: Path, name: str) -> None:
    src = REPO / "pcaps" / name
    originals = rdpcap(str(src))
    a, d = tmp_path / ("a." + name.split(".")[1]), tmp_path / ("d." + name.split(".")[1])
    with open_capture(src, batch_size=5) as cap:
        batches = list(cap)
        with CaptureWriter.like(cap, a) as wa, CaptureWriter.like(cap, d) as wd:
            for b in batches:
                mask = (np.arange(b.start, b.start + len(b)) % 3) == 0
                wa.write(b, mask)
                wd.write(b, ~mask)
    got_a, got_d = rdpcap(str(a)), rdpcap(str(d))
    assert [bytes(p) for p in got_a] == [bytes(p) for i, p in enumerate(originals) if i % 3 == 0]
    assert [bytes(p) for p in got_d] == [bytes(p) for i, p in enumerate(originals) if i % 3]
    assert [p.time for p in got_a] == [p.time for i, p in enumerate(originals) if i % 3 == 0]
    h0, _, _ = read_all(src)
    ha, _, _ = read_all(a)
    assert (ha == h0[::3]).all()


def test_batch_packet_and_offsets_locate_the_bytes() -> None:
    src = REPO / "pcaps" / "demo.pcap"
    originals = [bytes(p) for p in rdpcap(str(src))]
    data = src.read_bytes()
    with open_capture(src, batch_size=10) as cap:
        for b in cap:
            for i in range(len(b)):
                assert b.packet(i) == originals[b.start + i]
                off = int(b.file_offsets[i])
                assert data[off : off + int(b.caplens[i])] == originals[b.start + i]


# --- the bundled captures ---------------------------------------------------------------------


def test_bundled_captures_are_what_the_script_writes(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_pcaps.py"), str(tmp_path)], check=True, capture_output=True
    )
    for name in ("demo.pcap", "demo.pcapng"):
        assert (tmp_path / name).read_bytes() == (REPO / "pcaps" / name).read_bytes(), name


def test_bundled_demo_capture_decodes_cleanly() -> None:
    headers, quotes, cap = read_all(REPO / "pcaps" / "demo.pcap")
    assert cap.counts == {"none": len(headers)} and not cap.problems
    protos = {int(p) for p in headers["protocol"]}
    assert protos == {1, 6, 17, 132}
    err = np.flatnonzero(headers["flags"] & FLAG_ICMP_ERROR)
    assert len(err) == 1
    q = quotes[err[0]]
    assert q["flags"] == QUOTE_VALID | QUOTE_HAS_PORTS and (q["sport"], q["dport"], q["protocol"]) == (45000, 9999, 17)
    frags = headers[headers["frag_id"] == 630]
    assert len(frags) == 3 and (frags["dport"] == 8080).all() and (frags["flags"] & FLAG_HAS_PORTS).all()
    ng, ngq, ngcap = read_all(REPO / "pcaps" / "demo.pcapng")
    assert ngcap.counts == {"none": len(ng)}
    assert {i.linktype for i in ngcap.interfaces} == {1, 276}
    assert set(ng["ip_version"].tolist()) == {4, 6}


# --- broken files -----------------------------------------------------------------------------


def test_not_a_capture(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"GIF89a, not a capture at all")
    with pytest.raises(CaptureError, match="unknown magic"):
        open_capture(tmp_path / "x")
    (tmp_path / "e").write_bytes(b"")
    with pytest.raises(CaptureError, match="empty"):
        open_capture(tmp_path / "e")
    with pytest.raises(CaptureError, match="cannot open"):
        open_capture(tmp_path / "missing.pcap")
    with pytest.raises(CaptureError, match="shorter than"):
        open_capture(io.BytesIO(b"\xd4\xc3"))


@pytest.mark.parametrize("name", ["demo.pcap", "demo.pcapng"])
def test_truncated_anywhere_keeps_the_packets_before_and_says_so(name: str) -> None:
    data = (REPO / "pcaps" / name).read_bytes()
    full, _, _ = read_all(io.BytesIO(data))
    for cut in range(30, len(data), 97):
        headers, _, cap = read_all(io.BytesIO(data[:cut]))
        assert (headers == full[: len(headers)]).all()
        assert len(headers) < len(full)
        assert len(cap.problems) <= 1
        assert sum(cap.counts.values()) == len(headers)


def test_corrupt_record_length_stops_with_a_problem() -> None:
    data = bytearray((REPO / "pcaps" / "demo.pcap").read_bytes())
    struct.pack_into("<I", data, 24 + 8, 0x7FFFFFFF)  # first record's caplen
    headers, _, cap = read_all(io.BytesIO(bytes(data)))
    assert len(headers) == 0 and "record length" in cap.problems[0]
    b = NgBuilder()
    b.shb("<")
    b.idb(1)
    b.epb(0, 0, ip_frames()[0][1])
    ng = bytearray(b.out)
    ng[-4] ^= 0xFF  # trailing length of the EPB
    headers, _, cap = read_all(io.BytesIO(bytes(ng)))
    assert len(headers) == 0 and "trailing length" in cap.problems[0]
    assert headers.dtype == HEADER_DTYPE and ERR_NONE == 0
