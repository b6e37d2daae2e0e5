"""An object the cluster source of ``enforce`` rejects gets a Warning Event, read back through a
real kube-apiserver: the reason, the field (or the budget) named in its message, the object's
uid and resourceVersion; the same rejection again counts on that Event instead of making another.

Waits poll until a deadline (Events are posted off the reload path); nothing asserts how long
anything took."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from pyclassify.enforce.cluster_source import KubePolicySource
from pyclassify.kube import load_client
from pyclassify.kube.client import KubeClient
from pyclassify.kube.events import EventRecorder
from tests.kube.test_listwatch import GNP, delete, wait_until
from tests.test_sharing import gnp as calico_gnp

PROFILES = "/apis/crd.projectcalico.org/v1/profiles"


def events_about(kc: KubeClient, name: str, reason: str) -> list[dict[str, Any]]:
    answer = kc.request(
        "GET",
        "/api/v1/namespaces/default/events",
        query=[("fieldSelector", f"involvedObject.name={name},reason={reason}")],
    )
    return answer["items"]


def put(kc: KubeClient, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    obj = json.loads(json.dumps(obj))
    obj["metadata"]["resourceVersion"] = kc.request("GET", path)["metadata"]["resourceVersion"]
    return kc.request("PUT", path, body=obj)


@pytest.fixture
def source(kube_cluster):
    made: list[KubePolicySource] = []

    def make(budget: int | None = None) -> KubePolicySource:
        s = KubePolicySource(str(kube_cluster.kubeconfig), "test", node="node-1", budget=budget)
        made.append(s)
        s.load()
        return s

    yield make
    for s in made:
        s.stop()


def test_a_rejected_update_is_reported_on_the_object_once(kc: KubeClient, source) -> None:
    good = {
        "apiVersion": "crd.projectcalico.org/v1",
        "kind": "Profile",
        "metadata": {"name": "event-p"},
        "spec": {"ingress": [{"action": "Allow"}], "labelsToApply": {"team": "a"}},
    }
    delete(kc, f"{PROFILES}/event-p")
    kc.request("POST", PROFILES, body=good)
    try:
        s = source()
        key = ("projectcalico.org", "Profile", None, "event-p")
        wait_until(lambda: key in s.kube.objects, "profile listed")
        bad = json.loads(json.dumps(good))
        bad["spec"]["ingres"] = bad["spec"].pop("ingress")  # the tests' minimal CRD stores it
        stored = put(kc, f"{PROFILES}/event-p", bad)
        wait_until(lambda: s.kube.rejected.get(key), "misspelt update rejected")
        [event] = wait_until(lambda: events_about(kc, "event-p", "PolicyRejected"), "Event posted")
        assert event["type"] == "Warning" and event["count"] == 1
        assert "spec.ingres: unknown field 'ingres'" in event["message"], event["message"]
        involved = event["involvedObject"]
        assert (involved["kind"], involved["name"]) == ("Profile", "event-p")
        assert involved["uid"] == stored["metadata"]["uid"]
        assert involved["resourceVersion"] == stored["metadata"]["resourceVersion"]
        assert event["source"]["component"] == "pyclassify" and event["source"]["host"] == "node-1"

        # The same rejection again (another write of the same mistake): counted, not a new Event.
        bad["metadata"]["labels"] = {"touched": "1"}
        put(kc, f"{PROFILES}/event-p", bad)
        wait_until(lambda: s.kube.metrics["rejected"] >= 2, "second rejection")
        wait_until(
            lambda: [e["count"] for e in events_about(kc, "event-p", "PolicyRejected")] == [2],
            "the Event counted twice",
        )
        assert s.metrics()["rejection_events_created"] == 1 and s.metrics()["rejection_events_patched"] == 1
        kept = json.loads(s.kube.objects[key])
        assert "ingress" in kept["spec"], "the last good version stays"
    finally:
        delete(kc, f"{PROFILES}/event-p")


def test_a_set_over_the_budget_is_reported_on_the_object_that_brings_it_over(kc: KubeClient, source) -> None:
    in_force = source().footprint()
    s = source(budget=in_force + 512 * 1024)
    # cluster-scoped Calico policy with many distinct networks: far over half a MiB once built
    wide = calico_gnp("event-wide", [f"10.{i // 250}.{i % 250}.0/24" for i in range(3000)], selector="app == 'x'")
    wide["apiVersion"] = "crd.projectcalico.org/v1"
    delete(kc, f"{GNP}/event-wide")
    created = kc.request("POST", GNP, body=wide)
    try:
        key = ("projectcalico.org", "GlobalNetworkPolicy", None, "event-wide")
        error = wait_until(lambda: s.kube.rejected.get(key), "set over the budget rejected")
        assert "over the memory budget" in error
        [event] = wait_until(lambda: events_about(kc, "event-wide", "PolicyOverBudget"), "Event posted")
        assert event["type"] == "Warning" and event["involvedObject"]["uid"] == created["metadata"]["uid"]
        assert "over the memory budget" in event["message"] and "event-wide" in event["message"].split("costliest")[-1]
        assert s.over_budget == 1 and key not in s.kube.objects
    finally:
        delete(kc, f"{GNP}/event-wide")


def test_a_failure_to_post_is_counted_and_never_raises(kube_cluster, tmp_path) -> None:
    # a client whose token the API server refuses: every post fails
    config = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    for user in config["users"]:
        user["user"]["token"] = "not-a-token"
    (tmp_path / "refused.kubeconfig").write_text(yaml.safe_dump(config))
    recorder = EventRecorder(load_client(str(tmp_path / "refused.kubeconfig"), "test"), host="node-1")
    try:
        obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "uid": "1"}}
        recorder.warn(obj, "PolicyRejected", "spec: nothing")
        recorder.flush()
        assert recorder.counters["failed"] == 1 and recorder.counters["created"] == 0
        # the queue is bounded: past it, Events are dropped (counted), the caller never waits
        for _ in range(10_000):
            recorder.warn(obj, "PolicyRejected", "spec: nothing")
        assert recorder.counters["dropped"] > 0
    finally:
        recorder.stop()
