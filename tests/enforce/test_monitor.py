"""``pyclassify monitor`` on event streams produced by the real daemon code (``Enforcer`` judging
header batches with the real engine and writing through ``FlowLog``): no root, no netns."""

from __future__ import annotations

import io
import ipaddress
import json
import threading

import numpy as np
import pytest
from click.testing import CliRunner

from pyclassify.batch import FLAG_HAS_PORTS, new_batch
from pyclassify.cli import main
from pyclassify.cli.monitor import monitor_command
from pyclassify.enforce.config import EnforceConfig
from pyclassify.enforce.daemon import Enforcer
from pyclassify.enforce.log import FlowLog
from pyclassify.enforce.monitor import follow_lines, parse_only, render, run_monitor

from . import manifests

# Every TCP connection into a's pods is logged (then allowed by the next rule).
LOG_GNP = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: log-into-a}
spec:
  order: 1
  selector: app == 'a'
  types: [Ingress]
  ingress:
  - action: Log
    protocol: TCP
"""

FLOWS = [  # (src, dst, proto, sport, dport)
    ("10.244.2.2", "10.244.3.2", 6, 40001, 8080),  # b → c: the ANP denies
    ("10.244.3.2", "10.244.2.2", 6, 40002, 8080),  # c → b: the NetworkPolicy isolates b
    ("10.244.1.2", "10.244.2.2", 6, 40003, 8080),  # a → b: allowed
    ("10.244.3.2", "10.244.1.2", 17, 40004, 53),  # c → a UDP: the GNP denies
    ("10.244.2.2", "10.244.1.2", 6, 40005, 8080),  # b → a TCP: logged, allowed
    ("10.244.2.2", "10.244.3.2", 6, 40006, 8080),  # b → c again: deduplicated
]


def _mapped(ip: str) -> np.ndarray:
    return np.frombuffer(b"\0" * 10 + b"\xff\xff" + ipaddress.ip_address(ip).packed, dtype=np.uint8)


@pytest.fixture
def stream(tmp_path) -> list[str]:
    """The JSON lines the daemon writes for FLOWS, a rejected reload, start and stop."""
    manifests.write(tmp_path)
    (tmp_path / "40-log.yaml").write_text(LOG_GNP)
    out = io.StringIO()
    enforcer = Enforcer(EnforceConfig([str(tmp_path)], log_stream=out, log_allowed=True))
    enforcer.project, engine = enforcer.load()
    enforcer.engine = engine
    enforcer.accounting.has_log = True
    enforcer.log.emit("start", queues=[0], fail="closed", policies=len(enforcer.project.policy_set.policies))
    h = new_batch(len(FLOWS))
    for row, (src, dst, proto, sport, dport) in zip(h, FLOWS):
        row["src_addr"], row["dst_addr"] = _mapped(src), _mapped(dst)
        row["ip_version"], row["protocol"] = 4, proto
        row["sport"], row["dport"], row["flags"] = sport, dport, FLAG_HAS_PORTS
    enforcer.accounting.account(0, engine, h, engine.judge(h))
    enforcer.reloader.reject(["10-netpol.yaml:12: spec.ingress[0].ports[0].port: out of range"])
    enforcer.log.emit("stop", stats={"packets": len(FLOWS)})
    return out.getvalue().splitlines()


def test_stream_is_what_the_daemon_writes(stream: list[str]) -> None:
    events = [json.loads(line)["event"] for line in stream]
    assert events == ["start", "deny", "deny", "allow", "deny", "log", "reload-rejected", "stop"]


def test_renders_flow_endpoints_and_deciding_policy(stream: list[str]) -> None:
    text = render(json.loads(stream[1]))
    head, *details = text.splitlines()
    assert "deny" in head and "10.244.2.2:40001 (b/b1) → 10.244.3.2:8080 (c/c1) TCP" in head
    assert len(details) == 1 and "ingress deny" in details[0] and "c-not-from-b" in details[0]
    assert "rule deny-b" in details[0]
    nw = render(json.loads(stream[2]))
    assert "(c/c1) → 10.244.2.2:8080 (b/b1)" in nw and "ingress deny by tier default (end-of-tier)" in nw
    logged = render(json.loads(stream[5]))
    assert logged.split()[1] == "log" and "logged by" in logged and "log-into-a" in logged
    rejected = render(json.loads(stream[6])).splitlines()
    assert "reload-rejected" in rejected[0] and "1 error," in rejected[0]
    assert rejected[1].strip() == "10-netpol.yaml:12: spec.ingress[0].ports[0].port: out of range"


def test_cli_filters_and_passes_json_through(stream: list[str]) -> None:
    data = "\n".join(stream) + "\n"
    r = CliRunner().invoke(monitor_command, ["--only", "deny,log"], input=data)
    assert r.exit_code == 0, r.output
    heads = [line.split()[1] for line in r.output.splitlines() if not line.startswith(" ")]
    assert heads == ["deny", "deny", "deny", "log"]
    r = CliRunner().invoke(monitor_command, ["--json", "--only", "reload-rejected,start"], input=data)
    assert r.exit_code == 0
    assert r.output.splitlines() == [stream[0], stream[6]]


def test_through_the_real_cli_from_a_file(stream: list[str], tmp_path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(stream) + "\nnot json\n")
    r = CliRunner().invoke(main, ["monitor", str(path), "--only", "allow"])
    assert r.exit_code == 0, r.output
    assert "10.244.1.2:40003 (a/a1) → 10.244.2.2:8080 (b/b1) TCP" in r.output
    assert "not a JSON event" in r.output  # stderr (mixed into output by the runner)


def test_bad_arguments() -> None:
    r = CliRunner().invoke(monitor_command, ["--only", "deny,denny"], input="")
    assert r.exit_code == 2 and "denny" in r.output
    r = CliRunner().invoke(monitor_command, ["--follow"], input="")
    assert r.exit_code == 2
    r = CliRunner().invoke(monitor_command, ["/nonexistent/events.jsonl"])
    assert r.exit_code != 0 and "nonexistent" in r.output
    with pytest.raises(ValueError):
        parse_only("everything")


def test_unknown_and_partial_records_do_not_crash() -> None:
    for rec in (
        {},
        {"event": "deny"},
        {"event": "deny", "ts": "x", "egress": 3, "logs": [1]},
        {"event": "reload-rejected", "errors": None},
        {"event": "future", "x": [1, 2]},
        {"event": "revoke", "src": "fd00::1", "sport": 1, "dst": "fd00::2", "dport": 2, "proto": "TCP"},
    ):
        assert render(rec)
    assert "[fd00::1]:1 → [fd00::2]:2 TCP" in render(
        {"event": "revoke", "src": "fd00::1", "sport": 1, "dst": "fd00::2", "dport": 2, "proto": "TCP"}
    )


def test_follow_reads_appended_lines_and_restarts_after_truncation(tmp_path) -> None:
    path = tmp_path / "events.jsonl"
    writer = open(path, "w")
    log = FlowLog(writer)
    log.emit("start", queues=[0])
    stop = threading.Event()
    err = io.StringIO()
    want = [3]
    seen = threading.Event()

    class Out(io.StringIO):
        def write(self, s: str) -> int:
            n = super().write(s)
            if self.getvalue().count("\n") >= want[0]:
                seen.set()
            return n

    out = Out()
    t = threading.Thread(target=run_monitor, args=(follow_lines(str(path), stop, 0.02), out, err), daemon=True)
    t.start()
    log.emit("deny", src="10.244.2.2", dst="10.244.3.2", proto="TCP", sport=1, dport=2)
    writer.write('{"event": "rel')  # a partial line waits for its end
    writer.flush()
    writer.write('oad", "policies": 3}\n')
    writer.flush()
    assert seen.wait(5), out.getvalue()
    # truncated in place (copytruncate rotation): read again from the start
    seen.clear()
    want[0] = 4
    writer.seek(0)
    writer.truncate()
    writer.flush()
    FlowLog(writer).emit("stop")
    assert seen.wait(5), out.getvalue()
    stop.set()
    t.join(5)
    assert not t.is_alive()
    kinds = [line.split()[1] for line in out.getvalue().splitlines() if not line.startswith(" ")]
    assert kinds == ["start", "deny", "reload", "stop"] and err.getvalue() == ""
    writer.close()
