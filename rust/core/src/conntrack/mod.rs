//! Connection tracking: the engine's own flow table.
//!
//! Policy judges the first packet of a connection; every later packet of an allowed connection,
//! in either direction, is allowed by the table without being classified again (docs/architecture.md §3,
//! "Connections"). When policy changes, [`ConnTrack::revalidate`]
//! re-judges every tracked connection and removes the ones the new policy denies. One concept in
//! one file: the table, its 64-byte entry and the timers of the entries' states change together
//! (the TCP state machine is in `tcp`, the flow key in `key`, the configuration, errors and
//! counters in `config`).
//!
//! # Use, per packet
//!
//! ```
//! use pyclassify_core::batch::{PacketHeader, FLAG_HAS_PORTS};
//! use pyclassify_core::conntrack::{ConnTrack, CtConfig, CtState};
//!
//! let mut ct = ConnTrack::new(CtConfig::default()).unwrap();
//! let mut syn = PacketHeader { ip_version: 4, protocol: 6, tcp_flags: 0x02,
//!     flags: FLAG_HAS_PORTS, sport: 40000, dport: 80, ..Default::default() };
//! syn.src_addr[15] = 1;
//! syn.dst_addr[15] = 2;
//! let allowed = match ct.track(&syn, 1_000) {
//!     CtState::New(flow) => {
//!         let verdict = true; // the classifier's verdict for flow.key()
//!         if verdict { ct.confirm(&flow, 1_000).is_ok() } else { false }
//!     }
//!     state => state.allows(),
//! };
//! assert!(allowed && ct.len() == 1);
//! ```
//!
//! [`ConnTrack::track_judged`] does the same in one call with the verdict as a closure.
//!
//! # Denied connections
//!
//! A connection whose opening packet policy denied is remembered, as a revoked one is: every
//! later packet of it, either way, is [`CtState::Denied`], so a capture taken with nothing
//! enforced (where the server answered a SYN policy denies) never has the server's answer
//! picked up as a connection the other way round, which no policy restricts. Only the opener's
//! fresh attempt is judged again: a new SYN, or for UDP and other protocols without a handshake
//! its next packet (as Linux judges every packet of a flow it never confirmed). The memory is
//! bounded: denials take only room no connection needs (a connection to insert pushes the oldest
//! denial out; a denial finds room only by pushing out an older denial), and one is forgotten
//! once its connection has been idle 120 s.
//!
//! # Connections picked up mid-stream
//!
//! A TCP connection first seen without its SYN (open before the capture or the tracker began;
//! [`CtConfig::tcp_loose`]) is oriented by its ports, not by whichever packet came first: **the
//! end with the lower port is the server**, the other end opened it; with equal ports the first
//! packet's sender did. Linux's `nf_conntrack_tcp_loose` takes the first packet's direction,
//! which for a capture begun mid-connection is the server's half of the time, so policy would
//! judge the server's egress to the client's port instead of the connection policy had to allow
//! for it to exist (Hubble reports such a flow's direction as unknown: `is_reply` absent).
//! Services listen on well-known or registered ports and clients use ephemeral ones above them
//! (Linux 32768-60999, IANA 49152-65535), so the lower port is the listening one. The packet
//! that picks a connection up is [`CtState::New`] with [`NewFlow::picked_up`]; when it came from
//! the server, [`NewFlow::judged_reversed`], and policy judges its reverse ([`NewFlow::key`]).
//!
//! # What the decoder must deliver
//!
//! - TCP/UDP: `FLAG_HAS_PORTS` and the ports; TCP the flags byte. A TCP/UDP header without
//!   ports is INVALID (the decoder already carries ports to later fragments it can match).
//! - ICMP/ICMPv6 queries (echo, and the v4 timestamp/information/address-mask and v6 node
//!   information pairs): the query **identifier in `sport`** (`FLAG_HAS_PORTS` clear, `dport` 0).
//!   The 64-byte header has no other free field for it.
//! - ICMP/ICMPv6 errors (v4 unreachable/source quench/redirect/time exceeded/parameter
//!   problem; v6 unreachable/packet too big/time exceeded/parameter problem):
//!   `FLAG_ICMP_ERROR` on the header, and the quoted packet's tuple in a [`QuotedTuple`] in a
//!   *parallel array* (one 40-byte slot per header, read only for rows with the flag), passed to
//!   [`ConnTrack::track_quoted`] / [`ConnTrack::track_batch`]. An error is RELATED when its
//!   quoted tuple is a tracked connection and it is addressed to that quoted packet's sender;
//!   otherwise INVALID.
//!
//! # Table
//!
//! Entries live in a slab (`Vec`, reused through a free list); a `hashbrown::HashTable<u32>`
//! maps the canonical key (the same for both directions, so one probe per packet) to the slab
//! slot. Expiry is lazy on lookup plus an incremental sweep of a few slab slots per packet
//! ([`CtConfig::sweep_per_packet`]) and [`ConnTrack::expire`] for idle time: no stop-the-world
//! scan. Unassured entries (no reply seen yet, or TCP not yet established) are also on an LRU
//! list; when the table is at its cap, the least recently seen unassured entry is dropped early
//! to make room (Linux's `early_drop`), and if every entry is assured the new connection is
//! refused ([`CtError::TableFull`]).
//!
//! # Hash
//!
//! The keys come from the network, so the table uses `std`'s [`RandomState`]: SipHash-1-3 keyed
//! with 128 random bits per process. A sender who does not know the key cannot make keys
//! collide, so the SwissTable's probe sequences stay short under attack. Faster unkeyed or
//! weakly keyed hashes (FxHash, foldhash, ahash) give no such guarantee (foldhash and ahash
//! document that they are not cryptographic; with a fixed or guessable seed, collisions can be
//! computed offline). The cost is measured in `benches/conntrack.rs`, which runs the same table
//! with FxHash beside it. The hasher is a type parameter for that measurement only.

mod config;
pub(crate) mod key;
mod tcp;

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::BuildHasher;
use std::time::Duration;

use hashbrown::HashTable;

use crate::batch::PacketHeader;

pub use config::{CtConfig, CtError, CtStats, Timeouts, MAX_ENTRIES_LIMIT};
pub use key::{
    is_icmp_error_type, FlowKey, InvalidReason, QuotedTuple, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP,
    QUOTED_VALID, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN,
};
pub use tcp::TcpState;

use key::{Class, Parsed};
use tcp::Step;

/// What the tracker says about a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtState {
    /// May open a connection: judge it by policy, and [`ConnTrack::confirm`] it if allowed.
    New(NewFlow),
    /// Belongs to a tracked (so allowed) connection, from the side that opened it.
    Established,
    /// Belongs to a tracked connection, from the other side.
    Reply,
    /// An ICMP error about a tracked connection.
    Related,
    /// Belongs to a connection whose opening packet policy denied (either direction, or an
    /// ICMP error about it): drop it.
    Denied,
    /// Cannot be tracked, and opens nothing: drop it.
    Invalid(InvalidReason),
    /// Not connection-oriented (ICMPv6 neighbour discovery, ...): judge every packet by policy.
    Untracked,
}

/// State codes of [`CtState`] in batch output arrays.
pub mod code {
    /// [`super::CtState::New`].
    pub const NEW: u8 = 1;
    /// [`super::CtState::Established`].
    pub const ESTABLISHED: u8 = 2;
    /// [`super::CtState::Reply`].
    pub const REPLY: u8 = 3;
    /// [`super::CtState::Related`].
    pub const RELATED: u8 = 4;
    /// [`super::CtState::Invalid`].
    pub const INVALID: u8 = 5;
    /// [`super::CtState::Untracked`].
    pub const UNTRACKED: u8 = 6;
    /// [`super::CtState::Denied`].
    pub const DENIED: u8 = 7;
    /// [`super::CtState::New`] of a TCP connection picked up mid-stream, judged in the packet's
    /// direction (its sender opened the connection).
    pub const NEW_PICKUP: u8 = 8;
    /// [`super::CtState::New`] of a TCP connection picked up mid-stream from its server's side:
    /// judged in the reverse of the packet's direction.
    pub const NEW_PICKUP_REPLY: u8 = 9;
}

impl CtState {
    /// The state's code in batch output ([`code`]).
    pub fn code(&self) -> u8 {
        match self {
            CtState::New(f) if f.reversed => code::NEW_PICKUP_REPLY,
            CtState::New(f) if f.pickup => code::NEW_PICKUP,
            CtState::New(_) => code::NEW,
            CtState::Established => code::ESTABLISHED,
            CtState::Reply => code::REPLY,
            CtState::Related => code::RELATED,
            CtState::Denied => code::DENIED,
            CtState::Invalid(_) => code::INVALID,
            CtState::Untracked => code::UNTRACKED,
        }
    }

    /// Whether the packet is allowed by the table alone (a tracked connection's packet).
    /// `New` and `Untracked` need policy; `Denied` and `Invalid` are denied.
    pub fn allows(&self) -> bool {
        matches!(self, CtState::Established | CtState::Reply | CtState::Related)
    }
}

/// A connection a packet may open, pending the policy verdict. Carries the hashed key, so
/// `confirm` does not hash again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewFlow {
    canon: FlowKey,
    hash: u64,
    /// The opener is the canonical key's first end.
    from_a: bool,
    class: Class,
    tcp: TcpState,
    /// A TCP connection picked up mid-stream.
    pickup: bool,
    /// The packet came from the end that did not open the connection (a pickup's server).
    reversed: bool,
}

impl NewFlow {
    /// The connection's key in its original direction (from the end that opened it): what
    /// policy judges. The packet's own direction, except for a connection picked up from its
    /// server's side ([`NewFlow::judged_reversed`]).
    pub fn key(&self) -> FlowKey {
        if self.from_a {
            self.canon
        } else {
            self.canon.reversed()
        }
    }

    /// A TCP connection first seen without its SYN (loose pickup), oriented by its ports.
    pub fn picked_up(&self) -> bool {
        self.pickup
    }

    /// The packet is the server's: policy judges its reverse, the client's connection.
    pub fn judged_reversed(&self) -> bool {
        self.reversed
    }
}

/// The header of `h` seen from the other end (addresses and ports swapped): what policy judges
/// for a connection picked up from its server's side.
pub fn reversed_header(h: &PacketHeader) -> PacketHeader {
    PacketHeader { src_addr: h.dst_addr, dst_addr: h.src_addr, sport: h.dport, dport: h.sport, ..*h }
}

/// A tracked connection, as reported by [`ConnTrack::flows`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowInfo {
    /// Key in the original direction.
    pub key: FlowKey,
    /// TCP state (None for other protocols).
    pub tcp_state: Option<TcpState>,
    /// Traffic seen both ways (and, for TCP, the handshake completed).
    pub assured: bool,
    /// Packets from the opener.
    pub packets_orig: u64,
    /// Packets from the other side.
    pub packets_reply: u64,
    /// When the connection was confirmed (ns).
    pub created_ns: u64,
    /// When it times out unless more packets come (ns).
    pub expires_ns: u64,
}

const NIL: u32 = u32::MAX;

// Entry status bits.
const ORIG_IS_A: u8 = 1;
const SEEN_REPLY: u8 = 2;
const ASSURED: u8 = 4;
const IN_LRU: u8 = 8;
const FIN_ORIG: u8 = 16;
/// Marked for removal (revalidate).
const DEAD: u8 = 32;
/// Revoked by a policy change: every packet of the connection, either way, is INVALID
/// (`InvalidReason::Revoked`) until it has been idle `REVOKED_IDLE_NS`. Kept rather than removed:
/// removed, the peer's next packet would be picked up (loose TCP, UDP) as a connection the other
/// way round and judged as such, which policy may allow.
const REVOKED: u8 = 64;
/// How long a revoked connection's entry outlives its last packet.
const REVOKED_IDLE_NS: u64 = 120_000_000_000;
/// A connection whose opening packet policy denied (module documentation, "Denied
/// connections"): every packet of it, either way, is DENIED until it has been idle
/// `REVOKED_IDLE_NS`, except its opener's fresh attempt, which policy judges again. On the
/// denials' own LRU list, not the unassured one; not a tracked connection (`len`, `flows`,
/// `get`, `revalidate` and `revoke` pass it by).
const DENIED: u8 = 128;
/// The LRU lists: unassured connections, denials.
const LIST_UNASSURED: usize = 0;
const LIST_DENIED: usize = 1;

/// One tracked connection: exactly one cache line, so a lookup touches the index table and
/// this line only. The key is stored flat (a `FlowKey` field would pad to 48 bytes); the hash is
/// not stored (recomputed on removal and on the rare index growth); the creation time lives in
/// a cold side vector.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Entry {
    src: u128,
    dst: u128,
    sport: u16,
    dport: u16,
    proto: u8,
    class: Class,
    tcp: TcpState,
    bits: u8,
    /// LRU links (the unassured list, or the denials' list).
    prev: u32,
    next: u32,
    /// Expiry time; 0 = free slot.
    expires: u64,
    /// Packets from the opener, from the other side (saturating).
    packets: [u32; 2],
}

const _: () = assert!(core::mem::size_of::<Entry>() == 64);

impl Entry {
    #[inline]
    fn canon(&self) -> FlowKey {
        FlowKey { src: self.src, dst: self.dst, sport: self.sport, dport: self.dport, proto: self.proto }
    }

    #[inline]
    fn is(&self, k: &FlowKey) -> bool {
        self.src == k.src
            && self.dst == k.dst
            && self.sport == k.sport
            && self.dport == k.dport
            && self.proto == k.proto
    }

    fn orig_key(&self) -> FlowKey {
        if self.bits & ORIG_IS_A != 0 {
            self.canon()
        } else {
            self.canon().reversed()
        }
    }
}

// Timeout table index: TCP states first, then the others.
const T_UDP_UNREPLIED: usize = tcp::TCP_STATES;
const T_UDP_ASSURED: usize = T_UDP_UNREPLIED + 1;
const T_ICMP: usize = T_UDP_ASSURED + 1;
const T_GENERIC: usize = T_ICMP + 1;
const T_COUNT: usize = T_GENERIC + 1;

/// The connection table. `S` is the hasher: keep the default (see the module documentation).
pub struct ConnTrack<S = RandomState> {
    cfg: CtConfig,
    timeouts_ns: [u64; T_COUNT],
    build: S,
    table: HashTable<u32>,
    entries: Vec<Entry>,
    /// Creation time per slab slot (cold: written once, read by `flows`).
    created: Vec<u64>,
    free: Vec<u32>,
    /// (head, tail) of the LRU lists: `LIST_UNASSURED`, `LIST_DENIED`.
    lru: [(u32, u32); 2],
    /// Entries that are denials (`DENIED`), in `table`.
    denials: usize,
    sweep_cursor: usize,
    stats: CtStats,
}

impl ConnTrack<RandomState> {
    /// A table with a randomly keyed SipHash.
    pub fn new(cfg: CtConfig) -> Result<Self, CtError> {
        Self::with_hasher(cfg, RandomState::new())
    }
}

fn duration_ns(name: &str, d: Duration) -> Result<u64, CtError> {
    let ns = u64::try_from(d.as_nanos()).map_err(|_| CtError::InvalidConfig(format!("{name} is too long")))?;
    if ns == 0 {
        return Err(CtError::InvalidConfig(format!("{name} must be positive")));
    }
    Ok(ns)
}

impl<S: BuildHasher> ConnTrack<S> {
    /// A table with the given hasher (benchmarks only: use [`ConnTrack::new`]).
    pub fn with_hasher(cfg: CtConfig, build: S) -> Result<Self, CtError> {
        if cfg.max_entries == 0 || cfg.max_entries > MAX_ENTRIES_LIMIT {
            return Err(CtError::InvalidConfig(format!(
                "max_entries must be between 1 and {MAX_ENTRIES_LIMIT}, got {}",
                cfg.max_entries
            )));
        }
        let t = &cfg.timeouts;
        let mut timeouts_ns = [0u64; T_COUNT];
        timeouts_ns[TcpState::SynSent as usize] = duration_ns("tcp_syn_sent", t.tcp_syn_sent)?;
        timeouts_ns[TcpState::SynRecv as usize] = duration_ns("tcp_syn_recv", t.tcp_syn_recv)?;
        timeouts_ns[TcpState::Established as usize] = duration_ns("tcp_established", t.tcp_established)?;
        timeouts_ns[TcpState::FinWait as usize] = duration_ns("tcp_fin_wait", t.tcp_fin_wait)?;
        timeouts_ns[TcpState::CloseWait as usize] = duration_ns("tcp_close_wait", t.tcp_close_wait)?;
        timeouts_ns[TcpState::LastAck as usize] = duration_ns("tcp_last_ack", t.tcp_last_ack)?;
        timeouts_ns[TcpState::TimeWait as usize] = duration_ns("tcp_time_wait", t.tcp_time_wait)?;
        timeouts_ns[TcpState::Close as usize] = duration_ns("tcp_close", t.tcp_close)?;
        timeouts_ns[T_UDP_UNREPLIED] = duration_ns("udp_unreplied", t.udp_unreplied)?;
        timeouts_ns[T_UDP_ASSURED] = duration_ns("udp_assured", t.udp_assured)?;
        timeouts_ns[T_ICMP] = duration_ns("icmp", t.icmp)?;
        timeouts_ns[T_GENERIC] = duration_ns("generic", t.generic)?;
        Ok(ConnTrack {
            cfg,
            timeouts_ns,
            build,
            // Reserved up front (bounded) so the index rarely grows: growth rehashes every key.
            table: HashTable::with_capacity(cfg.max_entries.min(1 << 20)),
            entries: Vec::new(),
            created: Vec::new(),
            free: Vec::new(),
            lru: [(NIL, NIL); 2],
            denials: 0,
            sweep_cursor: 0,
            stats: CtStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &CtConfig {
        &self.cfg
    }

    /// Tracked connections (including timed-out ones not yet removed; not the denials).
    pub fn len(&self) -> usize {
        self.table.len() - self.denials
    }

    /// No connection tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Denied connections remembered (module documentation, "Denied connections").
    pub fn denials(&self) -> usize {
        self.denials
    }

    /// Counters.
    pub fn stats(&self) -> CtStats {
        self.stats
    }

    /// Forgets every connection (counters are kept).
    pub fn clear(&mut self) {
        self.table.clear();
        self.entries.clear();
        self.created.clear();
        self.free.clear();
        self.lru = [(NIL, NIL); 2];
        self.denials = 0;
        self.sweep_cursor = 0;
    }

    // ----- per packet -----

    /// Tracks one packet at time `now_ns`. ICMP errors need their quoted tuple
    /// ([`ConnTrack::track_quoted`]); here they are INVALID.
    pub fn track(&mut self, hdr: &PacketHeader, now_ns: u64) -> CtState {
        self.track_quoted(hdr, None, now_ns)
    }

    /// Tracks one packet; `quoted` is the tuple an ICMP error quotes (ignored for other packets).
    pub fn track_quoted(&mut self, hdr: &PacketHeader, quoted: Option<&QuotedTuple>, now_ns: u64) -> CtState {
        self.stats.packets += 1;
        if self.cfg.sweep_per_packet > 0 && !self.entries.is_empty() {
            self.sweep(now_ns, self.cfg.sweep_per_packet);
        }
        let state = match key::parse(hdr) {
            Parsed::Flow { canon, from_a, class, tcp_flags, icmp_reply } => {
                self.track_flow(canon, from_a, class, tcp_flags, icmp_reply, now_ns)
            }
            Parsed::IcmpError => self.track_error(hdr, quoted, now_ns),
            Parsed::Untracked => CtState::Untracked,
            Parsed::Invalid(r) => CtState::Invalid(r),
        };
        match state {
            CtState::New(f) => {
                self.stats.new += 1;
                self.stats.pickups += u64::from(f.pickup);
            }
            CtState::Established => self.stats.established += 1,
            CtState::Reply => self.stats.reply += 1,
            CtState::Related => self.stats.related += 1,
            CtState::Denied => self.stats.denied += 1,
            CtState::Invalid(_) => self.stats.invalid += 1,
            CtState::Untracked => self.stats.untracked += 1,
        }
        state
    }

    /// Tracks one packet and, when it may open a connection, asks `judge` (the policy verdict
    /// for the header in the connection's original direction: the packet's own, or its reverse
    /// for a connection picked up from its server's side) and confirms it if allowed, or
    /// remembers it denied. Returns the state and whether the packet is allowed. `Untracked`
    /// packets are judged too. A connection the table cannot hold ([`CtError::TableFull`]) is
    /// allowed but not tracked (its replies will be judged as new packets).
    pub fn track_judged(
        &mut self,
        hdr: &PacketHeader,
        quoted: Option<&QuotedTuple>,
        now_ns: u64,
        judge: impl FnOnce(&PacketHeader) -> bool,
    ) -> (CtState, bool) {
        let state = self.track_quoted(hdr, quoted, now_ns);
        let allowed = match &state {
            CtState::New(flow) => {
                let ok = if flow.reversed { judge(&reversed_header(hdr)) } else { judge(hdr) };
                if ok {
                    let _ = self.confirm(flow, now_ns);
                } else {
                    self.deny(flow, now_ns);
                }
                ok
            }
            CtState::Untracked => judge(hdr),
            s => s.allows(),
        };
        (state, allowed)
    }

    /// Tracks a batch. `verdicts[i] != 0` is policy's verdict for header `i` (read only for
    /// NEW and UNTRACKED packets); NEW packets with an allowing verdict are confirmed in order,
    /// so a reply later in the same batch is already a reply, and those with a denying one are
    /// remembered denied. For a connection picked up from its server's side
    /// ([`code::NEW_PICKUP_REPLY`]) the verdict stands for the connection as its client opened
    /// it: callers that judge each header as given should use [`ConnTrack::track_judged`].
    /// Writes each packet's state [`code`] to `states[i]` and whether it is allowed (1/0) to
    /// `allowed[i]`.
    /// `now_ns = None` uses each header's `ts_ns` (capture replay); `quoted`, if given, is
    /// parallel to `hdrs`.
    pub fn track_batch(
        &mut self,
        hdrs: &[PacketHeader],
        quoted: Option<&[QuotedTuple]>,
        verdicts: &[u8],
        now_ns: Option<u64>,
        states: &mut [u8],
        allowed: &mut [u8],
    ) -> Result<(), CtError> {
        let n = hdrs.len();
        let check = |what: &'static str, got: usize| {
            if got == n {
                Ok(())
            } else {
                Err(CtError::LengthMismatch { what, got, expected: n })
            }
        };
        check("verdicts", verdicts.len())?;
        check("states", states.len())?;
        check("allowed", allowed.len())?;
        if let Some(q) = quoted {
            check("quoted", q.len())?;
        }
        for (i, hdr) in hdrs.iter().enumerate() {
            let now = now_ns.unwrap_or(hdr.ts_ns);
            let q = quoted.map(|q| &q[i]);
            let (state, ok) = self.track_judged(hdr, q, now, |_| verdicts[i] != 0);
            states[i] = state.code();
            allowed[i] = u8::from(ok);
        }
        Ok(())
    }

    /// Inserts a connection that policy allowed. Confirming a connection that is already
    /// tracked (confirmed meanwhile) is a no-op. At the cap, drops the least recently seen
    /// unassured entry first; [`CtError::TableFull`] if there is none.
    pub fn confirm(&mut self, flow: &NewFlow, now_ns: u64) -> Result<(), CtError> {
        if let Some(idx) = self.find(&flow.canon, flow.hash) {
            let e = &self.entries[idx as usize];
            if e.bits & DENIED != 0 {
                self.remove_slot(idx); // denied before, allowed now: tracked from here
            } else if e.expires > now_ns {
                return Ok(());
            } else {
                self.remove_slot(idx);
                self.stats.expired += 1;
            }
        }
        if self.table.len() >= self.cfg.max_entries {
            self.make_room(now_ns)?;
        }
        let bits = if flow.from_a { ORIG_IS_A } else { 0 } | if flow.reversed { SEEN_REPLY } else { 0 };
        let packets = if flow.reversed { [0, 1] } else { [1, 0] };
        self.insert(flow, bits, packets, now_ns);
        self.stats.inserts += 1;
        Ok(())
    }

    /// Remembers a connection whose opening packet policy denied (module documentation,
    /// "Denied connections"), in room no connection needs: when the table is full, only by
    /// dropping the oldest denial; without one, it is not remembered.
    fn deny(&mut self, flow: &NewFlow, now_ns: u64) {
        if let Some(idx) = self.find(&flow.canon, flow.hash) {
            let e = &mut self.entries[idx as usize];
            if e.bits & DENIED != 0 {
                // its opener tried again and was denied again
                e.expires = now_ns.saturating_add(REVOKED_IDLE_NS).max(1);
                return;
            }
            if e.expires > now_ns {
                return; // a tracked connection: judged new only once it had reopened or expired
            }
            self.remove_slot(idx);
            self.stats.expired += 1;
        }
        if self.table.len() >= self.cfg.max_entries {
            self.sweep(now_ns, 64);
            if self.table.len() >= self.cfg.max_entries {
                let oldest = self.lru[LIST_DENIED].0;
                if oldest == NIL {
                    return;
                }
                self.remove_slot(oldest);
            }
        }
        let bits = DENIED | if flow.from_a { ORIG_IS_A } else { 0 };
        let idx = self.insert(flow, bits, [0, 0], now_ns);
        self.entries[idx as usize].expires = now_ns.saturating_add(REVOKED_IDLE_NS).max(1);
        self.denials += 1;
    }

    /// Inserts `flow` as a new entry with `bits` (room made by the caller): its slot, on the
    /// LRU list its bits say, expiring by its class's timeout.
    fn insert(&mut self, flow: &NewFlow, bits: u8, packets: [u32; 2], now_ns: u64) -> u32 {
        let k = &flow.canon;
        let entry = Entry {
            src: k.src,
            dst: k.dst,
            sport: k.sport,
            dport: k.dport,
            proto: k.proto,
            class: flow.class,
            tcp: flow.tcp,
            bits,
            prev: NIL,
            next: NIL,
            expires: 0,
            packets,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                self.entries[i as usize] = entry;
                self.created[i as usize] = now_ns;
                i
            }
            None => {
                self.entries.push(entry);
                self.created.push(now_ns);
                (self.entries.len() - 1) as u32
            }
        };
        let exp = now_ns.saturating_add(self.timeout_of(idx)).max(1);
        self.entries[idx as usize].expires = exp;
        let (entries, build) = (&self.entries, &self.build);
        self.table.insert_unique(flow.hash, idx, |&i| build.hash_one(entries[i as usize].canon()));
        self.lru_push(idx);
        idx
    }

    // ----- policy changes -----

    /// Re-judges every tracked connection by its original-direction key; marks those `judge`
    /// denies (returns false for) revoked and returns their keys. A revoked connection's packets,
    /// either way, are INVALID (`InvalidReason::Revoked`) from then on, until it has been idle
    /// 120 s (a fresh SYN from its opener is a new connection), or until a later `revalidate`
    /// finds it allowed again (restored: not reported). Timed-out entries are removed on the way
    /// (not reported).
    pub fn revalidate(&mut self, now_ns: u64, mut judge: impl FnMut(&FlowKey) -> bool) -> Vec<FlowKey> {
        self.stats.revalidations += 1;
        let mut revoked = Vec::new();
        let mut dead: Vec<u32> = Vec::new();
        // One linear pass over the slab (sequential memory), marking what goes.
        for (i, e) in self.entries.iter_mut().enumerate() {
            if e.expires == 0 {
                continue;
            }
            if e.expires <= now_ns {
                self.stats.expired += 1;
                e.bits |= DEAD;
                dead.push(i as u32);
                continue;
            }
            if e.bits & DENIED != 0 {
                continue; // no connection: its opener's next attempt is judged anyway
            }
            let key = e.orig_key();
            if e.bits & REVOKED != 0 {
                // Revoked before: allowed again, it is restored (its next packets pass, as a new
                // connection on the same ports would be allowed); else it stays revoked, unreported.
                if judge(&key) {
                    e.bits &= !REVOKED;
                    self.stats.restored += 1;
                }
                continue;
            }
            if judge(&key) {
                continue;
            }
            revoked.push(key);
            e.bits |= REVOKED;
            if now_ns != 0 {
                e.expires = now_ns.saturating_add(REVOKED_IDLE_NS);
            }
        }
        self.remove_marked(&dead);
        self.stats.revoked += revoked.len() as u64;
        revoked
    }

    /// Removes the slots in `dead` (all marked `DEAD`). Many: one `retain` pass over the index
    /// (no hashing); few: one probe each.
    fn remove_marked(&mut self, dead: &[u32]) {
        if dead.len() > self.table.len() / 32 {
            let entries = &self.entries;
            self.table.retain(|i| entries[*i as usize].bits & DEAD == 0);
            for &idx in dead {
                self.release_slot(idx);
            }
        } else {
            for &idx in dead {
                self.remove_slot(idx);
            }
        }
    }

    /// Revokes one connection (either direction's key): its packets, either way, are INVALID
    /// (`InvalidReason::Revoked`) until it has been idle 120 s, as after [`ConnTrack::revalidate`].
    /// False if it is not tracked.
    pub fn revoke(&mut self, key: &FlowKey, now_ns: u64) -> bool {
        let (canon, _) = canon_of(key);
        let hash = self.build.hash_one(canon);
        let Some(idx) = self.find(&canon, hash) else { return false };
        let e = &mut self.entries[idx as usize];
        if e.bits & DENIED != 0 {
            return false;
        }
        if e.bits & REVOKED == 0 {
            e.bits |= REVOKED;
            self.stats.revoked += 1;
        }
        e.expires = now_ns.saturating_add(REVOKED_IDLE_NS);
        true
    }

    /// Removes the connections with these original-direction keys (either direction's key is
    /// accepted); returns how many were tracked.
    pub fn remove_keys(&mut self, keys: &HashSet<FlowKey>) -> usize {
        let mut n = 0;
        for k in keys {
            let (canon, _) = canon_of(k);
            let hash = self.build.hash_one(canon);
            if let Some(idx) = self.find(&canon, hash) {
                if self.entries[idx as usize].bits & DENIED == 0 {
                    self.remove_slot(idx);
                    n += 1;
                }
            }
        }
        self.stats.revoked += n as u64;
        n
    }

    // ----- expiry -----

    /// Examines up to `budget` slab slots from where the last sweep stopped and removes the
    /// timed-out entries among them; returns how many it removed. Call it when idle.
    pub fn expire(&mut self, now_ns: u64, budget: usize) -> usize {
        self.sweep(now_ns, budget)
    }

    fn sweep(&mut self, now_ns: u64, budget: usize) -> usize {
        let len = self.entries.len();
        if len == 0 {
            return 0;
        }
        let mut removed = 0;
        let mut cur = if self.sweep_cursor < len { self.sweep_cursor } else { 0 };
        for _ in 0..budget.min(len) {
            let exp = self.entries[cur].expires;
            if exp != 0 && exp <= now_ns {
                self.remove_slot(cur as u32);
                self.stats.expired += 1;
                removed += 1;
            }
            cur += 1;
            if cur == len {
                cur = 0;
            }
        }
        self.sweep_cursor = cur;
        removed
    }

    // ----- inspection -----

    /// Every tracked connection (unordered; includes timed-out ones not yet removed).
    pub fn flows(&self) -> Vec<FlowInfo> {
        let mut out = Vec::with_capacity(self.table.len());
        for (i, e) in self.entries.iter().enumerate() {
            let exp = e.expires;
            if exp == 0 || e.bits & DENIED != 0 {
                continue;
            }
            out.push(FlowInfo {
                key: e.orig_key(),
                tcp_state: (e.class == Class::Tcp).then_some(e.tcp),
                assured: e.bits & ASSURED != 0,
                packets_orig: u64::from(e.packets[0]),
                packets_reply: u64::from(e.packets[1]),
                created_ns: self.created[i],
                expires_ns: exp,
            });
        }
        out
    }

    /// The tracked connection with this key (either direction), if any and not timed out.
    pub fn get(&self, key: &FlowKey, now_ns: u64) -> Option<FlowInfo> {
        let (canon, _) = canon_of(key);
        let idx = self.find(&canon, self.build.hash_one(canon))? as usize;
        let exp = self.entries[idx].expires;
        if exp <= now_ns || self.entries[idx].bits & DENIED != 0 {
            return None;
        }
        let e = &self.entries[idx];
        Some(FlowInfo {
            key: e.orig_key(),
            tcp_state: (e.class == Class::Tcp).then_some(e.tcp),
            assured: e.bits & ASSURED != 0,
            packets_orig: u64::from(e.packets[0]),
            packets_reply: u64::from(e.packets[1]),
            created_ns: self.created[idx],
            expires_ns: exp,
        })
    }

    // ----- internals -----

    #[inline]
    fn find(&self, canon: &FlowKey, hash: u64) -> Option<u32> {
        let entries = &self.entries;
        self.table.find(hash, |&i| entries[i as usize].is(canon)).copied()
    }

    fn timeout_of(&self, idx: u32) -> u64 {
        let e = &self.entries[idx as usize];
        let t = match e.class {
            Class::Tcp => e.tcp as usize,
            Class::Udp if e.bits & SEEN_REPLY != 0 => T_UDP_ASSURED,
            Class::Udp => T_UDP_UNREPLIED,
            Class::Icmp => T_ICMP,
            Class::Generic => T_GENERIC,
        };
        self.timeouts_ns[t]
    }

    fn track_flow(
        &mut self,
        canon: FlowKey,
        from_a: bool,
        class: Class,
        tcp_flags: u8,
        icmp_reply: bool,
        now_ns: u64,
    ) -> CtState {
        let hash = self.build.hash_one(canon);
        if let Some(idx) = self.find(&canon, hash) {
            if self.entries[idx as usize].expires <= now_ns {
                self.remove_slot(idx);
                self.stats.expired += 1;
            } else if self.entries[idx as usize].bits & DENIED != 0 {
                // Its opener's fresh attempt is judged again (the entry stays until then); any
                // other packet of it, either way, is denied.
                let e = &mut self.entries[idx as usize];
                let opener = from_a == (e.bits & ORIG_IS_A != 0);
                let fresh = match class {
                    Class::Tcp => tcp::seg(tcp_flags) == tcp::Seg::Syn && tcp_flags & TCP_FIN == 0,
                    _ => !icmp_reply,
                };
                if !(opener && fresh) {
                    e.expires = e.expires.max(now_ns.saturating_add(REVOKED_IDLE_NS));
                    return CtState::Denied;
                }
                return CtState::New(NewFlow {
                    canon,
                    hash,
                    from_a,
                    class,
                    tcp: TcpState::SynSent,
                    pickup: false,
                    reversed: false,
                });
            } else if self.entries[idx as usize].bits & REVOKED != 0 {
                // A fresh SYN from the opener's side is a new connection on a reused port, for
                // policy to judge; anything else of a revoked connection is dropped.
                let e = &mut self.entries[idx as usize];
                let opener = from_a == (e.bits & ORIG_IS_A != 0);
                if class == Class::Tcp && opener && tcp_flags & 0x12 == 0x02 {
                    self.remove_slot(idx);
                } else {
                    e.expires = e.expires.max(now_ns.saturating_add(REVOKED_IDLE_NS));
                    return CtState::Invalid(InvalidReason::Revoked);
                }
            } else {
                match self.on_packet(idx, from_a, tcp_flags, now_ns) {
                    Some(state) => return state,
                    None => self.remove_slot(idx),
                }
            }
        }
        // Nothing tracked: may this packet open a connection?
        let tcp = match class {
            Class::Tcp => match tcp::open(tcp_flags, self.cfg.tcp_loose) {
                Some(s) => s,
                None => return CtState::Invalid(InvalidReason::TcpNoConnection),
            },
            Class::Icmp if icmp_reply => return CtState::Invalid(InvalidReason::IcmpNoRequest),
            _ => TcpState::SynSent, // unused for other classes
        };
        let pickup = class == Class::Tcp && tcp == TcpState::Established;
        // A pickup's opener: the end with the higher port (module documentation, "Connections
        // picked up mid-stream"); with equal ports, the packet's sender.
        let opener_is_a = if pickup && canon.sport != canon.dport { canon.sport > canon.dport } else { from_a };
        CtState::New(NewFlow { canon, hash, from_a: opener_is_a, class, tcp, pickup, reversed: opener_is_a != from_a })
    }

    /// A packet of tracked connection `idx`. `None`: the packet reopens a closed TCP
    /// connection (the caller removes the old entry and treats the packet as new).
    fn on_packet(&mut self, idx: u32, from_a: bool, tcp_flags: u8, now_ns: u64) -> Option<CtState> {
        let i = idx as usize;
        let e = &mut self.entries[i];
        let orig = from_a == (e.bits & ORIG_IS_A != 0);
        if e.class == Class::Tcp {
            match tcp::step(e.tcp, tcp_flags, orig, e.bits & FIN_ORIG != 0) {
                Step::Invalid => return Some(CtState::Invalid(InvalidReason::TcpBadTransition)),
                Step::Reopen => return None,
                Step::To(next) => {
                    if next == TcpState::FinWait && e.tcp != TcpState::FinWait {
                        if orig {
                            e.bits |= FIN_ORIG;
                        } else {
                            e.bits &= !FIN_ORIG;
                        }
                    }
                    e.tcp = next;
                }
            }
        }
        let p = &mut e.packets[usize::from(!orig)];
        *p = p.saturating_add(1);
        if !orig {
            e.bits |= SEEN_REPLY;
        }
        let assured_now = e.bits & SEEN_REPLY != 0 && (e.class != Class::Tcp || e.tcp >= TcpState::Established);
        let was_assured = e.bits & ASSURED != 0;
        if assured_now && !was_assured {
            e.bits |= ASSURED;
        }
        self.entries[i].expires = now_ns.saturating_add(self.timeout_of(idx)).max(1);
        if assured_now && !was_assured {
            self.lru_unlink(idx);
        } else if !was_assured {
            // Still unassured: most recently seen goes to the tail.
            self.lru_unlink(idx);
            self.lru_push(idx);
        }
        Some(if orig { CtState::Established } else { CtState::Reply })
    }

    fn track_error(&mut self, hdr: &PacketHeader, quoted: Option<&QuotedTuple>, now_ns: u64) -> CtState {
        let Some((canon, quoted_from_a)) = quoted.and_then(key::parse_quoted) else {
            return CtState::Invalid(InvalidReason::IcmpErrorNoQuote);
        };
        let hash = self.build.hash_one(canon);
        let Some(idx) = self.find(&canon, hash) else {
            return CtState::Invalid(InvalidReason::IcmpErrorUnrelated);
        };
        if self.entries[idx as usize].expires <= now_ns {
            self.remove_slot(idx);
            self.stats.expired += 1;
            return CtState::Invalid(InvalidReason::IcmpErrorUnrelated);
        }
        // An error about a connection policy denied or revoked is no more allowed than it.
        let bits = self.entries[idx as usize].bits;
        if bits & DENIED != 0 {
            return CtState::Denied;
        }
        if bits & REVOKED != 0 {
            return CtState::Invalid(InvalidReason::Revoked);
        }
        // The error goes back to whoever sent the quoted packet.
        let quoted_sender = if quoted_from_a { canon.src } else { canon.dst };
        if u128::from_be_bytes(hdr.dst_addr) != quoted_sender {
            return CtState::Invalid(InvalidReason::IcmpErrorUnrelated);
        }
        CtState::Related
    }

    fn make_room(&mut self, now_ns: u64) -> Result<(), CtError> {
        // A short sweep first: timed-out entries are the cheapest room.
        self.sweep(now_ns, 64);
        while self.table.len() >= self.cfg.max_entries {
            // the oldest denial first: denials take only room no connection needs
            let victim = match self.lru[LIST_DENIED].0 {
                NIL => self.lru[LIST_UNASSURED].0,
                oldest => oldest,
            };
            if victim == NIL {
                self.stats.insert_failed += 1;
                return Err(CtError::TableFull);
            }
            if self.entries[victim as usize].expires <= now_ns {
                self.stats.expired += 1;
            } else if self.entries[victim as usize].bits & DENIED == 0 {
                self.stats.early_drops += 1;
            }
            self.remove_slot(victim);
        }
        Ok(())
    }

    fn remove_slot(&mut self, idx: u32) {
        let hash = self.build.hash_one(self.entries[idx as usize].canon());
        if let Ok(found) = self.table.find_entry(hash, |&j| j == idx) {
            found.remove();
        }
        self.release_slot(idx);
    }

    /// Frees a slot already removed from the index.
    fn release_slot(&mut self, idx: u32) {
        let i = idx as usize;
        if self.entries[i].bits & IN_LRU != 0 {
            self.lru_unlink(idx);
        }
        if self.entries[i].bits & DENIED != 0 {
            self.denials -= 1;
        }
        self.entries[i].expires = 0;
        self.entries[i].bits = 0;
        self.free.push(idx);
    }

    /// The LRU list an entry with `bits` belongs on.
    #[inline]
    fn list_of(bits: u8) -> usize {
        if bits & DENIED != 0 {
            LIST_DENIED
        } else {
            LIST_UNASSURED
        }
    }

    fn lru_push(&mut self, idx: u32) {
        let list = Self::list_of(self.entries[idx as usize].bits);
        let tail = self.lru[list].1;
        {
            let e = &mut self.entries[idx as usize];
            e.prev = tail;
            e.next = NIL;
            e.bits |= IN_LRU;
        }
        if tail == NIL {
            self.lru[list].0 = idx;
        } else {
            self.entries[tail as usize].next = idx;
        }
        self.lru[list].1 = idx;
    }

    fn lru_unlink(&mut self, idx: u32) {
        let (prev, next, list) = {
            let e = &mut self.entries[idx as usize];
            if e.bits & IN_LRU == 0 {
                return;
            }
            e.bits &= !IN_LRU;
            (std::mem::replace(&mut e.prev, NIL), std::mem::replace(&mut e.next, NIL), Self::list_of(e.bits))
        };
        if prev == NIL {
            self.lru[list].0 = next;
        } else {
            self.entries[prev as usize].next = next;
        }
        if next == NIL {
            self.lru[list].1 = prev;
        } else {
            self.entries[next as usize].prev = prev;
        }
    }

    /// Checks the internal invariants (tests): table, slab, free list and LRU agree.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let live = self.entries.iter().filter(|e| e.expires != 0).count();
        if live != self.table.len() {
            return Err(format!("{live} live slots, {} in table", self.table.len()));
        }
        if live + self.free.len() != self.entries.len() {
            return Err("free list does not cover the free slots".into());
        }
        if self.table.len() > self.cfg.max_entries {
            return Err("over the cap".into());
        }
        for &i in self.table.iter() {
            let e = &self.entries[i as usize];
            if self.entries[i as usize].expires == 0 {
                return Err("table points at a free slot".into());
            }
            if self.find(&e.canon(), self.build.hash_one(e.canon())) != Some(i) {
                return Err("entry not found by its key".into());
            }
            if (e.bits & (ASSURED | DENIED) != ASSURED) != (e.bits & IN_LRU != 0) {
                return Err("unassured entries and denials must be exactly the LRU lists".into());
            }
        }
        let denials = self.table.iter().filter(|&&i| self.entries[i as usize].bits & DENIED != 0).count();
        if denials != self.denials {
            return Err(format!("{denials} denials, {} counted", self.denials));
        }
        let mut n = 0;
        for (list, &(head, tail)) in self.lru.iter().enumerate() {
            let mut cur = head;
            let mut prev = NIL;
            while cur != NIL {
                let e = &self.entries[cur as usize];
                if e.prev != prev || e.bits & IN_LRU == 0 || Self::list_of(e.bits) != list {
                    return Err("broken LRU link".into());
                }
                prev = cur;
                cur = e.next;
                n += 1;
                if n > self.entries.len() {
                    return Err("LRU cycle".into());
                }
            }
            if prev != tail {
                return Err("LRU tail".into());
            }
        }
        Ok(())
    }
}

/// Canonical form of a key given in either direction.
fn canon_of(k: &FlowKey) -> (FlowKey, bool) {
    if matches!(k.proto, PROTO_ICMP | PROTO_ICMPV6) {
        // ICMP query keys are stored as given (requester first).
        return (*k, true);
    }
    if (k.src, k.sport) <= (k.dst, k.dport) {
        (*k, true)
    } else {
        (k.reversed(), false)
    }
}
