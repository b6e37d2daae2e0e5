//! The engine's input: the IR and inventory as `pyclassify.engine.engine_spec` writes them (JSON).
//! Field names and meanings follow `pyclassify/ir.py` and `pyclassify/inventory.py`.

use std::collections::BTreeMap;

use serde::Deserialize;

pub type LabelMap = BTreeMap<String, String>;

#[derive(Debug, Deserialize)]
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

#[derive(Debug, Deserialize)]
pub struct EndpointSpec {
    pub kind: String, // "pod" | "host"
    pub namespace: Option<String>,
    pub labels: LabelMap,     // as policy sees them (Calico's added labels included)
    pub raw_labels: LabelMap, // as written (Service selectors match these)
    pub sa_labels: LabelMap,
    pub service_account: Option<String>,
    pub ips: Vec<String>,
    pub ports: Vec<ContainerPortSpec>,
    pub host_network: bool,
    pub profiles: Vec<String>,
    /// False for endpoints named in flows but not in the inventory: their IPs do not resolve.
    #[serde(default = "yes")]
    pub addressable: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
pub struct ContainerPortSpec {
    pub name: Option<String>,
    pub protocol: u8,
    pub port: u16,
}

#[derive(Debug, Deserialize)]
pub struct NetworkSetSpec {
    pub namespace: Option<String>,
    pub labels: LabelMap,
    pub nets: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct NodeSpec {
    pub labels: LabelMap,
    pub addresses: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct ServiceSpec {
    pub namespace: String,
    pub name: String,
    pub selector: Option<LabelMap>,
    pub ips: Vec<String>,
    pub ports: Vec<ServicePortSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum TargetPort {
    Number(u16),
    Name(String),
}

#[derive(Debug, Deserialize)]
pub struct ServicePortSpec {
    pub port: u16,
    pub protocol: u8,
    pub target_port: Option<TargetPort>,
}

#[derive(Debug, Deserialize)]
pub struct TierSpec {
    pub name: String,
    pub default_action: String,
}

#[derive(Debug, Deserialize)]
pub struct SubjectSpec {
    pub selector: String,
    pub endpoint_kinds: Vec<String>,
    pub namespace: Option<String>,
    pub namespace_selector: Option<String>,
    pub service_account_selector: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct PolicySpec {
    pub tier: String,
    pub types: Vec<String>,
    pub subject: SubjectSpec,
    pub ingress: Vec<RuleSpec>,
    pub egress: Vec<RuleSpec>,
}

#[derive(Debug, Deserialize)]
pub struct ProfileSpec {
    pub name: String,
    pub ingress: Vec<RuleSpec>,
    pub egress: Vec<RuleSpec>,
}

#[derive(Debug, Deserialize)]
pub struct IcmpSpec {
    #[serde(rename = "type")]
    pub icmp_type: Option<u8>,
    pub code: Option<u8>,
}

#[derive(Debug, Deserialize)]
pub struct RuleSpec {
    pub action: String,
    pub ip_version: Option<u8>,
    pub protocols: Option<Vec<u8>>,
    pub not_protocols: Vec<u8>,
    pub icmp: Option<IcmpSpec>,
    pub not_icmp: Option<IcmpSpec>,
    pub sources: Vec<EntitySpec>,
    pub destinations: Vec<EntitySpec>,
}

#[derive(Debug, Deserialize)]
pub struct PortSpec {
    pub protocol: Option<u8>,
    pub first: Option<u16>,
    pub last: Option<u16>,
    pub name: Option<String>,
}

#[derive(Debug, Deserialize)]
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
    pub has_domains: bool,
    pub ports: Vec<PortSpec>,
    pub not_ports: Vec<PortSpec>,
    pub unresolvable: bool,
}
