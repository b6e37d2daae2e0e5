"""The enforcement daemon: NFQUEUE worker threads judging packets natively, hot reload with
revalidation, metrics and the flow log.

Life cycle (``Enforcer``):

1. ``start()``: refuse to run beside another daemon (rules of ours that queue to a queue a
   process listens on), let the node's own traffic (``pyclassify.enforce.node``) through any
   chains a killed daemon left (the cluster is read through them), load and validate the
   manifests (invalid input: ``EnforceError``, nothing is installed), compile the engine, bind
   one ``NfQueue`` per queue (each with its own ``EngineClient``), install our iptables chains
   in place of those another daemon left (one transaction per table and family: adopted, never
   removed first), start one worker thread per queue (the loop runs without the GIL), the
   inotify watcher, the event drainer and, with ``metrics``, the HTTP endpoint; then judge
   every connection of the kernel's table our chains would have queued, the ones no daemon
   judged too (opened while none ran, or before our rules were there), and cut what the policy
   denies.
2. On a file change (debounced): load and validate the whole set; on any error the update is
   rejected whole, the errors are logged and the running engine stays. Otherwise a new engine is
   compiled beside the running one and swapped into every loop at a batch boundary; the kernel's
   connections our rules queued are judged against the new engine, and the ones now denied are
   marked revoked (our chains drop their packets, both ways).
3. ``stop()``: stop the loops, unbind; the rules stay for the next daemon to adopt
   (``on_stop="remove"``: every rule of ours removed).

Fail mode (``fail_open``): closed (default) — no ``--queue-bypass`` (with no listener the kernel
drops queued packets), queue full drops, malformed packets and engine errors are dropped;
open — ``--queue-bypass`` (no listener: packets pass), NFQA_CFG_F_FAIL_OPEN (queue full: packets
pass), malformed packets and engine errors are accepted. Between two daemons (stopped, killed,
restarting) the rules stay: failing closed, new connections are dropped by the kernel (the
established ones keep flowing, accepted before the queue; the node's own traffic is let through
ahead of it); failing open, they pass, and the next daemon judges them when it starts.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from pyclassify import domains, httprules
from pyclassify.batch import HEADER_DTYPE, VERDICT_DTYPE
from pyclassify.engine import PACKET_POLICY, NativeEngine
from pyclassify.enforce.hooks import ForwardQueues, HostHooks, forward_json
from pyclassify.enforce.iptables import (
    DNS_MARK,
    HTTP_DENY_MARK,
    HTTP_MARK,
    JUDGED_CTMARK,
    REJECT_MARK,
    REVOKED_CTMARK,
    IptablesError,
    Rules,
    installed_queues,
    listened_queues,
    open_stale,
    uninstall,
)
from pyclassify.enforce.log import PROTOS, FlowLog, address
from pyclassify.enforce.metrics import Metrics
from pyclassify.enforce.node import LocalAddresses, NodeTraffic, dns_servers, in_cluster_api_server, resolve
from pyclassify.enforce.watch import Watcher
from pyclassify.budget import OverBudget, default_budget
from pyclassify.enforce.source import Loaded, PolicySource, SourceError
from pyclassify.flow import Flow, FlowEnd, Verdict
from pyclassify.ir import Action, Direction, Hook
from pyclassify.kinds.common import ICMP_PROTOCOLS
from pyclassify.nfqueue import engine_capsule, kernel_conntrack, kernel_revalidate, open_queue
from pyclassify.project import Project

#: Connections the HTTP loop follows at once (each holds at most one request head, 8 KiB).
HTTP_CONNECTIONS = 65536

#: Failed checks of our iptables rules in a row (a spawn that fails: no binary, a pids limit) after
#: which ``/healthz`` fails: the liveness probe's restart is safe (the rules are adopted).
RESYNC_FAILURES_UNHEALTHY = 3

#: Exit codes of ``enforce`` beyond 1 (invalid input) and 2 (usage), as docs/commands.md lists them.
EXIT_PREREQUISITE = 6  # not root / no CAP_NET_ADMIN, iptables missing, no kernel support
EXIT_IN_USE = 7  # a queue, an address or an interface in use by another, or absent


class EnforceError(RuntimeError):
    """The daemon cannot start (invalid manifests, queue busy, no permission, ...); ``code`` is
    the exit code that says which."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _queue_error(queue: int, e: OSError) -> EnforceError:
    if e.errno == errno.EPERM and os.geteuid() == 0:
        # As root, the kernel answers EPERM when another process has the queue bound.
        return EnforceError(f"cannot bind NFQUEUE {queue}: another process listens on it (one listener per "
                            "queue): stop it or pick another --queue", EXIT_IN_USE)
    if e.errno in (errno.EPERM, errno.EACCES):
        return EnforceError(f"cannot bind NFQUEUE {queue}: {e.strerror or e}: enforce needs root "
                            "(or CAP_NET_ADMIN)", EXIT_PREREQUISITE)
    return EnforceError(f"cannot bind NFQUEUE {queue}: {e.strerror or e}: does this kernel have "
                        "nfnetlink_queue (modprobe nfnetlink_queue)?", EXIT_PREREQUISITE)


def parse_queues(text: str) -> tuple[int, int]:
    """``"N"`` or ``"N-M"`` -> (first, last)."""
    first, _, last = text.partition("-")
    try:
        a, b = int(first), int(last or first)
    except ValueError:
        raise ValueError(f"queue range {text!r}: expected N or N-M") from None
    if not 0 <= a <= b <= 65535:
        raise ValueError(f"queue range {text!r}: expected 0 <= N <= M <= 65535")
    return a, b


def problems_text(project: Project) -> list[str]:
    return [str(p) for p in sorted(project.problems.errors, key=lambda p: (p.file, p.line))]


def has_log_rules(project: Project) -> bool:
    for policy in project.policy_set.policies:
        for direction in (Direction.INGRESS, Direction.EGRESS):
            if any(r.action == Action.LOG for r in policy.rules(direction)):
                return True
    return False


@dataclass
class EnforceConfig:
    paths: list[str]
    queues: tuple[int, int] = (0, 0)
    fail_open: bool = False
    default: str | None = None  # None: allow for pods, deny for host endpoints
    metrics: str | None = None
    log_stream: IO[str] | None = None
    log_allowed: bool = False
    log_flows: bool = True  # False: no per-flow JSON lines (metrics still count every verdict)
    batch: int = 64
    copy_range: int = 128
    maxlen: int = 4096
    batch_verdicts: bool = True
    hooks: tuple[str, ...] = ("forward", "input", "output")
    install_rules: bool = True
    ipv6: bool = True
    # The watcher's quiet period: long enough to take an atomic rename or a ConfigMap's link swap
    # (microseconds apart) as one change, short beside the 50 ms a change may take to be in force.
    debounce: float = 0.005
    watch: bool = True
    conntrack_entries: int = 262144
    bridge: str | None = None  # "IF1,IF2": an AF_PACKET inline bridge instead of NFQUEUE
    #: (kubeconfig, context, in-cluster): the cluster as the policy source instead of paths.
    kube: tuple[str | None, str | None, bool | None] | None = None
    #: Enforce for this node's pods and host endpoints only; selectors still see every endpoint.
    node: str | None = None
    #: Seconds between checks that our iptables rules are as installed (repaired if not).
    resync: float = 10.0
    #: What a stop does to our rules: "keep" them for the next daemon to adopt (what packets meet
    #: meanwhile is ``fail_open``'s), or "remove" every rule of ours.
    on_stop: str = "keep"
    #: Denied packets rejected (TCP reset, ICMP port unreachable) instead of dropped: the loop
    #: hands them back with ``REJECT_MARK`` and our rules' REJECT answers them (needs our
    #: rules); the bridge crafts the answer itself and sends it back out of the arrival side.
    reject: bool = False
    #: Interfaces whose names begin so are workloads' (Felix's InterfacePrefix): an all-interfaces
    #: host endpoint's forward hook judges routed traffic by every other interface.
    workload_interface_prefix: str = "cali"
    #: The bytes a policy set may take once built (``pyclassify.budget``): "auto" derives it
    #: from the cgroup's memory limit, None sets no bound.
    memory_budget: int | str | None = "auto"
    #: Verdict counters labelled by tier, policy and rule (False: by direction and action only).
    metrics_rule_labels: bool = True


@dataclass
class ReloadResult:
    ok: bool
    errors: list[str] = field(default_factory=list)
    revoked: int = 0
    deleted: int = 0
    seconds: float = 0.0


class Enforcer:
    def __init__(self, config: EnforceConfig) -> None:
        self.config = config
        self.log = FlowLog(config.log_stream, log_allowed=config.log_allowed)
        self.loops: list[Any] = []
        self.threads: list[threading.Thread] = []
        self.bridge: Any = None
        self.metrics = Metrics(lambda: list(self.loops), config.fail_open, source=lambda: self.source,
                               lost_lines=lambda: self.log.lost, bridge=lambda: self.bridge,
                               dns=lambda: (self.dns_loop, self.domain_facts),
                               http=lambda: (self.main_loops, self.http_loop), engine=lambda: self.engine,
                               rule_labels=config.metrics_rule_labels)
        self.rules: Rules | None = None
        #: The node's own traffic our chains let through ahead of the queue (``start()`` finds it).
        self.node = NodeTraffic()
        #: Set once ``pyclassify enforce --uninstall`` removed our rules while we ran: they stay out.
        self.uninstalled = False
        self._resync_failures = 0
        self._resync_error = ""
        self.watcher: Watcher | None = None
        self.ctnl: Any = None
        self.project: Project | None = None
        self.engine: NativeEngine | None = None
        #: The staged policies enforced (``Project.staged``): judges each new connection beside
        #: the real verdict, for the log; never decides a packet. None when nothing is staged.
        self.staged: NativeEngine | None = None
        #: The host endpoints' own hooks (doNotTrack, preDNAT, applyOnForward): their engines
        #: and the queues judged by them.
        self.hooks = HostHooks(self._open_hook_loop)
        self._has_log = False
        self._reload_lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._stop = threading.Event()
        self._drainer: threading.Thread | None = None
        self._resyncer: threading.Thread | None = None
        self._ready = False
        self.metrics_address: tuple[str, int] | None = None
        self.memory_budget: int | None = default_budget() if config.memory_budget == "auto" else \
            config.memory_budget  # type: ignore[assignment]
        self.source: Any = PolicySource(list(config.paths), config.node, budget=self.memory_budget)
        # What DNS answers taught domain rules (fed by the DNS loop; kept across reloads).
        self.domain_facts = domains.new_facts()
        self.dns_loop: Any = None
        #: The loop of http rules (connections admitted up to their request), and the loops
        #: that admit them.
        self.http_loop: Any = None
        self.main_loops: list[Any] = []
        if config.kube is not None:
            from pyclassify.enforce.iptables import OWN_MARK
            from pyclassify.kube.enforce import KubePolicySource

            # its connections to the API server carry our mark: let through whether or not we run
            self.source = KubePolicySource(*config.kube, node=config.node, budget=self.memory_budget,
                                           mark=OWN_MARK if config.install_rules and config.bridge is None else 0)
        self.source.domains = self.domain_facts  # both sources put it on the inventories they build
        self.reloads = 0
        self.rejected = 0
        d = config.default
        self.pod_allow = d != "deny"
        self.host_allow = d == "allow"

    # --- start / stop ---

    def _load_source(self) -> Loaded:
        try:
            return self.source.load()
        except SourceError as e:
            raise EnforceError("\n".join(e.errors)) from e

    def _load(self) -> tuple[Project, NativeEngine]:
        loaded = self._load_source()
        return loaded.project, loaded.engine

    def start(self) -> None:
        cfg = self.config
        if cfg.reject and cfg.bridge is None and not cfg.install_rules:
            # a packet handed back with the reject mark and no REJECT rule would be queued again
            raise EnforceError("rejecting denied packets needs NFQUEUE with pyclassify's own iptables rules")
        if cfg.bridge is None and cfg.install_rules:
            self._prepare_node()
        self.project, self.engine = self._load()
        self._serve_metrics()
        self._has_log = has_log_rules(self.project)
        self._update_staged(self.project)
        if cfg.bridge is not None:
            self._start_bridge()
            return
        try:
            for q in range(cfg.queues[0], cfg.queues[1] + 1):
                try:
                    loop = open_queue(self.engine, q, pod_allow=self.pod_allow, host_allow=self.host_allow, fail_open=cfg.fail_open,
                                      copy_range=cfg.copy_range, maxlen=cfg.maxlen, batch=cfg.batch,
                                      batch_verdicts=cfg.batch_verdicts,
                                      reject_mark=REJECT_MARK if cfg.reject else 0)
                except OSError as e:
                    raise _queue_error(q, e) from e
                self.loops.append(loop)
            self.main_loops = list(self.loops)
            assert self.project is not None
            early_queues = self.hooks.open_early(self.project, cfg.queues[1] + 1)
            dns_queue = self._open_dns_loop(cfg.queues[1] + 1 + len(early_queues))
            http_queue = self._open_http_loop(cfg.queues[1] + 1 + len(early_queues) + (dns_queue is not None))
            forward_queues = self._open_forward_hooks(max(loop.queue for loop in self.loops) + 1)
            self.ctnl = kernel_conntrack()
            for loop in self.loops:
                t = threading.Thread(target=loop.run, name=f"pyclassify-nfq{loop.queue}", daemon=True)
                t.start()
                self.threads.append(t)
            if cfg.install_rules:
                try:
                    self.rules = Rules(cfg.queues[0], cfg.queues[1], cfg.fail_open, tuple(cfg.hooks), cfg.ipv6,
                                       reject=cfg.reject, workload_prefix=cfg.workload_interface_prefix,
                                       untracked_queue=early_queues.get(Hook.UNTRACKED),
                                       pre_dnat_queue=early_queues.get(Hook.PRE_DNAT), dns_queue=dns_queue,
                                       http_queue=http_queue, forward_queues=forward_queues,
                                       node=self.node.with_failsafe(self.project.failsafe_config))
                    self.rules.install()  # in place of what another daemon left: adopted
                    if http_queue is not None:
                        self._admit_http()
                except IptablesError as e:
                    self.rules = None
                    raise EnforceError(f"cannot install the iptables rules: {e}", EXIT_PREREQUISITE) from e
            self._drainer = threading.Thread(target=self._drain_loop, name="pyclassify-events", daemon=True)
            self._drainer.start()
            if self.rules is not None:
                self._resyncer = threading.Thread(target=self._resync_loop, name="pyclassify-resync", daemon=True)
                self._resyncer.start()
            self._start_watch_and_metrics()
            # Every connection our chains would have queued is judged by this policy: those an
            # earlier daemon judged (killed, maybe in the middle of a revocation) and those no
            # daemon did (opened while none ran, or before our rules were there: they carry no
            # mark of ours). What it denies is cut now, not left established.
            revoked, deleted = self._revoke(engine_capsule(self.engine), every=self.rules is not None)
        except BaseException:
            self.stop()
            raise
        self._ready = True
        self.log.emit("start", queues=list(range(cfg.queues[0], cfg.queues[1] + 1)), revoked=len(revoked),
                      conntrack_deleted=deleted["deleted"], **self._start_fields(),
                      **({"hook_queues": {h.value: q for h, q in early_queues.items()}} if early_queues else {}),
                      **({"dns_queue": dns_queue} if dns_queue is not None else {}),
                      **({"http_queue": http_queue} if http_queue is not None else {}),
                      **({"forward_queues": forward_json(forward_queues)} if forward_queues else {}))
        self._log_revoked(revoked)

    def _prepare_node(self) -> None:
        """Before the policy is read: refuse to run beside another daemon (chains of ours that
        send packets to a queue a process listens on; one daemon per network namespace), and let
        the node's own traffic through the chains a killed daemon left, so that reading the
        cluster (its API server, DNS) never waits on a queue nobody reads."""
        cfg = self.config
        try:
            taken = installed_queues(cfg.ipv6) & listened_queues()
            if taken:
                raise EnforceError(
                    f"another daemon enforces in this network namespace: the PYCLASSIFY-* rules send packets to "
                    f"NFQUEUE {', '.join(map(str, sorted(taken)))}, where a process listens (one daemon per network "
                    "namespace): stop it first", EXIT_IN_USE)
            servers = [s for s in (self._api_server(), in_cluster_api_server()) if s is not None]
            self.node = NodeTraffic(dns_servers=dns_servers())
            self.node = self.node.with_api_servers(tuple(a for h, p in servers for a in resolve(h, p, lookup=False)))
            opened = open_stale(self.node, cfg.ipv6)
            named = tuple(a for h, p in servers for a in resolve(h, p))  # DNS goes through now
            if opened and set(named) - set(self.node.api_servers):
                self.node = self.node.with_api_servers(named)
                open_stale(self.node, cfg.ipv6)
            self.node = self.node.with_api_servers(named)
        except IptablesError as e:
            raise EnforceError(f"cannot install the iptables rules: {e}", EXIT_PREREQUISITE) from e
        if opened:
            self.log.emit("rules-found", opened=opened)

    def _api_server(self) -> tuple[str, int] | None:
        """The API server the cluster source reads (its kubeconfig's), if it is one."""
        if self.config.kube is None:
            return None
        from pyclassify.kube.client import api_server

        return api_server(*self.config.kube)

    def _open_dns_loop(self, queue: int) -> int | None:
        """With domain rules: a loop on ``queue`` that learns the addresses of the DNS answers
        our rules send it (those of queries policy allowed) before it lets them through."""
        cfg = self.config
        assert self.project is not None and self.engine is not None
        if self.project.inventory.domains is None or not domains.has_domain_rules(self.project.policy_set):
            return None
        try:
            loop = open_queue(self.engine, queue, pod_allow=self.pod_allow, host_allow=self.host_allow,
                              fail_open=True, copy_range=65535, maxlen=cfg.maxlen, batch=cfg.batch,
                              batch_verdicts=cfg.batch_verdicts, accept_mark=DNS_MARK, dns=True)
        except OSError as e:
            raise _queue_error(queue, e) from e
        self.loops.append(loop)
        self.dns_loop = loop
        return queue

    def _open_http_loop(self, queue: int) -> int | None:
        """With http rules (and our own iptables rules to mark connections): a loop on ``queue``
        that judges the requests of the connections the main loops admit up to their request
        (from then on they hand such connections back with ``HTTP_MARK``). Without it, a
        connection whose verdict awaits its request is denied."""
        cfg = self.config
        assert self.project is not None and self.engine is not None
        if not cfg.install_rules or not httprules.has_http_rules(self.project.policy_set):
            return None
        try:
            loop = open_queue(self.engine, queue, pod_allow=self.pod_allow, host_allow=self.host_allow,
                              fail_open=cfg.fail_open, copy_range=65535, maxlen=cfg.maxlen, batch=cfg.batch,
                              batch_verdicts=cfg.batch_verdicts, http_deny_mark=HTTP_DENY_MARK,
                              http_connections=HTTP_CONNECTIONS)
        except OSError as e:
            raise _queue_error(queue, e) from e
        self.loops.append(loop)
        self.http_loop = loop
        return queue

    def _admit_http(self) -> None:
        """The main loops admit connections up to their request from now on (our rules that
        take their mark must be in place)."""
        for main in self.main_loops:
            main.admit_http(self.http_loop, HTTP_MARK)

    def _open_hook_loop(self, engine: NativeEngine, queue: int, **options: Any) -> Any:
        """A loop of a host endpoint hook (``HostHooks``) on ``queue``, with this daemon's queue
        settings."""
        cfg = self.config
        try:
            loop = open_queue(engine, queue, fail_open=cfg.fail_open, copy_range=cfg.copy_range, maxlen=cfg.maxlen,
                              batch=cfg.batch, batch_verdicts=cfg.batch_verdicts, **options)
        except OSError as e:
            raise _queue_error(queue, e) from e
        self.loops.append(loop)
        return loop

    def _open_forward_hooks(self, queue: int) -> ForwardQueues:
        """The forward hook's loops of the interfaces not judged yet (only our rules queue to
        them, and only on the FORWARD hook)."""
        cfg = self.config
        if "forward" not in cfg.hooks or not cfg.install_rules:
            return ()
        assert self.project is not None
        return self.hooks.open_forward(self.project, queue, reject_mark=REJECT_MARK if cfg.reject else 0)

    def _start_watch_and_metrics(self) -> None:
        cfg = self.config
        if cfg.kube is not None:
            self.source.watch(self.reload)
        elif cfg.watch:
            self.watcher = Watcher(cfg.paths, self._on_change, cfg.debounce)
            self.watcher.start()

    def _serve_metrics(self) -> None:
        """Before anything is bound or installed: a busy address then changes nothing (in
        particular no iptables rule), and /readyz answers "starting" until the loops run."""
        cfg = self.config
        if cfg.metrics:
            try:
                self.metrics_address = self.metrics.serve(cfg.metrics, self.not_ready, self.not_healthy)
            except OSError as e:
                raise EnforceError(f"cannot serve metrics on {cfg.metrics}: {e.strerror or e}", EXIT_IN_USE) from e

    def _start_bridge(self) -> None:
        """The AF_PACKET bump-in-the-wire: the engine's own conntrack, no iptables, no kernel
        conntrack; per-flow JSON lines are not produced on this path (counters and metrics are)."""
        from pyclassify.bridge import BridgeError, start_bridge

        cfg = self.config
        assert self.engine is not None and self.project is not None and cfg.bridge is not None
        try:
            self.bridge = start_bridge(cfg.bridge, engine_capsule(self.engine), fail_open=cfg.fail_open,
                                       pod_allow=self.pod_allow, host_allow=self.host_allow,
                                       max_entries=cfg.conntrack_entries,
                                       # always: a reload may bring the first http rule
                                       http_connections=HTTP_CONNECTIONS, reject=cfg.reject)
        except (BridgeError, ValueError, OSError) as e:
            self.metrics.close()
            code = EXIT_IN_USE if "No such device" in str(e) or getattr(e, "errno", None) == errno.ENODEV \
                else EXIT_PREREQUISITE
            raise EnforceError(f"cannot start the bridge {cfg.bridge}: {e}", code) from e
        try:
            self._start_watch_and_metrics()
        except BaseException:
            self.stop()
            raise
        self._ready = True
        self.log.emit("start", bridge=cfg.bridge, **self._start_fields())

    def _start_fields(self) -> dict[str, Any]:
        assert self.project is not None
        inventory = self.project.inventory
        fields: dict[str, Any] = {"fail": "open" if self.config.fail_open else "closed",
                                  "policies": len(self.project.policy_set.policies),
                                  "staged_policies": len(self.project.policy_set.staged),
                                  "endpoints": len(inventory.endpoints)}
        if self.config.node is not None:
            # Said at start: a node name that matches nothing enforces nothing.
            fields["node"] = self.config.node
            fields["enforced_endpoints"] = sum(map(inventory.enforces, inventory.endpoints))
        return fields

    def not_ready(self) -> str | None:
        """Why this daemon is not ready (None: it is): the initial policy is in force and every
        loop runs. ``/readyz``."""
        if not self._ready:
            return "starting: the initial policy is not in force yet"
        if self._stop.is_set():
            return "stopping"
        if self.uninstalled:
            return "not enforcing: the rules were removed by pyclassify enforce --uninstall"
        return self.not_healthy()

    def not_healthy(self) -> str | None:
        """Why this daemon is broken (None: it is not), for ``/healthz``: a thread of its own
        has died (a packet loop, the event drainer, the rules' resync), a part with a
        ``not_healthy()`` (the policy source: a path gone, a watch thread dead; the watcher: its
        thread dead, a root replaced and not seen) says what is wrong with it, or the check of
        our iptables rules keeps failing."""
        if not self._ready or self._stop.is_set():
            return None
        problems = []
        loops = [t.name for t in self.threads if not t.is_alive()]
        if loops:
            problems.append(f"packet loop stopped: {', '.join(loops)}")
        problems += [f"{t.name} stopped" for t in (self._drainer, self._resyncer) if t is not None and not t.is_alive()]
        for part in (self.source, self.watcher):
            check = getattr(part, "not_healthy", None)
            problem = check() if callable(check) else None
            if problem:
                problems.append(problem)
        if self._resync_failures >= RESYNC_FAILURES_UNHEALTHY:
            problems.append(f"the iptables rules could not be checked {self._resync_failures} times in a row: "
                            f"{self._resync_error}")
        return "; ".join(problems) or None

    def stop(self) -> None:
        self._stop.set()
        if self.config.kube is not None:
            self.source.stop()
        if self.bridge is not None:
            if self.watcher is not None:
                self.watcher.stop()
                self.watcher = None
            self.bridge.stop()
            self.log.emit("stop", stats=self.bridge.counters)
            self.bridge = None
            self.metrics.close()
            return
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
        for loop in self.loops:
            loop.stop()
        for t in self.threads:
            t.join(timeout=5)
        if self._resyncer is not None:
            self._resyncer.join(timeout=30)  # a repair under way ends before the rules go
            self._resyncer = None
        kept = self.rules is not None and self.config.on_stop == "keep" and not self.uninstalled
        if self.rules is not None and not kept:
            self._remove_rules()
        elif self.uninstalled:
            self._remove_rules()  # what --uninstall left for us to see
        self.rules = None
        for loop in self.loops:
            try:
                loop.close()
            except RuntimeError:
                pass
        if self._drainer is not None:
            self._drainer.join(timeout=5)
            self._drainer = None
        self.drain()
        self.metrics.close()
        if self.ctnl is not None:
            self.ctnl.close()
            self.ctnl = None
        if self.loops:
            self.log.emit("stop", stats=self.stats(), rules="kept" if kept else "removed")
        self.loops = []
        self.threads = []

    def _remove_rules(self) -> None:
        try:
            uninstall(self.config.ipv6, leave_mark=False)
        except IptablesError as e:
            self.log.emit("rules-remove-failed", error=str(e))

    def wait(self, timeout: float | None = None) -> bool:
        return self._stop.wait(timeout)

    def request_stop(self) -> None:
        self._stop.set()

    def stats(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for loop in self.loops:
            for k, v in loop.stats.items():
                total[k] = total.get(k, 0) + v
        return total

    # --- reload ---

    def _on_change(self, first_event: float) -> None:
        try:
            self.reload(first_event)
        except Exception as e:  # noqa: BLE001 - a bug in a reload is said, and the daemon goes on
            self.metrics.reloads.labels("failure").inc()
            self.log.emit("reload-failed", error=f"{type(e).__name__}: {e}",
                          where=traceback.format_exc(limit=-3).splitlines()[-6:])

    def reload(self, since: float | None = None) -> ReloadResult:
        """Validate, apply the change to the running engine as a delta (a new snapshot beside the
        old one) and swap; revoke what the new policy denies. An invalid object is rejected
        alone (its last good version stays); a change that does not compile is rejected whole."""
        with self._reload_lock:
            t0 = time.monotonic() if since is None else since
            t_load = time.monotonic()
            try:
                loaded = self._load_source()
            except EnforceError as e:
                return self._reject(str(e).splitlines())
            except OverBudget as e:  # before the engine built anything: the policy in force stays
                return self._reject([str(e)])
            except Exception as e:  # noqa: BLE001 - compile errors reject the update, never the daemon
                return self._reject([f"{type(e).__name__}: {e}"])
            t_loaded = time.monotonic()
            project, engine = loaded.project, loaded.engine
            errors = [*loaded.rejected.values(),
                      *(f"{f}: {loaded.kept.get(f, 'cannot be read or parsed')}: its last good objects stay in force"
                        for f in loaded.broken_files)]
            if errors:
                self.rejected += 1
                self.metrics.reloads.labels("partial" if loaded.changed else "failure").inc()
                self.log.emit("reload-rejected", partial=loaded.changed > 0, errors=errors)
            old = self.project.policy_set if self.project is not None else None
            if loaded.changed == 0:
                # Nothing the main engine holds changed (or every change was rejected); what is
                # staged, or a doNotTrack/preDNAT policy (the early hooks' engines), may have.
                if old is not None and (project.policy_set.staged != old.staged or project.policy_set.early != old.early):
                    with self._drain_lock:
                        self._drain_events()
                        self.project = project
                        self._update_staged(project)
                        missing = self._swap_early(project)
                        self.log.forget()
                    # what a changed pre-DNAT policy now denies is cut (the workload's verdicts stand);
                    # a staged change alone judges nothing again
                    revoked: list[Any] = []
                    if self.engine is not None and project.policy_set.early != old.early:
                        revoked, _ = self._revoke(engine_capsule(self.engine))
                    self.metrics.revoked.inc(len(revoked))
                    self.log.emit("reload", policies=len(project.policy_set.policies), revoked=len(revoked),
                                  staged_policies=len(project.policy_set.staged), changed_objects=0,
                                  **({"hooks_need_restart": missing} if missing else {}))
                    self._log_revoked(revoked)
                return ReloadResult(not errors, errors, 0, 0, time.monotonic() - t0)
            capsule = engine_capsule(engine)
            t_swap = time.monotonic()
            count = 0
            # Events judged by the old engine are named with the old tables: drained first, and
            # none drained between the loops' swap and the new engine's naming them.
            with self._drain_lock:
                self._drain_events()
                for loop in self.loops:
                    if loop.queue not in self.hooks.hook_of_queue:
                        loop.swap(capsule, False)  # no engine-side tracker on this path: the kernel's is revalidated
                if self.bridge is not None:
                    count += self.bridge.swap(capsule)  # revokes in the bridge's own conntrack
                self.project, self.engine = project, engine
            missing = self._swap_early(project)
            self._follow_node(project)
            self._has_log = has_log_rules(project)
            with self._drain_lock:
                self._update_staged(project)
            applied = time.monotonic()
            revoked, deleted = self._revoke(capsule)
            count += len(revoked)
            done = time.monotonic()
            self.metrics.reloads.labels("success").inc()
            self.metrics.revalidations.inc()
            self.metrics.revoked.inc(count)
            for k, v in deleted.items():
                self.metrics.ct_deleted.labels(k).inc(v)
            self.metrics.revalidation_seconds.observe(done - t_swap)
            self.metrics.apply_seconds.observe(applied - t0)
            # parse: the load's time less its build and keep (so the parts add up to the whole)
            stages = {"wait": t_load - t0, "parse": t_loaded - t_load - loaded.build_s - loaded.keep_s,
                      "build": loaded.build_s, "keep": loaded.keep_s, "swap": applied - t_loaded}
            for stage, seconds in stages.items():
                self.metrics.apply_stage_seconds.labels(stage).observe(seconds)
            self.reloads += 1
            self.log.forget()
            self.log.emit("reload", policies=len(project.policy_set.policies), revoked=count,
                          staged_policies=len(project.policy_set.staged),
                          conntrack_deleted=deleted["deleted"], apply_ms=round((applied - t0) * 1000, 3),
                          revalidate_ms=round((done - t_swap) * 1000, 3), changed_objects=loaded.changed,
                          stages_ms={k: round(v * 1000, 3) for k, v in stages.items()},
                          engine_builds=engine.state.full_builds, engine_deltas=engine.state.deltas,
                          # a hook first needed now that could not be added: said, not silently unenforced
                          **({"hooks_need_restart": missing} if missing else {}))
            self._log_revoked(revoked)
            return ReloadResult(True, [], count, deleted["deleted"], done - t0)

    def _revoke(self, capsule: Any, every: bool = False) -> tuple[list[Any], dict[str, int]]:
        """Judge every connection of the kernel's table that our rules queued (however old: the
        kernel keeps them, the engine saw only their first packet) by the engine of ``capsule``:
        mark the newly denied ones revoked (the first rule of our chains drops their packets,
        both ways) and unmark the revoked ones it allows again (as it would allow a new
        connection on the same ports). Returns the revoked ones and the kernel's answers.

        ``every`` (at start): the connections without our mark too. Which ones: every entry of
        the kernel's table but those our chains never queue (``NodeTraffic.unqueued``: over the
        loopback, on a hook we do not install, the node's own traffic). An entry without the
        mark was opened while no daemon ran and no rule of ours marked it (before our rules
        were there, after an uninstall, while a remove-then-install left a gap), so nobody
        judged it; judging only the marked ones left such connections open for good. Those
        this policy allows get the mark, so every later change judges them as well."""
        deleted = {"deleted": 0, "missing": 0, "errors": 0}
        if self.ctnl is None:
            return [], deleted
        unmarked = None
        if every and self.rules is not None:
            node, local, hooks = self.rules.node, LocalAddresses.read(), tuple(self.config.hooks)
            unmarked = lambda judged, original: node.unqueued(judged, original, local, hooks)  # noqa: E731
        try:
            _, revoked, restored, adopted = kernel_revalidate(
                self.ctnl, capsule, mark=JUDGED_CTMARK, revoked_mark=REVOKED_CTMARK, pod_allow=self.pod_allow,
                host_allow=self.host_allow, ipv6=self.config.ipv6, unmarked=unmarked, **self._hook_checks())
        except OSError as e:
            # The socket may hold the rest of a broken dump: a fresh one for the next time.
            self.log.emit("revalidation-failed", error=str(e))
            self.ctnl.close()
            self.ctnl = kernel_conntrack()
            return [], deleted
        both = REVOKED_CTMARK | JUDGED_CTMARK
        if revoked:
            deleted = self.ctnl.delete(revoked, both, both)
        if restored:
            self.ctnl.delete(restored, 0, REVOKED_CTMARK)
            self.metrics.restored.inc(len(restored))
        if len(adopted):  # allowed, and judged by every later change from now on
            self.ctnl.mark_rows(adopted.view(np.uint8), JUDGED_CTMARK, JUDGED_CTMARK)
        return revoked, deleted

    def _hook_checks(self) -> dict[str, Any]:
        """What revalidation asks of the host endpoints' hooks (with our rules: their marks)."""
        if self.rules is None or self.project is None:
            return {}
        return {"pre_dnat": self.hooks.pre_dnat_check(),
                "forward": self.hooks.forward_checks(self.project, self.rules.forward_queues)}

    def _log_revoked(self, revoked: list[Any]) -> None:
        for src, dst, sport, dport, proto, ver in revoked:
            a, b = address(src, ver), address(dst, ver)
            self.log.emit("revoke", src=a, dst=b, proto=PROTOS.get(proto, proto),
                          sport=sport, dport=dport, **self._endpoint_refs(a, b))

    def _reject(self, errors: list[str]) -> ReloadResult:
        self.metrics.reloads.labels("failure").inc()
        self.rejected += 1
        self.log.emit("reload-rejected", errors=errors)
        return ReloadResult(False, errors)

    def _swap_early(self, project: Project) -> list[str]:
        """The early hooks' engines follow the project (a delta each) into their loops. A hook
        (or the DNS queue) the project needs for the first time gets its loop and chains now;
        returns the ones that could not be added (the bridge, or no rules of ours)."""
        self.hooks.follow(project, self.loops)
        new, wants_forward = self.hooks.wants(project)
        wants_forward = wants_forward and "forward" in self.config.hooks
        wants_dns = self.dns_loop is None and domains.has_domain_rules(project.policy_set)
        wants_http = self.http_loop is None and httprules.has_http_rules(project.policy_set)
        if not new and not wants_dns and not wants_http and not wants_forward:
            return []
        if self.bridge is not None or self.rules is None:
            return ([h.value for h in new] + (["dns"] if wants_dns else []) + (["http"] if wants_http else [])
                    + (["forward"] if wants_forward else []))
        self.project = project  # the loops open on this project's policy
        taken = (loop.queue for loop in (self.dns_loop, self.http_loop) if loop is not None)
        first = max([self.config.queues[1], *self.hooks.hook_of_queue, *taken]) + 1
        opened = len(self.loops)
        early = self.hooks.open_early(project, first, only=new)
        dns_queue = self._open_dns_loop(first + len(early)) if wants_dns else None
        http_queue = self._open_http_loop(first + len(early) + (dns_queue is not None)) if wants_http else None
        forward = self._open_forward_hooks(max(loop.queue for loop in self.loops) + 1)
        for loop in self.loops[opened:]:
            t = threading.Thread(target=loop.run, name=f"pyclassify-nfq{loop.queue}", daemon=True)
            t.start()
            self.threads.append(t)
        self.rules.extend(early.get(Hook.UNTRACKED), early.get(Hook.PRE_DNAT), dns_queue, http_queue, forward)
        if http_queue is not None:
            self._admit_http()
        self.log.emit("hooks-added", hook_queues={h.value: q for h, q in early.items()},
                      **({"dns_queue": dns_queue} if dns_queue is not None else {}),
                      **({"http_queue": http_queue} if http_queue is not None else {}),
                      **({"forward_queues": forward_json(forward)} if forward else {}))
        return []

    def _follow_node(self, project: Project) -> None:
        """The failsafe ports follow the manifests' FelixConfiguration into our rules."""
        if self.rules is None:
            return
        try:
            if self.rules.follow_node(self.node.with_failsafe(project.failsafe_config)):
                self.log.emit("rules-updated", reason="failsafe ports")
        except IptablesError as e:
            self.log.emit("rules-update-failed", error=str(e))

    def _update_staged(self, project: Project) -> None:
        """The staged preview follows the project: built, or brought up to date by a delta."""
        view = project.staged()
        if view is None:
            self.staged = None
        elif self.staged is None:
            self.staged = NativeEngine(view.policy_set, view.inventory)
        else:
            self.staged = self.staged.update(view.policy_set, view.inventory)

    # --- events: verdict metrics and the flow log ---

    def _resync_loop(self) -> None:
        """Someone else's iptables change (a flush, a reorder, a rule replaced, another
        daemon's chains in place of ours) is found and undone within ``resync`` seconds, as
        Felix resyncs its rules; ``pyclassify enforce --uninstall`` is obeyed instead."""
        while not self._stop.wait(self.config.resync):
            rules = self.rules
            if rules is None:
                return
            try:
                with self._reload_lock:  # not beside a reload's own transaction
                    if rules.uninstalled():
                        self._leave_uninstalled()
                        return
                    found = rules.repair()
            except Exception as e:  # noqa: BLE001 - iptables failing, or not started at all (no binary, a pids limit)
                self._resync_failures += 1
                self._resync_error = f"{type(e).__name__}: {e}"
                self.log.emit("rules-repair-failed", error=self._resync_error, failures=self._resync_failures)
                continue
            self._resync_failures = 0
            if found:
                self.metrics.rules_repaired.inc()
                self.log.emit("rules-repaired", found=found)

    def _leave_uninstalled(self) -> None:
        """Our rules were removed by an explicit uninstall while we run: they stay out (what a
        repair racing with the uninstall put back is removed again), we say so, and are not
        ready; the loops keep their queues until the stop, which removes the mark the uninstall
        left."""
        assert self.rules is not None
        self.uninstalled = True
        self.rules.remove(keep_mark=True)
        self.rules = None
        self._resyncer = None  # ended on purpose: not a dead thread
        self.log.emit("rules-uninstalled")

    def _drain_loop(self) -> None:
        while not self._stop.wait(0.2):
            self.drain()

    def drain(self) -> None:
        with self._drain_lock:
            self._drain_events()

    def _drain_events(self) -> None:
        """``drain()`` with ``_drain_lock`` held."""
        engine = self.engine
        if engine is None:
            return
        for loop in self.loops:
            hb, vb, n = loop.drain_events()
            if n:
                hook = self.hooks.hook_of_queue.get(loop.queue)
                self._account(loop.queue, self.hooks.engine_of(loop.queue) or engine,
                              np.frombuffer(hb, HEADER_DTYPE), np.frombuffer(vb, VERDICT_DTYPE), hook)

    def _name(self, engine: NativeEngine, side: Any, direction: Direction, subject: str | None = None) -> Any:
        """``engine.side_decision`` (``subject``: the address of the end whose isolating policies
        a tier's end names), or None for a verdict whose tables are not ``engine``'s: a batch
        judged while a reload swapped engines, whose event came after the swap (its policy or
        rule index may be past the new engine's lists). Counted."""
        try:
            return engine.side_decision(side, direction, subject)
        except IndexError:
            self.metrics.events_unnamed.inc()
            return None

    def _account(self, queue: int, engine: NativeEngine, h: Any, v: Any, hook: Hook | None = None) -> None:
        decisions: dict[tuple[str, tuple[int, ...]], Any] = {}
        for direction, name in ((Direction.EGRESS, "egress"), (Direction.INGRESS, "ingress")):
            side = v[name]
            present = side["present"] != 0
            if not present.any():
                continue
            keys = np.stack([side["tier"], side["source_kind"].astype(np.int32), side["source"], side["rule"],
                             side["allow"].astype(np.int32), side["reason"].astype(np.int32)], axis=1)[present]
            uniq, first, counts = np.unique(keys, axis=0, return_index=True, return_counts=True)
            idx = np.flatnonzero(present)
            for key, f, c in zip(uniq, first, counts):
                d = self._name(engine, side[idx[f]], direction)
                if d is None:
                    continue
                decisions[(name, tuple(int(x) for x in key))] = d
                self.metrics.count_verdicts(name, d.tier, d.policy, d.rule, d.verdict, int(c))
        staged = None
        if self.staged is not None and hook is None:
            # The same new connections with the staged policies enforced (each judged alone: the
            # verdict records are policy-judged packets only).
            staged = self.staged.judge(h, None, None, "allow" if self.pod_allow else "deny",
                                       "allow" if self.host_allow else "deny")
            differs = staged["allow"] != v["allow"]
            for name, changed in (("true", differs), ("false", ~differs)):
                n = int(np.count_nonzero(changed))
                if n:
                    self.metrics.staged_verdicts.labels(name).inc(n)
        if not self.config.log_flows:
            return
        for i in range(len(h)):
            allowed = bool(v[i]["allow"])
            staged_differs = staged is not None and bool(staged[i]["allow"]) != allowed
            if allowed and (hook is not None or not (self._has_log or self.log.log_allowed or staged_differs)):
                continue
            ver = int(h[i]["ip_version"])
            if ver not in (4, 6):
                continue
            proto = int(h[i]["protocol"])
            src = address(h[i]["src_addr"].tobytes(), ver)
            dst = address(h[i]["dst_addr"].tobytes(), ver)
            ports = int(h[i]["flags"]) & 32
            sport = int(h[i]["sport"]) if ports else None
            dport = int(h[i]["dport"]) if ports else None
            if self.log.seen((proto, src, dst, dport, allowed, hook)):
                continue
            sides = {}
            for name, direction, end in (("egress", Direction.EGRESS, src), ("ingress", Direction.INGRESS, dst)):
                # the end's endpoint names the policies that isolated it; on the forward hook the
                # subject is the host endpoint of the interface, not an end of the packet
                d = self._name(engine, v[i][name], direction, end if hook is not Hook.FORWARD else None)
                sides[name] = d.to_json() if d else None
            fields = dict(queue=queue, src=src, dst=dst, proto=PROTOS.get(proto, proto), sport=sport, dport=dport,
                          **sides)
            fields.update(self._endpoint_refs(src, dst))
            if hook is not None:
                fields["hook"] = hook.value
            if hook is Hook.FORWARD:
                fields["via"] = self.hooks.interface_of(queue)  # the host endpoint interface
            http = httprules.outcome_name(int(v[i]["http"]))
            if http is not None:
                fields["http"] = http
            if staged is not None:
                fields["staged"] = self._staged_json(staged[i])
            if not allowed:
                self.log.emit("deny", **fields)
                continue
            # The record counts the Log rules each side passed: explain only flows that passed one.
            rec = v[i]
            passed_log = rec["reason"] != PACKET_POLICY or rec["egress"]["logs"] or rec["ingress"]["logs"]
            logs = self._logs(engine, src, dst, proto, sport, dport, h[i]) if self._has_log and passed_log else []
            if logs:
                self.log.emit("log", logs=logs, **fields)
            elif self.log.log_allowed or staged_differs:
                self.log.emit("allow", **fields)

    def _staged_json(self, record: Any) -> dict[str, Any]:
        """A connection's staged verdict for the log: as ``explain --json`` prints one, plus
        ``summary`` ("would deny by StagedNetworkPolicy/ns/name rule 2 (ingress)")."""
        assert self.staged is not None
        sides = {name: self.staged.side_decision(record[name], d)
                 for name, d in (("egress", Direction.EGRESS), ("ingress", Direction.INGRESS))}
        verdict = Verdict("allow" if record["allow"] else "deny", sides["egress"], sides["ingress"])
        return {**verdict.to_json(), "summary": verdict.would()}

    def _endpoint_refs(self, src: str, dst: str) -> dict[str, str]:
        """``src_endpoint``/``dst_endpoint`` (``ns/name`` or host endpoint name) where the
        inventory knows the address; absent otherwise."""
        project = self.project
        out: dict[str, str] = {}
        if project is None:
            return out
        for key, ip in (("src_endpoint", src), ("dst_endpoint", dst)):
            owner = project.inventory.owner_of(ipaddress.ip_address(ip))
            if owner is not None:
                out[key] = owner.ref
        return out

    def _logs(self, engine: NativeEngine, src: str, dst: str, proto: int, sport: int | None, dport: int | None,
              h: Any) -> list[dict[str, Any]]:
        """The Log rules a flow passed: the verdict records count them (``logs`` per side) but do
        not name them, so the native engine explains the flow (``NativeEngine.evaluate``, the
        same rule tables; once per new flow that passed a Log rule, deduplicated). Both ends are given as addresses: the engine resolves them to their
        owners by the inventory's rule (``Inventory.owner_of``)."""
        if self.project is None:
            return []
        ends = [FlowEnd(None, ipaddress.ip_address(ip)) for ip in (src, dst)]
        icmp = proto in ICMP_PROTOCOLS
        flow = Flow(ends[0], ends[1], proto, sport, dport, int(h["icmp_type"]) if icmp else None,
                    int(h["icmp_code"]) if icmp else None)
        try:
            verdict = engine.evaluate(flow, "allow" if self.pod_allow else "deny", "allow" if self.host_allow else "deny")
        except ValueError:
            return []
        out = []
        for d in (verdict.egress, verdict.ingress):
            for tier, policy, rule in d.logs if d else []:
                out.append({"tier": tier, "policy": policy, "rule": rule})
        return out
