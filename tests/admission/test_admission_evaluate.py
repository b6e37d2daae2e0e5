"""Admission decisions: the seed's examples, scoping, ordering, each operator, time edges,
pod-creating kinds, scan facts, and the `admit` command (exit codes, --json)."""

from __future__ import annotations

import datetime as dt
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pyclassify.admission import evaluate as ev
from pyclassify.admission.evaluate import ResourceError, evaluate, resource_from_object
from pyclassify.admission.policy import build_admission, load_admission
from pyclassify.admission.scans import ScanResult, ScanResults, load_scans, normalize_image, scans_from_annotations
from pyclassify.cli.admission import admit_command
from pyclassify.documents import Problems
from pyclassify.loader import documents_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "admission"
POLICIES = EXAMPLES / "policies"
SCANS = EXAMPLES / "scans.yaml"
NOW = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)
UTC = dt.UTC


def policy(
    name: str,
    rules: list[dict],
    order: float | None = None,
    selector: str | None = None,
    ns_selector: str | None = None,
) -> dict:
    spec: dict[str, Any] = {"rules": rules}
    if order is not None:
        spec["order"] = order
    if selector is not None:
        spec["selector"] = selector
    if ns_selector is not None:
        spec["namespaceSelector"] = ns_selector
    return {
        "apiVersion": "containersecurity.tigera.io/v1beta1",
        "kind": "ContainerAdmissionPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def admission(*objs: dict):
    problems = Problems()
    docs = [d for o in objs for d in documents_of(o, "t.yaml", problems)]
    result = build_admission(docs, problems)
    assert not problems.errors, [str(p) for p in problems.errors]
    return result


def pod(
    *images: str,
    ns: str = "default",
    labels: dict | None = None,
    init: tuple[str, ...] = (),
    ephemeral: tuple[str, ...] = (),
    kind: str = "Pod",
) -> dict:
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", "image": im} for i, im in enumerate(images)]}
    if init:
        spec["initContainers"] = [{"name": f"i{i}", "image": im} for i, im in enumerate(init)]
    if ephemeral:
        spec["ephemeralContainers"] = [{"name": f"e{i}", "image": im} for i, im in enumerate(ephemeral)]
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": "p", "namespace": ns, "labels": labels or {}},
        "spec": spec,
    }


def decide(adm, obj: dict, scans: ScanResults | None = None, now: dt.datetime = NOW, **kw):
    return evaluate(adm, resource_from_object(obj), scans, now, **kw)


@pytest.fixture(scope="module")
def seed():
    problems = Problems()
    adm = load_admission([str(POLICIES)], problems)
    scans = load_scans([SCANS], problems)
    assert not problems.items, [str(p) for p in problems]
    return adm, scans


# --- the seed's sample, through every example resource ---

SEED_CASES = {
    # resource file: (admitted, [(container, decision, policy, rule, reason)])
    "pod-pass.yaml": (True, [("web", "admit", "reject-failed-and-non-gcr", 1, "rule")]),
    "pod-warn.yaml": (True, [("api", "admit", "reject-failed-and-non-gcr", 1, "rule")]),
    "pod-digest.yaml": (True, [("worker", "admit", "reject-failed-and-non-gcr", 1, "rule")]),
    "pod-failed-scan.yaml": (False, [("migrate", "reject", "reject-failed-and-non-gcr", 2, "rule")]),
    "pod-unscanned.yaml": (False, [("app", "reject", "reject-failed-and-non-gcr", 2, "rule")]),
    "pod-non-gcr.yaml": (False, [("shell", "reject", "reject-failed-and-non-gcr", 0, "rule")]),
    "deployment-init-fails.yaml": (
        False,
        [
            ("wait-for-db", "reject", "reject-failed-and-non-gcr", 0, "rule"),
            ("web", "admit", "reject-failed-and-non-gcr", 1, "rule"),
        ],
    ),
    "cronjob-sandbox.yaml": (True, [("job", "admit", "sandbox-exempt", 0, "rule")]),
    "statefulset-sandbox-unlabelled.yaml": (False, [("postgres", "reject", "reject-failed-and-non-gcr", 0, "rule")]),
}


@pytest.mark.parametrize("name", sorted(SEED_CASES))
def test_seed_examples_decide_and_explain(name: str) -> None:
    admitted, containers = SEED_CASES[name]
    result = CliRunner().invoke(
        admit_command,
        [
            str(POLICIES),
            "--resource",
            str(EXAMPLES / "resources" / name),
            "--scans",
            str(SCANS),
            "--now",
            "2025-06-01T00:00:00Z",
            "--json",
        ],
    )
    assert result.exit_code == (0 if admitted else 4), result.output
    out = json.loads(result.output)
    assert out["decision"] == ("admit" if admitted else "reject") and out["allowed"] is admitted
    (res,) = out["resources"]
    got = [(c["container"], c["decision"], c["policy"], c["rule"], c["reason"]) for c in res["containers"]]
    assert got == [(c, d, f"ContainerAdmissionPolicy/{p}", r, why) for c, d, p, r, why in containers]
    for c in res["containers"]:
        assert c["image"] and c["explanation"].startswith(f"{c['type']} {c['container']!r} image {c['image']!r}")


def test_every_example_resource_has_a_case() -> None:
    assert {p.name for p in (EXAMPLES / "resources").glob("*.yaml")} == set(SEED_CASES)


def test_text_output_names_policy_rule_and_reason() -> None:
    result = CliRunner().invoke(
        admit_command,
        [
            str(POLICIES),
            "--resource",
            str(EXAMPLES / "resources" / "deployment-init-fails.yaml"),
            "--scans",
            str(SCANS),
            "--now",
            "2025-06-01T00:00:00Z",
        ],
    )
    assert result.exit_code == 4
    assert "Deployment production/frontend: REJECTED" in result.output
    assert (
        "reject initContainer wait-for-db (busybox:1.36): ContainerAdmissionPolicy/reject-failed-and-non-gcr rule 0"
        in result.output
    )
    assert "because image matches none of the patterns" in result.output


def test_seed_sample_semantics_directly(seed) -> None:
    adm, scans = seed
    d = decide(adm, pod("gcr.io/company/production-repository/x:1"), scans)  # Unknown status
    assert not d.allowed and d.containers[0].rule == 2 and d.containers[0].scan_status == "Unknown"
    # Status from the scan file for an image reference written differently (normalized lookup).
    d = decide(adm, pod("index.docker.io/library/busybox:1.36"), scans)
    assert d.containers[0].scan_status == "Pass" and d.containers[0].rule == 0
    # The unanchored end of the seed's pattern: anything below the repository.
    d = decide(
        adm,
        pod("gcr.io/company/production-repository/a/b/c:9"),
        ScanResults({normalize_image("gcr.io/company/production-repository/a/b/c:9"): ScanResult("Warn")}),
    )
    assert d.allowed and d.containers[0].rule == 1
    # The explicit ^: the repository path elsewhere in the reference is not the repository.
    d = decide(adm, pod("evil.io/gcr.io/company/production-repository/x:1"), scans)
    assert not d.allowed and d.containers[0].rule == 0


# --- scoping, ordering, fall-through ---


def test_no_policy_selects_means_admitted_and_said() -> None:
    adm = admission(policy("only-prod", [{"action": "Reject"}], ns_selector="env == 'prod'"))
    d = decide(adm, pod("anything"))
    assert d.allowed and d.selected == ()
    assert d.containers[0].reason == "no-policy"
    assert "no ContainerAdmissionPolicy selects" in d.message()


def test_selector_scopes_on_resource_labels() -> None:
    adm = admission(policy("web-only", [{"action": "Reject"}], selector="app == 'web'"))
    assert not decide(adm, pod("x", labels={"app": "web"})).allowed
    assert decide(adm, pod("x", labels={"app": "db"})).allowed
    assert decide(adm, pod("x")).allowed


def test_namespace_selector_scopes_on_namespace_labels() -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod", "labels": {"env": "prod"}}}
    adm = admission(
        ns,
        policy("prod", [{"action": "Reject"}], ns_selector="env == 'prod'"),
        policy("by-name", [{"action": "Reject"}], ns_selector="projectcalico.org/name == 'other'"),
    )
    assert not decide(adm, pod("x", ns="prod")).allowed
    assert decide(adm, pod("x", ns="dev")).allowed
    d = decide(adm, pod("x", ns="other"))  # a namespace with no manifest still has its name labels
    assert not d.allowed and d.containers[0].policy == "ContainerAdmissionPolicy/by-name"
    obj = pod("x")
    del obj["metadata"]["namespace"]  # no namespace: "default"
    assert resource_from_object(obj).namespace == "default"
    assert resource_from_object(pod("x", ns="a"), namespace="b").namespace == "b"  # the review's namespace wins


def test_order_decides_first_unset_last_ties_by_name() -> None:
    allow, reject = [{"action": "Allow"}], [{"action": "Reject"}]
    assert decide(admission(policy("a", reject, order=10), policy("b", allow, order=2)), pod("x")).allowed
    assert not decide(admission(policy("a", reject, order=10), policy("b", allow)), pod("x")).allowed
    assert not decide(admission(policy("a", reject), policy("b", allow)), pod("x")).allowed  # ties by name
    d = decide(admission(policy("b", reject, order=1), policy("a", allow, order=1)), pod("x"))
    assert d.allowed and d.containers[0].policy == "ContainerAdmissionPolicy/a"


def test_policy_without_matching_rule_falls_through_to_next_then_admits() -> None:
    no_match = [{"action": "Reject", "imagePath": {"operator": "IsOneOf", "values": ["^quay.io/"]}}]
    adm = admission(policy("first", no_match, order=1), policy("second", [{"action": "Reject"}], order=2))
    d = decide(adm, pod("gcr.io/x"))
    assert not d.allowed and d.containers[0].policy == "ContainerAdmissionPolicy/second"
    d = decide(admission(policy("first", no_match, order=1)), pod("gcr.io/x"))
    assert (
        d.allowed and d.containers[0].reason == "no-rule-matched" and d.selected == ("ContainerAdmissionPolicy/first",)
    )


def test_first_matching_rule_decides_and_rules_need_all_criteria() -> None:
    rules = [
        {
            "action": "Reject",
            "imagePath": {"operator": "IsOneOf", "values": ["^gcr.io/"]},
            "imageScanStatus": {"operator": "IsOneOf", "values": ["Fail"]},
        },
        {"action": "Allow", "imagePath": {"operator": "IsOneOf", "values": ["^gcr.io/"]}},
        {"action": "Reject"},
    ]
    adm = admission(policy("p", rules))
    scans = ScanResults()
    scans.add("gcr.io/bad:1", None, ScanResult("Fail"))
    scans.add("gcr.io/ok:1", None, ScanResult("Pass"))
    assert [decide(adm, pod(i), scans).containers[0].rule for i in ("gcr.io/bad:1", "gcr.io/ok:1", "quay.io/x")] == [
        0,
        1,
        2,
    ]


# --- each operator ---


@pytest.mark.parametrize(
    "operator, values, image, matches",
    [
        ("IsOneOf", ["^gcr.io/a/", "^quay.io/"], "quay.io/x:1", True),
        ("IsOneOf", ["^gcr.io/a/"], "gcr.io/b/x", False),
        ("IsNoneOf", ["^gcr.io/a/"], "gcr.io/b/x", True),
        ("IsNoneOf", ["^gcr.io/a/", "^gcr.io/b/"], "gcr.io/b/x", False),
        ("IsOneOf", ["nginx"], "docker.io/library/nginx:1.27", True),  # unanchored: matches anywhere
        ("IsOneOf", ["^nginx$"], "nginx:1.27", False),
        ("IsOneOf", [], "x", False),
        ("IsNoneOf", [], "x", True),
    ],
)
def test_image_path_operators(operator: str, values: list[str], image: str, matches: bool) -> None:
    adm = admission(policy("p", [{"action": "Reject", "imagePath": {"operator": operator, "values": values}}]))
    assert decide(adm, pod(image)).allowed is not matches


@pytest.mark.parametrize(
    "operator, values, status, matches",
    [
        ("IsOneOf", ["Pass", "Warn"], "Warn", True),
        ("IsOneOf", ["Pass", "Warn"], "Fail", False),
        ("IsOneOf", ["Pass"], None, False),
        ("IsOneOf", ["Unknown"], None, True),  # no scan result: Unknown
        ("IsNoneOf", ["Pass"], "Fail", True),
        ("IsNoneOf", ["Pass"], None, True),
        ("IsNoneOf", ["Fail", "Unknown"], None, False),
    ],
)
def test_scan_status_operators(operator: str, values: list[str], status: str | None, matches: bool) -> None:
    adm = admission(policy("p", [{"action": "Reject", "imageScanStatus": {"operator": operator, "values": values}}]))
    scans = ScanResults()
    if status:
        scans.add("img", None, ScanResult(status))
    assert decide(adm, pod("img"), scans).allowed is not matches


@pytest.mark.parametrize(
    "match, last_scan, matches",
    [
        ({"operator": "gt", "duration": {"days": 3}}, NOW - dt.timedelta(days=2), True),
        ({"operator": "gt", "duration": {"days": 3}}, NOW - dt.timedelta(days=4), False),
        ({"operator": "gt", "duration": {"days": 3}}, NOW - dt.timedelta(days=3), False),  # the edge matches neither
        ({"operator": "lt", "duration": {"days": 3}}, NOW - dt.timedelta(days=3), False),
        ({"operator": "lt", "duration": {"days": 3}}, NOW - dt.timedelta(days=3, seconds=1), True),
        ({"operator": "gt", "duration": {"months": 1}}, dt.datetime(2025, 5, 1, 0, 0, 1, tzinfo=UTC), True),
        ({"operator": "gt", "duration": {"months": 1}}, dt.datetime(2025, 5, 1, tzinfo=UTC), False),
        ({"operator": "lt", "duration": {"years": 1}}, dt.datetime(2024, 5, 31, 23, 59, tzinfo=UTC), True),
        ({"operator": "gt", "time": "2022-01-02T0:00:00Z"}, dt.datetime(2022, 1, 1, tzinfo=UTC), False),
        ({"operator": "gt", "time": "2022-01-02T0:00:00Z"}, dt.datetime(2022, 1, 3, tzinfo=UTC), True),
        ({"operator": "lt", "time": "2022-01-02T00:00:00+01:00"}, dt.datetime(2022, 1, 1, 23, 0, tzinfo=UTC), False),
        ({"operator": "lt", "time": "2022-01-02T00:00:00+01:00"}, dt.datetime(2022, 1, 1, 22, 59, tzinfo=UTC), True),
        ({"operator": "gt", "duration": {"days": 3}}, None, False),  # never scanned
        ({"operator": "lt", "duration": {"days": 3}}, None, False),
    ],
)
def test_last_scan_operators_and_edges(match: dict, last_scan: dt.datetime | None, matches: bool) -> None:
    adm = admission(policy("p", [{"action": "Reject", "imageLastScan": match}]))
    scans = ScanResults()
    scans.add("img", None, ScanResult("Pass", last_scan))
    assert decide(adm, pod("img"), scans).allowed is not matches


def test_freshness_example_uses_now() -> None:
    problems = Problems()
    adm = load_admission([str(EXAMPLES / "freshness")], problems)
    assert not problems.errors
    scans = ScanResults()
    scans.add("img", None, ScanResult("Pass", dt.datetime(2025, 5, 30, tzinfo=UTC)))
    assert decide(adm, pod("img"), scans, now=NOW).containers[0].rule == 0  # 2 days before NOW
    assert decide(adm, pod("img"), scans, now=NOW + dt.timedelta(days=2)).containers[0].reason == "no-rule-matched"
    scans.add("old", None, ScanResult("Pass", dt.datetime(2021, 12, 31, tzinfo=UTC)))
    d = decide(adm, pod("old"), scans, now=NOW)
    assert not d.allowed and d.containers[0].rule == 1


# --- resources ---

TEMPLATE = {
    "metadata": {"labels": {"app": "x"}},
    "spec": {
        "initContainers": [{"name": "init", "image": "bad/init"}],
        "containers": [{"name": "main", "image": "gcr.io/ok"}],
    },
}


@pytest.mark.parametrize(
    "api, kind, wrap",
    [
        ("apps/v1", "Deployment", lambda t: {"template": t}),
        ("apps/v1", "StatefulSet", lambda t: {"template": t}),
        ("apps/v1", "DaemonSet", lambda t: {"template": t}),
        ("apps/v1", "ReplicaSet", lambda t: {"template": t}),
        ("extensions/v1beta1", "Deployment", lambda t: {"template": t}),
        ("batch/v1", "Job", lambda t: {"template": t}),
        ("batch/v1", "CronJob", lambda t: {"jobTemplate": {"spec": {"template": t}}}),
        ("v1", "ReplicationController", lambda t: {"template": t}),
    ],
)
def test_every_pod_creating_kind_with_failing_init_container(api: str, kind: str, wrap) -> None:
    adm = admission(policy("p", [{"action": "Reject", "imagePath": {"operator": "IsNoneOf", "values": ["^gcr.io/"]}}]))
    obj = {"apiVersion": api, "kind": kind, "metadata": {"name": "w", "namespace": "n"}, "spec": wrap(TEMPLATE)}
    d = decide(adm, obj)
    assert not d.allowed
    assert [(c.container.type, c.container.name, c.decision) for c in d.containers] == [
        ("initContainer", "init", "reject"),
        ("container", "main", "admit"),
    ]
    assert "initContainer 'init' image 'bad/init': rejected by ContainerAdmissionPolicy/p rule 0" in d.message()


def test_ephemeral_containers_are_judged() -> None:
    adm = admission(policy("p", [{"action": "Reject", "imagePath": {"operator": "IsOneOf", "values": ["debug"]}}]))
    d = decide(adm, pod("gcr.io/app", ephemeral=("docker.io/debug:1",)))
    assert not d.allowed and d.containers[-1].container.type == "ephemeralContainer"


@pytest.mark.parametrize(
    "obj, fragment",
    [
        ({"apiVersion": "v1", "kind": "ConfigMap"}, "not a pod-creating resource"),
        ({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}}, "spec.containers: Required value"),
        (
            {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "a"}]}},
            "spec.containers[0].image: Required",
        ),
        (
            {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "a", "image": "x" * 70_000}]}},
            "at most",
        ),
        ({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {}}, "spec.template.spec: Required value"),
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"a": 1}}, "spec": {"containers": []}},
            "metadata.labels.a",
        ),
    ],
)
def test_unjudgeable_resources_raise_resource_error(obj: dict, fragment: str) -> None:
    with pytest.raises(ResourceError) as e:
        resource_from_object(obj)
    assert fragment in str(e.value)


# --- scan facts ---


def test_scans_file_errors_have_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "scans.yaml"
    f.write_text(
        textwrap.dedent("""\
        apiVersion: admission.pyclassify.io/v1
        kind: ImageScanResults
        results:
        - image: a
          status: Passed
        - digest: md5:1
          status: Pass
          lastScan: yesterday
        - status: Warn
        """)
    )
    problems = Problems()
    load_scans([f], problems)
    assert [str(p) for p in problems.errors] == [
        f'{f}:5: results[0].status: Unsupported value: \'Passed\': supported values: "Pass", "Warn", "Fail"',
        f"{f}:6: results[1].digest: Invalid value: 'md5:1': must be a digest such as sha256:<hex>",
        f"{f}:8: results[1].lastScan: Invalid value: 'yesterday': must be an RFC 3339 time (2006-01-02T15:04:05Z07:00)",
        f"{f}:9: results[2]: Required value: image or digest",
    ]


@pytest.mark.parametrize(
    "a, b",
    [
        ("nginx", "docker.io/library/nginx:latest"),
        ("library/nginx:1.2", "docker.io/library/nginx:1.2"),
        ("index.docker.io/foo/bar", "docker.io/foo/bar:latest"),
        ("localhost:5000/app", "localhost:5000/app:latest"),
        ("gcr.io/a/b@sha256:abc", "gcr.io/a/b@sha256:abc"),
        ("registry:5000/app:v1", "registry:5000/app:v1"),
    ],
)
def test_normalize_image(a: str, b: str) -> None:
    assert normalize_image(a) == b


def test_annotations_only_when_trusted_and_file_wins() -> None:
    adm = admission(
        policy(
            "p",
            [{"action": "Allow", "imageScanStatus": {"operator": "IsOneOf", "values": ["Pass"]}}, {"action": "Reject"}],
        )
    )
    obj = pod("gcr.io/a:1", "gcr.io/b:1")
    obj["metadata"]["annotations"] = {
        "admission.pyclassify.io/image-scans": json.dumps(
            {"gcr.io/a:1": {"status": "Pass", "lastScan": "2025-01-01T00:00:00Z"}, "gcr.io/b:1": {"status": "Pass"}}
        )
    }
    assert not decide(adm, obj).allowed  # untrusted: both Unknown
    scans = ScanResults()
    scans.add("gcr.io/b:1", None, ScanResult("Fail"))
    d = decide(adm, obj, scans, trust_annotations=True)
    assert [c.decision for c in d.containers] == ["admit", "reject"]
    assert d.containers[0].scan_source == "annotation"
    _, problems = scans_from_annotations({"admission.pyclassify.io/image-scans": "{not json"})
    assert problems and "invalid JSON" in problems[0]


# --- the command's other exits ---


def test_admit_invalid_input_exits_1_with_file_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: containersecurity.tigera.io/v1beta1\nkind: ContainerAdmissionPolicy\n"
        "metadata: {name: x}\nspec:\n  rules:\n  - action: Deny\n"
    )
    result = CliRunner().invoke(admit_command, [str(bad), "--resource", str(EXAMPLES / "resources" / "pod-pass.yaml")])
    assert result.exit_code == 1
    assert f"{bad}:6: spec.rules[0].action: Unsupported value: 'Deny'" in result.output
    res = tmp_path / "cm.yaml"
    res.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    result = CliRunner().invoke(admit_command, [str(POLICIES), "--resource", str(res), "--json"])
    assert result.exit_code == 1 and "kind: not a pod-creating resource" in result.output


def test_admit_usage_errors_exit_2() -> None:
    assert CliRunner().invoke(admit_command, [str(POLICIES)]).exit_code == 2  # no --resource
    result = CliRunner().invoke(admit_command, [str(POLICIES), "--resource", "x", "--now", "tomorrow"])
    assert result.exit_code == 2


def test_admit_multi_document_resource_rejects_if_any_does(tmp_path: Path) -> None:
    both = tmp_path / "both.yaml"
    both.write_text(
        (EXAMPLES / "resources" / "pod-pass.yaml").read_text()
        + "---\n"
        + (EXAMPLES / "resources" / "pod-non-gcr.yaml").read_text()
    )
    result = CliRunner().invoke(
        admit_command, [str(POLICIES), "--resource", str(both), "--scans", str(SCANS), "--json"]
    )
    assert result.exit_code == 4
    out = json.loads(result.output)
    assert [r["decision"] for r in out["resources"]] == ["admit", "reject"]


def test_module_exports() -> None:
    assert "Pod" in ev.POD_CREATING_KINDS and len(ev.POD_CREATING_KINDS) == 8
