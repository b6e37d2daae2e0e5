#!/usr/bin/env python3
"""Write pyclassify/schemas/*.json: the API schemas of every kind pyclassify reads, as the API
servers that serve those kinds define them, trimmed to what strict decoding judges.

    .venv/bin/python scripts/update_schemas.py           # (re)write pyclassify/schemas/
    .venv/bin/python scripts/update_schemas.py --check   # exit 1 if a bundled file differs
    .venv/bin/python scripts/update_schemas.py --fetch   # only cache the pinned module zips
                                                         # (tests/kinds/test_schema.py compares)

Every schema comes from a Go module fetched from the Go module proxy at a pinned version and
checked against its pinned hash (the ``h1:`` the checksum database holds, or for the Tigera
operator, which it has no entry for, the hash scripts/kube-testenv.sh pins):

- Kubernetes' own kinds: the OpenAPI v3 documents of k8s.io/kubernetes (api/openapi-spec/v3,
  one per group-version) at the release the tests' kube-apiserver is built from. Versions that
  release no longer serves (extensions/v1beta1, apps/v1beta1 and v1beta2 until 1.15; batch and
  discovery.k8s.io v1beta1 until 1.24) come from the last release that served them; what they
  refer to outside their own group-version (PodTemplateSpec, ObjectMeta, ...) resolves in the
  current release, whose v1 types only ever gained fields.
- AdminNetworkPolicy, BaselineAdminNetworkPolicy (v1alpha1) and ClusterNetworkPolicy
  (v1alpha2): the experimental-channel CRDs of sigs.k8s.io/network-policy-api. v1alpha1 was
  served in two shapes (v0.1.1's peers ``namespaces: {namespaceSelector | sameLabels |
  notSameLabels}``, the released ``namespaces: <LabelSelector>``): a kind's entry lists both
  (``anyOf``), an object conforms to either. The KEP's ``related: Self`` was in no release.
- Calico (projectcalico.org/v3 as calicoctl prints it, crd.projectcalico.org/v1 as kubectl
  does: one schema, the CRDs are generated from the v3 types): the CRDs the Tigera operator
  embeds, its Calico Enterprise set (a superset of the open-source one: ``domains``,
  ``allowedEgressDomains``). Profile has no CRD there: its spec is the three fields of
  ``ProfileSpec`` in github.com/projectcalico/api's generated OpenAPI (the version the operator
  requires; checked here), its rules the Rule schema of the NetworkPolicy CRD.
- ContainerAdmissionPolicy (containersecurity.tigera.io/v1beta1) is published nowhere as a
  schema: ``CONTAINER_ADMISSION_POLICY`` below is written from Calico Cloud's reference page
  (the project's seed document), and the file says so.

Trimming keeps, per node: ``type`` (a list where the schema allows alternatives, as Quantity's
string or number), ``properties``, ``additionalProperties``, ``items``, ``$ref`` (shared
Kubernetes definitions), ``format`` of integers, ``x-kubernetes-int-or-string`` and
``x-kubernetes-preserve-unknown-fields`` (what a free-form Kubernetes object such as
RawExtension means too). Descriptions, defaults, enums and other value rules are left out:
pyclassify's kinds code checks values, as the API servers' validation does.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import re
import sys
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "pyclassify" / "schemas"
PROXY = os.environ.get("GOPROXY", "https://proxy.golang.org").split(",")[0].rstrip("/")
if not PROXY.startswith("http"):
    PROXY = "https://proxy.golang.org"


@dataclass(frozen=True)
class Module:
    path: str
    version: str
    sum: str  # the module zip's h1: hash

    def __str__(self) -> str:
        return f"{self.path}@{self.version}"


# The versions scripts/kube-testenv.sh builds the tests' API server and CRDs from.
K8S = Module("k8s.io/kubernetes", "v1.34.4", "h1:Yy6R4QB8C9kJPp25GFqEvX5XQwY5qzKeqD0Xx6oAcmk=")
K8S_1_24 = Module("k8s.io/kubernetes", "v1.24.17", "h1:+4+5VIoxcDv35PnVELouMdDC58AQF/sWs+hjjr4Ra44=")
K8S_1_15 = Module("k8s.io/kubernetes", "v1.15.12", "h1:qfh+43qBbugow5Km/j9RGoAhM/rKajFb/izO4f4qltc=")
NPAPI = Module("sigs.k8s.io/network-policy-api", "v0.1.7", "h1:obY2FTEidLXVdRYu7gJ4q1RYE57pBnrpMqoE2LZgp4g=")
# The first shape of v1alpha1 (namespaces: {namespaceSelector | sameLabels | notSameLabels}),
# which policy-assistant writes and pyclassify reads beside the released one.
NPAPI_V0_1_1 = Module("sigs.k8s.io/network-policy-api", "v0.1.1", "h1:KDW+AkvCCQI3h8yH8j0hurhvPLNtLeVvmZoqtMaG9ew=")
# ClusterNetworkPolicy (v1alpha2) first ships in v0.3.0.
NPAPI_CNP = Module("sigs.k8s.io/network-policy-api", "v0.3.0", "h1:RL6fVXiix9IW1pj0ImkW645m+EWmb3dBGCiW19bg5+k=")
OPERATOR = Module("github.com/tigera/operator", "v1.39.0", "h1:l5dIRCfnigUAH6Aa7+SUf+0yuoZQNThbx1XRuhFGVko=")
# The projectcalico/api version OPERATOR's go.mod requires (checked when it is read).
CALICO_API = Module("github.com/projectcalico/api", "v0.0.0-20240708202104-e3f70b269c2c",
                    "h1:eFyfeRDV94LA3tgbG2EC5W02dg3QUdltHc2jxhTQMCw=")

PINS = (K8S, K8S_1_24, K8S_1_15, NPAPI, NPAPI_V0_1_1, NPAPI_CNP, OPERATOR, CALICO_API)

# Kubernetes kinds: (apiVersion, kind) -> (module, OpenAPI document in it).
_V3 = "api/openapi-spec/v3/"
KUBERNETES_KINDS: dict[tuple[str, str], tuple[Module, str]] = {
    **{("v1", k): (K8S, _V3 + "api__v1_openapi.json")
       for k in ("Namespace", "Pod", "Node", "Service", "ServiceAccount", "ReplicationController")},
    ("networking.k8s.io/v1", "NetworkPolicy"): (K8S, _V3 + "apis__networking.k8s.io__v1_openapi.json"),
    ("discovery.k8s.io/v1", "EndpointSlice"): (K8S, _V3 + "apis__discovery.k8s.io__v1_openapi.json"),
    **{("apps/v1", k): (K8S, _V3 + "apis__apps__v1_openapi.json")
       for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")},
    **{("batch/v1", k): (K8S, _V3 + "apis__batch__v1_openapi.json") for k in ("Job", "CronJob")},
    ("batch/v1beta1", "CronJob"): (K8S_1_24, _V3 + "apis__batch__v1beta1_openapi.json"),
    ("discovery.k8s.io/v1beta1", "EndpointSlice"): (K8S_1_24, _V3 + "apis__discovery.k8s.io__v1beta1_openapi.json"),
    **{("extensions/v1beta1", k): (K8S_1_15, "api/openapi-spec/swagger.json")
       for k in ("Deployment", "DaemonSet", "ReplicaSet", "NetworkPolicy")},
    **{("apps/v1beta1", k): (K8S_1_15, "api/openapi-spec/swagger.json") for k in ("Deployment", "StatefulSet")},
    **{("apps/v1beta2", k): (K8S_1_15, "api/openapi-spec/swagger.json")
       for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")},
}
# The package prefix of each group-version's own definitions, by the release it is taken from.
_OWN_PREFIX = {
    "batch/v1beta1": "io.k8s.api.batch.v1beta1.",
    "discovery.k8s.io/v1beta1": "io.k8s.api.discovery.v1beta1.",
    "extensions/v1beta1": "io.k8s.api.extensions.v1beta1.",
    "apps/v1beta1": "io.k8s.api.apps.v1beta1.",
    "apps/v1beta2": "io.k8s.api.apps.v1beta2.",
}
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
LIST_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"

_NPAPI_CRDS = "config/crd/experimental/policy.networking.k8s.io_{}.yaml"
_NPAPI_V0_1_1_CRDS = "config/crd/policy.networking.k8s.io_{}.yaml"
# kind -> its schemas: an object conforms when it conforms to one of them (two releases served
# v1alpha1 in different shapes; the first listed is the current one, which problems are told in
# unless the other fits the object better).
NETWORK_POLICY_API_KINDS: dict[tuple[str, str], list[tuple[Module, str]]] = {
    ("policy.networking.k8s.io/v1alpha1", "AdminNetworkPolicy"): [
        (NPAPI, _NPAPI_CRDS.format("adminnetworkpolicies")),
        (NPAPI_V0_1_1, _NPAPI_V0_1_1_CRDS.format("adminnetworkpolicies"))],
    ("policy.networking.k8s.io/v1alpha1", "BaselineAdminNetworkPolicy"): [
        (NPAPI, _NPAPI_CRDS.format("baselineadminnetworkpolicies")),
        (NPAPI_V0_1_1, _NPAPI_V0_1_1_CRDS.format("baselineadminnetworkpolicies"))],
    ("policy.networking.k8s.io/v1alpha2", "ClusterNetworkPolicy"): [
        (NPAPI_CNP, _NPAPI_CRDS.format("clusternetworkpolicies"))],
}

_CALICO_CRDS = "pkg/crds/enterprise/crd.projectcalico.org_{}.yaml"
CALICO_KINDS: dict[str, str] = {  # kind -> CRD plural
    "GlobalNetworkPolicy": "globalnetworkpolicies",
    "NetworkPolicy": "networkpolicies",
    "StagedGlobalNetworkPolicy": "stagedglobalnetworkpolicies",
    "StagedNetworkPolicy": "stagednetworkpolicies",
    "StagedKubernetesNetworkPolicy": "stagedkubernetesnetworkpolicies",
    "Tier": "tiers",
    "HostEndpoint": "hostendpoints",
    "GlobalNetworkSet": "globalnetworksets",
    "NetworkSet": "networksets",
    "FelixConfiguration": "felixconfigurations",
}
CALICO_VERSIONS = ("projectcalico.org/v3", "crd.projectcalico.org/v1")
_PROFILE_SPEC_SOURCE = "pkg/openapi/openapi_generated.go"

# Written from Calico Cloud's ContainerAdmissionPolicy reference documentation: no CRD or
# OpenAPI document of this kind is published.
_STRING_MATCH = {"type": "object", "properties": {"operator": {"type": "string"},
                                                  "values": {"type": "array", "items": {"type": "string"}}}}
CONTAINER_ADMISSION_POLICY = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"$ref": f"#/definitions/{OBJECT_META}"},
        "spec": {"type": "object", "properties": {
            "order": {"type": "number"},
            "selector": {"type": "string"},
            "namespaceSelector": {"type": "string"},
            "rules": {"type": "array", "items": {"type": "object", "properties": {
                "action": {"type": "string"},
                "imagePath": _STRING_MATCH,
                "imageScanStatus": _STRING_MATCH,
                "imageLastScan": {"type": "object", "properties": {
                    "operator": {"type": "string"},
                    "duration": {"type": "object", "properties": {
                        "days": {"type": "integer"}, "months": {"type": "integer"}, "years": {"type": "integer"}}},
                    "time": {"type": "string"},
                }},
            }}},
        }},
    },
}

# A List document (metav1.List: kubectl's `kind: List`), which no OpenAPI document defines: its
# items are objects of their own, each checked against its kind.
LIST = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"$ref": f"#/definitions/{LIST_META}"},
        "items": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    },
}


# --- fetching ---------------------------------------------------------------------------------


def _escape(path: str) -> str:
    """A module path as the proxy and the module cache spell it (upper case as !lower)."""
    return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), path)


def h1(data: bytes) -> str:
    """The h1: hash of a module zip (golang.org/x/mod/sumdb/dirhash Hash1)."""
    z = zipfile.ZipFile(io.BytesIO(data))
    names = sorted(i.filename for i in z.infolist() if not i.filename.endswith("/"))
    summary = "".join(f"{hashlib.sha256(z.read(n)).hexdigest()}  {n}\n" for n in names)
    return "h1:" + base64.b64encode(hashlib.sha256(summary.encode()).digest()).decode()


def _caches() -> list[Path]:
    own = Path(os.environ.get("PYCLASSIFY_SCHEMA_CACHE")
               or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pyclassify-schemas")
    gomod = Path(os.environ.get("GOMODCACHE") or Path(os.environ.get("GOPATH") or Path.home() / "go") / "pkg" / "mod")
    return [own, gomod / "cache" / "download"]


def cached_zip(module: Module) -> Path | None:
    """Where ``module``'s zip is cached already (this script's cache or Go's), if anywhere."""
    rel = Path(_escape(module.path)) / "@v" / f"{_escape(module.version)}.zip"
    return next((c / rel for c in _caches() if (c / rel).is_file()), None)


class Modules:
    """Module zips, fetched once each and checked against their pinned hash."""

    def __init__(self, offline: bool = False) -> None:
        self.offline = offline
        self._zips: dict[Module, zipfile.ZipFile] = {}

    def zip(self, module: Module) -> zipfile.ZipFile:
        if module not in self._zips:
            self._zips[module] = zipfile.ZipFile(io.BytesIO(self._fetch(module)))
        return self._zips[module]

    def _fetch(self, module: Module) -> bytes:
        path = cached_zip(module)
        if path is not None:
            data = path.read_bytes()
        elif self.offline:
            raise SystemExit(f"update_schemas: {module} is not cached and --offline was given")
        else:
            url = f"{PROXY}/{_escape(module.path)}/@v/{_escape(module.version)}.zip"
            print(f"update_schemas: fetching {url}", file=sys.stderr)
            with urllib.request.urlopen(url, timeout=300) as r:
                data = r.read()
        got = h1(data)
        if got != module.sum:
            raise SystemExit(f"update_schemas: {module} has hash {got}, expected {module.sum}")
        if path is None:
            dest = _caches()[0] / _escape(module.path) / "@v" / f"{_escape(module.version)}.zip"
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(dest)
        return data

    def read(self, module: Module, path: str) -> bytes:
        return self.zip(module).read(f"{module.path}@{module.version}/{path}")


# --- trimming ---------------------------------------------------------------------------------


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def trim(node: Any, refs: set[str], free_objects: bool) -> dict[str, Any]:
    """One schema node with only what strict decoding judges. ``refs`` collects the definitions
    it refers to. ``free_objects``: an object node without properties is free-form (Kubernetes'
    RawExtension, FieldsV1); in a CRD it holds nothing (its fields would be pruned)."""
    if not isinstance(node, dict):
        return {}
    if "$ref" in node:
        name = _ref_name(node["$ref"])
        refs.add(name)
        return {"$ref": f"#/definitions/{name}"}
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return trim(all_of[0], refs, free_objects)
    out: dict[str, Any] = {}
    if node.get("x-kubernetes-int-or-string") or node.get("format") == "int-or-string":
        return {"x-kubernetes-int-or-string": True}
    types = node.get("type")
    alternatives = node.get("oneOf") or node.get("anyOf")
    if types is None and isinstance(alternatives, list) and alternatives and all(
            isinstance(a, dict) and set(a) == {"type"} for a in alternatives):
        types = [a["type"] for a in alternatives]  # Quantity: a string or a number
    if types is not None:
        out["type"] = types
    if types == "integer" and node.get("format") in ("int32", "int64"):
        out["format"] = node["format"]
    if node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-embedded-resource"):
        out["x-kubernetes-preserve-unknown-fields"] = True
    props = node.get("properties")
    if isinstance(props, dict):
        out["properties"] = {k: trim(v, refs, free_objects) for k, v in sorted(props.items())}
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = trim(extra, refs, free_objects)
    elif extra is True:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "items" in node:
        out["items"] = trim(node["items"], refs, free_objects)
    if types == "object" and "properties" not in out and "additionalProperties" not in out:
        if free_objects:
            out["x-kubernetes-preserve-unknown-fields"] = True
        elif "x-kubernetes-preserve-unknown-fields" not in out:
            out["properties"] = {}
    return out


def _definitions(document: dict[str, Any]) -> dict[str, Any]:
    """The named schemas of an OpenAPI document (v3 components, or v2 definitions)."""
    return document.get("components", {}).get("schemas") or document.get("definitions") or {}


def _kind_definition(defs: dict[str, Any], api_version: str, kind: str) -> str:
    group, _, version = api_version.rpartition("/")
    for name, schema in defs.items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or ():
            if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) == (group, version, kind):
                return name
    raise SystemExit(f"update_schemas: no definition of {api_version} {kind}")


def kubernetes(modules: Modules) -> dict[str, Any]:
    documents: dict[tuple[Module, str], dict[str, Any]] = {}

    def defs_of(module: Module, path: str) -> dict[str, Any]:
        if (module, path) not in documents:
            documents[module, path] = _definitions(json.loads(modules.read(module, path)))
        return documents[module, path]

    # Every definition of the current release, by name (a name is the same type in every
    # group-version document that carries it).
    current: dict[str, tuple[str, Any]] = {}
    for (_, _), (module, path) in sorted(KUBERNETES_KINDS.items()):
        if module == K8S:
            for name, schema in defs_of(module, path).items():
                current.setdefault(name, (path, schema))
    for name, schema in defs_of(K8S, _V3 + "api__v1_openapi.json").items():
        current.setdefault(name, (_V3 + "api__v1_openapi.json", schema))

    kinds: dict[str, Any] = {}
    out_defs: dict[str, Any] = {}
    wanted: list[tuple[str, Module, str]] = []  # (definition, module, document) still to trim
    for (api_version, kind), (module, path) in sorted(KUBERNETES_KINDS.items()):
        name = _kind_definition(defs_of(module, path), api_version, kind)
        kinds[f"{api_version}/{kind}"] = {"$ref": f"#/definitions/{name}", "module": str(module), "path": path}
        wanted.append((name, module, path))
    wanted.append((LIST_META, K8S, _V3 + "api__v1_openapi.json"))
    while wanted:
        name, module, path = wanted.pop()
        if name in out_defs:
            continue
        own = module != K8S and any(name.startswith(p) for p in _OWN_PREFIX.values())
        if own:
            schema = defs_of(module, path)[name]
        else:
            if name not in current:
                raise SystemExit(f"update_schemas: {name} (from {module} {path}) is not in {K8S}")
            path, schema = current[name]
            module = K8S
        refs: set[str] = set()
        out_defs[name] = trim(schema, refs, free_objects=True)
        wanted.extend((r, module, path) for r in sorted(refs))
    kinds["v1/List"] = {"$ref": "#/definitions/List", "source": "metav1.List (k8s.io/apimachinery "
                        "pkg/apis/meta/v1): apiVersion, kind, metadata (ListMeta), items; no OpenAPI document "
                        "defines it"}
    out_defs["List"] = LIST
    return {"sources": [_source(m) for m in (K8S, K8S_1_24, K8S_1_15)], "kinds": kinds,
            "definitions": dict(sorted(out_defs.items()))}


def _crd_version_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise SystemExit(f"update_schemas: CRD {crd['metadata']['name']} has no version {version}")


def _crd_root(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """A CRD's schema as the API server applies it: its metadata is ObjectMeta."""
    refs: set[str] = set()
    root = trim(schema, refs, free_objects=False)
    root.setdefault("properties", {})["metadata"] = {"$ref": f"#/definitions/{OBJECT_META}"}
    root["properties"].setdefault("apiVersion", {"type": "string"})
    root["properties"].setdefault("kind", {"type": "string"})
    assert not refs, f"{name}: a CRD schema refers to {refs}"
    return root


def _definition_name(api_version: str, kind: str) -> str:
    """``policy.networking.k8s.io/v1alpha1``, ``AdminNetworkPolicy`` ->
    ``policy.networking.k8s.io.v1alpha1.AdminNetworkPolicy`` (a JSON pointer has no slash in it)."""
    return f"{api_version.replace('/', '.')}.{kind}"


def network_policy_api(modules: Modules) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    for (api_version, kind), schemas in sorted(NETWORK_POLICY_API_KINDS.items()):
        shapes = []
        for i, (module, path) in enumerate(schemas):
            crd = yaml.safe_load(modules.read(module, path))
            name = _definition_name(api_version, kind) + ("" if i == 0 else f"@{module.version}")
            defs[name] = _crd_root(_crd_version_schema(crd, api_version.rpartition("/")[2]), name)
            shapes.append({"$ref": f"#/definitions/{name}", "module": str(module), "path": path})
        kinds[f"{api_version}/{kind}"] = shapes[0] if len(shapes) == 1 else {"anyOf": shapes}
    return {"sources": [_source(m) for m in (NPAPI, NPAPI_V0_1_1, NPAPI_CNP)], "kinds": kinds, "definitions": defs}


def _profile_spec_fields(modules: Modules) -> list[str]:
    """The fields of ProfileSpec in projectcalico/api's generated OpenAPI definitions."""
    go_mod = modules.read(OPERATOR, "go.mod").decode()
    required = re.search(rf"^\s*{re.escape(CALICO_API.path)} (\S+)", go_mod, re.M)
    if required is None or required.group(1) != CALICO_API.version:
        raise SystemExit(f"update_schemas: {OPERATOR} requires {CALICO_API.path} "
                         f"{required.group(1) if required else '(nothing)'}, this script pins {CALICO_API.version}")
    text = modules.read(CALICO_API, _PROFILE_SPEC_SOURCE).decode()
    body = re.search(r"func schema_pkg_apis_projectcalico_v3_ProfileSpec\(.*?\n}\n", text, re.S)
    if body is None:
        raise SystemExit(f"update_schemas: no ProfileSpec in {CALICO_API} {_PROFILE_SPEC_SOURCE}")
    # The property names are the map keys one level inside Properties.
    props = body.group(0).split("Properties: map[string]spec.Schema{", 1)[1]
    return re.findall(r'^\t{5}"(\w+)": \{', props, re.M)


def calico(modules: Modules) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    for kind, plural in sorted(CALICO_KINDS.items()):
        path = _CALICO_CRDS.format(plural)
        crd = yaml.safe_load(modules.read(OPERATOR, path))
        name = _definition_name(CALICO_VERSIONS[1], kind)
        defs[name] = _crd_root(_crd_version_schema(crd, "v1"), name)
        for api_version in CALICO_VERSIONS:
            kinds[f"{api_version}/{kind}"] = {"$ref": f"#/definitions/{name}", "module": str(OPERATOR), "path": path}
    fields = _profile_spec_fields(modules)
    if sorted(fields) != ["egress", "ingress", "labelsToApply"]:
        raise SystemExit(f"update_schemas: ProfileSpec has fields {fields}: update the Profile schema")
    rules = defs[_definition_name(CALICO_VERSIONS[1], "NetworkPolicy")]["properties"]["spec"]["properties"]["ingress"]
    profile = _definition_name(CALICO_VERSIONS[1], "Profile")
    defs[profile] = {"type": "object", "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"$ref": f"#/definitions/{OBJECT_META}"},
        "spec": {"type": "object", "properties": {
            "ingress": rules,
            "egress": rules,
            "labelsToApply": {"type": "object", "additionalProperties": {"type": "string"}},
        }},
    }}
    for api_version in CALICO_VERSIONS:
        kinds[f"{api_version}/Profile"] = {
            "$ref": f"#/definitions/{profile}", "module": str(CALICO_API), "path": _PROFILE_SPEC_SOURCE,
            "source": f"ProfileSpec's fields from {CALICO_API} {_PROFILE_SPEC_SOURCE}; its rules are the "
                      f"Rule schema of {OPERATOR} {_CALICO_CRDS.format('networkpolicies')}"}
    return {"sources": [_source(m) for m in (OPERATOR, CALICO_API)], "kinds": kinds, "definitions": defs}


def container_security() -> dict[str, Any]:
    api_version, kind = "containersecurity.tigera.io/v1beta1", "ContainerAdmissionPolicy"
    name = _definition_name(api_version, kind)
    return {
        "sources": [{"document": "Calico Cloud reference: Container admission policy "
                                 "(ContainerAdmissionPolicy), the seed document of this kind"}],
        "kinds": {f"{api_version}/{kind}": {"$ref": f"#/definitions/{name}",
                         "source": "written in scripts/update_schemas.py from the reference page: "
                                   "no CRD or OpenAPI document of this kind is published"}},
        "definitions": {name: CONTAINER_ADMISSION_POLICY},
    }


def _source(module: Module) -> dict[str, str]:
    return {"module": module.path, "version": module.version, "sum": module.sum,
            "proxy": f"{PROXY}/{_escape(module.path)}/@v/{_escape(module.version)}.zip"}


def generate(modules: Modules) -> dict[str, bytes]:
    """File name -> content of every bundled schema file."""
    files = {
        "kubernetes.json": kubernetes(modules),
        "network-policy-api.json": network_policy_api(modules),
        "calico.json": calico(modules),
        "containersecurity.json": container_security(),
    }
    header = {"generated_by": "scripts/update_schemas.py (do not edit: run it to change this file)"}
    return {name: (json.dumps({**header, **data}, indent=1, sort_keys=False) + "\n").encode()
            for name, data in files.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the bundled files, write nothing")
    parser.add_argument("--offline", action="store_true", help="use cached module zips only")
    parser.add_argument("--fetch", action="store_true", help="only fetch (and hash-check) the pinned module zips")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    modules = Modules(offline=args.offline)
    if args.fetch:
        for module in PINS:
            modules.zip(module)
        return 0
    files = generate(modules)
    if args.check:
        stale = [n for n, data in files.items() if not (args.out / n).is_file() or (args.out / n).read_bytes() != data]
        for n in stale:
            print(f"update_schemas: {args.out / n} differs from what the pins give", file=sys.stderr)
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for n, data in files.items():
        (args.out / n).write_bytes(data)
        print(f"update_schemas: wrote {args.out / n} ({len(data)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
