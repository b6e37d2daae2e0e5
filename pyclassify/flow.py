"""The flow vocabulary both evaluators speak: a flow and its ends, and the verdict on it.

``pyclassify.reference`` (the Python oracle) and ``pyclassify.engine`` (the native engine's
facade) both take a ``Flow`` and answer a ``Verdict`` of two ``Decision``s, one per direction;
the labels as policy sees them (an endpoint's own plus Calico's, a namespace's, a service
account's) are defined here too, so that neither evaluator imports the other.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from pyclassify.inventory import Endpoint, Inventory, IPAddress
from pyclassify.ir import EndpointKind

__all__ = [
    "VERDICTS",
    "Decision",
    "Flow",
    "FlowEnd",
    "HttpRequest",
    "Verdict",
    "endpoint_labels",
    "namespace_labels",
    "service_account_labels",
]

VERDICTS = ("allow", "deny")


@dataclass(frozen=True)
class FlowEnd:
    """One end of a flow: a known endpoint, an address, or both (an endpoint without IPs is
    fine: pre-deployment analysis of manifests)."""

    endpoint: Endpoint | None = None
    ip: IPAddress | None = None

    def __post_init__(self) -> None:
        if self.endpoint is None and self.ip is None:
            raise ValueError("a flow end needs an endpoint or an IP address")
        if isinstance(self.ip, str):
            object.__setattr__(self, "ip", ipaddress.ip_address(self.ip))

    @property
    def address(self) -> IPAddress | None:
        if self.ip is not None:
            return self.ip
        if self.endpoint is not None and self.endpoint.ips:
            return self.endpoint.ips[0]
        return None


@dataclass(frozen=True)
class HttpRequest:
    """An HTTP/1.x request a connection carries, as the native reader parses it: the path is as
    sent with the query cut (neither percent-decoded nor normalized)."""

    method: str
    path: str
    host: str | None = None

    @classmethod
    def parse(cls, text: str) -> HttpRequest:
        """``"GET /path"`` (optionally ``" host"`` after it), as ``explain --request`` takes it."""
        parts = text.split()
        if len(parts) not in (2, 3) or not parts[1].startswith("/"):
            raise ValueError(f"{text!r}: want METHOD /PATH [HOST], e.g. 'GET /api/v1'")
        return cls(parts[0], parts[1].split("?", 1)[0], parts[2] if len(parts) == 3 else None)

    def __str__(self) -> str:
        return f"{self.method} {self.path}" + (f" (Host {self.host})" if self.host else "")


@dataclass(frozen=True)
class Flow:
    src: FlowEnd
    dst: FlowEnd
    protocol: int
    sport: int | None = None
    dport: int | None = None
    icmp_type: int | None = None
    icmp_code: int | None = None
    #: when the packet was seen (ns since the epoch): DNS-learned addresses are valid for a
    #: time; None judges by everything learned, whenever
    ts_ns: int | None = None
    #: the HTTP request the connection carries (``http`` rules); None: not known yet, so such a
    #: rule matches nothing and the decision says it ``awaits_request``
    request: HttpRequest | None = None


@dataclass
class Decision:
    verdict: str  # "allow" | "deny"
    tier: str | None
    policy: str | None  # Policy.ref, or "Profile/<name>"
    rule: str | int | None  # Rule.label
    reason: str  # "rule" | "end-of-tier" | "profile" | "default"
    logs: list[tuple[str | None, str, str | int]] = field(default_factory=list)
    #: Denied, but an ``http`` rule before the decision matched all but the request, which the
    #: flow did not carry: the connection's request decides (a deny can only become an allow)
    awaits_request: bool = False
    #: At the end of a tier: the policies of that tier that selected the endpoint in this
    #: direction (``Policy.ref``, in evaluation order), none of whose rules matched; None when
    #: not known (a packet record whose endpoint is not named) or another reason decided
    policies: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verdict": self.verdict,
            "tier": self.tier,
            "policy": self.policy,
            "rule": self.rule,
            "reason": self.reason,
            "logs": [{"tier": t, "policy": p, "rule": r} for t, p, r in self.logs],
        }
        if self.policies is not None:
            out["policies"] = list(self.policies)
        if self.awaits_request:
            out["awaits_request"] = True
        return out

    def isolation(self) -> str:
        """Why a tier's end decided: "isolated by NetworkPolicy/backend/db-ingress, no rule
        matched" (the policies of the tier that selected the endpoint), or, where they are not
        known, "a policy applied, no rule matched"."""
        if not self.policies:
            return "a policy applied, no rule matched"
        what = "isolated by" if self.verdict == "deny" else "selected by"
        return f"{what} {', '.join(self.policies)}, no rule matched"


@dataclass
class Verdict:
    verdict: str
    egress: Decision | None
    ingress: Decision | None
    #: Denied only by an ingress that awaits the connection's HTTP request: admitted
    #: provisionally up to that request, which is judged again (``Flow.request``)
    awaits_request: bool = False

    @property
    def allowed(self) -> bool:
        return self.verdict == "allow"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verdict": self.verdict,
            "egress": self.egress.to_json() if self.egress else None,
            "ingress": self.ingress.to_json() if self.ingress else None,
        }
        if self.awaits_request:
            out["awaits_request"] = True
        return out

    def would(self) -> str:
        """The verdict as a staged preview says it: "would deny by StagedNetworkPolicy/ns/name
        rule 2 (ingress)", naming the side that denies (or, allowed, the last that allowed)."""
        sides = [(d, name) for d, name in ((self.egress, "egress"), (self.ingress, "ingress")) if d is not None]
        deciding = next(((d, n) for d, n in sides if d.verdict == "deny"), sides[-1] if sides else None)
        if deciding is None:
            return f"would {self.verdict} (no policy applies)"
        d, name = deciding
        if d.reason in ("rule", "profile") and d.policy:
            by = f"by {d.policy} rule {d.rule}"
        elif d.reason == "end-of-tier":
            by = f"at the end of tier {d.tier}"
        elif d.reason == "profile":
            by = "by its profiles"
        else:
            by = "by the default"
        return f"would {self.verdict} {by} ({name})"


# Labels as policy sees them; the native engine's spec (pyclassify.engine) uses the same three.
def endpoint_labels(ep: Endpoint) -> dict[str, str]:
    """The endpoint's labels plus the ones Calico adds to every workload endpoint."""
    labels = dict(ep.labels)
    if ep.kind is EndpointKind.POD:
        labels.setdefault("projectcalico.org/orchestrator", "k8s")
        if ep.namespace:
            labels.setdefault("projectcalico.org/namespace", ep.namespace)
        if ep.service_account:
            labels.setdefault("projectcalico.org/serviceaccount", ep.service_account)
    return labels


def namespace_labels(inventory: Inventory, namespace: str | None) -> dict[str, str]:
    labels = dict(inventory.namespace_labels(namespace))
    if namespace is not None:
        labels.setdefault("projectcalico.org/name", namespace)
    return labels


def service_account_labels(inventory: Inventory, ep: Endpoint) -> dict[str, str]:
    if ep.namespace is None or ep.service_account is None:
        return {}
    sa = inventory.service_accounts.get((ep.namespace, ep.service_account))
    return dict(sa.labels) if sa is not None else {}
