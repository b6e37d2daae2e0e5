//! Compiled rules: the IR's rules (`pyclassify/ir.py`) with every selector replaced by the id
//! of the identity set it resolves to, protocols as bitmaps and networks parsed.
//!
//! A compiled policy holds no identity data itself: which identities a peer matches lives in
//! the snapshot's set table, so an endpoint change never touches a compiled policy, and a
//! policy change never touches another policy's sets.

use crate::dns::DomainPattern;
use crate::http::{HttpMatch, PathMatch};
use std::collections::HashSet;
use std::sync::Arc;

use super::spec::PortSpec;
use super::{is_port_protocol, Action, Addr, EngineError, Net, PROTO_ICMP, PROTO_ICMPV6};

/// Something with named container ports (an endpoint, an identity).
pub trait NamedPorts {
    fn has_named_port(&self, name: &str, protocol: u8, port: u16) -> bool;
}

/// One port entry: protocol (None = any) and a range, a named port, or any port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PortMatch {
    Any { protocol: Option<u8> },
    Range { protocol: Option<u8>, first: u16, last: u16 },
    Named { protocol: Option<u8>, name: Arc<str> },
}

impl PortMatch {
    pub fn compile(p: &PortSpec) -> Result<PortMatch, EngineError> {
        Ok(match (&p.name, p.first, p.last) {
            (Some(name), _, _) => PortMatch::Named { protocol: p.protocol, name: Arc::from(name.as_str()) },
            (None, Some(first), Some(last)) => PortMatch::Range { protocol: p.protocol, first, last },
            (None, None, None) => PortMatch::Any { protocol: p.protocol },
            _ => return Err(EngineError::Spec("a port range needs first and last".into())),
        })
    }

    pub fn protocol(&self) -> Option<u8> {
        match self {
            PortMatch::Any { protocol } | PortMatch::Range { protocol, .. } | PortMatch::Named { protocol, .. } => {
                *protocol
            }
        }
    }

    /// Whether a flow's protocol and port (of this side) match; named ports resolve against
    /// `owner`, the endpoint on this side of the flow (an outside address has none).
    #[inline]
    pub fn matches<O: NamedPorts + ?Sized>(&self, protocol: u8, port: Option<u16>, owner: Option<&O>) -> bool {
        if let Some(p) = self.protocol() {
            if p != protocol {
                return false;
            }
        }
        match self {
            PortMatch::Any { .. } => true,
            PortMatch::Range { first, last, .. } => {
                port.is_some_and(|port| is_port_protocol(protocol) && *first <= port && port <= *last)
            }
            PortMatch::Named { name, .. } => port.is_some_and(|port| {
                is_port_protocol(protocol) && owner.is_some_and(|o| o.has_named_port(name, protocol, port))
            }),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IcmpMatch {
    pub icmp_type: Option<u8>,
    pub code: Option<u8>,
}

impl IcmpMatch {
    #[inline]
    pub fn matches(&self, protocol: u8, icmp_type: Option<u8>, icmp_code: Option<u8>) -> bool {
        matches!(protocol, PROTO_ICMP | PROTO_ICMPV6)
            && (self.icmp_type.is_none() || icmp_type == self.icmp_type)
            && (self.code.is_none() || icmp_code == self.code)
    }
}

/// A set of IP protocol numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ProtoSet([u64; 4]);

impl ProtoSet {
    pub fn of(protocols: &[u8]) -> ProtoSet {
        let mut s = ProtoSet::default();
        for &p in protocols {
            s.0[(p >> 6) as usize] |= 1 << (p & 63);
        }
        s
    }

    #[inline]
    pub fn contains(&self, p: u8) -> bool {
        self.0[(p >> 6) as usize] & (1 << (p & 63)) != 0
    }

    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }

    /// The protocols in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let b = rest.trailing_zeros();
                rest &= rest - 1;
                Some((w as u32 * 64 + b) as u8)
            })
        })
    }
}

/// A short list of networks (most rules name one to three).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetList(pub Vec<Net>);

impl NetList {
    pub fn parse(texts: &[String]) -> Result<NetList, EngineError> {
        Ok(NetList(texts.iter().map(|t| Net::parse(t)).collect::<Result<_, _>>()?))
    }

    #[inline]
    pub fn contains(&self, a: Addr) -> bool {
        self.0.iter().any(|n| n.contains(a))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// How a rule peer's label conditions (selector, namespace, service account, kinds) are held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelCond {
    /// No label condition: any address, known or not.
    None,
    /// The identities of the set with this id (in the snapshot's set table).
    Set(u32),
    /// Relative to the subject's namespace (ANP `related`, `sameLabels`): the set for the
    /// subject's namespace is found by (relative id, namespace id) in the snapshot.
    Relative(u32),
}

/// One side (source or destination) of a compiled rule: every present field must hold.
#[derive(Clone, Debug)]
pub struct CEntity {
    pub nets: NetList,
    pub not_nets: NetList,
    /// Addresses of the nodes a `nodeSelector` matches.
    pub node_addrs: Option<Arc<HashSet<Addr>>>,
    /// Domain patterns: the address must be one DNS taught for a matching name
    /// (`Snapshot::domain_facts`), at the packet's time.
    pub domains: Option<Arc<[DomainPattern]>>,
    /// A Calico `services` match: (namespace, name), looked up in the snapshot.
    pub service: Option<(Arc<str>, Arc<str>)>,
    pub labels: LabelCond,
    /// Whether network sets containing the address can satisfy the label condition.
    pub netsets: bool,
    /// A `notSelector`: the set (in the snapshot's set table) of what it excludes. The address
    /// matches only if neither its endpoint's identity nor any network set containing it is in
    /// the set; an address nothing owns passes (felix: "not in the IP set").
    pub not_labels: Option<u32>,
    pub ports: Vec<PortMatch>,
    pub not_ports: Vec<PortMatch>,
    pub unresolvable: bool,
}

#[derive(Clone, Debug)]
pub struct CRule {
    pub action: Action,
    pub ip_version: Option<u8>,
    pub protocols: Option<ProtoSet>,
    pub not_protocols: ProtoSet,
    pub icmp: Option<IcmpMatch>,
    pub not_icmp: Option<IcmpMatch>,
    pub sources: Vec<CEntity>,
    pub destinations: Vec<CEntity>,
    /// The connection's HTTP request must match (TCP only); without a request the rule matches
    /// nothing and the decision awaits one.
    pub http: Option<Arc<HttpMatch>>,
}

impl CRule {
    /// The compiled `http` match of a rule spec.
    pub fn compile_http(spec: &super::spec::HttpSpec) -> Result<HttpMatch, EngineError> {
        let paths = spec
            .paths
            .iter()
            .map(|(kind, p)| match kind.as_str() {
                "exact" => Ok(PathMatch::Exact(p.clone())),
                "prefix" => Ok(PathMatch::Prefix(p.clone())),
                other => Err(EngineError::Spec(format!("unknown http path match {other:?}"))),
            })
            .collect::<Result<_, _>>()?;
        Ok(HttpMatch { methods: spec.methods.clone(), paths })
    }
}

/// A policy's (or profile's) compiled rules per direction.
#[derive(Clone, Debug, Default)]
pub struct CRules {
    pub ingress: Vec<CRule>,
    pub egress: Vec<CRule>,
}

impl CRules {
    #[inline]
    pub fn get(&self, d: super::Direction) -> &[CRule] {
        match d {
            super::Direction::Ingress => &self.ingress,
            super::Direction::Egress => &self.egress,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ProtoSet;

    #[test]
    fn proto_set_iterates_its_members_ascending() {
        let s = ProtoSet::of(&[255, 0, 6, 64, 63, 17, 128]);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 6, 17, 63, 64, 128, 255]);
        assert_eq!(ProtoSet::default().iter().count(), 0);
    }
}
