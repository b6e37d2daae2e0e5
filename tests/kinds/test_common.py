"""The protocol table of ``pyclassify.kinds.common`` is the only one in the package: no other module
writes its own names-to-numbers (or numbers-to-names) mapping, or its own literal set of protocol
numbers, where a copy could disagree with it (as copies once did about UDPLite)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pyclassify
from pyclassify.ir import PROTO_ICMP, PROTO_ICMPV6, PROTO_SCTP, PROTO_TCP, PROTO_UDP, PROTO_UDPLITE
from pyclassify.kinds.common import (
    ICMP_PROTOCOLS,
    PORT_PROTOCOLS,
    PROTOCOL_NAMES,
    PROTOCOL_NUMBERS,
    protocol_name,
)

PACKAGE = Path(pyclassify.__file__).parent
TABLE = PACKAGE / "kinds" / "common.py"
NAMES = {"tcp", "udp", "sctp", "icmp", "icmpv6", "udplite"}
NUMBERS = {PROTO_TCP, PROTO_UDP, PROTO_SCTP, PROTO_ICMP, PROTO_ICMPV6, PROTO_UDPLITE}


def _name(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in NAMES


def _number(node: ast.AST | None) -> bool:
    if isinstance(node, ast.Constant):
        return type(node.value) is int and node.value in NUMBERS
    return isinstance(node, ast.Name) and node.id.startswith("PROTO_")


def protocol_tables(tree: ast.AST) -> list[int]:
    """Lines of literals that are a protocol table: a dict pairing protocol names with numbers (either
    way round), or a tuple, list or set of two or more protocol numbers (or ``PROTO_*`` constants),
    or of three or more protocol names (two are a command's arguments: ``("udp", "tcp")``)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            if any((_name(k) and _number(v)) or (_number(k) and _name(v)) for k, v in zip(node.keys, node.values)):
                lines.append(node.lineno)
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            if len(node.elts) >= 2 and (
                all(map(_number, node.elts)) or (len(node.elts) >= 3 and all(map(_name, node.elts)))
            ):
                lines.append(node.lineno)
    return lines


def test_no_module_but_the_table_writes_a_protocol_table() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == TABLE:
            continue
        for line in protocol_tables(ast.parse(path.read_text(), str(path))):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    assert not found, f"protocol tables outside {TABLE.relative_to(PACKAGE.parent)}: {found}"


def test_the_check_finds_a_table_written_either_way_round() -> None:
    assert protocol_tables(ast.parse('P = {1: "ICMP", 6: "TCP"}')) == [1]
    assert protocol_tables(ast.parse('P = {"udp": 17}')) == [1]
    assert protocol_tables(ast.parse("P = {PROTO_TCP: 'TCP'}")) == [1]
    assert protocol_tables(ast.parse("P = (6, 17, 132, 136)")) == [1]
    assert protocol_tables(ast.parse("P = frozenset({PROTO_ICMP, PROTO_ICMPV6})")) == [1]
    assert protocol_tables(ast.parse('P = ("TCP", "UDP", "UDPLite")')) == [1]
    assert protocol_tables(ast.parse("P = (6, 'x'); Q = {'TCP': 'tcp'}; R = (1, 2, 3)")) == []


@pytest.mark.parametrize(
    "name, number", [("TCP", 6), ("UDP", 17), ("SCTP", 132), ("ICMP", 1), ("ICMPv6", 58), ("UDPLite", 136)]
)
def test_names_and_numbers_both_ways(name: str, number: int) -> None:
    assert PROTOCOL_NUMBERS[name.upper()] == number
    assert PROTOCOL_NAMES[number] == name == protocol_name(number)


def test_udplite_carries_ports_and_icmp_does_not() -> None:
    assert PORT_PROTOCOLS == {6, 17, 132, 136}
    assert ICMP_PROTOCOLS == {1, 58}
    assert protocol_name(47) == "47"
