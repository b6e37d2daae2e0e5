//! The tracker's configuration (table size, timeouts), its errors and its counters.

use std::fmt;
use std::time::Duration;

/// Errors of the connection tracker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CtError {
    /// A configuration value is out of range.
    InvalidConfig(String),
    /// The table is at its cap and holds no unassured entry to drop: the connection is not
    /// tracked.
    TableFull,
    /// Inputs of a batch call do not have the same length.
    LengthMismatch {
        /// Which input.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The header batch's length.
        expected: usize,
    },
}

impl fmt::Display for CtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CtError::InvalidConfig(m) => write!(f, "invalid conntrack configuration: {m}"),
            CtError::TableFull => {
                write!(f, "conntrack table full: every entry is assured, none can be dropped early")
            }
            CtError::LengthMismatch { what, got, expected } => {
                write!(f, "{what} has {got} entries, the header batch has {expected}")
            }
        }
    }
}

impl std::error::Error for CtError {}

/// Per-state and per-protocol idle timeouts.
///
/// Defaults are Linux's `nf_conntrack_*_timeout*` defaults except TCP established: Linux keeps
/// an idle established connection 5 days (432000 s), which in a capped userspace table mostly
/// keeps dead peers' entries. We use 7440 s (2 h 4 min, RFC 5382 REQ-5: above the 2 h default
/// TCP keepalive, so a connection with keepalives on never expires).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// `nf_conntrack_tcp_timeout_syn_sent`: 120 s.
    pub tcp_syn_sent: Duration,
    /// `nf_conntrack_tcp_timeout_syn_recv`: 60 s.
    pub tcp_syn_recv: Duration,
    /// 7440 s (Linux: 432000 s).
    pub tcp_established: Duration,
    /// `nf_conntrack_tcp_timeout_fin_wait`: 120 s.
    pub tcp_fin_wait: Duration,
    /// `nf_conntrack_tcp_timeout_close_wait`: 60 s.
    pub tcp_close_wait: Duration,
    /// `nf_conntrack_tcp_timeout_last_ack`: 30 s.
    pub tcp_last_ack: Duration,
    /// `nf_conntrack_tcp_timeout_time_wait`: 120 s.
    pub tcp_time_wait: Duration,
    /// `nf_conntrack_tcp_timeout_close`: 10 s.
    pub tcp_close: Duration,
    /// `nf_conntrack_udp_timeout`: 30 s (no reply seen yet).
    pub udp_unreplied: Duration,
    /// `nf_conntrack_udp_timeout_stream`: 120 s (replied).
    pub udp_assured: Duration,
    /// `nf_conntrack_icmp_timeout` / `icmpv6`: 30 s.
    pub icmp: Duration,
    /// `nf_conntrack_generic_timeout`: 600 s (SCTP, GRE, ESP, ...).
    pub generic: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        let s = Duration::from_secs;
        Timeouts {
            tcp_syn_sent: s(120),
            tcp_syn_recv: s(60),
            tcp_established: s(7440),
            tcp_fin_wait: s(120),
            tcp_close_wait: s(60),
            tcp_last_ack: s(30),
            tcp_time_wait: s(120),
            tcp_close: s(10),
            udp_unreplied: s(30),
            udp_assured: s(120),
            icmp: s(30),
            generic: s(600),
        }
    }
}

/// Configuration of a [`ConnTrack`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtConfig {
    /// Hard cap on tracked connections (Linux `nf_conntrack_max`). Default 262144.
    pub max_entries: usize,
    /// Pick up TCP connections mid-stream from a plain ACK (Linux `nf_conntrack_tcp_loose`).
    /// Default on.
    pub tcp_loose: bool,
    /// Slab slots the incremental sweep examines per tracked packet (0 = only lazy expiry and
    /// explicit [`ConnTrack::expire`]). Default 2: a full pass over N slots every N/2 packets.
    /// Each slot is a 64-byte line, so a larger budget costs lookups measurably (`CT_SWEEP` in
    /// `benches/conntrack.rs`).
    pub sweep_per_packet: usize,
    /// Idle timeouts.
    pub timeouts: Timeouts,
}

impl Default for CtConfig {
    fn default() -> Self {
        CtConfig { max_entries: 262_144, tcp_loose: true, sweep_per_packet: 2, timeouts: Timeouts::default() }
    }
}

/// Largest allowed `max_entries` (slab indices are `u32`, one value is the list sentinel).
pub const MAX_ENTRIES_LIMIT: usize = (u32::MAX - 1) as usize;

/// Counters since creation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtStats {
    /// Packets passed to `track*`.
    pub packets: u64,
    /// Packets of a tracked connection in its original direction.
    pub established: u64,
    /// Packets of a tracked connection in its reply direction.
    pub reply: u64,
    /// ICMP errors related to a tracked connection.
    pub related: u64,
    /// Packets that may open a connection (policy must judge them).
    pub new: u64,
    /// Packets that are not tracked (judged per packet).
    pub untracked: u64,
    /// Invalid packets.
    pub invalid: u64,
    /// Connections inserted by `confirm`.
    pub inserts: u64,
    /// `confirm` refused: table full of assured entries.
    pub insert_failed: u64,
    /// Entries removed because they timed out (lazily, by the sweep or by `expire`).
    pub expired: u64,
    /// Unassured entries dropped early to make room.
    pub early_drops: u64,
    /// `revalidate` calls.
    pub revalidations: u64,
    /// Connections `revalidate` revoked (marked: their packets dropped both ways).
    pub revoked: u64,
    /// Revoked connections a later `revalidate` found allowed again (unmarked).
    pub restored: u64,
    /// Packets of a connection whose opening packet policy denied ([`CtState::Denied`]).
    pub denied: u64,
    /// Packets that may open a TCP connection picked up mid-stream (part of `new`).
    pub pickups: u64,
}
