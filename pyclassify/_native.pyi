"""Packet I/O shim of pyclassify (Cython). Keep in step with native/_native.pyx; tests/test_stubs.py checks."""

from typing import Final

HEADER_SIZE: Final[int]

def header_layout() -> list[tuple[str, int, int]]:
    """Layout of PacketHeader as [(name, offset, size), ...] in declaration order."""

def header_flags() -> list[tuple[str, int]]:
    """The flags bits of PacketHeader as [(name, value), ...]."""
