//! The rows of a snapshot's tables: what an address, an endpoint and an identity resolve to,
//! programs and profile lists (with their compiled form, made once), the network sets' prefix
//! lookup, services.

use super::*;

/// What an address resolves to: its endpoint, the endpoint's identity, the address's class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrRec {
    pub endpoint: u32,
    pub identity: u32,
    pub class: u32,
    pub local: bool,
    pub host: bool,
}

#[derive(Clone, Debug)]
pub struct EpRec {
    pub identity: u32,
    pub kind: Kind,
    /// Whether policy applies to it (host-network pods' traffic is the node's).
    pub local: bool,
    pub first_ip: Option<Addr>,
}

#[derive(Clone, Debug)]
pub struct IdRec {
    pub kind: Kind,
    pub local: bool,
    pub ns: u32,
    /// [ingress, egress]
    pub programs: [Arc<Program>; 2],
    /// Named ports: (name, protocol, port).
    pub ports: Arc<Vec<(Arc<str>, u8, u16)>>,
    /// Profiles that exist, in the endpoint's order.
    pub profiles: Arc<ProfileList>,
    /// Which identity sets hold it: bit `i` for set `i` (the sets, transposed: the compiled
    /// programs test a peer's membership in many sets at once through these).
    pub members: Arc<[u64]>,
}

impl IdRec {
    /// Whether set `set` holds this identity.
    #[inline]
    pub fn in_set(&self, set: u32) -> bool {
        bit(&self.members, set)
    }
}

/// Bit `i` of a bitmap (false past its end).
#[inline]
pub(crate) fn bit(bits: &[u64], i: u32) -> bool {
    bits.get((i / 64) as usize).is_some_and(|w| w & (1 << (i % 64)) != 0)
}

impl NamedPorts for IdRec {
    #[inline]
    fn has_named_port(&self, name: &str, protocol: u8, port: u16) -> bool {
        self.ports.iter().any(|(n, p, x)| *p == protocol && *x == port && &**n == name)
    }
}

impl IdRec {
    pub(super) fn named_ports<'a>(&'a self, name: &'a str, protocol: u8) -> impl Iterator<Item = u16> + 'a {
        self.ports.iter().filter(move |(n, p, _)| *p == protocol && &**n == name).map(|(_, _, x)| *x)
    }
}

/// The policies that apply to an identity in one direction, grouped by tier in order, and their
/// compiled form (`compiled`): built when the model makes the program, or on first use. A
/// program is never changed: when a policy's rules change, the programs listing it are made
/// anew, so a compiled program always agrees with the rules of the snapshots holding it.
#[derive(Debug)]
pub struct Program {
    /// Shared with the program's renewals (`renewed`): a rule change copies no stage.
    pub stages: Arc<[Stage]>,
    pub direction: Direction,
    pub(super) compiled: OnceLock<Result<Compiled, Walked>>,
}

impl Program {
    pub fn new(direction: Direction, stages: Vec<Stage>) -> Program {
        Program { stages: stages.into(), direction, compiled: OnceLock::new() }
    }

    /// The same stages, to be compiled again (a policy's rules changed).
    pub fn renewed(&self) -> Program {
        Program { stages: self.stages.clone(), direction: self.direction, compiled: OnceLock::new() }
    }

    /// Whether the program lists `policy`.
    pub fn lists(&self, policy: u32) -> bool {
        self.stages.iter().any(|s| s.policies.contains(&policy))
    }

    /// The compiled program, built now if it was not yet; Err: why it is walked instead.
    pub fn compiled(&self, snap: &Snapshot) -> Result<&Compiled, Walked> {
        self.compiled
            .get_or_init(|| {
                let stages: Vec<StageRef<'_>> = self
                    .stages
                    .iter()
                    .map(|s| StageRef::Tier { tier: s.tier, default: s.default, policies: &s.policies })
                    .collect();
                Compiled::build(snap, self.direction, &stages)
            })
            .as_ref()
            .map_err(|w| *w)
    }

    /// The compiled program if it was built (Err: walked), None if not yet.
    pub fn compiled_if_built(&self) -> Option<Result<&Compiled, Walked>> {
        self.compiled.get().map(|r| r.as_ref().map_err(|w| *w))
    }
}

/// The profiles of an identity (those that exist, in its order), and their compiled form per
/// direction, built as a program's is.
#[derive(Debug, Default)]
pub struct ProfileList {
    pub ids: Vec<u32>,
    pub(super) compiled: [OnceLock<Result<Compiled, Walked>>; 2],
}

impl ProfileList {
    pub fn new(ids: Vec<u32>) -> ProfileList {
        ProfileList { ids, compiled: Default::default() }
    }

    pub fn compiled(&self, snap: &Snapshot, d: Direction) -> Result<&Compiled, Walked> {
        self.compiled[d as usize]
            .get_or_init(|| {
                let stages: Vec<StageRef<'_>> = self.ids.iter().map(|&p| StageRef::Profile(p)).collect();
                Compiled::build(snap, d, &stages)
            })
            .as_ref()
            .map_err(|w| *w)
    }

    pub fn compiled_if_built(&self, d: Direction) -> Option<Result<&Compiled, Walked>> {
        self.compiled[d as usize].get().map(|r| r.as_ref().map_err(|w| *w))
    }
}

impl std::ops::Deref for ProfileList {
    type Target = [u32];

    fn deref(&self) -> &[u32] {
        &self.ids
    }
}

#[derive(Debug)]
pub struct Stage {
    pub tier: u32,
    pub default: Action,
    pub policies: Vec<u32>,
}

/// Which network sets (by identity) contain an address: one hash probe per prefix length.
#[derive(Clone, Debug, Default)]
pub struct NetsetLpm {
    pub(super) tables: Vec<(bool, u8, FastMap<u128, Vec<u32>>)>,
}

impl NetsetLpm {
    pub fn insert(&mut self, net: Net, identity: u32) {
        let t = match self.tables.iter().position(|(v6, len, _)| *v6 == net.v6 && *len == net.len) {
            Some(i) => i,
            None => {
                self.tables.push((net.v6, net.len, FastMap::default()));
                self.tables.len() - 1
            }
        };
        let ids = self.tables[t].2.entry(net.bits).or_default();
        if !ids.contains(&identity) {
            ids.push(identity);
        }
    }

    pub fn lookup(&self, a: Addr, out: &mut Vec<u32>) {
        for (v6, len, table) in &self.tables {
            if *v6 != a.v6 {
                continue;
            }
            if let Some(ids) = table.get(&(a.bits & crate::engine::net::mask(*len))) {
                out.extend_from_slice(ids);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// The network sets holding every address of `net` (their networks are `net` or wider).
    pub fn holding(&self, net: Net, out: &mut Vec<u32>) {
        for (v6, len, table) in &self.tables {
            if *v6 != net.v6 || *len > net.len {
                continue;
            }
            if let Some(ids) = table.get(&(net.bits & crate::engine::net::mask(*len))) {
                out.extend_from_slice(ids);
            }
        }
    }

    /// Every network with the identities of the network sets that list it.
    pub fn nets(&self) -> impl Iterator<Item = (Net, &Vec<u32>)> + '_ {
        self.tables
            .iter()
            .flat_map(|(v6, len, t)| t.iter().map(move |(bits, ids)| (Net { bits: *bits, len: *len, v6: *v6 }, ids)))
    }
}

/// A service's (namespace, name).
pub type ServiceName = (Arc<str>, Arc<str>);

#[derive(Clone, Debug, Default)]
pub struct ServiceRec {
    pub ips: HashSet<Addr>,
    /// Endpoints the service's selector picks (same namespace, raw labels).
    pub members: HashSet<u32>,
    pub ports: Vec<(u16, u8, Option<TargetPort>)>,
}
