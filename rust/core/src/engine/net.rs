//! Addresses and networks as the engine stores them: `u128`, IPv4 mapped into `::ffff:0:0/96`,
//! with the IP version kept beside, because an IPv6 network never contains an IPv4 address
//! (even `::/0`), as Python's `ipaddress` and the reference evaluator have it.

use std::net::IpAddr;
use std::str::FromStr;

use super::EngineError;

pub const V4_MAPPED: u128 = 0xffff << 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addr {
    pub bits: u128,
    pub v6: bool,
}

/// One word for the hasher: the address's halves folded, the version in the top bit (an
/// IPv4 address's high half is 0, its low one `::ffff:a.b.c.d`). Equal addresses fold
/// alike; the engine's tables hash every address they hold through this.
impl std::hash::Hash for Addr {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let (hi, lo) = ((self.bits >> 64) as u64, self.bits as u64);
        state.write_u64(lo ^ hi.rotate_left(32) ^ ((self.v6 as u64) << 63));
    }
}

impl Addr {
    pub fn parse(text: &str) -> Result<Addr, EngineError> {
        match IpAddr::from_str(text) {
            Ok(IpAddr::V4(a)) => Ok(Addr { bits: V4_MAPPED | u32::from(a) as u128, v6: false }),
            Ok(IpAddr::V6(a)) => Ok(Addr { bits: u128::from(a), v6: true }),
            Err(_) => Err(EngineError::Spec(format!("invalid IP address {text:?}"))),
        }
    }

    /// From the 16 raw bytes of a header batch (IPv4 is stored mapped; `ip_version` says which).
    pub fn from_header(bytes: &[u8; 16], ip_version: u8) -> Addr {
        Addr { bits: u128::from_be_bytes(*bytes), v6: ip_version == 6 }
    }

    /// As a standard address (IPv4 unmapped).
    pub fn to_ip(&self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(std::net::Ipv6Addr::from(self.bits))
        } else {
            IpAddr::V4(std::net::Ipv4Addr::from(self.bits as u32))
        }
    }

    pub fn version(&self) -> u8 {
        if self.v6 {
            6
        } else {
            4
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Net {
    pub bits: u128,
    pub len: u8, // 0..=128 in the mapped space
    pub v6: bool,
}

impl Net {
    pub fn parse(text: &str) -> Result<Net, EngineError> {
        let bad = || EngineError::Spec(format!("invalid network {text:?}"));
        let (addr, len) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| bad())?)),
            None => (text, None),
        };
        let a = Addr::parse(addr).map_err(|_| bad())?;
        let (max, offset) = if a.v6 { (128, 0) } else { (32, 96) };
        let len = len.unwrap_or(max);
        if len > max {
            return Err(bad());
        }
        let len = len + offset;
        Ok(Net { bits: a.bits & mask(len), len, v6: a.v6 })
    }

    #[inline]
    pub fn contains(&self, a: Addr) -> bool {
        a.v6 == self.v6 && (a.bits & mask(self.len)) == self.bits
    }
}

impl std::fmt::Display for Net {
    /// CIDR notation: `10.0.0.0/8`, `fd00::/8`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.v6 {
            write!(f, "{}/{}", std::net::Ipv6Addr::from(self.bits), self.len)
        } else {
            write!(f, "{}/{}", std::net::Ipv4Addr::from(self.bits as u32), self.len.saturating_sub(96))
        }
    }
}

#[inline]
pub fn mask(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len.min(128) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nets_print_as_cidr() {
        for text in ["10.1.0.0/16", "0.0.0.0/0", "192.168.1.7/32", "fd00::/8", "::/0", "2001:db8::1/128"] {
            assert_eq!(Net::parse(text).unwrap().to_string(), text);
        }
    }
}
