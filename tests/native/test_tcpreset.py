"""Cutting a TCP connection both ways from one held client -> server segment (native/tcpreset.pxi).

- crafting (no privileges): ``tcp_reset_segments`` read back with scapy: addresses, ports, seq,
  ack, flags, header fields, and checksums equal to the ones scapy computes;
- bad input: truncations, garbage, other protocols, fragments, extension headers give ``[]`` /
  0 without reading out of bounds;
- live (root): two network namespaces joined by a veth pair, a TCP server in one and a client in
  the other; a TcpResetter in the client's namespace, given a held segment built from the live
  connection's sniffed seq/ack, resets both ends (IPv4 and IPv6).
"""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import uuid
from collections.abc import Iterator

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.layers.inet import IP, TCP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6, IPv6ExtHdrHopByHop  # noqa: E402
from scapy.packet import Packet, Raw  # noqa: E402

from pyclassify._native import TcpResetter, tcp_reset_segments  # noqa: E402
from tests.enforce.netns import PY, Namespaces, root_reason, sh  # noqa: E402

REQUEST = b"GET / HTTP/1.1\r\n\r\n"
CLIENT4, SERVER4 = "10.199.0.1", "10.199.0.2"
CLIENT6, SERVER6 = "fd00:199::1", "fd00:199::2"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_RAW) to open raw sockets")


def segment(
    version: int,
    flags: str = "PA",
    seq: int = 0x12345678,
    ack: int = 0x9ABCDEF0,
    payload: bytes = REQUEST,
    options: list | None = None,
) -> Packet:
    ip = IP(src=CLIENT4, dst=SERVER4, ttl=61, id=4321) if version == 4 else IPv6(src=CLIENT6, dst=SERVER6, hlim=61)
    tcp = TCP(sport=40123, dport=8080, seq=seq, ack=ack, flags=flags, window=501, options=options or [])
    return ip / tcp / Raw(payload) if payload else ip / tcp


def parse(version: int, raw: bytes) -> Packet:
    return IP(raw) if version == 4 else IPv6(raw)


def checksums_are_scapys(version: int, raw: bytes) -> None:
    got = parse(version, raw)
    again = got.copy()
    del again[TCP].chksum
    if version == 4:
        del again[IP].chksum
    rebuilt = parse(version, bytes(again))
    assert got[TCP].chksum == rebuilt[TCP].chksum
    if version == 4:
        assert got[IP].chksum == rebuilt[IP].chksum
    assert bytes(rebuilt) == raw


def check_header(version: int, got: Packet) -> None:
    if version == 4:
        assert (got.ihl, got.len, got.id, got.flags, got.frag, got.ttl, got.proto) == (5, 40, 0, "DF", 0, 64, 6)
        assert got.tos == 0 and not got.options
    else:
        assert (got.plen, got.nh, got.hlim, got.tc, got.fl) == (20, 6, 64, 0, 0)
    tcp = got[TCP]
    assert (tcp.dataofs, tcp.window, tcp.urgptr, tcp.options, tcp.reserved) == (5, 0, 0, [], 0)
    assert not bytes(tcp.payload)


# --- crafting ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 6])
def test_resets_of_a_request_segment(version: int) -> None:
    pkt = segment(version)
    out = tcp_reset_segments(bytes(pkt))
    assert [len(r) for r in out] == ([40, 40] if version == 4 else [60, 60])
    to_server, to_client = (parse(version, r) for r in out)
    for got in (to_server, to_client):
        check_header(version, got)

    src, dst = pkt.src, pkt.dst
    assert (to_server.src, to_server.dst) == (src, dst)
    assert (to_server[TCP].sport, to_server[TCP].dport) == (40123, 8080)
    assert to_server[TCP].seq == 0x12345678  # the first byte of the held segment: the server's rcv_nxt
    assert to_server[TCP].flags == "R" and to_server[TCP].ack == 0

    assert (to_client.src, to_client.dst) == (dst, src)
    assert (to_client[TCP].sport, to_client[TCP].dport) == (8080, 40123)
    assert to_client[TCP].seq == 0x9ABCDEF0  # the client's rcv_nxt: what it acknowledged
    assert to_client[TCP].flags == "RA" and to_client[TCP].ack == 0x12345678 + len(REQUEST)

    for r in out:
        checksums_are_scapys(version, r)


@pytest.mark.parametrize("version", [4, 6])
@pytest.mark.parametrize(
    ("flags", "seq", "payload", "client_seq", "client_ack"),
    [
        ("A", 1000, b"", 0x9ABCDEF0, 1000),  # a bare ACK
        ("FA", 1000, b"bye", 0x9ABCDEF0, 1004),  # FIN counts one
        ("S", 0xFFFFFFFF, b"", 0, 0),  # a SYN: no ACK -> seq 0, ack = ISN + 1 (wraps)
        ("PA", 0xFFFFFFF0, b"x" * 0x20, 0x9ABCDEF0, 0x10),  # ack wraps around 2**32
    ],
)
def test_seq_and_ack_of_the_client_reset(
    version: int, flags: str, seq: int, payload: bytes, client_seq: int, client_ack: int
) -> None:
    out = tcp_reset_segments(bytes(segment(version, flags=flags, seq=seq, payload=payload)))
    assert len(out) == 2
    to_server, to_client = (parse(version, r) for r in out)
    assert to_server[TCP].seq == seq and to_server[TCP].flags == "R"
    assert to_client[TCP].seq == client_seq and to_client[TCP].ack == client_ack
    assert to_client[TCP].flags == "RA"
    for r in out:
        checksums_are_scapys(version, r)


@pytest.mark.parametrize("version", [4, 6])
def test_options_and_a_payload_cut_off_by_the_copy_range(version: int) -> None:
    """TCP options are skipped by the data offset; the payload length comes from the IP header,
    so a packet NFQUEUE cut short after the headers (copy range) is answered the same."""
    pkt = segment(version, options=[("MSS", 1400), ("NOP", None), ("NOP", None), ("Timestamp", (1, 2))])
    full = bytes(pkt)
    headers = len(full) - len(REQUEST)
    whole = tcp_reset_segments(full)
    assert len(whole) == 2
    assert tcp_reset_segments(full[:headers]) == whole
    assert tcp_reset_segments(full[: headers + 3]) == whole
    assert parse(version, whole[1])[TCP].ack == 0x12345678 + len(REQUEST)


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 6])
def test_truncated_headers_give_nothing(version: int) -> None:
    full = bytes(segment(version, options=[("MSS", 1400), ("NOP", None), ("NOP", None), ("SAckOK", b"")]))
    headers = len(full) - len(REQUEST)
    for n in range(headers):
        assert tcp_reset_segments(full[:n]) == [], n
    assert len(tcp_reset_segments(full[:headers])) == 2


def edit(raw: bytes, offset: int, value: bytes) -> bytes:
    return raw[:offset] + value + raw[offset + len(value) :]


def test_malformed_packets_give_nothing() -> None:
    v4 = bytes(segment(4))
    v6 = bytes(segment(6))
    bad = {
        "empty": b"",
        "one byte": b"\x45",
        "version 5": edit(v4, 0, b"\x55"),
        "version 0": bytes(60),
        "IHL 4": edit(v4, 0, b"\x44"),
        "IHL past the end": edit(v4, 0, b"\x4f")[:50],
        "total length below IHL": edit(v4, 2, b"\x00\x10"),
        "total length 0 (GSO)": edit(v4, 2, b"\x00\x00"),
        "total length below the TCP header": edit(v4, 2, b"\x00\x24"),
        "data offset 4": edit(v4, 32, b"\x40"),
        "data offset past total length": edit(edit(v4, 2, b"\x00\x28"), 32, b"\x60"),
        "data offset past the bytes": edit(v4, 32, b"\xf0")[:60],
        "v6 payload length 0 (jumbo)": edit(v6, 4, b"\x00\x00"),
        "v6 payload length below TCP": edit(v6, 4, b"\x00\x13"),
        "v6 data offset past payload length": edit(edit(v6, 4, b"\x00\x14"), 52, b"\x60"),
        "udp": bytes(IP(src=CLIENT4, dst=SERVER4) / UDP(sport=1, dport=53) / Raw(b"x" * 30)),
        "udp6": bytes(IPv6(src=CLIENT6, dst=SERVER6) / UDP(sport=1, dport=53) / Raw(b"x" * 30)),
        "v4 fragment at offset 8": bytes(IP(src=CLIENT4, dst=SERVER4, proto=6, frag=1) / Raw(bytes(TCP()) + REQUEST)),
        "v6 hop-by-hop then TCP": bytes(
            IPv6(src=CLIENT6, dst=SERVER6) / IPv6ExtHdrHopByHop() / TCP(flags="PA") / REQUEST
        ),
        "v6 next header UDP": edit(v6, 6, b"\x11"),
    }
    for name, raw in bad.items():
        assert tcp_reset_segments(raw) == [], name


def test_a_first_fragment_is_answered() -> None:
    """MF with offset 0 carries the TCP header: seq is known, the answer is sent."""
    raw = bytes(IP(src=CLIENT4, dst=SERVER4, flags="MF") / TCP(sport=1, dport=2, seq=7, ack=9, flags="PA") / REQUEST)
    assert len(tcp_reset_segments(raw)) == 2


def test_garbage_never_crashes() -> None:
    rng = random.Random(20240611)
    seeds = [bytes(segment(4)), bytes(segment(6)), bytes(segment(4, options=[("MSS", 1)]))]
    answered = 0
    for i in range(20000):
        if i % 2:
            raw = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 6)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            raw = bytes(raw[: rng.randint(0, len(raw))])
        else:
            raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 80)))
        out = tcp_reset_segments(raw)
        assert len(out) in (0, 2)
        if out:
            answered += 1
            version = raw[0] >> 4
            assert {len(r) for r in out} == {40 if version == 4 else 60}
    assert answered  # the mutations keep some valid packets


def test_not_bytes_is_refused() -> None:
    with pytest.raises(TypeError):
        tcp_reset_segments(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tcp_reset_segments(bytearray(bytes(segment(4))))  # type: ignore[arg-type]


@needs_root
def test_resetter_refuses_bad_input_without_sending() -> None:
    r = TcpResetter()
    try:
        for raw in (b"", b"\x45" * 19, bytes(IP() / UDP() / Raw(b"x" * 20)), bytes(100)):
            assert r.reset_packet(raw) == 0
        assert (r.sent, r.errors) == (0, 0)
        with pytest.raises(TypeError):
            r.reset_packet(None)  # type: ignore[arg-type]
    finally:
        r.close()
    r.close()  # twice is fine
    with pytest.raises(ValueError):
        r.reset_packet(bytes(segment(4)))


# --- live: two namespaces ------------------------------------------------------------------------

SERVER = r"""
import socket, sys
ip, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((ip, port)); s.listen(1); s.settimeout(6)
print("listening", flush=True)
c, _ = s.accept(); c.settimeout(6)
got = b""
try:
    while True:
        d = c.recv(4096)
        if not d:
            print("eof " + got.decode().strip(), flush=True); break
        got += d
except ConnectionResetError:
    print("reset " + got.decode().strip(), flush=True)
except OSError as e:
    print("error " + repr(e), flush=True)
"""

# In the client's namespace: a client that connects, sends a request and waits on recv; an
# AF_PACKET sniffer that sees the request leave; then, as the firewall holding the client's next
# request, a TcpResetter given that held segment (seq = after the request, ack = the client's ack).
CLIENT = r"""
import json, socket, sys, threading, time
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from pyclassify._native import TcpResetter
dst, port, ifname = sys.argv[1], int(sys.argv[2]), sys.argv[3]
v6 = ":" in dst
request = b"GET / HTTP/1.1\r\n\r\n"
sniff = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); sniff.bind((ifname, 0)); sniff.settimeout(5)
resetter = TcpResetter()
out = {}
def client():
    c = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET); c.settimeout(5)
    c.connect((dst, port)); c.sendall(request)
    try:
        out["client"] = "data %r" % c.recv(4096)
    except ConnectionResetError:
        out["client"] = "reset"
    except OSError as e:
        out["client"] = "error %r" % e
t = threading.Thread(target=client); t.start()
while True:
    frame, addr = sniff.recvfrom(65535)
    if addr[2] != socket.PACKET_OUTGOING or frame[12:14] != (b"\x86\xdd" if v6 else b"\x08\x00"):
        continue
    ip = (IPv6 if v6 else IP)(frame[14:])
    if TCP in ip and ip[TCP].dport == port and bytes(ip[TCP].payload) == request:
        break
sent = ip[TCP]
held = (IPv6(src=ip.src, dst=ip.dst) if v6 else IP(src=ip.src, dst=ip.dst, flags="DF")) / TCP(
    sport=sent.sport, dport=sent.dport, seq=(sent.seq + len(request)) % 2**32, ack=sent.ack,
    flags="PA", window=sent.window) / b"GET /denied HTTP/1.1\r\n\r\n"
time.sleep(0.05)  # the client is waiting on recv
out["returned"] = resetter.reset_packet(bytes(held))
t.join(6)
out.update(sent=resetter.sent, errors=resetter.errors, alive=t.is_alive())
print(json.dumps(out), flush=True)
"""


class Pair(Namespaces):
    """Namespaces ``a`` (client, firewall) and ``b`` (server) joined by veth0 <-> veth0."""

    def __init__(self) -> None:
        super().__init__()
        tag = uuid.uuid4().hex[:6]
        self.a, self.b = f"pctr-a-{tag}", f"pctr-b-{tag}"

    def up(self) -> None:
        sh("ip", "netns", "add", self.a)
        sh("ip", "netns", "add", self.b)
        sh("ip", "-n", self.a, "link", "add", "veth0", "type", "veth", "peer", "name", "veth0", "netns", self.b)
        for ns, v4, v6 in ((self.a, CLIENT4, CLIENT6), (self.b, SERVER4, SERVER6)):
            sh("ip", "-n", ns, "addr", "add", f"{v4}/24", "dev", "veth0")
            sh("ip", "-n", ns, "addr", "add", f"{v6}/64", "dev", "veth0", "nodad")
            sh("ip", "-n", ns, "link", "set", "veth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def run(self, ns: str, script: str, *args: str) -> subprocess.Popen[str]:
        return self.spawn(ns, [PY, "-c", script, *args], stderr=subprocess.PIPE)

    def down(self) -> None:
        self.stop_processes()
        sh("ip", "netns", "del", self.a, check=False)
        sh("ip", "netns", "del", self.b, check=False)


@pytest.fixture
def pair() -> Iterator[Pair]:
    reason = "needs root (network namespaces, raw sockets)" if os.geteuid() != 0 else root_reason()
    if reason:
        pytest.skip(reason)
    p = Pair()
    try:
        p.up()
        yield p
    finally:
        p.down()


@pytest.mark.parametrize("version", [4, 6])
def test_live_connection_is_reset_both_ways(pair: Pair, version: int) -> None:
    server_ip = SERVER4 if version == 4 else SERVER6
    port = "8080"
    server = pair.run(pair.b, SERVER, server_ip, port)
    assert server.stdout is not None
    assert server.stdout.readline().strip() == "listening", server.stderr.read() if server.stderr else ""

    client = pair.run(pair.a, CLIENT, server_ip, port, "veth0")
    try:
        client_out, client_err = client.communicate(timeout=15)
        server_out, server_err = server.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("the client or the server hung")
    assert client.returncode == 0, client_err
    result = json.loads(client_out.strip().splitlines()[-1])
    assert result["returned"] == 2 and result["sent"] == 2 and result["errors"] == 0, result
    assert not result["alive"], result
    assert result["client"] == "reset", result  # the client's recv: ECONNRESET
    # The server got the first request, then the RST instead of the held second one.
    assert server_out.strip() == "reset " + REQUEST.decode().strip(), (server_out, server_err)
