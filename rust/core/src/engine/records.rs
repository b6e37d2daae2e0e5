//! The records the engine writes per packet: `PacketVerdict` with a `SideVerdict` per direction.
//! They are defined here once: the C ABI (`native/engine_api.h`/`.pxd`) is generated from them
//! (`crate::abi`), and `pyclassify.batch` builds its numpy dtypes from the layout `_engine` exports;
//! `tests/test_batch_abi.py` holds the C compiler's and numpy's views to these field by field.

use super::{Decision, Source, Verdict};
use crate::batch::{PacketHeader, ERR_UNKNOWN_ETHERTYPE};

/// `PacketVerdict::reason`: policy judged the packet.
pub const PACKET_POLICY: u8 = 0;
/// It belongs to a connection already allowed (or is a reply to one, or an ICMP error about one).
pub const PACKET_ESTABLISHED: u8 = 1;
/// It could not be decoded far enough to judge: denied (the default chosen before parsing).
pub const PACKET_MALFORMED: u8 = 2;
/// Connection tracking found it invalid (e.g. a TCP packet that opens nothing): denied.
pub const PACKET_INVALID: u8 = 3;
/// It belongs to a connection whose opening packet policy denied (either direction): denied
/// with it (`conntrack::CtState::Denied`).
pub const PACKET_DENIED_CONNECTION: u8 = 4;
/// Not IP (ARP, LLDP, ...: the decoder's `ERR_UNKNOWN_ETHERTYPE`): passed, as a firewall of IP
/// traffic passes it; no network policy speaks about it.
pub const PACKET_NOT_IP: u8 = 5;

/// `PacketVerdict::http`: no HTTP rule was involved.
pub const HTTP_NONE: u8 = 0;
/// Denied by policy, but only for want of the connection's HTTP request.
pub const HTTP_AWAITS: u8 = 1;
/// Judged with the HTTP request this packet completed.
pub const HTTP_REQUEST: u8 = 2;
/// Denied: the connection's request stream cannot be judged; plus the `HttpError` index.
pub const HTTP_ERROR: u8 = 16;
/// Denied: the connection is not followed (more connections await a request than the table
/// holds, or it was forgotten): cut, fail closed.
pub const HTTP_TABLE_FULL: u8 = 15;
/// Held back (dropped, the connection kept): a segment after a gap in what was read, so the
/// server never receives bytes the judge did not read; the client resends it in order.
pub const HTTP_OUT_OF_ORDER: u8 = 14;

crate::abi_record! {
/// One direction's decision in batch output. `source_kind`: 0 none, 1 policy, 2 profile;
/// `tier`, `source`, `rule` are -1 when absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SideVerdict as "pc_side_verdict" {
    /// 1 when this direction was judged.
    pub present: u8,
    pub allow: u8,
    /// Why: 0 rule, 1 end of tier, 2 profile, 3 default (`pyclassify.engine.REASONS`).
    pub reason: u8,
    /// 0 none, 1 policy, 2 profile.
    pub source_kind: u8,
    /// Tier index, -1 when absent.
    pub tier: i32,
    /// Policy or profile index, -1 when absent.
    pub source: i32,
    /// Rule index, -1 when absent.
    pub rule: i32,
    /// How many Log rules this direction passed before its decision (at most 255); which ones,
    /// the engine's explanation of the flow says (`NativeEngine.evaluate`).
    pub logs: u8,
    /// 1 when denied but an `http` rule before the decision awaits the connection's request
    /// (`Decision::awaits_request`).
    pub awaits: u8,
    /// Always 0.
    pub reserved: [u8; 2],
}
}

impl Default for SideVerdict {
    fn default() -> Self {
        SideVerdict::ABSENT
    }
}

impl SideVerdict {
    /// A direction not judged (no policy applies to that end).
    pub const ABSENT: SideVerdict = SideVerdict {
        present: 0,
        allow: 0,
        reason: 0,
        source_kind: 0,
        tier: -1,
        source: -1,
        rule: -1,
        logs: 0,
        awaits: 0,
        reserved: [0; 2],
    };

    pub(crate) fn from(d: &Option<Decision>) -> SideVerdict {
        let Some(d) = d else { return SideVerdict::default() };
        let (source_kind, source) = match d.source {
            None => (0, -1),
            Some(Source::Policy(i)) => (1, i as i32),
            Some(Source::Profile(i)) => (2, i as i32),
        };
        SideVerdict {
            present: 1,
            allow: d.allow as u8,
            reason: d.reason as u8,
            source_kind,
            tier: d.tier.map_or(-1, |t| t as i32),
            source,
            rule: d.rule.map_or(-1, |r| r as i32),
            logs: d.logs.len().min(u8::MAX as usize) as u8,
            awaits: d.awaits_request as u8,
            reserved: [0; 2],
        }
    }
}

crate::abi_record! {
/// The batch output record, one per packet header (44 bytes; `pyclassify.engine.VERDICT_DTYPE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketVerdict as "pc_verdict" {
    pub allow: u8,
    /// `PACKET_POLICY`, `PACKET_ESTABLISHED`, `PACKET_MALFORMED`, `PACKET_INVALID`,
    /// `PACKET_DENIED_CONNECTION` or `PACKET_NOT_IP`.
    pub reason: u8,
    /// Connection-tracking state code (`conntrack::code`), 0 without tracking.
    pub ct_state: u8,
    /// HTTP (`http` rules): `HTTP_NONE`; `HTTP_AWAITS` admitted provisionally (or, untracked,
    /// denied unless a request matches); `HTTP_REQUEST` judged with the request this packet
    /// completed; `HTTP_OUT_OF_ORDER` held back; `HTTP_TABLE_FULL` not followed, cut;
    /// `HTTP_ERROR + k`: denied, the stream broke (`http::HTTP_ERROR_NAMES[k]`).
    pub http: u8,
    pub egress: SideVerdict,
    pub ingress: SideVerdict,
}
}

const _: () = assert!(std::mem::size_of::<PacketVerdict>() == 44);

impl PacketVerdict {
    pub fn judged(v: &Verdict) -> PacketVerdict {
        PacketVerdict {
            allow: v.allow as u8,
            reason: PACKET_POLICY,
            ct_state: 0,
            http: if v.awaits_request { HTTP_AWAITS } else { HTTP_NONE },
            egress: SideVerdict::from(&v.egress),
            ingress: SideVerdict::from(&v.ingress),
        }
    }

    pub fn malformed() -> PacketVerdict {
        PacketVerdict { reason: PACKET_MALFORMED, ..Default::default() }
    }

    /// The verdict of a header that carries no flow to judge: a frame that is not IP passes
    /// (`PACKET_NOT_IP`); anything else that could not be decoded is denied as malformed.
    pub fn undecodable(h: &PacketHeader) -> PacketVerdict {
        if h.error_kind == ERR_UNKNOWN_ETHERTYPE {
            PacketVerdict { allow: 1, reason: PACKET_NOT_IP, ..Default::default() }
        } else {
            PacketVerdict::malformed()
        }
    }
}
