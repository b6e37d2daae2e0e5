//! Deterministic engine specs for tests and benchmarks: small random worlds that use every field
//! of the spec (the compiled-vs-interpreter differential test), and a policy-shaped workload
//! (pods in namespaces, NetworkPolicy, Calico tiers with Pass/Log, ANP/BANP) for the benchmarks.
//! Both are JSON values in the format `pyclassify.engine.engine_spec` writes.

use serde_json::{json, Value};

use super::{Addr, Flow, FlowEnd};

/// SplitMix64: small, deterministic, good enough for workloads.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn entity() -> Value {
    json!({
        "nets": [], "not_nets": [], "selector": null, "not_selector": null, "endpoint_kinds": null,
        "namespace": null, "namespace_selector": null, "namespace_relation": null, "same_labels": [],
        "not_same_labels": [], "service_account_names": null, "service_account_selector": null,
        "service": null, "node_selector": null, "domains": [], "ports": [], "not_ports": [],
        "unresolvable": false
    })
}

fn rule(action: &str) -> Value {
    json!({
        "action": action, "ip_version": null, "protocols": null, "not_protocols": [], "icmp": null,
        "not_icmp": null, "sources": [], "destinations": []
    })
}

fn port_range(protocol: Option<u8>, first: u16, last: u16) -> Value {
    json!({"protocol": protocol, "first": first, "last": last, "name": null})
}

fn named_port(protocol: Option<u8>, name: &str) -> Value {
    json!({"protocol": protocol, "first": null, "last": null, "name": name})
}

const NAMESPACES: [&str; 3] = ["a", "b", "c"];
const ADDRS: [&str; 11] = [
    "10.0.0.1",
    "10.0.0.2",
    "10.0.0.3",
    "10.0.0.4",
    "10.0.0.5",
    "10.0.0.6",
    "10.0.0.7",
    "10.0.0.8",
    "fd00::1",
    "fd00::2",
    "192.168.9.9",
];
const OUTSIDE: [&str; 2] = ["203.0.113.5", "2001:db8::5"];
const NETS: [&str; 9] = [
    "10.0.0.0/29",
    "10.0.0.4/30",
    "10.0.0.0/8",
    "0.0.0.0/0",
    "fd00::/64",
    "::/0",
    "10.0.0.1/32",
    "10.0.0.0/30",
    "203.0.113.0/24",
];
const SELECTORS: [&str; 7] =
    ["all()", "app == 'x'", "app in {'x','y'}", "has(tier)", "!has(app)", "tier != 'db'", "role == 'lb'"];
const NS_SELECTORS: [&str; 5] =
    ["all()", "team == 'red'", "has(team)", "global()", "kubernetes.io/metadata.name == 'a'"];
const PORT_NAMES: [&str; 3] = ["http", "dns", "metrics"];
const PROTOCOLS: [u8; 7] = [6, 17, 1, 58, 132, 136, 47];
const PORTS: [u16; 7] = [53, 80, 443, 1000, 8080, 9090, 40000];

fn labels(r: &mut Rng) -> Value {
    let mut m = serde_json::Map::new();
    for _ in 0..r.below(3) {
        let k = *r.pick(&["app", "tier", "role"]);
        let v = *r.pick(&["x", "y", "db", "lb"]);
        m.insert(k.into(), v.into());
    }
    Value::Object(m)
}

fn random_ports(r: &mut Rng) -> Value {
    let mut v = Vec::new();
    for _ in 0..1 + r.below(2) {
        let proto = *r.pick(&[None, Some(6u8), Some(17), Some(132)]);
        v.push(match r.below(3) {
            0 => json!({"protocol": proto, "first": null, "last": null, "name": null}),
            1 => named_port(proto, r.pick::<&str>(&PORT_NAMES)),
            _ => {
                let first = *r.pick(&[53u16, 80, 443, 1000, 8080]);
                port_range(proto, first, first.saturating_add(*r.pick(&[0u16, 1, 100, 10000])))
            }
        });
    }
    Value::Array(v)
}

fn random_entity(r: &mut Rng) -> Value {
    let mut e = entity();
    if r.chance(8) {
        // A Calico notSelector-only peer (in a namespaced policy: scoped to its namespace); it
        // matches addresses nothing owns.
        e["not_selector"] = json!(r.pick(&SELECTORS));
        if r.chance(40) {
            e["namespace"] = json!(r.pick(&NAMESPACES));
        }
        return e;
    }
    for _ in 0..r.below(3) {
        match r.below(18) {
            0 => e["nets"] = json!([r.pick(&NETS), r.pick(&NETS)]),
            1 => e["not_nets"] = json!([r.pick(&NETS)]),
            2 => e["selector"] = json!(r.pick(&SELECTORS)),
            3 => e["not_selector"] = json!(r.pick(&SELECTORS)),
            4 => {
                e["endpoint_kinds"] =
                    json!(r.pick(&[vec!["pod"], vec!["host"], vec!["networkset"], vec!["host", "pod"]]))
            }
            5 => e["namespace"] = json!(r.pick(&NAMESPACES)),
            6 => e["namespace_selector"] = json!(r.pick(&NS_SELECTORS)),
            7 => e["namespace_relation"] = json!(r.pick(&["Self", "NotSelf"])),
            8 => e["same_labels"] = json!(["team"]),
            9 => e["not_same_labels"] = json!(["team"]),
            10 => e["service_account_names"] = json!(r.pick(&[vec!["default"], vec!["web"], vec!["default", "web"]])),
            11 => e["service_account_selector"] = json!(r.pick(&["all()", "trusted == 'yes'"])),
            12 => e["service"] = json!(["a", r.pick(&["svc", "missing"])]),
            13 => e["node_selector"] = json!(r.pick(&["all()", "zone == 'z1'"])),
            14 => e["domains"] = json!(r.pick(&[vec!["example.com"], vec!["*.example.org", "example.com"]])),
            15 => e["ports"] = random_ports(r),
            16 => e["not_ports"] = random_ports(r),
            _ => e["unresolvable"] = json!(r.chance(50)),
        }
    }
    e
}

fn random_icmp(r: &mut Rng) -> Value {
    if r.chance(70) {
        return Value::Null;
    }
    json!({"type": r.pick(&[None, Some(0u8), Some(3), Some(8)]), "code": r.pick(&[None, Some(0u8), Some(1)])})
}

fn random_rule(r: &mut Rng) -> Value {
    let mut x = rule(r.pick::<&str>(&["Allow", "Deny", "Pass", "Log"]));
    x["ip_version"] = json!(r.pick(&[None, None, Some(4u8), Some(6)]));
    if r.chance(40) {
        let mut ps: Vec<u8> = (0..1 + r.below(2)).map(|_| *r.pick(&PROTOCOLS)).collect();
        ps.sort();
        ps.dedup();
        x["protocols"] = json!(ps);
    }
    if r.chance(20) {
        x["not_protocols"] = json!([r.pick(&PROTOCOLS)]);
    }
    x["icmp"] = random_icmp(r);
    x["not_icmp"] = random_icmp(r);
    x["sources"] = Value::Array((0..r.below(3)).map(|_| random_entity(r)).collect());
    x["destinations"] = Value::Array((0..r.below(3)).map(|_| random_entity(r)).collect());
    x
}

fn rules(r: &mut Rng, n: usize) -> Value {
    Value::Array((0..1 + r.below(n)).map(|_| random_rule(r)).collect())
}

/// A small random world using every field of the spec (the shape of the Python differential
/// test's worlds), for the compiled-vs-interpreter test.
pub fn random_spec(seed: u64) -> Value {
    let r = &mut Rng::new(seed);
    let namespaces: serde_json::Map<String, Value> = NAMESPACES
        .iter()
        .map(|n| {
            let mut l = json!({"kubernetes.io/metadata.name": n, "projectcalico.org/name": n});
            if let Some(team) = r.pick(&[None, Some("red"), Some("blue")]) {
                l["team"] = json!(team);
            }
            (n.to_string(), l)
        })
        .collect();
    let mut endpoints = Vec::new();
    for _ in 0..2 + r.below(7) {
        let host = r.below(6) == 0;
        let mut ips: Vec<&str> = (0..r.below(4).min(2)).map(|_| *r.pick(&ADDRS)).collect();
        ips.dedup();
        let ports: Vec<Value> = (0..r.below(3))
            .map(|_| {
                json!({"name": r.pick(&[None, Some("http"), Some("dns"), Some("metrics")]),
                       "protocol": r.pick(&[6u8, 17]), "port": r.pick(&[53u16, 80, 8080, 9090])})
            })
            .collect();
        let sa = if host { None } else { *r.pick(&[None, Some("default"), Some("web")]) };
        let ns = if host { None } else { Some(*r.pick(&NAMESPACES)) };
        endpoints.push(json!({
            "kind": if host { "host" } else { "pod" },
            "namespace": ns,
            "labels": labels(r),
            "raw_labels": labels(r),
            "sa_labels": if sa == Some("web") && ns == Some("a") { json!({"trusted": "yes"}) } else { json!({}) },
            "service_account": sa,
            "ips": ips,
            "ports": ports,
            "host_network": !host && r.below(7) == 0,
            "profiles": (0..r.below(3)).map(|_| *r.pick(&["prof", "nope"])).collect::<Vec<_>>(),
            "addressable": r.below(10) != 0,
        }));
    }
    let network_sets: Vec<Value> = (0..r.below(3))
        .map(|_| json!({"namespace": r.pick(&[None, Some("a")]), "labels": labels(r), "nets": [r.pick(&NETS), r.pick(&NETS)]}))
        .collect();
    let tiers = json!([
        {"name": "kube-admin", "default_action": "Pass"},
        {"name": "security", "default_action": *r.pick(&["Deny", "Pass"])},
        {"name": "default", "default_action": "Deny"},
        {"name": "kube-baseline", "default_action": "Pass"},
    ]);
    let mut policies = Vec::new();
    for _ in 0..1 + r.below(7) {
        let types = r.pick(&[vec!["ingress"], vec!["egress"], vec!["egress", "ingress"]]).clone();
        policies.push(json!({
            "tier": r.pick(&["kube-admin", "security", "default", "kube-baseline"]),
            "types": types,
            "subject": {
                "selector": if r.chance(40) { "all()" } else { *r.pick(&SELECTORS) },
                "endpoint_kinds": r.pick(&[vec!["pod"], vec!["host"], vec!["host", "pod"]]),
                "namespace": r.pick(&[None, None, Some("a"), Some("b"), Some("c")]),
                "namespace_selector": r.pick(&[None, None, Some("all()"), Some("team == 'red'"), Some("has(team)")]),
                "service_account_selector": r.pick(&[None, None, Some("trusted == 'yes'")]),
            },
            "ingress": rules(r, 3),
            "egress": rules(r, 3),
        }));
    }
    // Tiers in order, as pyclassify sorts them.
    let order = ["kube-admin", "security", "default", "kube-baseline"];
    policies.sort_by_key(|p| order.iter().position(|t| p["tier"] == json!(t)));
    let profiles =
        if r.chance(50) { json!([{"name": "prof", "ingress": rules(r, 3), "egress": rules(r, 3)}]) } else { json!([]) };
    json!({
        "namespaces": namespaces,
        "endpoints": endpoints,
        "network_sets": network_sets,
        "nodes": [{"labels": {"zone": "z1"}, "addresses": ["10.0.0.7"]}],
        "services": [{"namespace": "a", "name": "svc", "selector": r.pick(&[None, Some(json!({"app": "x"}))]),
                      "ips": ["10.0.0.8"],
                      "ports": [{"port": 80, "protocol": 6, "target_port": r.pick(&[json!(8080), json!("http"), Value::Null])}]}],
        "tiers": tiers,
        "policies": policies,
        "profiles": profiles,
    })
}

/// A random address-only flow among the addresses of `random_spec` (and outside ones).
pub fn random_flow(r: &mut Rng) -> Flow {
    let pool: Vec<&str> = ADDRS.iter().chain(ADDRS.iter()).chain(OUTSIDE.iter()).copied().collect();
    let v6 = r.chance(25);
    let pick = |r: &mut Rng| loop {
        let a = Addr::parse(r.pick::<&str>(&pool)).expect("pool addresses parse");
        if a.v6 == v6 {
            return a;
        }
    };
    let (s, d) = (pick(r), pick(r));
    let protocol = *r.pick(&PROTOCOLS);
    let icmp = matches!(protocol, 1 | 58);
    Flow {
        src: FlowEnd { addr: Some(s), endpoint: None },
        dst: FlowEnd { addr: Some(d), endpoint: None },
        protocol,
        sport: (!icmp).then(|| *r.pick(&[1000u16, 40000, 53])),
        dport: (!icmp).then(|| *r.pick(&PORTS)),
        icmp_type: icmp.then(|| *r.pick(&[0u8, 3, 8])),
        icmp_code: icmp.then(|| *r.pick(&[0u8, 1])),
        ts_ns: None,
    }
}

/// Parameters of [`policy_workload`].
#[derive(Debug, Clone, Copy)]
pub struct WorkloadShape {
    pub pods: usize,
    pub namespaces: usize,
    pub policies: usize,
    pub seed: u64,
}

impl Default for WorkloadShape {
    fn default() -> Self {
        WorkloadShape { pods: 10_000, namespaces: 100, policies: 1_000, seed: 1 }
    }
}

const APPS: usize = 10;
const TIERS3: [&str; 3] = ["web", "api", "db"];

/// The IPv4 address of pod `i` in a policy workload (10.x.y.z, pods numbered from 0).
pub fn workload_pod_ip(i: usize) -> String {
    format!("10.{}.{}.{}", 1 + i / 62_500, (i / 250) % 250, 1 + i % 250)
}

/// A policy-shaped workload: `pods` pods spread over `namespaces` namespaces (app/tier labels,
/// named ports), and `policies` policies: 60 % Kubernetes NetworkPolicy (pod and namespace
/// selectors, ipBlock with except, named and numbered ports), 25 % Calico policies in a
/// `security` tier (Deny by nets, Log, Pass, notPorts, ICMP), 15 % AdminNetworkPolicy /
/// BaselineAdminNetworkPolicy (namespace selectors, Allow/Deny/Pass).
pub fn policy_workload(shape: WorkloadShape) -> Value {
    let r = &mut Rng::new(shape.seed);
    let nss: Vec<String> = (0..shape.namespaces.max(1)).map(|i| format!("ns{i}")).collect();
    let namespaces: serde_json::Map<String, Value> = nss
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                n.clone(),
                json!({"kubernetes.io/metadata.name": n, "projectcalico.org/name": n,
                               "team": format!("team{}", i % 10), "env": if i % 3 == 0 { "prod" } else { "dev" }}),
            )
        })
        .collect();
    let mut endpoints = Vec::with_capacity(shape.pods);
    for i in 0..shape.pods {
        let ns = &nss[i % nss.len()];
        let app = format!("app{}", r.below(APPS));
        let tier = *r.pick(&TIERS3);
        endpoints.push(json!({
            "kind": "pod", "namespace": ns,
            "labels": {"app": app, "tier": tier, "projectcalico.org/namespace": ns, "projectcalico.org/orchestrator": "k8s"},
            "raw_labels": {"app": app, "tier": tier},
            "sa_labels": {}, "service_account": "default",
            "ips": [workload_pod_ip(i)],
            "ports": [{"name": "http", "protocol": 6, "port": 8080}, {"name": "metrics", "protocol": 6, "port": 9090}],
            "host_network": false, "profiles": [], "addressable": true,
        }));
    }
    let mut policies = Vec::new();
    let n_k8s = shape.policies * 60 / 100;
    let n_calico = shape.policies * 25 / 100;
    let n_anp = shape.policies - n_k8s - n_calico;
    let mut admin = Vec::new();
    let mut baseline = Vec::new();
    for k in 0..n_anp {
        let mut rules_in = Vec::new();
        let mut a = rule(r.pick::<&str>(&["Allow", "Deny", "Pass"]));
        let mut src = entity();
        src["namespace_selector"] = json!(format!("team == 'team{}'", r.below(10)));
        src["selector"] = json!("all()");
        a["sources"] = json!([src]);
        a["protocols"] = json!([6]);
        let mut dst = entity();
        dst["ports"] = json!([port_range(Some(6), *r.pick(&[22u16, 3306, 5432]), 0)]);
        dst["ports"][0]["last"] = dst["ports"][0]["first"].clone();
        a["destinations"] = json!([dst]);
        rules_in.push(a);
        let p = json!({
            "tier": if k % 3 == 2 { "kube-baseline" } else { "kube-admin" },
            "types": ["ingress"],
            "subject": {"selector": format!("app == 'app{}'", r.below(APPS)), "endpoint_kinds": ["pod"], "namespace": null,
                        "namespace_selector": format!("env == '{}'", r.pick(&["prod", "dev"])), "service_account_selector": null},
            "ingress": rules_in, "egress": [],
        });
        if k % 3 == 2 {
            baseline.push(p)
        } else {
            admin.push(p)
        }
    }
    let mut security = Vec::new();
    for _ in 0..n_calico {
        let mut ingress = Vec::new();
        let mut log = rule("Log");
        log["protocols"] = json!([6]);
        let mut d = entity();
        d["not_ports"] = json!([port_range(Some(6), 8080, 8080)]);
        log["destinations"] = json!([d]);
        if r.chance(30) {
            ingress.push(log);
        }
        let mut deny = rule("Deny");
        let mut s = entity();
        s["nets"] = json!([format!("10.{}.{}.0/24", 1 + r.below(2), r.below(40))]);
        deny["sources"] = json!([s]);
        ingress.push(deny);
        let mut icmp = rule("Allow");
        icmp["protocols"] = json!([1]);
        icmp["icmp"] = json!({"type": 8, "code": null});
        ingress.push(icmp);
        ingress.push(rule("Pass"));
        let mut egress = Vec::new();
        let mut e = rule("Deny");
        e["protocols"] = json!([6]);
        let mut d = entity();
        d["nets"] = json!(["0.0.0.0/0"]);
        d["not_nets"] = json!(["10.0.0.0/8"]);
        d["ports"] = json!([port_range(Some(6), 25, 25)]);
        e["destinations"] = json!([d]);
        egress.push(e);
        egress.push(rule("Pass"));
        security.push(json!({
            "tier": "security", "types": ["egress", "ingress"],
            "subject": {"selector": format!("app == 'app{}' && tier == '{}'", r.below(APPS), r.pick(&TIERS3)),
                        "endpoint_kinds": ["pod"], "namespace": null, "namespace_selector": null, "service_account_selector": null},
            "ingress": ingress, "egress": egress,
        }));
    }
    let mut k8s = Vec::new();
    for _ in 0..n_k8s {
        let ns = r.pick(&nss).clone();
        let mut ingress = Vec::new();
        // from pods of another app in the namespace, to the named port "http"
        let mut a = rule("Allow");
        let mut s = entity();
        s["selector"] = json!(format!("app == 'app{}'", r.below(APPS)));
        s["namespace"] = json!(ns);
        s["endpoint_kinds"] = json!(["pod"]);
        let mut d = entity();
        d["ports"] = json!([named_port(Some(6), "http")]);
        a["sources"] = json!([s]);
        a["destinations"] = json!([d]);
        ingress.push(a);
        // from every pod of a team's namespaces, to 9090
        let mut b = rule("Allow");
        let mut s = entity();
        s["selector"] = json!("all()");
        s["namespace_selector"] = json!(format!("team == 'team{}'", r.below(10)));
        s["endpoint_kinds"] = json!(["pod"]);
        let mut d = entity();
        d["ports"] = json!([port_range(Some(6), 9090, 9090)]);
        b["sources"] = json!([s]);
        b["destinations"] = json!([d]);
        ingress.push(b);
        if r.chance(30) {
            let mut c = rule("Allow");
            let mut s = entity();
            s["nets"] = json!(["172.16.0.0/12"]);
            s["not_nets"] = json!(["172.16.5.0/24"]);
            c["sources"] = json!([s]);
            ingress.push(c);
        }
        let mut egress = Vec::new();
        let mut dns = rule("Allow");
        let mut d = entity();
        d["ports"] = json!([port_range(Some(17), 53, 53)]);
        dns["destinations"] = json!([d]);
        egress.push(dns);
        let mut to = rule("Allow");
        let mut d = entity();
        d["selector"] = json!(format!("tier == '{}'", r.pick(&TIERS3)));
        d["namespace"] = json!(ns);
        d["endpoint_kinds"] = json!(["pod"]);
        to["destinations"] = json!([d]);
        egress.push(to);
        k8s.push(json!({
            "tier": "default", "types": ["egress", "ingress"],
            "subject": {"selector": format!("app == 'app{}'", r.below(APPS)), "endpoint_kinds": ["pod"], "namespace": ns,
                        "namespace_selector": null, "service_account_selector": null},
            "ingress": ingress, "egress": egress,
        }));
    }
    policies.extend(admin);
    policies.extend(security);
    policies.extend(k8s);
    policies.extend(baseline);
    json!({
        "namespaces": namespaces,
        "endpoints": endpoints,
        "network_sets": [],
        "nodes": [],
        "services": [],
        "tiers": [
            {"name": "kube-admin", "default_action": "Pass"},
            {"name": "security", "default_action": "Pass"},
            {"name": "default", "default_action": "Deny"},
            {"name": "kube-baseline", "default_action": "Pass"},
        ],
        "policies": policies,
        "profiles": [],
    })
}

/// Random flows of a policy workload: pod to pod (TCP 8080/9090/22/25, UDP 53, ICMP echo) and
/// some from or to outside addresses.
pub fn workload_flows(shape: WorkloadShape, n: usize, seed: u64) -> Vec<Flow> {
    let r = &mut Rng::new(seed);
    let addr = |r: &mut Rng| -> Addr {
        if r.chance(10) {
            Addr::parse(r.pick::<&str>(&["172.16.1.9", "172.16.5.9", "8.8.8.8", "10.2.3.4"])).expect("literal")
        } else {
            Addr::parse(&workload_pod_ip(r.below(shape.pods.max(1)))).expect("pod address")
        }
    };
    (0..n)
        .map(|_| {
            let (s, d) = (addr(r), addr(r));
            let (protocol, dport) =
                *r.pick(&[(6u8, 8080u16), (6, 9090), (6, 22), (6, 25), (17, 53), (1, 0), (6, 5432)]);
            let icmp = protocol == 1;
            Flow {
                src: FlowEnd { addr: Some(s), endpoint: None },
                dst: FlowEnd { addr: Some(d), endpoint: None },
                protocol,
                sport: (!icmp).then(|| 30_000 + r.below(30_000) as u16),
                dport: (!icmp).then_some(dport),
                icmp_type: icmp.then_some(8),
                icmp_code: icmp.then_some(0),
                ts_ns: None,
            }
        })
        .collect()
}

/// The header-batch record of an address-only flow (what the decoder would write).
pub fn flow_header(f: &Flow) -> crate::batch::PacketHeader {
    let mut h = crate::batch::PacketHeader::default();
    let (s, d) = (f.src.addr.expect("address flow"), f.dst.addr.expect("address flow"));
    h.src_addr = s.bits.to_be_bytes();
    h.dst_addr = d.bits.to_be_bytes();
    h.ip_version = if s.v6 { 6 } else { 4 };
    h.protocol = f.protocol;
    if let (Some(sp), Some(dp)) = (f.sport, f.dport) {
        h.sport = sp;
        h.dport = dp;
        h.flags |= crate::batch::FLAG_HAS_PORTS;
    }
    h.icmp_type = f.icmp_type.unwrap_or(0);
    h.icmp_code = f.icmp_code.unwrap_or(0);
    h
}
