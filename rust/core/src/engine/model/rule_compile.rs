//! Rule compilation: rule peers to interned selectors (relative peers per subject namespace,
//! node selectors to addresses), compiled rules shared by policies of equal rules, and what
//! compiling acquired, released when a policy or profile goes.

use super::*;

impl Model {
    pub(super) fn node_addrs(&self, text: &str) -> Arc<HashSet<Addr>> {
        let sel = identity::parse(text, "node selector")
            .unwrap_or_else(|_| Selector::from_node(crate::selector::Node::Has(identity::NEVER.into())));
        let mut out = HashSet::new();
        for n in self.nodes.values() {
            if sel.matches(&n.labels) {
                out.extend(n.addresses.iter().filter_map(|a| Addr::parse(a).ok()));
            }
        }
        Arc::new(out)
    }

    /// A relative peer: its selectors per subject namespace are derived on demand.
    pub(super) fn acquire_relative(&mut self, base: Selector, spec: EntitySpec) -> u32 {
        self.reference_keys(&base);
        let id = self.next_relative;
        self.next_relative += 1;
        self.relatives.insert(id, RelEntry { base, spec, per_ns: HashMap::new(), refs: 1 });
        id
    }

    pub(super) fn derive_relative(&mut self, rid: u32, ns: Option<u32>) {
        let mine = self.ns_labels(ns);
        let name = ns.and_then(|i| self.ns_names.get(i as usize).cloned().flatten());
        let r = &self.relatives[&rid];
        let selector = identity::relative_selector(&r.base, &r.spec, name.as_deref(), &mine)
            .unwrap_or_else(|_| Selector::from_node(crate::selector::Node::Has(identity::NEVER.into())));
        let sel = self.acquire_selector(selector);
        let old = self.relatives.get_mut(&rid).expect("relative").per_ns.insert(ns, sel);
        Arc::make_mut(&mut self.snap.relative).insert((rid, ns.unwrap_or(NO_NAMESPACE)), sel);
        if let Some(old) = old {
            self.release_selector(old);
        }
    }

    pub(super) fn release_relative(&mut self, rid: u32) {
        let r = self.relatives.get_mut(&rid).expect("relative");
        r.refs -= 1;
        if r.refs > 0 {
            return;
        }
        let r = self.relatives.remove(&rid).expect("relative");
        let rel = Arc::make_mut(&mut self.snap.relative);
        for (ns, sel) in &r.per_ns {
            rel.remove(&(rid, ns.unwrap_or(NO_NAMESPACE)));
            let _ = sel;
        }
        for (_, sel) in r.per_ns {
            self.release_selector(sel);
        }
        self.unreference_keys(&r.base);
    }

    pub(super) fn compile_entity(&mut self, e: &EntitySpec, pending: PendingEntity, acq: &mut Acquired) -> CEntity {
        let labels = match pending.selector {
            None => LabelCond::None,
            Some(sel) if pending.relative => {
                let rid = self.acquire_relative(sel, e.clone());
                acq.relatives.push(rid);
                LabelCond::Relative(rid)
            }
            Some(sel) => {
                let id = self.acquire_selector(sel);
                acq.selectors.push(id);
                LabelCond::Set(id)
            }
        };
        let not_labels = pending.not_selector.map(|sel| {
            let id = self.acquire_selector(sel);
            acq.selectors.push(id);
            id
        });
        acq.has_node_selector |= e.node_selector.is_some();
        let ports: Vec<PortMatch> = e.ports.iter().filter_map(|p| PortMatch::compile(p).ok()).collect();
        let not_ports: Vec<PortMatch> = e.not_ports.iter().filter_map(|p| PortMatch::compile(p).ok()).collect();
        for p in ports.iter().chain(&not_ports) {
            if let PortMatch::Range { first, last, .. } = p {
                self.boundaries.add_ports(*first, *last);
                acq.ports.extend([*first, *last]);
            }
        }
        let nets = NetList::parse(&e.nets).unwrap_or_default();
        let not_nets = NetList::parse(&e.not_nets).unwrap_or_default();
        let node_addrs = e.node_selector.as_deref().map(|t| self.node_addrs(t));
        let host_nets = node_addrs.iter().flat_map(|s| s.iter()).map(|a| Net { bits: a.bits, len: 128, v6: a.v6 });
        let prefixes: Vec<Net> = nets.0.iter().chain(&not_nets.0).copied().chain(host_nets).collect();
        for n in &prefixes {
            self.boundaries.add_prefix(*n);
        }
        acq.prefixes.extend(prefixes);
        CEntity {
            nets,
            not_nets,
            node_addrs,
            domains: (!e.domains.is_empty())
                .then(|| e.domains.iter().filter_map(|d| DomainPattern::parse(d).ok()).collect::<Arc<[_]>>()),
            service: e.service.as_ref().map(|(ns, name)| (Arc::from(ns.as_str()), Arc::from(name.as_str()))),
            labels,
            netsets: identity::netsets_allowed(e),
            not_labels,
            ports,
            not_ports,
            unresolvable: e.unresolvable,
        }
    }

    pub(super) fn compile_rules(&mut self, pending: PendingRules) -> (CRules, Acquired) {
        let mut acq = Acquired::default();
        let mut out = CRules::default();
        let [ingress, egress] = pending.rules;
        let [ingress_specs, egress_specs] = pending.specs;
        for (d, list, specs) in
            [(Direction::Ingress, ingress, ingress_specs), (Direction::Egress, egress, egress_specs)]
        {
            for (pr, r) in list.into_iter().zip(specs.iter()) {
                let sources =
                    r.sources.iter().zip(pr.sources).map(|(e, p)| self.compile_entity(e, p, &mut acq)).collect();
                let destinations = r
                    .destinations
                    .iter()
                    .zip(pr.destinations)
                    .map(|(e, p)| self.compile_entity(e, p, &mut acq))
                    .collect();
                let rule = CRule {
                    action: Action::parse(&r.action).unwrap_or(Action::Deny),
                    ip_version: r.ip_version,
                    protocols: r.protocols.as_deref().map(ProtoSet::of),
                    not_protocols: ProtoSet::of(&r.not_protocols),
                    icmp: icmp(&r.icmp),
                    not_icmp: icmp(&r.not_icmp),
                    sources,
                    destinations,
                    http: r.http.as_ref().and_then(|h| CRule::compile_http(h).ok()).map(Arc::new),
                };
                match d {
                    Direction::Ingress => out.ingress.push(rule),
                    Direction::Egress => out.egress.push(rule),
                }
            }
        }
        (out, acq)
    }

    pub(super) fn release_acquired(&mut self, acq: &Acquired) {
        for n in &acq.prefixes {
            self.boundaries.drop_prefix(*n);
        }
        for pair in acq.ports.chunks(2) {
            self.boundaries.drop_ports(pair[0], pair[1]);
        }
        for &sel in &acq.selectors {
            self.release_selector(sel);
        }
        for &rid in &acq.relatives {
            self.release_relative(rid);
        }
    }

    /// What compiled rules shared with another policy acquired, acquired again for one more
    /// user (relatives and node selectors are never shared).
    pub(super) fn reacquire(&mut self, acq: &Acquired) {
        for n in &acq.prefixes {
            self.boundaries.add_prefix(*n);
        }
        for pair in acq.ports.chunks(2) {
            self.boundaries.add_ports(pair[0], pair[1]);
        }
        for sel in &acq.selectors {
            self.sel_entries.get_mut(sel).expect("a shared rule's selector is held by its other users").refs += 1;
        }
    }

    /// The compiled rules of `ingress` and `egress`: those of a policy or profile with equal
    /// rules, shared (each user acquires their selectors, prefixes and ports), or compiled now
    /// from `pending` (None: the rules were checked equal to shared ones in this delta).
    pub(super) fn compile_shared(
        &mut self,
        ingress: &RuleSpecs,
        egress: &RuleSpecs,
        pending: Option<PendingRules>,
    ) -> Compiled {
        let key = rules_key(ingress, egress);
        if let Some(entry) = key.as_ref().and_then(|k| self.shared_rules.get_mut(k)) {
            entry.users += 1;
            let (rules, acquired) = (entry.rules.clone(), entry.acquired.clone());
            self.reacquire(&acquired);
            let shared = key.and_then(|k| self.shared_rules.get_key_value(&k).map(|(k, _)| k.clone()));
            return Compiled { rules, acquired, shared };
        }
        // Rules equal to shared ones whose last user went earlier in this delta: they were
        // checked when first compiled, so checking them again finds nothing.
        let pending = pending.or_else(|| pending_rules(ingress, egress, "shared rules").ok()).unwrap_or_default();
        let shareable = pending.shareable();
        let (rules, acquired) = self.compile_rules(pending);
        let (rules, acquired) = (Arc::new(rules), Arc::new(acquired));
        let shared = key.filter(|_| shareable);
        if let Some(k) = &shared {
            self.shared_rules
                .insert(k.clone(), SharedRules { rules: rules.clone(), acquired: acquired.clone(), users: 1 });
        }
        Compiled { rules, acquired, shared }
    }

    pub(super) fn release_compiled(&mut self, compiled: Compiled) {
        self.release_acquired(&compiled.acquired);
        if let Some(k) = compiled.shared {
            if let Some(entry) = self.shared_rules.get_mut(&k) {
                entry.users -= 1;
                if entry.users == 0 {
                    self.shared_rules.remove(&k);
                }
            }
        }
    }

    /// Node labels or addresses changed: rules with node selectors are compiled again (their
    /// selectors are unchanged, so no set moves).
    pub(super) fn recompile_node_selectors(&mut self) {
        let ids: Vec<u32> =
            self.policies.iter().filter(|(_, p)| p.compiled.acquired.has_node_selector).map(|(&i, _)| i).collect();
        for id in ids {
            let spec = self.policies[&id].spec.clone();
            if let Ok(subject) = identity::subject_selector(&spec.subject, "policy") {
                if let Ok(pending) = pending_rules(&spec.ingress, &spec.egress, "policy") {
                    self.upsert_policy(spec, subject, Some(pending));
                }
            }
        }
        let ids: Vec<u32> =
            self.profiles.iter().filter(|(_, p)| p.compiled.acquired.has_node_selector).map(|(&i, _)| i).collect();
        for id in ids {
            let spec = self.profiles[&id].spec.clone();
            if let Ok(pending) = pending_rules(&spec.ingress, &spec.egress, "profile") {
                self.upsert_profile(spec, Some(pending));
            }
        }
    }
}
