"""What ``pyclassify enforce`` is asked to do: the daemon's configuration, read by each of its
parts (the loops, the reload, the revocation, the accounting)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO


@dataclass
class EnforceConfig:
    paths: list[str]
    queues: tuple[int, int] = (0, 0)
    fail_open: bool = False
    default: str | None = None  # None: allow for pods, deny for host endpoints
    metrics: str | None = None
    log_stream: IO[str] | None = None
    log_allowed: bool = False
    log_flows: bool = True  # False: no per-flow JSON lines (metrics still count every verdict)
    batch: int = 64
    copy_range: int = 128
    maxlen: int = 4096
    batch_verdicts: bool = True
    hooks: tuple[str, ...] = ("forward", "input", "output")
    install_rules: bool = True
    ipv6: bool = True
    # The watcher's quiet period: long enough to take an atomic rename or a ConfigMap's link swap
    # (microseconds apart) as one change, short beside the 50 ms a change may take to be in force.
    debounce: float = 0.005
    watch: bool = True
    conntrack_entries: int = 262144
    bridge: str | None = None  # "IF1,IF2": an AF_PACKET inline bridge instead of NFQUEUE
    #: (kubeconfig, context, in-cluster): the cluster as the policy source instead of paths.
    kube: tuple[str | None, str | None, bool | None] | None = None
    #: Enforce for this node's pods and host endpoints only; selectors still see every endpoint.
    node: str | None = None
    #: Seconds between checks that our iptables rules are as installed (repaired if not).
    resync: float = 10.0
    #: What a stop does to our rules: "keep" them for the next daemon to adopt (what packets meet
    #: meanwhile is ``fail_open``'s), or "remove" every rule of ours.
    on_stop: str = "keep"
    #: Denied packets rejected (TCP reset, ICMP port unreachable) instead of dropped: the loop
    #: hands them back with ``REJECT_MARK`` and our rules' REJECT answers them (needs our
    #: rules); the bridge crafts the answer itself and sends it back out of the arrival side.
    reject: bool = False
    #: Interfaces whose names begin so are workloads' (Felix's InterfacePrefix): an all-interfaces
    #: host endpoint's forward hook judges routed traffic by every other interface.
    workload_interface_prefix: str = "cali"
    #: The bytes a policy set may take once built (``pyclassify.budget``): "auto" derives it
    #: from the cgroup's memory limit, None sets no bound.
    memory_budget: int | str | None = "auto"
    #: Verdict counters labelled by tier, policy and rule (False: by direction and action only).
    metrics_rule_labels: bool = True
