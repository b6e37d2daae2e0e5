"""The daemon's life cycle on a routed node of network namespaces: what a denied connection, the
node's own traffic and the rules meet while a daemon stops, dies, starts, is uninstalled, or
shares the node with another process that changes our chains.

- Stopped (SIGTERM, every rollout) or killed (-9), the rules stay and the next daemon adopts
  them (one transaction per table): with a client hammering a denied port across restarts, no
  connection opens failing closed; failing open, those that open are cut when the next starts.
- Connections no daemon judged (opened before any rules were there) are judged at start.
- A dead daemon leaves the node reachable: SSH to it, its DNS (UDP and TCP, a real dnsmasq).
- ``--uninstall`` and ``--on-stop remove`` remove every rule; an uninstall while a daemon runs is
  not undone by its repair.
- A second daemon refuses to start beside the first; chains replaced by another process (on
  another queue) and a rule replaced in place are found and put back.
- ``/healthz`` fails while the rules cannot be checked (the iptables binaries gone: a spawn that
  fails, as under a pids limit), and recovers with them.

With ``PYCLASSIFY_RELIABILITY_DIR`` set (bench/reliability.py), the restart windows are recorded
for bench/RELIABILITY.md; ``PYCLASSIFY_RESTARTS`` sets how many restarts each mode makes."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.enforce import manifests
from tests.enforce.netns import PY, REPO, Daemon, Held, Topology, iptables_rules, root_reason, sh
from tests.enforce.report import record

pytestmark = pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")

QUEUE = 0
RESTARTS = int(os.environ.get("PYCLASSIFY_RESTARTS", "3"))

# From a pod: new TCP connections to DST:PORT, one after another, until a line arrives on stdin;
# every connection that opens (its "hi" echoed) is kept, and at the end pinged again. Prints
# {"attempts", "tried": [monotonic time of each attempt], "opened": [monotonic time of each],
# "still_open"}.
HAMMER = r"""
import json, selectors, socket, sys, threading, time
dst, port = sys.argv[1], int(sys.argv[2])
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), done.set()), daemon=True).start()
attempts, tried, opened, kept = 0, [], [], []
print("hammering", flush=True)
while not done.is_set():
    if len(kept) >= 2000:  # enough held: wait for the end
        time.sleep(0.05)
        continue
    attempts += 1
    tried.append(time.monotonic())
    s = socket.socket(); s.settimeout(0.2)
    try:
        s.connect((dst, port)); s.settimeout(0.5); s.sendall(b"hi")
        if s.recv(16) == b"hi":
            opened.append(time.monotonic()); kept.append(s); time.sleep(0.05); continue
    except OSError:
        pass
    s.close()
    time.sleep(0.005)
sel = selectors.DefaultSelector()
for s in kept:
    try:
        s.sendall(b"hi"); sel.register(s, selectors.EVENT_READ)
    except OSError:
        pass
still, deadline = 0, time.monotonic() + 1.0  # every answer within a second
while sel.get_map() and time.monotonic() < deadline:
    for key, _ in sel.select(max(0.0, deadline - time.monotonic())):
        sel.unregister(key.fileobj)
        try:
            still += key.fileobj.recv(16) == b"hi"
        except OSError:
            pass
print(json.dumps({"attempts": attempts, "tried": tried, "opened": opened, "still_open": still}), flush=True)
"""


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    manifests.write(tmp_path)
    return tmp_path


class Hammer:
    """HAMMER from pod ``src`` at pod ``dst``'s TCP port (which policy denies it)."""

    def __init__(self, topo: Topology, src: int, dst: int) -> None:
        self.proc = topo.spawn(topo.pods[src], [PY, "-c", HAMMER, topo.ips[dst], str(Topology.TCP_PORT)], stdin=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "hammering"

    def stop(self) -> dict:
        out, _ = self.proc.communicate("stop\n", timeout=30)
        return json.loads(out.strip().splitlines()[-1])


def kube_proxy_rule(topo: Topology) -> None:
    """The node tracks connections before any rule of ours is there, as every Kubernetes node
    does (kube-proxy's ``-m conntrack --ctstate INVALID -j DROP``): the kernel registers
    connection tracking in a network namespace only once a rule needs it."""
    sh(
        "ip",
        "netns",
        "exec",
        topo.node,
        "iptables",
        "-A",
        "FORWARD",
        "-m",
        "conntrack",
        "--ctstate",
        "INVALID",
        "-j",
        "DROP",
    )


def _stop(daemon: Daemon, how: str) -> None:
    if how == "sigterm":
        assert daemon.terminate() == 0
    else:
        daemon.kill()


@pytest.mark.parametrize("how,fail", [("sigterm", "closed"), ("kill", "closed"), ("kill", "open")])
def test_restarts_with_a_client_hammering_a_denied_port(topo: Topology, policy_dir: Path, how: str, fail: str) -> None:
    """c -> b is denied. A client in c opens connection after connection to b while the daemon is
    stopped (SIGTERM, as a rollout or a liveness restart does) or killed (-9), and started again,
    ``RESTARTS`` times. The rules stay between two daemons and are adopted: failing closed, not
    one connection opens; failing open, those that open while no daemon runs are judged by the
    next and cut. Each gap (stop to the next start line) is recorded."""
    daemon = Daemon(topo, [str(policy_dir)], QUEUE, fail=fail)
    daemon.wait_event("start")
    assert topo.reach(0, 1) and not topo.reach(2, 1)
    hammer = Hammer(topo, 2, 1)
    gaps, windows, revoked_at_start = [], [], 0
    try:
        for _ in range(RESTARTS):
            stopped = time.monotonic()
            _stop(daemon, how)
            assert iptables_rules(topo.node).count("-j PYCLASSIFY-FORWARD") == 1  # kept between the two
            daemon = Daemon(topo, [str(policy_dir)], QUEUE, fail=fail)
            start = daemon.wait_event("start")
            gaps.append(start["_arrived"] - stopped)
            windows.append((stopped, start["_arrived"]))
            revoked_at_start += start["revoked"]
            assert iptables_rules(topo.node).count("-j PYCLASSIFY-FORWARD") == 1  # adopted: one jump
        time.sleep(0.3)
        result = hammer.stop()
        assert topo.reach(0, 1) and not topo.reach(2, 1)
        assert daemon.terminate() == 0
    finally:
        if hammer.proc.poll() is None:
            hammer.proc.kill()
    tried = result.pop("tried")
    in_gaps = len(result["opened"])
    record(
        f"restart-{how}-{fail}",
        {
            "how": how,
            "fail": fail,
            "restarts": RESTARTS,
            "gaps_s": gaps,
            "attempts": result["attempts"],
            "opened": in_gaps,
            "still_open": result["still_open"],
            "revoked_at_start": revoked_at_start,
        },
    )
    # the client kept trying throughout: connections tried while each gap was open
    untried = [w for w in windows if not any(w[0] <= t <= w[1] for t in tried)]
    assert not untried, (untried, result["attempts"])
    assert result["still_open"] == 0, result  # nothing denied stays open past a start
    if fail == "closed":
        assert in_gaps == 0, result  # nothing denied opens at all
    else:
        assert revoked_at_start >= in_gaps, (revoked_at_start, result)


def test_a_connection_no_daemon_judged_is_judged_at_start(topo: Topology, policy_dir: Path) -> None:
    """Connections opened while no rule of ours was there (before the first start, after an
    uninstall) carry no mark of ours: the start judges them too, and cuts c -> b (both ways),
    while a -> b, which the policy allows, keeps flowing and is judged by later changes."""
    kube_proxy_rule(topo)
    denied, allowed = Held(topo, "c", "b", "TCP"), Held(topo, "a", "b", "TCP")
    assert denied.ping() and allowed.ping()
    daemon = Daemon(topo, [str(policy_dir)], QUEUE)
    start = daemon.wait_event("start")
    assert start["revoked"] >= 1, start
    revoke = daemon.wait_event("revoke")
    assert (revoke["src"], revoke["dst"]) == (topo.ips[2], topo.ips[1]), revoke
    assert not denied.ping() and allowed.ping()
    # a change that denies a -> b cuts the connection the start found unmarked
    manifests.replace(policy_dir / "10-netpol.yaml", manifests.NETPOL_DENY_ALL)
    reload = daemon.wait_event("reload")
    assert reload["revoked"] >= 1, reload
    assert allowed.cut_within(5) is not None
    assert daemon.terminate() == 0


#: ``tgkill``'s system call number, per machine.
SYS_TGKILL = {"x86_64": 234, "aarch64": 131}


def tgkill(pid: int, tid: int, signum: int) -> None:
    """The signal to one thread of a process, as the kernel may pick any thread for a kill()."""
    libc = ctypes.CDLL(None, use_errno=True)
    number = SYS_TGKILL[platform.machine()]
    if libc.syscall(ctypes.c_long(number), ctypes.c_long(pid), ctypes.c_long(tid), ctypes.c_long(signum)) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def test_sigterm_given_to_any_thread_stops_the_daemon(topo: Topology, policy_dir: Path) -> None:
    """The kernel hands a process's SIGTERM to whichever thread can take it, not always the main
    one; Python runs the handler in the main thread, so the daemon must stop cleanly whichever
    thread the signal reached (given to a packet loop's or the metrics thread, it once waited
    forever)."""
    daemon = Daemon(topo, [str(policy_dir)], QUEUE, extra=("--metrics", "127.0.0.1:9472"))
    daemon.wait_event("start")
    pid = daemon.proc.pid
    time.sleep(1.0)  # the start line is written before the main thread begins to wait
    others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert others, "the daemon runs threads beside the main one"
    tgkill(pid, others[-1], signal.SIGTERM)
    assert daemon.wait_event("stop", timeout=30)["rules"] == "kept"
    assert daemon.proc.wait(timeout=30) == 0
    assert "-j PYCLASSIFY-FORWARD" in iptables_rules(topo.node)


def test_on_stop_remove_and_uninstall_remove_every_rule(topo: Topology, policy_dir: Path) -> None:
    """``--on-stop remove``: a stop removes every rule (and the next start judges what opened
    meanwhile). ``--uninstall`` after a kill removes what the dead daemon left; while a daemon
    runs (a preStop hook) its repair leaves them out, it says it is not ready, and its stop
    leaves nothing behind."""
    kube_proxy_rule(topo)
    daemon = Daemon(topo, [str(policy_dir)], QUEUE, extra=("--on-stop", "remove"))
    daemon.wait_event("start")
    assert daemon.terminate() == 0
    assert "PYCLASSIFY-" not in iptables_rules(topo.node)
    gap = Held(topo, "c", "b", "TCP")  # denied by policy, open while no rule is there
    assert gap.ping()
    daemon = Daemon(topo, [str(policy_dir)], QUEUE)
    assert daemon.wait_event("start")["revoked"] >= 1
    assert not gap.ping()
    daemon.kill()

    def uninstall() -> dict:
        out = subprocess.run(
            ["ip", "netns", "exec", topo.node, PY, "-m", "pyclassify", "enforce", "--uninstall", "--no-ipv6"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.splitlines()[-1])

    gone = uninstall()
    assert gone["event"] == "uninstall" and not gone["daemon_running"] and gone["removed"], gone
    assert "PYCLASSIFY-" not in iptables_rules(topo.node)
    assert topo.reach(2, 1)  # no rules: nothing filters

    daemon = Daemon(topo, [str(policy_dir)], QUEUE, extra=("--resync-interval", "0.2", "--metrics", "127.0.0.1:9471"))
    daemon.wait_event("start")
    assert not topo.reach(2, 1)
    gone = uninstall()
    assert gone["daemon_running"], gone
    daemon.wait_event("rules-uninstalled", timeout=10)
    time.sleep(0.6)  # three resyncs: none puts the rules back
    assert "-j PYCLASSIFY-" not in iptables_rules(topo.node)
    assert topo.reach(2, 1)
    status, body = topo.get("http://127.0.0.1:9471/readyz")
    assert status == 503 and "uninstall" in body, body
    assert topo.get("http://127.0.0.1:9471/healthz") == (200, "ok\n")  # not restarted into enforcing again
    assert daemon.terminate() == 0
    assert "PYCLASSIFY-" not in iptables_rules(topo.node)


DNS_QUERY = r"""
import json, socket, struct, sys
server, name = sys.argv[1], sys.argv[2]
q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
out = {}
for proto in ("udp", "tcp"):
    try:
        if proto == "udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1.5)
            s.sendto(q, (server, 53)); answer = s.recv(512)
        else:
            s = socket.create_connection((server, 53), timeout=1.5); s.settimeout(1.5)
            s.sendall(struct.pack(">H", len(q)) + q); answer = s.recv(514)[2:]
        out[proto] = answer[-4:] == socket.inet_aton("192.0.2.7")
    except OSError:
        out[proto] = False
print(json.dumps(out))
"""


def test_a_dead_daemon_leaves_the_node_reachable(topo: Topology, policy_dir: Path) -> None:
    """kill -9, failing closed: the node's SSH port answers from a pod, and the node's DNS server
    (dnsmasq in pod b, named by the node's resolv.conf) answers the node over UDP and TCP, while
    no daemon runs; the pods' new connections are dropped meanwhile, as failing closed says."""
    netns_etc = Path("/etc/netns") / topo.node
    netns_etc.mkdir(parents=True, exist_ok=True)
    try:
        (netns_etc / "resolv.conf").write_text(f"nameserver {topo.ips[1]}\n")
        dnsmasq = topo.spawn(
            topo.pods[1],
            [
                "dnsmasq",
                "--keep-in-foreground",
                "--no-resolv",
                "--no-hosts",
                f"--listen-address={topo.ips[1]}",
                "--bind-interfaces",
                "--pid-file=",
                "--address=/node-check.test/192.0.2.7",
                "--user=root",
            ],
        )
        topo.serve_ssh("10.244.1.1")

        def node_dns() -> dict:
            return json.loads(
                sh("ip", "netns", "exec", topo.node, PY, "-c", DNS_QUERY, topo.ips[1], "node-check.test").stdout
            )

        def ssh_banner() -> bool:
            return topo.ssh_banner(0, "10.244.1.1")

        deadline = time.monotonic() + 10
        while node_dns() != {"udp": True, "tcp": True} and time.monotonic() < deadline:
            time.sleep(0.2)  # dnsmasq starting
        assert node_dns() == {"udp": True, "tcp": True} and ssh_banner()
        daemon = Daemon(topo, [str(policy_dir)], QUEUE)
        daemon.wait_event("start")
        assert node_dns() == {"udp": True, "tcp": True} and ssh_banner()  # node traffic, whatever b's policy says
        daemon.kill()
        assert "PYCLASSIFY-INPUT" in iptables_rules(topo.node)
        assert not topo.reach(0, 1)  # failing closed: the pods' new connections wait for a daemon
        assert ssh_banner()
        assert node_dns() == {"udp": True, "tcp": True}
        again = Daemon(topo, [str(policy_dir)], QUEUE)
        again.wait_event("start")
        assert topo.reach(0, 1) and ssh_banner()
        assert again.terminate() == 0
        dnsmasq.kill()
    finally:
        shutil.rmtree(netns_etc, ignore_errors=True)


def test_a_second_daemon_and_replaced_rules_are_noticed(topo: Topology, policy_dir: Path) -> None:
    """A second daemon on another queue refuses to start beside the first (its rules would
    replace the first's). Another process putting chains of its own in place of ours (another
    queue), and a rule of ours replaced in place, are found by comparing the rules' content, and
    put back within the resync interval; enforcement holds after each."""
    daemon = Daemon(topo, [str(policy_dir)], QUEUE, extra=("--resync-interval", "0.3"))
    daemon.wait_event("start")
    before = iptables_rules(topo.node)
    second = topo.spawn(
        topo.node,
        [PY, "-m", "pyclassify", "enforce", str(policy_dir), "--queue", "7", "--no-ipv6", "--duration", "5"],
        stderr=subprocess.PIPE,
    )
    _, err = second.communicate(timeout=60)
    assert second.returncode == 7 and "another daemon enforces in this network namespace" in err, err
    assert iptables_rules(topo.node) == before
    assert topo.reach(0, 1) and not topo.reach(2, 1)

    def restore(text: str) -> None:
        subprocess.run(
            ["ip", "netns", "exec", topo.node, "iptables-restore", "--noflush"],
            input=text,
            text=True,
            check=True,
            capture_output=True,
        )

    ours = [line for line in before.splitlines() if line.startswith("-A PYCLASSIFY-FORWARD ")]
    queue_rule = next(i for i, line in enumerate(ours, 1) if "NFQUEUE" in line)
    damages = [
        # another daemon's chains (queue 7, where nobody listens: fail open lets all through)
        (
            "*filter\n:PYCLASSIFY-FORWARD - [0:0]\n"
            + "".join(line.replace("--queue-num 0", "--queue-num 7 --queue-bypass") + "\n" for line in ours)
            + "COMMIT\n",
            "holds other rules than ours",
        ),
        # the queue rule replaced in place by an accept
        (
            f"*filter\n-R PYCLASSIFY-FORWARD {queue_rule} -j ACCEPT\nCOMMIT\n",
            f"rule {queue_rule} is '-A PYCLASSIFY-FORWARD -j ACCEPT'",
        ),
    ]
    for text, said in damages:
        restore(text)
        repaired = daemon.wait_event("rules-repaired", timeout=10)
        assert any(said in f for f in repaired["found"]), repaired
        assert iptables_rules(topo.node) == before
        assert not topo.reach(2, 1) and topo.reach(0, 1)
    assert daemon.terminate() == 0


def test_healthz_fails_while_the_rules_cannot_be_checked(topo: Topology, policy_dir: Path, tmp_path: Path) -> None:
    """The daemon finds iptables through PATH; the binaries removed under it, each check of the
    rules fails to spawn (as under a pids limit): the resync goes on trying, says so, and after
    three failures in a row /healthz fails with the reason; with the binaries back, it is ok."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tools = ("iptables", "iptables-restore", "ip6tables", "ip6tables-restore")
    for tool in tools:
        (bindir / tool).symlink_to(shutil.which(tool) or f"/usr/sbin/{tool}")
    url = "http://127.0.0.1:9472"
    daemon = Daemon(
        topo,
        [str(policy_dir)],
        QUEUE,
        extra=("--resync-interval", "0.2", "--metrics", "127.0.0.1:9472"),
        env={"PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin"},
    )  # no sbin: iptables only from bindir
    daemon.wait_event("start")
    assert topo.get(f"{url}/healthz") == (200, "ok\n")
    for tool in tools:
        (bindir / tool).unlink()
    failed = daemon.wait_event("rules-repair-failed", timeout=10)
    assert "FileNotFoundError" in failed["error"] or "No such file" in failed["error"], failed
    deadline = time.monotonic() + 10
    while topo.get(f"{url}/healthz")[0] == 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    status, body = topo.get(f"{url}/healthz")
    assert status == 503 and "iptables rules could not be checked" in body, body
    assert topo.reach(0, 1) and not topo.reach(2, 1)  # enforcing all along
    for tool in tools:
        (bindir / tool).symlink_to(shutil.which(tool) or f"/usr/sbin/{tool}")
    deadline = time.monotonic() + 10
    while topo.get(f"{url}/healthz")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topo.get(f"{url}/healthz") == (200, "ok\n")
    assert daemon.terminate() == 0
