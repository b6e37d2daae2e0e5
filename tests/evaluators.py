"""The two paths that answer "is this flow allowed": the pure-Python reference evaluator and the
native engine. Conformance and differential tests run against both (as msgpack-python runs its
suite against its C and pure-Python implementations)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pyclassify.engine import NativeEngine
from pyclassify.inventory import Inventory
from pyclassify.ir import PolicySet
from pyclassify.reference import Flow, Verdict, evaluate

Evaluator = Callable[..., Verdict]

_ENGINES: OrderedDict[tuple, NativeEngine] = OrderedDict()


def native_evaluate(policy_set: PolicySet, inventory: Inventory, flow: Flow, **defaults: Any) -> Verdict:
    """``reference.evaluate``'s signature, answered by an engine compiled once per policy set and
    inventory (endpoints named in the flow but absent from the inventory join as extras)."""
    known = {id(e) for e in inventory.endpoints}
    extras = tuple(e for e in (flow.src.endpoint, flow.dst.endpoint) if e is not None and id(e) not in known)
    key = (id(policy_set), id(inventory), len(inventory.endpoints), tuple(id(e) for e in extras))
    engine = _ENGINES.get(key)
    if engine is None or engine.policy_set is not policy_set or engine.inventory is not inventory:
        engine = NativeEngine(policy_set, inventory, extras)
        _ENGINES[key] = engine
        while len(_ENGINES) > 256:
            _ENGINES.popitem(last=False)
    return engine.evaluate(flow, **defaults)


EVALUATORS: dict[str, Evaluator] = {"reference": evaluate, "native": native_evaluate}


def packet_batch(flows: list[Flow]) -> Any:
    """The header batch of address-only flows, as the decoder would write their packets: what the
    batch paths (``NativeEngine.classify``/``judge``/``judge_via``) are compared on."""
    import numpy as np

    from pyclassify.batch import FLAG_HAS_PORTS, new_batch

    batch = new_batch(len(flows))
    for row, f in zip(batch, flows):
        for key, ip in (("src_addr", f.src.ip), ("dst_addr", f.dst.ip)):
            raw = b"\0" * 10 + b"\xff\xff" + ip.packed if ip.version == 4 else ip.packed  # IPv4-mapped
            row[key] = np.frombuffer(raw, dtype=np.uint8)
        row["ip_version"], row["protocol"] = f.src.ip.version, f.protocol
        if f.sport is not None and f.dport is not None:
            row["sport"], row["dport"], row["flags"] = f.sport, f.dport, FLAG_HAS_PORTS
        if f.protocol in (1, 58):
            row["icmp_type"], row["icmp_code"] = f.icmp_type or 0, f.icmp_code or 0
    return batch
