"""The cluster workload generator of the scale benchmarks (bench/cluster.py, issue 11).

Small clusters only: every file is checked by pyclassify itself, so these tests stay in the
seconds. Nothing here times anything.
"""

from __future__ import annotations

import collections
import ipaddress
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench import cluster as gen
from pyclassify.capture import read_all
from pyclassify.documents import Problems
from pyclassify.kinds.common import PROTOCOL_NUMBERS
from pyclassify.loader import documents_of
from pyclassify.project import build_project, load_project
from pyclassify.reference import Flow, FlowEnd, evaluate

REPO = Path(__file__).resolve().parents[2]
PODS = 80


@pytest.fixture(scope="module")
def small() -> gen.Cluster:
    return gen.generate(PODS, seed=1)


@pytest.fixture(scope="module")
def written(small: gen.Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each format in a directory of its own (together they would be duplicates)."""
    root = tmp_path_factory.mktemp("cluster")
    out = {}
    for fmt, (writer, filename) in gen.WRITERS.items():
        (root / fmt).mkdir()
        out[fmt] = writer(small, root / fmt / filename)
    (root / "policy").mkdir()
    out["policy"] = gen.write_yaml(small, root / "policy" / "cluster.yaml", detail="policy")
    return out


def _project(objects: list[dict]):
    problems = Problems()
    docs = [d for obj in objects for d in documents_of(obj, "generated", problems)]
    return build_project(docs, problems)


# --- determinism ----------------------------------------------------------------------------------


def test_same_seed_gives_the_same_bytes_in_every_format(tmp_path: Path) -> None:
    first, second, other = gen.generate(300, 7), gen.generate(300, 7), gen.generate(300, 8)
    for fmt, (writer, filename) in gen.WRITERS.items():
        filename = f"{fmt}-{filename}"
        a = writer(first, tmp_path / f"a-{filename}").read_bytes()
        b = writer(second, tmp_path / f"b-{filename}").read_bytes()
        c = writer(other, tmp_path / f"c-{filename}").read_bytes()
        assert a == b, fmt
        assert a != c, fmt
    flows_a = gen.write_capture(first, tmp_path / "a.pcap", 900, 60, seed=3)
    flows_b = gen.write_capture(second, tmp_path / "b.pcap", 900, 60, seed=3)
    assert flows_a == flows_b
    assert (tmp_path / "a.pcap").read_bytes() == (tmp_path / "b.pcap").read_bytes()


def test_generation_does_not_use_the_global_random_state() -> None:
    random.seed(1)
    a = gen.to_yaml(gen.generate(60, 5).objects()[-1])
    random.seed(2)
    b = gen.to_yaml(gen.generate(60, 5).objects()[-1])
    assert a == b


# --- shape ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("pods", [60, 300, 1200])
def test_object_counts_scale_with_pods(pods: int) -> None:
    counts = gen.generate(pods, 1).counts()
    assert counts["pods"] == pods
    assert counts["namespaces"] == max(4, pods // 100)
    assert counts["network_policies"] == pods // 10
    assert counts["admin_network_policies"] == 5
    assert counts["baseline_admin_network_policies"] == 1
    assert counts["tiers"] == 1
    assert counts["global_network_policies"] == 10
    assert counts["global_network_sets"] == 2
    assert counts["nodes"] == gen.CONTROL_PLANE_NODES + max(3, -(-pods // gen.PODS_PER_NODE))
    assert counts["services"] >= 3 and counts["service_accounts"] >= counts["namespaces"]


def test_pods_look_like_the_api_server_prints_them(small: gen.Cluster) -> None:
    hashes: dict[tuple[str, str, str], set[str]] = collections.defaultdict(set)
    saw = collections.Counter()
    for pod in small.pods.values():
        meta, spec, status = pod["metadata"], pod["spec"], pod["status"]
        assert {"name", "namespace", "uid", "resourceVersion", "creationTimestamp", "labels", "ownerReferences"} <= set(
            meta
        )
        owner = meta["ownerReferences"][0]
        assert owner["controller"] is True and owner["kind"] in ("ReplicaSet", "StatefulSet", "DaemonSet")
        labels = meta["labels"]
        if owner["kind"] == "ReplicaSet":
            assert owner["name"].endswith("-" + labels["pod-template-hash"])
            assert meta["name"].startswith(owner["name"] + "-")
            app = labels.get("app") or labels["k8s-app"]
            hashes[(meta["namespace"], app, labels.get("version", ""))].add(labels["pod-template-hash"])
        if owner["kind"] == "StatefulSet":
            assert labels["statefulset.kubernetes.io/pod-name"] == meta["name"]
            saw["statefulset"] += 1
        assert status["phase"] == "Running" and status["podIPs"] == [{"ip": status["podIP"]}]
        assert spec["nodeName"] and spec["serviceAccountName"]
        for port in spec["containers"][0]["ports"]:
            assert port["name"] and port["protocol"] in ("TCP", "UDP")
            saw[port["protocol"]] += 1
        saw["hostNetwork"] += bool(spec.get("hostNetwork"))
    # one pod-template-hash per ReplicaSet (app + version), as the controller makes it
    assert all(len(v) == 1 for v in hashes.values())
    assert saw["statefulset"] and saw["UDP"] and saw["TCP"]
    assert 0 < saw["hostNetwork"] <= len(small.pods) // 50  # rare
    for ns in small.namespaces.values():
        labels = ns["metadata"]["labels"]
        assert labels["kubernetes.io/metadata.name"] == ns["metadata"]["name"]
        if ns["metadata"]["name"] in small.team_namespaces:
            assert labels["env"] in gen.ENVS and labels["team"]


def test_pod_addresses_are_unique_and_inside_their_nodes_cidr(small: gen.Cluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in small.nodes.values()}
    seen = set()
    for pod in small.pods.values():
        ip = ipaddress.ip_address(pod["status"]["podIP"])
        node = nodes[pod["spec"]["nodeName"]]
        node_ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
        assert pod["status"]["hostIP"] == node_ip
        if pod["spec"].get("hostNetwork"):
            assert str(ip) == node_ip  # a host-network pod has its node's address
            continue
        assert ip in ipaddress.ip_network(node["spec"]["podCIDR"])
        assert ip in ipaddress.ip_network("10.244.0.0/14")
        assert ip not in seen
        seen.add(ip)
    cluster_ips = [s["spec"]["clusterIP"] for s in small.services.values() if s["spec"]["clusterIP"] != "None"]
    assert len(cluster_ips) == len(set(cluster_ips))


def test_policies_use_the_shapes_real_clusters_have() -> None:
    small = gen.generate(1000, seed=1)  # 100 NetworkPolicies: every shape shows up
    text = json.dumps([p["spec"] for p in small.network_policies.values()])
    for shape in (
        '"podSelector": {}',
        '"ipBlock"',
        '"except"',
        '"endPort"',
        '"namespaceSelector"',
        '"operator": "In"',
        '"operator": "NotIn"',
        '"operator": "Exists"',
        '"operator": "DoesNotExist"',
        '"port": "metrics"',
        '"protocol": "UDP"',
        '"Egress"',
    ):
        assert shape in text, shape
    anps = json.dumps([p["spec"] for p in small.admin_network_policies.values()])
    for shape in (
        '"Allow"',
        '"Deny"',
        '"Pass"',
        '"namedPort"',
        '"portRange"',
        '"portNumber"',
        '"pods"',
        '"namespaces"',
        '"networks"',
        '"nodes"',
    ):
        assert shape in anps, shape
    gnps = list(small.global_network_policies.values())
    assert all(p["metadata"]["name"].startswith("security.") and p["spec"]["tier"] == "security" for p in gnps)
    rules = json.dumps([p["spec"] for p in gnps])
    for shape in (
        '"Log"',
        '"Pass"',
        '"Deny"',
        '"Allow"',
        '"notNets"',
        '"icmp"',
        '"namespaceSelector"',
        '"selector": "all()"',
    ):
        assert shape in rules, shape
    last = max(gnps, key=lambda p: p["spec"]["order"])["spec"]  # traffic goes on to the default tier
    assert (
        last["selector"] == "all()"
        and last["ingress"] == [{"action": "Pass"}]
        and last["egress"] == [{"action": "Pass"}]
    )


# --- files ----------------------------------------------------------------------------------------


def test_every_format_passes_check_with_no_errors(small: gen.Cluster, written: dict[str, Path]) -> None:
    # The real CLI once, the same loader in-process for the others.
    result = subprocess.run(
        [sys.executable, "-m", "pyclassify", "check", str(written["yaml"].parent), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["valid"] and report["errors"] == [] and report["warnings"] == []
    assert report["documents"] == len(small.objects())
    assert report["endpoints"] == PODS
    assert report["policies"] == PODS // 10 + 5 + 1 + 10
    for fmt in ("json", "json-compact", "yaml-list", "policy"):
        project = load_project([str(written[fmt].parent)])
        assert project.problems.errors == [], fmt
        assert project.document_count == len(small.objects())


def test_json_and_yaml_hold_the_same_objects(small: gen.Cluster, written: dict[str, Path]) -> None:
    expected = json.loads(json.dumps(small.objects()))
    from_yaml = list(yaml.load_all(written["yaml"].read_text(), Loader=yaml.CSafeLoader))
    listed = json.loads(written["json"].read_text())
    compact = json.loads(written["json-compact"].read_text())
    yaml_list = yaml.load(written["yaml-list"].read_text(), Loader=yaml.CSafeLoader)
    assert from_yaml == expected
    assert (
        listed
        == compact
        == yaml_list
        == {"apiVersion": "v1", "items": expected, "kind": "List", "metadata": {"resourceVersion": ""}}
    )
    assert written["json-compact"].read_text().count("\n") == 1


def test_files_are_printed_as_kubectl_prints_them(written: dict[str, Path]) -> None:
    text = written["yaml"].read_text()
    assert text.startswith('apiVersion: v1\nkind: Node\nmetadata:\n  creationTimestamp: "')
    assert "\n---\napiVersion: v1\nkind: Pod\n" in text
    assert "\n  ownerReferences:\n  - apiVersion: apps/v1\n    controller: true\n" in text  # list at its key's indent
    assert '\n  resourceVersion: "' in text and '\n    node-role.kubernetes.io/worker: ""\n' in text
    assert "\n  selector: all()\n" in text and "\n  selector: '!has(quarantine)'\n" in text
    assert "\nstatus:\n  loadBalancer: {}\n" in text
    for doc in yaml.load_all(text, Loader=yaml.CSafeLoader):
        _assert_keys_sorted(doc)
    listed = written["json"].read_text()
    assert listed.startswith('{\n    "apiVersion": "v1",\n    "items": [\n        {\n')
    assert "&" not in listed and "\\u0026\\u0026" in listed  # Go escapes & < > in strings


def _assert_keys_sorted(value: object) -> None:
    if isinstance(value, dict):
        assert list(value) == sorted(value)
        for v in value.values():
            _assert_keys_sorted(v)
    elif isinstance(value, list):
        for v in value:
            _assert_keys_sorted(v)


# --- verdicts -------------------------------------------------------------------------------------


def test_pod_pairs_are_both_allowed_and_denied_in_different_tiers() -> None:
    cluster = gen.generate(600, seed=1)
    project = _project(cluster.objects())
    assert project.problems.errors == []
    pods = [e for e in project.inventory.pods() if not e.host_network]
    rng = random.Random(2)
    verdicts = collections.Counter()
    tiers = set()
    for _ in range(600):
        src, dst = rng.choice(pods), rng.choice(pods)
        port = rng.choice(dst.ports)
        v = evaluate(
            project.policy_set, project.inventory, Flow(FlowEnd(src), FlowEnd(dst), port.protocol, None, port.port)
        )
        verdicts[v.verdict] += 1
        decided = v.egress if v.egress is not None and v.egress.verdict == "deny" else v.ingress
        tiers.add(decided.tier if decided is not None and decided.reason != "default" else "default allow")
    assert verdicts["allow"] >= 60 and verdicts["deny"] >= 60, verdicts
    assert {"kube-admin", "security", "default", "default allow"} <= tiers, tiers
    # The intended traffic is mostly allowed.
    by_ip = {str(ip): e for e in pods for ip in e.ips}
    edges = [f for f in gen.capture_flows(cluster, 300, seed=1) if f.kind == "edge"]
    allowed = sum(
        evaluate(
            project.policy_set,
            project.inventory,
            Flow(FlowEnd(by_ip[f.src]), FlowEnd(by_ip[f.dst]), PROTOCOL_NUMBERS[f.proto], f.sport, f.dport),
        ).allowed
        for f in edges
    )
    assert allowed > len(edges) // 3, (allowed, len(edges))


# --- captures -------------------------------------------------------------------------------------


def test_capture_reads_back_with_every_packet(small: gen.Cluster, tmp_path: Path) -> None:
    path = tmp_path / "cluster.pcap"
    flows = gen.write_capture(small, path, packets=4000, flows=150, seed=1)
    assert len(flows) == 150 and len(set(flows)) == 150
    assert {f.kind for f in flows} >= {"edge", "random", "dns", "inbound", "outbound"}
    assert any(f.proto == "UDP" for f in flows) and any(f.proto == "TCP" for f in flows)
    headers, _, capture = read_all(path)
    assert len(headers) == 4000
    assert capture.packets == 4000 and capture.counts == {"none": 4000} and capture.problems == []
    assert (headers["ts_ns"][1:] >= headers["ts_ns"][:-1]).all()
    # Per TCP flow: SYN first, SYN-ACK second, from the right ends.
    first_seen: dict[tuple, list[int]] = collections.defaultdict(list)
    for h in headers[:4000]:
        if h["protocol"] != 6:
            continue
        src, dst = ipaddress.ip_address(bytes(h["src_addr"][12:])), ipaddress.ip_address(bytes(h["dst_addr"][12:]))
        key = (
            (src, h["sport"], dst, h["dport"])
            if (src, h["sport"]) < (dst, h["dport"])
            else (dst, h["dport"], src, h["sport"])
        )
        first_seen[key].append(int(h["tcp_flags"]))
    assert first_seen and all(f[0] == 0x02 and f[1] == 0x12 for f in first_seen.values() if len(f) >= 2)


def test_a_share_of_the_packets_in_the_flows_named_denied(small: gen.Cluster, tmp_path: Path) -> None:
    plain, weighted = tmp_path / "plain.pcap", tmp_path / "denied.pcap"
    flows = gen.write_capture(small, plain, packets=4000, flows=150, seed=1)
    assert gen.write_capture(small, weighted, 4000, 150, seed=1, denied=lambda f: f.kind == "random") == flows
    denied = {(f.src, f.sport) for f in flows if f.kind == "random"}
    assert 0 < len(denied) < len(flows)

    def share(path: Path) -> float:
        headers, _, _ = read_all(path)
        ends = [
            {
                (str(ipaddress.ip_address(bytes(h[a][12:]))), int(h[p]))
                for a, p in (("src_addr", "sport"), ("dst_addr", "dport"))
            }
            for h in headers[:4000]
        ]
        return sum(1 for e in ends if e & denied) / 4000

    assert share(weighted) == pytest.approx(0.25, abs=150 / 4000)  # rounding: under a packet a flow
    assert abs(share(plain) - 0.25) > 150 / 4000  # the plain capture is another mix
    assert weighted.stat().st_size != plain.stat().st_size


def test_snaplen_truncates_frames_but_not_their_headers(small: gen.Cluster, tmp_path: Path) -> None:
    full, cut = tmp_path / "full.pcap", tmp_path / "cut.pcap"
    gen.write_capture(small, full, packets=900, flows=30, seed=5)
    gen.write_capture(small, cut, packets=900, flows=30, seed=5, snaplen=96)
    assert cut.stat().st_size < full.stat().st_size
    full_headers, _, _ = read_all(full)
    cut_headers, _, capture = read_all(cut)
    assert capture.counts == {"none": 900}
    assert (full_headers == cut_headers).all()  # wire lengths, addresses, ports and flags kept
    with pytest.raises(ValueError):
        gen.write_capture(small, cut, packets=900, flows=30, snaplen=40)


def test_capture_frames_are_well_formed(small: gen.Cluster, tmp_path: Path) -> None:
    from scapy.all import IP, TCP, UDP, rdpcap  # GPL: tests only

    path = tmp_path / "c.pcap"
    gen.write_capture(small, path, packets=600, flows=40, seed=2)
    packets = rdpcap(str(path))
    assert len(packets) == 600
    next_seq: dict[tuple, int] = {}
    for pkt in packets:
        ip = pkt[IP]
        rebuilt = IP(bytes(ip))
        del rebuilt.chksum
        assert IP(bytes(rebuilt)).chksum == ip.chksum
        if TCP in pkt:
            tcp = pkt[TCP]
            key = (ip.src, tcp.sport, ip.dst, tcp.dport)
            if key in next_seq:
                assert tcp.seq == next_seq[key]  # each side's bytes are counted
            next_seq[key] = (tcp.seq + len(tcp.payload) + (1 if tcp.flags.S else 0)) % 2**32
        else:
            assert pkt[UDP].len == len(pkt[UDP])


def test_replay_judges_the_capture(written: dict[str, Path], small: gen.Cluster, tmp_path: Path) -> None:
    pcap = tmp_path / "r.pcap"
    gen.write_capture(small, pcap, packets=1500, flows=60, seed=4)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyclassify",
            "replay",
            str(written["json-compact"].parent),
            "--pcap",
            str(pcap),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert summary["packets"] == 1500 and summary["malformed"] == 0
    assert summary["allowed"] and summary["denied"]


# --- mutations ------------------------------------------------------------------------------------


def test_mutations_change_one_object_each_and_keep_the_cluster_valid() -> None:
    cluster = gen.generate(200, seed=3)
    rng = random.Random(9)
    seen = collections.Counter()
    ips = {p["status"]["podIP"] for p in cluster.pods.values() if not p["spec"].get("hostNetwork")}
    for change in gen.mutations(cluster, rng, 140):
        kind, before, after = change
        seen[kind] += 1
        if kind.endswith("-added"):
            assert before is None and after is not None
        elif kind.endswith("-deleted"):
            assert after is None and before is not None
        else:
            assert before["metadata"]["name"] == after["metadata"]["name"]
            assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
        if kind in ("pod-relabelled", "namespace-relabelled"):
            assert before["metadata"]["labels"] != after["metadata"]["labels"]
        if kind == "networkpolicy-changed":
            assert before["spec"] != after["spec"]
        if kind == "pod-added":
            assert after["status"]["podIP"] not in ips
            ips.add(after["status"]["podIP"])
    assert set(seen) == set(gen.CHANGE_KINDS)
    project = _project(cluster.objects())
    assert project.problems.errors == []
    assert sum(1 for _ in project.inventory.pods()) == len(cluster.pods)


def test_random_change_leaves_the_cluster_alone() -> None:
    cluster = gen.generate(100, seed=4)
    before = gen.to_yaml(gen.kubectl_list(cluster))
    for kind in gen.CHANGE_KINDS:
        gen.random_change(cluster, random.Random(1), kind)
    # only the clock moved (resource versions of later objects); the objects are the same
    assert gen.to_yaml(gen.kubectl_list(cluster)) == before


def test_command_line_writes_every_format(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.cluster",
            "--pods",
            "60",
            "--seed",
            "2",
            "--out",
            str(tmp_path),
            "--packets",
            "600",
            "--flows",
            "30",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    for rel in (
        "yaml/cluster.yaml",
        "json/cluster.json",
        "json-compact/cluster.json",
        "capture/cluster.pcap",
        "capture/flows.tsv",
    ):
        assert (tmp_path / rel).stat().st_size > 0, rel
    assert len((tmp_path / "capture/flows.tsv").read_text().splitlines()) == 31
