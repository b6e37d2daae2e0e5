//! The engine's input: the IR and inventory as `pyclassify.engine` writes them (JSON). Field
//! names and meanings follow `pyclassify/ir.py` and `pyclassify/inventory.py`.
//!
//! Two shapes: a [`Delta`] (objects added or changed, by id, and ids removed: what
//! [`super::Model::apply`] takes), and the whole-world [`Spec`] (every object once, ids by
//! position: what the benchmarks read, and what [`Spec::into_delta`] turns into a delta).
//!
//! Every struct refuses a field it does not declare, and an error names the path of the field
//! it is about. The Python side, `pyclassify/engine_spec.py`, is generated from these types
//! ([`super::spec_py`]).

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer};

pub type LabelMap = BTreeMap<String, String>;

#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Spec {
    pub namespaces: BTreeMap<String, LabelMap>,
    pub endpoints: Vec<EndpointSpec>,
    pub network_sets: Vec<NetworkSetSpec>,
    pub nodes: Vec<NodeSpec>,
    pub services: Vec<ServiceSpec>,
    pub tiers: Vec<TierSpec>,
    pub policies: Vec<PolicySpec>,
    pub profiles: Vec<ProfileSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EndpointSpec {
    /// Stable id given by the caller (position in a whole-world spec).
    #[serde(default)]
    pub id: u32,
    /// Its name (with the namespace, the order among endpoints sharing an address).
    #[serde(default)]
    pub name: String,
    pub kind: String, // "pod" | "host"
    pub namespace: Option<String>,
    /// As policy sees them (Calico's added labels included); when absent, derived from
    /// `raw_labels` by [`EndpointSpec::policy_labels`].
    #[serde(default)]
    pub labels: Option<LabelMap>,
    /// As written (Service selectors match these).
    pub raw_labels: LabelMap,
    pub sa_labels: LabelMap,
    pub service_account: Option<String>,
    pub ips: Vec<String>,
    pub ports: Vec<ContainerPortSpec>,
    pub host_network: bool,
    pub profiles: Vec<String>,
    /// False for endpoints named in flows but not in the inventory: their IPs do not resolve.
    #[serde(default = "yes")]
    pub addressable: bool,
    /// False for another node's endpoints when enforcing for one node (`enforce --node`):
    /// selectors still see them as peers, but their own policy is that node's to enforce.
    #[serde(default = "yes")]
    pub enforced: bool,
}

fn yes() -> bool {
    true
}

impl EndpointSpec {
    /// The labels policy sees: the given ones, or the written ones plus the labels Calico adds
    /// to every workload endpoint (`pyclassify.flow.endpoint_labels`).
    pub fn policy_labels(&self) -> std::borrow::Cow<'_, LabelMap> {
        use std::borrow::Cow;
        if let Some(l) = &self.labels {
            return Cow::Borrowed(l);
        }
        if self.kind != "pod" {
            return Cow::Borrowed(&self.raw_labels);
        }
        let mut l = self.raw_labels.clone();
        l.entry("projectcalico.org/orchestrator".into()).or_insert_with(|| "k8s".into());
        if let Some(ns) = &self.namespace {
            l.entry("projectcalico.org/namespace".into()).or_insert_with(|| ns.clone());
        }
        if let Some(sa) = &self.service_account {
            l.entry("projectcalico.org/serviceaccount".into()).or_insert_with(|| sa.clone());
        }
        Cow::Owned(l)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ContainerPortSpec {
    pub name: Option<String>,
    pub protocol: u8,
    pub port: u16,
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NetworkSetSpec {
    #[serde(default)]
    pub id: u32,
    pub namespace: Option<String>,
    pub labels: LabelMap,
    pub nets: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    #[serde(default)]
    pub id: u32,
    pub labels: LabelMap,
    pub addresses: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    #[serde(default)]
    pub id: u32,
    pub namespace: String,
    pub name: String,
    pub selector: Option<LabelMap>,
    pub ips: Vec<String>,
    pub ports: Vec<ServicePortSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum TargetPort {
    Number(u16),
    Name(String),
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ServicePortSpec {
    pub port: u16,
    pub protocol: u8,
    pub target_port: Option<TargetPort>,
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TierSpec {
    #[serde(default)]
    pub id: u32,
    pub name: String,
    /// Tier order (None: after every ordered tier); tiers are evaluated by (order, name).
    #[serde(default)]
    pub order: Option<f64>,
    pub default_action: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SubjectSpec {
    /// Shared by the policies of one subject (the model holds it once, `Model::intern`).
    pub selector: Arc<str>,
    pub endpoint_kinds: Vec<String>,
    pub namespace: Option<String>,
    pub namespace_selector: Option<String>,
    pub service_account_selector: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    #[serde(default)]
    pub id: u32,
    /// The sort key within the tier (docs/architecture.md §3, felix's policy_sorter): order (None last),
    /// then kind, namespace, name.
    #[serde(default)]
    pub order: Option<f64>,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: String,
    pub tier: String,
    pub types: Vec<String>,
    pub subject: SubjectSpec,
    pub ingress: RuleSpecs,
    pub egress: RuleSpecs,
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    #[serde(default)]
    pub id: u32,
    pub name: String,
    pub ingress: RuleSpecs,
    pub egress: RuleSpecs,
}

/// The rules of one direction of a policy or profile. On the wire, the rules themselves or the
/// position of a list in the delta's `rule_lists`: policies with equal rules (one allow-list
/// pasted into a policy per namespace) send them once. [`Delta::from_json`] resolves every
/// position, so the policies naming one list hold one copy (`Listed` never reaches the model:
/// [`Delta::unresolved`] finds one, and the model refuses such a delta).
#[derive(Debug, Clone)]
pub enum RuleSpecs {
    Rules(Arc<[RuleSpec]>),
    Listed(u32),
}

impl Default for RuleSpecs {
    fn default() -> Self {
        RuleSpecs::Rules(Arc::from(Vec::new()))
    }
}

impl From<Vec<RuleSpec>> for RuleSpecs {
    fn from(rules: Vec<RuleSpec>) -> Self {
        RuleSpecs::Rules(Arc::from(rules))
    }
}

impl Deref for RuleSpecs {
    type Target = [RuleSpec];

    /// The rules (none for an unresolved position, which the model refuses before reading).
    fn deref(&self) -> &[RuleSpec] {
        match self {
            RuleSpecs::Rules(r) => r,
            RuleSpecs::Listed(_) => &[],
        }
    }
}

impl RuleSpecs {
    /// The shared list, when resolved.
    pub fn shared(&self) -> Option<&Arc<[RuleSpec]>> {
        match self {
            RuleSpecs::Rules(r) => Some(r),
            RuleSpecs::Listed(_) => None,
        }
    }

    fn resolve(&mut self, lists: &[Arc<[RuleSpec]>]) -> Result<(), super::EngineError> {
        if let RuleSpecs::Listed(i) = *self {
            let list = lists.get(i as usize).ok_or_else(|| {
                super::EngineError::Spec(format!("rule list {i} named, but the delta has {} rule lists", lists.len()))
            })?;
            *self = RuleSpecs::Rules(list.clone());
        }
        Ok(())
    }
}

/// On the wire: the rules, or the position of one of the delta's `rule_lists`.
#[cfg(feature = "bench")]
impl schemars::JsonSchema for RuleSpecs {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RuleSpecs".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let rules = generator.subschema_for::<Vec<RuleSpec>>();
        schemars::json_schema!({ "anyOf": [rules, { "type": "integer", "format": "uint32", "minimum": 0 }] })
    }
}

impl<'de> Deserialize<'de> for RuleSpecs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Wire;
        impl<'de> serde::de::Visitor<'de> for Wire {
            type Value = RuleSpecs;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of rules or the position of one of the delta's rule_lists")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<RuleSpecs, A::Error> {
                let rules = Vec::<RuleSpec>::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
                Ok(rules.into())
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RuleSpecs, E> {
                u32::try_from(v).map(RuleSpecs::Listed).map_err(|_| E::custom(format!("rule list {v} out of range")))
            }
        }
        deserializer.deserialize_any(Wire)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct IcmpSpec {
    #[serde(rename = "type")]
    pub icmp_type: Option<u8>,
    pub code: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub action: String,
    pub ip_version: Option<u8>,
    pub protocols: Option<Vec<u8>>,
    pub not_protocols: Vec<u8>,
    pub icmp: Option<IcmpSpec>,
    pub not_icmp: Option<IcmpSpec>,
    pub sources: Vec<EntitySpec>,
    pub destinations: Vec<EntitySpec>,
    /// Calico's `http` match (`Rule.http`): the connection's request must match.
    #[serde(default)]
    pub http: Option<HttpSpec>,
}

/// `HttpMatch` of `pyclassify/ir.py`: methods, and paths as `["exact"|"prefix", path]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct HttpSpec {
    pub methods: Vec<String>,
    pub paths: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PortSpec {
    pub protocol: Option<u8>,
    pub first: Option<u16>,
    pub last: Option<u16>,
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EntitySpec {
    pub nets: Vec<String>,
    pub not_nets: Vec<String>,
    pub selector: Option<String>,
    pub not_selector: Option<String>,
    pub endpoint_kinds: Option<Vec<String>>,
    pub namespace: Option<String>,
    pub namespace_selector: Option<String>,
    pub namespace_relation: Option<String>,
    pub same_labels: Vec<String>,
    pub not_same_labels: Vec<String>,
    pub service_account_names: Option<Vec<String>>,
    pub service_account_selector: Option<String>,
    pub service: Option<(String, String)>,
    pub node_selector: Option<String>,
    /// Calico `domains`, ANP `domainNames`: the addresses learned from DNS for these names.
    #[serde(default)]
    pub domains: Vec<String>,
    pub ports: Vec<PortSpec>,
    pub not_ports: Vec<PortSpec>,
    pub unresolvable: bool,
}

/// A namespace and its labels (as policy sees them: `pyclassify.reference.namespace_labels`).
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NamespaceSpec {
    pub name: String,
    pub labels: LabelMap,
}

/// One atomic change: objects added or replaced (by id) and ids removed. `tiers`, when given,
/// replaces the whole tier list (tiers are few and their order is global).
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "bench", derive(schemars::JsonSchema))]
#[serde(default, deny_unknown_fields)]
pub struct Delta {
    pub namespaces: Vec<NamespaceSpec>,
    pub remove_namespaces: Vec<String>,
    pub endpoints: Vec<EndpointSpec>,
    pub remove_endpoints: Vec<u32>,
    pub network_sets: Vec<NetworkSetSpec>,
    pub remove_network_sets: Vec<u32>,
    pub nodes: Vec<NodeSpec>,
    pub remove_nodes: Vec<u32>,
    pub services: Vec<ServiceSpec>,
    pub remove_services: Vec<u32>,
    pub tiers: Option<Vec<TierSpec>>,
    pub policies: Vec<PolicySpec>,
    pub remove_policies: Vec<u32>,
    pub profiles: Vec<ProfileSpec>,
    pub remove_profiles: Vec<u32>,
    /// Rule lists the policies and profiles of this delta name by position (`RuleSpecs`).
    pub rule_lists: Vec<Vec<RuleSpec>>,
}

/// Reads a spec or delta; an error names the path of the field it is about (`endpoints[3].namspace:
/// unknown field ...`), so a misspelt or unknown key is refused rather than taking its default.
fn parse<'de, T: Deserialize<'de>, R: serde_json::de::Read<'de>>(
    de: &mut serde_json::Deserializer<R>,
) -> Result<T, super::EngineError> {
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        super::EngineError::Spec(if path == "." { inner.to_string() } else { format!("{path}: {inner}") })
    })?;
    de.end().map_err(|e| super::EngineError::Spec(e.to_string()))?;
    Ok(value)
}

impl Delta {
    /// A delta from its JSON, every rule list position resolved (an unknown one is an error).
    pub fn from_json(text: &[u8]) -> Result<Delta, super::EngineError> {
        let mut delta: Delta = parse(&mut serde_json::Deserializer::from_slice(text))?;
        let lists: Vec<Arc<[RuleSpec]>> = std::mem::take(&mut delta.rule_lists).into_iter().map(Arc::from).collect();
        for p in &mut delta.policies {
            p.ingress.resolve(&lists)?;
            p.egress.resolve(&lists)?;
        }
        for p in &mut delta.profiles {
            p.ingress.resolve(&lists)?;
            p.egress.resolve(&lists)?;
        }
        Ok(delta)
    }

    /// A policy or profile whose rules are still a list position (only a delta built by hand,
    /// not read by `from_json`, can have one).
    pub fn unresolved(&self) -> Option<String> {
        let listed = |r: &RuleSpecs| matches!(r, RuleSpecs::Listed(_));
        self.policies
            .iter()
            .find(|p| listed(&p.ingress) || listed(&p.egress))
            .map(|p| format!("policy {} ({}) names a rule list that is not in the delta", p.id, p.name))
            .or_else(|| {
                self.profiles
                    .iter()
                    .find(|p| listed(&p.ingress) || listed(&p.egress))
                    .map(|p| format!("profile {} names a rule list that is not in the delta", p.name))
            })
    }

    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
            && self.remove_namespaces.is_empty()
            && self.endpoints.is_empty()
            && self.remove_endpoints.is_empty()
            && self.network_sets.is_empty()
            && self.remove_network_sets.is_empty()
            && self.nodes.is_empty()
            && self.remove_nodes.is_empty()
            && self.services.is_empty()
            && self.remove_services.is_empty()
            && self.tiers.is_none()
            && self.policies.is_empty()
            && self.remove_policies.is_empty()
            && self.profiles.is_empty()
            && self.remove_profiles.is_empty()
    }
}

impl Spec {
    pub fn from_json(text: &str) -> Result<Spec, super::EngineError> {
        parse(&mut serde_json::Deserializer::from_str(text))
    }

    /// The whole world as one delta onto an empty model: ids are positions, tiers ordered as
    /// listed and policies as listed (a whole-world spec lists both in evaluation order).
    pub fn into_delta(self) -> Delta {
        let number = |i: usize| i as u32;
        Delta {
            namespaces: self.namespaces.into_iter().map(|(name, labels)| NamespaceSpec { name, labels }).collect(),
            endpoints: self
                .endpoints
                .into_iter()
                .enumerate()
                .map(|(i, e)| EndpointSpec { id: number(i), ..e })
                .collect(),
            network_sets: self
                .network_sets
                .into_iter()
                .enumerate()
                .map(|(i, n)| NetworkSetSpec { id: number(i), ..n })
                .collect(),
            nodes: self.nodes.into_iter().enumerate().map(|(i, n)| NodeSpec { id: number(i), ..n }).collect(),
            services: self.services.into_iter().enumerate().map(|(i, s)| ServiceSpec { id: number(i), ..s }).collect(),
            tiers: Some(
                self.tiers
                    .into_iter()
                    .enumerate()
                    .map(|(i, t)| TierSpec { id: number(i), order: Some(i as f64), ..t })
                    .collect(),
            ),
            policies: self
                .policies
                .into_iter()
                .enumerate()
                .map(|(i, p)| PolicySpec { id: number(i), order: Some(i as f64), ..p })
                .collect(),
            profiles: self.profiles.into_iter().enumerate().map(|(i, p)| ProfileSpec { id: number(i), ..p }).collect(),
            ..Delta::default()
        }
    }
}
