//! Endpoints and the addresses they own.

use super::*;

impl Model {
    /// Which of the endpoints sharing an address it resolves to: a pod's own address wins over
    /// host-network pods on its node; then by namespace, name and kind (the reference
    /// evaluator's `Inventory.owner_of` rule).
    pub(super) fn owner_rank(&self, id: u32) -> (bool, &str, &str, &str, u32) {
        let e = &self.endpoints[&id];
        let kind = if e.kind == Kind::Host { "host" } else { "pod" };
        (e.host_network, e.namespace.as_deref().unwrap_or(""), &e.name, kind, id)
    }

    pub(super) fn refresh_owner(&mut self, a: Addr) {
        let winner = self
            .addr_owners
            .get(&a)
            .and_then(|owners| owners.iter().copied().min_by(|x, y| self.owner_rank(*x).cmp(&self.owner_rank(*y))));
        match winner {
            Some(w) => {
                let e = &self.endpoints[&w];
                let rec = AddrRec {
                    endpoint: w,
                    identity: e.identity,
                    class: self.snap.classes.class_of(a),
                    local: e.local(),
                    host: e.kind == Kind::Host,
                };
                if self.snap.addrs.get(&a) != Some(&rec) {
                    self.snap.addrs.insert(a, rec);
                }
            }
            None => {
                self.addr_owners.remove(&a);
                self.snap.addrs.remove(&a);
            }
        }
    }

    pub(super) fn upsert_endpoint(&mut self, spec: EndpointSpec) {
        let id = spec.id;
        let kind = kind_of(&spec.kind).unwrap_or(Kind::Pod);
        let ips = parse_addrs(&spec.ips).unwrap_or_default();
        let mut entry = self.slim(spec, kind, ips, u32::MAX);
        let identity = self.acquire_identity(self.endpoint_key(&entry));
        entry.identity = identity;
        let old = self.endpoints.remove(&id);
        let mut touched: Vec<Addr> = Vec::new();
        if let Some(o) = &old {
            if o.addressable {
                for a in o.ips.iter() {
                    if let Some(owners) = self.addr_owners.get_mut(a) {
                        owners.retain(|&x| x != id);
                    }
                    touched.push(*a);
                }
            }
            if let Some(ns) = &o.namespace {
                if let Some(set) = self.ns_endpoints.get_mut(&**ns) {
                    set.remove(&id);
                }
            }
        }
        let rec = EpRec { identity, kind, local: entry.local(), first_ip: entry.ips.first().copied() };
        if entry.addressable {
            for a in entry.ips.iter() {
                let owners = self.addr_owners.entry(*a).or_default();
                if !owners.contains(&id) {
                    owners.push(id);
                }
                touched.push(*a);
            }
        }
        if let Some(ns) = &entry.namespace {
            self.ns_endpoints.entry(ns.to_string()).or_default().insert(id);
        }
        let nss: Vec<String> = old
            .iter()
            .filter_map(|o| o.namespace.as_deref().map(str::to_string))
            .chain(entry.namespace.as_deref().map(str::to_string))
            .collect();
        self.endpoints.insert(id, entry);
        self.snap.endpoints.set(id, Some(rec));
        touched.sort_by_key(|a| (a.v6, a.bits));
        touched.dedup();
        for a in touched {
            self.refresh_owner(a);
        }
        for ns in nss {
            self.refresh_service_members(&ns, id);
        }
        if let Some(o) = old {
            self.release_identity(o.identity);
        }
    }

    pub(super) fn remove_endpoint(&mut self, id: u32) {
        let Some(old) = self.endpoints.remove(&id) else { return };
        self.snap.endpoints.set(id, None);
        if old.addressable {
            for a in &old.ips {
                if let Some(owners) = self.addr_owners.get_mut(a) {
                    owners.retain(|&x| x != id);
                }
                self.refresh_owner(*a);
            }
        }
        if let Some(ns) = &old.namespace {
            if let Some(set) = self.ns_endpoints.get_mut(&**ns) {
                set.remove(&id);
            }
            self.refresh_service_members(ns, id);
        }
        self.release_identity(old.identity);
    }
}
