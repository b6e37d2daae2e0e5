//! Identities and the composite selectors that match them.
//!
//! An identity is what policy can tell apart about an endpoint. Its labels, as the label index
//! sees them, are:
//!
//! - the endpoint's own labels whose keys some selector mentions (the rest cannot change any
//!   verdict, so pods differing only in `pod-template-hash` share an identity);
//! - its service account's labels under `sa:`, again only the keys selectors mention;
//! - pseudo labels: `@kind` (`pod`, `host`, `hostnet` for host-network pods, which no selector
//!   sees, `networkset`), `@ns` (the namespace name) and `@sa` (the service account name, once
//!   a rule names service accounts);
//! - its namespace's labels, inherited under `ns:` as the label index's parent.
//!
//! `@`, and `:` in a key, cannot occur in a Kubernetes label key, so these never collide with a
//! label a user wrote. Every positive label condition of a rule peer or a policy subject
//! (selector, namespace, namespace selector, service accounts, endpoint kinds) becomes one
//! composite selector over these labels, so one index answers all of them. A peer's
//! `notSelector` is a second selector of its own (see [`not_selector`]): felix renders it as
//! "address not in the IP set of what it matches", which an address no endpoint owns passes.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::spec::{EntitySpec, LabelMap, SubjectSpec};
use super::EngineError;
use crate::selector::{Node, Selector};

pub const KIND: &str = "@kind";
pub const NS: &str = "@ns";
pub const SA: &str = "@sa";
pub const NEVER: &str = "@never";
/// The namespace's labels, as the label index's parent prefix.
pub const NS_PREFIX: &str = "ns:";
pub const SA_PREFIX: &str = "sa:";

pub const KIND_POD: &str = "pod";
pub const KIND_HOST: &str = "host";
pub const KIND_HOSTNET: &str = "hostnet";
pub const KIND_NETWORKSET: &str = "networkset";

/// Whether a key in a selector must be projected onto identities (an own label, a service
/// account label, or `@sa`); namespace labels and the always-present pseudo labels need not.
pub fn is_projected_key(key: &str) -> bool {
    !(key.starts_with(NS_PREFIX) || key == KIND || key == NS || key == NEVER)
}

/// Keys a user's label map may contribute to an identity (see the module docs).
pub fn is_user_key(key: &str) -> bool {
    !key.starts_with('@') && !key.starts_with(NS_PREFIX) && !key.starts_with(SA_PREFIX)
}

/// What an identity is: equal keys, one identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IdentityKey {
    /// Own labels as the index sees them (projected labels, `sa:` labels, pseudo labels).
    pub labels: Vec<(Arc<str>, Arc<str>)>,
    /// Named container ports: (name, protocol, port), sorted.
    pub ports: Vec<(Arc<str>, u8, u16)>,
    /// Calico profiles, in the endpoint's order.
    pub profiles: Vec<Arc<str>>,
}

impl IdentityKey {
    pub fn label_map(&self) -> LabelMap {
        self.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    pub fn namespace(&self) -> Option<&str> {
        self.labels.iter().find(|(k, _)| &**k == NS).map(|(_, v)| &**v)
    }

    pub fn kind(&self) -> &str {
        self.labels.iter().find(|(k, _)| &**k == KIND).map_or("", |(_, v)| &**v)
    }
}

fn never() -> Node {
    Node::Has(NEVER.into())
}

/// The kind condition, as the kinds it excludes: a `NotIn` is never what the label index files a
/// selector under, so a selector is indexed by its real labels (`app == 'x'`), not by a kind
/// that nearly every identity shares.
fn kinds_node(kinds: &BTreeSet<&str>) -> Node {
    if kinds.is_empty() {
        return never();
    }
    let excluded: BTreeSet<String> = [KIND_POD, KIND_HOST, KIND_HOSTNET, KIND_NETWORKSET]
        .into_iter()
        .filter(|k| !kinds.contains(k))
        .map(str::to_string)
        .collect();
    Node::NotIn(KIND.into(), excluded)
}

fn and(terms: Vec<Node>) -> Node {
    let mut flat = Vec::new();
    for t in terms {
        match t {
            Node::All => {}
            Node::And(ns) => flat.extend(ns),
            t => flat.push(t),
        }
    }
    match flat.len() {
        0 => Node::All,
        1 => flat.pop().expect("one term"),
        _ => Node::And(flat),
    }
}

/// Parses selector text (the spec carries canonical forms), naming where it came from.
pub fn parse(text: &str, context: &str) -> Result<Selector, EngineError> {
    Selector::parse(text).map_err(|error| EngineError::Selector { context: context.to_string(), error })
}

/// The composite selector of a policy subject (docs/architecture.md §3: which endpoints a policy applies
/// to). Host-network pods and network sets are never subjects.
pub fn subject_selector(s: &SubjectSpec, context: &str) -> Result<Selector, EngineError> {
    let mut terms = vec![parse(&s.selector, context)?.into_node()];
    let mut kinds = BTreeSet::new();
    for k in &s.endpoint_kinds {
        match k.as_str() {
            "pod" => kinds.insert(KIND_POD),
            "host" => kinds.insert(KIND_HOST),
            "networkset" => false,
            other => return Err(EngineError::Spec(format!("{context}: unknown endpoint kind {other:?}"))),
        };
    }
    terms.push(kinds_node(&kinds));
    if let Some(ns) = &s.namespace {
        terms.push(Node::Eq(NS.into(), ns.clone()));
    }
    if let Some(text) = &s.namespace_selector {
        terms.push(Node::Has(NS.into()));
        terms.push(parse(text, context)?.with_key_prefix(NS_PREFIX).into_node());
    }
    if let Some(text) = &s.service_account_selector {
        terms.push(parse(text, context)?.with_key_prefix(SA_PREFIX).into_node());
    }
    Ok(Selector::from_node(and(terms)))
}

/// Whether a rule peer has a positive label condition (else it matches any address as far as
/// labels go; its `notSelector`, if any, only excludes).
pub fn needs_labels(e: &EntitySpec) -> bool {
    e.selector.is_some()
        || e.endpoint_kinds.is_some()
        || e.namespace.is_some()
        || e.namespace_selector.is_some()
        || is_relative(e)
        || e.service_account_names.is_some()
        || e.service_account_selector.is_some()
}

/// Whether a rule peer's label condition depends on the subject's namespace (ANP `related`,
/// `sameLabels`, `notSameLabels`).
pub fn is_relative(e: &EntitySpec) -> bool {
    e.namespace_relation.is_some() || !e.same_labels.is_empty() || !e.not_same_labels.is_empty()
}

/// Whether network sets containing the address can satisfy the peer's label condition: only
/// through a `selector`, and only if the peer's kinds include network sets.
pub fn netsets_allowed(e: &EntitySpec) -> bool {
    e.selector.is_some() && e.endpoint_kinds.as_ref().is_none_or(|ks| ks.iter().any(|k| k == "networkset"))
}

/// The kinds a peer's `endpoint_kinds` names (None: `default`), as `@kind` values.
fn entity_kinds<'a>(e: &EntitySpec, default: &[&'a str], context: &str) -> Result<BTreeSet<&'a str>, EngineError> {
    let mut kinds = BTreeSet::new();
    match &e.endpoint_kinds {
        None => kinds.extend(default.iter().copied()),
        Some(ks) => {
            for k in ks {
                match k.as_str() {
                    "pod" => kinds.insert(KIND_POD),
                    "host" => kinds.insert(KIND_HOST),
                    "networkset" => kinds.insert(KIND_NETWORKSET),
                    other => return Err(EngineError::Spec(format!("{context}: unknown endpoint kind {other:?}"))),
                };
            }
        }
    }
    Ok(kinds)
}

/// The selector of a rule peer's `notSelector`: what it excludes. An address is excluded when
/// its endpoint or any network set containing it (of any namespace: felix does not scope a
/// `notSelector`) is in this selector's set; kinds as the peer's `endpoint_kinds` allow, pods
/// (not host-network ones), host endpoints and network sets when it names none.
pub fn not_selector(e: &EntitySpec, context: &str) -> Result<Option<Selector>, EngineError> {
    let Some(text) = &e.not_selector else { return Ok(None) };
    let kinds = entity_kinds(e, &[KIND_POD, KIND_HOST, KIND_NETWORKSET], context)?;
    Ok(Some(Selector::from_node(and(vec![parse(text, context)?.into_node(), kinds_node(&kinds)]))))
}

/// The composite selector of a rule peer's positive label conditions (all but `notSelector`),
/// without the relative part.
pub fn entity_selector(e: &EntitySpec, context: &str) -> Result<Selector, EngineError> {
    let mut terms = Vec::new();
    if let Some(text) = &e.selector {
        terms.push(parse(text, context)?.into_node());
    }
    if let Some(ns) = &e.namespace {
        terms.push(Node::Eq(NS.into(), ns.clone()));
    }
    if let Some(text) = &e.namespace_selector {
        let sel = parse(text, context)?;
        if sel.is_global() {
            // global(): only cluster-scoped things (host endpoints, global network sets)
            terms.push(Node::Not(Box::new(Node::Has(NS.into()))));
        } else {
            terms.push(Node::Has(NS.into()));
            terms.push(sel.with_key_prefix(NS_PREFIX).into_node());
        }
    }
    if let Some(names) = &e.service_account_names {
        terms.push(Node::In(SA.into(), names.iter().cloned().collect()));
    }
    if let Some(text) = &e.service_account_selector {
        // a network set has no service account: never; an endpoint without one has no labels
        terms.push(Node::Ne(KIND.into(), KIND_NETWORKSET.into()));
        terms.push(parse(text, context)?.with_key_prefix(SA_PREFIX).into_node());
    }
    let mut kinds = entity_kinds(e, &[KIND_POD, KIND_HOST], context)?;
    if netsets_allowed(e) {
        kinds.insert(KIND_NETWORKSET);
    } else {
        kinds.remove(KIND_NETWORKSET);
    }
    terms.push(kinds_node(&kinds));
    Ok(Selector::from_node(and(terms)))
}

/// The relative part of a rule peer for subjects in namespace `subject_ns` (None: a
/// cluster-scoped subject) whose namespace labels are `mine`, ANDed onto `base`.
pub fn relative_selector(
    base: &Selector,
    e: &EntitySpec,
    subject_ns: Option<&str>,
    mine: &LabelMap,
) -> Result<Selector, EngineError> {
    let mut terms = vec![base.root().clone()];
    match e.namespace_relation.as_deref() {
        None => {}
        Some("Self") => terms.push(match subject_ns {
            Some(ns) => Node::Eq(NS.into(), ns.into()),
            None => never(),
        }),
        Some("NotSelf") => {
            if let Some(ns) = subject_ns {
                terms.push(Node::Ne(NS.into(), ns.into()));
            }
        }
        Some(other) => return Err(EngineError::Spec(format!("unknown namespace relation {other:?}"))),
    }
    if !e.same_labels.is_empty() || !e.not_same_labels.is_empty() {
        terms.push(Node::Has(NS.into()));
        for key in &e.same_labels {
            terms.push(match mine.get(key) {
                Some(v) => Node::Eq(format!("{NS_PREFIX}{key}"), v.clone()),
                None => never(),
            });
        }
        for key in &e.not_same_labels {
            terms.push(match mine.get(key) {
                Some(v) => Node::Ne(format!("{NS_PREFIX}{key}"), v.clone()),
                None => Node::Has(format!("{NS_PREFIX}{key}")),
            });
        }
    }
    Ok(Selector::from_node(and(terms)))
}

/// The labels of a namespace as selectors see them: the given ones, or for a namespace with no
/// manifest the label the API server always sets; Calico's name label added.
pub fn namespace_labels(name: &str, given: Option<&LabelMap>) -> LabelMap {
    let mut labels = given.cloned().unwrap_or_else(|| {
        let mut m = LabelMap::new();
        m.insert("kubernetes.io/metadata.name".into(), name.into());
        m
    });
    labels.entry("projectcalico.org/name".into()).or_insert_with(|| name.into());
    labels
}
