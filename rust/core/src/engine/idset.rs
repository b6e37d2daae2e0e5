//! Sets of identity ids: what a selector matches, resolved once and kept current per change.
//!
//! Most selectors in a cluster match a handful of identities (a NetworkPolicy's `podSelector`
//! inside one namespace), a few match most of them (`all()`, a namespace selector). A set is a
//! sorted vector while it is small and a bitmap once a bitmap would be smaller, so memory grows
//! with the matches, not with selectors × identities.

/// Above this many members per 32 bits of universe, a bitmap is smaller than a sorted vector.
const DENSE_RATIO: usize = 32;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdSet {
    Sparse(Vec<u32>),
    Dense { bits: Vec<u64>, count: usize },
}

impl Default for IdSet {
    fn default() -> Self {
        IdSet::Sparse(Vec::new())
    }
}

impl FromIterator<u32> for IdSet {
    fn from_iter<I: IntoIterator<Item = u32>>(ids: I) -> IdSet {
        let mut v: Vec<u32> = ids.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        let mut s = IdSet::Sparse(v);
        s.rebalance();
        s
    }
}

impl IdSet {
    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        match self {
            IdSet::Sparse(v) => {
                if v.len() <= 8 {
                    v.contains(&id)
                } else {
                    v.binary_search(&id).is_ok()
                }
            }
            IdSet::Dense { bits, .. } => bits.get((id >> 6) as usize).is_some_and(|w| w & (1 << (id & 63)) != 0),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            IdSet::Sparse(v) => v.len(),
            IdSet::Dense { count, .. } => *count,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn insert(&mut self, id: u32) -> bool {
        let added = match self {
            IdSet::Sparse(v) => match v.binary_search(&id) {
                Ok(_) => false,
                Err(pos) => {
                    v.insert(pos, id);
                    true
                }
            },
            IdSet::Dense { bits, count } => {
                let w = (id >> 6) as usize;
                if bits.len() <= w {
                    bits.resize(w + 1, 0);
                }
                let was = bits[w] & (1 << (id & 63)) != 0;
                bits[w] |= 1 << (id & 63);
                *count += !was as usize;
                !was
            }
        };
        if added {
            self.rebalance();
        }
        added
    }

    pub fn remove(&mut self, id: u32) -> bool {
        let removed = match self {
            IdSet::Sparse(v) => match v.binary_search(&id) {
                Ok(pos) => {
                    v.remove(pos);
                    true
                }
                Err(_) => false,
            },
            IdSet::Dense { bits, count } => {
                let w = (id >> 6) as usize;
                let was = bits.get(w).is_some_and(|x| x & (1 << (id & 63)) != 0);
                if was {
                    bits[w] &= !(1 << (id & 63));
                    *count -= 1;
                }
                was
            }
        };
        if removed {
            self.rebalance();
        }
        removed
    }

    pub fn iter(&self) -> Box<dyn Iterator<Item = u32> + '_> {
        match self {
            IdSet::Sparse(v) => Box::new(v.iter().copied()),
            IdSet::Dense { bits, .. } => Box::new(bits.iter().enumerate().flat_map(|(w, &word)| {
                (0..64u32).filter(move |b| word & (1 << b) != 0).map(move |b| (w as u32) * 64 + b)
            })),
        }
    }

    /// Switches representation when the other one has become clearly smaller (with hysteresis,
    /// so a set on the boundary does not flip on every change).
    fn rebalance(&mut self) {
        match self {
            IdSet::Sparse(v) => {
                let universe = v.last().map_or(0, |&m| m as usize + 1);
                if v.len() * DENSE_RATIO > universe * 2 && v.len() > 16 {
                    let mut bits = vec![0u64; universe.div_ceil(64)];
                    for &id in v.iter() {
                        bits[(id >> 6) as usize] |= 1 << (id & 63);
                    }
                    *self = IdSet::Dense { bits, count: v.len() };
                }
            }
            IdSet::Dense { bits, count } => {
                while bits.last() == Some(&0) {
                    bits.pop();
                }
                let universe = bits.len() * 64;
                if *count * DENSE_RATIO < universe / 2 {
                    let v: Vec<u32> = self.iter().collect();
                    *self = IdSet::Sparse(v);
                }
            }
        }
    }

    pub fn memory_bytes(&self) -> usize {
        match self {
            IdSet::Sparse(v) => v.capacity() * 4,
            IdSet::Dense { bits, .. } => bits.capacity() * 8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn behaves_like_a_set_through_both_representations() {
        let mut s = IdSet::default();
        let mut model = BTreeSet::new();
        let mut x: u64 = 7;
        for step in 0..20_000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let id = ((x >> 33) % if step < 10_000 { 400 } else { 5_000 }) as u32;
            if (x >> 20) % 3 == 0 {
                assert_eq!(s.remove(id), model.remove(&id));
            } else {
                assert_eq!(s.insert(id), model.insert(id));
            }
            assert_eq!(s.len(), model.len());
        }
        assert_eq!(s.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
        for id in 0..6_000 {
            assert_eq!(s.contains(id), model.contains(&id));
        }
        let dense = IdSet::from_iter(0..1000);
        assert!(matches!(dense, IdSet::Dense { .. }));
        let sparse = IdSet::from_iter([3, 90_000]);
        assert!(matches!(sparse, IdSet::Sparse(_)));
    }
}
