"""Admission decisions: which policy and rule admit or reject each container image of a resource.

Resources are the pod-creating kinds: Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job,
CronJob, ReplicationController (and the old ``extensions`` group's workloads). A policy's
``selector`` is matched against the resource's own ``metadata.labels`` (for a controller, its
labels, not its pod template's); its ``namespaceSelector`` against the labels of the resource's
namespace (``default`` when the resource names none).

Per container image, policies are tried in order; in the first one that selects the resource and
has a rule whose criteria all match, that rule decides (``reason: rule``). If selecting policies
exist but none of their rules match, the image is admitted with ``reason: no-rule-matched``; if no
policy selects the resource, with ``reason: no-policy``. The resource is admitted only if every
image is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyclassify._engine import MAX_IMAGE_LEN
from pyclassify.admission.policy import (
    ALLOW,
    KIND,
    REJECT,
    UNKNOWN,
    AdmissionPolicy,
    AdmissionRule,
    AdmissionSet,
    format_time,
)
from pyclassify.admission.scans import ScanResult, ScanResults, scans_from_annotations
from pyclassify.documents import Document, FieldPath, Problems
from pyclassify.kinds import api_group

DEFAULT_NAMESPACE = "default"

# (api group, kind) -> path of the pod spec inside the object
POD_SPEC_PATHS: dict[tuple[str, str], FieldPath] = {
    ("", "Pod"): ("spec",),
    ("", "ReplicationController"): ("spec", "template", "spec"),
    ("apps", "Deployment"): ("spec", "template", "spec"),
    ("apps", "StatefulSet"): ("spec", "template", "spec"),
    ("apps", "DaemonSet"): ("spec", "template", "spec"),
    ("apps", "ReplicaSet"): ("spec", "template", "spec"),
    ("extensions", "Deployment"): ("spec", "template", "spec"),
    ("extensions", "DaemonSet"): ("spec", "template", "spec"),
    ("extensions", "ReplicaSet"): ("spec", "template", "spec"),
    ("batch", "Job"): ("spec", "template", "spec"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template", "spec"),
}
POD_CREATING_KINDS = sorted({kind for _, kind in POD_SPEC_PATHS})
CONTAINER_FIELDS = (
    ("initContainers", "initContainer"),
    ("containers", "container"),
    ("ephemeralContainers", "ephemeralContainer"),
)

REASON_RULE = "rule"
REASON_NO_POLICY = "no-policy"
REASON_NO_RULE = "no-rule-matched"


class ResourceError(ValueError):
    """A resource that cannot be judged; ``problems`` are (field path, message) pairs."""

    def __init__(self, problems: list[tuple[FieldPath, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{_path(p)}: {m}" if p else m for p, m in problems))


def _path(path: FieldPath) -> str:
    from pyclassify.documents import format_path

    return format_path(path)


@dataclass(frozen=True)
class Container:
    type: str  # container | initContainer | ephemeralContainer
    name: str
    image: str
    path: FieldPath


@dataclass(frozen=True)
class AdmissionResource:
    kind: str
    api_version: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    containers: tuple[Container, ...]
    annotations: Mapping[str, Any] = field(default_factory=dict)  # resource's and pod template's

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


def is_pod_creating(api_version: str, kind: str) -> bool:
    return (api_group(api_version), kind) in POD_SPEC_PATHS


def resource_from_object(obj: Any, namespace: str | None = None) -> AdmissionResource:
    """The judgeable parts of a pod-creating resource; raises ResourceError naming every bad field.
    ``namespace`` (an AdmissionReview's ``request.namespace``) wins over the object's own."""
    problems: list[tuple[FieldPath, str]] = []
    if not isinstance(obj, dict):
        raise ResourceError([((), "a resource must be an object")])
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str) or not is_pod_creating(api_version, kind):
        raise ResourceError(
            [
                (
                    ("kind",),
                    f"not a pod-creating resource: {api_version}/{kind} (want one of {', '.join(POD_CREATING_KINDS)})",
                )
            ]
        )
    metadata = obj.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise ResourceError([(("metadata",), "must be an object")])
    name = metadata.get("name") or metadata.get("generateName") or ""
    if not isinstance(name, str):
        problems.append((("metadata", "name"), "must be a string"))
        name = ""
    ns = namespace or metadata.get("namespace") or DEFAULT_NAMESPACE
    if not isinstance(ns, str):
        problems.append((("metadata", "namespace"), "must be a string"))
        ns = DEFAULT_NAMESPACE
    labels = _string_map(metadata.get("labels"), ("metadata", "labels"), problems)
    annotations = dict(_string_map(metadata.get("annotations"), ("metadata", "annotations"), problems))
    spec_path = POD_SPEC_PATHS[(api_group(api_version), kind)]
    template_path = spec_path[:-1]
    if len(template_path) > 1:  # a controller: its pod template's annotations count as well
        template = _get(obj, template_path)
        if isinstance(template, dict) and isinstance(template.get("metadata"), dict):
            tmpl_ann = _string_map(
                template["metadata"].get("annotations"), template_path + ("metadata", "annotations"), problems
            )
            annotations = {**tmpl_ann, **annotations}
    spec = _get(obj, spec_path)
    if not isinstance(spec, dict):
        problems.append((spec_path, "Required value: a pod spec"))
        raise ResourceError(problems)
    containers: list[Container] = []
    for key, ctype in CONTAINER_FIELDS:
        items = spec.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            problems.append((spec_path + (key,), "must be a list of containers"))
            continue
        for i, c in enumerate(items):
            path = spec_path + (key, i)
            if not isinstance(c, dict):
                problems.append((path, "a container must be an object"))
                continue
            cname = c.get("name")
            image = c.get("image")
            if not isinstance(cname, str) or not cname:
                problems.append((path + ("name",), "Required value: a container name"))
            if not isinstance(image, str) or not image.strip():
                problems.append((path + ("image",), "Required value: an image"))
            elif len(image.encode()) > MAX_IMAGE_LEN:
                problems.append(
                    (
                        path + ("image",),
                        f"an image reference of {len(image.encode())} bytes; at most {MAX_IMAGE_LEN} are judged",
                    )
                )
                image = None
            if isinstance(cname, str) and isinstance(image, str) and cname and image.strip():
                containers.append(Container(ctype, cname, image, path))
    if not containers and not problems:
        problems.append((spec_path + ("containers",), "Required value: at least one container"))
    if problems:
        raise ResourceError(problems)
    return AdmissionResource(kind, api_version, ns, name, labels, tuple(containers), annotations)


def resource_from_document(doc: Document, problems: Problems) -> AdmissionResource | None:
    """A resource from a manifest document; its problems are reported with file and line."""
    try:
        return resource_from_object(doc.obj)
    except ResourceError as e:
        for path, message in e.problems:
            problems.error(doc, path, message)
        return None


def _get(obj: Any, path: FieldPath) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _string_map(value: Any, path: FieldPath, problems: list[tuple[FieldPath, str]]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append((path, "must be a map of string to string"))
        return {}
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            problems.append((path + (str(k),), f"must be a string, got {v!r}"))
        else:
            out[k] = v
    return out


@dataclass(frozen=True)
class ContainerDecision:
    container: Container
    allowed: bool
    reason: str  # REASON_RULE | REASON_NO_POLICY | REASON_NO_RULE
    policy: str | None = None  # ContainerAdmissionPolicy/<name>
    rule: int | None = None
    action: str | None = None
    rule_text: str | None = None
    why: str = ""  # how the rule's criteria matched this image
    scan_status: str = UNKNOWN
    last_scan: dt.datetime | None = None
    scan_source: str | None = None

    @property
    def decision(self) -> str:
        return "admit" if self.allowed else "reject"

    def explain(self) -> str:
        c = self.container
        who = f"{c.type} {c.name!r} image {c.image!r}"
        if self.reason == REASON_RULE:
            verb = "admitted" if self.allowed else "rejected"
            return f"{who}: {verb} by {self.policy} rule {self.rule} ({self.rule_text}: {self.why})"
        if self.reason == REASON_NO_RULE:
            return f"{who}: admitted: the policies that select this resource have no rule matching this image"
        return f"{who}: admitted: no {KIND} selects this resource"

    def to_json(self) -> dict[str, Any]:
        c = self.container
        return {
            "container": c.name,
            "type": c.type,
            "image": c.image,
            "decision": self.decision,
            "policy": self.policy,
            "rule": self.rule,
            "action": self.action,
            "reason": self.reason,
            "explanation": self.explain(),
            "scan": {
                "status": self.scan_status,
                "lastScan": format_time(self.last_scan) if self.last_scan else None,
                "source": self.scan_source,
            },
        }


@dataclass(frozen=True)
class ResourceDecision:
    resource: AdmissionResource
    containers: tuple[ContainerDecision, ...]
    selected: tuple[str, ...]  # refs of the policies that select the resource, in order
    warnings: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return all(c.allowed for c in self.containers)

    @property
    def decision(self) -> str:
        return "admit" if self.allowed else "reject"

    def message(self) -> str:
        """One line for an AdmissionReview status: the rejected images and the rules that did it."""
        rejected = [c for c in self.containers if not c.allowed]
        if rejected:
            return "; ".join(c.explain() for c in rejected)
        if not self.selected:
            return f"admitted: no {KIND} selects {self.resource.ref}"
        return f"admitted by {', '.join(self.selected)}"

    def to_json(self) -> dict[str, Any]:
        r = self.resource
        return {
            "kind": r.kind,
            "apiVersion": r.api_version,
            "namespace": r.namespace,
            "name": r.name,
            "decision": self.decision,
            "allowed": self.allowed,
            "selected_policies": list(self.selected),
            "message": self.message(),
            "containers": [c.to_json() for c in self.containers],
            "warnings": list(self.warnings),
        }


def _rule_matches(rule: AdmissionRule, image: str, scan: ScanResult | None, now: dt.datetime) -> tuple[bool, str]:
    """Whether every criterion of ``rule`` matches, and how (for the explanation)."""
    status = scan.status if scan is not None else UNKNOWN
    last = scan.last_scan if scan is not None else None
    how: list[str] = []
    if rule.image_path is not None:
        matched, first = rule.image_path.evaluate(image)
        if not matched:
            return False, ""
        how.append(
            f"image matches {rule.image_path.values[first]!r}"
            if first is not None
            else "image matches none of the patterns"
        )
    if rule.image_scan_status is not None:
        if not rule.image_scan_status.matches(status):
            return False, ""
        how.append(f"scan status {status}")
    if rule.image_last_scan is not None:
        if not rule.image_last_scan.matches(last, now):
            return False, ""
        threshold = format_time(rule.image_last_scan.threshold(now))
        how.append(
            f"last scan {format_time(last)} {'after' if rule.image_last_scan.operator == 'gt' else 'before'} "  # type: ignore[arg-type]
            f"{threshold}"
        )
    return True, ", ".join(how) if how else "no criteria"


def evaluate(
    admission: AdmissionSet,
    resource: AdmissionResource,
    scans: ScanResults | None = None,
    now: dt.datetime | None = None,
    trust_annotations: bool = False,
) -> ResourceDecision:
    now = now if now is not None else dt.datetime.now(dt.UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.UTC)
    facts = scans if scans is not None else ScanResults()
    warnings: list[str] = []
    if trust_annotations:
        claimed, problems = scans_from_annotations(resource.annotations)
        warnings.extend(problems)
        facts = facts.merged_over(claimed)
    ns_labels = admission.namespace_labels(resource.namespace)
    selecting: list[AdmissionPolicy] = [p for p in admission.policies if p.applies_to(resource.labels, ns_labels)]
    decisions: list[ContainerDecision] = []
    for container in resource.containers:
        scan = facts.lookup(container.image)
        scan_kw = dict(
            scan_status=scan.status if scan else UNKNOWN,
            last_scan=scan.last_scan if scan else None,
            scan_source=scan.source if scan else None,
        )
        decided: ContainerDecision | None = None
        for policy in selecting:
            for rule in policy.rules:
                matched, why = _rule_matches(rule, container.image, scan, now)
                if matched:
                    decided = ContainerDecision(
                        container,
                        rule.action == ALLOW,
                        REASON_RULE,
                        policy.ref,
                        rule.index,
                        rule.action,
                        rule.describe(),
                        why,
                        **scan_kw,  # type: ignore[arg-type]
                    )
                    break
            if decided is not None:
                break
        if decided is None:
            reason = REASON_NO_RULE if selecting else REASON_NO_POLICY
            decided = ContainerDecision(container, True, reason, **scan_kw)  # type: ignore[arg-type]
        decisions.append(decided)
    return ResourceDecision(resource, tuple(decisions), tuple(p.ref for p in selecting), tuple(warnings))


__all__ = [
    "ALLOW",
    "REJECT",
    "AdmissionResource",
    "Container",
    "ContainerDecision",
    "ResourceDecision",
    "ResourceError",
    "evaluate",
    "is_pod_creating",
    "resource_from_document",
    "resource_from_object",
]
