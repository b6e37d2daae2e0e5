"""ContainerAdmissionPolicy validation: typed dataclasses, `file:line: path: message` errors,
regular expressions checked at load time, times and durations as Go reads them."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyclassify._engine import ImagePatternError, ImagePatternSet
from pyclassify.admission.policy import (
    AdmissionSet,
    Duration,
    TimeMatch,
    build_admission,
    check_admission_documents,
    go_add_date,
    load_admission,
    normalize_admission_policy,
    parse_time,
)
from pyclassify.documents import Problems
from pyclassify.loader import documents_of, load_text

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "admission"
UTC = dt.UTC


def load(text: str) -> tuple[AdmissionSet, Problems]:
    problems = Problems()
    docs = load_text(textwrap.dedent(text), "p.yaml", problems)
    return build_admission(docs, problems), problems


def errors(text: str) -> list[str]:
    _, problems = load(text)
    return [str(p) for p in problems.errors]


POLICY = """\
apiVersion: containersecurity.tigera.io/v1beta1
kind: ContainerAdmissionPolicy
metadata:
  name: p
spec:
"""


def test_seed_sample_loads_into_typed_rules() -> None:
    problems = Problems()
    admission = load_admission([str(EXAMPLES / "policies" / "10-reject-failed-and-non-gcr.yaml")], problems)
    assert not problems.items
    (policy,) = admission.policies
    assert policy.name == "reject-failed-and-non-gcr"
    assert policy.order == 10.0
    assert policy.selector.is_all and policy.namespace_selector.is_all
    r0, r1, r2 = policy.rules
    assert (r0.action, r0.image_path.operator, r0.image_path.values) == (
        "Reject",
        "IsNoneOf",
        ("^gcr.io/company/production-repository/.*",),
    )
    assert r0.image_scan_status is None and r0.image_last_scan is None
    assert (r1.action, r1.image_scan_status.operator, r1.image_scan_status.values) == (
        "Allow",
        "IsOneOf",
        ("Pass", "Warn"),
    )
    assert r2.action == "Reject" and r2.is_catch_all
    assert r0.line == 13 and r2.line == 24  # lines of the rules in the file


def test_defaults_selector_all_and_unset_order() -> None:
    admission, problems = load(POLICY + "  rules:\n  - action: Allow\n")
    assert not problems
    (p,) = admission.policies
    assert p.order is None and p.selector.is_all and p.namespace_selector.is_all


def test_errors_name_file_line_and_field() -> None:
    body = textwrap.indent(
        textwrap.dedent("""\
        order: high
        selector: "a == "
        bogus: 1
        rules:
        - action: Deny
        - action: Allow
          imagePath:
            operator: Matches
            values: ["ok", "gcr.io/(unclosed", 7]
        - action: Reject
          imageScanStatus:
            operator: IsOneOf
            values: [Pass, Passed]
        - action: Allow
          imageLastScan:
            operator: ge
            time: "yesterday"
        - action: Allow
          imageLastScan:
            operator: gt
            duration: {days: -1, weeks: 2}
        - action: Allow
          imageLastScan:
            operator: gt
        - {imagePath: {operator: IsOneOf, values: [a]}}
        """),
        "  ",
    )
    found = errors(POLICY + body)
    expected = [
        # type errors are the schema check's, in its words
        "p.yaml:6: spec.order: Invalid value: 'high': must be of type number, not string",
        "p.yaml:7: spec.selector: invalid selector",
        "p.yaml:8: spec.bogus: unknown field 'bogus'",
        "p.yaml:10: spec.rules[0].action: Unsupported value: 'Deny'",
        "p.yaml:13: spec.rules[1].imagePath.operator: Unsupported value: 'Matches'",
        "p.yaml:14: spec.rules[1].imagePath.values[2]: Invalid value: 7: must be of type string, not integer",
        "p.yaml:18: spec.rules[2].imageScanStatus.values[1]: Unsupported value: 'Passed'",
        "p.yaml:21: spec.rules[3].imageLastScan.operator: Unsupported value: 'ge'",
        "p.yaml:22: spec.rules[3].imageLastScan.time: Invalid value: 'yesterday'",
        "p.yaml:26: spec.rules[4].imageLastScan.duration.weeks: unknown field 'weeks'",
        "p.yaml:26: spec.rules[4].imageLastScan.duration.days: Invalid value: -1",
        "p.yaml:28: spec.rules[5].imageLastScan: exactly one of duration and time is required",
        "p.yaml:30: spec.rules[6].action: Required value",
    ]
    for want in expected:
        assert any(f.startswith(want) for f in found), f"missing {want!r} in:\n" + "\n".join(found)
    # The regex error names the value; the bad pattern's own line is reported.
    assert any(
        f.startswith(
            "p.yaml:14: spec.rules[1].imagePath.values[1]: Invalid value: 'gcr.io/(unclosed': "
            "invalid regular expression"
        )
        for f in found
    ), found


def test_invalid_policy_is_dropped_whole() -> None:
    admission, problems = load(POLICY + "  rules:\n  - action: Allow\n  - action: Nope\n")
    assert problems and admission.policies == ()


@pytest.mark.parametrize(
    "pattern, fragment",
    [
        ("(a)\\1", "backreferences are not supported"),
        ("gcr(?=\\.io)", "look-around"),
        ("((a{1000}){1000}){1000}", "too large"),
        ("[z-a]", "invalid regular expression"),
    ],
)
def test_hostile_or_unsupported_patterns_are_load_errors(pattern: str, fragment: str) -> None:
    found = errors(
        POLICY + f"  rules:\n  - action: Allow\n    imagePath:\n      operator: IsOneOf\n      values: ['{pattern}']\n"
    )
    assert len(found) == 1 and "spec.rules[0].imagePath.values[0]" in found[0], found
    assert fragment in found[0]


def test_name_namespace_and_api_version() -> None:
    found = errors("""\
        apiVersion: containersecurity.tigera.io/v1
        kind: ContainerAdmissionPolicy
        metadata: {name: "bad name!"}
        """)
    assert any("apiVersion: unsupported apiVersion" in f for f in found)
    assert any("metadata.name: Invalid value: 'bad name!'" in f for f in found)
    _, problems = load(POLICY.replace("name: p", "name: p\n  namespace: x") + "  rules: [{action: Allow}]\n")
    assert not problems.errors
    assert any("cluster resource" in str(w) for w in problems.warnings)


def test_duplicate_names_are_errors() -> None:
    text = POLICY + "  rules: [{action: Allow}]\n"
    found = errors(text + "---\n" + text)
    assert len(found) == 1 and "duplicate ContainerAdmissionPolicy 'p': first defined at p.yaml:1" in found[0]


def test_warnings_for_shadowed_rules_and_empty_values() -> None:
    _, problems = load(
        POLICY + "  rules:\n  - action: Allow\n  - action: Reject\n    imagePath: {operator: IsOneOf, values: []}\n"
    )
    assert not problems.errors
    warnings = [str(w) for w in problems.warnings]
    assert any("spec.rules[0]: this rule has no criteria" in w for w in warnings)
    assert any(
        "spec.rules[1].imagePath.values: no values: IsOneOf of an empty list matches nothing" in w for w in warnings
    )


def test_policies_sorted_by_order_unset_last_ties_by_name() -> None:
    docs = []
    for name, order in [("zeta", None), ("beta", 5), ("alpha", 5), ("gamma", 1.5), ("aaa", None), ("neg", -3)]:
        spec = {"rules": [{"action": "Allow"}]}
        if order is not None:
            spec["order"] = order
        docs += documents_of(
            {
                "apiVersion": "containersecurity.tigera.io/v1beta1",
                "kind": "ContainerAdmissionPolicy",
                "metadata": {"name": name},
                "spec": spec,
            },
            "x",
            Problems(),
        )
    admission = build_admission(docs, Problems())
    assert [p.name for p in admission.policies] == ["neg", "gamma", "alpha", "beta", "aaa", "zeta"]


def test_check_admission_documents_reports_into_problems() -> None:
    problems = Problems()
    docs = load_text(
        POLICY
        + "  rules: [{action: Maybe}]\n---\n"
        + POLICY.replace("name: p", "name: q")
        + "  rules: [{action: Allow}]\n",
        "c.yaml",
        problems,
    )
    assert check_admission_documents(docs, problems) == 1
    assert [str(p) for p in problems.errors] == [
        'c.yaml:6: spec.rules[0].action: Unsupported value: \'Maybe\': supported values: "Allow", "Reject"'
    ]


# --- times and durations ---


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2022-01-02T0:00:00Z", dt.datetime(2022, 1, 2, tzinfo=UTC)),  # the seed's one-digit hour
        ("2022-01-02T15:04:05Z", dt.datetime(2022, 1, 2, 15, 4, 5, tzinfo=UTC)),
        ("2022-01-02T15:04:05.123456789+02:00", dt.datetime(2022, 1, 2, 13, 4, 5, 123456, tzinfo=UTC)),
        ("2022-01-02T00:30:00-01:30", dt.datetime(2022, 1, 2, 2, 0, tzinfo=UTC)),
    ],
)
def test_parse_time_as_go_rfc3339(text: str, expected: dt.datetime) -> None:
    assert parse_time(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2022-01-02",
        "2022-01-02T00:00Z",
        "2022-13-01T00:00:00Z",
        "2022-01-02T24:00:00Z",
        "2022-02-30T00:00:00Z",
        "2022-01-02T00:00:00",
        "2022-01-02T0:0:00Z",
        "2022-01-02T00:00:00+25:00",
        "",
    ],
)
def test_parse_time_refuses(text: str) -> None:
    assert parse_time(text) is None


def test_go_add_date_normalizes_like_go() -> None:
    t = dt.datetime(2025, 3, 31, 12, tzinfo=UTC)
    assert go_add_date(t, 0, -1, 0) == dt.datetime(2025, 3, 3, 12, tzinfo=UTC)  # Feb 31 -> Mar 3
    assert go_add_date(t, -1, 0, 0) == dt.datetime(2024, 3, 31, 12, tzinfo=UTC)
    assert go_add_date(dt.datetime(2024, 2, 29, tzinfo=UTC), -1, 0, 0) == dt.datetime(2023, 3, 1, tzinfo=UTC)
    assert go_add_date(t, 0, -14, -31) == dt.datetime(2024, 1, 31, 12, tzinfo=UTC) - dt.timedelta(days=31)
    assert go_add_date(t, -8000, 0, 0) == dt.datetime.min.replace(tzinfo=UTC)


def test_seed_duration_example() -> None:
    """gt 3 days: false for 4 days ago, true for 2 days ago; the threshold itself matches neither."""
    now = dt.datetime(2025, 6, 1, 12, tzinfo=UTC)
    gt = TimeMatch("gt", duration=Duration(days=3))
    lt = TimeMatch("lt", duration=Duration(days=3))
    four, two, exact = now - dt.timedelta(days=4), now - dt.timedelta(days=2), now - dt.timedelta(days=3)
    assert not gt.matches(four, now) and gt.matches(two, now)
    assert lt.matches(four, now) and not lt.matches(two, now)
    assert not gt.matches(exact, now) and not lt.matches(exact, now)
    assert not gt.matches(exact, now) and gt.matches(exact + dt.timedelta(microseconds=1), now)
    assert not gt.matches(None, now) and not lt.matches(None, now)  # never scanned: neither


def test_seed_time_example() -> None:
    gt = TimeMatch("gt", time=parse_time("2022-01-02T0:00:00Z"))
    now = dt.datetime(2030, 1, 1, tzinfo=UTC)
    assert not gt.matches(dt.datetime(2022, 1, 1, tzinfo=UTC), now)
    assert gt.matches(dt.datetime(2022, 1, 3, tzinfo=UTC), now)
    assert not gt.matches(dt.datetime(2022, 1, 2, tzinfo=UTC), now)


def test_month_and_year_durations() -> None:
    now = dt.datetime(2025, 3, 31, tzinfo=UTC)
    m = TimeMatch("gt", duration=Duration(months=1))
    assert m.threshold(now) == dt.datetime(2025, 3, 3, tzinfo=UTC)
    y = TimeMatch("lt", duration=Duration(years=1, months=2, days=1))
    assert y.threshold(now) == dt.datetime(2024, 1, 30, tzinfo=UTC)


# --- the compiled pattern set (Rust) ---


def test_image_pattern_set_semantics() -> None:
    s = ImagePatternSet(["^quay.io/", "app", "^gcr.io/"])
    assert s.patterns == ["^quay.io/", "app", "^gcr.io/"] and len(s) == 3
    assert s.first_match("gcr.io/x/app:1") == 1 and s.matches("gcr.io/x/app:1") == [1, 2]
    assert s.first_match("docker.io/x/y") is None and not s.is_match("docker.io/x/y")
    with pytest.raises(ImagePatternError) as e:
        ImagePatternSet(["fine", "(bad"])
    assert e.value.index == 1 and "unclosed group" in e.value.message
    with pytest.raises(TypeError):
        ImagePatternSet("not-a-list")  # type: ignore[arg-type]


def test_redos_pattern_answers() -> None:
    s = ImagePatternSet(["^(a+)+$", "^(a|aa)+$", "(.*a){25}$"])
    hostile = "a" * 60_000 + "!"
    assert s.first_match(hostile) is None
    assert s.first_match("a" * 60_000) == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=5), st.text(max_size=200))
def test_pattern_set_never_panics(patterns: list[str], image: str) -> None:
    try:
        s = ImagePatternSet(patterns)
    except ImagePatternError as e:
        assert e.message and (e.index is None or 0 <= e.index < len(patterns))
        return
    first = s.first_match(image)
    assert first is None or s.matches(image)[0] == first


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-10, 10**6)
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.sampled_from(["Allow", "Reject", "IsOneOf", "IsNoneOf", "gt", "lt", "Pass", "all()", "2022-01-02T0:00:00Z"]),
    lambda kids: (
        st.lists(kids, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "action",
                    "imagePath",
                    "imageScanStatus",
                    "imageLastScan",
                    "operator",
                    "values",
                    "time",
                    "duration",
                    "days",
                    "months",
                    "years",
                    "x",
                ]
            ),
            kids,
            max_size=4,
        )
    ),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={"order": _json, "selector": _json, "namespaceSelector": _json, "rules": st.lists(_json, max_size=4)},
    )
)
def test_normalizer_fuzz_reports_never_raises(spec: dict) -> None:
    problems = Problems()
    (doc,) = documents_of(
        {
            "apiVersion": "containersecurity.tigera.io/v1beta1",
            "kind": "ContainerAdmissionPolicy",
            "metadata": {"name": "f"},
            "spec": spec,
        },
        "f.yaml",
        problems,
    )
    out = normalize_admission_policy(doc, problems)
    assert (out == []) == bool(problems.errors) or out == []
    if out:
        assert not problems.errors
