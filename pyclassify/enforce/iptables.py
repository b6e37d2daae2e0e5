"""The iptables rules of ``pyclassify enforce``: our own chains, installed and removed by us.

Every chain we create is named ``PYCLASSIFY-<HOOK>`` (the prefix is reserved for us), in the
``filter`` table of iptables and ip6tables, with one jump from the built-in chain at position 1:

- ``FORWARD`` (routed pod traffic), ``INPUT`` and ``OUTPUT`` (host endpoints; loopback skipped,
  and in ``OUTPUT`` the node's own traffic to its workloads' interfaces, which no policy judges);
- in each: ``-m connmark --mark REVOKED_CTMARK -j DROP`` first (connections a policy change
  revoked, both directions); with ``--deny-action reject``, ``-m mark --mark REJECT_MARK -j
  REJECT`` (a TCP reset for TCP, else the family's ICMP port unreachable: packets the loop
  denied, handed back to the hook with that mark); then ``-m conntrack --ctstate ESTABLISHED,RELATED -j RETURN``, so only packets of
  new (or untracked/invalid) connections reach userspace; then ``-j CONNMARK --or-mark``
  ``JUDGED_CTMARK``, which marks the connection as one we judge (revalidation dumps the kernel's
  table by that mark, and only those); then ``-j NFQUEUE`` to our queue(s)
  (``--queue-balance N:M`` for several), with ``--queue-bypass`` when failing open (packets pass
  when no process listens on the queue).

With doNotTrack or preDNAT policy, the early host-endpoint hooks get chains of their own, each
queueing to a loop judged by that hook's policy only (``PolicySet.for_hook``), for traffic to
the host (``-m addrtype --dst-type LOCAL``) and from it:

- ``raw`` ``PREROUTING`` and ``OUTPUT`` (untracked): every packet (no connection tracking here),
  to the untracked queue. A packet a rule allowed comes back with ``UNTRACKED_MARK``, and the
  chain's first rules take it out of connection tracking (``CT --notrack``) and let it on; the
  filter chains let untracked packets through (``--ctstate UNTRACKED``): they were judged here.
- with domain rules, DNS answers to established queries (UDP or TCP from port 53) go to the DNS
  queue first: its loop learns their addresses for the domain rules, then hands them back with
  ``DNS_MARK`` (and they return, judged as established traffic is);
- with http rules, in each filter chain: a packet back from the loop with ``HTTP_MARK`` marks its
  connection ``HTTP_CTMARK`` and passes (admitted up to its request); the established
  client-to-server packets of such connections go to the HTTP queue, whose loop reads their
  requests; one it denies comes back with ``HTTP_DENY_MARK``, which marks the connection
  ``HTTP_DENIED_CTMARK``, whose packets are dropped both ways from then on;
- ``mangle`` ``PREROUTING`` (pre-DNAT, after conntrack, before the nat table's DNAT): packets of
  new connections, to the pre-DNAT queue. One a rule allowed comes back with ``PRE_DNAT_MARK``,
  which marks its connection ``PRE_DNAT_CTMARK`` (a policy change judges it by pre-DNAT policy
  again) and which the filter ``INPUT`` chain honours by skipping normal host policy (the
  connection marked ``PRE_DNAT_HOST_CTMARK``: while a pre-DNAT rule still allows it, normal
  host policy does not judge it at revalidation either).

With applyOnForward policy, each host endpoint interface (``forward_queues``) gets two rules in
the filter ``FORWARD`` chain, before the workload's own policy is queued: new connections that
arrived by it (``-i``) go to its ingress queue, those that leave by it (``-o``) to its egress
queue, each judged by that endpoint's forward hook. A packet the hook lets on comes back with
``FORWARD_IN_MARK`` (or ``FORWARD_OUT_MARK``), which skips that rule on its way on through the
chain; one a pre-DNAT rule allowed (``PRE_DNAT_MARK``) skips both (allow ends host policy).
Further on, such a packet marks its connection with the interface's slot (``forward_ctmark``),
so that a policy change judges the connections each hook let on by that hook again.

Ahead of all that, right after the loopback, each chain lets the node's own traffic through
unqueued (``pyclassify.enforce.node``: failsafe ports, the API server, DNS, the daemon's own
marked sockets), so the node stays reachable whether or not a daemon reads the queue.

Rules are replaced, never removed and put back: every change (``install()``, ``extend()``, a
repair, adopting the rules a killed or stopped daemon left) is one ``iptables-restore
--noflush`` transaction per table and family, which declares (creates or flushes) our chains,
fills them, moves the jumps to position 1 and deletes the chains of ours no longer wanted, all
at once: a packet meets either the old rules or the new ones, never none. A daemon that stops
leaves its rules in place by default, for the next one to adopt (meanwhile ``--fail`` decides
what the queue's packets meet); ``uninstall()`` (``enforce --uninstall``, ``--on-stop remove``)
removes every chain of ours and every jump to one, one transaction per table and family too.
While a daemon still listens on a queue our rules name, ``uninstall()`` first makes the empty
chain ``UNINSTALLED`` (jumped to from nowhere): the daemon takes it as the request to leave the
rules out (its repair removes them instead of putting them back) and deletes it when it stops.

This kernel has no nftables ``queue`` statement, so the iptables front-end (nf_tables or legacy
backend, whichever ``iptables`` is) is used.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from pyclassify.enforce.node import DNS_PORT, NodeTraffic
from pyclassify.failsafe import NAMES as PROTOCOL_NAMES
from pyclassify.failsafe import FailsafePort

PREFIX = "PYCLASSIFY-"
#: Left by ``uninstall()`` while a daemon still listens on our queues (see the module's docstring).
UNINSTALLED = PREFIX + "UNINSTALLED"
#: The packet mark of the daemon's own sockets (SO_MARK): our chains let them through unqueued.
OWN_MARK = 0x00100000
#: The conntrack mark bit of connections our rules queued (kept by the kernel with the entry;
#: other bits of the mark are left alone). Revalidation judges the entries that carry it.
JUDGED_CTMARK = 0x01000000
#: The conntrack mark bit of connections a policy change revoked: the first rule of each chain
#: drops their packets in both directions (until a later change allows them again and the bit
#: is taken away). Marking, not deleting, the entry is what cuts them: a
#: deleted entry is picked up again by the next packet, and when that is the peer's (the reply
#: direction) it is judged as a connection the other way round, which policy may allow.
REVOKED_CTMARK = 0x02000000
#: The packet mark (skb mark, not the connection's) of a packet policy denied, with
#: ``--deny-action reject``: the loop gives it back to the hook (NF_REPEAT) with this mark, and
#: the REJECT rules at the top of our chains answer it (a TCP reset; an ICMP port unreachable).
REJECT_MARK = 0x04000000
#: Packet marks of packets a rule of an early hook allowed (handed back by the loop, NF_REPEAT).
UNTRACKED_MARK = 0x08000000
PRE_DNAT_MARK = 0x10000000
#: Conntrack marks of a connection a pre-DNAT rule allowed, and of one whose normal host policy
#: that skipped (traffic to the host itself).
PRE_DNAT_CTMARK = 0x10000000
PRE_DNAT_HOST_CTMARK = 0x20000000
#: Packet mark of a DNS answer whose addresses the DNS loop learned (handed back, NF_REPEAT).
DNS_MARK = 0x20000000
#: http rules: the packet mark of a new TCP connection admitted provisionally (its verdict awaits
#: its HTTP request; handed back by the loop), which our chain turns into ``HTTP_CTMARK`` on the
#: connection: its client-to-server packets then go to the HTTP queue.
HTTP_MARK = 0x40000000
HTTP_CTMARK = 0x04000000
#: The packet mark of a segment whose request the HTTP loop denied (it has reset both ends):
#: our chain marks the connection ``HTTP_DENIED_CTMARK`` and drops its packets, both ways.
HTTP_DENY_MARK = 0x80000000
HTTP_DENIED_CTMARK = 0x08000000
#: Packet marks (not the connection's: those above ending in CTMARK are) of a routed packet a host
#: endpoint's forward hook let on, by the interface it arrived on (IN) or leaves by (OUT).
FORWARD_IN_MARK = 0x01000000
FORWARD_OUT_MARK = 0x02000000
#: Conntrack mark bits of the host endpoint interface whose forward hook let a connection on:
#: its slot (1 + its place in ``Rules.forward_queues``, at most ``FORWARD_SLOTS``) for the side
#: it arrived by, and for the side it left by.
FORWARD_IN_CTMASK = 0x000F0000
FORWARD_OUT_CTMASK = 0x00F00000
FORWARD_SLOTS = 15


def forward_ctmark(index: int, ingress: bool) -> tuple[int, int] | None:
    """The conntrack mark (value, mask) of the connections the forward hook of the interface at
    ``index`` in ``Rules.forward_queues`` let on, for that side; None past the slots (such
    connections are not judged by their hook again)."""
    if index >= FORWARD_SLOTS:
        return None
    return ((index + 1) << 16, FORWARD_IN_CTMASK) if ingress else ((index + 1) << 20, FORWARD_OUT_CTMASK)


HOOKS = {"forward": "FORWARD", "input": "INPUT", "output": "OUTPUT"}
#: The early host-endpoint hooks: (table, built-in chain).
EARLY_HOOKS = {
    "untracked-in": ("raw", "PREROUTING"),
    "untracked-out": ("raw", "OUTPUT"),
    "pre-dnat": ("mangle", "PREROUTING"),
}
TABLES = ("filter", "raw", "mangle")


class IptablesError(RuntimeError):
    """An iptables command failed; the message carries its stderr."""


def _run(binary: str, *args: str, check: bool = True) -> str:
    proc = subprocess.run([binary, "-w", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise IptablesError(f"{binary} {' '.join(args)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc.stdout


def binaries(ipv6: bool = True) -> list[str]:
    """The iptables front-ends present: iptables, and ip6tables when ``ipv6`` and installed."""
    found = []
    for name in ("iptables", "ip6tables") if ipv6 else ("iptables",):
        path = shutil.which(name)
        if path:
            found.append(path)
    if not found:
        raise IptablesError("iptables not found in PATH")
    return found


def queue_target(first: int, last: int, fail_open: bool) -> list[str]:
    target = ["-j", "NFQUEUE"]
    target += ["--queue-num", str(first)] if first == last else ["--queue-balance", f"{first}:{last}"]
    if fail_open:
        target.append("--queue-bypass")
    return target


def _mark(mark: int) -> list[str]:
    return ["-m", "mark", "--mark", f"{mark:#x}/{mark:#x}"]


def _family(binary: str) -> int:
    return 6 if os.path.basename(binary).startswith("ip6") else 4


def _name(binary: str, table: str) -> str:
    return os.path.basename(binary) + ("" if table == "filter" else f" -t {table}")


def listing(binary: str, table: str) -> list[str]:
    """``iptables -t TABLE -S``: the table's chains and rules as iptables normalizes them (empty
    when the table cannot be listed)."""
    return _run(binary, "-t", table, "-S", check=False).splitlines()


_TARGET = re.compile(r"(?:^| )-[jg] (\S+)")


def _is_jump_to_ours(line: str) -> bool:
    """A rule of a chain not ours that jumps to one of ours."""
    if not line.startswith("-A ") or line.split(" ", 2)[1].startswith(PREFIX):
        return False
    target = _TARGET.search(line)
    return target is not None and target.group(1).startswith(PREFIX)


def _ours(lines: list[str]) -> list[str]:
    """The lines of a listing that are ours: our chains, their rules, the jumps to them."""
    return [line for line in lines if line.startswith((f"-N {PREFIX}", f"-A {PREFIX}")) or _is_jump_to_ours(line)]


def _chains_of_ours(lines: list[str]) -> list[str]:
    return [line.split()[1] for line in lines if line.startswith(f"-N {PREFIX}")]


def transaction(
    current: list[str], wanted: dict[str, tuple[str, list[list[str]]]], keep: tuple[str, ...] = ()
) -> list[str]:
    """The ``iptables-restore --noflush`` lines that make a table's chains of ours exactly
    ``wanted`` (``{chain: (built-in chain, rules)}``), from its listing ``current``: every chain
    of ours declared (created, or flushed under ``--noflush``) and filled, every jump to one of
    ours deleted and one put at position 1 of each built-in chain, the chains of ours not wanted
    (but those in ``keep``) deleted. Applied, it is one transaction: all of it or none."""
    gone = [c for c in _chains_of_ours(current) if c not in wanted and c not in keep]
    out = [f":{chain} - [0:0]" for chain in (*wanted, *gone)]
    out += ["-D" + line[2:] for line in current if _is_jump_to_ours(line)]
    for chain, (_, rules) in wanted.items():
        out += [" ".join(["-A", chain, *rule]) for rule in rules]
    out += [f"-I {builtin} 1 -j {chain}" for chain, (builtin, _) in wanted.items()]
    out += [f"-X {chain}" for chain in gone]
    return out


def _restore(binary: str, table: str, lines: list[str]) -> None:
    name = os.path.basename(binary) + "-restore"
    beside = os.path.join(os.path.dirname(binary), name)
    restore = beside if os.path.exists(beside) else shutil.which(name) or name
    text = f"*{table}\n" + "".join(line + "\n" for line in lines) + "COMMIT\n"
    try:
        proc = subprocess.run([restore, "-w", "--noflush"], input=text, capture_output=True, text=True)
    except OSError as e:
        raise IptablesError(f"{restore}: {e.strerror or e}") from e
    if proc.returncode != 0:
        raise IptablesError(f"{restore} -t {table}: {proc.stderr.strip() or f'exit {proc.returncode}'}")


def _apply(
    binary: str,
    table: str,
    wanted: dict[str, tuple[str, list[list[str]]]],
    keep: tuple[str, ...] = (),
    attempts: int = 3,
) -> list[str]:
    """Make ``table``'s chains of ours ``wanted`` in one transaction (read again and retried when
    someone else changed the table between the read and the write); returns the chains of ours
    it deleted."""
    for attempt in range(attempts):
        current = listing(binary, table)
        if not wanted and not _ours(current):
            return []
        try:
            _restore(binary, table, transaction(current, wanted, keep))
        except IptablesError:
            if attempt == attempts - 1:
                raise
            continue
        return [c for c in _chains_of_ours(current) if c not in wanted and c not in keep]
    return []


_QUEUE = re.compile(r"--queue-(?:num (\d+)|balance (\d+):(\d+))")


def queues_named(lines: list[str]) -> set[int]:
    """The NFQUEUE numbers the rules of our chains in a listing send packets to."""
    out: set[int] = set()
    for line in lines:
        if not line.startswith(f"-A {PREFIX}"):
            continue
        for num, first, last in _QUEUE.findall(line):
            out |= {int(num)} if num else set(range(int(first), int(last) + 1))
    return out


def listened_queues(path: str = "/proc/net/netfilter/nfnetlink_queue") -> set[int]:
    """The NFQUEUE numbers a process listens on in this network namespace."""
    try:
        with open(path) as f:
            return {int(line.split()[0]) for line in f if line.strip()}
    except (OSError, ValueError):
        return set()


def installed_queues(ipv6: bool = True) -> set[int]:
    """The queues the chains of ours found in the filter, raw and mangle tables send to."""
    out: set[int] = set()
    for binary in binaries(ipv6):
        for table in TABLES:
            out |= queues_named(listing(binary, table))
    return out


def uninstall(ipv6: bool = True, leave_mark: bool = True, keep_mark: bool = False) -> tuple[list[str], bool]:
    """Remove every chain of ours (and every jump to one) from the filter, raw and mangle
    tables, one transaction per table and family. With ``leave_mark``, while a process listens
    on a queue our rules send to (a daemon still running), ``UNINSTALLED`` is made first, so
    that the daemon's repair, from then on, removes instead of putting back; ``keep_mark``
    keeps one that is there. Returns what was removed, as ``binary chain`` (``binary
    table/chain`` outside filter), and whether the mark was left."""
    running = leave_mark and bool(installed_queues(ipv6) & listened_queues())
    if running:
        _restore(binaries(False)[0], "filter", [f":{UNINSTALLED} - [0:0]"])
    keep = (UNINSTALLED,) if running or keep_mark else ()
    removed = []
    for binary in binaries(ipv6):
        for table in TABLES:
            for chain in _apply(binary, table, {}, keep):
                removed.append(f"{binary} {chain}" if table == "filter" else f"{binary} {table}/{chain}")
    return removed, running


#: Ends each rule of the node's own traffic: says which they are in a listing (``open_stale``).
NODE_TAG = ["-m", "comment", "--comment", "pyclassify-node", "-j", "RETURN"]


def node_rules(node: NodeTraffic, hook: str, family: int) -> list[list[str]]:
    """The rules of our chain for ``hook`` (IPv``family``) that let the node's own traffic through
    unqueued (``pyclassify.enforce.node``). In the raw table (untracked hooks) no connection
    tracking says what a reply is: the replies of the node's own connections are named too."""
    out: list[list[str]] = []

    def ports(entries: tuple[FailsafePort, ...], peer: str, side: str) -> None:
        for entry in entries:
            if entry.net is not None and entry.net.version != family:
                continue
            net = [peer, str(entry.net)] if entry.net is not None else []
            out.append(["-p", PROTOCOL_NAMES[entry.protocol], *net, side, str(entry.port)])

    apis = [(str(a), str(p)) for a, p in node.api_servers if a.version == family]
    dns = [str(a) for a in node.dns_servers if a.version == family]
    if hook in ("input", "pre-dnat", "untracked-in"):
        ports(node.inbound, "-s", "--dport")
    if hook in ("output", "untracked-out"):
        ports(node.outbound, "-d", "--dport")
    if hook == "output":
        # on the destination before DNAT: an API server or DNS Service's virtual address
        out += [["-p", "tcp", "-m", "conntrack", "--ctorigdst", a, "--ctorigdstport", p] for a, p in apis]
        out += [
            ["-p", proto, "-m", "conntrack", "--ctorigdst", a, "--ctorigdstport", str(DNS_PORT)]
            for a in dns
            for proto in ("udp", "tcp")
        ]
    if hook == "untracked-in":
        ports(node.outbound, "-s", "--sport")
        out += [["-p", "tcp", "-s", a, "--sport", p] for a, p in apis]
        out += [["-p", proto, "-s", a, "--sport", str(DNS_PORT)] for a in dns for proto in ("udp", "tcp")]
    if hook == "untracked-out":
        ports(node.inbound, "-d", "--sport")
        out += [["-p", "tcp", "-d", a, "--dport", p] for a, p in apis]
        out += [["-p", proto, "-d", a, "--dport", str(DNS_PORT)] for a in dns for proto in ("udp", "tcp")]
    if hook in ("output", "untracked-out"):
        out.append(_mark(OWN_MARK))
    return [[*rule, *NODE_TAG] for rule in out]


#: Our chain's hook by (table, built-in chain).
HOOK_OF = {
    **{("filter", builtin): hook for hook, builtin in HOOKS.items()},
    **{where: hook for hook, where in EARLY_HOOKS.items()},
}


def open_stale(node: NodeTraffic, ipv6: bool = True) -> list[str]:
    """Let the node's own traffic through the chains of ours a killed or older daemon left,
    before anything else is done (a start reads the cluster through them): its rules put at the
    top of each such chain that has none yet, one transaction per table and family. Returns the
    chains opened."""
    opened = []
    for binary in binaries(ipv6):
        for table in TABLES:
            current = listing(binary, table)
            present = set(_chains_of_ours(current))
            lines = []
            for (t, builtin), hook in HOOK_OF.items():
                chain = PREFIX + builtin
                tagged = any(line.startswith(f"-A {chain} ") and "pyclassify-node" in line for line in current)
                opening = t == table and chain in present and not tagged
                rules = node_rules(node, hook, _family(binary)) if opening else []
                if rules:
                    lines += [" ".join(["-I", chain, str(i), *rule]) for i, rule in enumerate(rules, 1)]
                    opened.append(f"{_name(binary, table)}: {chain}")
            if lines:
                _restore(binary, table, lines)
    return opened


@dataclass
class Rules:
    """Our chains for queues ``first..last``: ``install()`` (adopting what another daemon left),
    ``extend()``, ``repair()``; ``remove()`` when asked to."""

    first: int
    last: int
    fail_open: bool = False
    hooks: tuple[str, ...] = ("forward", "input", "output")
    ipv6: bool = True
    reject: bool = False  # the REJECT rules of ``--deny-action reject``
    #: the queues of the early hooks (None: no chain for that hook): untracked (raw) and
    #: pre-DNAT (mangle)
    untracked_queue: int | None = None
    pre_dnat_queue: int | None = None
    #: the DNS-learning queue (domain rules): answers to established DNS queries go through it
    dns_queue: int | None = None
    #: the HTTP queue (http rules): client-to-server packets of connections admitted provisionally
    http_queue: int | None = None
    #: host endpoint interfaces judged by their forward hook: (interface, ingress queue, egress
    #: queue); ``*``: every interface no other names that is not a workload's (``workload_prefix``)
    forward_queues: tuple[tuple[str, int, int], ...] = ()
    workload_prefix: str = "cali"
    #: the node's own traffic, let through ahead of the queue
    node: NodeTraffic = field(default_factory=NodeTraffic)
    #: per (binary, table): our lines of ``iptables -S`` as the kernel read them back after our
    #: last transaction (what a repair compares with); empty before ``install()``
    expected: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [h for h in self.hooks if h not in HOOKS]
        if unknown:
            raise ValueError(f"unknown hook(s) {', '.join(unknown)}; choose from {', '.join(HOOKS)}")
        if not 0 <= self.first <= self.last <= 65535:
            raise ValueError(f"queue range {self.first}-{self.last} invalid")

    def chains(self) -> list[tuple[str, str, str]]:
        """(hook, table, built-in chain) of every chain we install."""
        out = [(hook, "filter", HOOKS[hook]) for hook in self.hooks]
        queues = {
            "untracked-in": self.untracked_queue,
            "untracked-out": self.untracked_queue,
            "pre-dnat": self.pre_dnat_queue,
        }
        out += [(hook, *where) for hook, where in EARLY_HOOKS.items() if queues[hook] is not None]
        return out

    def rules(self, hook: str, family: int = 4) -> list[list[str]]:
        """The rules of our chain for ``hook`` (without the chain name), for IPv``family``."""
        if hook in EARLY_HOOKS:
            return self._early_rules(hook, family)
        out: list[list[str]] = []
        if hook == "input":
            out.append(["-i", "lo", "-j", "RETURN"])
        elif hook == "output":
            out.append(["-o", "lo", "-j", "RETURN"])
            # The node's own traffic to a pod on it (the kubelet's probes) is no routed traffic:
            # no workload's policy judges it, and no host endpoint's ("*" is every interface but
            # a workload's), as felix renders it.
            out.append(["-o", f"{self.workload_prefix}+", "-j", "RETURN"])
        out += node_rules(self.node, hook, family)
        if self.untracked_queue is not None:  # judged by untracked policy in the raw table
            out.append(["-m", "conntrack", "--ctstate", "UNTRACKED", "-j", "RETURN"])
        if self.pre_dnat_queue is not None and hook == "input":  # a pre-DNAT rule allowed it
            skipped = PRE_DNAT_HOST_CTMARK | JUDGED_CTMARK  # normal host policy skipped; revalidated
            out.append([*_mark(PRE_DNAT_MARK), "-j", "CONNMARK", "--or-mark", hex(skipped)])
            out.append([*_mark(PRE_DNAT_MARK), "-j", "RETURN"])
        if self.http_queue is not None:
            deny, pending = _mark(HTTP_DENY_MARK), _mark(HTTP_MARK)
            out.append([*deny, "-j", "CONNMARK", "--or-mark", hex(HTTP_DENIED_CTMARK)])
            out.append([*deny, "-j", "DROP"])
            out.append(["-m", "connmark", "--mark", f"{HTTP_DENIED_CTMARK:#x}/{HTTP_DENIED_CTMARK:#x}", "-j", "DROP"])
            new = ["-m", "conntrack", "--ctstate", "NEW"]
            out.append([*pending, *new, "-j", "CONNMARK", "--or-mark", hex(HTTP_CTMARK)])
            out.append([*pending, *new, "-j", "RETURN"])
            out.append([*pending, "-j", "DROP"])  # only a SYN is admitted so (not an invalid packet)
        out.append(["-m", "connmark", "--mark", f"{REVOKED_CTMARK:#x}/{REVOKED_CTMARK:#x}", "-j", "DROP"])
        if self.http_queue is not None:
            # (not resets: nothing to read, and the loop's own resets pass here on OUTPUT)
            out.append(
                [
                    "-p",
                    "tcp",
                    "--tcp-flags",
                    "RST",
                    "NONE",
                    "-m",
                    "connmark",
                    "--mark",
                    f"{HTTP_CTMARK:#x}/{HTTP_CTMARK:#x}",
                    "-m",
                    "conntrack",
                    "--ctstate",
                    "ESTABLISHED",
                    "--ctdir",
                    "ORIGINAL",
                    *queue_target(self.http_queue, self.http_queue, self.fail_open),
                ]
            )
        if self.dns_queue is not None:
            # Answers to the DNS queries policy allowed teach domain rules their addresses before
            # they are let through (back with DNS_MARK); established, they need no judging.
            out.append(["-m", "mark", "--mark", f"{DNS_MARK:#x}/{DNS_MARK:#x}", "-j", "RETURN"])
            for proto in ("udp", "tcp"):
                out.append(
                    [
                        "-p",
                        proto,
                        "--sport",
                        "53",
                        "-m",
                        "conntrack",
                        "--ctstate",
                        "ESTABLISHED",
                        *queue_target(self.dns_queue, self.dns_queue, self.fail_open),
                    ]
                )
        if self.reject:
            mark = ["-m", "mark", "--mark", f"{REJECT_MARK:#x}/{REJECT_MARK:#x}"]
            out.append(["-p", "tcp", *mark, "-j", "REJECT", "--reject-with", "tcp-reset"])
            out.append([*mark, "-j", "REJECT"])  # the family's ICMP port unreachable
        out.append(["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"])
        if hook == "forward":
            # named interfaces first: an all-interfaces host endpoint takes what they leave
            ordered = sorted(enumerate(self.forward_queues), key=lambda q: q[1][0] == "*")
            for _, (iface, in_queue, out_queue) in ordered:
                for flag, hook_mark, queue in (("-i", FORWARD_IN_MARK, in_queue), ("-o", FORWARD_OUT_MARK, out_queue)):
                    # (mark & mask) == 0: neither this hook nor a pre-DNAT rule let it on yet
                    unseen = ["-m", "mark", "--mark", f"0x0/{hook_mark | PRE_DNAT_MARK:#x}"]
                    out.append([*self._interface(flag, iface), *unseen, *queue_target(queue, queue, self.fail_open)])
            for index, (iface, _, _) in ordered:
                for flag, hook_mark, ingress in (("-i", FORWARD_IN_MARK, True), ("-o", FORWARD_OUT_MARK, False)):
                    slot = forward_ctmark(index, ingress)
                    if slot is not None:  # once: the first that matches (a named interface before ``*``)
                        unmarked = ["-m", "connmark", "--mark", f"0x0/{slot[1]:#x}"]
                        out.append(
                            [
                                *self._interface(flag, iface),
                                *_mark(hook_mark),
                                *unmarked,
                                "-j",
                                "CONNMARK",
                                "--or-mark",
                                hex(slot[0]),
                            ]
                        )
        out.append(["-j", "CONNMARK", "--or-mark", hex(JUDGED_CTMARK)])
        out.append(queue_target(self.first, self.last, self.fail_open))
        return out

    def _interface(self, flag: str, iface: str) -> list[str]:
        """The match of a host endpoint's interface (``*``: any but a workload's)."""
        return ["!", flag, f"{self.workload_prefix}+"] if iface == "*" else [flag, iface]

    def _early_rules(self, hook: str, family: int) -> list[list[str]]:
        inbound = hook != "untracked-out"
        out = [["-i" if inbound else "-o", "lo", "-j", "RETURN"], *node_rules(self.node, hook, family)]
        if hook == "pre-dnat":
            assert self.pre_dnat_queue is not None
            mark = ["-m", "mark", "--mark", f"{PRE_DNAT_MARK:#x}/{PRE_DNAT_MARK:#x}"]
            out.append([*mark, "-j", "CONNMARK", "--or-mark", hex(PRE_DNAT_CTMARK)])
            out.append([*mark, "-j", "RETURN"])
            out.append(["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED,UNTRACKED", "-j", "RETURN"])
            queue = self.pre_dnat_queue
        else:
            assert self.untracked_queue is not None
            mark = ["-m", "mark", "--mark", f"{UNTRACKED_MARK:#x}/{UNTRACKED_MARK:#x}"]
            out.append([*mark, "-j", "CT", "--notrack"])
            out.append([*mark, "-j", "RETURN"])
            queue = self.untracked_queue
        if inbound:  # traffic to the host: what these hooks can name a host endpoint for
            out.append(["-m", "addrtype", "!", "--dst-type", "LOCAL", "-j", "RETURN"])
        out.append(queue_target(queue, queue, self.fail_open))
        return out

    def wanted(self, binary: str) -> dict[str, dict[str, tuple[str, list[list[str]]]]]:
        """Per table, our chains for ``binary``'s family: ``{chain: (built-in chain, rules)}``."""
        out: dict[str, dict[str, tuple[str, list[list[str]]]]] = {table: {} for table in TABLES}
        for hook, table, builtin in self.chains():
            out[table][PREFIX + builtin] = (builtin, self.rules(hook, _family(binary)))
        return out

    def apply(self, adopt: bool = False) -> None:
        """Our rules, as this object now says, in place of whatever chains of ours each table
        holds (another daemon's too): one transaction per table and family; then each table is
        read back, for ``damage()`` to compare with. ``UNINSTALLED`` stays (it says our rules
        must go), but when ``adopt``ing at start."""
        keep = () if adopt else (UNINSTALLED,)
        for binary in sorted({b for b, _ in self.expected}) or binaries(self.ipv6):
            for table, chains in self.wanted(binary).items():
                _apply(binary, table, chains, keep)
                self.expected[(binary, table)] = _ours(listing(binary, table))

    def install(self) -> None:
        """Our chains in place of those another daemon left (adopted: replaced in one
        transaction per table, never removed first)."""
        self.apply(adopt=True)

    def extend(
        self,
        untracked_queue: int | None = None,
        pre_dnat_queue: int | None = None,
        dns_queue: int | None = None,
        http_queue: int | None = None,
        forward_queues: tuple[tuple[str, int, int], ...] = (),
    ) -> None:
        """Hooks first needed after ``install()`` (a reload brought the first doNotTrack, preDNAT,
        domain or http rule, or a host endpoint interface to judge by its forward hook): their
        chains and the rules they add to our filter chains, in the same one transaction per
        table that replaces the rest, so no packet meets fewer of ours meanwhile."""
        self.untracked_queue = self.untracked_queue if untracked_queue is None else untracked_queue
        self.pre_dnat_queue = self.pre_dnat_queue if pre_dnat_queue is None else pre_dnat_queue
        self.dns_queue = self.dns_queue if dns_queue is None else dns_queue
        self.http_queue = self.http_queue if http_queue is None else http_queue
        self.forward_queues = (*self.forward_queues, *forward_queues)
        self.apply()

    def follow_node(self, node: NodeTraffic) -> bool:
        """The node's own traffic changed (the failsafe ports of a reloaded FelixConfiguration):
        our rules follow it. Returns whether they changed."""
        if node == self.node:
            return False
        self.node = node
        self.apply()
        return True

    def damage(self) -> list[str]:
        """What someone else changed since our last transaction (empty: nothing), from each
        table's ``iptables -S`` compared line by line with what the kernel read back then: a
        hooked built-in chain that no longer begins with the jump to ours, a jump to ours
        elsewhere, a chain of ours gone, a rule of ours replaced, added or removed (another
        daemon's chains put in place of ours too), a chain of ours we did not make."""
        found: list[str] = []
        for (binary, table), expected in self.expected.items():
            current = listing(binary, table)
            name = _name(binary, table)
            wanted = self.wanted(binary)[table]
            for chain, (builtin, _) in wanted.items():
                first = next((line for line in current if line.startswith(f"-A {builtin} ")), None)
                if first != f"-A {builtin} -j {chain}":
                    found.append(f"{name}: {builtin} does not begin with the jump to {chain}")
                if f"-N {chain}" not in current:
                    found.append(f"{name}: {chain} is gone")
                    continue
                have = [line for line in current if line.startswith(f"-A {chain} ")]
                want = [line for line in expected if line.startswith(f"-A {chain} ")]
                if have != want:
                    at = next((i for i, (a, b) in enumerate(zip(have, want)) if a != b), min(len(have), len(want)))
                    now = f"{have[at]!r}" if at < len(have) else "nothing"
                    found.append(f"{name}: {chain} holds other rules than ours (rule {at + 1} is {now})")
            jumps = [line for line in current if _is_jump_to_ours(line)]
            extra = [line for line in jumps if line not in {f"-A {b} -j {c}" for c, (b, _) in wanted.items()}]
            extra += [line for line in dict.fromkeys(jumps) if jumps.count(line) > 1]
            found += [f"{name}: another jump to a chain of ours: {line!r}" for line in extra]
            found += [
                f"{name}: {chain} is not ours"
                for chain in _chains_of_ours(current)
                if chain not in wanted and chain != UNINSTALLED
            ]
        return found

    def repair(self) -> list[str]:
        """Puts our rules back as our last transaction left them if someone changed them (one
        transaction per table again); returns what was found changed (empty: nothing was)."""
        found = self.damage()
        if found:
            self.apply()
        return found

    def uninstalled(self) -> bool:
        """Whether ``uninstall()`` has removed our rules while we run (``UNINSTALLED``)."""
        return any(f"-N {UNINSTALLED}" in listing(binary, "filter") for binary in {b for b, _ in self.expected})

    def remove(self, keep_mark: bool = False) -> None:
        """Every chain of ours and every jump to one removed (``uninstall()``); ``UNINSTALLED``
        too, but with ``keep_mark``."""
        uninstall(self.ipv6, leave_mark=False, keep_mark=keep_mark)
        self.expected.clear()
