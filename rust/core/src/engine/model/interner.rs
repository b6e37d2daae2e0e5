//! Label keys and values interned: one shared string for every endpoint and identity that
//! carries it (they repeat across thousands of pods).

use std::collections::HashSet;
use std::sync::Arc;

use crate::engine::spec::LabelMap;

/// Labels as the model keeps them: (key, value) pairs of interned strings.
pub(super) type InternedLabels = Box<[(Arc<str>, Arc<str>)]>;

#[derive(Default)]
pub(super) struct Interner {
    strings: HashSet<Arc<str>>,
    /// How many were kept at the last sweep: the next one waits until there are twice as many.
    kept: usize,
}

impl Interner {
    /// An interned string if known, else a new one (not kept).
    pub(super) fn shared(&self, s: &str) -> Arc<str> {
        self.strings.get(s).cloned().unwrap_or_else(|| Arc::from(s))
    }

    pub(super) fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.strings.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.strings.insert(a.clone());
        a
    }

    pub(super) fn intern_labels(&mut self, labels: &LabelMap) -> InternedLabels {
        labels.iter().map(|(k, v)| (self.intern(k), self.intern(v))).collect()
    }

    /// Forgets strings no endpoint or identity uses any more (pods come and go).
    pub(super) fn sweep(&mut self) {
        if self.strings.len() > 2 * self.kept.max(1024) {
            self.strings.retain(|s| Arc::strong_count(s) > 1);
            self.kept = self.strings.len();
        }
    }
}
