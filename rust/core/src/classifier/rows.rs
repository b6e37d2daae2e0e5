//! The parts of the bit-vector classifier (Lakshman and Stiliadis, "High-speed policy-based
//! packet forwarding using efficient multi-dimensional range matching", SIGCOMM 1998), shared by
//! the engine's compiled programs (`engine::compiled`) and the ClassBench classifier built on
//! them (`BitVector`, `bench` feature).
//!
//! Rules are bits in priority order. Each dimension maps a key's value to an *atom* (a range of
//! values no rule tells apart), and each atom has a precomputed *row*: the rules its values
//! meet. A lookup ANDs one row per dimension; the lowest set bit is the first match.
//!
//! - [`RowSet`]: rows being built, an equal row stored once.
//! - [`Bits`]: the lookup's buffer, a fixed array for the small widths so the loops unroll.
//! - [`next_bit`]: the first candidate in a range of bits.
//! - [`PrefixAtoms`]: an address's atom, the longest of the rules' prefixes holding it.
//! - [`range_atom`]: a port's atom, the interval between consecutive range boundaries.

use super::Prefix;
use crate::engine::cow::FastMap;
use crate::prefetch::prefetch_slice;
use core::ops::{BitAnd, BitOr, Not};

/// Prefixes of one family up to which an address's atom is found by a scan (longest first);
/// past it, by a binary search over the intervals the prefixes cut the addresses into.
pub(crate) const SCAN_PREFIXES: usize = 24;

/// Words of a row for `bits` bits: 1, 2, 4 or 8 (each has its own unrolled lookup, [`Bits`]),
/// or as many as needed past 8.
pub(crate) fn row_words(bits: usize) -> usize {
    match bits.div_ceil(64).max(1) {
        w @ (1 | 2) => w,
        3 | 4 => 4,
        5..=8 => 8,
        w => w,
    }
}

/// Rows being built: `words` words each, an equal row stored once.
pub(crate) struct RowSet {
    pub words: usize,
    pub rows: Vec<u64>,
    interned: FastMap<Vec<u64>, u32>,
}

impl RowSet {
    pub fn new(words: usize) -> RowSet {
        RowSet { words, rows: Vec::new(), interned: FastMap::default() }
    }

    /// The row of these bits (an equal row is shared).
    pub fn add(&mut self, bits: &[u64]) -> u32 {
        if let Some(&r) = self.interned.get(bits) {
            return r;
        }
        let r = (self.rows.len() / self.words) as u32;
        self.rows.extend_from_slice(bits);
        self.interned.insert(bits.to_vec(), r);
        r
    }

    /// The row whose bit `i` is `f(i)`, for `i < n`.
    pub fn build(&mut self, n: usize, f: impl Fn(usize) -> bool) -> u32 {
        let mut bits = vec![0u64; self.words];
        for i in 0..n {
            if f(i) {
                bits[i / 64] |= 1 << (i % 64);
            }
        }
        self.add(&bits)
    }

    /// The bits of row `r`.
    pub fn row(&self, r: u32) -> &[u64] {
        row(&self.rows, self.words, r)
    }

    /// The rows, built: row `r` is words `r * words .. (r + 1) * words`.
    pub fn finish(mut self) -> Vec<u64> {
        self.rows.shrink_to_fit();
        self.rows
    }
}

/// Row `r` of rows `words` wide.
#[inline(always)]
pub(crate) fn row(rows: &[u64], words: usize, r: u32) -> &[u64] {
    &rows[r as usize * words..(r as usize + 1) * words]
}

/// A buffer of one row's width: an array when the width is one of the small ones (the loops
/// over it unroll), a vector past them.
pub(crate) trait Bits {
    fn zeroed(words: usize) -> Self;
    fn words(&self) -> &[u64];
    fn words_mut(&mut self) -> &mut [u64];
}

impl<const W: usize> Bits for [u64; W] {
    #[inline(always)]
    fn zeroed(_: usize) -> Self {
        [0; W]
    }

    #[inline(always)]
    fn words(&self) -> &[u64] {
        self
    }

    #[inline(always)]
    fn words_mut(&mut self) -> &mut [u64] {
        self
    }
}

impl Bits for Vec<u64> {
    fn zeroed(words: usize) -> Self {
        vec![0; words]
    }

    fn words(&self) -> &[u64] {
        self
    }

    fn words_mut(&mut self) -> &mut [u64] {
        self
    }
}

/// The first set bit of `m` in `[from, to)`.
#[inline]
pub(crate) fn next_bit(m: &[u64], from: usize, to: usize) -> Option<usize> {
    if from >= to {
        return None;
    }
    let mut w = from / 64;
    let mut word = m[w] & (u64::MAX << (from % 64));
    loop {
        if word != 0 {
            let i = w * 64 + word.trailing_zeros() as usize;
            return (i < to).then_some(i);
        }
        w += 1;
        if w * 64 >= to {
            return None;
        }
        word = m[w];
    }
}

/// The atom of a port: 0 for none, else one per interval between consecutive `bounds` (sorted,
/// distinct: each range's first port and the port after its last), `1 + ` the interval's index.
#[inline(always)]
pub(crate) fn range_atom(bounds: &[u16], port: Option<u16>) -> usize {
    match port {
        None => 0,
        Some(p) => 1 + bounds.partition_point(|&b| b <= p),
    }
}

/// One end's address atoms: atom `i + 1` for the `i`-th of the prefixes given (longest first),
/// the longest holding the address (the prefixes holding an address form a chain, so the
/// longest decides every containment test); 0 when none does. An IPv4 prefix is IPv4-mapped, its
/// length past the `/96`.
#[derive(Clone, Debug, Default)]
pub(crate) struct PrefixAtoms {
    /// The IPv4 prefixes, on the 32-bit address.
    v4: Family<u32>,
    v6: Family<u128>,
    /// Row per atom (0: no prefix holds the address); empty when there is nothing to tell apart.
    pub rows: Vec<u32>,
}

impl PrefixAtoms {
    /// Atoms of `prefixes` (longest first; `v6` false: IPv4-mapped), with a row per atom.
    pub fn new(prefixes: &[(bool, Prefix)], rows: Vec<u32>) -> PrefixAtoms {
        let family = |v6: bool| {
            let ps = prefixes.iter().enumerate().filter(move |(_, p)| p.0 == v6);
            ps.map(|(i, &(_, p))| (Prefix::mask(p.len), p.addr, i as u32 + 1))
        };
        let v4: Vec<(u32, u32, u32)> = family(false).map(|(m, a, atom)| (m as u32, a as u32, atom)).collect();
        let v6: Vec<(u128, u128, u32)> = family(true).collect();
        let scan = v4.len() <= SCAN_PREFIXES && v6.len() <= SCAN_PREFIXES;
        PrefixAtoms { v4: Family::new(v4, scan), v6: Family::new(v6, scan), rows }
    }

    /// The atom of an address (`v6` false: the IPv4-mapped `bits`), 0 when no prefix holds it.
    /// (The address in registers: an `Option` of it would be built in memory for the call.)
    #[inline]
    pub fn atom(&self, v6: bool, bits: u128) -> usize {
        if !v6 {
            // An IPv4 address is mapped: one that is not is held by no IPv4 prefix (as the rule
            // walk's containment test has it).
            if bits >> 32 != 0xffff {
                return 0;
            }
            return self.v4.atom(bits as u32);
        }
        self.v6.atom(bits)
    }

    /// Hint: the first lines a lookup reads, asked for ahead of it.
    #[inline]
    pub fn prefetch(&self) {
        prefetch_slice(&self.v4.scan, 1);
        prefetch_slice(&self.v4.starts, 1);
        prefetch_slice(&self.rows, 1);
    }

    /// Bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.v4.memory_bytes() + self.v6.memory_bytes() + self.rows.capacity() * 4
    }
}

/// The bits of one address family's addresses.
trait Word: Copy + Ord + Default + BitAnd<Output = Self> + BitOr<Output = Self> + Not<Output = Self> {
    /// The address after this one, if any.
    fn next(self) -> Option<Self>;
}

impl Word for u32 {
    fn next(self) -> Option<u32> {
        self.checked_add(1)
    }
}

impl Word for u128 {
    fn next(self) -> Option<u128> {
        self.checked_add(1)
    }
}

/// One family's prefixes: few scanned longest first as (mask, masked bits, atom); many as the
/// intervals they cut the addresses into, (first address of each, its atom), the first
/// starting at 0.
#[derive(Clone, Debug, Default)]
struct Family<T> {
    scan: Vec<(T, T, u32)>,
    starts: Vec<T>,
    atoms: Vec<u32>,
}

impl<T: Word> Family<T> {
    /// From (mask, bits, atom), longest first; scanned or cut into intervals.
    fn new(prefixes: Vec<(T, T, u32)>, scan: bool) -> Family<T> {
        let masked = prefixes.into_iter().map(|(m, bits, atom)| (m, bits & m, atom));
        if scan {
            Family { scan: masked.collect(), starts: Vec::new(), atoms: Vec::new() }
        } else {
            let (starts, atoms) = intervals(masked.map(|(m, first, atom)| (first, first | !m, atom)));
            Family { scan: Vec::new(), starts, atoms }
        }
    }

    #[inline(always)]
    fn atom(&self, x: T) -> usize {
        if !self.starts.is_empty() {
            return self.atoms[self.starts.partition_point(|&s| s <= x) - 1] as usize;
        }
        for &(m, bits, atom) in &self.scan {
            if x & m == bits {
                return atom as usize;
            }
        }
        0
    }

    fn memory_bytes(&self) -> usize {
        let t = std::mem::size_of::<T>();
        self.scan.capacity() * (2 * t + 4) + self.starts.capacity() * t + self.atoms.capacity() * 4
    }
}

/// The intervals prefixes `(first, last, atom)` cut an address space into, as (first address
/// of each, its atom: the innermost prefix holding it, of equal prefixes the lowest atom; 0 for
/// none), adjacent intervals of one atom merged. Prefixes nest or are disjoint, so a sweep in
/// address order with a stack of the prefixes open finds each interval's innermost prefix.
fn intervals<T: Word>(prefixes: impl Iterator<Item = (T, T, u32)>) -> (Vec<T>, Vec<u32>) {
    let mut ps: Vec<(T, T, u32)> = prefixes.collect();
    if ps.is_empty() {
        return (Vec::new(), Vec::new());
    }
    // By first address, outer (longer span) first, then the higher atom first: of equal
    // prefixes the lowest atom ends on top of the stack.
    ps.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)));
    let mut points: Vec<T> = vec![T::default()];
    for &(first, last, _) in &ps {
        points.push(first);
        if let Some(next) = last.next() {
            points.push(next);
        }
    }
    points.sort_unstable();
    points.dedup();
    let (mut starts, mut atoms): (Vec<T>, Vec<u32>) = (Vec::new(), Vec::new());
    let mut open: Vec<(T, u32)> = Vec::new(); // (last, atom), innermost on top
    let mut next = 0;
    for &x in &points {
        while open.last().is_some_and(|&(last, _)| last < x) {
            open.pop();
        }
        while next < ps.len() && ps[next].0 == x {
            open.push((ps[next].1, ps[next].2));
            next += 1;
        }
        let atom = open.last().map_or(0, |&(_, a)| a);
        if atoms.last() != Some(&atom) {
            starts.push(x);
            atoms.push(atom);
        }
    }
    starts.shrink_to_fit();
    atoms.shrink_to_fit();
    (starts, atoms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn next_bit_finds_bits_in_range() {
        let m = [0b1010u64, 0, 1 << 5];
        assert_eq!(next_bit(&m, 0, 192), Some(1));
        assert_eq!(next_bit(&m, 2, 192), Some(3));
        assert_eq!(next_bit(&m, 4, 192), Some(133));
        assert_eq!(next_bit(&m, 4, 133), None);
        assert_eq!(next_bit(&m, 3, 3), None);
    }

    #[test]
    fn range_atoms_are_the_intervals() {
        let bounds = [0u16, 80, 81, 1024];
        assert_eq!(range_atom(&bounds, None), 0);
        assert_eq!(range_atom(&bounds, Some(0)), 2);
        assert_eq!(range_atom(&bounds, Some(79)), 2);
        assert_eq!(range_atom(&bounds, Some(80)), 3);
        assert_eq!(range_atom(&bounds, Some(81)), 4);
        assert_eq!(range_atom(&bounds, Some(65535)), 5);
    }

    /// The atom by definition: the first (longest) prefix holding the address.
    fn brute(prefixes: &[(bool, Prefix)], v6: bool, bits: u128) -> usize {
        prefixes
            .iter()
            .position(|&(pv6, p)| {
                pv6 == v6
                    && if v6 {
                        (bits ^ p.addr) & Prefix::mask(p.len) == 0
                    } else {
                        bits >> 32 == 0xffff && (bits as u32 ^ p.addr as u32) & Prefix::mask(p.len) as u32 == 0
                    }
            })
            .map_or(0, |i| i + 1)
    }

    fn prefix_strategy() -> impl Strategy<Value = (bool, Prefix)> {
        // Few distinct values so that prefixes nest, repeat and hold the probes.
        (any::<bool>(), 0u8..4, 0u8..=32).prop_map(|(v6, seed, n)| {
            let x = (seed as u32).wrapping_mul(0x9e37_79b9) & 0xf0f0_0000 | 0x0a00_0000;
            if v6 {
                (true, Prefix { addr: (x as u128) << 96, len: n * 4 })
            } else {
                (false, Prefix::v4(x, n))
            }
        })
    }

    proptest! {
        #[test]
        fn prefix_atoms_are_the_longest_prefix(
            mut prefixes in prop::collection::vec(prefix_strategy(), 0..60),
            probes in prop::collection::vec((any::<bool>(), 0u8..4, any::<u32>()), 1..40),
        ) {
            prefixes.sort_by_key(|p| std::cmp::Reverse(p.1.len));
            let atoms = PrefixAtoms::new(&prefixes, Vec::new());
            for (v6, seed, low) in probes {
                let x = (seed as u32).wrapping_mul(0x9e37_79b9) & 0xf0f0_0000 | 0x0a00_0000;
                // Probes near the prefixes' addresses and anywhere.
                let x = if low % 3 == 0 { low } else { x | (low & 0x000f_ffff) };
                let bits = if v6 { (x as u128) << 96 | low as u128 } else { super::super::IPV4_MAPPED | x as u128 };
                prop_assert_eq!(atoms.atom(v6, bits), brute(&prefixes, v6, bits), "{} {:x}", v6, bits);
            }
            // Each prefix's first and last address, and the ones either side.
            for &(v6, p) in &prefixes {
                let m = if v6 { Prefix::mask(p.len) } else { Prefix::mask(p.len) | !(u32::MAX as u128) };
                let (first, last) = (p.addr & m, p.addr | !m);
                // (and the first address with its mapping's bits cleared: not an IPv4 address)
                for bits in [first, last, first.wrapping_sub(1), last.wrapping_add(1), first as u32 as u128] {
                    prop_assert_eq!(atoms.atom(v6, bits), brute(&prefixes, v6, bits), "{} {:x}", v6, bits);
                }
            }
        }
    }
}
