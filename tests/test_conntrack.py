"""The connection tracker through the extension: numpy batches in, state codes out.

The state machine itself is tested in Rust (rust/core/tests/conntrack_*.rs); here we hold the
Python face to its contract: batches of HEADER_DTYPE through the buffer protocol, clear errors
for arrays that do not fit, policy verdicts applied to NEW packets only, ICMP errors with their
quoted tuples, revalidation with a Python predicate, and no crash on any bytes.
"""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyclassify._engine import ConnTrack, ConnTrackError
from pyclassify.batch import FLAG_HAS_PORTS, FLAG_ICMP_ERROR, HEADER_DTYPE, new_batch
from pyclassify.capture import QUOTE_DTYPE

SYN, ACK, FIN, RST = 0x02, 0x10, 0x01, 0x04
S = 1_000_000_000
NEW, EST, REPLY, RELATED, INVALID, UNTRACKED, DENIED, PICKUP, PICKUP_REPLY = (
    ConnTrack.NEW,
    ConnTrack.ESTABLISHED,
    ConnTrack.REPLY,
    ConnTrack.RELATED,
    ConnTrack.INVALID,
    ConnTrack.UNTRACKED,
    ConnTrack.DENIED,
    ConnTrack.NEW_PICKUP,
    ConnTrack.NEW_PICKUP_REPLY,
)

# The quoted tuple of an ICMP error: the decoder's output record is the tracker's input record.
QUOTED_DTYPE = QUOTE_DTYPE


def addr(text: str) -> bytes:
    ip = ipaddress.ip_address(text)
    if ip.version == 4:
        ip = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed)
    return ip.packed


def batch(*pkts: dict) -> np.ndarray:
    b = new_batch(len(pkts))
    for i, p in enumerate(pkts):
        b[i]["src_addr"] = np.frombuffer(addr(p["src"]), np.uint8)
        b[i]["dst_addr"] = np.frombuffer(addr(p["dst"]), np.uint8)
        b[i]["ip_version"] = 6 if ":" in p["src"] else 4
        b[i]["protocol"] = p.get("proto", 6)
        b[i]["sport"] = p.get("sport", 0)
        b[i]["dport"] = p.get("dport", 0)
        b[i]["tcp_flags"] = p.get("tcp", 0)
        b[i]["icmp_type"] = p.get("icmp_type", 0)
        b[i]["ts_ns"] = p.get("ts", 0)
        b[i]["flags"] = p.get("flags", FLAG_HAS_PORTS if p.get("proto", 6) in (6, 17) else 0)
    return b


def tcp(src, sport, dst, dport, flags, **kw):
    return dict(src=src, sport=sport, dst=dst, dport=dport, tcp=flags, proto=6, **kw)


def udp(src, sport, dst, dport, **kw):
    return dict(src=src, sport=sport, dst=dst, dport=dport, proto=17, **kw)


def allow_all(n: int) -> np.ndarray:
    return np.ones(n, np.uint8)


def test_tcp_connection_through_batches():
    ct = ConnTrack()
    b = batch(
        tcp("10.0.0.1", 40000, "10.0.0.2", 80, SYN),
        tcp("10.0.0.2", 80, "10.0.0.1", 40000, SYN | ACK),
        tcp("10.0.0.1", 40000, "10.0.0.2", 80, ACK),
        tcp("10.0.0.2", 80, "10.0.0.1", 40000, FIN | ACK),
    )
    states, allowed = ct.track(b, np.array([1, 0, 0, 0], np.uint8), now_ns=S)
    # Only the SYN is judged by policy; the rest follow the connection.
    assert states.tolist() == [NEW, REPLY, EST, REPLY]
    assert allowed.tolist() == [1, 1, 1, 1]
    assert states.dtype == np.uint8 and allowed.dtype == np.uint8
    assert len(ct) == 1
    (flow,) = ct.flows()
    assert flow["flow"] == ("10.0.0.1", "10.0.0.2", 40000, 80, 6)
    assert flow["tcp_state"] == "FIN_WAIT"
    assert flow["assured"] is True
    assert (flow["packets_orig"], flow["packets_reply"]) == (2, 2)
    s = ct.stats()
    assert (s["new"], s["reply"], s["established"], s["inserts"], s["entries"]) == (1, 2, 1, 1, 1)


def test_denied_flow_is_not_tracked_and_its_replies_are_denied_with_it():
    ct = ConnTrack()
    b = batch(
        tcp("10.0.0.1", 1, "10.0.0.2", 23, SYN),
        tcp("10.0.0.2", 23, "10.0.0.1", 1, SYN | ACK),
        tcp("10.0.0.2", 23, "10.0.0.1", 1, ACK),
        tcp("10.0.0.1", 1, "10.0.0.2", 23, ACK),
    )
    states, allowed = ct.track(b, np.array([0, 1, 1, 1], np.uint8), now_ns=0)
    assert states.tolist() == [NEW, DENIED, DENIED, DENIED]
    assert allowed.tolist() == [0, 0, 0, 0]
    s = ct.stats()
    assert len(ct) == 0 and (s["denials"], s["denied"]) == (1, 3)


def test_loose_pickup_option():
    mid = batch(tcp("10.0.0.1", 5000, "10.0.0.2", 22, ACK))
    assert ConnTrack().track(mid, allow_all(1), 0)[0].tolist() == [PICKUP]
    # the server's segment first: the connection is the client's (the higher port)
    assert ConnTrack().track(batch(tcp("10.0.0.2", 22, "10.0.0.1", 5000, ACK)), allow_all(1), 0)[0].tolist() == [
        PICKUP_REPLY
    ]
    strict = ConnTrack(tcp_loose=False)
    assert strict.track(mid, allow_all(1), 0)[0].tolist() == [INVALID]
    assert strict.config["tcp_loose"] is False


def test_timestamps_from_headers_when_no_clock_is_given():
    ct = ConnTrack()
    ct.track(batch(udp("10.0.0.1", 5353, "10.0.0.2", 53, ts=0)), allow_all(1))
    late = batch(udp("10.0.0.2", 53, "10.0.0.1", 5353, ts=31 * S))
    on_time = batch(udp("10.0.0.2", 53, "10.0.0.1", 5353, ts=29 * S))
    assert ct.track(on_time, np.zeros(1, np.uint8))[0].tolist() == [REPLY]
    # Replied UDP lasts 120 s from the last packet.
    assert ct.track(late, np.zeros(1, np.uint8))[0].tolist() == [REPLY]
    ct2 = ConnTrack()
    ct2.track(batch(udp("10.0.0.1", 5353, "10.0.0.2", 53, ts=0)), allow_all(1))
    states, allowed = ct2.track(late, np.zeros(1, np.uint8))
    assert states.tolist() == [NEW] and allowed.tolist() == [0]


def test_custom_timeouts_and_expire():
    ct = ConnTrack(timeouts={"udp_unreplied": 0.5}, sweep_per_packet=0)
    assert ct.config["timeouts"]["udp_unreplied"] == 0.5
    assert ct.config["timeouts"]["tcp_established"] == 7440.0
    pkts = [udp("10.0.0.1", 1000 + i, "10.0.0.2", 53) for i in range(10)]
    ct.track(batch(*pkts), allow_all(10), now_ns=0)
    assert len(ct) == 10
    assert ct.expire(S, budget=4) == 4
    assert ct.expire(S) == 6
    assert len(ct) == 0 and ct.stats()["expired"] == 10


def test_icmp_echo_and_error_related_with_quoted_tuples():
    ct = ConnTrack()
    echo = dict(src="10.0.0.1", dst="10.0.0.2", proto=1, icmp_type=8, sport=77)
    reply = dict(src="10.0.0.2", dst="10.0.0.1", proto=1, icmp_type=0, sport=77)
    syn = tcp("10.0.0.1", 40000, "10.0.0.2", 80, SYN)
    err = dict(src="192.168.1.254", dst="10.0.0.1", proto=1, icmp_type=3, flags=FLAG_ICMP_ERROR)
    stray = dict(src="192.168.1.254", dst="10.0.0.1", proto=1, icmp_type=11, flags=FLAG_ICMP_ERROR)
    b = batch(echo, reply, syn, err, stray)
    quoted = np.zeros(5, QUOTED_DTYPE)
    quoted[3]["src_addr"] = np.frombuffer(addr("10.0.0.1"), np.uint8)
    quoted[3]["dst_addr"] = np.frombuffer(addr("10.0.0.2"), np.uint8)
    quoted[3]["sport"], quoted[3]["dport"], quoted[3]["protocol"], quoted[3]["flags"] = 40000, 80, 6, 1
    quoted[4] = quoted[3]
    quoted[4]["sport"] = 40001  # quotes a flow nobody opened
    states, allowed = ct.track(b, np.array([1, 0, 1, 0, 0], np.uint8), now_ns=0, quoted=quoted)
    assert states.tolist() == [NEW, REPLY, NEW, RELATED, INVALID]
    assert allowed.tolist() == [1, 1, 1, 1, 0]
    icmp_flows = [f["flow"] for f in ct.flows() if f["flow"][4] == 1]
    assert icmp_flows == [("10.0.0.1", "10.0.0.2", 77, 8 << 8, 1)]
    # Without the quoted array an ICMP error cannot be related.
    assert ct.track(batch(err), np.zeros(1, np.uint8), now_ns=0)[0].tolist() == [INVALID]


def test_ipv6_neighbour_discovery_is_untracked():
    ct = ConnTrack()
    ns = dict(src="fe80::1", dst="ff02::1:ff00:2", proto=58, icmp_type=135)
    states, allowed = ct.track(batch(ns, ns), np.array([1, 0], np.uint8), now_ns=0)
    assert states.tolist() == [UNTRACKED, UNTRACKED]
    assert allowed.tolist() == [1, 0], "untracked packets follow policy per packet"
    assert len(ct) == 0


def test_cap_early_drops_unassured_only():
    ct = ConnTrack(max_entries=3)
    assured = [udp("10.0.0.1", p, "10.0.0.2", 53) for p in (1, 2)]
    answers = [udp("10.0.0.2", 53, "10.0.0.1", p) for p in (1, 2)]
    ct.track(batch(*assured, *answers), allow_all(4), now_ns=0)
    fresh = [udp("10.0.0.1", p, "10.0.0.2", 53) for p in range(10, 20)]
    ct.track(batch(*fresh), allow_all(10), now_ns=1)
    assert len(ct) == 3
    s = ct.stats()
    assert s["early_drops"] == 9
    ports = sorted(f["flow"][2] for f in ct.flows())
    assert ports == [1, 2, 19]


def test_revalidate_with_python_predicate():
    ct = ConnTrack()
    pkts = [tcp("10.0.0.1", 1000 + i, "10.0.0.2", 22 if i % 4 == 0 else 443, SYN) for i in range(20)]
    ct.track(batch(*pkts), allow_all(20), now_ns=0)
    seen = []

    def still_allowed(flow):
        seen.append(flow)
        return flow[3] != 22

    revoked = ct.revalidate(still_allowed)
    assert len(seen) == 20
    assert sorted(revoked) == sorted(("10.0.0.1", "10.0.0.2", 1000 + i, 22, 6) for i in range(0, 20, 4))
    # revoked connections stay, marked (their packets are dropped both ways until idle)
    assert len(ct) == 20 and ct.stats()["revoked"] == 5
    assert ct.revalidate(still_allowed) == []  # revoked ones are not revoked (nor reported) again

    def broken(flow):
        raise RuntimeError("policy engine down")

    with pytest.raises(RuntimeError, match="policy engine down"):
        ct.revalidate(broken)
    assert len(ct) == 20, "a failing predicate changes nothing"
    ct.clear()
    assert len(ct) == 0


def test_bad_arrays_get_clear_errors():
    ct = ConnTrack()
    good = batch(udp("10.0.0.1", 1, "10.0.0.2", 2))
    with pytest.raises(ValueError, match="64-byte items"):
        ct.track(np.zeros(4, np.uint64), allow_all(4))
    with pytest.raises(ValueError, match="1-D"):
        ct.track(np.zeros((2, 2), HEADER_DTYPE), allow_all(4))
    with pytest.raises(ValueError, match="C-contiguous"):
        ct.track(new_batch(4)[::2], allow_all(2))
    raw = np.zeros(64 * 2 + 1, np.uint8)
    misaligned = raw[1:].view(HEADER_DTYPE)
    with pytest.raises(ValueError, match="aligned"):
        ct.track(misaligned, allow_all(2))
    with pytest.raises(ValueError, match="verdicts has 3 items, the header batch has 1"):
        ct.track(good, allow_all(3))
    with pytest.raises(ValueError, match="verdicts must have 1-byte items"):
        ct.track(good, np.ones(1, np.int64))
    with pytest.raises(ValueError, match="quoted must have 40-byte items"):
        ct.track(good, allow_all(1), quoted=np.zeros(1, HEADER_DTYPE))
    with pytest.raises(TypeError, match="buffer protocol"):
        ct.track([1, 2, 3], allow_all(3))
    # An empty batch is fine.
    states, allowed = ct.track(new_batch(0), allow_all(0))
    assert states.shape == (0,) and allowed.shape == (0,)


def test_bad_configuration():
    with pytest.raises(ConnTrackError, match="max_entries"):
        ConnTrack(max_entries=0)
    with pytest.raises(ConnTrackError, match="icmp must be positive"):
        ConnTrack(timeouts={"icmp": 0})
    with pytest.raises(ValueError, match='unknown timeout "tcp_nap"'):
        ConnTrack(timeouts={"tcp_nap": 1.0})
    with pytest.raises(ValueError, match="not a valid number"):
        ConnTrack(timeouts={"icmp": -1.0})
    assert issubclass(ConnTrackError, ValueError)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.binary(min_size=0, max_size=64 * 40).map(lambda b: b[: len(b) // 64 * 64]),
    st.binary(min_size=40 * 40, max_size=40 * 40),
    st.integers(1, 8),
    st.integers(0, 2**64 - 1),
)
def test_any_bytes_never_crash(data, quoted_bytes, cap, now):
    ct = ConnTrack(max_entries=cap)
    n = len(data) // 64
    b = np.frombuffer(bytearray(data), HEADER_DTYPE)
    q = np.frombuffer(bytearray(quoted_bytes[: 40 * n]), QUOTED_DTYPE)
    states, allowed = ct.track(b, allow_all(n), now_ns=now, quoted=q)
    assert set(states.tolist()) <= {NEW, EST, REPLY, RELATED, INVALID, UNTRACKED}
    assert set(allowed.tolist()) <= {0, 1}
    assert len(ct) <= cap
    ct.revalidate(lambda flow: flow[2] % 2 == 0)
    assert len(ct) <= cap
