"""ContainerAdmissionPolicy (containersecurity.tigera.io/v1beta1): validation into typed dataclasses.

The kind registry (``pyclassify.kinds``) maps kinds to normalizers that return the packet IR
(Policy/Tier/Profile); an admission policy is not a packet policy, so it is not registered there
and ``pyclassify.project`` skips it. This module reads it from the same documents (the shared
loader) and reports problems through the same ``Problems`` collector, so errors read
``file:line: path: message`` like every other kind's. ``check_admission_documents`` is the one
call ``pyclassify check`` makes to validate admission policies among other manifests.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyclassify._engine import MAX_IMAGE_PATTERNS, ImagePatternError, ImagePatternSet
from pyclassify.documents import Document, FieldPath, Problems
from pyclassify.kinds import api_group, schema
from pyclassify.kinds.common import calico_selector, check_keys
from pyclassify.kinds.inventory_kinds import InventoryBuilder
from pyclassify.loader import iter_paths
from pyclassify.selector import Selector

GROUP = "containersecurity.tigera.io"
KIND = "ContainerAdmissionPolicy"
API_VERSION = f"{GROUP}/v1beta1"

ALLOW = "Allow"
REJECT = "Reject"
ACTIONS = (ALLOW, REJECT)
IS_ONE_OF = "IsOneOf"
IS_NONE_OF = "IsNoneOf"
STRING_OPERATORS = (IS_ONE_OF, IS_NONE_OF)
GT = "gt"
LT = "lt"
TIME_OPERATORS = (GT, LT)
# Scan statuses a scanner reports, and the one an image without any scan result has.
SCAN_STATUSES = ("Pass", "Warn", "Fail")
UNKNOWN = "Unknown"
POLICY_SCAN_STATUSES = SCAN_STATUSES + (UNKNOWN,)

# "Alphanumeric string with optional ., _, or -" (the seed); at most a DNS subdomain's length.
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")  # fullmatch: no trailing newline
_MAX_NAME = 253
# A bound on duration fields: far past any real retention (and inside datetime's range).
MAX_DURATION = {"days": 3_000_000, "months": 100_000, "years": 8_000}
_SPEC_KEYS = {"order", "selector", "namespaceSelector", "rules"}
_RULE_KEYS = {"action", "imagePath", "imageScanStatus", "imageLastScan"}

# Go's time.RFC3339 as time.Parse reads it ("2006-01-02T15:04:05Z07:00"): the hour may have one
# digit (the seed writes "2022-01-02T0:00:00Z"), fractional seconds are accepted, and the zone is
# Z or +hh:mm. Lower-case t/z are accepted as RFC 3339 allows.
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)


def parse_time(text: str) -> dt.datetime | None:
    """An RFC 3339 time as Go parses it, as an aware UTC datetime; None if it is not one."""
    m = _RFC3339.match(text.strip()) if isinstance(text, str) else None
    if not m:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    micro = int((m.group(7) or "0").ljust(9, "0")[:6])
    if m.group(8):
        tz = dt.UTC
    else:
        oh, om = int(m.group(10)), int(m.group(11))
        if oh > 23 or om > 59:
            return None
        offset = dt.timedelta(hours=oh, minutes=om)
        tz = dt.timezone(-offset if m.group(9) == "-" else offset)
    try:
        return dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=tz).astimezone(dt.UTC)
    except (ValueError, OverflowError):
        return None


def format_time(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def go_add_date(t: dt.datetime, years: int, months: int, days: int) -> dt.datetime:
    """Go's ``time.AddDate``: add calendar years, months and days, then normalize (March 31
    minus one month is March 3 in a common year, as Go's Feb 31 overflows into March). Results
    before year 1 clamp to the earliest time a datetime holds."""
    year = t.year + years
    month0 = t.month - 1 + months
    year += month0 // 12
    month = month0 % 12 + 1
    try:
        first = t.replace(year=year, month=month, day=1)
        return first + dt.timedelta(days=t.day - 1 + days)
    except (ValueError, OverflowError):
        low = dt.datetime.min.replace(tzinfo=dt.UTC)
        high = dt.datetime.max.replace(tzinfo=dt.UTC)
        return low if (years, months, days) < (0, 0, 0) else high


@dataclass(frozen=True)
class StringValuesMatch:
    """``imageScanStatus``: the value is (``IsOneOf``) or is not (``IsNoneOf``) one of ``values``."""

    operator: str
    values: tuple[str, ...]

    def matches(self, value: str) -> bool:
        return (value in self.values) == (self.operator == IS_ONE_OF)

    def describe(self) -> str:
        return f"{self.operator} [{', '.join(self.values)}]"


@dataclass(frozen=True)
class ImagePathMatch:
    """``imagePath``: some regular expression of ``values`` matches the image (``IsOneOf``), or
    none does (``IsNoneOf``). Patterns match anywhere in the reference unless anchored."""

    operator: str
    values: tuple[str, ...]
    patterns: ImagePatternSet = field(compare=False, repr=False)

    def evaluate(self, image: str) -> tuple[bool, int | None]:
        """(criterion matches, index of the first pattern that matched the image or None)."""
        first = self.patterns.first_match(image)
        return (first is not None) == (self.operator == IS_ONE_OF), first

    def describe(self) -> str:
        return f"{self.operator} [{', '.join(self.values)}]"


@dataclass(frozen=True)
class Duration:
    days: int = 0
    months: int = 0
    years: int = 0

    def before(self, now: dt.datetime) -> dt.datetime:
        """The time this far into the past from ``now`` (Go's ``now.AddDate(-y, -m, -d)``)."""
        return go_add_date(now, -self.years, -self.months, -self.days)

    def describe(self) -> str:
        parts = [
            f"{n} {unit}" for n, unit in ((self.years, "years"), (self.months, "months"), (self.days, "days")) if n
        ]
        return " ".join(parts) or "0 days"


@dataclass(frozen=True)
class TimeMatch:
    """``imageLastScan``: the last scan is after (``gt``) or before (``lt``) a threshold: an
    absolute ``time``, or ``now`` minus a ``duration``. Strict: the threshold itself matches
    neither. An image never scanned matches neither operator."""

    operator: str
    time: dt.datetime | None = None
    duration: Duration | None = None

    def threshold(self, now: dt.datetime) -> dt.datetime:
        if self.time is not None:
            return self.time
        assert self.duration is not None
        return self.duration.before(now)

    def matches(self, last_scan: dt.datetime | None, now: dt.datetime) -> bool:
        if last_scan is None:
            return False
        limit = self.threshold(now)
        return last_scan > limit if self.operator == GT else last_scan < limit

    def describe(self) -> str:
        what = format_time(self.time) if self.time is not None else f"{self.duration.describe()} ago"  # type: ignore[union-attr]
        return f"{self.operator} {what}"


@dataclass(frozen=True)
class AdmissionRule:
    index: int
    action: str  # ALLOW | REJECT
    image_path: ImagePathMatch | None = None
    image_scan_status: StringValuesMatch | None = None
    image_last_scan: TimeMatch | None = None
    line: int = 0

    @property
    def is_catch_all(self) -> bool:
        return self.image_path is None and self.image_scan_status is None and self.image_last_scan is None

    def describe(self) -> str:
        parts = []
        if self.image_path is not None:
            parts.append(f"imagePath {self.image_path.describe()}")
        if self.image_scan_status is not None:
            parts.append(f"imageScanStatus {self.image_scan_status.describe()}")
        if self.image_last_scan is not None:
            parts.append(f"imageLastScan {self.image_last_scan.describe()}")
        return f"{self.action} " + (" and ".join(parts) if parts else "(no criteria: matches every image)")


@dataclass(frozen=True)
class AdmissionPolicy:
    name: str
    order: float | None
    selector: Selector
    namespace_selector: Selector
    rules: tuple[AdmissionRule, ...]
    file: str = ""
    line: int = 0

    @property
    def ref(self) -> str:
        return f"{KIND}/{self.name}"

    @property
    def sort_key(self) -> tuple[bool, float, str]:
        return (self.order is None, self.order if self.order is not None else 0.0, self.name)

    def applies_to(self, labels: Mapping[str, str], namespace_labels: Mapping[str, str]) -> bool:
        return self.selector.matches(labels) and self.namespace_selector.matches(namespace_labels)


@dataclass
class AdmissionSet:
    """Every admission policy in evaluation order, and the namespace labels the manifests give."""

    policies: tuple[AdmissionPolicy, ...] = ()
    namespaces: dict[str, Mapping[str, str]] = field(default_factory=dict)

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        """A namespace's labels plus the ones the API server (``kubernetes.io/metadata.name``)
        and Calico (``projectcalico.org/name``) always give it; a namespace no manifest describes
        has just those."""
        labels = dict(self.namespaces.get(namespace, {}))
        labels.setdefault("kubernetes.io/metadata.name", namespace)
        labels.setdefault("projectcalico.org/name", namespace)
        return labels


def is_admission_policy(doc: Document) -> bool:
    return doc.kind == KIND and api_group(doc.api_version) == GROUP


def normalize_admission_policy(doc: Document, problems: Problems) -> list[AdmissionPolicy]:
    """One ContainerAdmissionPolicy, validated; [] (and problems) if anything is wrong with it."""
    before = len(problems.errors)
    if doc.api_version != API_VERSION:
        problems.error(
            doc, ("apiVersion",), f"unsupported apiVersion {doc.api_version!r} for {KIND}: want {API_VERSION!r}"
        )
    name = _name(doc, problems)
    if doc.namespace:
        problems.warning(doc, ("metadata", "namespace"), f"{KIND} is a cluster resource: the namespace is ignored")
    spec = doc.obj.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        problems.error(doc, ("spec",), "must be an object")
        return []
    check_keys(doc, problems, ("spec",), spec, _SPEC_KEYS)
    order = _order(doc, problems, spec.get("order"))
    selector = _selector(doc, problems, ("spec", "selector"), spec.get("selector"))
    ns_selector = _selector(doc, problems, ("spec", "namespaceSelector"), spec.get("namespaceSelector"))
    rules: list[AdmissionRule] = []
    raw_rules = spec.get("rules")
    if raw_rules is None:
        raw_rules = []
    if not isinstance(raw_rules, list):
        problems.error(doc, ("spec", "rules"), "must be a list of rules")
        raw_rules = []
    if not raw_rules and len(problems.errors) == before:
        problems.warning(
            doc, ("spec", "rules"), "no rules: this policy never decides (images fall through to the next policy)"
        )
    for i, raw in enumerate(raw_rules):
        rule = _rule(doc, problems, ("spec", "rules", i), i, raw)
        if rule is not None:
            rules.append(rule)
    for rule in rules[:-1]:
        if rule.is_catch_all:
            problems.warning(
                doc,
                ("spec", "rules", rule.index),
                "this rule has no criteria and matches every image: the rules after it never apply",
            )
            break
    if len(problems.errors) != before or name is None or selector is None or ns_selector is None:
        return []
    return [AdmissionPolicy(name, order, selector, ns_selector, tuple(rules), doc.file, doc.line)]


def _name(doc: Document, problems: Problems) -> str | None:
    path: FieldPath = ("metadata", "name")
    name = doc.metadata.get("name")
    if not name:
        problems.error(doc, path, "Required value: name is required")
        return None
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > _MAX_NAME:
        problems.error(
            doc,
            path,
            f"Invalid value: {name!r}: must be at most {_MAX_NAME} alphanumeric characters, "
            "'.', '_' or '-', starting and ending with an alphanumeric character",
        )
        return None
    return name


def _order(doc: Document, problems: Problems, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        problems.error(doc, ("spec", "order"), f"must be a number, got {value!r}")
        return None
    return float(value)


def _selector(doc: Document, problems: Problems, path: FieldPath, value: Any) -> Selector | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return Selector.all()
    return calico_selector(doc, problems, path, value)


def _rule(doc: Document, problems: Problems, path: FieldPath, index: int, raw: Any) -> AdmissionRule | None:
    if not isinstance(raw, dict):
        problems.error(doc, path, "a rule must be an object")
        return None
    before = len(problems.errors)
    check_keys(doc, problems, path, raw, _RULE_KEYS)
    action = raw.get("action")
    if action is None:
        problems.error(doc, path + ("action",), "Required value: Allow or Reject")
    elif action not in ACTIONS:
        problems.error(doc, path + ("action",), f'Unsupported value: {action!r}: supported values: "Allow", "Reject"')
    image_path = None
    if raw.get("imagePath") is not None:
        image_path = _image_path(doc, problems, path + ("imagePath",), raw["imagePath"])
    scan_status = None
    if raw.get("imageScanStatus") is not None:
        scan_status = _scan_status(doc, problems, path + ("imageScanStatus",), raw["imageScanStatus"])
    last_scan = None
    if raw.get("imageLastScan") is not None:
        last_scan = _time_match(doc, problems, path + ("imageLastScan",), raw["imageLastScan"])
    if len(problems.errors) != before:
        return None
    return AdmissionRule(index, str(action), image_path, scan_status, last_scan, doc.line_of(path))


def _string_values(
    doc: Document, problems: Problems, path: FieldPath, raw: Any
) -> tuple[str, tuple[tuple[int, str], ...], bool] | None:
    """(operator, the string values with their indexes, whether all is well); None if there is
    nothing to check further. The caller checks the string values even when others are bad."""
    if not isinstance(raw, dict):
        problems.error(doc, path, "must be an object with operator and values")
        return None
    check_keys(doc, problems, path, raw, {"operator", "values"})
    operator = raw.get("operator")
    ok = True
    if operator is None:
        problems.error(doc, path + ("operator",), "Required value: IsOneOf or IsNoneOf")
        ok = False
    elif operator not in STRING_OPERATORS:
        problems.error(
            doc, path + ("operator",), f'Unsupported value: {operator!r}: supported values: "IsOneOf", "IsNoneOf"'
        )
        ok = False
    values = raw.get("values")
    if values is None:
        values = []
    if not isinstance(values, list):
        problems.error(doc, path + ("values",), "must be a list of strings")
        return None
    out: list[tuple[int, str]] = []
    for i, v in enumerate(values):
        if not isinstance(v, str):
            problems.error(doc, path + ("values", i), f"must be a string, got {v!r}")
            ok = False
        else:
            out.append((i, v))
    if ok and not values:
        what = "matches nothing" if operator == IS_ONE_OF else "matches every image"
        problems.warning(doc, path + ("values",), f"no values: {operator} of an empty list {what}")
    return str(operator), tuple(out), ok


def _image_path(doc: Document, problems: Problems, path: FieldPath, raw: Any) -> ImagePathMatch | None:
    parsed = _string_values(doc, problems, path, raw)
    if parsed is None:
        return None
    operator, indexed, ok = parsed
    values = tuple(v for _, v in indexed)
    if len(values) > MAX_IMAGE_PATTERNS:
        problems.error(doc, path + ("values",), f"{len(values)} patterns; at most {MAX_IMAGE_PATTERNS} are allowed")
        return None
    for i, pattern in indexed:  # one at a time, so every bad pattern is reported
        try:
            ImagePatternSet([pattern])
        except ImagePatternError as e:
            problems.error(doc, path + ("values", i), f"Invalid value: {pattern!r}: {e.message}")
            ok = False
    if not ok:
        return None
    try:
        patterns = ImagePatternSet(list(values))
    except ImagePatternError as e:
        where = path + ("values",) + ((e.index,) if e.index is not None else ())
        problems.error(doc, where, e.message)
        return None
    return ImagePathMatch(operator, values, patterns)


def _scan_status(doc: Document, problems: Problems, path: FieldPath, raw: Any) -> StringValuesMatch | None:
    parsed = _string_values(doc, problems, path, raw)
    if parsed is None:
        return None
    operator, indexed, ok = parsed
    values = tuple(v for _, v in indexed)
    for i, v in indexed:
        if v not in POLICY_SCAN_STATUSES:
            problems.error(
                doc,
                path + ("values", i),
                f"Unsupported value: {v!r}: supported values: " + ", ".join(f'"{s}"' for s in POLICY_SCAN_STATUSES),
            )
            ok = False
    return StringValuesMatch(operator, values) if ok else None


def _time_match(doc: Document, problems: Problems, path: FieldPath, raw: Any) -> TimeMatch | None:
    if not isinstance(raw, dict):
        problems.error(doc, path, "must be an object with operator and duration or time")
        return None
    before = len(problems.errors)
    check_keys(doc, problems, path, raw, {"operator", "duration", "time"})
    operator = raw.get("operator")
    if operator is None:
        problems.error(doc, path + ("operator",), "Required value: gt or lt")
    elif operator not in TIME_OPERATORS:
        problems.error(doc, path + ("operator",), f'Unsupported value: {operator!r}: supported values: "gt", "lt"')
    has_duration = raw.get("duration") is not None
    has_time = raw.get("time") is not None
    if has_duration == has_time:
        problems.error(doc, path, "exactly one of duration and time is required")
        return None
    when = None
    duration = None
    if has_time:
        text = raw["time"]
        when = parse_time(text) if isinstance(text, str) else None
        if when is None:
            problems.error(
                doc,
                path + ("time",),
                f'Invalid value: {text!r}: must be a time of the format "2006-01-02T15:04:05Z07:00" (RFC 3339)',
            )
    else:
        duration = _duration(doc, problems, path + ("duration",), raw["duration"])
    if len(problems.errors) != before:
        return None
    return TimeMatch(str(operator), when, duration)


def _duration(doc: Document, problems: Problems, path: FieldPath, raw: Any) -> Duration | None:
    if not isinstance(raw, dict):
        problems.error(doc, path, "must be an object with days, months and/or years")
        return None
    check_keys(doc, problems, path, raw, set(MAX_DURATION))
    values: dict[str, int] = {}
    ok = True
    for unit, high in MAX_DURATION.items():
        v = raw.get(unit)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            problems.error(doc, path + (unit,), f"must be an integer, got {v!r}")
            ok = False
        elif not 0 <= v <= high:
            problems.error(doc, path + (unit,), f"Invalid value: {v}: must be between 0 and {high}, inclusive")
            ok = False
        else:
            values[unit] = v
    if ok and not any(values.values()):
        problems.warning(doc, path, "a zero duration: the threshold is the current time")
    return Duration(**values) if ok else None


def build_admission(documents: Iterable[Document], problems: Problems) -> AdmissionSet:
    """The admission policies among ``documents`` in evaluation order, with the labels of the
    namespaces those documents describe. Other kinds are ignored."""
    policies: list[AdmissionPolicy] = []
    seen: dict[str, AdmissionPolicy] = {}
    namespaces = InventoryBuilder(problems)
    for doc in documents:
        namespace = doc.kind == "Namespace" and api_group(doc.api_version) == ""
        if not namespace and not is_admission_policy(doc):
            continue
        refused = schema.check(doc, problems)  # reported; such an object is not used
        if namespace:
            if not refused:
                namespaces.add(doc)
            continue
        for policy in normalize_admission_policy(doc, problems):
            if refused:
                continue
            first = seen.get(policy.name)
            if first is not None:
                problems.error(
                    doc,
                    ("metadata", "name"),
                    f"duplicate {KIND} {policy.name!r}: first defined at {first.file}:{first.line}",
                )
                continue
            seen[policy.name] = policy
            policies.append(policy)
    inventory = namespaces.build()
    return AdmissionSet(
        policies=tuple(sorted(policies, key=lambda p: p.sort_key)),
        namespaces={name: dict(ns.labels) for name, ns in inventory.namespaces.items()},
    )


def load_admission(paths: Iterable[str], problems: Problems) -> AdmissionSet:
    """Admission policies and namespaces from manifest paths (files, directories, ``-``)."""
    return build_admission(iter_paths(paths, problems), problems)


def check_admission_documents(documents: Iterable[Document], problems: Problems) -> int:
    """Validates every ContainerAdmissionPolicy among ``documents`` (for ``pyclassify check``),
    reporting into ``problems``; returns how many admission policies were valid."""
    return len(build_admission([d for d in documents if is_admission_policy(d)], problems).policies)
