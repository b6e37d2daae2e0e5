//! Network sets and services.

use super::*;

impl Model {
    pub(super) fn upsert_network_set(&mut self, spec: &NetworkSetSpec) {
        let key = self.netset_key(spec);
        let identity = self.acquire_identity(key);
        let nets = NetList::parse(&spec.nets).unwrap_or_default().0;
        for n in &nets {
            self.boundaries.add_prefix(*n);
        }
        let old = self.network_sets.insert(spec.id, NetSetEntry { spec: spec.clone(), identity, nets });
        if let Some(o) = old {
            for n in &o.nets {
                self.boundaries.drop_prefix(*n);
            }
            self.release_identity(o.identity);
        }
        self.netsets_dirty = true;
    }

    pub(super) fn remove_network_set(&mut self, id: u32) {
        if let Some(o) = self.network_sets.remove(&id) {
            for n in &o.nets {
                self.boundaries.drop_prefix(*n);
            }
            self.release_identity(o.identity);
            self.netsets_dirty = true;
        }
    }

    pub(super) fn rebuild_netset_lpm(&mut self) {
        let mut lpm = NetsetLpm::default();
        for n in self.network_sets.values() {
            for net in &n.nets {
                lpm.insert(*net, n.identity);
            }
        }
        self.snap.netsets = Arc::new(lpm);
        self.netsets_dirty = false;
        self.class_netsets_dirty = true;
    }

    pub(super) fn service_member(spec: &ServiceSpec, ep: &EpEntry) -> bool {
        match &spec.selector {
            Some(sel) if !sel.is_empty() => {
                ep.namespace.as_deref() == Some(spec.namespace.as_str())
                    && sel.iter().all(|(k, v)| ep.raw_label(k) == Some(v.as_str()))
            }
            _ => false,
        }
    }

    pub(super) fn service_ports(spec: &ServiceSpec) -> Vec<u16> {
        let mut v = Vec::new();
        for p in &spec.ports {
            v.push(p.port);
            if let Some(crate::engine::spec::TargetPort::Number(n)) = p.target_port {
                v.push(n);
            }
        }
        v
    }

    pub(super) fn upsert_service(&mut self, spec: &ServiceSpec) {
        let ips = parse_addrs(&spec.ips).unwrap_or_default();
        for p in Self::service_ports(spec) {
            self.boundaries.add_ports(p, p);
        }
        if let Some(old) = self.services.remove(&spec.id) {
            for p in Self::service_ports(&old.spec) {
                self.boundaries.drop_ports(p, p);
            }
            if let Some(list) = self.ns_services.get_mut(&old.spec.namespace) {
                list.retain(|&s| s != spec.id);
            }
            Arc::make_mut(&mut self.snap.services)
                .remove(&(Arc::from(old.spec.namespace.as_str()), Arc::from(old.spec.name.as_str())));
        }
        let members: HashSet<u32> = self
            .ns_endpoints
            .get(&spec.namespace)
            .into_iter()
            .flatten()
            .copied()
            .filter(|e| self.endpoints.get(e).is_some_and(|ep| Self::service_member(spec, ep)))
            .collect();
        let rec = ServiceRec {
            ips: ips.iter().copied().collect(),
            members,
            ports: spec.ports.iter().map(|p| (p.port, p.protocol, p.target_port.clone())).collect(),
        };
        Arc::make_mut(&mut self.snap.services)
            .insert((Arc::from(spec.namespace.as_str()), Arc::from(spec.name.as_str())), Arc::new(rec));
        self.ns_services.entry(spec.namespace.clone()).or_default().push(spec.id);
        self.services.insert(spec.id, ServiceEntry { spec: spec.clone(), ips });
    }

    pub(super) fn remove_service(&mut self, id: u32) {
        let Some(old) = self.services.remove(&id) else { return };
        for p in Self::service_ports(&old.spec) {
            self.boundaries.drop_ports(p, p);
        }
        if let Some(list) = self.ns_services.get_mut(&old.spec.namespace) {
            list.retain(|&s| s != id);
        }
        Arc::make_mut(&mut self.snap.services)
            .remove(&(Arc::from(old.spec.namespace.as_str()), Arc::from(old.spec.name.as_str())));
        let _ = old.ips;
    }

    /// Re-checks endpoint `ep`'s membership in the selector-based services of namespace `ns`.
    pub(super) fn refresh_service_members(&mut self, ns: &str, ep: u32) {
        let Some(list) = self.ns_services.get(ns) else { return };
        for &sid in list.clone().iter() {
            let svc = &self.services[&sid];
            let member = self.endpoints.get(&ep).is_some_and(|e| Self::service_member(&svc.spec, e));
            let key = (Arc::from(svc.spec.namespace.as_str()), Arc::from(svc.spec.name.as_str()));
            let services = Arc::make_mut(&mut self.snap.services);
            if let Some(rec) = services.get_mut(&key) {
                if rec.members.contains(&ep) != member {
                    let rec = Arc::make_mut(rec);
                    if member {
                        rec.members.insert(ep);
                    } else {
                        rec.members.remove(&ep);
                    }
                }
            }
        }
    }
}
