//! The decision engine: whether policy allows a flow or a packet, and which tier, policy and
//! rule decided — with exactly the semantics of the pure-Python reference evaluator
//! (`pyclassify/reference.py`, docs/architecture.md §3), which the differential tests hold it to.
//!
//! The engine is built around **identities** (docs/architecture.md §2): endpoints whose
//! policy-relevant attributes are equal — the values of the label keys some selector mentions,
//! their namespace, service account and its labels, named ports, kind, profiles — share one
//! numeric identity. Every selector (policy subjects and rule peers, as one composite selector
//! each) is resolved by the incremental label index ([`crate::labelindex`]) to the set of
//! identities it matches; an address maps to its endpoint and identity through one hash lookup.
//!
//! - [`model::Model`] is the mutable state: it takes deltas (an endpoint, namespace, policy,
//!   tier, profile, network set, node or service added, changed or removed), updates only what
//!   they touch, and hands out immutable [`snapshot::Snapshot`]s that share every unchanged part
//!   with the snapshots before them (copy-on-write chunks, [`cow`]).
//! - [`snapshot::Snapshot`] answers flows and header batches, with connection tracking: each
//!   side by its program compiled into a first-match classifier ([`compiled`]), behind the
//!   per-thread decision memo ([`classes`]); the rule walk decides only what cannot be compiled
//!   exactly (Calico `services`, learned `domains`, a judged HTTP request) or past the compiled
//!   form's memory bound.
//! - [`spec`] is the input; `spec_py` generates its Python side (`pyclassify/engine_spec.py`).
//!   It and `workload` (random specs, the benchmark workload) are compiled only with the crate's
//!   `bench` feature (on by default, off in the Python extension).

pub mod classes;
pub mod compiled;
pub mod cow;
pub mod flow_cache;
pub mod forward;
mod identity;
pub mod idset;
pub mod judge;
pub mod lanes;
mod listing;
pub mod model;
mod net;
mod records;
mod rules;
pub mod snapshot;
pub mod spec;
#[cfg(feature = "bench")]
pub mod spec_py;
#[cfg(feature = "bench")]
pub mod workload;

pub use compiled::{CompileStats, Walked};
pub use judge::Judge;
pub use listing::{PAlt, RuleMeta, StageListing};
pub use model::{Compile, Model, ModelStats};
pub use net::{Addr, Net};
pub use records::{
    PacketVerdict, SideVerdict, HTTP_AWAITS, HTTP_ERROR, HTTP_NONE, HTTP_OUT_OF_ORDER, HTTP_REQUEST, HTTP_TABLE_FULL,
    PACKET_DENIED_CONNECTION, PACKET_ESTABLISHED, PACKET_INVALID, PACKET_MALFORMED, PACKET_NOT_IP, PACKET_POLICY,
};
pub use snapshot::Snapshot;

use crate::selector::SelectorError;

pub const PROTO_ICMP: u8 = 1;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_ICMPV6: u8 = 58;
pub const PROTO_SCTP: u8 = 132;
pub const PROTO_UDPLITE: u8 = 136;

pub(crate) fn is_port_protocol(p: u8) -> bool {
    matches!(p, PROTO_TCP | PROTO_UDP | PROTO_SCTP | PROTO_UDPLITE)
}

/// The engine layer's one error type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// The spec is not what `engine_spec` writes (a bug on the Python side, or hand-written JSON).
    Spec(String),
    /// A selector in the spec does not parse.
    Selector { context: String, error: SelectorError },
    /// A flow that cannot be evaluated (unknown endpoint id, bad address).
    Flow(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Spec(m) => write!(f, "invalid engine spec: {m}"),
            EngineError::Selector { context, error } => write!(f, "{context}: {error}"),
            EngineError::Flow(m) => write!(f, "invalid flow: {m}"),
        }
    }
}

impl std::error::Error for EngineError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Allow,
    Deny,
    Pass,
    Log,
}

impl Action {
    pub(crate) fn parse(text: &str) -> Result<Action, EngineError> {
        match text {
            "Allow" => Ok(Action::Allow),
            "Deny" => Ok(Action::Deny),
            "Pass" => Ok(Action::Pass),
            "Log" => Ok(Action::Log),
            other => Err(EngineError::Spec(format!("unknown action {other:?}"))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Ingress = 0,
    Egress = 1,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Pod,
    Host,
    NetworkSet,
}

impl Kind {
    pub(crate) fn parse(text: &str) -> Result<Kind, EngineError> {
        match text {
            "pod" => Ok(Kind::Pod),
            "host" => Ok(Kind::Host),
            "networkset" => Ok(Kind::NetworkSet),
            other => Err(EngineError::Spec(format!("unknown endpoint kind {other:?}"))),
        }
    }
}

/// Why a direction was decided as it was (docs/architecture.md §4 `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Rule = 0,
    EndOfTier = 1,
    Profile = 2,
    Default = 3,
}

/// What decided: a policy's rule or a profile's rule (indices into the spec's lists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Policy(u32),
    Profile(u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub tier: Option<u32>,
    pub source: Source,
    pub rule: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allow: bool,
    pub tier: Option<u32>,
    pub source: Option<Source>,
    pub rule: Option<u32>,
    pub reason: Reason,
    pub logs: Vec<LogEntry>,
    /// Denied, but an `http` rule before the decision matched all but the request, which the
    /// flow did not carry: the connection's request decides (a deny can only become an allow).
    pub awaits_request: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allow: bool,
    pub egress: Option<Decision>,
    pub ingress: Option<Decision>,
    /// Denied only by sides that await the connection's HTTP request: admitted provisionally up
    /// to that request, which is judged again ([`Snapshot::evaluate_request`]).
    pub awaits_request: bool,
}

/// Defaults when no policy decides (docs/architecture.md §3 "After all tiers").
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    pub pod_allow: bool,
    pub host_allow: bool,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults { pod_allow: true, host_allow: false }
    }
}

/// One end of a flow: an address, a known endpoint (by index), or both.
#[derive(Debug, Clone, Copy, Default)]
pub struct FlowEnd {
    pub addr: Option<Addr>,
    pub endpoint: Option<u32>,
}

#[derive(Debug, Clone, Copy)]
pub struct Flow {
    pub src: FlowEnd,
    pub dst: FlowEnd,
    pub protocol: u8,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
    /// When the packet was seen (ns since the epoch): DNS-learned addresses are valid for a
    /// time. None: by everything learned, whenever.
    pub ts_ns: Option<u64>,
}

impl Direction {
    pub const BOTH: [Direction; 2] = [Direction::Ingress, Direction::Egress];

    pub fn parse(text: &str) -> Result<Direction, EngineError> {
        match text {
            "ingress" => Ok(Direction::Ingress),
            "egress" => Ok(Direction::Egress),
            other => Err(EngineError::Spec(format!("unknown direction {other:?}"))),
        }
    }
}
