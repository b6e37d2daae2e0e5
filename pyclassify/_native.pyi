"""Packet I/O shim of pyclassify (Cython). Keep in step with native/_native.pyx; tests/test_stubs.py checks."""

from typing import Final

HEADER_SIZE: Final[int]

def header_layout() -> list[tuple[str, int, int]]:
    """Layout of PacketHeader as [(name, offset, size), ...] in declaration order."""

def header_flags() -> list[tuple[str, int]]:
    """The flags bits of PacketHeader as [(name, value), ...]."""

# --- packet path: decoder and pcap/pcapng reader (native/decode.pxi, native/pcap.pxi) ---

from typing import Any

QUOTE_SIZE: Final[int]

def error_kinds() -> list[tuple[str, int]]:
    """The decode error kinds of native/header_batch.h as [(name, value), ...] in value order."""

def pack_records(
    fmt: int, nanosecond: bool, data: Any, offsets: Any, caplens: Any, headers: Any, indices: Any
) -> bytes:
    """Records of the packets ``indices`` as pcap (fmt 1) or pcapng EPB (fmt 2) bytes."""

class Decoder:
    """Decodes frames of a given link type into a header batch, with its own fragment table."""

    def decode(
        self,
        frames: Any,
        headers: Any,
        quotes: Any,
        linktype: int = 1,
        ts_ns: Any = None,
        wire_lengths: Any = None,
    ) -> None: ...
    @property
    def fragment_stats(self) -> dict[str, int]: ...

class Reader:
    """Reads a pcap or pcapng capture into header batches (see pyclassify.capture)."""

    def __init__(self, source: Any, chunk: int = ...) -> None: ...
    def read_into(self, headers: Any, quotes: Any, offsets: Any, caplens: Any, linktypes: Any) -> int: ...
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
    def unknown_interface(self) -> int: ...
    @property
    def problems(self) -> list[str]: ...
    @property
    def done(self) -> bool: ...
    @property
    def fragment_stats(self) -> dict[str, int]: ...


# The Rust engine's C ABI (native/engine_client.pxi)
class EngineClient:
    pod_allow: bool
    host_allow: bool
    def __init__(
        self,
        capsule: Any,
        conntrack: bool = True,
        max_entries: int = 262144,
        tcp_loose: bool = True,
        pod_allow: bool = True,
        host_allow: bool = False,
    ) -> None: ...
    def swap(self, capsule: Any) -> None: ...
    def judge(self, headers: Any, out: Any, quotes: Any = None) -> None: ...
    def revalidate(
        self, capsule: Any = None, now_ns: int = 0, cap: int = 65536
    ) -> tuple[int, list[tuple[bytes, bytes, int, int, int, int]]]: ...
    @property
    def tracked(self) -> int: ...
