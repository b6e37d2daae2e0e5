//! Deciding a flow: a header through the decision memo, a side through its compiled program
//! (the lookups' view of the snapshot, `Lean`) or by the walk, and the batch records they make.

use super::*;

/// The compiled program a local end's own direction is decided by, if built.
#[inline]
pub(super) fn built(id: &IdRec, end: usize) -> Option<&Compiled> {
    id.programs[END_DIRECTION[end] as usize].compiled_if_built()?.ok()
}

/// The direction a local end's own program decides: the source sends (egress), the
/// destination receives (ingress).
pub(super) const END_DIRECTION: [Direction; 2] = [Direction::Egress, Direction::Ingress];

impl Snapshot {
    /// One header's verdict record through the decision memo (see `classes`): each local side
    /// is looked up by its key and walked only on a miss.
    #[inline]
    pub(super) fn memo_verdict(&self, memo: &mut MemoRef<'_>, h: &PacketHeader, defaults: Defaults) -> PacketVerdict {
        if !memo.in_use() {
            return flow_of_header(h).map_or_else(|| PacketVerdict::undecodable(h), |f| self.flow_record(&f, defaults));
        }
        // A packet like a recent one: that one's record, from the exact-match cache.
        let exact = ExactKey::of(h, defaults);
        if let Some(v) = exact.and_then(|k| memo.exact_get(&k)) {
            return v;
        }
        let Some(flow) = flow_of_header(h) else { return PacketVerdict::undecodable(h) };
        let mut cacheable = true;
        let v = self.memo_sides(memo, &flow, defaults, &mut cacheable);
        if let (Some(k), true) = (exact, cacheable) {
            memo.exact_put(k, v);
        }
        v
    }

    /// A decodable header's record through the memo's side lookups, the missing sides decided
    /// by their programs; `cacheable` cleared when a side read what no key holds.
    #[inline]
    fn memo_sides(
        &self,
        memo: &mut MemoRef<'_>,
        flow: &Flow,
        defaults: Defaults,
        cacheable: &mut bool,
    ) -> PacketVerdict {
        let (Some(sa), Some(da)) = (flow.src.addr, flow.dst.addr) else { return PacketVerdict::malformed() };
        let src = self.addrs.get(&sa).copied();
        let dst = self.addrs.get(&da).copied();
        let src_local = src.is_some_and(|r| r.local);
        let dst_local = dst.is_some_and(|r| r.local);
        if !src_local && !dst_local {
            // No policy applies to either end.
            return PacketVerdict::judged(&Verdict { allow: true, egress: None, ingress: None, awaits_request: false });
        }
        let class = |a: Addr, r: Option<AddrRec>| r.map_or_else(|| self.classes.class_of(a), |r| r.class);
        let (sc, dc) = (class(sa, src), class(da, dst));
        let icmp = ((flow.icmp_type.unwrap_or(0) as u32) << 8) | flow.icmp_code.unwrap_or(0) as u32;
        let base = (flow.protocol as u32)
            | ((sa.v6 as u32) << 8)
            | ((defaults.pod_allow as u32) << 9)
            | ((defaults.host_allow as u32) << 10)
            | ((flow.icmp_type.is_some() as u32) << 11);
        let sport = self.ports.class_of(flow.sport);
        let dport = self.ports.class_of(flow.dport);
        let key =
            |d: Direction, subject: AddrRec, subject_class: u32, peer: Option<AddrRec>, peer_class: u32| SideKey {
                flags: base | ((d as u32) << 12),
                subject: subject.identity,
                subject_class,
                peer: peer.map_or(OUTSIDE, |p| p.identity),
                peer_class,
                sport,
                dport,
                icmp,
            };
        let mut out =
            PacketVerdict::judged(&Verdict { allow: true, egress: None, ingress: None, awaits_request: false });
        let mut sides: [Option<SideVerdict>; 2] = [None, None];
        let mut keys: [Option<SideKey>; 2] = [None, None];
        if let Some(s) = src.filter(|r| r.local) {
            let k = key(Direction::Egress, s, sc, dst, dc);
            sides[0] = memo.get(&k);
            keys[0] = Some(k);
        }
        if let Some(d) = dst.filter(|r| r.local) {
            let k = key(Direction::Ingress, d, dc, src, sc);
            sides[1] = memo.get(&k);
            keys[1] = Some(k);
        }
        let want = [keys[0].is_some() && sides[0].is_none(), keys[1].is_some() && sides[1].is_none()];
        if want[0] || want[1] {
            // The compiled programs decide the missing sides; each is memoized unless it read
            // what the key does not hold (service membership, learned domains: walked).
            let (records, uncacheable) =
                match self.records_compiled(flow, [src, dst], [Some(sc), Some(dc)], defaults, want) {
                    Some(records) => (records, false),
                    None => self.side_records(flow, defaults, want),
                };
            *cacheable &= !uncacheable;
            for i in 0..2 {
                if let (true, Some(k)) = (want[i], keys[i]) {
                    if !uncacheable {
                        memo.put(k, records[i]);
                    }
                    sides[i] = Some(records[i]);
                }
            }
        }
        let (mut allow, mut awaits) = (true, true);
        for (i, rec) in [src, dst].into_iter().enumerate() {
            let Some(rec) = rec.filter(|r| r.local) else { continue };
            let side = sides[i].unwrap_or_default();
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
        out.allow = allow as u8;
        out.http = if !allow && awaits { HTTP_AWAITS } else { HTTP_NONE };
        out.egress = sides[0].unwrap_or_default();
        out.ingress = sides[1].unwrap_or_default();
        out
    }

    /// Evaluates a flow (carrying `request`, if known) and reports whether the walk read
    /// anything outside the memo key.
    #[inline]
    pub(super) fn evaluate_flow(&self, flow: &Flow, request: Option<&Request>, defaults: Defaults) -> (Verdict, bool) {
        self.evaluate_flow_by(flow, request, defaults, Path::Compiled)
    }

    /// The side records `want`ed of an address-only flow whose ends resolve to `recs` (and
    /// address classes `classes`, when known), each decided by its compiled program; None when
    /// one of them is walked instead.
    #[inline]
    pub(super) fn records_compiled(
        &self,
        flow: &Flow,
        recs: [Option<AddrRec>; 2],
        classes: [Option<u32>; 2],
        defaults: Defaults,
        want: [bool; 2],
    ) -> Option<[SideVerdict; 2]> {
        let ends = [0, 1].map(|i| EndView {
            ident: recs[i].and_then(|r| self.identities.get(r.identity)),
            class: classes[i],
            addr: if i == 0 { flow.src.addr } else { flow.dst.addr },
        });
        let key = Key {
            version: flow.src.addr.or(flow.dst.addr).map(|a| a.version()),
            protocol: flow.protocol,
            ports: [flow.sport, flow.dport],
            icmp_type: flow.icmp_type,
            icmp_code: flow.icmp_code,
            addrs: [flow.src.addr, flow.dst.addr],
        };
        let mut out = [SideVerdict::default(); 2];
        for (i, d) in [(0, Direction::Egress), (1, Direction::Ingress)] {
            if !want[i] {
                continue;
            }
            let Some(rec) = recs[i].filter(|r| r.local) else { continue };
            let Some(subject) = ends[i].ident else { continue };
            let lean =
                Lean { s: self, ends: &ends, protocol: flow.protocol, ports: [flow.sport, flow.dport], ns: subject.ns };
            let mut logs = LogCount::default();
            let mut awaits = false;
            let decided =
                self.compiled_decision(d, subject, rec.host, &lean, &key, defaults, &mut logs, &mut awaits).ok()?;
            out[i] = side_verdict(decided, logs.0, awaits);
        }
        Some(out)
    }

    /// One side decided by the compiled programs of `subject` (and its profiles): its batch
    /// record without the Log count and `awaits` (`side_verdict` adds them; not present: no
    /// policy applies); Err when one of them is walked instead.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn compiled_decision<P: Probe, L: LogSink>(
        &self,
        d: Direction,
        subject: &IdRec,
        host: bool,
        probe: &P,
        key: &Key,
        defaults: Defaults,
        logs: &mut L,
        awaits: &mut bool,
    ) -> Result<SideVerdict, ()> {
        let program = &subject.programs[d as usize];
        let compiled = program.compiled(self).map_err(|_| ())?;
        if let Some(v) = compiled.decide(key, probe, logs, awaits) {
            return Ok(v);
        }
        if !subject.profiles.is_empty() {
            let p = subject.profiles.compiled(self, d).map_err(|_| ())?;
            // Every profile passed: denied, by the profiles.
            let none = SideVerdict { present: 1, allow: 0, reason: Reason::Profile as u8, ..SideVerdict::default() };
            return Ok(p.decide(key, probe, logs, awaits).unwrap_or(none));
        }
        if program.stages.is_empty() {
            return Ok(SideVerdict::default());
        }
        let allow = if host { defaults.host_allow } else { defaults.pod_allow };
        Ok(SideVerdict { present: 1, allow: allow as u8, reason: Reason::Default as u8, ..SideVerdict::default() })
    }

    /// One flow's verdict record, each side decided by its compiled program (or walked).
    #[inline]
    pub(super) fn flow_record(&self, flow: &Flow, defaults: Defaults) -> PacketVerdict {
        self.flow_record_resolved(flow, self.resolve_addrs(flow), defaults)
    }

    /// The address records of a flow's ends, when it names its ends by address only (the
    /// compiled programs' lean path); None otherwise.
    #[inline]
    fn resolve_addrs(&self, flow: &Flow) -> Option<[Option<AddrRec>; 2]> {
        match (flow.src.addr, flow.dst.addr, flow.src.endpoint, flow.dst.endpoint) {
            (Some(sa), Some(da), None, None) => Some([self.addrs.get(&sa).copied(), self.addrs.get(&da).copied()]),
            _ => None,
        }
    }

    /// [`Snapshot::flow_record`] with the ends' address records resolved (`resolve_addrs`).
    #[inline]
    pub(super) fn flow_record_resolved(
        &self,
        flow: &Flow,
        resolved: Option<[Option<AddrRec>; 2]>,
        defaults: Defaults,
    ) -> PacketVerdict {
        if let Some(recs) = resolved {
            let local = [recs[0].is_some_and(|r| r.local), recs[1].is_some_and(|r| r.local)];
            if !local[0] && !local[1] {
                return PacketVerdict::judged(&Verdict {
                    allow: true,
                    egress: None,
                    ingress: None,
                    awaits_request: false,
                });
            }
            if let Some(sides) =
                self.records_compiled(flow, recs, [recs[0].map(|r| r.class), recs[1].map(|r| r.class)], defaults, local)
            {
                let (mut allow, mut awaits) = (true, true);
                for i in 0..2 {
                    let Some(rec) = recs[i].filter(|r| r.local) else { continue };
                    let side = &sides[i];
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
                return PacketVerdict {
                    allow: allow as u8,
                    reason: PACKET_POLICY,
                    ct_state: 0,
                    http: if !allow && awaits { HTTP_AWAITS } else { HTTP_NONE },
                    egress: sides[0],
                    ingress: sides[1],
                };
            }
        }
        let src = self.resolve(&flow.src);
        let dst = self.resolve(&flow.dst);
        if !src.local() && !dst.local() {
            return PacketVerdict::judged(&Verdict { allow: true, egress: None, ingress: None, awaits_request: false });
        }
        let ctx = Ctx::new(self, flow, None, &src, &dst, Path::Compiled);
        let egress = ctx.side_record(&src, Direction::Egress, defaults);
        let ingress = ctx.side_record(&dst, Direction::Ingress, defaults);
        let (mut allow, mut awaits) = (true, true);
        for (side, end) in [(&egress, &src), (&ingress, &dst)] {
            if end.local() {
                let a = if side.present != 0 { side.allow != 0 } else { Self::default_for(end, defaults) };
                allow &= a;
                awaits &= a || side.awaits != 0;
            }
        }
        PacketVerdict {
            allow: allow as u8,
            reason: PACKET_POLICY,
            ct_state: 0,
            http: if !allow && awaits { HTTP_AWAITS } else { HTTP_NONE },
            egress,
            ingress,
        }
    }

    /// The side records `want`ed of a flow (egress, ingress), and whether a walked side read
    /// anything outside the memo key.
    pub(super) fn side_records(&self, flow: &Flow, defaults: Defaults, want: [bool; 2]) -> ([SideVerdict; 2], bool) {
        let src = self.resolve(&flow.src);
        let dst = self.resolve(&flow.dst);
        let ctx = Ctx::new(self, flow, None, &src, &dst, Path::Compiled);
        let mut out = [SideVerdict::default(); 2];
        if want[0] {
            out[0] = ctx.side_record(&src, Direction::Egress, defaults);
        }
        if want[1] {
            out[1] = ctx.side_record(&dst, Direction::Ingress, defaults);
        }
        (out, src.uncacheable.get())
    }

    pub(super) fn evaluate_flow_by(
        &self,
        flow: &Flow,
        request: Option<&Request>,
        defaults: Defaults,
        path: Path,
    ) -> (Verdict, bool) {
        let src = self.resolve(&flow.src);
        let dst = self.resolve(&flow.dst);
        let ctx = Ctx::new(self, flow, request, &src, &dst, path);
        let egress = ctx.side(&src, Direction::Egress, defaults);
        let ingress = ctx.side(&dst, Direction::Ingress, defaults);
        let (mut allow, mut awaits) = (true, true);
        for (d, end) in [(&egress, &src), (&ingress, &dst)] {
            if end.local() {
                let a = d.as_ref().map_or(Self::default_for(end, defaults), |d| d.allow);
                allow &= a;
                awaits &= a || d.as_ref().is_some_and(|d| d.awaits_request);
            }
        }
        let awaits_request = !allow && awaits;
        (Verdict { allow, egress, ingress, awaits_request }, src.uncacheable.get())
    }
}

/// How a side is decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Path {
    /// By its compiled program (walked where the program is not compiled).
    Compiled,
    /// By walking the rules (the baseline).
    Walk,
}

/// Counts the Log rules passed (batch records keep only the count).
#[derive(Default)]
pub(super) struct LogCount(pub(super) usize);

impl LogSink for LogCount {
    #[inline]
    fn log(&mut self, _: Option<u32>, _: Source, _: u32) {
        self.0 += 1;
    }
}

impl LogSink for Vec<LogEntry> {
    fn log(&mut self, tier: Option<u32>, source: Source, rule: u32) {
        self.push(LogEntry { tier, source, rule });
    }
}

/// One end of a flow as a compiled lookup reads it.
#[derive(Clone, Copy)]
pub(super) struct EndView<'s> {
    pub(super) ident: Option<&'s IdRec>,
    /// The address's class, when known (else worked out from the address if needed).
    pub(super) class: Option<u32>,
    pub(super) addr: Option<Addr>,
}

/// What a compiled lookup reads of the snapshot for one side: the ends' identity set bitmaps
/// and those of the network sets holding their addresses, relative peers in the subject's
/// namespace (`ns`), named ports.
pub(super) struct Lean<'s, 'e> {
    pub(super) s: &'s Snapshot,
    pub(super) ends: &'e [EndView<'s>; 2],
    pub(super) protocol: u8,
    pub(super) ports: [Option<u16>; 2],
    pub(super) ns: u32,
}

impl<'s> Lean<'s, '_> {
    #[inline]
    pub(super) fn netsets(&self, end: usize) -> &'s [u32] {
        let e = &self.ends[end];
        match e.addr {
            Some(a) => self.s.class_netsets(e.class.unwrap_or_else(|| self.s.classes.class_of(a))),
            None => &[],
        }
    }
}

impl Probe for Lean<'_, '_> {
    #[inline]
    fn identity_bits(&self, end: usize) -> &[u64] {
        self.ends[end].ident.map_or(&[], |r| &r.members[..])
    }

    #[inline]
    fn netset_bits(&self, end: usize, mut f: impl FnMut(&[u64])) {
        if self.s.netsets.is_empty() {
            return;
        }
        for &n in self.netsets(end) {
            if let Some(r) = self.s.identities.get(n) {
                f(&r.members);
            }
        }
    }

    fn relative_in(&self, end: usize, rid: u32, netsets: bool) -> bool {
        let Some(&set) = self.s.relative.get(&(rid, self.ns)) else { return false };
        if self.ends[end].ident.is_some_and(|r| r.in_set(set)) {
            return true;
        }
        netsets
            && !self.s.netsets.is_empty()
            && self.netsets(end).iter().any(|&n| self.s.identities.get(n).is_some_and(|r| r.in_set(set)))
    }

    fn ports_match(&self, end: usize, ports: &[PortMatch], not_ports: &[PortMatch]) -> bool {
        let port = self.ports[end];
        let owner = self.ends[end].ident;
        (ports.is_empty() || ports.iter().any(|p| p.matches(self.protocol, port, owner)))
            && !not_ports.iter().any(|p| p.matches(self.protocol, port, owner))
    }
}

/// A side's batch record from its lookup's (`Snapshot::compiled_decision`), the Log rules it
/// passed and whether an `http` rule awaits the request.
#[inline(always)]
pub(super) fn side_verdict(mut v: SideVerdict, logs: usize, awaits: bool) -> SideVerdict {
    if v.present != 0 {
        v.logs = logs.min(u8::MAX as usize) as u8;
        v.awaits = (v.allow == 0 && awaits) as u8;
    }
    v
}

/// A side's decision from its lookup's batch record and its Log trail (None: not present).
pub(super) fn decision_of(v: &SideVerdict, logs: Vec<LogEntry>) -> Option<Decision> {
    if v.present == 0 {
        return None;
    }
    let reason = match v.reason {
        0 => Reason::Rule,
        1 => Reason::EndOfTier,
        2 => Reason::Profile,
        _ => Reason::Default,
    };
    Some(Decision {
        allow: v.allow != 0,
        tier: u32::try_from(v.tier).ok(),
        source: match v.source_kind {
            1 => Some(Source::Policy(v.source as u32)),
            2 => Some(Source::Profile(v.source as u32)),
            _ => None,
        },
        rule: u32::try_from(v.rule).ok(),
        reason,
        logs,
        awaits_request: false,
    })
}
