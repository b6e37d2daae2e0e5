//! Class boundaries: every prefix and port boundary some rule, network set, node selector or
//! named port compares with, counted, from which the decision memo's address and port classes
//! (`engine::classes`) are built again when the set of boundaries changes.

use std::sync::Arc;

use crate::engine::classes::{ClassLpm, PortClasses};
use crate::engine::cow::FastMap;
use crate::engine::Net;

#[derive(Default)]
pub(super) struct Boundaries {
    prefix_refs: FastMap<Net, usize>,
    port_refs: FastMap<u16, usize>,
    prefixes_changed: bool,
    ports_changed: bool,
}

impl Boundaries {
    pub(super) fn add_prefix(&mut self, net: Net) {
        let n = self.prefix_refs.entry(net).or_insert(0);
        *n += 1;
        self.prefixes_changed |= *n == 1;
    }

    pub(super) fn drop_prefix(&mut self, net: Net) {
        if let Some(n) = self.prefix_refs.get_mut(&net) {
            *n -= 1;
            if *n == 0 {
                self.prefix_refs.remove(&net);
                self.prefixes_changed = true;
            }
        }
    }

    /// A port value compared for equality or as a range end: it and its successor bound classes.
    pub(super) fn add_ports(&mut self, first: u16, last: u16) {
        for b in [Some(first), last.checked_add(1)].into_iter().flatten() {
            let n = self.port_refs.entry(b).or_insert(0);
            *n += 1;
            self.ports_changed |= *n == 1;
        }
    }

    pub(super) fn drop_ports(&mut self, first: u16, last: u16) {
        for b in [Some(first), last.checked_add(1)].into_iter().flatten() {
            if let Some(n) = self.port_refs.get_mut(&b) {
                *n -= 1;
                if *n == 0 {
                    self.port_refs.remove(&b);
                    self.ports_changed = true;
                }
            }
        }
    }

    /// The port classes built anew, if a port boundary came or went since the last call.
    pub(super) fn changed_port_classes(&mut self) -> Option<Arc<PortClasses>> {
        if !std::mem::take(&mut self.ports_changed) {
            return None;
        }
        Some(Arc::new(PortClasses::build(self.port_refs.keys().copied())))
    }

    /// The address classes built anew, if a prefix came or went since the last call.
    pub(super) fn changed_address_classes(&mut self) -> Option<Arc<ClassLpm>> {
        if !std::mem::take(&mut self.prefixes_changed) {
            return None;
        }
        Some(Arc::new(ClassLpm::build(self.prefix_refs.keys())))
    }
}
