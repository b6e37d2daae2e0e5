//! Namespaces: their ids and labels, as the label index's parents.

use super::*;

impl Model {
    pub(super) fn ns_id(&mut self, name: &str) -> u32 {
        if let Some(ns) = self.namespaces.get(name) {
            return ns.id;
        }
        let id = self.ns_names.len() as u32;
        self.ns_names.push(Some(name.to_string()));
        let labels = identity::namespace_labels(name, None);
        self.namespaces.insert(name.to_string(), NsEntry { id, labels: labels.clone(), explicit: false });
        self.index.upsert_parent(id, labels);
        self.drain_events();
        id
    }

    /// Sets a namespace's labels (None: back to the implicit labels of a namespace with no
    /// manifest). Identities of the namespace keep their keys; the index re-checks only the
    /// selectors mentioning a changed namespace label, and relative peers are re-derived.
    pub(super) fn upsert_namespace(&mut self, name: &str, labels: Option<LabelMap>) {
        let id = self.ns_id(name);
        let explicit = labels.is_some();
        let labels = identity::namespace_labels(name, labels.as_ref());
        let entry = self.namespaces.get_mut(name).expect("namespace just interned");
        entry.explicit = explicit;
        if entry.labels == labels {
            return;
        }
        entry.labels = labels.clone();
        self.index.upsert_parent(id, labels);
        self.drain_events();
        // Relative peers compare the subject's namespace labels with the peer's.
        let rels: Vec<u32> =
            self.relatives.iter().filter(|(_, r)| r.per_ns.contains_key(&Some(id))).map(|(&rid, _)| rid).collect();
        for rid in rels {
            self.derive_relative(rid, Some(id));
        }
    }

    pub(super) fn ns_labels(&self, ns: Option<u32>) -> LabelMap {
        match ns.and_then(|i| self.ns_names.get(i as usize).cloned().flatten()) {
            Some(name) => self.namespaces.get(&name).map(|n| n.labels.clone()).unwrap_or_default(),
            None => LabelMap::new(),
        }
    }
}
