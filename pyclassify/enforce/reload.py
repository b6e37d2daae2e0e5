"""The reload of the enforcement daemon's policy: a change (a file, a cluster object) is loaded
and validated, applied to the running engine as a delta (a new snapshot beside the old one),
swapped into every loop at a batch boundary, and what the new policy denies is revoked. An
invalid object is rejected alone (its last good version stays); a change that does not compile
is rejected whole, and the engine in force stays."""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pyclassify import domains, httprules
from pyclassify.budget import OverBudget
from pyclassify.enforce.errors import EnforceError
from pyclassify.enforce.hooks import forward_json
from pyclassify.enforce.iptables import IptablesError
from pyclassify.ir import Hook
from pyclassify.nfqueue import engine_capsule
from pyclassify.project import Project

if TYPE_CHECKING:
    from pyclassify.enforce.accounting import EventAccounting
    from pyclassify.enforce.config import EnforceConfig
    from pyclassify.enforce.file_source import Loaded
    from pyclassify.enforce.hooks import ForwardQueues, HostHooks
    from pyclassify.enforce.iptables import Rules
    from pyclassify.enforce.log import FlowLog
    from pyclassify.enforce.loops import QueueLoops
    from pyclassify.enforce.metrics import Metrics
    from pyclassify.enforce.node import NodeTraffic
    from pyclassify.enforce.revoke import Revocation
    from pyclassify.engine import NativeEngine


class ReloadedDaemon(Protocol):
    """What a reload reads and replaces of the daemon (``Enforcer``): declared here, so the
    reload depends on the parts it works on and not on the daemon that holds them."""

    config: EnforceConfig
    project: Project | None
    engine: NativeEngine | None
    rules: Rules | None
    bridge: Any
    queues: QueueLoops
    hooks: HostHooks
    node: NodeTraffic
    log: FlowLog
    metrics: Metrics
    accounting: EventAccounting
    revocation: Revocation

    def load_source(self) -> Loaded: ...

    def open_forward_hooks(self, queue: int) -> ForwardQueues: ...


@dataclass
class ReloadResult:
    ok: bool
    errors: list[str] = field(default_factory=list)
    revoked: int = 0
    deleted: int = 0
    seconds: float = 0.0


class PolicyReload:
    """Owns the reload lock (one reload at a time, and no check of our rules beside one) and the
    counts of reloads applied and rejected; works on the parts of ``daemon``."""

    def __init__(self, daemon: ReloadedDaemon) -> None:
        self.daemon = daemon
        self.lock = threading.Lock()
        self.reloads = 0
        self.rejected = 0

    def on_change(self, first_event: float) -> None:
        """The watcher's callback (``first_event``: when the change was first seen)."""
        try:
            self.reload(first_event)
        except Exception as e:  # noqa: BLE001 - a bug in a reload is said, and the daemon goes on
            self.daemon.metrics.reloads.labels("failure").inc()
            self.daemon.log.emit(
                "reload-failed",
                error=f"{type(e).__name__}: {e}",
                where=traceback.format_exc(limit=-3).splitlines()[-6:],
            )

    def reject(self, errors: list[str]) -> ReloadResult:
        """The update is rejected whole: counted and said."""
        self.daemon.metrics.reloads.labels("failure").inc()
        self.rejected += 1
        self.daemon.log.emit("reload-rejected", errors=errors)
        return ReloadResult(False, errors)

    def reload(self, since: float | None = None) -> ReloadResult:
        """Validate, apply the change to the running engine as a delta (a new snapshot beside the
        old one) and swap; revoke what the new policy denies. An invalid object is rejected
        alone (its last good version stays); a change that does not compile is rejected whole."""
        d = self.daemon
        metrics, log, accounting = d.metrics, d.log, d.accounting
        with self.lock:
            t0 = time.monotonic() if since is None else since
            t_load = time.monotonic()
            try:
                loaded = d.load_source()
            except EnforceError as e:
                return self.reject(str(e).splitlines())
            except OverBudget as e:  # before the engine built anything: the policy in force stays
                return self.reject([str(e)])
            except Exception as e:  # noqa: BLE001 - compile errors reject the update, never the daemon
                return self.reject([f"{type(e).__name__}: {e}"])
            t_loaded = time.monotonic()
            project, engine = loaded.project, loaded.engine
            errors = [
                *loaded.rejected.values(),
                *(
                    f"{f}: {loaded.kept.get(f, 'cannot be read or parsed')}: its last good objects stay in force"
                    for f in loaded.broken_files
                ),
            ]
            if errors:
                self.rejected += 1
                metrics.reloads.labels("partial" if loaded.changed else "failure").inc()
                log.emit("reload-rejected", partial=loaded.changed > 0, errors=errors)
            old = d.project.policy_set if d.project is not None else None
            if loaded.changed == 0:
                # Nothing the main engine holds changed (or every change was rejected); what is
                # staged, or a doNotTrack/preDNAT policy (the early hooks' engines), may have.
                if old is not None and (
                    project.policy_set.staged != old.staged or project.policy_set.early != old.early
                ):
                    with accounting.lock:
                        accounting.drain_locked()
                        d.project = project
                        accounting.update_staged(project)
                        missing = self._swap_early(project)
                        log.forget()
                    # what a changed pre-DNAT policy now denies is cut (the workload's verdicts stand);
                    # a staged change alone judges nothing again
                    revoked: list[Any] = []
                    if d.engine is not None and project.policy_set.early != old.early:
                        revoked, _ = d.revocation.revoke(engine_capsule(d.engine))
                    metrics.revoked.inc(len(revoked))
                    log.emit(
                        "reload",
                        policies=len(project.policy_set.policies),
                        revoked=len(revoked),
                        staged_policies=len(project.policy_set.staged),
                        changed_objects=0,
                        **({"hooks_need_restart": missing} if missing else {}),
                    )
                    d.revocation.log_revoked(revoked, d.project)
                return ReloadResult(not errors, errors, 0, 0, time.monotonic() - t0)
            capsule = engine_capsule(engine)
            t_swap = time.monotonic()
            count = 0
            # Events judged by the old engine are named with the old tables: drained first, and
            # none drained between the loops' swap and the new engine's naming them.
            with accounting.lock:
                accounting.drain_locked()
                for loop in d.queues.loops:
                    if loop.queue not in d.hooks.hook_of_queue:
                        loop.swap(capsule, False)  # no engine-side tracker on this path: the kernel's is revalidated
                if d.bridge is not None:
                    count += d.bridge.swap(capsule)  # revokes in the bridge's own conntrack
                d.project, d.engine = project, engine
            missing = self._swap_early(project)
            self._follow_node(project)
            accounting.follow(project)
            with accounting.lock:
                accounting.update_staged(project)
            applied = time.monotonic()
            revoked, deleted = d.revocation.revoke(capsule)
            count += len(revoked)
            done = time.monotonic()
            metrics.reloads.labels("success").inc()
            metrics.revalidations.inc()
            metrics.revoked.inc(count)
            for k, v in deleted.items():
                metrics.ct_deleted.labels(k).inc(v)
            metrics.revalidation_seconds.observe(done - t_swap)
            metrics.apply_seconds.observe(applied - t0)
            # parse: the load's time less its build and keep (so the parts add up to the whole)
            stages = {
                "wait": t_load - t0,
                "parse": t_loaded - t_load - loaded.build_s - loaded.keep_s,
                "build": loaded.build_s,
                "keep": loaded.keep_s,
                "swap": applied - t_loaded,
            }
            for stage, seconds in stages.items():
                metrics.apply_stage_seconds.labels(stage).observe(seconds)
            self.reloads += 1
            log.forget()
            log.emit(
                "reload",
                policies=len(project.policy_set.policies),
                revoked=count,
                staged_policies=len(project.policy_set.staged),
                conntrack_deleted=deleted["deleted"],
                apply_ms=round((applied - t0) * 1000, 3),
                revalidate_ms=round((done - t_swap) * 1000, 3),
                changed_objects=loaded.changed,
                stages_ms={k: round(v * 1000, 3) for k, v in stages.items()},
                engine_builds=engine.state.full_builds,
                engine_deltas=engine.state.deltas,
                # a hook first needed now that could not be added: said, not silently unenforced
                **({"hooks_need_restart": missing} if missing else {}),
            )
            d.revocation.log_revoked(revoked, d.project)
            return ReloadResult(True, [], count, deleted["deleted"], done - t0)

    def _swap_early(self, project: Project) -> list[str]:
        """The early hooks' engines follow the project (a delta each) into their loops. A hook
        (or the DNS queue) the project needs for the first time gets its loop and chains now;
        returns the ones that could not be added (the bridge, or no rules of ours)."""
        d = self.daemon
        queues = d.queues
        d.hooks.follow(project, queues.loops)
        new, wants_forward = d.hooks.wants(project)
        wants_forward = wants_forward and "forward" in d.config.hooks
        wants_dns = queues.dns_loop is None and domains.has_domain_rules(project.policy_set)
        wants_http = queues.http_loop is None and httprules.has_http_rules(project.policy_set)
        if not new and not wants_dns and not wants_http and not wants_forward:
            return []
        if d.bridge is not None or d.rules is None:
            return (
                [h.value for h in new]
                + (["dns"] if wants_dns else [])
                + (["http"] if wants_http else [])
                + (["forward"] if wants_forward else [])
            )
        d.project = project  # the loops open on this project's policy
        assert d.engine is not None
        taken = (loop.queue for loop in (queues.dns_loop, queues.http_loop) if loop is not None)
        first = max([d.config.queues[1], *d.hooks.hook_of_queue, *taken]) + 1
        opened = len(queues.loops)
        early = d.hooks.open_early(project, first, only=new)
        dns_queue = queues.open_dns(project, d.engine, first + len(early)) if wants_dns else None
        http_queue = (
            queues.open_http(project, d.engine, first + len(early) + (dns_queue is not None)) if wants_http else None
        )
        forward = d.open_forward_hooks(queues.next_queue())
        queues.run(since=opened)
        d.rules.extend(early.get(Hook.UNTRACKED), early.get(Hook.PRE_DNAT), dns_queue, http_queue, forward)
        if http_queue is not None:
            queues.admit_http()
        d.log.emit(
            "hooks-added",
            hook_queues={h.value: q for h, q in early.items()},
            **({"dns_queue": dns_queue} if dns_queue is not None else {}),
            **({"http_queue": http_queue} if http_queue is not None else {}),
            **({"forward_queues": forward_json(forward)} if forward else {}),
        )
        return []

    def _follow_node(self, project: Project) -> None:
        """The failsafe ports follow the manifests' FelixConfiguration into our rules."""
        d = self.daemon
        if d.rules is None:
            return
        try:
            if d.rules.follow_node(d.node.with_failsafe(project.failsafe_config)):
                d.log.emit("rules-updated", reason="failsafe ports")
        except IptablesError as e:
            d.log.emit("rules-update-failed", error=str(e))
