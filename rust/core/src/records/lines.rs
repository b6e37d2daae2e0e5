//! `replay --traffic --out`: one JSON line per record (its place in the input, times, ends,
//! counts, verdict and each side's decision), written here a chunk at a time.
//!
//! What a line names but the engine cannot spell — a side's decision (policy, tier and rule
//! names), an address's endpoint, a Service, a protocol's name — is given as JSON text by the
//! caller, each distinct value once ([`Lines::missing`] says which are not known yet): the
//! per-record work is all here. Numbers are written as Python's `json.dumps` writes them (a
//! time in seconds as `repr` of the float), so the lines are those the control plane wrote.

use std::collections::HashMap;
use std::fmt::Write;

use super::{FlowCounts, REPORTED_AT_EGRESS, REPORTED_AT_INGRESS};
use crate::batch::{PacketHeader, FLAG_HAS_PORTS};
use crate::engine::{PacketVerdict, SideVerdict};

/// A side's verdict record as bytes: what its decision's text depends on.
pub type SideBytes = [u8; std::mem::size_of::<SideVerdict>()];

fn side_bytes(s: &SideVerdict) -> SideBytes {
    // SAFETY: SideVerdict is a repr(C) record without padding (its ABI test holds it to that).
    unsafe { std::mem::transmute_copy(s) }
}

/// Texts that do not change within a run, each already JSON.
pub struct LineTables {
    /// Protocol number -> its name (256 entries).
    pub protocols: Vec<String>,
    /// `FlowCounts::orientation` -> text.
    pub orientations: Vec<String>,
    /// `FlowCounts::reported` -> text.
    pub reported: Vec<String>,
    /// Service entry -> its description.
    pub services: Vec<String>,
}

/// A run's line writer: the tables, what was learned of sides and endpoints, and the next
/// line's index.
pub struct Lines {
    tables: LineTables,
    /// (direction 0 egress / 1 ingress, side) -> the decision's JSON (`null`: none).
    sides: HashMap<(u8, SideBytes), String>,
    /// Address (16 bytes, IPv4 mapped) -> its endpoint's reference as JSON (`null`: none).
    owners: HashMap<[u8; 16], String>,
    pub index: u64,
}

/// What lines of a chunk need that is not known yet: sides (direction, side) and addresses.
#[derive(Default, Debug)]
pub struct Missing {
    pub sides: Vec<(u8, SideVerdict)>,
    pub addresses: Vec<[u8; 16]>,
}

const MAPPED: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];

/// A 16-byte address as text: IPv4 when mapped, else IPv6 as Python's `ipaddress` writes it
/// (lowercase, the longest run of two or more zero groups as `::`, the first of equal runs).
pub fn address_text(a: &[u8; 16], out: &mut String) {
    if a[..12] == MAPPED {
        let _ = write!(out, "{}.{}.{}.{}", a[12], a[13], a[14], a[15]);
        return;
    }
    let groups: [u16; 8] = std::array::from_fn(|i| u16::from_be_bytes([a[2 * i], a[2 * i + 1]]));
    let (mut best, mut best_len, mut run, mut run_len) = (0usize, 0usize, 0usize, 0usize);
    for (i, &g) in groups.iter().enumerate() {
        if g == 0 {
            if run_len == 0 {
                run = i;
            }
            run_len += 1;
            if run_len > best_len {
                (best, best_len) = (run, run_len);
            }
        } else {
            run_len = 0;
        }
    }
    if best_len < 2 {
        best_len = 0;
    }
    let mut i = 0;
    while i < 8 {
        if best_len > 0 && i == best {
            out.push_str(if i == 0 { "::" } else { ":" });
            i += best_len;
            continue;
        }
        let _ = write!(out, "{:x}", groups[i]);
        if i < 7 {
            out.push(':');
        }
        i += 1;
    }
}

/// `f` as Python's `repr` writes a float: the shortest digits that read back, positional for
/// exponents from -4 to 15 (`1700000000.5`, `1.0`), else `1e+16`, `1.5e-05`.
pub fn python_float(f: f64, out: &mut String) {
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if negative {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp < 0 {
            out.push_str("0.");
            for _ in 0..(-exp - 1) {
                out.push('0');
            }
            out.push_str(&digits);
        } else {
            let point = exp as usize + 1;
            if digits.len() <= point {
                out.push_str(&digits);
                for _ in digits.len()..point {
                    out.push('0');
                }
                out.push_str(".0");
            } else {
                out.push_str(&digits[..point]);
                out.push('.');
                out.push_str(&digits[point..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
}

fn seconds(ns: u64, out: &mut String) {
    if ns == 0 {
        out.push_str("null");
    } else {
        python_float(ns as f64 / 1e9, out);
    }
}

fn placed(c: &FlowCounts) -> bool {
    c.has_src != 0 && c.has_dst != 0
}

impl Lines {
    pub fn new(tables: LineTables) -> Self {
        Lines { tables, sides: HashMap::new(), owners: HashMap::new(), index: 0 }
    }

    /// What the lines of these records need and was not learned yet, each once.
    pub fn missing(&self, headers: &[PacketHeader], counts: &[FlowCounts], verdicts: &[PacketVerdict]) -> Missing {
        let mut m = Missing::default();
        let mut sides = std::collections::HashSet::new();
        let mut addresses = std::collections::HashSet::new();
        for ((h, c), v) in headers.iter().zip(counts).zip(verdicts) {
            for (has, a) in [(c.has_src, &h.src_addr), (c.has_dst, &h.dst_addr)] {
                if has != 0 && !self.owners.contains_key(a) && addresses.insert(*a) {
                    m.addresses.push(*a);
                }
            }
            if placed(c) {
                for (d, s) in [(0u8, &v.egress), (1u8, &v.ingress)] {
                    let key = (d, side_bytes(s));
                    if !self.sides.contains_key(&key) && sides.insert(key) {
                        m.sides.push((d, *s));
                    }
                }
            }
        }
        m
    }

    /// Learns a side's decision text.
    pub fn learn_side(&mut self, direction: u8, side: &SideVerdict, json: String) {
        self.sides.insert((direction, side_bytes(side)), json);
    }

    /// Learns an address's endpoint text.
    pub fn learn_owner(&mut self, address: [u8; 16], json: String) {
        self.owners.insert(address, json);
    }

    /// The lines of these records (each `\n`-ended) appended to `out`: `file` the input's name
    /// as JSON, `unit` the key of the record's position (`line`, `byte`); `services[i]` the
    /// Service entry record `i` was judged through (-1: none). Sides and endpoints not learned
    /// are written `null`.
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &mut self,
        headers: &[PacketHeader],
        counts: &[FlowCounts],
        verdicts: &[PacketVerdict],
        services: &[i64],
        file: &str,
        unit: &str,
        out: &mut String,
    ) {
        let text = |table: &Vec<String>, i: usize| table.get(i).map_or("null", String::as_str).to_owned();
        for (i, ((h, c), v)) in headers.iter().zip(counts).zip(verdicts).enumerate() {
            let ok = placed(c);
            let has_ports = h.flags & FLAG_HAS_PORTS != 0;
            let _ =
                write!(out, "{{\"index\": {}, \"file\": {file}, \"{unit}\": {}, \"first\": ", self.index, c.position);
            seconds(c.first_ns, out);
            out.push_str(", \"last\": ");
            seconds(c.last_ns, out);
            for (key, has, a) in [("src", c.has_src, &h.src_addr), ("dst", c.has_dst, &h.dst_addr)] {
                let _ = write!(out, ", \"{key}\": ");
                if has != 0 {
                    out.push('"');
                    address_text(a, out);
                    out.push('"');
                } else {
                    out.push_str("null");
                }
            }
            let _ = write!(out, ", \"proto\": {}", text(&self.tables.protocols, h.protocol as usize));
            if has_ports {
                let _ = write!(out, ", \"sport\": {}, \"dport\": {}", h.sport, h.dport);
            } else {
                out.push_str(", \"sport\": null, \"dport\": null");
            }
            let _ = write!(
                out,
                ", \"flows\": {}, \"packets\": {}, \"bytes\": {}, \"direction\": {}",
                c.flows,
                c.packets,
                c.bytes,
                text(&self.tables.orientations, c.orientation as usize)
            );
            if ok {
                let _ = write!(
                    out,
                    ", \"verdict\": \"{}\", \"reason\": \"policy\"",
                    if v.allow != 0 { "allow" } else { "deny" }
                );
            } else {
                out.push_str(", \"verdict\": null, \"reason\": \"unplaced\"");
            }
            let _ = write!(out, ", \"reported\": {}", text(&self.tables.reported, c.reported as usize));
            // the end whose decision `reported` is (null: the connection's)
            out.push_str(match c.reported_at {
                REPORTED_AT_EGRESS => ", \"reported_at\": \"egress\"",
                REPORTED_AT_INGRESS => ", \"reported_at\": \"ingress\"",
                _ => ", \"reported_at\": null",
            });
            for (d, key, s) in [(0u8, "egress", &v.egress), (1u8, "ingress", &v.ingress)] {
                let side = if ok { self.sides.get(&(d, side_bytes(s))).map_or("null", String::as_str) } else { "null" };
                let _ = write!(out, ", \"{key}\": {side}");
            }
            for (key, has, a) in [("src_endpoint", c.has_src, &h.src_addr), ("dst_endpoint", c.has_dst, &h.dst_addr)] {
                let owner = if has != 0 { self.owners.get(a).map_or("null", String::as_str) } else { "null" };
                let _ = write!(out, ", \"{key}\": {owner}");
            }
            if h.protocol == 1 || h.protocol == 58 {
                let _ = write!(out, ", \"icmp_type\": {}, \"icmp_code\": {}", h.icmp_type, h.icmp_code);
            }
            if let Some(&s) = services.get(i) {
                if s >= 0 {
                    let _ = write!(out, ", \"service\": {}", text(&self.tables.services, s as usize));
                }
            }
            out.push_str("}\n");
            self.index += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float(f: f64) -> String {
        let mut s = String::new();
        python_float(f, &mut s);
        s
    }

    #[test]
    fn floats_as_python_repr() {
        assert_eq!(float(1.0), "1.0");
        assert_eq!(float(1700000000.0), "1700000000.0");
        assert_eq!(float(1700000000.123), "1700000000.123");
        assert_eq!(float(1e-9), "1e-09");
        assert_eq!(float(0.0001), "0.0001");
        assert_eq!(float(0.00012), "0.00012");
        assert_eq!(float(1.5e-5), "1.5e-05");
        assert_eq!(float(1e16), "1e+16");
        assert_eq!(float(1.2345e17), "1.2345e+17");
        assert_eq!(float(123456789012345.6), "123456789012345.6");
    }

    fn addr(a: [u8; 16]) -> String {
        let mut s = String::new();
        address_text(&a, &mut s);
        s
    }

    #[test]
    fn addresses_as_python_ipaddress() {
        let mut v4 = [0u8; 16];
        v4[10] = 0xff;
        v4[11] = 0xff;
        v4[12..].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(addr(v4), "10.0.0.1");
        assert_eq!(addr([0; 16]), "::");
        let mut one = [0u8; 16];
        one[15] = 1;
        assert_eq!(addr(one), "::1");
        let mut a = [0u8; 16];
        a[0] = 0x20;
        a[1] = 0x01;
        a[2] = 0x0d;
        a[3] = 0xb8;
        assert_eq!(addr(a), "2001:db8::");
        a[5] = 1; // 2001:db8:1::  (group 2 = 1)
        assert_eq!(addr(a), "2001:db8:1::");
        let mut b = [0u8; 16];
        b[1] = 1;
        b[7] = 1; // 1:0:0:1:0:0:0:0 -> 1:0:0:1::
        assert_eq!(addr(b), "1:0:0:1::");
        let mut c = [0u8; 16];
        c[1] = 1;
        c[5] = 1;
        c[15] = 1; // 1:0:1:0:0:0:0:1 -> 1:0:1::1
        assert_eq!(addr(c), "1:0:1::1");
    }
}
