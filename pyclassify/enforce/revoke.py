"""Revocation of established connections: the kernel's connection table judged again by a new
engine. A connection our rules queued that the policy now denies is marked revoked (the first
rule of our chains drops its packets, both ways) and its entry deleted; a revoked one allowed
again is unmarked."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from pyclassify.enforce.iptables import JUDGED_CTMARK, REVOKED_CTMARK, Rules
from pyclassify.enforce.log import FlowLog, address, endpoint_refs
from pyclassify.enforce.metrics import Metrics
from pyclassify.enforce.node import LocalAddresses
from pyclassify.kinds.common import PROTOCOL_NAMES as PROTOS  # the flow log names protocols as output does
from pyclassify.nfqueue import kernel_conntrack, kernel_revalidate
from pyclassify.project import Project

if TYPE_CHECKING:
    from pyclassify.enforce.config import EnforceConfig


class Revocation:
    """Owns the daemon's socket to the kernel's connection table (``open()`` once the loops are
    bound)."""

    def __init__(
        self,
        config: EnforceConfig,
        log: FlowLog,
        metrics: Metrics,
        pod_allow: bool,
        host_allow: bool,
        rules: Callable[[], Rules | None],
        hook_checks: Callable[[], dict[str, Any]],
    ) -> None:
        self.config = config
        self.log = log
        self.metrics = metrics
        self.pod_allow = pod_allow
        self.host_allow = host_allow
        self.current_rules = rules
        self.hook_checks = hook_checks
        self.ctnl: Any = None

    def open(self) -> None:
        self.ctnl = kernel_conntrack()

    def close(self) -> None:
        if self.ctnl is not None:
            self.ctnl.close()
            self.ctnl = None

    def revoke(self, capsule: Any, every: bool = False) -> tuple[list[Any], dict[str, int]]:
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
        rules = self.current_rules()
        if every and rules is not None:
            node, local, hooks = rules.node, LocalAddresses.read(), tuple(self.config.hooks)
            unmarked = lambda judged, original: node.unqueued(judged, original, local, hooks)  # noqa: E731
        try:
            _, revoked, restored, adopted = kernel_revalidate(
                self.ctnl,
                capsule,
                mark=JUDGED_CTMARK,
                revoked_mark=REVOKED_CTMARK,
                pod_allow=self.pod_allow,
                host_allow=self.host_allow,
                ipv6=self.config.ipv6,
                unmarked=unmarked,
                **self.hook_checks(),
            )
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

    def log_revoked(self, revoked: list[Any], project: Project | None) -> None:
        """One ``revoke`` line per revoked connection."""
        for src, dst, sport, dport, proto, ver in revoked:
            a, b = address(src, ver), address(dst, ver)
            self.log.emit(
                "revoke",
                src=a,
                dst=b,
                proto=PROTOS.get(proto, proto),
                sport=sport,
                dport=dport,
                **endpoint_refs(project, a, b),
            )
