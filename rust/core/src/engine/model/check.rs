//! Checking a delta before it is applied: every policy's and profile's rules compiled as far as
//! they can be without changing the model (peers parsed, actions, ports, domains and HTTP
//! matches checked) and every other object's fields parsed, so a delta that does not compile
//! changes nothing.

use super::*;

/// A compiled-but-not-yet-applied rule list with the selectors it will need.
#[derive(Default)]
pub(super) struct PendingRules {
    /// The rules as specified (ingress, egress), and each one's peers checked.
    pub(super) specs: [Arc<[RuleSpec]>; 2],
    pub(super) rules: [Vec<PendingRule>; 2],
}

impl PendingRules {
    /// Whether the compiled form depends on the rules alone (see `SharedRules`).
    pub(super) fn shareable(&self) -> bool {
        self.rules
            .iter()
            .flatten()
            .all(|r| r.sources.iter().chain(&r.destinations).all(|e| !e.relative && !e.node_selector))
    }
}

pub(super) struct PendingRule {
    pub(super) sources: Vec<PendingEntity>,
    pub(super) destinations: Vec<PendingEntity>,
}

pub(super) struct PendingEntity {
    pub(super) selector: Option<Selector>,
    pub(super) relative: bool,
    pub(super) node_selector: bool,
    /// The `notSelector`'s own selector (`identity::not_selector`).
    pub(super) not_selector: Option<Selector>,
}

impl Model {
    /// Compiles every policy and profile of `delta` and checks its other objects, without
    /// changing anything.
    pub(super) fn check(&self, delta: &Delta) -> Result<Checked, EngineError> {
        let mut out = Checked::default();
        if let Some(why) = delta.unresolved() {
            return Err(EngineError::Spec(why));
        }
        // Rules compiled once per distinct (ingress, egress): later policies naming the same
        // lists, and lists compiled before (equal, so checked then), share them.
        let mut checked: HashSet<(*const RuleSpec, *const RuleSpec)> = HashSet::new();
        let mut subjects: HashMap<&crate::engine::spec::SubjectSpec, usize> = HashMap::new();
        let mut pending = |ingress: &RuleSpecs, egress: &RuleSpecs, context: &str| {
            let pair = (ingress.as_ptr(), egress.as_ptr());
            if checked.contains(&pair) || rules_key(ingress, egress).is_some_and(|k| self.shared_rules.contains_key(&k))
            {
                return Ok(None);
            }
            let p = pending_rules(ingress, egress, context)?;
            if p.shareable() {
                checked.insert(pair);
            }
            Ok::<_, EngineError>(Some(p))
        };
        if let Some(tiers) = &delta.tiers {
            for t in tiers {
                Action::parse(&t.default_action)?;
            }
        }
        let tier_known = |name: &str| match &delta.tiers {
            Some(ts) => ts.iter().any(|t| t.name == name),
            None => self.tiers.id(name).is_some(),
        };
        for p in &delta.policies {
            let context = format!("policy {} ({}/{})", p.id, p.kind, p.name);
            if !tier_known(&p.tier) {
                return Err(EngineError::Spec(format!("{context} names unknown tier {:?}", p.tier)));
            }
            for t in &p.types {
                Direction::parse(t)?;
            }
            // One parse per distinct subject (policies of one subject hold its selector once).
            let subject = match subjects.get(&p.subject) {
                Some(&i) => i,
                None => {
                    out.subjects.push(identity::subject_selector(&p.subject, &context)?);
                    subjects.insert(&p.subject, out.subjects.len() - 1);
                    out.subjects.len() - 1
                }
            };
            out.policies.push((subject, pending(&p.ingress, &p.egress, &context)?));
        }
        for p in &delta.profiles {
            let context = format!("profile {}", p.name);
            out.profiles.push(pending(&p.ingress, &p.egress, &context)?);
        }
        for e in &delta.endpoints {
            kind_of(&e.kind)?;
            parse_addrs(&e.ips)?;
        }
        for n in &delta.network_sets {
            NetList::parse(&n.nets)?;
        }
        for n in &delta.nodes {
            parse_addrs(&n.addresses)?;
        }
        for s in &delta.services {
            parse_addrs(&s.ips)?;
        }
        Ok(out)
    }
}

/// What `check` found: per policy its subject (a position in `subjects`, each distinct one
/// parsed once) and its rules checked (None: equal to rules checked before, whose compiled
/// form is shared).
#[derive(Default)]
pub(super) struct Checked {
    pub(super) subjects: Vec<Selector>,
    pub(super) policies: Vec<(usize, Option<PendingRules>)>,
    pub(super) profiles: Vec<Option<PendingRules>>,
}

/// The key of `ingress` and `egress` among shared compiled rules (None while unresolved).
pub(super) fn rules_key(ingress: &RuleSpecs, egress: &RuleSpecs) -> Option<RulesKey> {
    Some((ingress.shared()?.clone(), egress.shared()?.clone()))
}

pub(super) fn pending_rules(
    ingress: &RuleSpecs,
    egress: &RuleSpecs,
    context: &str,
) -> Result<PendingRules, EngineError> {
    let specs = rules_key(ingress, egress)
        .ok_or_else(|| EngineError::Spec(format!("{context}: its rules name a rule list that is not in the delta")))?;
    let mut out = PendingRules { specs: [specs.0, specs.1], rules: [Vec::new(), Vec::new()] };
    for (d, list) in [(0, &**ingress), (1, &**egress)] {
        for (i, r) in list.iter().enumerate() {
            let context = format!("{context} rule {i}");
            Action::parse(&r.action)?;
            if let Some(h) = &r.http {
                CRule::compile_http(h)?;
            }
            let entity = |e: &EntitySpec| -> Result<PendingEntity, EngineError> {
                NetList::parse(&e.nets)?;
                NetList::parse(&e.not_nets)?;
                for p in e.ports.iter().chain(&e.not_ports) {
                    PortMatch::compile(p)?;
                }
                if let Some(text) = &e.node_selector {
                    identity::parse(text, &context)?;
                }
                for d in &e.domains {
                    DomainPattern::parse(d)
                        .map_err(|why| EngineError::Spec(format!("{context}: domain {d:?}: {why}")))?;
                }
                let selector =
                    if identity::needs_labels(e) { Some(identity::entity_selector(e, &context)?) } else { None };
                if identity::is_relative(e) {
                    // the relation itself must be valid
                    identity::relative_selector(&Selector::all(), e, None, &LabelMap::new())?;
                }
                let not_selector = identity::not_selector(e, &context)?;
                Ok(PendingEntity {
                    selector,
                    relative: identity::is_relative(e),
                    node_selector: e.node_selector.is_some(),
                    not_selector,
                })
            };
            let sources = r.sources.iter().map(entity).collect::<Result<_, _>>()?;
            let destinations = r.destinations.iter().map(entity).collect::<Result<_, _>>()?;
            out.rules[d].push(PendingRule { sources, destinations });
        }
    }
    Ok(out)
}
