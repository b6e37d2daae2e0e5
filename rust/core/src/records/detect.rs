//! Which format a file's first bytes are (after decompression).

/// Every format `replay --traffic` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Pcap,
    Hubble,
    Calico,
    Vpc,
    Conntrack,
    Netflow,
    Parquet,
}

impl Format {
    pub const ALL: &'static [Format] = &[
        Format::Pcap,
        Format::Hubble,
        Format::Calico,
        Format::Vpc,
        Format::Conntrack,
        Format::Netflow,
        Format::Parquet,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Format::Pcap => "pcap",
            Format::Hubble => "hubble",
            Format::Calico => "calico",
            Format::Vpc => "vpc",
            Format::Conntrack => "conntrack",
            Format::Netflow => "netflow",
            Format::Parquet => "parquet",
        }
    }

    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// What a person calls it, for messages.
    pub fn title(self) -> &'static str {
        match self {
            Format::Pcap => "a pcap/pcapng capture",
            Format::Hubble => "Cilium Hubble flows (JSON lines)",
            Format::Calico => "Calico flow logs or Goldmane flows (JSON lines)",
            Format::Vpc => "AWS VPC Flow Logs (text)",
            Format::Conntrack => "conntrack -L/-E output",
            Format::Netflow => "NetFlow v5/v9 or IPFIX messages",
            Format::Parquet => "Parquet (VPC Flow Logs)",
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The format of an input whose first bytes (up to a few KiB) are `head`; None when none fits.
pub fn detect(head: &[u8]) -> Option<Format> {
    if head.len() >= 4 {
        let magic = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        if matches!(magic, 0xa1b2c3d4 | 0xd4c3b2a1 | 0xa1b23c4d | 0x4d3cb2a1 | 0x0a0d0d0a) {
            return Some(Format::Pcap);
        }
        if &head[..4] == b"PAR1" {
            return Some(Format::Parquet);
        }
        let version = u16::from_be_bytes([head[0], head[1]]);
        let second = u16::from_be_bytes([head[2], head[3]]);
        if (version == 5 && (1..=30).contains(&second))
            || (version == 9 && second > 0)
            || (version == 10 && second >= 16)
        {
            return Some(Format::Netflow);
        }
    }
    let line_end = head.iter().position(|&c| c == b'\n').unwrap_or(head.len());
    let first = &head[..line_end];
    let trimmed: &[u8] = {
        let s = first.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(first.len());
        &first[s..]
    };
    if trimmed.starts_with(b"{") {
        if contains(first, b"\"l4\"")
            || contains(first, b"\"IP\"")
            || contains(first, b"\"verdict\"")
            || contains(first, b"\"is_reply\"")
        {
            return Some(Format::Hubble);
        }
        if contains(first, b"source_ip\"")
            || contains(first, b"dest_ip\"")
            || contains(first, b"\"reporter\"")
            || contains(first, b"\"Key\"")
            || contains(first, b"source_name")
            || contains(first, b"sourceName")
            || contains(first, b"dest_port\"")
            || contains(first, b"num_flows")
        {
            return Some(Format::Calico);
        }
        return None;
    }
    let text = std::str::from_utf8(first).ok()?;
    if (text.contains(" src=") || text.contains("\tsrc=")) && text.contains(" dst=") {
        return Some(Format::Conntrack);
    }
    let tokens: Vec<&str> = text.split_ascii_whitespace().collect();
    if tokens
        .first()
        .is_some_and(|t| *t == "version" || super::vpc::KNOWN_FIELDS.contains(&t.replace('_', "-").as_str()))
        && tokens.iter().all(|t| super::vpc::KNOWN_FIELDS.contains(&t.replace('_', "-").as_str()))
    {
        return Some(Format::Vpc);
    }
    if tokens.len() == super::vpc::DEFAULT_FIELDS.len() && tokens[0].parse::<u8>().is_ok_and(|v| (2..=5).contains(&v)) {
        return Some(Format::Vpc);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_content() {
        assert_eq!(detect(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0]), Some(Format::Pcap));
        assert_eq!(detect(b"{\"flow\":{\"verdict\":\"FORWARDED\",\"IP\":{}}}\n"), Some(Format::Hubble));
        assert_eq!(detect(b"{\"start_time\":1,\"source_ip\":\"10.0.0.1\"}\n"), Some(Format::Calico));
        assert_eq!(detect(b"version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action log-status\n"), Some(Format::Vpc));
        assert_eq!(detect(b"2 123456789010 eni-1235b8ca123456789 172.31.16.139 172.31.16.21 20641 22 6 20 4249 1418530010 1418530070 ACCEPT OK\n"), Some(Format::Vpc));
        assert_eq!(
            detect(b"tcp      6 431999 ESTABLISHED src=10.0.0.1 dst=10.0.0.2 sport=1 dport=2\n"),
            Some(Format::Conntrack)
        );
        assert_eq!(detect(&[0, 10, 0, 40, 0, 0]), Some(Format::Netflow));
        assert_eq!(detect(b"hello world\n"), None);
    }
}
