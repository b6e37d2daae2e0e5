"""Strict field validation against the bundled API schemas (pyclassify.kinds.schema): fields a
kind's schema does not know and values of the wrong JSON type are errors naming the field (and
the field meant, when one is close), for every kind pyclassify reads; the native fast path and
the detailed walk agree; the bundled files are what scripts/update_schemas.py makes of its pins."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyclassify import kinds
from pyclassify.documents import Document, InvalidInput, Problems
from pyclassify.failsafe import CONFIG_KIND
from pyclassify.kinds import schema
from pyclassify.kinds.versions import kind_problem
from pyclassify.live import LiveProject
from pyclassify.loader import documents_of
from pyclassify.project import build_project, load_project

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "pyclassify" / "schemas"


def check(tmp_path: Path, text: str) -> tuple[object, list[str]]:
    f = tmp_path / "m.yaml"
    f.write_text(textwrap.dedent(text))
    project = load_project([str(f)])
    return project, [str(p).removeprefix(f"{f}:") for p in project.problems.errors]


NETWORK_POLICY = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: db, namespace: shop}\n"


# --- what strict decoding refuses -------------------------------------------------------------


def test_a_misspelt_spec_is_an_error_not_an_empty_policy(tmp_path):
    """`spce:` would load as a NetworkPolicy without spec: deny all ingress in the namespace."""
    project, errors = check(tmp_path, NETWORK_POLICY + "spce:\n  podSelector: {}\n")
    assert errors == ["4: spce: unknown field 'spce' (did you mean 'spec'?)"]
    assert project.policy_set.policies == ()
    assert project.invalid


def test_capitalised_top_level_fields_are_named(tmp_path):
    _, errors = check(
        tmp_path,
        """\
        apiVersion: networking.k8s.io/v1
        kind: NetworkPolicy
        Metadata: {name: db}
        Spec: {podSelector: {}}
        """,
    )
    assert errors[:2] == [
        "3: Metadata: unknown field 'Metadata' (did you mean 'metadata'?)",
        "4: Spec: unknown field 'Spec' (did you mean 'spec'?)",
    ]


def test_unknown_fields_in_metadata_ports_and_status(tmp_path):
    project, errors = check(
        tmp_path,
        """\
        apiVersion: v1
        kind: Pod
        metadata:
          name: web
          lables: {app: web}
        spec:
          containers:
          - name: web
            image: nginx
            ports:
            - {nmae: http, containerPort: 80}
        status:
          podIPz: 10.0.0.1
          phase: Running
          conditions: [{type: Ready, status: "True"}]
        """,
    )
    assert errors == [
        "5: metadata.lables: unknown field 'lables' (did you mean 'labels'?)",
        "11: spec.containers[0].ports[0].nmae: unknown field 'nmae' (did you mean 'name'?)",
        "13: status.podIPz: unknown field 'podIPz' (did you mean 'podIP'?)",
    ]
    assert project.invalid


def test_values_of_the_wrong_type(tmp_path):
    _, errors = check(
        tmp_path,
        """\
        apiVersion: v1
        kind: Pod
        metadata: {name: web, labels: {version: 1.0}}
        spec:
          hostNetwork: "yes"
          containers:
          - name: web
            ports: [{containerPort: "8080"}, {containerPort: 1099511627776}]
        """,
    )
    assert errors == [
        "3: metadata.labels.version: Invalid value: 1.0: must be of type string, not number (quote it)",
        "5: spec.hostNetwork: Invalid value: 'yes': must be of type boolean, not string",
        "8: spec.containers[0].ports[0].containerPort: Invalid value: '8080': must be of type integer, not string",
        "8: spec.containers[0].ports[1].containerPort: Invalid value: 1099511627776: out of range of int32",
    ]


def test_a_quoted_port_in_a_network_policy_is_no_port_name(tmp_path):
    """An IntOrString field takes the string, and the API server validates it as a port name."""
    _, errors = check(tmp_path, NETWORK_POLICY + "spec:\n  podSelector: {}\n  ingress: [{ports: [{port: '8080'}]}]\n")
    assert errors == ["6: spec.ingress[0].ports[0].port: Invalid value: '8080': must contain at least one letter (a-z)"]


def test_one_error_per_field(tmp_path):
    """The kind's own checks do not repeat a field the schema check reported."""
    _, errors = check(tmp_path, NETWORK_POLICY + "spec:\n  podSelector: {}\n  ingres: []\n  policyTypes: Ingress\n")
    assert errors == [
        "6: spec.ingres: unknown field 'ingres' (did you mean 'ingress'?)",
        "7: spec.policyTypes: Invalid value: 'Ingress': must be of type array, not string",
    ]


def test_what_the_schemas_allow(tmp_path):
    """Maps (additionalProperties), free-form objects, int-or-string, Quantity's string or number,
    null anywhere, and status fields pyclassify does not read but the schema knows."""
    project, errors = check(
        tmp_path,
        """\
        apiVersion: v1
        kind: Pod
        metadata:
          name: web
          creationTimestamp: null
          labels: {app.kubernetes.io/name: web, tier: ""}
          annotations: {example.com/anything: "{\\"json\\": true}"}
          managedFields:
          - manager: kubectl
            fieldsV1: {"f:metadata": {"f:labels": {".": {}}}}
        spec:
          containers:
          - name: web
            resources: {limits: {cpu: 1, memory: 512Mi}, requests: {cpu: 100m}}
            livenessProbe: {httpGet: {port: http}}
            readinessProbe: {tcpSocket: {port: 8080}}
        status:
          podIP: 10.0.0.1
          qosClass: Burstable
          containerStatuses:
          - {name: web, ready: true, restartCount: 0, image: nginx, imageID: "", state: {running: {}}}
        """,
    )
    assert errors == []
    assert project.inventory.endpoints[0].name == "web"


def test_custom_resources_metadata_is_object_meta(tmp_path):
    _, errors = check(
        tmp_path,
        """\
        apiVersion: projectcalico.org/v3
        kind: GlobalNetworkPolicy
        metadata: {name: deny, lables: {a: b}, annotations: {note: x}}
        spec:
          selector: all()
          ingress: [{action: Deny, sourec: {nets: [10.0.0.0/8]}}]
          order: "100"
        """,
    )
    assert errors == [
        "3: metadata.lables: unknown field 'lables' (did you mean 'labels'?)",
        "6: spec.ingress[0].sourec: unknown field 'sourec' (did you mean 'source'?)",
        "7: spec.order: Invalid value: '100': must be of type number, not string",
    ]


def test_a_field_the_schema_knows_and_pyclassify_cannot_judge_is_an_error(tmp_path):
    """Calico's http header matches: the (Enterprise) CRD has them; ignoring one would widen the
    rule."""
    _, errors = check(
        tmp_path,
        """\
        apiVersion: projectcalico.org/v3
        kind: GlobalNetworkPolicy
        metadata: {name: api}
        spec:
          selector: app == 'api'
          ingress:
          - action: Allow
            http: {headers: [{header: x-user, operator: In, values: [a]}]}
        """,
    )
    assert errors == [
        "8: spec.ingress[0].http.headers: field 'headers' is not supported by pyclassify: it cannot judge traffic by it"
    ]


def test_admin_network_policies_in_either_shape_v1alpha1_was_served_in(tmp_path):
    """network-policy-api v0.1.1 served peers as {namespaceSelector | sameLabels | notSameLabels}
    (policy-assistant writes them), later releases as a LabelSelector: both are taken. The KEP's
    `related: Self` was in no release: an API server refuses it, and so does pyclassify."""
    head = (
        "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata: {name: a}\n"
        "spec:\n  priority: 10\n  subject: {namespaces: {}}\n  ingress:\n  - action: Allow\n    from:\n"
    )
    project, errors = check(
        tmp_path, head + "    - namespaces: {namespaceSelector: {}}\n    - namespaces: {sameLabels: [tenant]}\n"
    )
    assert errors == [] and len(project.policy_set.policies) == 1
    project, errors = check(tmp_path, head + "    - namespaces: {matchLabels: {team: a}}\n")
    assert errors == [] and len(project.policy_set.policies) == 1
    _, errors = check(tmp_path, head + "    - namespaces: {related: Self}\n")
    assert errors == ["10: spec.ingress[0].from[0].namespaces.related: unknown field 'related'"]


def test_a_list_without_items(tmp_path):
    _, errors = check(
        tmp_path,
        "apiVersion: v1\nkind: List\nitmes: []\n---\n"
        "apiVersion: v1\nkind: PodList\nmetadata: {resourceVersion: '1', continu: x}\n",
    )
    assert errors == [
        "3: itmes: unknown field 'itmes' (did you mean 'items'?)",
        "7: metadata.continu: unknown field 'continu' (did you mean 'continue'?)",
    ]


def test_a_list_read_whole_has_its_own_fields_checked():
    problems = Problems()
    docs = documents_of(
        {
            "apiVersion": "v1",
            "kind": "List",
            "metadta": {},
            "items": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}],
        },
        "list.json",
        problems,
    )
    assert [d.kind for d in docs] == ["Namespace"]
    assert [(p.path, p.message) for p in problems.errors] == [
        ("metadta", "unknown field 'metadta' (did you mean 'metadata'?)")
    ]


def test_kinds_without_a_schema_are_skipped_not_judged(tmp_path):
    project, errors = check(tmp_path, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\nbogus: 1\n")
    assert errors == [] and project.skipped == {"v1/ConfigMap": 1}


def test_versions_of_a_kind_are_those_it_has_a_schema_in():
    assert kind_problem("batch/v1beta1", "Job") == (
        "apiVersion",
        "unknown version 'batch/v1beta1' of Job: this tool reads batch/v1",
    )
    assert kind_problem("apps/v1beta1", "DaemonSet")[1].endswith("this tool reads apps/v1, apps/v1beta2")
    assert kind_problem("extensions/v1beta1", "NetworkPolicy") is None
    assert kind_problem("crd.projectcalico.org/v1", "Profile") is None


# --- every kind ---------------------------------------------------------------------------------

#: Kinds read outside the registry's tables.
OTHER_KINDS = {CONFIG_KIND, ("containersecurity.tigera.io", "ContainerAdmissionPolicy"), ("", "List")}


def _read_kinds() -> set[tuple[str, str]]:
    return set(kinds.POLICY_KINDS) | set(kinds.INVENTORY_KINDS) | OTHER_KINDS


def test_every_kind_pyclassify_reads_has_a_schema_and_a_source():
    bundled = schema._checker().kinds
    for group, kind in sorted(_read_kinds()):
        groups = [group] + [alias for alias, folded in kinds._GROUP_ALIASES.items() if folded == group]
        versions = [v for g in groups for v in schema.schema_versions(g, kind)]
        assert versions, f"no schema of {group or 'core'} {kind}"
    files = {name: json.loads((SCHEMAS / name).read_text()) for name in schema.SCHEMA_FILES}
    for data in files.values():
        assert data["sources"] and all(("version" in s and "sum" in s) or "document" in s for s in data["sources"])
        for key, entry in data["kinds"].items():
            assert key in bundled
            for shape in entry.get("anyOf", [entry]):
                assert ("module" in shape and "path" in shape) or "source" in shape, key


@pytest.mark.parametrize("key", [k for k in schema._checker().kinds if k != "v1/List"])
def test_every_kind_refuses_unknown_fields_at_the_top_and_in_metadata(key):
    api_version, _, kind = key.rpartition("/")
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "lables": {}}, "spce": {}}
    found = schema.field_problems(obj)
    has_spec = "spec" in schema.schemas().roots(api_version, kind)[0].props  # EndpointSlice, ServiceAccount: none
    assert found == [
        (("metadata", "lables"), "unknown field 'lables' (did you mean 'labels'?)"),
        (("spce",), "unknown field 'spce'" + (" (did you mean 'spec'?)" if has_spec else "")),
    ]


# --- the native fast path and the detailed walk agree --------------------------------------------

_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False), st.text(max_size=5)
)


def _examples() -> list[dict]:
    out = []
    for f in sorted((REPO / "examples").rglob("*.yaml")):
        problems = Problems()
        project_docs = list(__import__("pyclassify.loader", fromlist=["iter_paths"]).iter_paths([str(f)], problems))
        out += [d.obj for d in project_docs if schema._checker().check(d.obj) is not None]
    return out


EXAMPLES = _examples()


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, path + (i,))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_native_and_detailed_walks_agree(data):
    """An object conforms natively exactly when the detailed walk finds nothing, however it is
    mutated: a field renamed, added, or a value of another type anywhere."""
    obj = copy.deepcopy(data.draw(st.sampled_from(EXAMPLES)))
    for _ in range(data.draw(st.integers(0, 3))):
        path = data.draw(st.sampled_from(list(_paths(obj))[1:]))
        parent = obj
        for part in path[:-1]:
            parent = parent[part]
        action = data.draw(st.sampled_from(["value", "rename", "add"]))
        if action == "value":
            parent[path[-1]] = data.draw(st.one_of(_SCALARS, st.just({}), st.just([]), st.just({"x": 1})))
        elif action == "rename" and isinstance(parent, dict):
            parent[data.draw(st.text(min_size=1, max_size=6))] = parent.pop(path[-1])
        elif isinstance(parent, dict):
            parent[data.draw(st.text(min_size=1, max_size=6))] = data.draw(_SCALARS)
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return
    native = schema._checker().check(obj)
    if native is None:
        return
    walks = []
    for root in schema.schemas().roots(api_version, kind):
        found: list = []
        schema._walk(obj, root, (), found)
        walks.append(found)
    assert native == any(not found for found in walks), walks


# --- every path that takes objects --------------------------------------------------------------


def test_the_live_path_rejects_an_object_with_an_unknown_field():
    """A watch event or a changed file: rejected alone (InvalidInput), nothing changes."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop"},
        "status": {"podIP": "10.0.0.1"},
    }
    project = build_project([Document(pod, "pod.yaml", 1)], Problems())
    live = LiveProject(project)
    bad = copy.deepcopy(pod)
    bad["status"] = {"podIPz": "10.0.0.2"}
    with pytest.raises(InvalidInput) as exc:
        live.apply(pod, bad)
    assert "status.podIPz: unknown field 'podIPz' (did you mean 'podIP'?)" in str(exc.value)
    assert [str(ip) for e in live.snapshot().inventory.endpoints for ip in e.ips] == ["10.0.0.1"]


def test_admission_policies_and_resources_are_checked(tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "apiVersion: containersecurity.tigera.io/v1beta1\nkind: ContainerAdmissionPolicy\n"
        "metadata: {name: p}\nspec:\n  rulse: []\n"
    )
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n"
        "spec:\n  containers: [{name: a, image: b, imagePullPolcy: Always}]\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pyclassify", "admit", str(policy), "--resource", str(pod)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert f"{policy}:5: spec.rulse: unknown field 'rulse' (did you mean 'rules'?)" in out.stderr
    assert (
        f"{pod}:5: spec.containers[0].imagePullPolcy: unknown field 'imagePullPolcy' (did you mean 'imagePullPolicy'?)"
    ) in out.stderr


# --- the bundled files ----------------------------------------------------------------------------


def _script():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import update_schemas
    finally:
        sys.path.pop(0)
    return update_schemas


def test_the_bundled_schemas_are_what_the_pins_give(tmp_path):
    """scripts/update_schemas.py, from its pinned module zips (hash-checked), writes exactly the
    bundled files. Needs the zips in a module cache (the script's or Go's): skipped otherwise."""
    script = _script()
    missing = [str(m) for m in script.PINS if script.cached_zip(m) is None]
    if missing:
        pytest.skip(
            f"module zips not cached ({', '.join(missing)}): scripts/update_schemas.py --fetch "
            "(scripts/test.sh runs it)"
        )
    files = script.generate(script.Modules(offline=True))
    assert sorted(files) == sorted(schema.SCHEMA_FILES)
    for name, data in files.items():
        assert (SCHEMAS / name).read_bytes() == data, f"{name} differs from what scripts/update_schemas.py writes"
    recorded = {
        (s["module"], s["version"], s["sum"]) for n in files for s in json.loads(files[n])["sources"] if "module" in s
    }
    assert recorded == {(m.path, m.version, m.sum) for m in script.PINS}
