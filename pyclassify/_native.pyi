"""Packet I/O shim of pyclassify (Cython). Keep in step with native/_native.pyx; tests/test_stubs.py checks."""

from typing import Any, Final

HEADER_SIZE: Final[int]

def header_layout() -> list[tuple[str, int, int]]:
    """Layout of PacketHeader as [(name, offset, size), ...] in declaration order."""

def record_layouts() -> dict[str, tuple[int, list[tuple[str, int, int]]]]:
    """Every record of the generated C headers as the C compiler lays it out:
    ``{c_name: (size, [(name, offset, size), ...])}``, fields in declaration order."""

def header_flags() -> list[tuple[str, int]]:
    """The flags bits of PacketHeader as [(name, value), ...]."""

# --- packet path: decoder and pcap/pcapng reader (native/decode.pxi, native/pcap.pxi) ---

QUOTE_SIZE: Final[int]
OUTER_SIZE: Final[int]
DEFAULT_VXLAN_PORTS: Final[tuple[int, ...]]
DEFAULT_GENEVE_PORTS: Final[tuple[int, ...]]
MAX_TUNNEL_PORTS: Final[int]

def error_kinds() -> list[tuple[str, int]]:
    """The decode error kinds of native/header_batch.h as [(name, value), ...] in value order."""

def encap_kinds() -> list[tuple[str, int]]:
    """The tunnel kinds of native/header_batch.h (PacketHeader.encap) as [(name, value), ...]."""

def pack_records(
    fmt: int, nanosecond: bool, data: Any, offsets: Any, caplens: Any, headers: Any, indices: Any
) -> bytes:
    """Records of the packets ``indices`` as pcap (fmt 1) or pcapng EPB (fmt 2) bytes."""

def payload_spans(
    data: Any,
    offsets: Any,
    caplens: Any,
    linktypes: Any,
    indices: Any,
    vxlan_ports: Any = (4789, 8472),
    geneve_ports: Any = (6081,),
    decapsulate: bool = True,
) -> Any:
    """(n, 3) int64 array: each packet's TCP/UDP payload as [start, end) in ``data`` and its TCP
    sequence number (0 for UDP); (0, 0, 0) if none. Inside the tunnels given, as the decoder."""

class Decoder:
    """Decodes frames of a given link type into a header batch, with its own fragment table."""

    def __init__(
        self, vxlan_ports: Any = (4789, 8472), geneve_ports: Any = (6081,), decapsulate: bool = True
    ) -> None: ...
    def decode(
        self,
        frames: Any,
        headers: Any,
        quotes: Any,
        linktype: int = 1,
        ts_ns: Any = None,
        wire_lengths: Any = None,
        outers: Any = None,
    ) -> None: ...
    @property
    def fragment_stats(self) -> dict[str, int]: ...

class Reader:
    """Reads a pcap or pcapng capture into header batches (see pyclassify.capture)."""

    def __init__(
        self,
        source: Any,
        chunk: int = ...,
        vxlan_ports: Any = (4789, 8472),
        geneve_ports: Any = (6081,),
        decapsulate: bool = True,
    ) -> None: ...
    def read_into(
        self, headers: Any, quotes: Any, offsets: Any, caplens: Any, linktypes: Any, outers: Any = None
    ) -> int: ...
    def release(self) -> None: ...
    @property
    def window(self) -> Any: ...
    @property
    def window_start(self) -> int: ...
    @property
    def format(self) -> str: ...
    @property
    def nanosecond(self) -> bool: ...
    @property
    def big_endian(self) -> bool: ...
    @property
    def sections(self) -> int: ...
    @property
    def interfaces(self) -> list[tuple[int, int, int, int, int, int]]: ...
    @property
    def counts(self) -> list[int]: ...
    @property
    def packets(self) -> int: ...
    @property
    def tunnelled(self) -> int: ...
    @property
    def unknown_interface(self) -> int: ...
    @property
    def problems(self) -> list[str]: ...
    @property
    def done(self) -> bool: ...
    @property
    def fragment_stats(self) -> dict[str, int]: ...

# The Rust engine's C ABI (native/engine_client.pxi)
ENGINE_ABI_VERSION: Final[int]
CT_STATS_NAMES: Final[tuple[str, ...]]

class EngineClient:
    pod_allow: bool
    host_allow: bool
    via_endpoint: int
    @property
    def via(self) -> bool: ...
    @property
    def via_ingress(self) -> bool: ...
    def __init__(
        self,
        capsule: Any,
        conntrack: bool = True,
        max_entries: int = 262144,
        tcp_loose: bool = True,
        pod_allow: bool = True,
        host_allow: bool = False,
        http_connections: int = 0,
        via: tuple[int | None, bool] | None = None,
    ) -> None: ...
    def swap(self, capsule: Any) -> None: ...
    def share_http(self, owner: EngineClient) -> None: ...
    def judge(self, headers: Any, out: Any, quotes: Any = None) -> None: ...
    def revalidate(
        self, capsule: Any = None, now_ns: int = 0, cap: int = 65536
    ) -> tuple[int, list[tuple[bytes, bytes, int, int, int, int]]]: ...
    @property
    def tracked(self) -> int: ...
    @property
    def ct_stats(self) -> dict[str, int]: ...

# --- live enforcement: NFQUEUE loop, inotify, ctnetlink (native/nfqueue.pxi, native/inotify.pxi, native/ctnetlink.pxi) ---

def nfq_parse(data: Any) -> list[tuple[int, int, bytes | None, int, int]]:
    """Parse nfnetlink_queue PACKET messages: [(id, hw_protocol, payload, wirelen, indev), ...]."""

def ct_delete_message(
    src: bytes,
    dst: bytes,
    sport: int,
    dport: int,
    proto: int,
    ipver: int,
    seq: int = 0,
    mark: int = 0,
    mask: int = 0,
) -> bytes:
    """The IPCTNL_MSG_CT_DELETE request for one original tuple (with ``mask``: the update that
    sets the mark bits under it to ``mark``'s instead)."""

def ct_mark_messages(raw: Any, mark: int, mask: int) -> bytes:
    """The ctnetlink updates ``CtNetlink.mark_rows`` sends for the header records ``raw``."""

def ct_dump_message(family: int, mark: int = 0, mask: int = 0, seq: int = 1) -> bytes:
    """The IPCTNL_MSG_CT_GET dump request of one family (entries whose mark & mask == mark)."""

class CtTable:
    """Headers read from one conntrack dump."""

    def buffers(self) -> tuple[bytearray, bytearray]: ...

class NfQueue:
    """One NFQUEUE queue bound over raw netlink, judged by an EngineClient."""

    @property
    def queue(self) -> int: ...
    @property
    def fail_open(self) -> bool: ...
    @property
    def batch_verdicts(self) -> bool: ...
    @property
    def reject_mark(self) -> int: ...
    @property
    def accept_mark(self) -> int: ...
    @property
    def dns(self) -> bool: ...
    def dns_errors(self) -> list[int]: ...
    @property
    def http_mark(self) -> int: ...
    @property
    def http_deny_mark(self) -> int: ...
    def http_errors(self) -> list[int]: ...
    @property
    def repeat_accepted(self) -> bool: ...
    def admit_http(self, http_loop: NfQueue, mark: int) -> None: ...
    def __init__(
        self,
        client: EngineClient,
        queue: int,
        fail_open: bool = False,
        copy_range: int = 128,
        maxlen: int = 4096,
        batch: int = 64,
        batch_verdicts: bool = True,
        gso: bool = True,
        rcvbuf: int = ...,
        reject_mark: int = 0,
        accept_mark: int = 0,
        dns: bool = False,
        http_mark: int = 0,
        http_deny_mark: int = 0,
        repeat_accepted: bool = False,
    ) -> None: ...
    def open(self) -> None: ...
    def close(self) -> None: ...
    def stop(self) -> None: ...
    def run(self) -> None: ...
    def swap(
        self, capsule: Any, revalidate: bool = True, via_endpoint: int | None = ...
    ) -> tuple[int, list[tuple[bytes, bytes, int, int, int, int]]]: ...
    def batch_histogram(self) -> tuple[list[float], list[int], float]: ...
    def drain_events(self) -> tuple[bytes, bytes, int]: ...
    @property
    def tracked(self) -> int: ...
    @property
    def stats(self) -> dict[str, int]: ...

class Inotify:
    """A minimal inotify binding."""

    IN_MODIFY: int
    IN_ATTRIB: int
    IN_CLOSE_WRITE: int
    IN_MOVED_FROM: int
    IN_MOVED_TO: int
    IN_CREATE: int
    IN_DELETE: int
    IN_DELETE_SELF: int
    IN_MOVE_SELF: int
    IN_IGNORED: int
    IN_ISDIR: int
    IN_Q_OVERFLOW: int
    def fileno(self) -> int: ...
    def close(self) -> None: ...
    def add_watch(self, path: Any, mask: int) -> int: ...
    def rm_watch(self, wd: int) -> None: ...
    def read(self, timeout_ms: int = -1) -> list[tuple[int, int, str]]: ...

class CtNetlink:
    """A ctnetlink socket: read the kernel's connection table, delete or mark entries by
    original tuple."""

    def close(self) -> None: ...
    def delete(self, flows: Any, mark: int = 0, mask: int = 0) -> dict[str, int]: ...
    def mark_rows(self, raw: Any, mark: int, mask: int) -> dict[str, int]: ...
    def dump(self, mark: int = 0, mask: int = 0, ipv6: bool = True) -> tuple[bytearray, bytearray]: ...

# The AF_PACKET inline bridge (native/afpacket.pxi; Python face: pyclassify.bridge.Bridge)
class AfPacketBridge:
    """The AF_PACKET bridge between two interfaces, judged by the engine."""

    @property
    def if1(self) -> str: ...
    @property
    def if2(self) -> str: ...
    def __init__(
        self,
        if1: str,
        if2: str,
        capsule: Any,
        *,
        block_size: int = ...,
        block_nr: int = 16,
        tov_ms: int = 2,
        batch: int = 1024,
        vnet_hdr: bool = True,
        judge: bool = True,
        forward_other: bool = False,
        nd_bypass: bool = True,
        fail_open: bool = False,
        conntrack: bool = True,
        max_entries: int = 262144,
        tcp_loose: bool = True,
        pod_allow: bool = True,
        host_allow: bool = False,
        http_connections: int = 0,
        reject: bool = False,
        reject_rate: int = 10000,
        vxlan_ports: Any = (4789, 8472),
        geneve_ports: Any = (6081,),
        decapsulate: bool = True,
    ) -> None: ...
    def run(self) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...
    def swap(self, capsule: Any, timeout: float = 5.0) -> int: ...
    @property
    def running(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def counters(self) -> dict[str, Any]: ...

# Cutting a denied TCP connection both ways with two crafted RSTs (native/tcpreset.pxi)
def tcp_reset_segments(pkt: bytes) -> list[bytes]:
    """The two IP packets (RST to the server, RST to the client) crafted for the client ->
    server TCP segment ``pkt`` (from its IP header on), or ``[]`` when it is not one."""

def icmp_unreachable(pkt: bytes) -> bytes:
    """The ICMP (or ICMPv6) port unreachable error that rejects the IP packet ``pkt`` (from
    its IP header on), as the bridge sends it with ``reject``; ``b""`` when none is due."""

class TcpResetter:
    """Raw IPv4/IPv6 sockets (IPPROTO_RAW, needs CAP_NET_RAW) that send those two RSTs."""

    def __init__(self) -> None: ...
    def close(self) -> None: ...
    def reset_packet(self, pkt: bytes) -> int: ...
    @property
    def sent(self) -> int: ...
    @property
    def errors(self) -> int: ...
