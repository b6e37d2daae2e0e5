"""The iptables rules of ``pyclassify enforce``: our own chains, installed and removed by us.

Every chain we create is named ``PYCLASSIFY-<HOOK>`` (the prefix is reserved for us), in the
``filter`` table of iptables and ip6tables, with one jump from the built-in chain at position 1:

- ``FORWARD`` (routed pod traffic), ``INPUT`` and ``OUTPUT`` (host endpoints; loopback skipped);
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

``remove_stale()`` deletes every ``PYCLASSIFY-*`` chain and every jump to one (filter, raw and
mangle tables): the daemon calls it before installing (rules left by a killed daemon) and
``Rules.remove()`` on exit.

This kernel has no nftables ``queue`` statement, so the iptables front-end (nf_tables or legacy
backend, whichever ``iptables`` is) is used.
"""

from __future__ import annotations

import shutil
import subprocess
import os
from dataclasses import dataclass, field

PREFIX = "PYCLASSIFY-"
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
EARLY_HOOKS = {"untracked-in": ("raw", "PREROUTING"), "untracked-out": ("raw", "OUTPUT"),
               "pre-dnat": ("mangle", "PREROUTING")}
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


def remove_stale(ipv6: bool = True) -> list[str]:
    """Remove every PYCLASSIFY-* chain (and the jumps to them) from the filter, raw and mangle
    tables; returns what was removed, as ``binary chain`` (``binary table/chain`` outside filter)."""
    removed = []
    for binary in binaries(ipv6):
        for table in TABLES:
            listing = _run(binary, "-t", table, "-S", check=False).splitlines()
            ours = [line.split()[1] for line in listing if line.startswith(f"-N {PREFIX}")]
            for line in listing:
                parts = line.split()
                if len(parts) > 2 and parts[0] == "-A" and not parts[1].startswith(PREFIX) and "-j" in parts:
                    target = parts[parts.index("-j") + 1]
                    if target.startswith(PREFIX):
                        _run(binary, "-t", table, "-D", *parts[1:], check=False)
            for chain in ours:
                _run(binary, "-t", table, "-F", chain, check=False)
                _run(binary, "-t", table, "-X", chain, check=False)
                removed.append(f"{binary} {chain}" if table == "filter" else f"{binary} {table}/{chain}")
    return removed


@dataclass
class Rules:
    """Our chains for queues ``first..last``; ``install()`` then ``remove()``."""

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
    installed: list[tuple[str, str, str, str]] = field(default_factory=list)  # (binary, table, builtin, chain)

    def __post_init__(self) -> None:
        unknown = [h for h in self.hooks if h not in HOOKS]
        if unknown:
            raise ValueError(f"unknown hook(s) {', '.join(unknown)}; choose from {', '.join(HOOKS)}")
        if not 0 <= self.first <= self.last <= 65535:
            raise ValueError(f"queue range {self.first}-{self.last} invalid")

    def chains(self) -> list[tuple[str, str, str]]:
        """(hook, table, built-in chain) of every chain we install."""
        out = [(hook, "filter", HOOKS[hook]) for hook in self.hooks]
        queues = {"untracked-in": self.untracked_queue, "untracked-out": self.untracked_queue,
                  "pre-dnat": self.pre_dnat_queue}
        out += [(hook, *where) for hook, where in EARLY_HOOKS.items() if queues[hook] is not None]
        return out

    def rules(self, hook: str) -> list[list[str]]:
        """The rules of our chain for ``hook`` (without the chain name)."""
        if hook in EARLY_HOOKS:
            return self._early_rules(hook)
        out: list[list[str]] = []
        if hook == "input":
            out.append(["-i", "lo", "-j", "RETURN"])
        elif hook == "output":
            out.append(["-o", "lo", "-j", "RETURN"])
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
            out.append(["-p", "tcp", "--tcp-flags", "RST", "NONE", "-m", "connmark", "--mark", f"{HTTP_CTMARK:#x}/{HTTP_CTMARK:#x}",
                        "-m", "conntrack", "--ctstate", "ESTABLISHED", "--ctdir", "ORIGINAL",
                        *queue_target(self.http_queue, self.http_queue, self.fail_open)])
        if self.dns_queue is not None:
            # Answers to the DNS queries policy allowed teach domain rules their addresses before
            # they are let through (back with DNS_MARK); established, they need no judging.
            out.append(["-m", "mark", "--mark", f"{DNS_MARK:#x}/{DNS_MARK:#x}", "-j", "RETURN"])
            for proto in ("udp", "tcp"):
                out.append(["-p", proto, "--sport", "53", "-m", "conntrack", "--ctstate", "ESTABLISHED",
                            *queue_target(self.dns_queue, self.dns_queue, self.fail_open)])
        if self.reject:
            mark = ["-m", "mark", "--mark", f"{REJECT_MARK:#x}/{REJECT_MARK:#x}"]
            out.append(["-p", "tcp", *mark, "-j", "REJECT", "--reject-with", "tcp-reset"])
            out.append([*mark, "-j", "REJECT"])  # the family's ICMP port unreachable
        out.append(["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"])
        if hook == "forward":
            # named interfaces first: an all-interfaces host endpoint takes what they leave
            ordered = sorted(enumerate(self.forward_queues), key=lambda q: q[1][0] == "*")
            for _, (iface, in_queue, out_queue) in ordered:
                for flag, mark, queue in (("-i", FORWARD_IN_MARK, in_queue), ("-o", FORWARD_OUT_MARK, out_queue)):
                    # (mark & mask) == 0: neither this hook nor a pre-DNAT rule let it on yet
                    unseen = ["-m", "mark", "--mark", f"0x0/{mark | PRE_DNAT_MARK:#x}"]
                    out.append([*self._interface(flag, iface), *unseen, *queue_target(queue, queue, self.fail_open)])
            for index, (iface, _, _) in ordered:
                for flag, mark, ingress in (("-i", FORWARD_IN_MARK, True), ("-o", FORWARD_OUT_MARK, False)):
                    slot = forward_ctmark(index, ingress)
                    if slot is not None:  # once: the first that matches (a named interface before ``*``)
                        unmarked = ["-m", "connmark", "--mark", f"0x0/{slot[1]:#x}"]
                        out.append([*self._interface(flag, iface), *_mark(mark), *unmarked, "-j", "CONNMARK",
                                    "--or-mark", hex(slot[0])])
        out.append(["-j", "CONNMARK", "--or-mark", hex(JUDGED_CTMARK)])
        out.append(queue_target(self.first, self.last, self.fail_open))
        return out

    def _interface(self, flag: str, iface: str) -> list[str]:
        """The match of a host endpoint's interface (``*``: any but a workload's)."""
        return ["!", flag, f"{self.workload_prefix}+"] if iface == "*" else [flag, iface]

    def _early_rules(self, hook: str) -> list[list[str]]:
        inbound = hook != "untracked-out"
        out = [["-i" if inbound else "-o", "lo", "-j", "RETURN"]]
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

    def install(self) -> None:
        remove_stale(self.ipv6)
        try:
            for binary in binaries(self.ipv6):
                for hook, table, builtin in self.chains():
                    chain = PREFIX + builtin
                    _run(binary, "-t", table, "-N", chain)
                    self.installed.append((binary, table, builtin, chain))
                    for rule in self.rules(hook):
                        _run(binary, "-t", table, "-A", chain, *rule)
                    _run(binary, "-t", table, "-I", builtin, "1", "-j", chain)
        except BaseException:
            self.remove()
            raise

    def extend(self, untracked_queue: int | None = None, pre_dnat_queue: int | None = None,
               dns_queue: int | None = None, http_queue: int | None = None,
               forward_queues: tuple[tuple[str, int, int], ...] = ()) -> None:
        """Hooks first needed after ``install()`` (a reload brought the first doNotTrack, preDNAT,
        domain or http rule, or a host endpoint interface to judge by its forward hook): their
        chains are created and jumped to, and the rules they add to our filter chains inserted
        in place. Rules are only added, never removed on the way, so no packet meets fewer of
        ours meanwhile."""
        before = {hook: self.rules(hook) for hook, _, _ in self.chains()}
        self.untracked_queue = self.untracked_queue if untracked_queue is None else untracked_queue
        self.pre_dnat_queue = self.pre_dnat_queue if pre_dnat_queue is None else pre_dnat_queue
        self.dns_queue = self.dns_queue if dns_queue is None else dns_queue
        self.http_queue = self.http_queue if http_queue is None else http_queue
        self.forward_queues = (*self.forward_queues, *forward_queues)
        for binary in sorted({b for b, _, _, _ in self.installed}):
            for hook, table, builtin in self.chains():
                chain = PREFIX + builtin
                if hook not in before:
                    _run(binary, "-t", table, "-N", chain)
                    self.installed.append((binary, table, builtin, chain))
                    for rule in self.rules(hook):
                        _run(binary, "-t", table, "-A", chain, *rule)
                    _run(binary, "-t", table, "-I", builtin, "1", "-j", chain)
                    continue
                old, j = before[hook], 0
                for i, rule in enumerate(self.rules(hook)):  # ours before are a subsequence of ours now
                    if j < len(old) and old[j] == rule:
                        j += 1
                    else:
                        _run(binary, "-t", table, "-I", chain, str(i + 1), *rule)

    def damage(self) -> list[str]:
        """What someone else changed since ``install()`` (empty: nothing): a hooked built-in
        chain that no longer begins with the jump to ours, a chain of ours gone or with other
        rules than ours."""
        found: list[str] = []
        hook_of = {(table, builtin): hook for hook, table, builtin in self.chains()}
        listings = {(b, t): _run(b, "-t", t, "-S", check=False).splitlines()
                    for b, t in {(x[0], x[1]) for x in self.installed}}
        for binary, table, builtin, chain in self.installed:
            listing = listings[(binary, table)]
            name = os.path.basename(binary) + ("" if table == "filter" else f" -t {table}")
            first = next((line for line in listing if line.startswith(f"-A {builtin} ")), None)
            if first != f"-A {builtin} -j {chain}":
                found.append(f"{name}: {builtin} does not begin with the jump to {chain}")
            if f"-N {chain}" not in listing:
                found.append(f"{name}: {chain} is gone")
            elif sum(line.startswith(f"-A {chain} ") for line in listing) != len(self.rules(hook_of[(table, builtin)])):
                found.append(f"{name}: {chain} holds other rules than ours")
        return found

    def repair(self) -> list[str]:
        """Puts our rules back as ``install()`` left them if someone changed them; returns what
        was found changed (empty: nothing was)."""
        found = self.damage()
        if found:
            self.remove()
            self.install()
        return found

    def remove(self) -> None:
        for binary, table, builtin, chain in reversed(self.installed):
            _run(binary, "-t", table, "-D", builtin, "-j", chain, check=False)
            _run(binary, "-t", table, "-F", chain, check=False)
            _run(binary, "-t", table, "-X", chain, check=False)
        self.installed.clear()
