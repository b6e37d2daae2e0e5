"""The host endpoints' own hooks in the enforce daemon, where Felix renders host-endpoint policy
(``pyclassify.hostpath`` is the model): doNotTrack policy in the raw table, preDNAT policy in
mangle PREROUTING, applyOnForward policy in filter FORWARD per host endpoint interface. Each hook
is judged by an engine holding that hook's policies alone (``PolicySet.for_hook``), in NFQUEUE
loops of its own; what a rule there lets on goes back to the hook with the hook's mark
(``pyclassify.enforce.iptables``). ``HostHooks`` keeps those engines and loops, brings them up
to date on a reload, and says what a revalidation asks of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyclassify.enforce.iptables import (
    FORWARD_IN_MARK,
    FORWARD_OUT_MARK,
    PRE_DNAT_CTMARK,
    PRE_DNAT_HOST_CTMARK,
    PRE_DNAT_MARK,
    UNTRACKED_MARK,
    forward_ctmark,
)
from pyclassify.engine import NativeEngine
from pyclassify.inventory import Endpoint
from pyclassify.ir import Direction, EndpointKind, Hook
from pyclassify.nfqueue import ForwardCheck, PreDnatCheck, engine_capsule
from pyclassify.project import Project

#: The early hooks with loops of their own, and the mark of what a rule there allowed.
EARLY_MARKS = {Hook.UNTRACKED: UNTRACKED_MARK, Hook.PRE_DNAT: PRE_DNAT_MARK}
#: The forward hook's loops, per side: the side it judges and the mark of what it let on.
FORWARD_SIDES = ((Direction.INGRESS, FORWARD_IN_MARK), (Direction.EGRESS, FORWARD_OUT_MARK))

#: Opens a loop judged by an engine on a queue number, with ``NfQueue`` options (the daemon's:
#: its configuration, its error for a queue it cannot bind, its list of loops).
OpenLoop = Callable[..., Any]
#: Interfaces judged by their forward hook: (interface, ingress queue, egress queue) each.
ForwardQueues = tuple[tuple[str, int, int], ...]


def early_hooks(project: Project) -> list[Hook]:
    """The early hooks ``project`` has policy for (doNotTrack, preDNAT)."""
    return [h for h in EARLY_MARKS if any(p.hook is h for p in project.policy_set.early)]


def forward_endpoints(project: Project) -> dict[str, Endpoint]:
    """The host endpoints whose interfaces this node judges by their forward hook, by interface
    (``*``: an all-interfaces one, for every interface no other names that is not a workload's):
    those it enforces, when there is applyOnForward policy at all; the first by name where two
    name one interface."""
    if not project.policy_set.for_hook(Hook.FORWARD).policies:
        return {}
    inventory = project.inventory
    hosts = [
        (e.interface, e)
        for e in inventory.endpoints
        if e.kind is EndpointKind.HOST and e.interface and inventory.enforces(e)
    ]
    out: dict[str, Endpoint] = {}
    for interface, e in sorted(hosts, key=lambda h: h[1].name):
        out.setdefault(interface, e)
    return dict(sorted(out.items()))


def forward_json(queues: ForwardQueues) -> dict[str, dict[str, int]]:
    """The forward hook's queues as the log says them: ``{interface: {"in": q, "out": q}}``."""
    return {iface: {"in": q_in, "out": q_out} for iface, q_in, q_out in queues}


class HostHooks:
    """The hooks' engines (one per hook, that hook's policies) and the queues their loops judge."""

    def __init__(self, open_loop: OpenLoop) -> None:
        self._open_loop = open_loop
        self.engines: dict[Hook, NativeEngine] = {}
        self.hook_of_queue: dict[int, Hook] = {}
        #: The forward hook's queues: the host endpoint interface each judges, and the side.
        self.forward_of_queue: dict[int, tuple[str, Direction]] = {}
        self._heps: tuple[Project | None, dict[str, Endpoint]] = (None, {})

    def _forward_endpoints(self, project: Project) -> dict[str, Endpoint]:
        """``forward_endpoints(project)``, worked out once per project (a reload asks it thrice)."""
        if self._heps[0] is not project:
            self._heps = (project, forward_endpoints(project))
        return self._heps[1]

    def engine_of(self, queue: int) -> NativeEngine | None:
        """The engine that judges ``queue`` (None: not a hook's)."""
        hook = self.hook_of_queue.get(queue)
        return None if hook is None else self.engines[hook]

    def interface_of(self, queue: int) -> str | None:
        """The host endpoint interface a forward hook's ``queue`` judges (None: not one)."""
        found = self.forward_of_queue.get(queue)
        return None if found is None else found[0]

    def _hook_engine(self, project: Project, hook: Hook) -> NativeEngine:
        engine = self.engines.get(hook)
        if engine is None:
            engine = self.engines[hook] = NativeEngine(project.policy_set.for_hook(hook), project.inventory)
        return engine

    def open_early(self, project: Project, queue: int, only: list[Hook] | None = None) -> dict[Hook, int]:
        """A loop per early hook the policy has (``only`` these; from queue number ``queue``
        on); what a rule there allows comes back to the hook with its mark."""
        out = {}
        for hook in early_hooks(project) if only is None else only:
            # no policy deciding is no verdict here: the packet goes on to the next hook
            self._open_loop(
                self._hook_engine(project, hook), queue, pod_allow=True, host_allow=True, accept_mark=EARLY_MARKS[hook]
            )
            self.hook_of_queue[queue] = hook
            out[hook] = queue
            queue += 1
        return out

    def open_forward(self, project: Project, queue: int, reject_mark: int = 0) -> ForwardQueues:
        """Two loops per host endpoint interface not judged yet (``forward_endpoints``), from
        queue number ``queue`` on: the connections the host routes in by it and those it routes
        out by it, each judged by applyOnForward policy with the host endpoint as the subject of
        that side. What the hook lets on goes back to the chain with its mark, to meet the
        workload's own policy; no policy deciding is no verdict here."""
        judged = {iface for iface, _ in self.forward_of_queue.values()}
        wanted = {i: e for i, e in self._forward_endpoints(project).items() if i not in judged}
        if not wanted:
            return ()
        engine = self._hook_engine(project, Hook.FORWARD)
        out = []
        for iface, hep in wanted.items():
            queues = (queue, queue + 1)
            for (side, mark), q in zip(FORWARD_SIDES, queues):
                self._open_loop(
                    engine,
                    q,
                    pod_allow=True,
                    host_allow=True,
                    accept_mark=mark,
                    repeat_accepted=True,
                    reject_mark=reject_mark,
                    via=(engine.endpoint_index(hep), side is Direction.INGRESS),
                )
                self.hook_of_queue[q] = Hook.FORWARD
                self.forward_of_queue[q] = (iface, side)
            out.append((iface, *queues))
            queue += 2
        return tuple(out)

    def wants(self, project: Project) -> tuple[list[Hook], bool]:
        """What ``project`` needs that has no loop yet: early hooks, and host endpoint
        interfaces to judge by their forward hook."""
        judged = {iface for iface, _ in self.forward_of_queue.values()}
        return (
            [h for h in early_hooks(project) if h not in self.engines],
            bool(set(self._forward_endpoints(project)) - judged),
        )

    def follow(self, project: Project, loops: list[Any]) -> None:
        """The engines follow ``project`` (a delta each) into their loops; a forward loop is
        given its interface's host endpoint now (None: gone, so no host policy drops there)."""
        self.engines = {
            hook: e.update(project.policy_set.for_hook(hook), project.inventory) for hook, e in self.engines.items()
        }
        heps = self._forward_endpoints(project)
        for loop in loops:
            hook = self.hook_of_queue.get(loop.queue)
            if hook is None:
                continue
            engine = self.engines[hook]
            if hook is Hook.FORWARD:
                hep = heps.get(self.forward_of_queue[loop.queue][0])
                loop.swap(
                    engine_capsule(engine), False, via_endpoint=None if hep is None else engine.endpoint_index(hep)
                )
            else:
                loop.swap(engine_capsule(engine), False)

    def pre_dnat_check(self) -> PreDnatCheck | None:
        """What revalidation asks of the pre-DNAT hook (when it has a loop)."""
        engine = self.engines.get(Hook.PRE_DNAT)
        return None if engine is None else PreDnatCheck(engine_capsule(engine), PRE_DNAT_CTMARK, PRE_DNAT_HOST_CTMARK)

    def forward_checks(self, project: Project, queues: ForwardQueues) -> tuple[ForwardCheck, ...]:
        """What revalidation asks of the forward hooks: for each interface side with a slot in
        our rules (``queues``, in their order), the connections it let on, judged by it now."""
        engine = self.engines.get(Hook.FORWARD)
        if engine is None:
            return ()
        heps = self._forward_endpoints(project)
        capsule = engine_capsule(engine)
        checks = []
        for index, (iface, _, _) in enumerate(queues):
            hep = heps.get(iface)
            for side, _ in FORWARD_SIDES:
                slot = forward_ctmark(index, side is Direction.INGRESS)
                if slot is not None:
                    checks.append(
                        ForwardCheck(
                            capsule,
                            None if hep is None else engine.endpoint_index(hep),
                            side is Direction.INGRESS,
                            *slot,
                        )
                    )
        return tuple(checks)
