"""The DNS half of "domains from DNS" through its binding, ``_engine.DomainFacts``: responses built
by scapy (an independent encoder, with name compression) teach (name, address) facts, CNAME chains
included; the window, grace, expiry, patterns, malformed messages and TCP framing; a flood of
answers cannot grow the store beyond its capacity."""

from __future__ import annotations

import logging
import struct
import threading

import pytest

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.layers.dns import DNS, DNSQR, DNSRR, DNSRROPT  # noqa: E402

from pyclassify import _engine  # noqa: E402
from pyclassify._engine import DomainFacts, DomainPatternError  # noqa: E402

S = 1_000_000_000


def response(
    qname: str,
    *answers: tuple[str, str, int, str],
    rcode: int = 0,
    qr: int = 1,
    edns: bool = False,
    compress: bool = True,
) -> bytes:
    """A DNS response to ``qname`` whose answer section is ``(owner, type, ttl, rdata)`` records."""
    msg = DNS(
        id=0x4242,
        qr=qr,
        rd=1,
        ra=1,
        rcode=rcode,
        qd=[DNSQR(qname=qname)],
        an=[DNSRR(rrname=o, type=t, ttl=ttl, rdata=r) for o, t, ttl, r in answers],
        ar=[DNSRROPT(rclass=1232)] if edns else [],
    )
    if compress:
        msg = msg.compress()
    return bytes(msg)


def wire_name(name: str) -> bytes:
    return b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0"


def a_response(name: str, ip: str, ttl: int) -> bytes:
    """A one-question, one-A-record response built by hand (fast: the flood needs 10,000); the
    owner is a pointer to the question name."""
    header = struct.pack("!6H", 7, 0x8180, 1, 1, 0, 0)
    question = wire_name(name) + struct.pack("!HH", 1, 1)
    record = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, ttl, 4) + bytes(map(int, ip.split(".")))
    return header + question + record


def tcp(*messages: bytes) -> bytes:
    return b"".join(struct.pack("!H", len(m)) + m for m in messages)


def test_a_and_aaaa_answers_are_learned() -> None:
    facts = DomainFacts()
    msg = response(
        "example.com",
        ("example.com", "A", 300, "93.184.216.34"),
        ("example.com", "AAAA", 300, "2606:2800:220:1:248:1893:25c8:1946"),
        edns=True,
    )
    assert facts.learn_payload(msg, 10 * S) == (2, None)
    assert facts.names_at("93.184.216.34") == ["example.com"]
    assert facts.names_at("2606:2800:220:1:248:1893:25c8:1946", 10 * S) == ["example.com"]
    assert facts.names_at("::ffff:93.184.216.34") == ["example.com"]  # IPv4-mapped: the same
    assert len(facts) == 2
    assert facts.stats() == {"learned": 2, "refreshed": 0, "evicted": 0, "expired": 0}
    assert facts.learn_payload(msg, 20 * S) == (0, None)
    assert facts.stats()["refreshed"] == 2


def test_cname_chain_teaches_every_name_with_the_minimum_ttl() -> None:
    facts = DomainFacts()
    msg = response(
        "www.a.com",
        ("www.a.com", "CNAME", 300, "b.net"),
        ("b.net", "CNAME", 60, "c.org"),
        ("c.org", "A", 120, "1.2.3.4"),
    )
    assert facts.learn_payload(msg, 0) == (3, None)
    assert facts.names_at("1.2.3.4", 0) == ["b.net", "c.org", "www.a.com"]
    # www.a.com and b.net until 60 s (the chain's minimum), c.org until 120 s.
    assert facts.names_at("1.2.3.4", 60 * S) == ["b.net", "c.org", "www.a.com"]
    assert facts.names_at("1.2.3.4", 61 * S) == ["c.org"]
    assert facts.matches("1.2.3.4", ["*.a.com"], 60 * S)
    assert not facts.matches("1.2.3.4", ["*.a.com"], 61 * S)
    assert facts.matches("1.2.3.4", ["*.a.com"])  # at any time


def test_window_grace_and_expiry() -> None:
    facts = DomainFacts(capacity=10, grace_s=5)
    assert (facts.capacity, facts.grace_s) == (10, 5)
    assert facts.learn("API.Example.com.", "10.0.0.1", 10, 100 * S)
    assert not facts.learn("api.example.com", "10.0.0.1", 10, 100 * S)
    assert not facts.matches("10.0.0.1", ["api.example.com"], 99 * S)
    assert facts.matches("10.0.0.1", ["api.example.com"], 115 * S)
    assert not facts.matches("10.0.0.1", ["api.example.com"], 115 * S + 1)
    g = facts.generation
    assert facts.expire(115 * S) == 0
    assert facts.expire(116 * S) == 1
    assert facts.generation > g
    assert len(facts) == 0 and facts.stats()["expired"] == 1


def test_patterns() -> None:
    facts = DomainFacts()
    facts.learn("a.b.example.com", "10.0.0.2", 60, 0)
    facts.learn("www.x.y.com", "10.0.0.3", 60, 0)
    facts.learn("update.a.b", "10.0.0.4", 60, 0)
    assert facts.matches("10.0.0.2", ["*.example.com"])
    assert not facts.matches("10.0.0.2", ["example.com", "*.b.example.org"])
    assert facts.matches("10.0.0.3", ["www.*.com"])
    assert facts.matches("10.0.0.4", ["UPDATE.*"])
    assert not facts.matches("10.0.0.9", ["*"])
    for bad in ["*.*", "www.g*.com", "a..b", ""]:
        assert _engine.domain_pattern_error(bad), bad
        with pytest.raises(DomainPatternError) as info:
            facts.matches("10.0.0.2", ["*.example.com", bad])
        assert info.value.pattern == bad
    assert _engine.domain_pattern_error("*.example.com.") is None
    with pytest.raises(ValueError, match="not an IP address"):
        facts.names_at("example.com")


def test_what_teaches_nothing() -> None:
    facts = DomainFacts()
    answer = ("nope.example", "A", 60, "10.9.9.9")
    assert facts.learn_payload(response("nope.example", answer, rcode=3), 0) == (0, None)
    assert facts.learn_payload(response("nope.example", answer, qr=0), 0) == (0, "not_response")
    msg = response("nope.example", answer)
    assert facts.learn_payload(msg[:-1], 0) == (0, "truncated")
    assert facts.learn_payload(msg + b"\0", 0) == (0, "trailing_garbage")
    assert facts.learn_payload(b"", 0) == (0, "truncated")
    assert len(facts) == 0
    assert set(_engine.DNS_ERROR_NAMES) >= {"truncated", "not_response", "pointer_loop", "bad_pointer"}
    # A pointer to itself in the answer's owner name.
    header = struct.pack("!6H", 1, 0x8180, 0, 1, 0, 0)
    looped = header + b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + bytes(4)
    assert facts.learn_payload(looped, 0) == (0, "pointer_loop")


def test_tcp_payloads() -> None:
    facts = DomainFacts()
    one = response("one.example", ("one.example", "A", 60, "10.1.0.1"))
    two = response("two.example", ("two.example", "A", 60, "10.1.0.2"))
    assert facts.learn_payload(tcp(one, two), 0, tcp=True) == (2, None)
    # A partial message: counted, not learned; the complete one before it is.
    three = response("three.example", ("three.example", "A", 60, "10.1.0.3"))
    four = response("four.example", ("four.example", "A", 60, "10.1.0.4"))
    assert facts.learn_payload(tcp(three, four)[:-3], 0, tcp=True) == (1, "truncated")
    assert facts.names_at("10.1.0.3") == ["three.example"]
    assert facts.names_at("10.1.0.4") == []
    # Without tcp=True, a framed message is not a message.
    assert facts.learn_payload(tcp(four), 0)[1] is not None


def test_a_flood_is_bounded_by_capacity() -> None:
    facts = DomainFacts(capacity=1000)
    parsed = DNS(a_response("x.example", "10.0.0.1", 30))  # the hand-built message, as scapy reads it
    assert (parsed.an[0].rrname, parsed.an[0].rdata, parsed.an[0].ttl) == (b"x.example.", "10.0.0.1", 30)
    learned = 0
    for i in range(10_000):
        ip = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"
        msg = a_response(f"flood{i}.example", ip, 30 + i % 100)
        n, err = facts.learn_payload(msg, i)
        assert err is None
        learned += n
    assert learned == 10_000
    assert len(facts) == 1000
    stats = facts.stats()
    assert stats["learned"] == 10_000 and stats["evicted"] == 9_000
    # What stays is what expires last: TTLs 30 + i % 100 learned at about the same time, so the
    # survivors are all of the longest TTLs.
    assert all(facts.names_at(f"10.0.{i >> 8 & 255}.{i & 255}") == [] for i in range(0, 10_000, 100))
    assert facts.names_at(f"10.0.{9999 >> 8 & 255}.{9999 & 255}") == ["flood9999.example"]


def test_shared_between_threads() -> None:
    facts = DomainFacts(capacity=500)

    def feed(t: int) -> None:
        for i in range(400):
            facts.learn(f"t{t}-{i}.example", f"10.{t}.{i >> 8}.{i & 255}", 60, 0)

    threads = [threading.Thread(target=feed, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for _ in range(2000):
        facts.matches("10.0.0.1", ["*.example"], 0)
    for th in threads:
        th.join()
    assert len(facts) == 500
    assert facts.stats()["learned"] == 1600
