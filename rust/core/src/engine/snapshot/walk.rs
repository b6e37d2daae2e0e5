//! The rule walk: one flow's context (`Ctx`) deciding a side rule by rule, the baseline the
//! compiled form is held to and what decides where there is none (a Calico `services` or
//! `domains` peer, a program past the memory bound, a flow carrying its HTTP request).

use super::*;

pub(super) struct Ctx<'a, 's> {
    pub(super) s: &'s Snapshot,
    pub(super) flow: &'a Flow,
    /// The connection's HTTP request, if known (`http` rules).
    pub(super) request: Option<&'a Request>,
    /// The side being decided passed an `http` rule for want of a request.
    pub(super) awaits: Cell<bool>,
    pub(super) src: &'a End<'s>,
    pub(super) dst: &'a End<'s>,
    pub(super) version: Option<u8>,
    pub(super) path: Path,
}

impl<'a, 's> Ctx<'a, 's> {
    pub(super) fn new(
        s: &'s Snapshot,
        flow: &'a Flow,
        request: Option<&'a Request>,
        src: &'a End<'s>,
        dst: &'a End<'s>,
        path: Path,
    ) -> Self {
        Ctx {
            s,
            flow,
            request,
            awaits: Cell::new(false),
            src,
            dst,
            version: src.addr.or(dst.addr).map(|a| a.version()),
            path,
        }
    }
}

impl<'s> Ctx<'_, 's> {
    pub(super) fn side(&self, end: &End<'s>, d: Direction, defaults: Defaults) -> Option<Decision> {
        self.awaits.set(false);
        let mut logs = Vec::new();
        let mut decision = match self.compiled_side(end, d, defaults, &mut logs) {
            Ok(v) => decision_of(&v, logs),
            Err(_) => self.walk(end, d, defaults),
        };
        if let Some(dec) = decision.as_mut() {
            dec.awaits_request = !dec.allow && self.awaits.get();
        }
        decision
    }

    /// One side's batch record: as [`Ctx::side`], without building the Log trail.
    #[inline]
    pub(super) fn side_record(&self, end: &End<'s>, d: Direction, defaults: Defaults) -> SideVerdict {
        self.awaits.set(false);
        let mut logs = LogCount::default();
        match self.compiled_side(end, d, defaults, &mut logs) {
            Ok(decided) => side_verdict(decided, logs.0, self.awaits.get()),
            Err(_) => {
                let mut decision = self.walk(end, d, defaults);
                if let Some(dec) = decision.as_mut() {
                    dec.awaits_request = !dec.allow && self.awaits.get();
                }
                SideVerdict::from(&decision)
            }
        }
    }

    /// A side decided by its compiled program and profiles; Err when they are walked instead
    /// (not compiled, a request to judge, or the walk asked for).
    #[inline]
    pub(super) fn compiled_side<L: LogSink>(
        &self,
        end: &End<'s>,
        d: Direction,
        defaults: Defaults,
        logs: &mut L,
    ) -> Result<SideVerdict, ()> {
        if self.path == Path::Walk || self.request.is_some() {
            return Err(());
        }
        if !end.local() {
            return Ok(SideVerdict::default());
        }
        let Some(subject) = end.ident else { return Ok(SideVerdict::default()) };
        let f = self.flow;
        let key = Key {
            version: self.version,
            protocol: f.protocol,
            ports: [f.sport, f.dport],
            icmp_type: f.icmp_type,
            icmp_code: f.icmp_code,
            addrs: [self.src.addr, self.dst.addr],
        };
        let ends = [self.src, self.dst].map(|e| EndView { ident: e.ident, class: e.class, addr: e.addr });
        let lean = Lean { s: self.s, ends: &ends, protocol: f.protocol, ports: [f.sport, f.dport], ns: subject.ns };
        let host = end.ep.is_some_and(|(_, e)| e.kind == Kind::Host);
        let mut awaits = false;
        let out = self.s.compiled_decision(d, subject, host, &lean, &key, defaults, logs, &mut awaits)?;
        self.awaits.set(awaits);
        Ok(out)
    }

    pub(super) fn walk(&self, end: &End<'s>, d: Direction, defaults: Defaults) -> Option<Decision> {
        if !end.local() {
            return None;
        }
        let subject = end.ident?;
        let s = self.s;
        let mut logs = Vec::new();
        let program = &subject.programs[d as usize];
        for stage in program.stages.iter() {
            let mut passed = false;
            'policies: for &pid in &stage.policies {
                let Some(rules) = s.policies.get(pid) else { continue };
                for (ri, rule) in rules.get(d).iter().enumerate() {
                    let Some(action) = self.rule_action(rule, subject) else { continue };
                    match action {
                        Action::Log => {
                            logs.push(LogEntry { tier: Some(stage.tier), source: Source::Policy(pid), rule: ri as u32 })
                        }
                        Action::Pass => {
                            passed = true;
                            break 'policies;
                        }
                        Action::Allow | Action::Deny => {
                            return Some(Decision {
                                allow: action == Action::Allow,
                                tier: Some(stage.tier),
                                source: Some(Source::Policy(pid)),
                                rule: Some(ri as u32),
                                reason: Reason::Rule,
                                logs,
                                awaits_request: false,
                            })
                        }
                    }
                }
            }
            if !passed && stage.default != Action::Pass {
                return Some(Decision {
                    allow: stage.default == Action::Allow,
                    tier: Some(stage.tier),
                    source: None,
                    rule: None,
                    reason: Reason::EndOfTier,
                    logs,
                    awaits_request: false,
                });
            }
        }
        if !subject.profiles.is_empty() {
            for &pi in subject.profiles.iter() {
                let Some(rules) = s.profiles.get(pi) else { continue };
                for (ri, rule) in rules.get(d).iter().enumerate() {
                    let Some(action) = self.rule_action(rule, subject) else { continue };
                    match action {
                        Action::Log => logs.push(LogEntry { tier: None, source: Source::Profile(pi), rule: ri as u32 }),
                        Action::Pass => break,
                        Action::Allow | Action::Deny => {
                            return Some(Decision {
                                allow: action == Action::Allow,
                                tier: None,
                                source: Some(Source::Profile(pi)),
                                rule: Some(ri as u32),
                                reason: Reason::Profile,
                                logs,
                                awaits_request: false,
                            })
                        }
                    }
                }
            }
            return Some(Decision {
                allow: false,
                tier: None,
                source: None,
                rule: None,
                reason: Reason::Profile,
                logs,
                awaits_request: false,
            });
        }
        if program.stages.is_empty() {
            return None;
        }
        Some(Decision {
            allow: Snapshot::default_for(end, defaults),
            tier: None,
            source: None,
            rule: None,
            reason: Reason::Default,
            logs,
            awaits_request: false,
        })
    }

    #[inline]
    pub(super) fn rule_action(&self, rule: &CRule, subject: &IdRec) -> Option<Action> {
        let f = self.flow;
        if let (Some(want), Some(v)) = (rule.ip_version, self.version) {
            if want != v {
                return None;
            }
        }
        if rule.protocols.as_ref().is_some_and(|set| !set.contains(f.protocol)) {
            return None;
        }
        if rule.not_protocols.contains(f.protocol) {
            return None;
        }
        if rule.icmp.as_ref().is_some_and(|m| !m.matches(f.protocol, f.icmp_type, f.icmp_code)) {
            return None;
        }
        if rule.not_icmp.as_ref().is_some_and(|m| m.matches(f.protocol, f.icmp_type, f.icmp_code)) {
            return None;
        }
        let src_hit = self.any_entity(&rule.sources, true, subject, rule.action)?;
        let dst_hit = self.any_entity(&rule.destinations, false, subject, rule.action)?;
        if rule.action == Action::Pass && (matches!(src_hit, Hit::Unresolvable) || matches!(dst_hit, Hit::Unresolvable))
        {
            return Some(Action::Deny);
        }
        if let Some(http) = &rule.http {
            // Only a TCP connection carries requests; until its request is known the rule
            // matches nothing, and the side's decision awaits it.
            if f.protocol != PROTO_TCP {
                return None;
            }
            let Some(request) = self.request else {
                self.awaits.set(true);
                return None;
            };
            if !http.matches(request) {
                return None;
            }
        }
        Some(rule.action)
    }

    #[inline]
    pub(super) fn any_entity(
        &self,
        entities: &[CEntity],
        source: bool,
        subject: &IdRec,
        action: Action,
    ) -> Option<Hit> {
        if entities.is_empty() {
            return Some(Hit::Match);
        }
        for m in entities {
            if m.unresolvable {
                // Fail closed: an Allow never matches through it, Deny/Pass always do.
                if matches!(action, Action::Allow | Action::Log) {
                    continue;
                }
                if self.ports_match(m, source) {
                    return Some(Hit::Unresolvable);
                }
                continue;
            }
            if self.entity_matches(m, source, subject) {
                return Some(Hit::Match);
            }
        }
        None
    }

    #[inline]
    pub(super) fn end(&self, source: bool) -> &End<'s> {
        if source {
            self.src
        } else {
            self.dst
        }
    }

    pub(super) fn entity_matches(&self, m: &CEntity, source: bool, subject: &IdRec) -> bool {
        let end = self.end(source);
        let ip = end.addr;
        if !m.nets.is_empty() && !ip.is_some_and(|a| m.nets.contains(a)) {
            return false;
        }
        if !m.not_nets.is_empty() && ip.is_some_and(|a| m.not_nets.contains(a)) {
            return false;
        }
        if let Some(addrs) = &m.node_addrs {
            if !ip.is_some_and(|a| addrs.contains(&a)) {
                return false;
            }
        }
        if let Some(patterns) = &m.domains {
            // Learned addresses change without a delta: a decision that read them is not memoized.
            self.src.uncacheable.set(true);
            let learned = match (&self.s.domain_facts, ip) {
                (Some(facts), Some(a)) => facts.matches(a.to_ip(), self.flow.ts_ns, patterns),
                _ => false,
            };
            if !learned {
                return false;
            }
        }
        if let Some(service) = &m.service {
            if !self.service_matches(m, service, source) {
                return false;
            }
        }
        let set_id = match m.labels {
            LabelCond::None => None,
            LabelCond::Set(id) => Some(id),
            LabelCond::Relative(rid) => match self.s.relative.get(&(rid, subject.ns)) {
                Some(&id) => Some(id),
                None => return false,
            },
        };
        if let Some(id) = set_id {
            let Some(set) = self.s.sets.get(id) else { return false };
            if !self.in_set(end, set, m.netsets) {
                return false;
            }
        }
        if let Some(id) = m.not_labels {
            // notSelector: excluded when the endpoint or any network set containing the address
            // is in its set (which holds only the kinds it may see).
            if self.s.sets.get(id).is_some_and(|set| self.in_set(end, set, true)) {
                return false;
            }
        }
        self.ports_match(m, source)
    }

    /// Whether the identity of the end's endpoint, or (when `netsets`) that of a network set
    /// containing its address, is in `set`.
    #[inline]
    pub(super) fn in_set(&self, end: &End<'s>, set: &IdSet, netsets: bool) -> bool {
        // Host-network pods have an identity no selector matches.
        if end.ep.is_some_and(|(_, e)| set.contains(e.identity)) {
            return true;
        }
        if !netsets || self.s.netsets.is_empty() {
            return false;
        }
        self.netsets_of(end).iter().any(|&n| set.contains(n))
    }

    /// The network sets (by identity) holding the end's address.
    #[inline]
    pub(super) fn netsets_of(&self, end: &End<'s>) -> &'s [u32] {
        end.netsets.get_or_init(|| match end.addr {
            Some(a) => self.s.class_netsets(end.class.unwrap_or_else(|| self.s.classes.class_of(a))),
            None => &[],
        })
    }

    #[inline]
    pub(super) fn ports_match(&self, m: &CEntity, source: bool) -> bool {
        self.ports_of(source, &m.ports, &m.not_ports)
    }

    /// Whether the port of one end (`source`: the source) matches `ports` and none of
    /// `not_ports`, named ports resolved against that end's endpoint.
    #[inline]
    pub(super) fn ports_of(&self, source: bool, ports: &[PortMatch], not_ports: &[PortMatch]) -> bool {
        if ports.is_empty() && not_ports.is_empty() {
            return true;
        }
        let f = self.flow;
        let port = if source { f.sport } else { f.dport };
        let owner = self.end(source).ident;
        if !ports.is_empty() && !ports.iter().any(|p| p.matches(f.protocol, port, owner)) {
            return false;
        }
        if not_ports.iter().any(|p| p.matches(f.protocol, port, owner)) {
            return false;
        }
        true
    }

    pub(super) fn service_matches(&self, m: &CEntity, service: &ServiceName, source: bool) -> bool {
        self.src.uncacheable.set(true);
        let Some(svc) = self.s.services.get(service) else { return false };
        let end = self.end(source);
        let member =
            end.addr.is_some_and(|a| svc.ips.contains(&a)) || end.ep.is_some_and(|(i, _)| svc.members.contains(&i));
        if !member {
            return false;
        }
        if source || !m.ports.is_empty() || svc.ports.is_empty() {
            return true;
        }
        let f = self.flow;
        let Some(dport) = f.dport else { return false };
        for (port, protocol, target) in &svc.ports {
            if *protocol != f.protocol {
                continue;
            }
            match target {
                Some(TargetPort::Name(name)) => {
                    if end.ident.is_some_and(|id| id.named_ports(name, f.protocol).any(|p| p == dport)) {
                        return true;
                    }
                }
                Some(TargetPort::Number(n)) => {
                    if dport == *n || dport == *port {
                        return true;
                    }
                }
                None => {
                    if dport == *port {
                        return true;
                    }
                }
            }
        }
        false
    }
}
