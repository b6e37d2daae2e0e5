//! `BitVector`: ClassBench rules classified the way the engine decides (`engine::compiled`), on
//! the same parts (`rows.rs`): the bit-vector scheme of Lakshman and Stiliadis (SIGCOMM 1998).
//! It exists so that the classifier every decision goes through is measured on ClassBench's
//! rule sets beside `rte_acl` and TupleMerge.
//!
//! Bit `i` of a row is the `i`-th rule in (priority, id) order. One row per dimension: the
//! protocol (a row per value), each end's address (the atom of the longest rule prefix holding
//! it), each end's port (the interval between range boundaries) and ICMP type × code when a
//! rule names them. A lookup ANDs the rows a word at a time and stops at the first word with a
//! bit set: its lowest bit is the first match. Each row also has an aggregate, a bit per word
//! telling whether the word has any bit set (the aggregated bit vectors of Baboescu and
//! Varghese, "Scalable packet classification", SIGCOMM 2001): the lookup ANDs the aggregates
//! first and reads only the words all of its rows have bits in.
//!
//! Built once, never updated (the engine renews a program's rows when its policy changes). Rows
//! are `rules / 64` words and there are about as many as distinct prefixes and port boundaries,
//! so memory grows with the square of the rules: a set whose rows would pass a bound is refused.

use super::rows::{range_atom, row, row_words, PrefixAtoms, RowSet};
use super::{ClassRule, Classifier, ClassifierError, Match, PacketKey, Prefix, IPV4_MAPPED};

/// Bytes of rows past which [`BitVector::build`] refuses a rule set.
pub const BITVECTOR_BOUND: usize = 1 << 30;

/// ICMP types and codes named, and a row per (type atom, code atom).
#[derive(Clone, Debug)]
struct Icmp {
    types: Vec<u8>,
    codes: Vec<u8>,
    rows: Vec<u32>,
}

impl Icmp {
    /// The atom of a value: its place among those named, or one past them.
    #[inline]
    fn atom(values: &[u8], v: u8) -> usize {
        values.iter().position(|&x| x == v).unwrap_or(values.len())
    }
}

/// A first-match classifier of bit rows (see the module's text).
#[derive(Clone, Debug)]
pub struct BitVector {
    words: usize,
    rows: Vec<u64>,
    /// Per row, `agg_words` words: bit `w` set when word `w` of the row is not zero.
    aggs: Vec<u64>,
    agg_words: usize,
    /// The rank of each bit's rule.
    ranks: Vec<u64>,
    proto: Box<[u32; 256]>,
    /// Whether every prefix is an IPv4 one (the atoms then read the 32-bit address).
    v4: bool,
    /// [source, destination]; `rows` empty where no rule names a prefix.
    addrs: [PrefixAtoms; 2],
    bounds: [Vec<u16>; 2],
    /// Row per port atom ([`range_atom`]); empty where no rule narrows the port.
    ports: [Vec<u32>; 2],
    icmp: Option<Icmp>,
}

impl BitVector {
    /// Builds from rules in any order; errors on a malformed rule, a duplicate id or rows past
    /// [`BITVECTOR_BOUND`].
    pub fn build(rules: &[ClassRule]) -> Result<BitVector, ClassifierError> {
        let mut rules = rules.to_vec();
        for r in &rules {
            r.validate()?;
        }
        rules.sort_unstable_by_key(|r| r.rank());
        let mut ids: Vec<u32> = rules.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(ClassifierError::DuplicateId(w[0]));
        }
        let n = rules.len();
        let words = row_words(n);
        let end_prefix = |r: &ClassRule, end: usize| if end == 0 { r.src } else { r.dst };
        let end_ports = |r: &ClassRule, end: usize| if end == 0 { r.sport } else { r.dport };
        let mapped = |p: Prefix| p.len >= 96 && Prefix { addr: IPV4_MAPPED, len: 96 }.contains(p.addr);
        let v4 = rules.iter().all(|r| [r.src, r.dst].iter().all(|&p| p.len == 0 || mapped(p)));

        // Per end: the distinct prefixes (masked, longest first) and the port boundaries.
        let mut prefixes: [Vec<Prefix>; 2] = [Vec::new(), Vec::new()];
        let mut bounds: [Vec<u16>; 2] = [Vec::new(), Vec::new()];
        for r in &rules {
            for end in 0..2 {
                let p = end_prefix(r, end);
                if p.len > 0 {
                    prefixes[end].push(Prefix { addr: p.addr & Prefix::mask(p.len), len: p.len });
                }
                let pr = end_ports(r, end);
                bounds[end].push(pr.lo);
                if let Some(b) = pr.hi.checked_add(1) {
                    bounds[end].push(b);
                }
            }
        }
        for end in 0..2 {
            prefixes[end].sort_by(|a, b| b.len.cmp(&a.len).then(a.addr.cmp(&b.addr)));
            prefixes[end].dedup();
            bounds[end].sort_unstable();
            bounds[end].dedup();
        }
        let named = |f: fn(&ClassRule) -> Option<u8>| {
            let mut v: Vec<u8> = rules.iter().filter_map(f).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let (types, codes) = (named(|r| r.icmp_type), named(|r| r.icmp_code));
        let icmp_named = rules.iter().any(|r| r.icmp_type.is_some() || r.icmp_code.is_some());

        let row_count = 256
            + prefixes[0].len()
            + prefixes[1].len()
            + bounds[0].len()
            + bounds[1].len()
            + 6
            + if icmp_named { (types.len() + 1) * (codes.len() + 1) } else { 0 };
        if row_count * words * 8 > BITVECTOR_BOUND {
            return Err(ClassifierError::TooLarge { bytes: row_count * words * 8, bound: BITVECTOR_BOUND });
        }

        let mut rs = RowSet::new(words);
        let ones = rs.build(n, |_| true);
        let mut proto = Box::new([0u32; 256]);
        for (v, r) in proto.iter_mut().enumerate() {
            *r = rs.build(n, |i| rules[i].proto.is_none_or(|p| p as usize == v));
        }
        let mut addrs: [PrefixAtoms; 2] = [PrefixAtoms::default(), PrefixAtoms::default()];
        let mut ports: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
        for end in 0..2 {
            // Atom 0: no prefix holds the address; atom j: prefix j - 1 is the longest that does,
            // so a rule's prefix holds the address iff it holds that prefix.
            let atoms = std::iter::once(None).chain(prefixes[end].iter().map(Some));
            let rows: Vec<u32> = atoms
                .map(|atom| {
                    rs.build(n, |i| {
                        let p = end_prefix(&rules[i], end);
                        p.len == 0 || atom.is_some_and(|a| p.len <= a.len && p.contains(a.addr))
                    })
                })
                .collect();
            if rows.iter().any(|&r| r != ones) {
                let family: Vec<(bool, Prefix)> = prefixes[end].iter().map(|&p| (!v4, p)).collect();
                addrs[end] = PrefixAtoms::new(&family, rows);
            }
            // Port atoms: 0 (no port, unused here), then the interval before the first boundary
            // and one from each boundary on.
            let reps =
                std::iter::once(None).chain(std::iter::once(Some(0))).chain(bounds[end].iter().map(|&b| Some(b)));
            let rows: Vec<u32> =
                reps.map(|rep| rs.build(n, |i| rep.is_none_or(|p| end_ports(&rules[i], end).contains(p)))).collect();
            if rows.iter().any(|&r| r != ones) {
                ports[end] = rows;
            }
        }
        let icmp = icmp_named.then(|| {
            let mut rows = Vec::with_capacity((types.len() + 1) * (codes.len() + 1));
            for ta in 0..=types.len() {
                for ca in 0..=codes.len() {
                    // The last atom is every value not named: a rule naming one never matches it.
                    rows.push(rs.build(n, |i| {
                        let r = &rules[i];
                        r.icmp_type.is_none_or(|t| types.get(ta) == Some(&t))
                            && r.icmp_code.is_none_or(|c| codes.get(ca) == Some(&c))
                    }));
                }
            }
            Icmp { types, codes, rows }
        });
        let rows = rs.finish();
        let agg_words = words.div_ceil(64);
        let mut aggs = vec![0u64; rows.len() / words * agg_words];
        for (r, row) in rows.chunks(words).enumerate() {
            for (w, &x) in row.iter().enumerate() {
                if x != 0 {
                    aggs[r * agg_words + w / 64] |= 1 << (w % 64);
                }
            }
        }
        Ok(BitVector {
            words,
            rows,
            aggs,
            agg_words,
            ranks: rules.iter().map(|r| r.rank()).collect(),
            proto,
            v4,
            addrs,
            bounds,
            ports,
            icmp,
        })
    }

    /// The rows of a key, one per dimension that tells rules apart (`n` of `out`).
    #[inline(always)]
    fn key_rows(&self, k: &PacketKey, out: &mut [u32; 6]) -> usize {
        out[0] = self.proto[k.proto as usize];
        let mut n = 1;
        for (end, a) in [k.src, k.dst].into_iter().enumerate() {
            let atoms = &self.addrs[end];
            if !atoms.rows.is_empty() {
                // (With IPv4 prefixes only, a key that is not IPv4-mapped is held by none.)
                out[n] = atoms.rows[atoms.atom(!self.v4, a)];
                n += 1;
            }
            if !self.ports[end].is_empty() {
                let p = if end == 0 { k.sport } else { k.dport };
                out[n] = self.ports[end][range_atom(&self.bounds[end], Some(p))];
                n += 1;
            }
        }
        if let Some(ic) = &self.icmp {
            out[n] =
                ic.rows[Icmp::atom(&ic.types, k.icmp_type) * (ic.codes.len() + 1) + Icmp::atom(&ic.codes, k.icmp_code)];
            n += 1;
        }
        n
    }

    /// Word `w` of the AND of `rows`.
    #[inline(always)]
    fn word(&self, rows: &[u32], w: usize) -> u64 {
        rows.iter().fold(u64::MAX, |x, &r| x & row(&self.rows, self.words, r)[w])
    }

    /// Word `a` of the AND of the aggregates of `rows`.
    #[inline(always)]
    fn agg(&self, rows: &[u32], a: usize) -> u64 {
        rows.iter().fold(u64::MAX, |x, &r| x & self.aggs[r as usize * self.agg_words + a])
    }
}

impl Classifier for BitVector {
    fn classify(&self, k: &PacketKey) -> Option<Match> {
        let mut rows = [0u32; 6];
        let n = self.key_rows(k, &mut rows);
        let rows = &rows[..n];
        for a in 0..self.agg_words {
            let mut agg = self.agg(rows, a);
            while agg != 0 {
                let w = a * 64 + agg.trailing_zeros() as usize;
                let x = self.word(rows, w);
                if x != 0 {
                    return Some(Match::from_rank(self.ranks[w * 64 + x.trailing_zeros() as usize]));
                }
                agg &= agg - 1;
            }
        }
        None
    }

    fn matches_below(&self, k: &PacketKey, below: u32, out: &mut Vec<Match>) {
        let limit = (below as u64) << 32;
        let mut rows = [0u32; 6];
        let n = self.key_rows(k, &mut rows);
        for w in 0..self.words {
            let mut x = self.word(&rows[..n], w);
            while x != 0 {
                let rank = self.ranks[w * 64 + x.trailing_zeros() as usize];
                if rank >= limit {
                    return;
                }
                out.push(Match::from_rank(rank));
                x &= x - 1;
            }
        }
    }

    fn len(&self) -> usize {
        self.ranks.len()
    }

    fn memory_bytes(&self) -> usize {
        self.rows.capacity() * 8
            + self.aggs.capacity() * 8
            + self.ranks.capacity() * 8
            + 256 * 4
            + self.addrs.iter().map(PrefixAtoms::memory_bytes).sum::<usize>()
            + self.bounds.iter().map(|b| b.capacity() * 2).sum::<usize>()
            + self.ports.iter().map(|p| p.capacity() * 4).sum::<usize>()
            + self.icmp.as_ref().map_or(0, |i| i.rows.capacity() * 4 + i.types.len() + i.codes.len())
    }
}
