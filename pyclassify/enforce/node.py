"""The node's own traffic that ``enforce`` never queues: what keeps a node reachable whether or
not a daemon reads the queue (a daemon killed, stopping, starting, or failing to start).

Our chains let it through ahead of the queue (``pyclassify.enforce.iptables`` renders the
rules), so it works while no process listens on the queue, when failing closed too:

- the failsafe ports of host endpoints, as Calico keeps them (Felix's FailsafeInboundHostPorts
  and FailsafeOutboundHostPorts; ``pyclassify.failsafe``: the manifests' FelixConfiguration, or
  Calico's defaults): SSH, DHCP, BGP, etcd, the API server's 6443, DNS over UDP;
- the node's connections to the API server the daemon follows (its kubeconfig, or the
  in-cluster service's address), matched on their destination before any DNAT (a Service's
  virtual address is translated before the filter table sees it);
- the node's connections to its DNS servers (``/etc/resolv.conf``), UDP and TCP;
- the daemon's own connections, whose sockets carry the packet mark ``OWN_MARK`` (the
  cluster source marks the sockets it opens to the API server).

Connections of this traffic are never judged at start either (``unqueued``): the kernel lets
them through ahead of the queue, so a verdict on them would change nothing.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyclassify.failsafe import DEFAULT_INBOUND, DEFAULT_OUTBOUND, FailsafeConfig, FailsafePort
from pyclassify.ir import PROTO_TCP as TCP
from pyclassify.ir import PROTO_UDP as UDP

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
RESOLV_CONF = "/etc/resolv.conf"
DNS_PORT = 53


@dataclass(frozen=True)
class NodeTraffic:
    """What our chains let through ahead of the queue (see the module's docstring)."""

    inbound: tuple[FailsafePort, ...] = DEFAULT_INBOUND
    outbound: tuple[FailsafePort, ...] = DEFAULT_OUTBOUND
    #: (address, TCP port) of each API server address
    api_servers: tuple[tuple[IPAddress, int], ...] = ()
    dns_servers: tuple[IPAddress, ...] = ()

    def with_failsafe(self, config: FailsafeConfig) -> NodeTraffic:
        return NodeTraffic(config.inbound, config.outbound, self.api_servers, self.dns_servers)

    def with_api_servers(self, servers: tuple[tuple[IPAddress, int], ...]) -> NodeTraffic:
        merged = tuple(dict.fromkeys((*self.api_servers, *servers)))
        return NodeTraffic(self.inbound, self.outbound, merged, self.dns_servers)

    def unqueued(self, judged: Any, original: Any, local: LocalAddresses, hooks: tuple[str, ...]) -> Any:
        """Which kernel conntrack entries (header rows, ``CtNetlink.dump``'s two buffers) our
        chains never queue: a connection over the loopback (both ends local), one on a hook we do
        not install (``hooks``), and this node traffic. A boolean array, row by row."""
        src_local, dst_local = local.contains(judged["src_addr"]), local.contains(judged["dst_addr"])
        inbound = dst_local & ~src_local
        outbound = src_local & ~dst_local
        out = src_local & dst_local
        for hook, rows in (("input", inbound), ("output", outbound), ("forward", ~src_local & ~dst_local)):
            if hook not in hooks:
                out |= rows
        proto, dport = judged["protocol"], judged["dport"]
        for port in self.inbound:
            hit = inbound & (proto == port.protocol) & (dport == port.port)
            out |= hit if port.net is None else hit & _in_net(judged["src_addr"], port.net)
        for port in self.outbound:
            hit = outbound & (proto == port.protocol) & (dport == port.port)
            out |= hit if port.net is None else hit & _in_net(judged["dst_addr"], port.net)
        # the API server and DNS by their destination before DNAT, as the rules match them
        oproto, odport = original["protocol"], original["dport"]
        for address, api_port in self.api_servers:
            out |= outbound & (oproto == TCP) & (odport == api_port) & _is(original["dst_addr"], address)
        dns = outbound & ((oproto == TCP) | (oproto == UDP)) & (odport == DNS_PORT)
        for address in self.dns_servers:
            out |= dns & _is(original["dst_addr"], address)
        return out


def _addr16(address: IPAddress) -> bytes:
    """An address as the header batch stores it: 16 bytes, IPv4 mapped (``::ffff:a.b.c.d``)."""
    if isinstance(address, ipaddress.IPv4Address):
        return ipaddress.IPv6Address(f"::ffff:{address}").packed
    return address.packed


def _is(addresses: Any, address: IPAddress) -> Any:
    return (addresses == np.frombuffer(_addr16(address), np.uint8)).all(axis=1)


def _in_net(addresses: Any, net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> Any:
    prefix = net.prefixlen + (96 if net.version == 4 else 0)
    mask = np.frombuffer(((1 << 128) - (1 << (128 - prefix))).to_bytes(16, "big"), np.uint8)
    base = np.frombuffer(_addr16(net.network_address), np.uint8)
    return ((addresses & mask) == base).all(axis=1)


@dataclass(frozen=True)
class LocalAddresses:
    """The addresses of this network namespace (its local routing table, as ``-m addrtype
    --dst-type LOCAL`` sees them), for telling a connection's hook from its addresses."""

    addresses: tuple[bytes, ...]  # 16 bytes each, IPv4 mapped

    @classmethod
    def read(cls, fib_trie: str = "/proc/net/fib_trie", if_inet6: str = "/proc/net/if_inet6") -> LocalAddresses:
        found: list[bytes] = []
        try:
            with open(fib_trie) as f:
                last = None
                for line in f:
                    text = line.strip()
                    if text.startswith("|-- "):
                        last = text[4:]
                    elif text.startswith("/32 host LOCAL") and last is not None:
                        found.append(_addr16(ipaddress.IPv4Address(last)))
        except OSError:
            pass
        try:
            with open(if_inet6) as f:
                found += [bytes.fromhex(line.split()[0]) for line in f if line.strip()]
        except OSError:
            pass
        return cls(tuple(dict.fromkeys(found)))

    def contains(self, addresses: Any) -> Any:
        """Row by row, whether each 16-byte address is local (the loopback net included)."""
        loopback = _in_net(addresses, ipaddress.ip_network("127.0.0.0/8"))
        if not self.addresses:
            return loopback
        known = np.frombuffer(b"".join(self.addresses), np.uint8).reshape(-1, 16)
        return loopback | (addresses[:, None, :] == known[None, :, :]).all(axis=2).any(axis=1)


def dns_servers(path: str = RESOLV_CONF) -> tuple[IPAddress, ...]:
    """The ``nameserver`` addresses of ``path`` (none when it cannot be read)."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "nameserver":
                    try:
                        out.append(ipaddress.ip_address(parts[1].split("%")[0]))
                    except ValueError:
                        continue
    except OSError:
        pass
    return tuple(dict.fromkeys(out))


def in_cluster_api_server() -> tuple[str, int] | None:
    """The API server a pod reaches (``KUBERNETES_SERVICE_HOST``/``_PORT``), when set."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not (port or "").isdigit():
        return None
    return host, int(port or 0)


def resolve(host: str, port: int, lookup: bool = True) -> tuple[tuple[IPAddress, int], ...]:
    """``host``'s addresses with ``port``: a literal address as is; a name looked up only with
    ``lookup`` (none when that fails)."""
    try:
        return ((ipaddress.ip_address(host.strip("[]")), port),)
    except ValueError:
        pass
    if not lookup:
        return ()
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return ()
    return tuple(dict.fromkeys((ipaddress.ip_address(str(info[4][0]).split("%")[0]), port) for info in infos))
