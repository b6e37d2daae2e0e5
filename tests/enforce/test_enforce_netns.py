"""End to end: pyclassify enforce in a node namespace routing between three pod namespaces.

Real TCP/UDP connections between the pods are compared with ``pyclassify matrix`` for the same
manifests (which have a pair decided by each of NetworkPolicy, AdminNetworkPolicy, Calico
GlobalNetworkPolicy, BaselineAdminNetworkPolicy and ClusterNetworkPolicy v1alpha2); a live
policy change cuts an established connection; an invalid update changes nothing; a killed
daemon fails open or closed as configured; a stop keeps the rules for the next daemon.
Every test builds and removes its own namespaces (so iptables state goes with them)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pyclassify.cli import main as cli_main
from tests.enforce import manifests
from tests.enforce.netns import PY, REPO, Daemon, Held, Topology, iptables_rules, root_reason

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

QUEUE = 0  # queues are per network namespace: every test has its own node namespace


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    manifests.write(tmp_path)
    return tmp_path


def matrix(path: Path, proto: str, port: int) -> list[list[bool]]:
    out = subprocess.run(
        [PY, "-m", "pyclassify", "matrix", str(path), "--proto", proto, "--port", str(port), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    data = json.loads(out.stdout)
    assert data["pods"] == ["a/a1", "b/b1", "c/c1"]
    return data["matrix"]


def observed(topo: Topology) -> dict[str, list[list[bool]]]:
    result = {"TCP": [[True] * 3 for _ in range(3)], "UDP": [[True] * 3 for _ in range(3)]}
    for i in range(3):
        targets = {f"{j}/{p}": (j, p) for j in range(3) if j != i for p in ("TCP", "UDP")}
        for key, ok in topo.probe(i, targets).items():
            j, p = key.split("/")
            result[p][i][int(j)] = ok
    return result


def explain(path: Path, src: str, dst: str, proto: str, port: int) -> dict:
    # the real CLI, in-process (a subprocess per pair would cost seconds)
    r = CliRunner().invoke(
        cli_main, ["explain", str(path), "--from", src, "--to", dst, "--proto", proto, "--port", str(port), "--json"]
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def deciding_kinds(path: Path) -> dict[str, set[tuple[str, str, str]]]:
    """Policy kind -> the (src, dst, proto) pairs a policy of that kind decides (per ``explain``)."""
    kinds: dict[str, set[tuple[str, str, str]]] = {}
    pods = ["a/a1", "b/b1", "c/c1"]
    for proto, port in (("TCP", Topology.TCP_PORT), ("UDP", Topology.UDP_PORT)):
        for src in pods:
            for dst in pods:
                if src == dst:
                    continue
                doc = explain(path, src, dst, proto, port)
                for side in ("egress", "ingress"):
                    d = doc[side]
                    if d and d["policy"] and d["reason"] == "rule" and d["verdict"] == doc["verdict"]:
                        kinds.setdefault(d["policy"].split("/")[0], set()).add((src, dst, proto))
    return kinds


def off_diagonal(m: list[list[bool]]) -> list[list[bool | None]]:
    # a pod's traffic to itself never crosses the node: only pairs of different pods count
    return [[None if i == j else v for j, v in enumerate(row)] for i, row in enumerate(m)]


def test_every_policy_kind_decides_some_pair(policy_dir: Path) -> None:
    kinds = deciding_kinds(policy_dir)
    for kind in (
        "NetworkPolicy",
        "AdminNetworkPolicy",
        "GlobalNetworkPolicy",
        "BaselineAdminNetworkPolicy",
        "ClusterNetworkPolicy",
    ):
        assert kinds.get(kind), (kind, kinds)
    assert ("a/a1", "c/c1", "TCP") in kinds["BaselineAdminNetworkPolicy"]
    assert ("a/a1", "c/c1", "UDP") in kinds["ClusterNetworkPolicy"]


def test_matrix_holds_on_real_connections(topo: Topology, policy_dir: Path) -> None:
    # Without enforcement every pair connects (the topology works) ...
    before = observed(topo)
    assert all(all(row) for row in before["TCP"]) and all(all(row) for row in before["UDP"])
    daemon = Daemon(topo, [str(policy_dir)], QUEUE)
    daemon.wait_event("start")
    # ... with it, exactly what `pyclassify matrix` says.
    seen = observed(topo)
    for proto, port in (("TCP", Topology.TCP_PORT), ("UDP", Topology.UDP_PORT)):
        assert off_diagonal(seen[proto]) == off_diagonal(matrix(policy_dir, proto, port)), proto
    events = daemon.events()
    denies = [e for e in events if e.get("event") == "deny"]
    assert any(
        e["src"] == "10.244.2.2"
        and e["dst"] == "10.244.3.2"
        and e["ingress"]["policy"].startswith("AdminNetworkPolicy")
        for e in denies
    ), denies

    def denied_by(kind: str, side: str, proto: str) -> bool:
        # a -> c: the baseline policy (TCP, c's ingress) and the ClusterNetworkPolicy (UDP, a's egress)
        return any(
            e["src"] == "10.244.1.2"
            and e["dst"] == "10.244.3.2"
            and e["proto"] == proto
            and e.get(side)
            and (e[side]["policy"] or "").startswith(kind + "/")
            for e in daemon.events()
            if e.get("event") == "deny"
        )

    deadline = time.monotonic() + 5  # the daemon writes flow events from its drain thread
    while (
        not (
            denied_by("BaselineAdminNetworkPolicy", "ingress", "TCP")
            and denied_by("ClusterNetworkPolicy", "egress", "UDP")
        )
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert denied_by("BaselineAdminNetworkPolicy", "ingress", "TCP"), daemon.events()
    assert denied_by("ClusterNetworkPolicy", "egress", "UDP"), daemon.events()
    # a -> b over UDP: b's NetworkPolicy isolates it and no rule matches; the log names the policy
    isolated = [
        e["ingress"]
        for e in daemon.events()
        if e.get("event") == "deny"
        and e["dst"] == "10.244.2.2"
        and e.get("ingress")
        and e["ingress"]["reason"] == "end-of-tier"
    ]
    assert isolated and all(d["policies"] == ["NetworkPolicy/b/b-from-a"] for d in isolated), isolated
    assert daemon.terminate() == 0
    rules = iptables_rules(topo.node)
    assert rules.count("-j PYCLASSIFY-FORWARD") == 1, rules  # kept for the next daemon to adopt
    assert not topo.reach(2, 1) and not topo.reach(0, 1)  # failing closed: new connections wait for one


def test_live_change_cuts_established_connection_and_invalid_update_is_rejected(
    topo: Topology, policy_dir: Path
) -> None:
    daemon = Daemon(topo, [str(policy_dir)], QUEUE)
    daemon.wait_event("start")
    hold = topo.spawn(
        topo.pods[0],
        [
            PY,
            "-c",
            __import__("tests.enforce.netns", fromlist=["HOLD"]).HOLD,
            topo.ips[1],
            str(Topology.TCP_PORT),
            "1.0",
        ],
        stdin=True,
    )
    assert hold.stdin is not None and hold.stdout is not None
    assert hold.stdout.readline().strip() == "connected"

    def ping() -> str:
        hold.stdin.write("x\n")
        hold.stdin.flush()
        return hold.stdout.readline().strip()

    assert ping() == "ok"
    # An invalid update: rejected whole, the running policy stays.
    manifests.replace(policy_dir / "10-netpol.yaml", manifests.NETPOL_INVALID)
    rejected = daemon.wait_event("reload-rejected")
    assert any("99999999" in e for e in rejected["errors"]), rejected
    assert ping() == "ok"
    assert topo.reach(0, 1) and not topo.reach(2, 1)
    # A valid change that denies a -> b: the established connection is cut.
    manifests.replace(policy_dir / "10-netpol.yaml", manifests.NETPOL_DENY_ALL)
    reload = daemon.wait_event("reload")
    assert reload["revoked"] >= 1, reload
    # the change reached the running engine as a delta: still the one build of the start
    assert reload["engine_builds"] == 1 and reload["changed_objects"] >= 1, reload
    deadline = time.monotonic() + 5
    results = []
    while time.monotonic() < deadline:
        results.append(ping())
        if results[-1] == "fail":
            break
    assert results[-1] == "fail", results
    assert not topo.reach(0, 1)
    assert daemon.terminate() == 0


@pytest.mark.parametrize("fail", ["open", "closed"])
def test_killed_daemon_fails_as_configured(topo: Topology, policy_dir: Path, fail: str) -> None:
    daemon = Daemon(topo, [str(policy_dir)], QUEUE, fail=fail)
    daemon.wait_event("start")
    assert topo.reach(0, 1) and not topo.reach(2, 1)
    daemon.kill()
    assert "PYCLASSIFY-FORWARD" in iptables_rules(topo.node)  # a killed daemon cannot clean up
    if fail == "open":
        assert topo.reach(2, 1)  # --queue-bypass: no listener, packets pass
        assert topo.reach(0, 1)
    else:
        assert not topo.reach(0, 1)  # no bypass: the kernel drops what it cannot queue
        assert not topo.reach(2, 1)
    # The next start adopts what the killed one left, and enforces again.
    again = Daemon(topo, [str(policy_dir)], QUEUE, fail=fail)
    again.wait_event("start")
    assert iptables_rules(topo.node).count("-j PYCLASSIFY-FORWARD") == 1
    assert topo.reach(0, 1) and not topo.reach(2, 1)
    assert again.terminate() == 0
    assert iptables_rules(topo.node).count("-j PYCLASSIFY-FORWARD") == 1  # kept


def test_node_scoping_enforces_only_this_nodes_pods(topo: Topology, tmp_path: Path) -> None:
    """``enforce --node here``: a1 runs on this node, b1 and c1 on another. a1's own policy
    (no ingress at all) is enforced here; b1's (ingress from namespace a only) is the other
    node's to enforce, so c1 reaches b1 through this router; selectors still see b1 and c1."""
    inventory = manifests.INVENTORY.replace("spec: {containers:", "spec: {nodeName: there, containers:")
    inventory = inventory.replace(
        "metadata: {name: a1, namespace: a, labels: {app: a}}\nspec: {nodeName: there,",
        "metadata: {name: a1, namespace: a, labels: {app: a}}\nspec: {nodeName: here,",
    )
    assert inventory.count("nodeName: here") == 1 and inventory.count("nodeName: there") == 2
    (tmp_path / "00-inventory.yaml").write_text(inventory)
    (tmp_path / "10-netpol.yaml").write_text(
        manifests.NETPOL
        + """---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-closed, namespace: a}
spec: {podSelector: {}, policyTypes: [Ingress]}
"""
    )
    daemon = Daemon(topo, [str(tmp_path)], QUEUE, extra=("--node", "here"))
    start = daemon.wait_event("start")
    assert start["node"] == "here" and start["enforced_endpoints"] == 1, start
    assert not topo.reach(1, 0) and not topo.reach(2, 0)  # a1's ingress: enforced here
    assert topo.reach(2, 1)  # b1's ingress: another node's
    assert topo.reach(0, 1) and topo.reach(1, 2)
    assert daemon.terminate() == 0
    # The same manifests without --node: b1's policy applies here too.
    daemon = Daemon(topo, [str(tmp_path)], QUEUE)
    assert "node" not in daemon.wait_event("start")
    assert not topo.reach(2, 1) and not topo.reach(1, 0) and topo.reach(0, 1)
    assert daemon.terminate() == 0


# From a pod: how a TCP connect and a connected UDP datagram to DST end ("refused" when answered by
# a reset or an ICMP port unreachable, "timeout" when nothing comes back), as JSON.
REFUSED = r"""
import json, socket, sys, time
dst, tcp, udp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = {}
s = socket.socket(); s.settimeout(2.0); t = time.monotonic()
try:
    s.connect((dst, tcp)); out["tcp"] = "connected"
except ConnectionRefusedError:
    out["tcp"] = "refused"
except OSError:
    out["tcp"] = "timeout"
out["tcp_s"] = time.monotonic() - t
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(1.0); u.connect((dst, udp))
try:
    u.send(b"x"); u.recv(64); out["udp"] = "answered"
except ConnectionRefusedError:
    out["udp"] = "refused"
except OSError:
    out["udp"] = "timeout"
print(json.dumps(out))
"""


@pytest.mark.parametrize("action", ["drop", "reject"])
def test_deny_action_drops_or_rejects(topo: Topology, policy_dir: Path, action: str) -> None:
    """``--deny-action reject``: what policy denies is answered, a TCP reset for a SYN and an
    ICMP port unreachable for a UDP datagram, so the client fails at once instead of waiting;
    allowed traffic is untouched. ``drop`` (the default) answers nothing."""
    daemon = Daemon(topo, [str(policy_dir)], QUEUE, extra=("--deny-action", action, "--metrics", "127.0.0.1:9464"))
    daemon.wait_event("start")
    assert topo.reach(0, 1)  # a -> b allowed either way
    out = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            topo.pods[2],
            PY,
            "-c",
            REFUSED,
            topo.ips[1],
            str(Topology.TCP_PORT),
            str(Topology.UDP_PORT),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    got = json.loads(out.stdout)
    if action == "reject":
        assert got["tcp"] == "refused" and got["udp"] == "refused", got
    else:
        assert got["tcp"] == "timeout" and got["udp"] == "timeout", got
    status, text = topo.get("http://127.0.0.1:9464/metrics")
    assert status == 200
    rejected = [
        line
        for line in text.splitlines()
        if line.startswith("pyclassify_nfqueue_packets_total{") and 'outcome="rejected"' in line
    ]
    assert rejected and float(rejected[0].split()[-1]) == (2 if action == "reject" else 0), rejected
    rules = iptables_rules(topo.node)
    assert ("REJECT" in rules) == (action == "reject"), rules
    assert daemon.terminate() == 0


STAGED_DENY_A_TO_B = """
apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: b-not-from-a}
spec:
  order: 10
  selector: app == 'b'
  types: [Ingress]
  ingress:
  - action: Deny
    source: {selector: app == 'a'}
"""


def test_staged_policy_is_logged_beside_the_real_verdict(topo: Topology, policy_dir: Path) -> None:
    """A staged policy changes no packet: a -> b still connects, and the log says what the
    staged policy would have done to it (an allowed connection it would deny is logged, with
    the staged decision); a change to what is staged is followed live."""
    staged = policy_dir / "60-staged.yaml"
    staged.write_text(STAGED_DENY_A_TO_B)
    daemon = Daemon(topo, [str(policy_dir)], QUEUE, extra=("--metrics", "127.0.0.1:9464"))
    start = daemon.wait_event("start")
    assert start["staged_policies"] == 1
    assert topo.reach(0, 1)  # allowed by NetworkPolicy b/b-from-a; the staged policy is not in force
    line = daemon.wait_event("allow")
    assert (line["src"], line["dst"], line["ingress"]["policy"]) == (
        topo.ips[0],
        topo.ips[1],
        "NetworkPolicy/b/b-from-a",
    )
    assert line["staged"]["verdict"] == "deny"
    assert line["staged"]["summary"] == "would deny by StagedGlobalNetworkPolicy/b-not-from-a rule 0 (ingress)"
    assert not topo.reach(2, 1)  # c -> b: denied for real, and staged alike
    denied = daemon.wait_event("deny")
    assert denied["src"] == topo.ips[2] and denied["staged"]["verdict"] == "deny"
    status, text = topo.get("http://127.0.0.1:9464/metrics")
    assert status == 200 and 'pyclassify_staged_verdicts_total{differs="true"}' in text
    # Nothing staged any more: the preview goes, and a -> b is no longer worth a line.
    staged.unlink()
    reload = daemon.wait_event("reload")
    assert reload.get("staged_policies", 0) == 0
    assert topo.reach(0, 1)
    time.sleep(0.5)  # the drain loop runs every 0.2 s
    assert not [e for e in daemon.events() if e.get("event") == "allow"]
    assert daemon.terminate() == 0


def test_metrics_and_probes_of_a_running_daemon(topo: Topology, policy_dir: Path) -> None:
    """``--metrics``: /readyz and /healthz answer ok once the policy is in force; /metrics counts
    the packets the queue judged, the verdicts by policy and the reloads."""
    from prometheus_client.parser import text_string_to_metric_families

    url = "http://127.0.0.1:9464"
    daemon = Daemon(topo, [str(policy_dir)], QUEUE, extra=("--metrics", "127.0.0.1:9464"))
    daemon.wait_event("start")
    assert topo.get(f"{url}/readyz") == (200, "ok\n")
    assert topo.get(f"{url}/healthz") == (200, "ok\n")
    assert topo.reach(0, 1) and not topo.reach(2, 1)
    manifests.replace(policy_dir / "10-netpol.yaml", manifests.NETPOL_DENY_ALL)
    reload = daemon.wait_event("reload")
    # The change's time, split: the parts add up to the whole (each rounded to a microsecond).
    assert set(reload["stages_ms"]) == {"wait", "parse", "build", "keep", "swap"}
    assert abs(sum(reload["stages_ms"].values()) - reload["apply_ms"]) < 0.01
    status, text = topo.get(f"{url}/metrics")
    assert status == 200
    samples = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]

    def total(name: str, **labels: str) -> float:
        return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items()))

    assert total("pyclassify_nfqueue_packets_total", queue="0", outcome="accepted") >= 1
    assert total("pyclassify_nfqueue_packets_total", queue="0", outcome="dropped") >= 1
    # a -> b allowed by the NetworkPolicy's rule; c -> b denied at the end of its tier (isolated).
    assert (
        total(
            "pyclassify_verdicts_total",
            action="allow",
            direction="ingress",
            policy="NetworkPolicy/b/b-from-a",
            rule="0",
        )
        >= 1
    )
    assert total("pyclassify_verdicts_total", action="deny", direction="ingress", tier="default", policy="") >= 1
    assert total("pyclassify_policy_reloads_total", result="success") == 1
    assert total("pyclassify_policy_apply_seconds_count") == 1
    for stage in ("wait", "parse", "build", "keep", "swap"):
        assert total("pyclassify_policy_apply_stage_seconds_count", stage=stage) == 1
    assert not any(n.startswith("pyclassify_watch") for n, _, _ in samples)  # a file source
    assert daemon.terminate() == 0


def _start_fails(topo: Topology, argv: list[str], prefix: list[str] | None = None) -> tuple[int, str]:
    proc = topo.spawn(
        topo.node,
        [*(prefix or []), PY, "-m", "pyclassify", "enforce", *argv, "--duration", "5"],
        stderr=subprocess.PIPE,
    )
    out, err = proc.communicate(timeout=60)
    return proc.returncode, err


# Binds NFQUEUE N over raw netlink, as any other program may, and holds it.
QUEUE_HOLDER = r"""
import socket, struct, sys, time
q = int(sys.argv[1])
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)
s.bind((0, 0))
def attr(t, p):
    n = 4 + len(p); return struct.pack("=HH", n, t) + p + b"\0" * ((-n) % 4)
body = struct.pack("=BBH", 0, 0, socket.htons(q)) + attr(1, struct.pack("=BBH", 1, 0, socket.htons(2)))
s.send(struct.pack("=IHHII", 16 + len(body), (3 << 8) | 2, 5, 0, 0) + body); s.recv(4096)
print("ready", flush=True)
time.sleep(60)
"""


def test_missing_prerequisites_and_busy_resources_are_one_line_and_an_exit_code(
    topo: Topology, policy_dir: Path
) -> None:
    """Issue 14, item 4: no iptables, not root, a queue another process listens on, another
    daemon enforcing in the same network namespace, a metrics address in use, an interface that
    does not exist — each one `error:` line and its exit code (6: a missing prerequisite, 7:
    something in use or absent; docs/commands.md), never a traceback, and nothing changed."""
    venv_only = ["env", f"PATH={Path(PY).parent}"]  # no /usr/sbin: no iptables
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    queue_holder = topo.spawn(topo.node, [PY, "-c", QUEUE_HOLDER, "6"])  # not a daemon of ours: no rules
    blocker = topo.spawn(
        topo.node,
        [
            PY,
            "-c",
            "import socket, time; s = socket.socket(); "
            "s.bind(('127.0.0.1', 9557)); s.listen(); print('ready', flush=True); time.sleep(60)",
        ],
    )
    for p in (queue_holder, blocker):
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"

    def check(cases: list) -> None:
        for prefix, argv, code, text in cases:
            got, err = _start_fails(topo, argv, prefix)
            errors = [line for line in err.splitlines() if line.startswith("error:")]
            assert (got, len(errors)) == (code, 1) and text in errors[0], (argv, got, err)
            assert "Traceback" not in err, err

    check(
        [
            (venv_only, [str(policy_dir), "--queue", "0", "--no-ipv6"], 6, "iptables not found"),
            (
                nobody,
                [str(REPO / "examples" / "demo"), "--queue", "0", "--no-ipv6"],
                6,
                "needs root",
            ),  # readable by nobody
            (None, [str(policy_dir), "--queue", "6", "--no-ipv6"], 7, "another process listens on it"),
            (
                None,
                [str(policy_dir), "--queue", "0", "--no-ipv6", "--metrics", "127.0.0.1:9557"],
                7,
                "Address already in use",
            ),
            (None, [str(policy_dir), "--bridge", "nope0,nope1"], 7, "No such device"),
        ]
    )
    assert "PYCLASSIFY-" not in iptables_rules(topo.node)  # the failed starts installed nothing
    holder = Daemon(topo, [str(policy_dir)], 5)  # its rules queue to 5, where it listens
    holder.wait_event("start")
    before = iptables_rules(topo.node)
    check(
        [
            (
                None,
                [str(policy_dir), "--queue", queue, "--no-ipv6"],
                7,
                "another daemon enforces in this network namespace",
            )
            for queue in ("5", "0")
        ]
    )
    assert iptables_rules(topo.node) == before  # the holder's rules: the failed starts left them alone
    assert holder.terminate() == 0


def test_rules_changed_by_someone_else_are_put_back(topo: Topology, policy_dir: Path) -> None:
    """Issue 14, item 3: FORWARD flushed (our jump gone), another rule put before ours, our chain
    deleted — each found and undone within the resync interval, said in a `rules-repaired`
    line and counted; enforcement holds again after each."""
    daemon = Daemon(topo, [str(policy_dir)], QUEUE, extra=("--resync-interval", "0.3", "--metrics", "127.0.0.1:9466"))
    daemon.wait_event("start")
    assert topo.reach(0, 1) and not topo.reach(2, 1)

    def iptables(*args: str) -> None:
        subprocess.run(["ip", "netns", "exec", topo.node, "iptables", *args], check=True, capture_output=True)

    damages = [
        (("-F", "FORWARD"), "FORWARD does not begin with the jump to PYCLASSIFY-FORWARD"),
        (("-I", "FORWARD", "1", "-s", "192.0.2.1", "-j", "ACCEPT"), "FORWARD does not begin with the jump"),
        (("-F", "PYCLASSIFY-FORWARD"), "PYCLASSIFY-FORWARD holds other rules than ours"),
    ]
    for args, said in damages:
        iptables(*args)
        repaired = daemon.wait_event("rules-repaired", timeout=10)
        assert any(said in f for f in repaired["found"]), repaired
        rules = iptables_rules(topo.node)
        assert rules.count("-j PYCLASSIFY-FORWARD") == 1, rules
        assert not topo.reach(2, 1) and topo.reach(0, 1)  # enforcing again
    status, text = topo.get("http://127.0.0.1:9466/metrics")
    assert status == 200 and "pyclassify_iptables_repairs_total 3.0" in text
    assert daemon.terminate() == 0


@pytest.mark.parametrize("destination", ["full", "gone"])
def test_a_full_log_destination_loses_lines_not_enforcement(topo: Topology, policy_dir: Path, destination: str) -> None:
    """Issue 14, item 3: the flow log's destination full (stdout is /dev/full) or gone (a pipe
    whose reader has exited): every line is lost and counted (`pyclassify_log_lines_lost`), the
    daemon keeps enforcing and stops cleanly."""
    url = "http://127.0.0.1:9467"
    argv = [
        PY,
        "-m",
        "pyclassify",
        "enforce",
        str(policy_dir),
        "--queue",
        "0",
        "--no-ipv6",
        "--log-allowed",
        "--metrics",
        "127.0.0.1:9467",
    ]
    if destination == "full":
        proc = topo.spawn(topo.node, ["sh", "-c", f"exec {' '.join(argv)} > /dev/full"], stderr=subprocess.PIPE)
    else:
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before the first line
        proc = subprocess.Popen(
            ["ip", "netns", "exec", topo.node, *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=REPO,
        )
        os.close(write_end)
        topo.procs.append(proc)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if topo.get(f"{url}/readyz") == (200, "ok\n"):
                break
        except (RuntimeError, ValueError):
            pass
        time.sleep(0.2)
    else:
        raise AssertionError("never ready")
    assert topo.reach(0, 1) and not topo.reach(2, 1)
    _, text = topo.get(f"{url}/metrics")
    lost = next(
        float(line.split()[1]) for line in text.splitlines() if line.startswith("pyclassify_log_lines_lost_total")
    )
    assert lost >= 1  # the start line at least, and the flows' lines
    assert proc.poll() is None
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_killed_during_a_reload_the_next_start_repairs(topo: Topology, policy_dir: Path) -> None:
    """Issue 14, item 3: kill -9 while a policy change is being applied; the next start finds the
    chains the killed daemon left, adopts them (one jump, not two) and enforces the new files."""
    daemon = Daemon(topo, [str(policy_dir)], QUEUE)
    daemon.wait_event("start")
    assert topo.reach(0, 1)
    manifests.replace(policy_dir / "10-netpol.yaml", manifests.NETPOL_DENY_ALL)
    time.sleep(0.005)  # the watcher's debounce: the reload is starting
    daemon.kill()
    assert "PYCLASSIFY-FORWARD" in iptables_rules(topo.node)
    again = Daemon(topo, [str(policy_dir)], QUEUE)
    again.wait_event("start")
    assert iptables_rules(topo.node).count("-j PYCLASSIFY-FORWARD") == 1
    assert not topo.reach(0, 1) and not topo.reach(2, 1)  # the new policy: b closed to everyone
    assert again.terminate() == 0


def test_killed_before_a_revocation_the_next_start_revokes(topo: Topology, policy_dir: Path) -> None:
    """Issue 14, item 3: kill -9 after a change that denies an established connection, before the
    daemon applied it (so before any revocation); while it is down the connection flows (it is
    established), and the next start, which judges every connection an earlier daemon queued,
    cuts it, in both directions."""
    daemon = Daemon(topo, [str(policy_dir)], QUEUE)
    daemon.wait_event("start")
    hold = Held(topo, "a", "b", "TCP")
    assert hold.ping()
    daemon.kill()
    manifests.replace(policy_dir / "10-netpol.yaml", manifests.NETPOL_DENY_ALL)
    assert hold.ping()  # nobody judges it now; established, it flows
    again = Daemon(topo, [str(policy_dir)], QUEUE)
    start = again.wait_event("start")
    assert start["revoked"] >= 1 and start["conntrack_deleted"] >= 1, start
    revoke = again.wait_event("revoke")  # said after the start line
    assert (revoke["src"], revoke["dst"], revoke["dport"]) == (topo.ips[0], topo.ips[1], topo.TCP_PORT), revoke
    assert not hold.ping()
    assert again.terminate() == 0


# From the node namespace: whether a TCP connection to ADDRESS:PORT opens.
NODE_CONNECT = r"""
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.0).close(); print(True)
except OSError:
    print(False)
"""


def test_the_node_reaches_its_own_pods_whatever_their_ingress_policy(topo: Topology, tmp_path: Path) -> None:
    """Traffic the node itself sends to a pod on it (the kubelet's probes) leaves by the pod's
    interface and is not the pod's ingress to judge (Felix's model: workload policy judges routed
    traffic; Kubernetes: traffic from a pod's own node is always allowed). a1 takes no ingress:
    other pods are refused, the node is not."""
    (tmp_path / "00-inventory.yaml").write_text(manifests.INVENTORY)
    (tmp_path / "10-netpol.yaml").write_text(
        """apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-closed, namespace: a}
spec: {podSelector: {}, policyTypes: [Ingress]}
"""
    )
    daemon = Daemon(topo, [str(tmp_path)], QUEUE, extra=("--workload-interface-prefix", "veth"))
    daemon.wait_event("start")
    assert not topo.reach(1, 0) and not topo.reach(2, 0)
    assert topo.reach(0, 1)
    node = subprocess.run(
        ["ip", "netns", "exec", topo.node, PY, "-c", NODE_CONNECT, topo.ips[0], str(topo.TCP_PORT)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert node.stdout.strip() == "True", "the node's own connection to a1 was judged by a1's ingress policy"
    assert daemon.terminate() == 0
