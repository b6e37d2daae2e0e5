//! One batch judged in lanes (replay). A lane judges some of the batch's packets, in capture
//! order, with a connection tracker of its own: the packets as captured, or those addressed to
//! a Service rewritten to one of its backends, by the enforced or by the staged policies. The
//! batch's DNS messages are learned between them: every lane judges its packets up to a
//! message before the message is learned, so in every lane a connection made after an answer
//! is judged by what it taught and one made before is not — in one call, whatever the number
//! of answers. Only an answer policy lets through to its client teaches, as on a node, where
//! only answers to allowed queries reach the client (and `enforce` learns only those): in the
//! learner's own lanes, its packet allowed (with a tracker: the reply of an allowed query, never
//! that of a denied one) and, judged without a tracker, its query (the packet's reverse) too.

use std::ops::Range;

use super::judge::{Judge, Segment};
use super::{Defaults, PacketVerdict, Snapshot};
use crate::batch::PacketHeader;
use crate::conntrack::{reversed_header, ConnTrack, QuotedTuple};
use crate::dns::DnsError;
use crate::http::HttpConns;

/// Lanes a single call takes at most (the enforced and the staged policies, each with a lane
/// per backend choice of the batch's Services).
pub const MAX_LANES: usize = 4096;

/// A DNS message inside a batch: the index of the header it came in, and its payload (UDP:
/// one message; TCP: length-prefixed messages).
#[derive(Clone, Copy, Debug)]
pub struct DnsMessage<'a> {
    pub index: usize,
    pub payload: &'a [u8],
}

/// What the DNS messages of a batch taught.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsTally {
    /// Messages read.
    pub messages: u64,
    /// New (name, address) facts they taught.
    pub learned: u64,
    /// Messages not learned: policy denied the answer, or (judged without a tracker) its query.
    pub denied: u64,
    /// Malformed messages, by [`DnsError::ALL`] index.
    pub errors: [u64; DnsError::ALL.len()],
}

/// One lane: the batch rows it judges (ascending) and, parallel to them, the headers as it
/// judges them, the flows ICMP errors quote, the TCP segments `http` rules read; its tracker
/// (None: each packet judged alone) and where its verdicts go.
pub struct Lane<'a> {
    pub engine: &'a Snapshot,
    pub rows: &'a [i64],
    pub headers: &'a [PacketHeader],
    pub quotes: Option<&'a [QuotedTuple]>,
    pub segments: Option<&'a [Segment<'a>]>,
    pub tracker: Option<(&'a mut ConnTrack, &'a mut HttpConns)>,
    pub out: &'a mut [PacketVerdict],
}

impl Lane<'_> {
    /// Whether policy let batch row `row` through in this lane, as the answer to an allowed
    /// query: None if the lane does not judge that row. Without a tracker, the packet was
    /// judged alone: its reverse (the query) must be allowed too.
    fn lets_answer_through(&self, row: usize, defaults: Defaults) -> Option<bool> {
        let at = self.rows.binary_search(&i64::try_from(row).ok()?).ok()?;
        let allowed = self.out.get(at)?.allow != 0;
        if !allowed || self.tracker.is_some() {
            return Some(allowed);
        }
        let query = reversed_header(self.headers.get(at)?);
        Some(self.engine.packet_verdict(&query, defaults).allow != 0)
    }

    /// Judges the lane's packets `r` (indices into its arrays).
    fn judge(&mut self, r: Range<usize>, defaults: Defaults) {
        let (hs, vs) = (&self.headers[r.clone()], &mut self.out[r.clone()]);
        let qs = self.quotes.map(|q| &q[r.clone()]);
        match self.tracker.as_mut() {
            Some((ct, http)) => {
                let l7 = self.segments.map(|s| (&mut **http, &s[r.clone()]));
                self.engine.classify_tracked_http(ct, l7, hs, qs, vs, defaults)
            }
            None => self.engine.classify_detailed(hs, vs, defaults),
        }
    }
}

/// Judges every lane, learning each of `messages` (by ascending index into `batch`, the
/// headers as captured) into `learner`'s domain facts once every lane has judged its packets
/// up to and including the message's own, if the learner's lanes let it through (module
/// documentation). A message out of order is learned where it is met. The lanes' arrays must
/// be parallel (as long as their rows).
pub fn judge_lanes(
    lanes: &mut [Lane<'_>],
    batch: &[PacketHeader],
    messages: &[DnsMessage<'_>],
    learner: &Snapshot,
    defaults: Defaults,
) -> DnsTally {
    let mut judged = vec![0usize; lanes.len()];
    let mut judge_before = |end: usize, lanes: &mut [Lane<'_>]| {
        for (lane, at) in lanes.iter_mut().zip(judged.iter_mut()) {
            let stop = *at + lane.rows[*at..].partition_point(|&r| usize::try_from(r).is_ok_and(|r| r < end));
            if stop > *at {
                lane.judge(*at..stop, defaults);
                *at = stop;
            }
        }
    };
    let mut tally = DnsTally::default();
    for m in messages {
        judge_before(m.index.saturating_add(1), lanes);
        let Some(h) = batch.get(m.index) else { continue };
        // every lane of the learner that judged the answer let it through (a Service's answer:
        // for each backend choice), and at least one judged it
        let through = lanes
            .iter()
            .filter(|lane| std::ptr::eq(lane.engine, learner))
            .filter_map(|lane| lane.lets_answer_through(m.index, defaults))
            .fold(None, |all, one| Some(all.unwrap_or(true) && one));
        tally.messages += 1;
        if through != Some(true) {
            tally.denied += 1;
            continue;
        }
        let (learned, error) = learner.learn_dns(m.payload, h.ts_ns, h.protocol == super::PROTO_TCP);
        tally.learned += learned as u64;
        if let Some(k) = error {
            tally.errors[k] += 1;
        }
    }
    judge_before(usize::MAX, lanes);
    tally
}
