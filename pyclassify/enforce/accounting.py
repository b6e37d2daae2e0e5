"""Accounting of the loops' events: the verdict records the loops queue up are drained, named
by the engine that judged them and counted into the metrics (by tier, policy and rule), judged
beside by the staged policies, and written to the flow log (denied flows, Log rules, with
``--log-allowed`` every flow)."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from pyclassify import httprules
from pyclassify.batch import HEADER_DTYPE, VERDICT_DTYPE
from pyclassify.enforce.hooks import HostHooks
from pyclassify.enforce.log import FlowLog, address, endpoint_refs
from pyclassify.enforce.loops import QueueLoops
from pyclassify.enforce.metrics import Metrics
from pyclassify.engine import PACKET_POLICY, NativeEngine
from pyclassify.flow import Flow, FlowEnd, Verdict
from pyclassify.ir import Action, Direction, Hook
from pyclassify.kinds.common import ICMP_PROTOCOLS
from pyclassify.kinds.common import PROTOCOL_NAMES as PROTOS  # the flow log names protocols as output does
from pyclassify.project import Project

if TYPE_CHECKING:
    from pyclassify.enforce.config import EnforceConfig


def has_log_rules(project: Project) -> bool:
    for policy in project.policy_set.policies:
        for direction in (Direction.INGRESS, Direction.EGRESS):
            if any(r.action == Action.LOG for r in policy.rules(direction)):
                return True
    return False


class EventAccounting:
    """Owns the drain (its thread, and ``lock``: events judged by one engine are named by it, so
    a reload swaps engines with the lock held and the events before drained) and the staged
    policies' engine (``Project.staged``: judges each new connection beside the real verdict,
    for the log; never decides a packet; None when nothing is staged)."""

    def __init__(
        self,
        config: EnforceConfig,
        log: FlowLog,
        metrics: Metrics,
        queues: QueueLoops,
        hooks: HostHooks,
        project: Callable[[], Project | None],
        engine: Callable[[], NativeEngine | None],
        pod_allow: bool,
        host_allow: bool,
    ) -> None:
        self.config = config
        self.log = log
        self.metrics = metrics
        self.queues = queues
        self.hooks = hooks
        self.current_project = project
        self.current_engine = engine
        self.pod_allow = pod_allow
        self.host_allow = host_allow
        self.lock = threading.Lock()
        self.staged: NativeEngine | None = None
        #: The policy in force has Log rules (their flows are explained for the log).
        self.has_log = False
        self.thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        """Drains every 0.2 s until ``stop`` is set."""
        self.thread = threading.Thread(target=self._drain_loop, args=(stop,), name="pyclassify-events", daemon=True)
        self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join(timeout=5)
            self.thread = None

    def not_healthy(self) -> str | None:
        return f"{self.thread.name} stopped" if self.thread is not None and not self.thread.is_alive() else None

    def follow(self, project: Project) -> None:
        """What the flow log explains follows the policy in force."""
        self.has_log = has_log_rules(project)

    def update_staged(self, project: Project) -> None:
        """The staged preview follows the project: built, or brought up to date by a delta."""
        view = project.staged()
        if view is None:
            self.staged = None
        elif self.staged is None:
            self.staged = NativeEngine(view.policy_set, view.inventory)
        else:
            self.staged = self.staged.update(view.policy_set, view.inventory)

    def _drain_loop(self, stop: threading.Event) -> None:
        while not stop.wait(0.2):
            self.drain()

    def drain(self) -> None:
        with self.lock:
            self.drain_locked()

    def drain_locked(self) -> None:
        """``drain()`` with ``lock`` held."""
        engine = self.current_engine()
        if engine is None:
            return
        for loop in self.queues.loops:
            hb, vb, n = loop.drain_events()
            if n:
                hook = self.hooks.hook_of_queue.get(loop.queue)
                self.account(
                    loop.queue,
                    self.hooks.engine_of(loop.queue) or engine,
                    np.frombuffer(hb, HEADER_DTYPE),
                    np.frombuffer(vb, VERDICT_DTYPE),
                    hook,
                )

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

    def account(self, queue: int, engine: NativeEngine, h: Any, v: Any, hook: Hook | None = None) -> None:
        """Counts and logs one drained batch of queue ``queue`` (headers ``h``, verdicts ``v``),
        judged by ``engine``."""
        decisions: dict[tuple[str, tuple[int, ...]], Any] = {}
        for direction, name in ((Direction.EGRESS, "egress"), (Direction.INGRESS, "ingress")):
            side = v[name]
            present = side["present"] != 0
            if not present.any():
                continue
            keys = np.stack(
                [
                    side["tier"],
                    side["source_kind"].astype(np.int32),
                    side["source"],
                    side["rule"],
                    side["allow"].astype(np.int32),
                    side["reason"].astype(np.int32),
                ],
                axis=1,
            )[present]
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
            staged = self.staged.judge(
                h, None, None, "allow" if self.pod_allow else "deny", "allow" if self.host_allow else "deny"
            )
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
            if allowed and (hook is not None or not (self.has_log or self.log.log_allowed or staged_differs)):
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
            fields = dict(
                queue=queue, src=src, dst=dst, proto=PROTOS.get(proto, proto), sport=sport, dport=dport, **sides
            )
            fields.update(endpoint_refs(self.current_project(), src, dst))
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
            logs = self._logs(engine, src, dst, proto, sport, dport, h[i]) if self.has_log and passed_log else []
            if logs:
                self.log.emit("log", logs=logs, **fields)
            elif self.log.log_allowed or staged_differs:
                self.log.emit("allow", **fields)

    def _staged_json(self, record: Any) -> dict[str, Any]:
        """A connection's staged verdict for the log: as ``explain --json`` prints one, plus
        ``summary`` ("would deny by StagedNetworkPolicy/ns/name rule 2 (ingress)")."""
        assert self.staged is not None
        sides = {
            name: self.staged.side_decision(record[name], d)
            for name, d in (("egress", Direction.EGRESS), ("ingress", Direction.INGRESS))
        }
        verdict = Verdict("allow" if record["allow"] else "deny", sides["egress"], sides["ingress"])
        return {**verdict.to_json(), "summary": verdict.would()}

    def _logs(
        self, engine: NativeEngine, src: str, dst: str, proto: int, sport: int | None, dport: int | None, h: Any
    ) -> list[dict[str, Any]]:
        """The Log rules a flow passed: the verdict records count them (``logs`` per side) but do
        not name them, so the native engine explains the flow (``NativeEngine.evaluate``, the
        same rule tables; once per new flow that passed a Log rule, deduplicated). Both ends are given as addresses: the engine resolves them to their
        owners by the inventory's rule (``Inventory.owner_of``)."""
        if self.current_project() is None:
            return []
        ends = [FlowEnd(None, ipaddress.ip_address(ip)) for ip in (src, dst)]
        icmp = proto in ICMP_PROTOCOLS
        flow = Flow(
            ends[0],
            ends[1],
            proto,
            sport,
            dport,
            int(h["icmp_type"]) if icmp else None,
            int(h["icmp_code"]) if icmp else None,
        )
        try:
            verdict = engine.evaluate(
                flow, "allow" if self.pod_allow else "deny", "allow" if self.host_allow else "deny"
            )
        except ValueError:
            return []
        out = []
        for d in (verdict.egress, verdict.ingress):
            for tier, policy, rule in d.logs if d else []:
                out.append({"tier": tier, "policy": policy, "rule": rule})
        return out
