"""Parts of the enforce path that need no root: the netlink parsers (fuzzed), the ctnetlink
requests, iptables rule generation and the transactions that replace them, the node's own
traffic, queue parsing, health, the command's usage errors."""

from __future__ import annotations

import ipaddress
import struct
import threading

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from pyclassify import _native
from pyclassify.batch import HEADER_DTYPE
from pyclassify.cli.enforce import enforce_command
from pyclassify.enforce.config import EnforceConfig
from pyclassify.enforce.daemon import Enforcer, parse_queues
from pyclassify.enforce.iptables import OWN_MARK, Rules, forward_ctmark, queue_target, queues_named, transaction
from pyclassify.enforce.node import LocalAddresses, NodeTraffic, dns_servers
from pyclassify.failsafe import FailsafePort

#: No node traffic: the rules of a chain as the hooks alone make them.
NO_NODE = NodeTraffic(inbound=(), outbound=())


def attr(kind: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * ((-n) % 4)


def packet_msg(pid: int, payload: bytes, caplen_attr: int | None = None) -> bytes:
    body = struct.pack("=BBH", 2, 0, 0) + attr(1, struct.pack(">IHB", pid, 0x0800, 2)) + attr(10, payload)
    if caplen_attr is not None:
        body += attr(13, struct.pack(">I", caplen_attr))
    return struct.pack("=IHHII", 16 + len(body), 3 << 8, 0, 0, 0) + body


def test_nfq_parse_reads_packets() -> None:
    data = packet_msg(7, b"E" + b"\0" * 39) + packet_msg(8, b"\x45" * 20, 1500)
    got = _native.nfq_parse(data)
    assert [(g[0], g[1], len(g[2]), g[3]) for g in got] == [(7, 0x0800, 40, 40), (8, 0x0800, 20, 1500)]


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=512))
def test_nfq_parse_never_crashes_on_garbage(data: bytes) -> None:
    for _pid, _hw, payload, wirelen, _dev in _native.nfq_parse(data):
        assert payload is None or len(payload) <= len(data)
        assert wirelen >= (len(payload) if payload else 0)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 400))
def test_nfq_parse_truncated_messages(payload: bytes, cut: int) -> None:
    msg = packet_msg(1, payload)
    _native.nfq_parse(msg[:cut])  # any prefix: no crash, no out-of-bounds read


def test_ct_delete_message_layout() -> None:
    v4 = lambda a: b"\0" * 10 + b"\xff\xff" + bytes(a)  # noqa: E731
    m = _native.ct_delete_message(v4([10, 244, 1, 2]), v4([10, 244, 2, 2]), 40000, 8080, 6, 4)
    length, mtype, flags = struct.unpack_from("=IHH", m)
    assert length == len(m) and mtype == (1 << 8) | 2 and flags & 1
    assert m[16] == 2  # AF_INET
    assert bytes([10, 244, 1, 2]) in m and struct.pack(">H", 8080) in m
    with pytest.raises(ValueError):
        _native.ct_delete_message(b"\0" * 3, b"\0" * 16, 1, 2, 6, 6)
    with pytest.raises(ValueError):
        _native.ct_delete_message(b"\0" * 16, b"\0" * 16, 1, 2, 6, 5)
    # with a mark: an update of the entry (CT_NEW without NLM_F_CREATE) setting just those bits
    marked = _native.ct_delete_message(
        v4([10, 244, 1, 2]), v4([10, 244, 2, 2]), 40000, 8080, 6, 4, 0, 0x2000000, 0x2000000
    )
    length, mtype, flags = struct.unpack_from("=IHH", marked)
    assert length == len(marked) and mtype == (1 << 8) | 0 and not flags & 0x400
    assert marked.endswith(
        struct.pack("=HH", 8, 8)
        + struct.pack(">I", 0x2000000)
        + struct.pack("=HH", 8, 21)
        + struct.pack(">I", 0x2000000)
    )
    cleared = _native.ct_delete_message(v4([10, 244, 1, 2]), v4([10, 244, 2, 2]), 40000, 8080, 6, 4, 0, 0, 0x2000000)
    assert cleared.endswith(
        struct.pack("=HH", 8, 8) + struct.pack(">I", 0) + struct.pack("=HH", 8, 21) + struct.pack(">I", 0x2000000)
    )
    dump = _native.ct_dump_message(2, 0x1000000, 0x3000000)
    assert struct.unpack_from("=IHH", dump)[1:] == ((1 << 8) | 1, 0x301)  # CT_GET, REQUEST|DUMP


def test_rules_and_queue_targets() -> None:
    assert queue_target(3, 3, False) == ["-j", "NFQUEUE", "--queue-num", "3"]
    assert queue_target(2, 5, True) == ["-j", "NFQUEUE", "--queue-balance", "2:5", "--queue-bypass"]
    r = Rules(0, 0, fail_open=False)
    fwd = r.rules("forward")
    # revoked connections dropped both ways, before anything established passes
    assert fwd[0] == ["-m", "connmark", "--mark", "0x2000000/0x2000000", "-j", "DROP"]
    assert fwd[1] == ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"]
    assert fwd[2] == ["-j", "CONNMARK", "--or-mark", "0x1000000"]  # what we judge, revalidation finds
    assert "--queue-bypass" not in fwd[-1]
    assert r.rules("input")[0] == ["-i", "lo", "-j", "RETURN"]
    with pytest.raises(ValueError):
        Rules(0, 0, hooks=("prerouting",))
    assert [c[1:] for c in r.chains()] == [("filter", "FORWARD"), ("filter", "INPUT"), ("filter", "OUTPUT")]


def test_early_host_endpoint_hooks_have_chains_of_their_own() -> None:
    r = Rules(0, 1, untracked_queue=2, pre_dnat_queue=3, node=NO_NODE)
    assert [c[1:] for c in r.chains()][3:] == [("raw", "PREROUTING"), ("raw", "OUTPUT"), ("mangle", "PREROUTING")]
    raw_in = r.rules("untracked-in")
    # allowed by a rule: back with the mark, out of connection tracking, on its way
    assert raw_in[1] == ["-m", "mark", "--mark", "0x8000000/0x8000000", "-j", "CT", "--notrack"]
    assert raw_in[2] == ["-m", "mark", "--mark", "0x8000000/0x8000000", "-j", "RETURN"]
    assert raw_in[-2] == ["-m", "addrtype", "!", "--dst-type", "LOCAL", "-j", "RETURN"]
    assert raw_in[-1] == ["-j", "NFQUEUE", "--queue-num", "2"]
    assert r.rules("untracked-out")[0] == ["-o", "lo", "-j", "RETURN"]
    assert r.rules("untracked-out")[-1] == ["-j", "NFQUEUE", "--queue-num", "2"]
    pre = r.rules("pre-dnat")
    # allowed by a rule: its connection marked (revalidated by pre-DNAT policy), then on its way
    assert pre[1] == ["-m", "mark", "--mark", "0x10000000/0x10000000", "-j", "CONNMARK", "--or-mark", "0x10000000"]
    assert pre[2] == ["-m", "mark", "--mark", "0x10000000/0x10000000", "-j", "RETURN"]
    assert pre[-1] == ["-j", "NFQUEUE", "--queue-num", "3"]
    # the filter chains let what the early hooks judged through
    assert ["-m", "conntrack", "--ctstate", "UNTRACKED", "-j", "RETURN"] in r.rules("output")
    inp = r.rules("input")
    skip = inp.index(["-m", "mark", "--mark", "0x10000000/0x10000000", "-j", "RETURN"])
    # normal host policy skipped: said on the connection, which revalidation judges
    assert inp[skip - 1] == [
        "-m",
        "mark",
        "--mark",
        "0x10000000/0x10000000",
        "-j",
        "CONNMARK",
        "--or-mark",
        "0x21000000",
    ]
    assert ["-m", "mark", "--mark", "0x10000000/0x10000000", "-j", "RETURN"] not in r.rules("forward")


def test_host_endpoint_interfaces_queue_to_their_forward_hook() -> None:
    """Each interface's rules sit between the established traffic and the workload's own queue;
    what a side's hook let on (its mark) or a pre-DNAT rule allowed skips that side."""
    r = Rules(0, 0, forward_queues=(("eth1", 4, 5),))
    fwd = r.rules("forward")
    established = fwd.index(["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"])
    assert fwd[established + 1 : established + 3] == [
        ["-i", "eth1", "-m", "mark", "--mark", "0x0/0x11000000", "-j", "NFQUEUE", "--queue-num", "4"],
        ["-o", "eth1", "-m", "mark", "--mark", "0x0/0x12000000", "-j", "NFQUEUE", "--queue-num", "5"],
    ]
    # what each side's hook let on marks its connection with the interface's slot, for revalidation
    assert fwd[established + 3 : established + 5] == [
        [
            "-i",
            "eth1",
            "-m",
            "mark",
            "--mark",
            "0x1000000/0x1000000",
            "-m",
            "connmark",
            "--mark",
            "0x0/0xf0000",
            "-j",
            "CONNMARK",
            "--or-mark",
            "0x10000",
        ],
        [
            "-o",
            "eth1",
            "-m",
            "mark",
            "--mark",
            "0x2000000/0x2000000",
            "-m",
            "connmark",
            "--mark",
            "0x0/0xf00000",
            "-j",
            "CONNMARK",
            "--or-mark",
            "0x100000",
        ],
    ]
    assert fwd[-1] == ["-j", "NFQUEUE", "--queue-num", "0"]
    assert forward_ctmark(14, False) == (15 << 20, 0xF00000) and forward_ctmark(15, True) is None
    assert not any("eth1" in rule for rule in r.rules("input") + r.rules("output"))
    # a reload that brings another interface adds its rules in place, after the first's
    before = r.rules("forward")
    r.forward_queues = (*r.forward_queues, ("eth2", 6, 7))
    after = r.rules("forward")
    assert [rule for rule in after if "eth2" not in rule] == before
    assert after.index(
        ["-o", "eth1", "-m", "mark", "--mark", "0x0/0x12000000", "-j", "NFQUEUE", "--queue-num", "5"]
    ) < after.index(["-i", "eth2", "-m", "mark", "--mark", "0x0/0x11000000", "-j", "NFQUEUE", "--queue-num", "6"])


def test_an_all_interfaces_host_endpoint_takes_what_named_interfaces_leave() -> None:
    """``*`` matches any interface but a workload's, after every named one (whatever order they
    came in): a packet a named interface's hook let on carries its mark past the ``*`` rule."""
    r = Rules(0, 0, forward_queues=(("*", 1, 2), ("eth1", 3, 4)), workload_prefix="cali")
    queued = [rule for rule in r.rules("forward") if "NFQUEUE" in rule and "--queue-num" in rule and rule[-1] != "0"]
    assert [rule[:4] for rule in queued] == [
        ["-i", "eth1", "-m", "mark"],
        ["-o", "eth1", "-m", "mark"],
        ["!", "-i", "cali+", "-m"],
        ["!", "-o", "cali+", "-m"],
    ]
    assert [rule[-1] for rule in queued] == ["3", "4", "1", "2"]
    # each keeps its slot (its place in forward_queues), set once per side
    marks = [rule for rule in r.rules("forward") if "--or-mark" in rule and "connmark" in rule]
    assert [(rule[0:3], rule[-1]) for rule in marks] == [
        (["-i", "eth1", "-m"], "0x20000"),
        (["-o", "eth1", "-m"], "0x200000"),
        (["!", "-i", "cali+"], "0x10000"),
        (["!", "-o", "cali+"], "0x100000"),
    ]


def test_queue_ranges() -> None:
    assert parse_queues("4") == (4, 4) and parse_queues("2-5") == (2, 5)
    for bad in ("5-2", "x", "70000"):
        with pytest.raises(ValueError):
            parse_queues(bad)


def test_command_usage_errors(tmp_path) -> None:
    runner = CliRunner()
    r = runner.invoke(enforce_command, [str(tmp_path)])
    assert r.exit_code == 2 and "--queue" in r.output
    r = runner.invoke(enforce_command, [str(tmp_path), "--queue", "1", "--queues", "1-2"])
    assert r.exit_code == 2
    r = runner.invoke(enforce_command, [str(tmp_path), "--queues", "9-3"])
    assert r.exit_code == 2
    r = runner.invoke(enforce_command, [str(tmp_path), "--queue", "1", "--workload-interface-prefix", "a b"])
    assert r.exit_code == 2 and "interface name prefix" in r.output
    r = runner.invoke(enforce_command, [str(tmp_path), "--uninstall"])
    assert r.exit_code == 2 and "--uninstall takes no PATH" in r.output
    r = runner.invoke(enforce_command, ["--help"])
    assert "--fail" in r.output and "queue-bypass" in r.output and "--on-stop" in r.output


def test_invalid_manifests_refuse_to_start(tmp_path) -> None:
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: x, namespace: y}\n"
        "spec:\n  podSelector: {}\n  ingress:\n  - ports:\n    - {port: 99999999}\n"
    )
    r = CliRunner().invoke(enforce_command, [str(tmp_path), "--queue", "0"])
    assert r.exit_code == 1 and "99999999" in r.output


def test_the_nodes_own_traffic_passes_ahead_of_the_queue() -> None:
    """Right after the loopback, each chain lets the node's own traffic through: the failsafe
    ports (to the host, from it), the API server and DNS (on their destination before DNAT), the
    daemon's own marked sockets; in the raw table, their replies too. Per family."""
    api, dns6 = ipaddress.ip_address("192.0.2.10"), ipaddress.ip_address("fd00::53")
    node = NodeTraffic(
        inbound=(FailsafePort(6, 22), FailsafePort(6, 2379, ipaddress.ip_network("10.0.0.0/8"))),
        outbound=(FailsafePort(17, 53),),
        api_servers=((api, 8443),),
        dns_servers=(ipaddress.ip_address("10.96.0.10"), dns6),
    )
    r = Rules(0, 0, untracked_queue=1, pre_dnat_queue=2, node=node)
    tag = ["-m", "comment", "--comment", "pyclassify-node", "-j", "RETURN"]
    inp = r.rules("input")
    assert inp[:3] == [
        ["-i", "lo", "-j", "RETURN"],
        ["-p", "tcp", "--dport", "22", *tag],
        ["-p", "tcp", "-s", "10.0.0.0/8", "--dport", "2379", *tag],
    ]
    out = r.rules("output")
    # after the loopback, the node's own traffic to its workloads (no policy judges it)
    assert out[:3] == [
        ["-o", "lo", "-j", "RETURN"],
        ["-o", "cali+", "-j", "RETURN"],
        ["-p", "udp", "--dport", "53", *tag],
    ]
    assert ["-p", "tcp", "-m", "conntrack", "--ctorigdst", "192.0.2.10", "--ctorigdstport", "8443", *tag] in out
    assert ["-p", "tcp", "-m", "conntrack", "--ctorigdst", "10.96.0.10", "--ctorigdstport", "53", *tag] in out
    assert ["-m", "mark", "--mark", f"{OWN_MARK:#x}/{OWN_MARK:#x}", *tag] in out
    queued = next(i for i, rule in enumerate(out) if "NFQUEUE" in rule)
    assert all(i < queued for i, rule in enumerate(out) if rule[-len(tag) :] == tag)
    assert not any("2379" in rule or "8443" in rule for rule in r.rules("forward"))
    # IPv6: only its own addresses
    out6 = r.rules("output", 6)
    assert ["-p", "udp", "-m", "conntrack", "--ctorigdst", "fd00::53", "--ctorigdstport", "53", *tag] in out6
    assert not any("192.0.2.10" in rule or "10.0.0.0/8" in rule for rule in out6 + r.rules("input", 6))
    # untracked: replies named by their source port, to the node and from it
    raw_in, raw_out = r.rules("untracked-in"), r.rules("untracked-out")
    assert ["-p", "udp", "--sport", "53", *tag] in raw_in  # answers to the outbound failsafe
    assert ["-p", "tcp", "-s", "192.0.2.10", "--sport", "8443", *tag] in raw_in
    assert ["-p", "tcp", "--sport", "22", *tag] in raw_out  # SSH's answers
    assert ["-p", "tcp", "-d", "192.0.2.10", "--dport", "8443", *tag] in raw_out
    assert ["-p", "tcp", "--dport", "22", *tag] in r.rules("pre-dnat")


def test_a_transaction_replaces_whatever_chains_of_ours_a_table_holds() -> None:
    """From another daemon's listing: our chains declared (created or flushed) and filled, every
    jump to one of ours deleted and one put first, a chain of ours no longer wanted deleted,
    someone else's rules left alone; with nothing wanted, only removals."""
    current = [
        "-P FORWARD ACCEPT",
        "-N PYCLASSIFY-FORWARD",
        "-N PYCLASSIFY-INPUT",
        "-N OTHER",
        "-A INPUT -j PYCLASSIFY-INPUT",
        "-A FORWARD -s 192.0.2.1/32 -j ACCEPT",
        "-A FORWARD -j PYCLASSIFY-FORWARD",
        '-A OTHER -m comment --comment "x y" -j PYCLASSIFY-FORWARD',
        "-A PYCLASSIFY-FORWARD -j NFQUEUE --queue-num 7",
        "-A PYCLASSIFY-INPUT -j NFQUEUE --queue-balance 2:4",
    ]
    assert queues_named(current) == {2, 3, 4, 7}
    lines = transaction(current, {"PYCLASSIFY-FORWARD": ("FORWARD", [["-j", "NFQUEUE", "--queue-num", "0"]])})
    assert lines == [
        ":PYCLASSIFY-FORWARD - [0:0]",
        ":PYCLASSIFY-INPUT - [0:0]",
        "-D INPUT -j PYCLASSIFY-INPUT",
        "-D FORWARD -j PYCLASSIFY-FORWARD",
        '-D OTHER -m comment --comment "x y" -j PYCLASSIFY-FORWARD',
        "-A PYCLASSIFY-FORWARD -j NFQUEUE --queue-num 0",
        "-I FORWARD 1 -j PYCLASSIFY-FORWARD",
        "-X PYCLASSIFY-INPUT",
    ]
    assert transaction(current, {})[-2:] == ["-X PYCLASSIFY-FORWARD", "-X PYCLASSIFY-INPUT"]
    assert "-X PYCLASSIFY-INPUT" not in transaction(current, {}, keep=("PYCLASSIFY-INPUT",))


def _rows(*flows: tuple[str, str, int, int, int]) -> np.ndarray:
    rows = np.zeros(len(flows), HEADER_DTYPE)
    for row, (src, dst, sport, dport, proto) in zip(rows, flows):
        for field, text in (("src_addr", src), ("dst_addr", dst)):
            address = ipaddress.ip_address(text)
            packed = address.packed if address.version == 6 else ipaddress.IPv6Address(f"::ffff:{address}").packed
            row[field] = np.frombuffer(packed, np.uint8)
        row["sport"], row["dport"], row["protocol"] = sport, dport, proto
        row["ip_version"] = ipaddress.ip_address(src).version
    return rows


def test_which_kernel_connections_our_chains_never_queue() -> None:
    """At start every connection is judged but those: over the loopback, on a hook not installed,
    the node's own traffic (failsafe ports, the API server and DNS on their address before
    DNAT); routed pods' connections and the node's others are judged."""
    local = LocalAddresses((ipaddress.IPv6Address("::ffff:10.0.0.1").packed,))
    node = NodeTraffic(
        inbound=(FailsafePort(6, 22),),
        outbound=(FailsafePort(17, 53),),
        api_servers=((ipaddress.ip_address("10.96.0.1"), 443),),
        dns_servers=(ipaddress.ip_address("10.96.0.10"),),
    )
    flows = [
        ("10.244.1.2", "10.244.2.2", 40000, 8080, 6),  # routed: judged
        ("10.0.0.1", "10.0.0.1", 40001, 9000, 6),  # loopback
        ("127.0.0.1", "127.0.0.1", 40002, 9000, 6),  # loopback
        ("10.244.1.2", "10.0.0.1", 40003, 22, 6),  # SSH to the node: failsafe
        ("10.244.1.2", "10.0.0.1", 40004, 80, 6),  # to the node: judged
        ("10.0.0.1", "192.0.2.1", 40005, 53, 17),  # outbound failsafe
        ("10.0.0.1", "10.96.0.1", 40006, 443, 6),  # the API server's Service
        ("10.0.0.1", "10.96.0.10", 40007, 53, 6),  # DNS over TCP
        ("10.0.0.1", "192.0.2.9", 40008, 443, 6),
    ]  # the node's other traffic: judged
    judged = original = _rows(*flows)
    skip = node.unqueued(judged, original, local, ("forward", "input", "output"))
    assert skip.tolist() == [False, True, True, True, False, True, True, True, False]
    assert node.unqueued(judged, original, local, ("forward",)).tolist() == [False] + [True] * 8


def test_resolv_conf_names_the_dns_servers(tmp_path) -> None:
    conf = tmp_path / "resolv.conf"
    conf.write_text("search x\nnameserver 10.96.0.10\nnameserver fe80::1%eth0\nnameserver nonsense\noptions ndots:5\n")
    assert [str(a) for a in dns_servers(str(conf))] == ["10.96.0.10", "fe80::1"]
    assert dns_servers(str(tmp_path / "absent")) == ()


def test_native_mark_updates_are_the_per_flow_messages() -> None:
    """``CtNetlink.mark_rows`` builds natively, for any number of rows, what ``ct_delete_message``
    builds per flow (IPv4, IPv6, ICMP echo)."""
    rows = _rows(
        ("10.244.1.2", "10.244.2.2", 40000, 8080, 6),
        ("fd00::1", "fd00::2", 5353, 53, 17),
        ("10.244.1.2", "10.244.2.2", 77, 0, 1),
    )
    expected = b"".join(
        _native.ct_delete_message(
            r["src_addr"].tobytes(),
            r["dst_addr"].tobytes(),
            int(r["sport"]),
            int(r["dport"]),
            int(r["protocol"]),
            int(r["ip_version"]),
            seq,
            0x1000000,
            0x1000000,
        )
        for seq, r in enumerate(rows, 1)
    )
    assert _native.ct_mark_messages(rows.view(np.uint8), 0x1000000, 0x1000000) == expected
    assert _native.ct_mark_messages(rows[:0].view(np.uint8), 1, 1) == b""
    with pytest.raises(ValueError):
        _native.ct_mark_messages(rows.view(np.uint8)[:-1], 1, 1)


def test_health_names_a_dead_thread_and_failing_checks(tmp_path) -> None:
    """/healthz's answer: ok while every thread of the daemon runs; a dead drainer or resync,
    a part whose not_healthy() complains, or three failed checks of the rules in a row, each said."""
    enforcer = Enforcer(EnforceConfig(paths=[str(tmp_path)]))
    enforcer._ready = True
    assert enforcer.not_healthy() is None
    dead = threading.Thread(target=lambda: None, name="pyclassify-resync")
    dead.start()
    dead.join()
    enforcer.resync.thread = dead
    assert enforcer.not_healthy() == "pyclassify-resync stopped"
    enforcer.resync.thread = None

    class Watch:
        def not_healthy(self) -> str:
            return "watch stopped: watch Pod"

    enforcer.source = Watch()
    assert enforcer.not_healthy() == "watch stopped: watch Pod"
    enforcer.source = None
    enforcer.resync.failures, enforcer.resync.error = 3, "FileNotFoundError: iptables"
    assert "could not be checked 3 times in a row: FileNotFoundError" in (enforcer.not_healthy() or "")
    enforcer._stop.set()
    assert enforcer.not_healthy() is None  # stopping: not a fault
