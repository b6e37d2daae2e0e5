//! A host endpoint's forward hook: the `applyOnForward` policy that judges traffic the host
//! routes in or out by the endpoint's interface (felix's filter FORWARD chains,
//! `pyclassify/hostpath.py` step 3). The packet's addresses stay its own; the host endpoint
//! stands in as the subject of the side it crosses (ingress: the packet arrived by its
//! interface; egress: it leaves by it).
//!
//! A rule or a tier's end decides here (allow ends host policy, deny drops); with no policy
//! applying, or every tier passed, the packet goes on. Either way a packet this hook does not
//! drop still meets the workload's own policy, so its verdict is only "dropped here or not".

use super::judge::flow_of_header;
use super::records::{PacketVerdict, SideVerdict, PACKET_POLICY};
use super::{Defaults, Reason, Snapshot};
use crate::batch::PacketHeader;

/// Which host endpoint a forward-hook judgement is made for, and on which side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Via {
    /// The host endpoint (an endpoint index of the snapshot); None: no host endpoint holds the
    /// interface (any more), so no host policy applies and every packet goes on.
    pub endpoint: Option<u32>,
    /// The packet arrived by the endpoint's interface (else it leaves by it).
    pub ingress: bool,
}

/// The forward hook's verdict for one header: `allow` 0 when this hook drops it, with the
/// deciding side's record (only that side is present).
pub fn forward_verdict(engine: &Snapshot, h: &PacketHeader, via: Via, defaults: Defaults) -> PacketVerdict {
    let Some(mut flow) = flow_of_header(h) else { return PacketVerdict::malformed() };
    let Some(endpoint) = via.endpoint else {
        return PacketVerdict { allow: 1, reason: PACKET_POLICY, ..Default::default() };
    };
    if via.ingress {
        flow.dst.endpoint = Some(endpoint);
    } else {
        flow.src.endpoint = Some(endpoint);
    }
    let Ok(v) = engine.evaluate(&flow, defaults) else {
        return PacketVerdict::malformed(); // an endpoint the snapshot lacks: fail closed
    };
    let decision = if via.ingress { v.ingress } else { v.egress };
    let drops = decision.as_ref().is_some_and(|d| !d.allow && matches!(d.reason, Reason::Rule | Reason::EndOfTier));
    let side = SideVerdict::from(&decision);
    let mut out = PacketVerdict { allow: u8::from(!drops), reason: PACKET_POLICY, ..Default::default() };
    if via.ingress {
        out.ingress = side;
    } else {
        out.egress = side;
    }
    out
}

/// [`forward_verdict`] for a batch.
pub fn classify_forward(
    engine: &Snapshot,
    headers: &[PacketHeader],
    via: Via,
    out: &mut [PacketVerdict],
    defaults: Defaults,
) {
    for (h, o) in headers.iter().zip(out.iter_mut()) {
        *o = forward_verdict(engine, h, via, defaults);
    }
}
