"""A soak of ``pyclassify enforce``: continuous TCP and UDP probes between four pod namespaces
while a policy change every ``period`` seconds flips two pod pairs between allowed and denied.

Shared by the bounded soak of the suite (tests/enforce/test_soak.py) and the long one of
bench/test_bench_soak.py. What it checks and measures:

- every probe whose first packet was sent while one policy version was in force gets that
  version's verdict. A version is in force from the end of the reload that loaded it (the
  daemon's ``reload`` event, stamped on arrival after the swap and the revocations) until the
  next reload's swap could have happened. Which version a reload loaded is read from the policy
  count it reports (``MARKS``), never guessed from the times: a reload that read the files just
  before a write ends after it, and is not the write's. The next swap could have happened once
  the files it loaded were written; probes sent in between are counted apart, never judged. A
  probe allowed at its start and cut by a later version before it finished is the revocation
  working, not a mismatch; one denied at its start whose first packet was judged once a version
  allowing it came into force (within ``REPLY_GRACE``) got that version's verdict, as it should;
- connections established while allowed are cut when a change denies them: one opened before
  the flipping starts (cut by the first flip; its UDP twin passes again once the next flip
  allows the pair again) and one held for most of the run, older than any idle timeout of a
  tracker that sees only first packets (cut by a late change);
- the daemon's resident memory, file descriptors and threads, sampled every second: after the
  warm-up, memory within ``RSS_GROWTH`` of its level at the end of the warm-up, descriptors and
  threads unchanged; ``/metrics`` and ``/readyz`` answered every second, their latency recorded.

Pods a1, b1, c1, d1, one per namespace a..d: routed (10.244.{1..4}.2, enforced through NFQUEUE
in the node namespace) or bridged (``BridgedPods``: a and c on one side of an AF_PACKET bridge,
b and d on the other; only pairs across it are probed). Versions:
even: b takes TCP/UDP from a only, c from d only; odd: b from a and c, c from nobody. So c -> b
and d -> c flip; a -> b (allow), a -> c, d -> b (deny) and c -> a (allow: no policy) hold;
a -> d is allowed until the late change denies d's ingress from a. Version k also holds k mod
``MARKS`` policies that select no pod, the late change ``MARKS`` - 1 of them beside its own.
"""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.enforce.netns import POD, PY, SERVER, Daemon, Held, Topology, sh

#: Added to each measured switch-over (the reload event is read after the swap and revocations
#: anyway: this is margin only).
SLACK = 0.005
#: Allowed growth of resident memory after the warm-up.
RSS_GROWTH = 0.05
PROBE_TIMEOUT = 0.3
#: How late a probe's reply may be and its failure still be put down to a revocation that came
#: into force after it began (under load the echo servers answer in tens of milliseconds).
REPLY_GRACE = 0.1


def inventory(ips: list[str]) -> str:
    """Namespaces a..d with one pod each at ``ips`` (in that order)."""
    return "".join(
        f"""---
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {ns}1, namespace: {ns}, labels: {{app: {ns}}}}}
spec: {{containers: [{{name: s, image: x}}]}}
status: {{podIP: {ip}}}
"""
        for ns, ip in zip("abcd", ips)
    )


def _ingress_policy(ns: str, sources: list[str]) -> str:
    peers = "".join(
        f"""
    - namespaceSelector:
        matchLabels: {{kubernetes.io/metadata.name: {s}}}"""
        for s in sources
    )
    rules = (
        f"""
  ingress:
  - from:{peers}"""
        if sources
        else "\n  ingress: []"
    )
    return f"""---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: {ns}-ingress, namespace: {ns}}}
spec:
  podSelector: {{}}
  policyTypes: [Ingress]{rules}
"""


#: Policies selecting no pod: version k holds k % MARKS of them, the late change MARKS - 1, so
#: that the policy count a reload reports says which change it loaded (the flip version modulo
#: MARKS, and whether the late change is in). Even, so the count's residue keeps the parity the
#: verdicts depend on.
MARKS = 8


def _marker(name: str) -> str:
    return f"""---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: {name}, namespace: a}}
spec:
  podSelector:
    matchLabels: {{app: no-such-pod}}
  policyTypes: [Ingress]
"""


def version(k: int) -> str:
    return (
        _ingress_policy("b", ["a"] if k % 2 == 0 else ["a", "c"])
        + _ingress_policy("c", ["d"] if k % 2 == 0 else [])
        + "".join(_marker(f"mark-{i}") for i in range(k % MARKS))
    )


LATE = _ingress_policy("d", ["b", "c"]) + "".join(_marker(f"late-mark-{i}") for i in range(MARKS - 1))  # a -> d denied


def _policies(text: str) -> int:
    return text.count("kind: NetworkPolicy")


#: (src, dst) pairs probed, by the pod they are probed from.
PAIRS = [("a", "b"), ("a", "c"), ("a", "d"), ("c", "b"), ("c", "a"), ("d", "b"), ("d", "c")]
#: Across the bridge only (a and c on one side, b and d on the other): what stays on one side
#: never meets it.
BRIDGED_PAIRS = [("a", "b"), ("c", "b"), ("a", "d"), ("d", "c"), ("b", "a"), ("d", "a")]


def expected(src: str, dst: str, k: int, late: bool) -> bool:
    """Whether policy version ``k`` (and the late change, once made) allows ``src -> dst``."""
    if dst == "b":
        return src == "a" or (src == "c" and k % 2 == 1)
    if dst == "c":
        return src == "d" and k % 2 == 0
    if dst == "d":
        return not (late and src == "a")
    return True


PROBER = r"""
import json, socket, sys, threading, time
streams, rate, until, timeout = json.loads(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
src = sys.argv[5]  # the pod's own address: two pods may share a namespace (the bridged topology)
out, lock = [], threading.Lock()
def run(name, ip, proto, port):
    period = 1.0 / rate
    nxt = time.monotonic()
    while time.monotonic() < until:
        t0 = time.monotonic()
        try:
            if proto == "TCP":
                s = socket.create_connection((ip, port), timeout=timeout, source_address=(src, 0)); s.settimeout(timeout)
                s.sendall(b"p"); ok = s.recv(8) == b"p"; s.close()
            else:
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(timeout); s.bind((src, 0))
                s.sendto(b"p", (ip, port)); ok = s.recv(8) == b"p"; s.close()
        except OSError:
            ok = False
        t1 = time.monotonic()
        with lock:
            out.append((name, proto, t0, t1, ok))
        nxt = max(nxt + period, t1)
        time.sleep(max(0.0, nxt - time.monotonic()))
ts = [threading.Thread(target=run, args=s) for s in streams]
[t.start() for t in ts]; [t.join() for t in ts]
print(json.dumps(out))
"""

# In the node namespace: GET /readyz and /metrics once a second until a deadline; each answer's
# status and latency (a connection of its own each time, as a Prometheus scrape).
SCRAPER = r"""
import json, sys, time, urllib.error, urllib.request
base, until, out = sys.argv[1], float(sys.argv[2]), []
while time.monotonic() < until:
    for path in ("/readyz", "/metrics"):
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(base + path, timeout=5) as r:
                r.read(); status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
        except OSError:
            status = 0
        out.append((path, (time.monotonic() - t0) * 1000, status))
    time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
print(json.dumps(out))
"""


def _proc_figures(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "rss_kb": int(fields["VmRSS"].split()[0]),
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


@dataclass
class SoakResult:
    seconds: float
    period: float
    versions: int = 0
    probes: int = 0
    judged: int = 0
    in_switch_over: int = 0
    cut_by_next: int = 0
    opened_by_next: int = 0
    mismatches: list[Any] = field(default_factory=list)
    switch_over_ms: list[float] = field(default_factory=list)
    reloads: int = 0
    rejected: int = 0
    held_cut_s: dict[str, float | None] = field(default_factory=dict)
    held_kept: dict[str, bool] = field(default_factory=dict)
    held_restored: dict[str, bool] = field(default_factory=dict)
    samples: list[dict[str, float]] = field(default_factory=list)
    scrape_ms: list[float] = field(default_factory=list)
    scrape_failures: int = 0
    warmup: float = 0.0

    def after_warmup(self) -> list[dict[str, float]]:
        return [s for s in self.samples if s["t"] >= self.warmup]

    def memory(self) -> dict[str, float]:
        """RSS at the end of the warm-up, its largest value after it, the growth ratio; file
        descriptors and threads the same way, and the fewest of each during the warm-up and in
        the last quarter of the run: a scrape being served holds one of each for a moment, a
        leak raises the floor."""
        warm = [s for s in self.samples if s["t"] < self.warmup]
        base = max(warm, key=lambda s: s["t"])
        after = self.after_warmup()
        end = after[len(after) * 3 // 4 :]
        top = max(s["rss_kb"] for s in after)
        return {
            "rss_warm_mb": base["rss_kb"] / 1024,
            "rss_max_mb": top / 1024,
            "rss_last_mb": after[-1]["rss_kb"] / 1024,
            "rss_growth": top / base["rss_kb"] - 1,
            "fds_warm": max(s["fds"] for s in warm),
            "fds_max": max(s["fds"] for s in after),
            "fds_floor_warm": min(s["fds"] for s in warm),
            "fds_floor_end": min(s["fds"] for s in end),
            "threads_warm": max(s["threads"] for s in warm),
            "threads_max": max(s["threads"] for s in after),
            "threads_floor_warm": min(s["threads"] for s in warm),
            "threads_floor_end": min(s["threads"] for s in end),
        }

    def summary(self) -> dict[str, Any]:
        so = sorted(self.switch_over_ms)
        sc = sorted(self.scrape_ms)
        return {
            "seconds": round(self.seconds, 1),
            "period_s": self.period,
            "policy_versions": self.versions,
            "reloads": self.reloads,
            "reloads_rejected": self.rejected,
            "probes": self.probes,
            "judged": self.judged,
            "in_switch_over": self.in_switch_over,
            "cut_by_next_version": self.cut_by_next,
            "opened_by_next_version": self.opened_by_next,
            "mismatches": len(self.mismatches),
            "switch_over_ms": {"p50": _pct(so, 0.5), "p99": _pct(so, 0.99), "max": so[-1] if so else None},
            "held_cut_s": self.held_cut_s,
            "held_kept": self.held_kept,
            "held_restored": self.held_restored,
            "scrape_ms": {
                "p50": _pct(sc, 0.5),
                "p99": _pct(sc, 0.99),
                "max": sc[-1] if sc else None,
                "failures": self.scrape_failures,
            },
            **{k: round(v, 4) if isinstance(v, float) else v for k, v in self.memory().items()},
        }


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)


def _decode(at_start: int) -> Callable[[int], tuple[int, bool]]:
    """What a reload reporting n policies loaded: (the flip version modulo ``MARKS``, whether
    the late change is in). Counted from the policies the daemon reported at its start
    (``at_start``, version 1 then), whatever it holds besides the files'."""
    offset = at_start - _policies(version(1))
    counts = {
        offset + _policies(version(r)) + late * _policies(LATE): (r, late)
        for r in range(MARKS)
        for late in (False, True)
    }
    assert len(counts) == 2 * MARKS

    def loaded(n: int) -> tuple[int, bool]:
        assert n in counts, f"a reload reports {n} policies: no version holds that many"
        return counts[n]

    return loaded


def _read_last(
    events: list[dict[str, Any]], loaded: Callable[[int], tuple[int, bool]], last_write: float, k: int, late: bool
) -> bool:
    """Whether a reload has loaded the last change (version ``k``, the late change or not),
    or one has been rejected since it was written."""
    return any(
        e["_arrived"] >= last_write
        and (
            e.get("event") == "reload-rejected"
            or (e.get("event") == "reload" and loaded(e["policies"]) == (k % MARKS, late))
        )
        for e in events
    )


@dataclass
class Timeline:
    """Which state of the policy (flip version, late change made) is in force when.

    ``changes``: (written at, the state it makes) per change, in time order; ``loads``: per
    reload, in arrival order, its arrival (after its swap) and the newest change it loaded.
    A reload read its files after that change was written, so its swap came after that write and
    before its arrival; the state it loaded is in force from its arrival until the next reload
    that loads another state could have swapped."""

    changes: list[tuple[float, tuple[int, bool]]]
    loads: list[tuple[float, int]]
    initial: tuple[int, bool]
    _in_force: list[float] = field(init=False)

    def __post_init__(self) -> None:
        self._in_force = [a + SLACK for a, _ in self.loads]

    @classmethod
    def build(
        cls,
        changes: list[tuple[float, tuple[int, bool]]],
        reloads: list[tuple[float, tuple[int, bool]]],
        initial: tuple[int, bool],
    ) -> Timeline:
        """``reloads``: (arrival, (flip version modulo ``MARKS``, late)) as reported. Each is
        the newest change written before its arrival that makes that state (one ``MARKS``
        changes older would need a reload lasting ``MARKS`` - 1 periods; the parity, all a
        verdict depends on, is the same either way)."""
        loads = []
        newest: dict[tuple[int, bool], int] = {}  # per reported state, the newest change making it
        i = 0
        for arrived, reported in sorted(reloads):
            while i < len(changes) and changes[i][0] < arrived:
                v, late = changes[i][1]
                newest[(v % MARKS, late)] = i
                i += 1
            assert reported in newest, (
                f"a reload loaded a state (version mod {MARKS}, late) {reported} not written before it"
            )
            loads.append((arrived, newest[reported]))
        return cls(changes, loads, initial)

    def _state(self, j: int) -> tuple[int, bool]:
        return self.initial if j < 0 else self.changes[self.loads[j][1]][1]

    def state_at(self, t: float) -> tuple[tuple[int, bool], bool]:
        """The state in force at ``t``, and whether a reload to a state judging otherwise may
        have swapped by then without having arrived (a switch-over: not judged)."""
        j = bisect.bisect_right(self._in_force, t) - 1
        state = self._state(j)
        for n in range(j + 1, len(self.loads)):
            written = self.changes[self.loads[n][1]][0]
            if written > t:
                break
            other = self._state(n)
            if (other[0] % 2, other[1]) != (state[0] % 2, state[1]):
                return state, True
        return state, False

    def first_loading(self, c: int) -> float | None:
        """The arrival of the first reload that loaded change ``c`` or a later one."""
        return next((a for a, loaded in self.loads if loaded >= c), None)

    def swaps_within(self, t0: float, t1: float) -> list[tuple[int, bool]]:
        """The states of the reloads that may have swapped after ``t0`` and by ``t1``."""
        return [self.changes[c][1] for a, c in self.loads if a > t0 and self.changes[c][0] < t1]


def run_soak(
    topo: Topology,
    workdir: Path,
    seconds: float,
    period: float = 0.2,
    rate: float = 4.0,
    warmup_fraction: float = 0.4,
    metrics_port: int = 9477,
) -> SoakResult:
    """Run the soak on ``topo`` (four pods, up: a routed ``Topology(npods=4)`` enforced through
    NFQUEUE, or ``BridgedPods`` through the AF_PACKET bridge) for ``seconds``; policy files
    under ``workdir``."""
    bridged = isinstance(topo, BridgedPods)
    pairs = BRIDGED_PAIRS if bridged else PAIRS
    policy = workdir / "policy"
    staging = workdir / "staging"
    policy.mkdir()
    staging.mkdir()
    (policy / "inventory.yaml").write_text(inventory(topo.ips))
    (policy / "flip.yaml").write_text(version(1))  # c -> b allowed: the first held connection opens

    def publish(name: str, text: str) -> float:
        # written beside, then renamed in: the watcher sees one complete file appear
        tmp = staging / name
        tmp.write_text(text)
        t = time.monotonic()
        os.replace(tmp, policy / name)
        return t

    result = SoakResult(seconds=seconds, period=period, warmup=warmup_fraction * seconds)
    mode = ("--bridge", BridgedPods.BRIDGE) if bridged else ()
    daemon = Daemon(
        topo, [str(policy)], None if bridged else 0, extra=(*mode, "--metrics", f"127.0.0.1:{metrics_port}")
    )
    loaded = _decode(daemon.wait_event("start")["policies"])
    first_cut = [Held(topo, "c", "b", "TCP"), Held(topo, "c", "b", "UDP")]
    old = [Held(topo, "a", "d", "TCP"), Held(topo, "a", "d", "UDP")]
    assert all(h.ping() for h in first_cut + old)

    t_start = time.monotonic()
    until = t_start + seconds
    late_at = t_start + seconds * 0.85
    streams: dict[str, list[Any]] = {}
    for src, dst in pairs:
        for proto in ("TCP", "UDP"):
            port = Topology.TCP_PORT if proto == "TCP" else Topology.UDP_PORT
            streams.setdefault(src, []).append((f"{src}->{dst}", topo.ips[POD[dst]], proto, port))
    probers = {
        src: topo.spawn(
            topo.pods[POD[src]],
            [PY, "-c", PROBER, json.dumps(s), str(rate), str(until - 0.5), str(PROBE_TIMEOUT), topo.ips[POD[src]]],
        )
        for src, s in streams.items()
    }

    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            t = time.monotonic()
            try:
                figures = _proc_figures(daemon.proc.pid)
            except (OSError, KeyError):
                return
            result.samples.append({"t": t - t_start, **figures})
            stop.wait(max(0.0, 1.0 - (time.monotonic() - t)))

    scraper = topo.spawn(topo.node, [PY, "-c", SCRAPER, f"http://127.0.0.1:{metrics_port}", str(until - 0.5)])
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    # The old connections carry a ping every two seconds (the kernel keeps an idle UDP entry
    # 30 s), each of which must pass: allowed all along until the late change.
    keep = threading.Event()
    kept: dict[str, bool] = {h.name: True for h in old}

    def keeper() -> None:
        while not keep.wait(2.0):
            for h in old:
                kept[h.name] = h.ping() and kept[h.name]

    keeper_thread = threading.Thread(target=keeper, daemon=True)
    keeper_thread.start()

    # The flips: version k written at writes[k]; the first denies c -> b.
    writes: list[float] = []
    late_written: float | None = None
    k = 0
    cut_checked = False
    while time.monotonic() < until - 1.0:
        writes.append(publish("flip.yaml", version(k)))
        if not cut_checked:
            cut_checked = True
            for h in first_cut:
                result.held_cut_s[h.name] = h.cut_within(2.0)
        elif k == 1:
            # c -> b allowed again: the revoked UDP connection (one socket, the same ports)
            # passes again, as a new one on those ports would
            time.sleep(0.1)
            result.held_restored[first_cut[1].name] = first_cut[1].ping()
        if late_written is None and time.monotonic() >= late_at:
            keep.set()
            keeper_thread.join()
            # halfway to the next flip, so that the two changes are two reloads
            time.sleep(max(0.0, writes[-1] + period / 2 - time.monotonic()))
            for h in old:  # allowed all along: still up, however long ago they were opened
                result.held_kept[h.name] = kept[h.name] and h.ping()
            late_written = publish("late.yaml", LATE)
            for h in old:
                result.held_cut_s[h.name] = h.cut_within(2.0)
        k += 1
        time.sleep(max(0.0, writes[-1] + period - time.monotonic()))
    result.versions = k
    probes: list[tuple[str, str, float, float, bool]] = []
    for p in probers.values():
        out, _ = p.communicate(timeout=60)
        probes.extend(tuple(x) for x in json.loads(out))
    stop.set()
    sampler.join(timeout=10)
    out, _ = scraper.communicate(timeout=60)
    for _path, ms, status in json.loads(out):
        if status == 200:
            result.scrape_ms.append(ms)
        else:
            result.scrape_failures += 1
    # The last change is read (a reload that loaded it) before the daemon stops: on a busy
    # machine that takes longer than the run's last second.
    last_write = max(writes + ([late_written] if late_written is not None else []))
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline and not _read_last(
        daemon.events(), loaded, last_write, len(writes) - 1, late_written is not None
    ):
        time.sleep(0.1)
    events = daemon.events()
    assert daemon.terminate() == 0

    reloads = [e for e in events if e.get("event") == "reload"]
    result.reloads = len(reloads)
    result.rejected = sum(e.get("event") == "reload-rejected" for e in events)
    changes = sorted(
        [(t, "flip", i) for i, t in enumerate(writes)] + ([(late_written, "late", -1)] if late_written else [])
    )
    states: list[tuple[float, tuple[int, bool]]] = []  # (written, the state it makes) per change
    ver, late = 1, False
    for t, kind, i in changes:
        if kind == "flip":
            ver = i
        else:
            late = True
        states.append((t, (ver, late)))
    timeline = Timeline.build(states, [(e["_arrived"], loaded(e["policies"])) for e in reloads], initial=(1, False))
    for c, (t, _) in enumerate(states):
        arrived = timeline.first_loading(c)
        assert arrived is not None, f"no reload loaded the change written at {t - t_start:.3f} s"
        result.switch_over_ms.append((arrived - t) * 1000)

    result.probes = len(probes)
    for name, proto, t0, t1, ok in probes:
        if t0 < writes[0] - 0.0 or t0 >= writes[-1] + period:
            # before the first flip (version 1 of the setup) or after the last: not judged
            continue
        src, dst = name.split("->")
        (ver, late), switching = timeline.state_at(t0)
        if switching:
            result.in_switch_over += 1
            continue
        result.judged += 1
        want = expected(src, dst, ver, late)
        if ok == want:
            continue
        # Allowed when it began and failed: a version that denies the pair may have come into
        # force within REPLY_GRACE of its start, and revoked it before its reply passed -- as it
        # should. (Not any later version: a pair denied by mistake must not be excused.)
        later = timeline.swaps_within(t0, t0 + REPLY_GRACE)
        if want and not ok and any(not expected(src, dst, v, lt) for v, lt in later):
            result.cut_by_next += 1
            continue
        # Denied when it began and passed: its first packet waited (in a ring block not yet
        # handed over, behind a busy loop) and was judged after a version that allows the pair
        # came into force within REPLY_GRACE of its start -- the verdict of the version in force
        # when it was judged. (Not any later version: a pair opened by mistake is not excused.)
        if not want and ok and any(expected(src, dst, v, lt) for v, lt in later):
            result.opened_by_next += 1
            continue
        result.mismatches.append(
            {
                "probe": name,
                "proto": proto,
                "t0": round(t0 - t_start, 3),
                "t1": round(t1 - t_start, 3),
                "ok": ok,
                "version": ver,
                "late": late,
            }
        )
    return result


class BridgedPods(Topology):
    """The four pods on the two sides of an AF_PACKET bridge: a (10.245.0.1) and c (.3) share
    namespace A, b (.2) and d (.4) namespace B; the bridge namespace (``node``) joins A's a0 and
    B's b0 through its veth ends brA and brB, and is where the daemon runs."""

    BRIDGE = "brA,brB"

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.node, side_a, side_b = f"pcsbr-{tag}", f"pcsa-{tag}", f"pcsb-{tag}"
        self.pods = [side_a, side_b, side_a, side_b]
        self.ips = ["10.245.0.1", "10.245.0.2", "10.245.0.3", "10.245.0.4"]
        self.procs = []

    def up(self) -> None:
        side_a, side_b = self.pods[0], self.pods[1]
        for ns in (self.node, side_a, side_b):
            sh("ip", "netns", "add", ns)
        for ns, dev, peer in ((side_a, "a0", "brA"), (side_b, "b0", "brB")):
            sh("ip", "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", peer, "netns", self.node)
            sh("ip", "netns", "exec", self.node, "sysctl", "-qw", f"net.ipv6.conf.{peer}.disable_ipv6=1")
            sh("ip", "-n", self.node, "link", "set", peer, "up")
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", self.node, "link", "set", "lo", "up")
        for ns, ip in zip(self.pods, self.ips):
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "a0" if ns == side_a else "b0")
        for ns, ip in zip(self.pods, self.ips):
            p = self.spawn(ns, [PY, "-c", SERVER, ip, str(self.TCP_PORT), str(self.UDP_PORT)])
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
