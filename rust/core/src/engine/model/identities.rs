//! Identities: endpoints and network sets of equal projected labels share one; their keys,
//! allocation and re-identification when a label key becomes referenced.

use super::*;

impl Model {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn identity_key<'a>(
        &self,
        labels: impl Iterator<Item = (&'a str, &'a str)>,
        sa_labels: impl Iterator<Item = (&'a str, &'a str)>,
        kind: &str,
        ns: Option<&str>,
        sa: Option<&str>,
        ports: Vec<(Arc<str>, u8, u16)>,
        profiles: &[Arc<str>],
    ) -> IdentityKey {
        let mut out: BTreeMap<Arc<str>, Arc<str>> = BTreeMap::new();
        for (k, v) in labels {
            if identity::is_user_key(k) && self.referenced.contains_key(k) {
                out.insert(self.strings.shared(k), self.strings.shared(v));
            }
        }
        for (k, v) in sa_labels {
            let key = format!("{}{k}", identity::SA_PREFIX);
            if self.referenced.contains_key(&key) {
                out.insert(Arc::from(key), self.strings.shared(v));
            }
        }
        out.insert(Arc::from(identity::KIND), Arc::from(kind));
        if let Some(ns) = ns {
            out.insert(Arc::from(identity::NS), self.strings.shared(ns));
        }
        if let Some(sa) = sa {
            if self.referenced.contains_key(identity::SA) {
                out.insert(Arc::from(identity::SA), self.strings.shared(sa));
            }
        }
        let mut ports = ports;
        ports.sort();
        ports.dedup();
        IdentityKey { labels: out.into_iter().collect(), ports, profiles: profiles.to_vec() }
    }

    /// The slim form of an endpoint spec.
    pub(super) fn slim(&mut self, spec: EndpointSpec, kind: Kind, ips: Vec<Addr>, identity: u32) -> EpEntry {
        let named_ports = spec
            .ports
            .iter()
            .filter_map(|p| p.name.as_deref().map(|n| (self.strings.intern(n), p.protocol, p.port)))
            .collect();
        EpEntry {
            kind,
            host_network: spec.host_network,
            addressable: spec.addressable,
            enforced: spec.enforced,
            name: spec.name.into_boxed_str(),
            namespace: spec.namespace.as_deref().map(|n| self.strings.intern(n)),
            service_account: spec.service_account.as_deref().map(|n| self.strings.intern(n)),
            raw_labels: self.strings.intern_labels(&spec.raw_labels),
            labels: spec.labels.as_ref().map(|l| self.strings.intern_labels(l)),
            sa_labels: self.strings.intern_labels(&spec.sa_labels),
            named_ports,
            profiles: spec.profiles.iter().map(|p| self.strings.intern(p)).collect(),
            ips: ips.into_boxed_slice(),
            identity,
        }
    }

    pub(super) fn endpoint_key(&self, e: &EpEntry) -> IdentityKey {
        let kind_name = match e.kind {
            Kind::Pod if e.host_network => identity::KIND_HOSTNET,
            Kind::Pod => identity::KIND_POD,
            Kind::Host => identity::KIND_HOST,
            Kind::NetworkSet => identity::KIND_NETWORKSET,
        };
        self.identity_key(
            e.policy_labels(),
            e.sa_labels.iter().map(|(k, v)| (&**k, &**v)),
            kind_name,
            e.namespace.as_deref(),
            e.service_account.as_deref(),
            e.named_ports.to_vec(),
            &e.profiles,
        )
    }

    pub(super) fn netset_key(&self, n: &NetworkSetSpec) -> IdentityKey {
        let labels = n.labels.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        self.identity_key(
            labels,
            std::iter::empty(),
            identity::KIND_NETWORKSET,
            n.namespace.as_deref(),
            None,
            Vec::new(),
            &[],
        )
    }

    /// The identity for `key`, created (and filed in the index) if new; takes a reference.
    pub(super) fn acquire_identity(&mut self, key: IdentityKey) -> u32 {
        if let Some(&id) = self.identity_ids.get(&key) {
            self.identities.get_mut(&id).expect("interned identity").refs += 1;
            return id;
        }
        let id = self.identity_numbers.take();
        let ns = key.namespace().map(str::to_string).map(|n| self.ns_id(&n));
        let local = matches!(key.kind(), identity::KIND_POD | identity::KIND_HOST);
        let kind = match key.kind() {
            identity::KIND_HOST => Kind::Host,
            identity::KIND_NETWORKSET => Kind::NetworkSet,
            _ => Kind::Pod,
        };
        let empty = self.intern_program(Direction::Ingress, Vec::new());
        let rec = IdRec {
            kind,
            local,
            ns: ns.unwrap_or(NO_NAMESPACE),
            programs: [empty.clone(), self.intern_program(Direction::Egress, Vec::new())],
            ports: Arc::new(key.ports.clone()),
            profiles: {
                let ids = self.resolve_profiles(&key.profiles);
                self.intern_profiles(ids)
            },
            members: Arc::default(),
        };
        self.snap.identities.set(id, Some(rec));
        for (_, _, port) in &key.ports {
            self.boundaries.add_ports(*port, *port);
        }
        self.index.upsert_endpoint_with_parent(id, key.label_map(), ns);
        self.identity_ids.insert(key.clone(), id);
        self.identities.insert(id, IdentityEntry { key, ns, refs: 1 });
        self.drain_events();
        if local {
            self.dirty.insert(id);
        }
        id
    }

    pub(super) fn release_identity(&mut self, id: u32) {
        let entry = self.identities.get_mut(&id).expect("released identity exists");
        entry.refs -= 1;
        if entry.refs > 0 {
            return;
        }
        let entry = self.identities.remove(&id).expect("released identity exists");
        for (_, _, port) in &entry.key.ports {
            self.boundaries.drop_ports(*port, *port);
        }
        self.identity_ids.remove(&entry.key);
        self.index.remove_endpoint(&id);
        self.drain_events();
        self.dirty.remove(&id);
        self.snap.identities.set(id, None);
        self.identity_numbers.give_back(id);
    }

    /// Moves endpoints and network sets carrying a newly referenced key to their new identity.
    pub(super) fn reidentify(&mut self, keys: &[String]) {
        let carries = |e: &EpEntry| {
            keys.iter().any(|k| {
                if k == identity::SA {
                    e.service_account.is_some()
                } else if let Some(rest) = k.strip_prefix(identity::SA_PREFIX) {
                    e.sa_labels.iter().any(|(x, _)| &**x == rest)
                } else {
                    e.has_policy_label(k)
                }
            })
        };
        let eps: Vec<u32> = self.endpoints.iter().filter(|(_, e)| carries(e)).map(|(&id, _)| id).collect();
        for id in eps {
            let (key, old) = {
                let e = &self.endpoints[&id];
                (self.endpoint_key(e), e.identity)
            };
            let new = self.acquire_identity(key);
            self.endpoints.get_mut(&id).expect("endpoint").identity = new;
            if let Some(rec) = self.snap.endpoints.get_mut(id) {
                rec.identity = new;
            }
            let ips = self.endpoints[&id].ips.clone();
            for a in ips.iter() {
                if self.addr_owners.contains_key(a) {
                    self.refresh_owner(*a);
                }
            }
            self.release_identity(old);
        }
        let carries_label = |labels: &LabelMap| keys.iter().any(|k| labels.contains_key(k));
        let sets: Vec<u32> =
            self.network_sets.iter().filter(|(_, n)| carries_label(&n.spec.labels)).map(|(&id, _)| id).collect();
        for id in sets {
            let key = self.netset_key(&self.network_sets[&id].spec);
            let new = self.acquire_identity(key);
            let old = std::mem::replace(&mut self.network_sets.get_mut(&id).expect("network set").identity, new);
            self.release_identity(old);
            self.netsets_dirty = true;
        }
    }

    pub(super) fn resolve_profiles(&self, names: &[Arc<str>]) -> Vec<u32> {
        names.iter().filter_map(|n| self.profile_ids.get(&**n).copied()).collect()
    }

    /// Refreshes the resolved profiles of identities that name `name`.
    pub(super) fn refresh_profiles(&mut self, name: &str) {
        let ids: Vec<u32> = self
            .identities
            .iter()
            .filter(|(_, e)| e.key.profiles.iter().any(|p| &**p == name))
            .map(|(&id, _)| id)
            .collect();
        // Their programs are recomputed, which resolves profiles and derives relative peers.
        self.dirty.extend(ids);
    }
}
