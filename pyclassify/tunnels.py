"""Overlay tunnels in captures: which are opened, and what a packet's outer header says.

A capture taken on a node's uplink shows the pods' packets inside the overlay's tunnels: VXLAN
(Calico's VXLAN mode, Flannel, Cilium), Geneve (Cilium), IP in IP (Calico's IPIP; IPv6 in IP,
protocol 41) and GRE (Ethernet, IPv4 or IPv6 inside). The decoder (native/decode.pxi) opens
them and describes the inner packet, which is what policy judges; the outer header goes beside
it (``batch.OUTER_DTYPE``), for the output to show. A tunnel it cannot read (an unknown GRE
payload, Geneve's critical options, an inner packet cut short, tunnels nested deeper than three)
is not judged: denied, and counted apart from malformed packets.

VXLAN and Geneve are recognised by their UDP destination port, which every overlay lets its
operator change (Calico: FelixConfiguration ``vxlanPort``, 4789 by default; Cilium:
``tunnel-port``, 8472 for VXLAN and 6081 for Geneve; Flannel: the backend's ``Port``, 8472);
``TunnelPorts`` says which ports to open, the defaults covering all of these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pyclassify import _native
from pyclassify.batch import ENCAP_GENEVE, ENCAP_GRE, ENCAP_KINDS, ENCAP_VXLAN, OUTER_HAS_KEY, address_text
from pyclassify.kinds.common import protocol_name

__all__ = ["DEFAULT_TUNNELS", "ENCAP_NAMES", "TunnelPorts", "outer_json"]

#: ``PacketHeader.encap`` as a word (``"vxlan"``, ...; ``"none"`` at 0).
ENCAP_NAMES: Final[tuple[str, ...]] = tuple(name[6:].lower() for name, _ in ENCAP_KINDS)
_UDP_TUNNELS: Final = (ENCAP_VXLAN, ENCAP_GENEVE)
#: The outer protocols of the IP tunnels, by their IANA keywords (the rest: ``protocol_name``).
_TUNNEL_PROTOCOLS: Final = {4: "IPv4", 41: "IPv6", 47: "GRE"}


@dataclass(frozen=True)
class TunnelPorts:
    """The UDP destination ports VXLAN and Geneve are opened on; ``decapsulate=False`` opens no
    tunnel at all (every packet judged by its outermost header)."""

    vxlan: tuple[int, ...] = tuple(_native.DEFAULT_VXLAN_PORTS)
    geneve: tuple[int, ...] = tuple(_native.DEFAULT_GENEVE_PORTS)
    decapsulate: bool = True

    def __post_init__(self) -> None:
        for name, ports in (("VXLAN", self.vxlan), ("Geneve", self.geneve)):
            for port in ports:
                if not 1 <= port <= 65535:
                    raise ValueError(f"{name} port {port} is not a UDP port (1-65535)")
            if len(ports) > _native.MAX_TUNNEL_PORTS:
                raise ValueError(f"at most {_native.MAX_TUNNEL_PORTS} {name} ports, not {len(ports)}")
        if set(self.vxlan) & set(self.geneve):
            raise ValueError(f"port {min(set(self.vxlan) & set(self.geneve))} given for both VXLAN and Geneve")

    def native(self) -> dict[str, Any]:
        """The keyword arguments of the native decoder and reader."""
        return {"vxlan_ports": self.vxlan, "geneve_ports": self.geneve, "decapsulate": self.decapsulate}

    def to_json(self) -> dict[str, Any]:
        return {"decapsulate": self.decapsulate, "vxlan_ports": list(self.vxlan), "geneve_ports": list(self.geneve)}


DEFAULT_TUNNELS: Final = TunnelPorts()


def outer_json(outer: Any) -> dict[str, Any]:
    """One packet's outer header (an ``OUTER_DTYPE`` record) as ``replay --out`` shows it:
    ``{"src", "dst", "proto", "sport", "dport", "encap", "vni"}`` — the outermost IP header and
    tunnel; ``vni`` the VXLAN/Geneve network identifier (``key``, for GRE, its key when it has
    one); ``depth`` when tunnels are nested."""
    version = int(outer["ip_version"])
    encap = int(outer["encap"])
    udp = encap in _UDP_TUNNELS
    doc: dict[str, Any] = {
        "src": address_text(outer["src_addr"], version),
        "dst": address_text(outer["dst_addr"], version),
        "proto": _TUNNEL_PROTOCOLS.get(int(outer["protocol"])) or protocol_name(int(outer["protocol"])),
        "sport": int(outer["sport"]) if udp else None,
        "dport": int(outer["dport"]) if udp else None,
        "encap": ENCAP_NAMES[encap] if encap < len(ENCAP_NAMES) else str(encap),
    }
    keyed = bool(int(outer["flags"]) & OUTER_HAS_KEY)
    if udp:
        doc["vni"] = int(outer["vni"]) if keyed else None
    elif encap == ENCAP_GRE:
        doc["key"] = int(outer["vni"]) if keyed else None
    if encap in (ENCAP_GRE, ENCAP_GENEVE) and int(outer["payload_type"]):
        doc["payload_type"] = f"0x{int(outer['payload_type']):04x}"
    if int(outer["depth"]) > 1:
        doc["depth"] = int(outer["depth"])
    return doc
