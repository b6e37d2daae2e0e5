"""The enforcement daemon's orchestrator (``Enforcer``): it starts and stops its parts, each of
which owns its state: the packet loops and their threads (``enforce.loops``), the reload
(``enforce.reload``), the revocation of established connections (``enforce.revoke``), the
accounting of verdicts into the metrics and the flow log (``enforce.accounting``), the resync of
our iptables rules (``enforce.resync``), the file watcher (``enforce.watch``), the metrics
endpoint (``enforce.metrics``) and the host endpoints' hooks (``enforce.hooks``).

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
import threading
import time
from typing import Any

from pyclassify import domains
from pyclassify.budget import default_budget
from pyclassify.enforce.accounting import EventAccounting
from pyclassify.enforce.config import EnforceConfig
from pyclassify.enforce.errors import EXIT_IN_USE, EXIT_PREREQUISITE, EnforceError
from pyclassify.enforce.file_source import Loaded, PolicySource, SourceError
from pyclassify.enforce.hooks import ForwardQueues, HostHooks, forward_json
from pyclassify.enforce.iptables import (
    REJECT_MARK,
    IptablesError,
    Rules,
    installed_queues,
    listened_queues,
    open_stale,
    uninstall,
)
from pyclassify.enforce.log import FlowLog
from pyclassify.enforce.loops import HTTP_CONNECTIONS, QueueLoops
from pyclassify.enforce.metrics import Metrics
from pyclassify.enforce.node import NodeTraffic, dns_servers, in_cluster_api_server, resolve
from pyclassify.enforce.reload import PolicyReload, ReloadResult
from pyclassify.enforce.resync import RulesResync
from pyclassify.enforce.revoke import Revocation
from pyclassify.enforce.watch import Watcher
from pyclassify.engine import NativeEngine
from pyclassify.ir import Hook
from pyclassify.nfqueue import engine_capsule
from pyclassify.project import Project

#: Seconds between the waiting main thread's wakes: the longest a stop signal waits for it.
SIGNAL_WAKE = 0.2


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


class Enforcer:
    """The daemon's life: ``start()``, ``reload()``, ``stop()``; readiness and health."""

    def __init__(self, config: EnforceConfig) -> None:
        self.config = config
        d = config.default
        self.pod_allow = d != "deny"
        self.host_allow = d == "allow"
        self.log = FlowLog(config.log_stream, log_allowed=config.log_allowed)
        self.queues = QueueLoops(config, self.pod_allow, self.host_allow)
        self.bridge: Any = None
        self.metrics = Metrics(
            lambda: list(self.queues.loops),
            config.fail_open,
            source=lambda: self.source,
            lost_lines=lambda: self.log.lost,
            bridge=lambda: self.bridge,
            dns=lambda: (self.queues.dns_loop, self.domain_facts),
            http=lambda: (self.queues.main_loops, self.queues.http_loop),
            engine=lambda: self.engine,
            rule_labels=config.metrics_rule_labels,
        )
        self.rules: Rules | None = None
        #: The node's own traffic our chains let through ahead of the queue (``start()`` finds it).
        self.node = NodeTraffic()
        #: Set once ``pyclassify enforce --uninstall`` removed our rules while we ran: they stay out.
        self.uninstalled = False
        self.watcher: Watcher | None = None
        self.project: Project | None = None
        self.engine: NativeEngine | None = None
        #: The host endpoints' own hooks (doNotTrack, preDNAT, applyOnForward): their engines
        #: and the queues judged by them.
        self.hooks = HostHooks(self.queues.open_hook)
        self.accounting = EventAccounting(
            config,
            self.log,
            self.metrics,
            self.queues,
            self.hooks,
            lambda: self.project,
            lambda: self.engine,
            self.pod_allow,
            self.host_allow,
        )
        self.revocation = Revocation(
            config, self.log, self.metrics, self.pod_allow, self.host_allow, lambda: self.rules, self.hook_checks
        )
        self.reloader = PolicyReload(self)
        self.resync = RulesResync(config.resync, self.log, self.metrics, self.reloader.lock, self._leave_uninstalled)
        self._stop = threading.Event()
        #: Set by ``request_stop`` (a signal handler): a plain flag, not the event, whose lock
        #: the main thread may hold when the handler runs in it.
        self._stop_asked = False
        self._ready = False
        self.metrics_address: tuple[str, int] | None = None
        self.memory_budget: int | None = default_budget() if config.memory_budget == "auto" else config.memory_budget  # type: ignore[assignment]
        self.source: Any = PolicySource(list(config.paths), config.node, budget=self.memory_budget)
        # What DNS answers taught domain rules (fed by the DNS loop; kept across reloads).
        self.domain_facts = domains.new_facts()
        if config.kube is not None:
            from pyclassify.enforce.cluster_source import KubePolicySource
            from pyclassify.enforce.iptables import OWN_MARK

            # its connections to the API server carry our mark: let through whether or not we run
            self.source = KubePolicySource(
                *config.kube,
                node=config.node,
                budget=self.memory_budget,
                mark=OWN_MARK if config.install_rules and config.bridge is None else 0,
            )
        self.source.domains = self.domain_facts  # both sources put it on the inventories they build

    # --- start / stop ---

    def load_source(self) -> Loaded:
        """The policy source read and validated (``EnforceError`` naming every problem)."""
        try:
            return self.source.load()
        except SourceError as e:
            raise EnforceError("\n".join(e.errors)) from e

    def load(self) -> tuple[Project, NativeEngine]:
        loaded = self.load_source()
        return loaded.project, loaded.engine

    def start(self) -> None:
        cfg = self.config
        if cfg.reject and cfg.bridge is None and not cfg.install_rules:
            # a packet handed back with the reject mark and no REJECT rule would be queued again
            raise EnforceError("rejecting denied packets needs NFQUEUE with pyclassify's own iptables rules")
        if cfg.bridge is None and cfg.install_rules:
            self._prepare_node()
        self.project, self.engine = self.load()
        self._serve_metrics()
        self.accounting.follow(self.project)
        self.accounting.update_staged(self.project)
        if cfg.bridge is not None:
            self._start_bridge()
            return
        queues = self.queues
        try:
            queues.open_main(self.engine)
            early_queues = self.hooks.open_early(self.project, cfg.queues[1] + 1)
            dns_queue = queues.open_dns(self.project, self.engine, cfg.queues[1] + 1 + len(early_queues))
            http_queue = queues.open_http(
                self.project, self.engine, cfg.queues[1] + 1 + len(early_queues) + (dns_queue is not None)
            )
            forward_queues = self.open_forward_hooks(queues.next_queue())
            self.revocation.open()
            queues.run()
            if cfg.install_rules:
                try:
                    self.rules = Rules(
                        cfg.queues[0],
                        cfg.queues[1],
                        cfg.fail_open,
                        tuple(cfg.hooks),
                        cfg.ipv6,
                        reject=cfg.reject,
                        workload_prefix=cfg.workload_interface_prefix,
                        untracked_queue=early_queues.get(Hook.UNTRACKED),
                        pre_dnat_queue=early_queues.get(Hook.PRE_DNAT),
                        dns_queue=dns_queue,
                        http_queue=http_queue,
                        forward_queues=forward_queues,
                        node=self.node.with_failsafe(self.project.failsafe_config),
                    )
                    self.rules.install()  # in place of what another daemon left: adopted
                    if http_queue is not None:
                        queues.admit_http()
                except IptablesError as e:
                    self.rules = None
                    raise EnforceError(f"cannot install the iptables rules: {e}", EXIT_PREREQUISITE) from e
            self.accounting.start(self._stop)
            if self.rules is not None:
                self.resync.start(lambda: self.rules, self._stop)
            self._start_watch()
            # Every connection our chains would have queued is judged by this policy: those an
            # earlier daemon judged (killed, maybe in the middle of a revocation) and those no
            # daemon did (opened while none ran, or before our rules were there: they carry no
            # mark of ours). What it denies is cut now, not left established.
            revoked, deleted = self.revocation.revoke(engine_capsule(self.engine), every=self.rules is not None)
        except BaseException:
            self.stop()
            raise
        self._ready = True
        self.log.emit(
            "start",
            queues=list(range(cfg.queues[0], cfg.queues[1] + 1)),
            revoked=len(revoked),
            conntrack_deleted=deleted["deleted"],
            **self._start_fields(),
            **({"hook_queues": {h.value: q for h, q in early_queues.items()}} if early_queues else {}),
            **({"dns_queue": dns_queue} if dns_queue is not None else {}),
            **({"http_queue": http_queue} if http_queue is not None else {}),
            **({"forward_queues": forward_json(forward_queues)} if forward_queues else {}),
        )
        self.revocation.log_revoked(revoked, self.project)

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
                    "namespace): stop it first",
                    EXIT_IN_USE,
                )
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

    def open_forward_hooks(self, queue: int) -> ForwardQueues:
        """The forward hook's loops of the interfaces not judged yet (only our rules queue to
        them, and only on the FORWARD hook)."""
        cfg = self.config
        if "forward" not in cfg.hooks or not cfg.install_rules:
            return ()
        assert self.project is not None
        return self.hooks.open_forward(self.project, queue, reject_mark=REJECT_MARK if cfg.reject else 0)

    def _start_watch(self) -> None:
        cfg = self.config
        if cfg.kube is not None:
            self.source.watch(self.reload)
        elif cfg.watch:
            self.watcher = Watcher(cfg.paths, self.reloader.on_change, cfg.debounce)
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
            self.bridge = start_bridge(
                cfg.bridge,
                engine_capsule(self.engine),
                fail_open=cfg.fail_open,
                pod_allow=self.pod_allow,
                host_allow=self.host_allow,
                max_entries=cfg.conntrack_entries,
                # always: a reload may bring the first http rule
                http_connections=HTTP_CONNECTIONS,
                reject=cfg.reject,
            )
        except (BridgeError, ValueError, OSError) as e:
            self.metrics.close()
            code = (
                EXIT_IN_USE
                if "No such device" in str(e) or getattr(e, "errno", None) == errno.ENODEV
                else EXIT_PREREQUISITE
            )
            raise EnforceError(f"cannot start the bridge {cfg.bridge}: {e}", code) from e
        try:
            self._start_watch()
        except BaseException:
            self.stop()
            raise
        self._ready = True
        self.log.emit("start", bridge=cfg.bridge, **self._start_fields())

    def _start_fields(self) -> dict[str, Any]:
        assert self.project is not None
        inventory = self.project.inventory
        fields: dict[str, Any] = {
            "fail": "open" if self.config.fail_open else "closed",
            "policies": len(self.project.policy_set.policies),
            "staged_policies": len(self.project.policy_set.staged),
            "endpoints": len(inventory.endpoints),
        }
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
        if self._stop_asked or self._stop.is_set():
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
        for part in (self.queues, self.accounting, self.resync, self.source, self.watcher):
            check = getattr(part, "not_healthy", None)
            problem = check() if callable(check) else None
            if problem:
                problems.append(problem)
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
        self.queues.stop()
        self.resync.join()
        kept = self.rules is not None and self.config.on_stop == "keep" and not self.uninstalled
        if self.rules is not None and not kept:
            self._remove_rules()
        elif self.uninstalled:
            self._remove_rules()  # what --uninstall left for us to see
        self.rules = None
        self.queues.close()
        self.accounting.join()
        self.accounting.drain()
        self.metrics.close()
        self.revocation.close()
        if self.queues.loops:
            self.log.emit("stop", stats=self.queues.stats(), rules="kept" if kept else "removed")
        self.queues.clear()

    def _remove_rules(self) -> None:
        try:
            uninstall(self.config.ipv6, leave_mark=False)
        except IptablesError as e:
            self.log.emit("rules-remove-failed", error=str(e))

    def wait(self, timeout: float | None = None) -> bool:
        """Until a stop is asked (or ``timeout`` seconds); True once it is. Waits in short steps:
        the kernel may hand SIGTERM to any of our threads, and Python runs its handler only when
        the main thread next runs, which a wait without a timeout would never do."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stop_asked:
            step = SIGNAL_WAKE if deadline is None else min(SIGNAL_WAKE, deadline - time.monotonic())
            if step <= 0 or self._stop.wait(step):
                break
        if self._stop_asked:
            self._stop.set()
        return self._stop.is_set()

    def request_stop(self) -> None:
        """Asks for a stop; safe in a signal handler (it takes no lock): ``wait`` sees it
        within ``SIGNAL_WAKE`` seconds."""
        self._stop_asked = True

    def stats(self) -> dict[str, int]:
        """Every loop's counters, summed."""
        return self.queues.stats()

    # --- reload, and what it asks of the daemon ---

    def reload(self, since: float | None = None) -> ReloadResult:
        """``PolicyReload.reload``: the cluster source's callback, and the tests'."""
        return self.reloader.reload(since)

    def hook_checks(self) -> dict[str, Any]:
        """What revalidation asks of the host endpoints' hooks (with our rules: their marks)."""
        if self.rules is None or self.project is None:
            return {}
        return {
            "pre_dnat": self.hooks.pre_dnat_check(),
            "forward": self.hooks.forward_checks(self.project, self.rules.forward_queues),
        }

    def _leave_uninstalled(self) -> None:
        """Our rules were removed by an explicit uninstall while we run (the resync found it, with
        the reload lock held): they stay out (what a repair racing with the uninstall put back is
        removed again), we say so, and are not ready; the loops keep their queues until the stop,
        which removes the mark the uninstall left."""
        assert self.rules is not None
        self.uninstalled = True
        self.rules.remove(keep_mark=True)
        self.rules = None
        self.log.emit("rules-uninstalled")
