"""A packet's path through a host endpoint's hooks, as felix renders Calico host-endpoint policy.

Host-endpoint policy is judged in several places, each with its own policies
(``PolicySet.for_hook``), in the order a packet meets them:

1. ``untracked`` (raw PREROUTING/OUTPUT, before connection tracking): doNotTrack policies. A rule
   that allows ends host policy (the packet goes on untracked; stateless, so the reply needs a
   rule of its own), one that denies drops; no rule matching (end of tier included) goes on.
2. ``pre-dnat`` (mangle PREROUTING, inbound only, before a DNAT): preDNAT policies, matching the
   destination the packet had before DNAT. Allow ends host policy, deny drops, else go on.
3. ``normal`` (filter INPUT/OUTPUT) for traffic to or from the host itself: every other host
   policy, then the host's profiles; what nothing allows is denied (the host endpoint default,
   failsafe ports apart). Or ``forward`` (filter FORWARD) for traffic the host routes:
   applyOnForward policies; allow ends host policy, deny (a rule or a tier's end) drops, and
   with no policy applying it goes on.
4. The workload's own policy, for routed traffic to or from a local workload.

Each hook is judged by an evaluator over that hook's policy set (the reference evaluator or a
native engine per hook: ``HookSets``), so the two agree hook by hook as they do everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyclassify.flow import Decision, Flow, Verdict
from pyclassify.inventory import Inventory
from pyclassify.ir import Direction, Hook, PolicySet

Evaluator = Callable[..., Verdict]  # reference.evaluate's signature


class HookSets:
    """One policy set per hook (built once: a native evaluator compiles each once)."""

    def __init__(self, policy_set: PolicySet | None = None, sets: dict[Hook, PolicySet] | None = None) -> None:
        """Each hook's policies as ``policy_set`` says (``PolicySet.for_hook``), or ``sets``
        given hook by hook (a felix policy program's tiers, which it hands over per hook)."""
        if sets is None:
            assert policy_set is not None
            sets = {hook: policy_set.for_hook(hook) for hook in Hook}
        self.sets = sets

    def has_early(self) -> bool:
        """Whether any doNotTrack or preDNAT policy exists (else the path is the normal hook's)."""
        return bool(self.sets[Hook.UNTRACKED].policies or self.sets[Hook.PRE_DNAT].policies)


@dataclass(frozen=True)
class Step:
    hook: Hook
    decision: Decision | None  # what the hook's policy said (None: none applied)
    outcome: str  # "allow" (host policy done), "deny" (dropped here) or "continue"

    def to_json(self) -> dict[str, Any]:
        return {
            "hook": self.hook.value,
            "outcome": self.outcome,
            "decision": self.decision.to_json() if self.decision else None,
        }


@dataclass
class HostPath:
    verdict: str  # "allow" | "deny" | "unmatched" (untracked only: no rule matched)
    steps: list[Step] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "hooks": [s.to_json() for s in self.steps]}


def _outcome(hook: Hook, d: Decision | None) -> str:
    if d is None:
        return "continue"
    if d.reason == "rule" or (d.reason == "end-of-tier" and hook is Hook.FORWARD):
        return d.verdict
    return "continue"  # untracked and pre-DNAT chains never drop at a tier's end; all tiers passed


def forward_step(
    evaluate: Evaluator,
    forward: PolicySet,
    inventory: Inventory,
    flow: Flow,
    side: Direction,
    default_host: str = "deny",
) -> Step:
    """The forward hook of a host endpoint (``forward``: the set's ``for_hook(Hook.FORWARD)``)
    judging ``flow``, whose end at ``side`` is the host endpoint (the packet's address kept):
    its decision and outcome ("deny": dropped here, else "allow" or "continue"). The live
    forward loops judge the same (``NativeEngine.judge_via``)."""
    verdict = evaluate(forward, inventory, flow, default_pod="allow", default_host=default_host)
    d = verdict.ingress if side is Direction.INGRESS else verdict.egress
    return Step(Hook.FORWARD, d, _outcome(Hook.FORWARD, d))


def host_path(
    evaluate: Evaluator,
    sets: HookSets,
    inventory: Inventory,
    *,
    pre: Flow,
    post: Flow,
    side: Direction,
    host_traffic: bool,
    default_host: str = "deny",
    suppress_normal: bool = False,
    untracked_only: bool = False,
    then: Callable[[], tuple[str, Decision | None]] | None = None,
) -> HostPath:
    """The verdict of one packet crossing a host endpoint.

    ``pre``: the flow as the raw and mangle hooks see it (the destination before DNAT), and
    ``post`` as the filter hooks see it; in both the host endpoint is the endpoint at ``side``
    (ingress: the packet arrives on its interface; egress: it leaves by it). ``host_traffic``:
    to or from the host itself (else routed). ``then``: the workload stage of routed traffic
    (its verdict and decision); None allows once host policy passes. ``suppress_normal`` skips
    normal host policy (felix on a workload interface: the host's own interface judged it).
    ``untracked_only``: the untracked hook alone (XDP); "unmatched" when it decides nothing."""
    path = HostPath("allow")

    def decide(hook: Hook, flow: Flow) -> Decision | None:
        verdict = evaluate(sets.sets[hook], inventory, flow, default_pod="allow", default_host=default_host)
        return verdict.ingress if side is Direction.INGRESS else verdict.egress

    def step(hook: Hook, d: Decision | None, outcome: str) -> str:
        path.steps.append(Step(hook, d, outcome))
        return outcome

    d = decide(Hook.UNTRACKED, pre)
    outcome = step(Hook.UNTRACKED, d, _outcome(Hook.UNTRACKED, d))
    if outcome != "continue" or untracked_only:
        path.verdict = outcome if outcome != "continue" else "unmatched"
        return path
    done = False
    if side is Direction.INGRESS:
        d = decide(Hook.PRE_DNAT, pre)
        outcome = step(Hook.PRE_DNAT, d, _outcome(Hook.PRE_DNAT, d))
        if outcome == "deny":
            path.verdict = "deny"
            return path
        done = outcome == "allow"
    if not done and host_traffic and not suppress_normal:
        d = decide(Hook.NORMAL, post)
        verdict = d.verdict if d is not None else default_host
        step(Hook.NORMAL, d, verdict)
        path.verdict = verdict
        return path
    if not done and not host_traffic:
        forward = forward_step(evaluate, sets.sets[Hook.FORWARD], inventory, post, side, default_host)
        path.steps.append(forward)
        if forward.outcome == "deny":
            path.verdict = "deny"
            return path
    if then is not None:
        verdict, d = then()
        step(Hook.NORMAL, d, verdict)
        path.verdict = verdict
    return path
