"""Policy sets heavy to compile: valid manifests whose compiled size is many times their size
on disk, the shapes that ran the daemon and the offline commands out of memory. Each is
seeded and deterministic, and written as ``kubectl get -o yaml`` prints it (multi-document).

- ``wide``: GlobalNetworkPolicies of ~26 KB each (700 of them make 18 MB): many rules, each
  with a dozen source networks and a handful of ports, a selector and a namespace selector.
- ``selectors``: GlobalNetworkPolicies whose subject and rule peers are long selectors
  (``app == 'a-1' || app == 'a-2' || ...``, ``terms`` terms each).
- ``ipblocks``: NetworkPolicies with ``blocks`` ipBlock peers each (every one with an
  ``except``), on ports.

Each shape comes distinct (every policy its own networks and selectors) or ``--repeated``: one
allow-list, one long selector, one set of rules pasted into every policy, as a policy copied
per namespace or per team is; only what a copy would change differs (its name, its subject,
a port).

Every set comes with a small inventory (namespaces and pods the selectors match), so
``explain``, ``render`` and ``enforce`` have endpoints to judge.

    python -m bench.heavy_policies wide --policies 700 --out /tmp/wide
    python -m bench.heavy_policies selectors --policies 2000 --terms 300 --repeated --out /tmp/sel
    python -m bench.heavy_policies ipblocks --policies 500 --blocks 200 --repeated --out /tmp/ipb
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from bench.cluster import to_yaml

NAMESPACES = ("payments", "checkout", "catalog", "search")
APPS = 40  # distinct app labels among the pods
PODS = 80


def _inventory(rng: random.Random) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for ns in NAMESPACES:
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns, "team": ns}},
            }
        )
    for i in range(PODS):
        ns = NAMESPACES[i % len(NAMESPACES)]
        app = f"a-{i % APPS}"
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod-{i}", "namespace": ns, "labels": {"app": app, "tier": f"t{i % 3}"}},
                "spec": {
                    "nodeName": "node1",
                    "containers": [
                        {
                            "name": "main",
                            "image": "example/app:1",
                            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                        }
                    ],
                },
                "status": {
                    "podIP": f"10.0.{i // 250}.{i % 250 + 1}",
                    "podIPs": [{"ip": f"10.0.{i // 250}.{i % 250 + 1}"}],
                },
            }
        )
    return out


def _net(rng: random.Random, prefix: int) -> str:
    a = rng.randrange(1, 224)
    if a in (10, 127, 169, 172, 192):
        a += 1
    value = (a << 24) | rng.getrandbits(24)
    value &= ~((1 << (32 - prefix)) - 1) & 0xFFFFFFFF
    return f"{value >> 24}.{(value >> 16) & 255}.{(value >> 8) & 255}.{value & 255}/{prefix}"


def _ports(rng: random.Random, n: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(n):
        first = rng.randrange(1024, 60000)
        out.append(f"{first}:{first + rng.randrange(1, 50)}" if rng.random() < 0.3 else first)
    return out


def wide(policies: int, rules: int = 24, nets: int = 12, seed: int = 1, repeated: bool = False) -> list[dict[str, Any]]:
    """GlobalNetworkPolicies of ~26 KB each at the defaults (``repeated``: the same rules in
    every one)."""
    rng = random.Random(seed)
    out = _inventory(rng)
    state = rng.getstate()
    for i in range(policies):
        if repeated:
            rng.setstate(state)

        def rule(direction: str) -> dict[str, Any]:
            peer: dict[str, Any] = {"nets": [_net(rng, rng.choice((16, 20, 24, 28, 32))) for _ in range(nets)]}
            if rng.random() < 0.5:
                peer["selector"] = f"app == 'a-{rng.randrange(APPS)}'"
                peer["namespaceSelector"] = f"team == '{rng.choice(NAMESPACES)}'"
            ports = {"ports": _ports(rng, rng.randrange(3, 8))}
            r: dict[str, Any] = {"action": rng.choice(("Allow", "Allow", "Allow", "Deny")), "protocol": "TCP"}
            if direction == "ingress":
                r["source"], r["destination"] = peer, ports
            else:
                r["destination"] = {**peer, **ports}
            return r

        out.append(
            {
                "apiVersion": "projectcalico.org/v3",
                "kind": "GlobalNetworkPolicy",
                "metadata": {"name": f"wide-{i:05d}"},
                "spec": {
                    "order": i,
                    "selector": f"app == 'a-{i % APPS}' || tier == 't{i % 3}'",
                    "types": ["Ingress", "Egress"],
                    "ingress": [rule("ingress") for _ in range(rules)],
                    "egress": [rule("egress") for _ in range(rules)],
                },
            }
        )
    return out


def selectors(policies: int, terms: int = 300, seed: int = 1, repeated: bool = False) -> list[dict[str, Any]]:
    """GlobalNetworkPolicies whose selectors have ``terms`` terms each (``repeated``: one
    selector, as subject and as peer, in every policy; the port differs)."""
    rng = random.Random(seed)
    out = _inventory(rng)

    def long_selector(i: int) -> str:
        if repeated:
            return " || ".join(f"app == 'a-{j}'" for j in range(terms))
        return " || ".join(f"app == 'a-{(i + j) % (APPS * 10)}'" for j in range(terms))

    for i in range(policies):
        out.append(
            {
                "apiVersion": "projectcalico.org/v3",
                "kind": "GlobalNetworkPolicy",
                "metadata": {"name": f"sel-{i:05d}"},
                "spec": {
                    "order": i,
                    "selector": long_selector(i),
                    "types": ["Ingress"],
                    "ingress": [
                        {
                            "action": "Allow",
                            "protocol": "TCP",
                            "source": {"selector": long_selector(i + 7)},
                            "destination": {"ports": [(80 if repeated else 8080) + i % 50]},
                        }
                    ],
                },
            }
        )
    return out


def ipblocks(policies: int, blocks: int = 200, seed: int = 1, repeated: bool = False) -> list[dict[str, Any]]:
    """NetworkPolicies with ``blocks`` ipBlock peers each, every one with an ``except``
    (``repeated``: the same peers, on port 443, in every policy)."""
    rng = random.Random(seed)
    out = _inventory(rng)

    def peers() -> list[dict[str, Any]]:
        made = []
        for _ in range(blocks):
            cidr = _net(rng, 16)
            base = cidr.split("/")[0].rsplit(".", 2)[0]
            made.append({"ipBlock": {"cidr": cidr, "except": [f"{base}.{rng.randrange(256)}.0/24"]}})
        return made

    shared = peers() if repeated else []
    for i in range(policies):
        ns = NAMESPACES[i % len(NAMESPACES)]
        if repeated:
            ingress = [{"from": shared, "ports": [{"protocol": "TCP", "port": 443}]}]
        else:
            ingress = [
                {
                    "from": peers(),
                    "ports": [{"protocol": "TCP", "port": p} for p in _ports(rng, 3) if isinstance(p, int)]
                    or [{"protocol": "TCP", "port": 443}],
                }
            ]
        out.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": f"ipb-{i:05d}", "namespace": ns},
                "spec": {
                    "podSelector": {"matchLabels": {"app": f"a-{i % APPS}"}},
                    "policyTypes": ["Ingress"],
                    "ingress": ingress,
                },
            }
        )
    return out


def write(objects: list[dict[str, Any]], out: Path) -> Path:
    """The objects as one multi-document YAML file ``out/policies.yaml``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "policies.yaml"
    with path.open("w") as f:
        for obj in objects:
            f.write("---\n")
            f.write(to_yaml(obj))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", choices=("wide", "selectors", "ipblocks"))
    ap.add_argument("--policies", type=int, required=True)
    ap.add_argument("--terms", type=int, default=300, help="selectors: terms per selector")
    ap.add_argument("--blocks", type=int, default=200, help="ipblocks: ipBlock peers per policy")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeated", action="store_true", help="the same rules, selectors and networks in every policy")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.shape == "wide":
        objects = wide(args.policies, seed=args.seed, repeated=args.repeated)
    elif args.shape == "selectors":
        objects = selectors(args.policies, args.terms, seed=args.seed, repeated=args.repeated)
    else:
        objects = ipblocks(args.policies, args.blocks, seed=args.seed, repeated=args.repeated)
    path = write(objects, args.out)
    print(f"{path}: {path.stat().st_size:,} bytes, {len(objects):,} objects")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
