//! A batch of decoded headers decided by the compiled programs, a group at a time. Traffic
//! with few repeated combinations (random pairs, a scan, a flood of new flows) misses cache on
//! every table a lookup reads; a group's lookups are independent, so each stage asks for what
//! the next one reads, for every header of the group, before any of them reads it: the slots
//! of the addresses, then the identities, then their set bitmaps and programs, then the
//! programs' packed tables (the group prefetching of DPDK's and VPP's batch lookups). Then each
//! header is decided from what its stages found, straight into its batch record.

use super::*;
use crate::batch::{FLAG_HAS_PORTS, FLAG_MALFORMED, FLAG_TRUNCATED};
use crate::prefetch::{prefetch, prefetch_slice};

/// Headers decided together: among the best of 4 to 64 measured on random pod pairs at 10k
/// pods.
const GROUP: usize = 16;

/// The record of a flow with no local end: no policy applies to either end.
const NO_POLICY: PacketVerdict = PacketVerdict {
    allow: 1,
    reason: PACKET_POLICY,
    ct_state: 0,
    http: HTTP_NONE,
    egress: SideVerdict::ABSENT,
    ingress: SideVerdict::ABSENT,
};

/// One header of a group, as far as its lookups have got.
#[derive(Clone, Copy)]
struct Slot<'s> {
    key: Key,
    addrs: [Addr; 2],
    hashes: [u64; 2],
    recs: [Option<AddrRec>; 2],
    ids: [Option<&'s IdRec>; 2],
}

/// A header's lookup key, or None when it lacks what policy needs (as `flow_of_header`).
#[inline(always)]
fn key_of_header(h: &PacketHeader) -> Option<([Addr; 2], Key)> {
    if h.flags & FLAG_MALFORMED != 0 || (h.ip_version != 4 && h.ip_version != 6) {
        return None;
    }
    let has_ports = h.flags & FLAG_HAS_PORTS != 0;
    if h.flags & FLAG_TRUNCATED != 0 && !has_ports && crate::engine::is_port_protocol(h.protocol) {
        return None;
    }
    let icmp = matches!(h.protocol, crate::engine::PROTO_ICMP | crate::engine::PROTO_ICMPV6);
    let addrs = [Addr::from_header(&h.src_addr, h.ip_version), Addr::from_header(&h.dst_addr, h.ip_version)];
    let key = Key {
        version: Some(h.ip_version),
        protocol: h.protocol,
        ports: [has_ports.then_some(h.sport), has_ports.then_some(h.dport)],
        icmp_type: icmp.then_some(h.icmp_type),
        icmp_code: icmp.then_some(h.icmp_code),
        addrs: [Some(addrs[0]), Some(addrs[1])],
    };
    Some((addrs, key))
}

impl Snapshot {
    /// Headers' verdict records by the compiled programs, as [`Snapshot::flow_record`] gives
    /// each, a group at a time; the stages ask for memory ahead only once the tables outgrow
    /// the core's cache (`GROUPED_FROM`): below it the hints only add instructions.
    pub(super) fn flow_records(&self, headers: &[PacketHeader], out: &mut [PacketVerdict], defaults: Defaults) {
        let ahead = self.addrs.len() >= GROUPED_FROM;
        let mut slots: [Option<Slot<'_>>; GROUP] = [None; GROUP];
        for (hs, os) in headers.chunks(GROUP).zip(out.chunks_mut(GROUP)) {
            let slots = &mut slots[..hs.len()];
            // The headers' keys; the slots of their addresses asked for.
            for (s, h) in slots.iter_mut().zip(hs) {
                *s = key_of_header(h).map(|(addrs, key)| {
                    let hashes = addrs.map(|a| AddrMap::hash(&a));
                    if ahead {
                        hashes.iter().for_each(|&h| self.addrs.prefetch(h));
                    }
                    Slot { key, addrs, hashes, recs: [None; 2], ids: [None; 2] }
                });
            }
            // The address records; the slots of their identities asked for.
            for s in slots.iter_mut().flatten() {
                for end in 0..2 {
                    s.recs[end] = self.addrs.get_hashed(s.hashes[end], &s.addrs[end]).copied();
                    if let (true, Some(r)) = (ahead, s.recs[end]) {
                        self.identities.prefetch(r.identity);
                    }
                }
            }
            // The identities; their set bitmaps and the local ends' programs asked for.
            for s in slots.iter_mut().flatten() {
                for ((rec, id), direction) in s.recs.iter().zip(s.ids.iter_mut()).zip(END_DIRECTION) {
                    let Some(r) = rec else { continue };
                    *id = self.identities.get(r.identity);
                    if let (true, Some(id)) = (ahead, *id) {
                        prefetch_slice(&id.members, 2);
                        if r.local {
                            prefetch(Arc::as_ptr(&id.programs[direction as usize]));
                        }
                    }
                }
            }
            // The local ends' compiled programs built so far: their packed tables.
            if ahead {
                for s in slots.iter().flatten() {
                    for end in 0..2 {
                        let (Some(r), Some(id)) = (s.recs[end], s.ids[end]) else { continue };
                        if let (true, Some(c)) = (r.local, built(id, end)) {
                            c.prefetch(s.key.protocol);
                        }
                    }
                }
            }
            for ((s, h), o) in slots.iter().zip(hs).zip(os.iter_mut()) {
                *o = match s {
                    None => PacketVerdict::undecodable(h),
                    Some(s) => match self.slot_record(s, defaults) {
                        Some(v) => v,
                        // A side walked: the whole flow by the general path.
                        None => match flow_of_header(h) {
                            Some(f) => self.flow_record_resolved(&f, Some(s.recs), defaults),
                            None => PacketVerdict::undecodable(h),
                        },
                    },
                };
            }
        }
    }

    /// One header's record from its slot, each local side by its compiled program (as
    /// `flow_record_resolved` and `records_compiled` give it); None when a side is walked.
    #[inline(always)]
    fn slot_record(&self, s: &Slot<'_>, defaults: Defaults) -> Option<PacketVerdict> {
        let local = s.recs.map(|r| r.is_some_and(|r| r.local));
        if !local[0] && !local[1] {
            return Some(NO_POLICY);
        }
        let ends = [0, 1].map(|end| EndView {
            ident: s.ids[end],
            class: s.recs[end].map(|r| r.class),
            addr: Some(s.addrs[end]),
        });
        let mut sides = [SideVerdict::ABSENT; 2];
        let (mut allow, mut awaits) = (true, true);
        for (end, d) in [(0, Direction::Egress), (1, Direction::Ingress)] {
            let Some(rec) = s.recs[end].filter(|r| r.local) else { continue };
            if let Some(subject) = s.ids[end] {
                let lean = Lean { s: self, ends: &ends, protocol: s.key.protocol, ports: s.key.ports, ns: subject.ns };
                let mut logs = LogCount::default();
                let mut aw = false;
                let v =
                    self.compiled_decision(d, subject, rec.host, &lean, &s.key, defaults, &mut logs, &mut aw).ok()?;
                sides[end] = side_verdict(v, logs.0, aw);
            }
            let side = &sides[end];
            let a = if side.present != 0 {
                side.allow != 0
            } else if rec.host {
                defaults.host_allow
            } else {
                defaults.pod_allow
            };
            allow &= a;
            awaits &= a || side.awaits != 0;
        }
        Some(PacketVerdict {
            allow: allow as u8,
            reason: PACKET_POLICY,
            ct_state: 0,
            http: if !allow && awaits { HTTP_AWAITS } else { HTTP_NONE },
            egress: sides[0],
            ingress: sides[1],
        })
    }
}
