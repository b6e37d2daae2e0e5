"""The routed topology of tests/enforce/netns.py, built and removed around each test that asks
for it (iptables state goes with its namespaces)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.enforce.netns import Topology


@pytest.fixture
def topo() -> Iterator[Topology]:
    t = Topology()
    try:
        t.up()
        yield t
    finally:
        t.down()
