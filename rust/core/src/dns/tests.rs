//! Tests of the DNS decoder, the domain patterns and the facts store, on hand-built messages: one
//! file for the module's parts, which share the message builder below.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;

// ---------------------------------------------------------------------------------------------
// A tiny message builder (test only): names written uncompressed unless given as raw bytes.

const FLAGS_RESPONSE: u16 = 0x8180; // QR, RD, RA, opcode 0, rcode 0

fn wire_name(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out
}

fn rr(owner: &[u8], rtype: u16, class: u16, ttl: u32, rdata: &[u8]) -> Vec<u8> {
    let mut out = owner.to_vec();
    out.extend_from_slice(&rtype.to_be_bytes());
    out.extend_from_slice(&class.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    out.extend_from_slice(rdata);
    out
}

#[derive(Clone)]
struct Builder {
    flags: u16,
    qd: Vec<Vec<u8>>,
    an: Vec<Vec<u8>>,
    ns: Vec<Vec<u8>>,
    ar: Vec<Vec<u8>>,
}

impl Builder {
    fn response() -> Builder {
        Builder { flags: FLAGS_RESPONSE, qd: Vec::new(), an: Vec::new(), ns: Vec::new(), ar: Vec::new() }
    }
    fn flags(mut self, flags: u16) -> Builder {
        self.flags = flags;
        self
    }
    fn question(mut self, name: &str, qtype: u16) -> Builder {
        let mut q = wire_name(name);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&1u16.to_be_bytes());
        self.qd.push(q);
        self
    }
    fn a(mut self, owner: &str, ip: [u8; 4], ttl: u32) -> Builder {
        self.an.push(rr(&wire_name(owner), 1, 1, ttl, &ip));
        self
    }
    fn aaaa(mut self, owner: &str, ip: Ipv6Addr, ttl: u32) -> Builder {
        self.an.push(rr(&wire_name(owner), 28, 1, ttl, &ip.octets()));
        self
    }
    fn cname(mut self, owner: &str, target: &str, ttl: u32) -> Builder {
        self.an.push(rr(&wire_name(owner), 5, 1, ttl, &wire_name(target)));
        self
    }
    fn answer_raw(mut self, record: Vec<u8>) -> Builder {
        self.an.push(record);
        self
    }
    fn authority_raw(mut self, record: Vec<u8>) -> Builder {
        self.ns.push(record);
        self
    }
    /// An EDNS OPT pseudo-record (root owner, type 41, class = UDP size) with one option.
    fn opt(mut self) -> Builder {
        let option = [0u8, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]; // COOKIE
        self.ar.push(rr(&[0], 41, 1232, 0, &option));
        self
    }
    fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&0x1234u16.to_be_bytes());
        out.extend_from_slice(&self.flags.to_be_bytes());
        for section in [&self.qd, &self.an, &self.ns, &self.ar] {
            out.extend_from_slice(&(section.len() as u16).to_be_bytes());
        }
        for section in [&self.qd, &self.an, &self.ns, &self.ar] {
            for r in section.iter() {
                out.extend_from_slice(r);
            }
        }
        out
    }
}

fn tcp_frame(msg: &[u8]) -> Vec<u8> {
    let mut out = (msg.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(msg);
    out
}

fn ans(name: &str, addr: IpAddr, ttl: u32) -> Answer {
    Answer { name: name.to_string(), addr, ttl }
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

fn sorted(mut answers: Vec<Answer>) -> Vec<Answer> {
    answers.sort_by(|x, y| (&x.name, x.addr).cmp(&(&y.name, y.addr)));
    answers
}

// ---------------------------------------------------------------------------------------------
// The decoder.

#[test]
fn plain_a() {
    let msg = Builder::response()
        .question("example.com", 1)
        .a("Example.COM.", [93, 184, 216, 34], 300)
        .a("example.com", [93, 184, 216, 35], 300)
        .build();
    assert_eq!(
        parse_response(&msg),
        Ok(vec![ans("example.com", v4(93, 184, 216, 34), 300), ans("example.com", v4(93, 184, 216, 35), 300),])
    );
}

#[test]
fn aaaa() {
    let ip: Ipv6Addr = "2606:2800:220:1:248:1893:25c8:1946".parse().unwrap();
    let msg = Builder::response().question("example.com", 28).aaaa("example.com", ip, 60).build();
    assert_eq!(parse_response(&msg), Ok(vec![ans("example.com", IpAddr::V6(ip), 60)]));
}

#[test]
fn cname_chain_teaches_every_name_with_the_minimum_ttl() {
    let msg = Builder::response()
        .question("www.a.com", 1)
        .cname("www.a.com", "b.net", 300)
        .cname("b.net", "c.org", 60)
        .a("c.org", [1, 2, 3, 4], 120)
        .a("c.org", [1, 2, 3, 5], 30)
        .build();
    let got = sorted(parse_response(&msg).unwrap());
    assert_eq!(
        got,
        vec![
            ans("b.net", v4(1, 2, 3, 4), 60),
            ans("b.net", v4(1, 2, 3, 5), 30),
            ans("c.org", v4(1, 2, 3, 4), 120),
            ans("c.org", v4(1, 2, 3, 5), 30),
            ans("www.a.com", v4(1, 2, 3, 4), 60),
            ans("www.a.com", v4(1, 2, 3, 5), 30),
        ]
    );
}

#[test]
fn cname_chains_stop_at_the_depth_limit_and_at_loops() {
    // n0 -> n1 -> ... -> n20 -> A: only the 16 nearest aliases of n20 learn it.
    let mut b = Builder::response().question("n0.x", 1);
    for i in 0..20 {
        b = b.cname(&format!("n{i}.x"), &format!("n{}.x", i + 1), 100);
    }
    let got = parse_response(&b.a("n20.x", [9, 9, 9, 9], 100).build()).unwrap();
    let names: Vec<&str> = got.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names.len(), 1 + MAX_CNAME_DEPTH);
    assert!(names.contains(&"n4.x") && !names.contains(&"n3.x"), "{names:?}");

    // A loop beside the address: each name once, and no hang.
    let msg = Builder::response()
        .cname("a.x", "b.x", 10)
        .cname("b.x", "a.x", 10)
        .cname("c.x", "c.x", 10)
        .a("b.x", [1, 1, 1, 1], 10)
        .build();
    assert_eq!(
        sorted(parse_response(&msg).unwrap()),
        vec![ans("a.x", v4(1, 1, 1, 1), 10), ans("b.x", v4(1, 1, 1, 1), 10)]
    );
}

#[test]
fn other_types_and_classes_teach_nothing() {
    let msg = Builder::response()
        .question("example.com", 16)
        .answer_raw(rr(&wire_name("example.com"), 16, 1, 60, b"\x05hello")) // TXT
        .answer_raw(rr(&wire_name("example.com"), 1, 3, 60, &[1, 2, 3, 4])) // class CH
        .authority_raw(rr(&wire_name("com"), 2, 1, 60, &wire_name("ns.example.net"))) // NS
        .build();
    assert_eq!(parse_response(&msg), Ok(vec![]));
}

#[test]
fn compression_pointers_are_followed() {
    // header, question "www.a.com" at 12 (www at 12, "a" at 16, "com" at 18), then answers.
    let mut msg = Builder::response().question("www.a.com", 1).build();
    msg[7] = 2; // ancount
                // www.a.com CNAME b.a.com  (owner: pointer to 12; rdata: "b" + pointer to 16)
    msg.extend_from_slice(&rr(&[0xc0, 12], 5, 1, 100, &[1, b'b', 0xc0, 16]));
    let b_at = msg.len() - 4; // where "b" + pointer starts (rdata)
                              // b.a.com A 10.0.0.1 (owner: pointer to the CNAME's rdata, itself ending in a pointer)
    msg.extend_from_slice(&rr(&[0xc0, b_at as u8], 1, 1, 50, &[10, 0, 0, 1]));
    assert_eq!(
        sorted(parse_response(&msg).unwrap()),
        vec![ans("b.a.com", v4(10, 0, 0, 1), 50), ans("www.a.com", v4(10, 0, 0, 1), 50),]
    );
}

#[test]
fn pointer_loops_and_bad_pointers_are_refused() {
    let base = Builder::response().question("a.com", 1).build();
    let with_owner = |owner: &dyn Fn(usize) -> Vec<u8>| {
        let mut msg = base.clone();
        msg[7] = 1;
        let at = msg.len();
        msg.extend_from_slice(&rr(&owner(at), 1, 1, 10, &[1, 2, 3, 4]));
        parse_response(&msg)
    };
    // A pointer to itself.
    assert_eq!(with_owner(&|at| vec![0xc0, at as u8]), Err(DnsError::PointerLoop));
    // A label, then a pointer back to that label: a loop.
    assert_eq!(with_owner(&|at| vec![1, b'x', 0xc0, at as u8]), Err(DnsError::PointerLoop));
    // Forward.
    assert_eq!(with_owner(&|at| vec![0xc0, at as u8 + 4]), Err(DnsError::PointerLoop));
    // Past the end, and into the header.
    assert_eq!(with_owner(&|_| vec![0xff, 0xff]), Err(DnsError::BadPointer));
    assert_eq!(with_owner(&|_| vec![0xc0, 2]), Err(DnsError::BadPointer));
    // Two names pointing at each other (the second at the first, which points forward).
    let mut msg = base.clone();
    msg[7] = 2;
    let first = msg.len();
    msg.extend_from_slice(&rr(&[1, b'p', 0xc0, (first + 17) as u8], 1, 1, 10, &[1, 2, 3, 4]));
    assert_eq!(msg.len(), first + 18);
    msg.extend_from_slice(&rr(&[1, b'q', 0xc0, first as u8], 1, 1, 10, &[1, 2, 3, 4]));
    assert_eq!(parse_response(&msg), Err(DnsError::PointerLoop));
    // Reserved label types.
    assert_eq!(with_owner(&|_| vec![0x41, 0]), Err(DnsError::BadLabel));
}

#[test]
fn names_are_bounded_and_labels_checked() {
    let long = vec!["a".repeat(63); 4].join("."); // 4 * 64 + 1 = 257 wire bytes
    let msg = Builder::response().a(&long, [1, 2, 3, 4], 1).build();
    assert_eq!(parse_response(&msg), Err(DnsError::NameTooLong));
    let ok = vec!["a".repeat(63); 3].join(".") + "." + &"b".repeat(61); // 255 wire bytes
    let msg = Builder::response().a(&ok, [1, 2, 3, 4], 1).build();
    assert_eq!(parse_response(&msg).unwrap()[0].name, ok);
    // A dot inside a label, a space, a non-ASCII byte.
    for label in [&b"a.b"[..], b"a b", b"\xc3\xa9"] {
        let mut owner = vec![label.len() as u8];
        owner.extend_from_slice(label);
        owner.extend_from_slice(&wire_name("com"));
        let msg = Builder::response().answer_raw(rr(&owner, 1, 1, 1, &[1, 2, 3, 4])).build();
        assert_eq!(parse_response(&msg), Err(DnsError::BadLabel), "{label:?}");
    }
}

#[test]
fn truncated_messages_are_refused() {
    let msg = Builder::response().question("example.com", 1).a("example.com", [1, 2, 3, 4], 300).build();
    for cut in 0..msg.len() {
        assert_eq!(parse_response(&msg[..cut]), Err(DnsError::Truncated), "cut at {cut}");
    }
    // A count that announces one record more than there is.
    let mut more = msg.clone();
    more[7] = 2;
    assert_eq!(parse_response(&more), Err(DnsError::Truncated));
}

#[test]
fn bad_rdata_and_trailing_garbage_are_refused() {
    let short_a = Builder::response().answer_raw(rr(&wire_name("a.com"), 1, 1, 1, &[1, 2, 3])).build();
    assert_eq!(parse_response(&short_a), Err(DnsError::BadRdata));
    let long_aaaa = Builder::response().answer_raw(rr(&wire_name("a.com"), 28, 1, 1, &[0; 17])).build();
    assert_eq!(parse_response(&long_aaaa), Err(DnsError::BadRdata));
    let mut cname_rdata = wire_name("b.com");
    cname_rdata.push(0);
    let cname = Builder::response().answer_raw(rr(&wire_name("a.com"), 5, 1, 1, &cname_rdata)).build();
    assert_eq!(parse_response(&cname), Err(DnsError::BadRdata));
    let mut garbage = Builder::response().a("a.com", [1, 2, 3, 4], 1).build();
    garbage.push(0);
    assert_eq!(parse_response(&garbage), Err(DnsError::TrailingGarbage));
}

#[test]
fn header_decides_what_teaches() {
    let b = Builder::response().question("nope.example", 1).a("nope.example", [1, 2, 3, 4], 300);
    // NXDOMAIN (rcode 3) and SERVFAIL (2) teach nothing, whatever the answer section says.
    assert_eq!(parse_response(&b.clone().flags(0x8183).build()), Ok(vec![]));
    assert_eq!(parse_response(&b.clone().flags(0x8182).build()), Ok(vec![]));
    // A query.
    assert_eq!(parse_response(&b.clone().flags(0x0100).build()), Err(DnsError::NotResponse));
    // opcode 4 (NOTIFY), 5 (UPDATE).
    assert_eq!(parse_response(&b.clone().flags(0x8000 | (4 << 11)).build()), Err(DnsError::BadOpcode));
    assert_eq!(parse_response(&b.clone().flags(0x8000 | (5 << 11)).build()), Err(DnsError::BadOpcode));
    // TTLs with the top bit set count as 0 (RFC 2181).
    let got = parse_response(&Builder::response().a("x.y", [1, 1, 1, 1], 0x8000_0000).build());
    assert_eq!(got, Ok(vec![ans("x.y", v4(1, 1, 1, 1), 0)]));
}

#[test]
fn edns_opt_in_additional_is_skipped() {
    let msg = Builder::response().question("example.com", 1).a("example.com", [1, 2, 3, 4], 300).opt().build();
    assert_eq!(parse_response(&msg), Ok(vec![ans("example.com", v4(1, 2, 3, 4), 300)]));
}

#[test]
fn too_many_records_are_refused() {
    let mut b = Builder::response();
    for i in 0..=MAX_ANSWER_RECORDS {
        b = b.a("many.example", [10, 0, (i >> 8) as u8, i as u8], 5);
    }
    assert_eq!(parse_response(&b.build()), Err(DnsError::TooManyRecords));
    // 512 records are fine.
    let mut b = Builder::response();
    for i in 0..MAX_ANSWER_RECORDS {
        b = b.a("many.example", [10, 0, (i >> 8) as u8, i as u8], 5);
    }
    assert_eq!(parse_response(&b.build()).unwrap().len(), MAX_ANSWER_RECORDS);
    // 100 aliases of one name with 100 addresses: 10,100 facts, too many.
    let mut b = Builder::response();
    for i in 0..100 {
        b = b.cname(&format!("alias{i}.example"), "target.example", 5);
    }
    for i in 0..100u8 {
        b = b.a("target.example", [10, 1, 0, i], 5);
    }
    assert_eq!(parse_response(&b.build()), Err(DnsError::TooManyRecords));
}

#[test]
fn tcp_payloads() {
    let one = Builder::response().a("one.example", [1, 0, 0, 1], 10).build();
    let two = Builder::response().a("two.example", [2, 0, 0, 2], 20).build();
    let mut payload = tcp_frame(&one);
    payload.extend_from_slice(&tcp_frame(&two));
    assert_eq!(
        parse_tcp_payload(&payload),
        Ok(vec![ans("one.example", v4(1, 0, 0, 1), 10), ans("two.example", v4(2, 0, 0, 2), 20),])
    );
    assert_eq!(parse_tcp_payload(&[]), Ok(vec![]));
    // A partial second message (and a lone length byte): Truncated; the partial form keeps the
    // first message's answers.
    for cut in [payload.len() - 1, tcp_frame(&one).len() + 1] {
        assert_eq!(parse_tcp_payload(&payload[..cut]), Err(DnsError::Truncated));
        assert_eq!(
            parse_tcp_payload_partial(&payload[..cut]),
            (vec![ans("one.example", v4(1, 0, 0, 1), 10)], Some(DnsError::Truncated))
        );
    }
    // A malformed message is its own error.
    let mut bad = tcp_frame(&one);
    bad.extend_from_slice(&tcp_frame(&[0; 12]));
    assert_eq!(parse_tcp_payload(&bad), Err(DnsError::NotResponse));
}

#[test]
fn error_names_are_complete_and_in_order() {
    let names: Vec<&str> = DnsError::ALL.iter().map(DnsError::name).collect();
    assert_eq!(names, DNS_ERROR_NAMES);
    assert_eq!(DnsError::PointerLoop.to_string(), "pointer_loop");
}

// ---------------------------------------------------------------------------------------------
// Patterns.

fn pat(text: &str) -> DomainPattern {
    DomainPattern::parse(text).unwrap()
}

#[test]
fn patterns_of_the_calico_docs() {
    let exact = pat("Example.com.");
    assert_eq!(exact.as_str(), "example.com");
    assert!(exact.matches("example.com") && exact.matches("EXAMPLE.com."));
    assert!(!exact.matches("a.example.com") && !exact.matches("example.co"));

    let p = pat("*.example.com");
    assert!(p.matches("a.example.com") && p.matches("a.b.example.com") && p.matches("A.Example.Com."));
    assert!(!p.matches("example.com") && !p.matches(".example.com") && !p.matches("aexample.com"));
    assert!(!p.matches("a.example.com.evil") && !p.matches("a..example.com"));

    let p = pat("www.*.com");
    assert!(p.matches("www.a.com") && p.matches("www.a.b.com"));
    assert!(!p.matches("www.com") && !p.matches("www..com") && !p.matches("wwwa.b.com"));
    assert!(!p.matches("x.www.a.com") && !p.matches("www.a.com.x"));

    let p = pat("update.*");
    assert!(p.matches("update.a") && p.matches("update.a.b") && p.matches("update.a."));
    assert!(!p.matches("update") && !p.matches("update.") && !p.matches("x.update.a"));

    let any = pat("*");
    assert!(any.matches("a") && any.matches("a.b.c"));
    assert!(!any.matches("") && !any.matches("."));
}

#[test]
fn invalid_patterns_are_refused() {
    for bad in
        ["", ".", "*.*", "*.example.*", "www.g*.com", "**.com", "a..b", ".a.com", "a b.com", "ex\u{e9}.com", "*a.com"]
    {
        assert!(DomainPattern::parse(bad).is_err(), "{bad:?} accepted");
    }
    assert!(DomainPattern::parse(&"a".repeat(64)).is_err());
    assert!(DomainPattern::parse(&"a".repeat(63)).is_ok());
}

// ---------------------------------------------------------------------------------------------
// The facts store.

const S: u64 = 1_000_000_000;

#[test]
fn facts_are_valid_in_their_window_with_grace() {
    let facts = DomainFacts::new(100, 5);
    let ip = v4(1, 2, 3, 4);
    assert!(facts.learn("WWW.Example.com.", ip, 10, 100 * S));
    let p = [pat("*.example.com")];
    assert!(!facts.matches(ip, Some(99 * S), &p), "before it was learned");
    assert!(facts.matches(ip, Some(100 * S), &p));
    assert!(facts.matches(ip, Some(110 * S), &p), "at the TTL");
    assert!(facts.matches(ip, Some(115 * S), &p), "in the grace");
    assert!(!facts.matches(ip, Some(115 * S + 1), &p), "after the grace");
    assert!(facts.matches(ip, None, &p), "at any time");
    assert!(!facts.matches(ip, None, &[pat("example.com")]));
    assert!(!facts.matches(v4(1, 2, 3, 5), None, &p));
    assert_eq!(facts.names_at(ip, Some(105 * S)), vec!["www.example.com"]);
    assert!(facts.names_at(ip, Some(200 * S)).is_empty());
}

#[test]
fn many_names_share_an_address_and_both_families_are_kept() {
    let facts = DomainFacts::new(100, 0);
    let ip = v4(10, 0, 0, 1);
    facts.learn("b.example", ip, 10, 0);
    facts.learn("a.example", ip, 10, 0);
    facts.learn("c.example", ip, 1, 0);
    assert_eq!(facts.names_at(ip, Some(5 * S)), vec!["a.example", "b.example"]);
    assert_eq!(facts.names_at(ip, None), vec!["a.example", "b.example", "c.example"]);
    assert!(facts.matches(ip, Some(0), &[pat("nothing.example"), pat("c.example")]));
    // IPv6, and an IPv4-mapped address finds the IPv4 facts.
    let v6: IpAddr = "2001:db8::1".parse().unwrap();
    facts.learn("six.example", v6, 10, 0);
    assert_eq!(facts.names_at(v6, None), vec!["six.example"]);
    let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
    assert_eq!(facts.names_at(mapped, None).len(), 3);
    assert_eq!(facts.len(), 4);
}

#[test]
fn refresh_keeps_the_later_window() {
    let facts = DomainFacts::new(100, 0);
    let ip = v4(1, 1, 1, 1);
    let p = [pat("a.example")];
    assert!(facts.learn("a.example", ip, 10, 0));
    let g = facts.generation();
    assert!(!facts.learn("a.example.", ip, 10, 5 * S), "known: not new");
    assert!(facts.generation() > g);
    assert!(facts.matches(ip, Some(15 * S), &p), "extended to 15 s");
    assert!(facts.matches(ip, Some(0), &p), "and still valid from 0 s");
    assert!(!facts.matches(ip, Some(15 * S + 1), &p));
    // A shorter window inside it changes nothing.
    let g = facts.generation();
    assert!(!facts.learn("a.example", ip, 1, 6 * S));
    assert_eq!(facts.generation(), g);
    assert!(facts.matches(ip, Some(15 * S), &p));
    // A disjoint later window replaces it; a disjoint earlier one does not.
    assert!(!facts.learn("a.example", ip, 10, 100 * S));
    assert!(!facts.matches(ip, Some(50 * S), &p) && !facts.matches(ip, Some(0), &p));
    assert!(facts.matches(ip, Some(110 * S), &p));
    let g = facts.generation();
    assert!(!facts.learn("a.example", ip, 10, 20 * S));
    assert_eq!(facts.generation(), g);
    assert!(!facts.matches(ip, Some(25 * S), &p));
    assert_eq!(facts.len(), 1);
    let st = facts.stats();
    assert_eq!((st.learned, st.refreshed), (1, 4));
    // The eviction order follows the new expiry.
    assert_eq!(facts.expire(109 * S), 0);
    assert_eq!(facts.expire(111 * S), 1);
}

#[test]
fn expire_drops_what_ended_before_now() {
    let facts = DomainFacts::new(100, 1);
    facts.learn("a.x", v4(1, 0, 0, 1), 10, 0); // until 11 s
    facts.learn("b.x", v4(1, 0, 0, 2), 20, 0); // until 21 s
    facts.learn("b.x", v4(1, 0, 0, 3), 30, 0); // until 31 s
    assert_eq!(facts.expire(11 * S), 0, "valid through 11 s inclusive");
    assert_eq!(facts.expire(11 * S + 1), 1);
    let g = facts.generation();
    assert_eq!(facts.expire(25 * S), 1);
    assert!(facts.generation() > g);
    assert_eq!(facts.len(), 1);
    assert_eq!(facts.stats().expired, 2);
    assert_eq!(facts.names_at(v4(1, 0, 0, 3), None), vec!["b.x"]);
    assert!(facts.names_at(v4(1, 0, 0, 2), None).is_empty());
}

#[test]
fn a_full_store_evicts_the_first_expiring_fact() {
    let facts = DomainFacts::new(3, 0);
    facts.learn("long.x", v4(1, 0, 0, 1), 100, 0);
    facts.learn("short.x", v4(1, 0, 0, 2), 5, 0);
    facts.learn("mid.x", v4(1, 0, 0, 3), 50, 0);
    assert!(facts.learn("new.x", v4(1, 0, 0, 4), 1, 0), "the newcomer is kept");
    assert_eq!(facts.len(), 3);
    assert!(facts.names_at(v4(1, 0, 0, 2), None).is_empty(), "short.x went");
    assert_eq!(facts.stats().evicted, 1);
    // Next to go: new.x (expires at 1 s).
    facts.learn("other.x", v4(1, 0, 0, 5), 60, 0);
    assert!(facts.names_at(v4(1, 0, 0, 4), None).is_empty());
    assert_eq!(facts.names_at(v4(1, 0, 0, 1), None), vec!["long.x"]);
    assert_eq!(facts.stats().evicted, 2);
    // A flood keeps the store at its capacity.
    for i in 0..1000u32 {
        facts.learn(&format!("flood{i}.x"), IpAddr::V4(Ipv4Addr::from(i)), 10, 0);
    }
    assert_eq!(facts.len(), 3);
    assert_eq!(facts.stats().evicted, 1002);
}

#[test]
fn learn_answers_of_a_message() {
    let msg = Builder::response().cname("www.a.com", "b.net", 300).a("b.net", [1, 2, 3, 4], 60).build();
    let facts = DomainFacts::new(10, 0);
    assert_eq!(facts.learn_answers(&parse_response(&msg).unwrap(), 0), 2);
    assert_eq!(facts.learn_answers(&parse_response(&msg).unwrap(), S), 0);
    assert_eq!(facts.names_at(v4(1, 2, 3, 4), Some(S)), vec!["b.net", "www.a.com"]);
    assert!(facts.matches(v4(1, 2, 3, 4), Some(61 * S), &[pat("*.a.com")]));
    assert!(!facts.matches(v4(1, 2, 3, 4), Some(62 * S), &[pat("*.a.com")]));
    // Empty names teach nothing.
    assert!(!facts.learn(".", v4(1, 2, 3, 4), 1, 0));
}

#[test]
fn facts_are_shared_between_threads() {
    let facts = std::sync::Arc::new(DomainFacts::new(1000, 0));
    let writers: Vec<_> = (0..4u8)
        .map(|t| {
            let facts = facts.clone();
            std::thread::spawn(move || {
                for i in 0..500u32 {
                    facts.learn(&format!("t{t}-{i}.x"), v4(10, t, (i >> 8) as u8, i as u8), 10, 0);
                }
            })
        })
        .collect();
    for _ in 0..1000 {
        let _ = facts.matches(v4(10, 0, 0, 1), Some(0), &[pat("*.x")]);
    }
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(facts.len(), 1000);
    assert_eq!(facts.stats().learned, 2000);
    assert_eq!(facts.stats().evicted, 1000);
}

// ---------------------------------------------------------------------------------------------
// Property tests: no input makes the decoder panic, and what it returns is well formed.

fn check_answers(answers: &[Answer]) {
    for a in answers {
        assert!(!a.name.is_empty() && a.name.len() <= 253, "{a:?}");
        assert!(!a.name.starts_with('.') && !a.name.ends_with('.') && !a.name.contains(".."));
        assert!(a.name.bytes().all(|b| (0x21..=0x7e).contains(&b) && !b.is_ascii_uppercase()));
    }
    assert!(answers.len() <= MAX_FACTS_PER_MESSAGE);
}

fn valid_messages() -> Vec<Vec<u8>> {
    let mut compressed = Builder::response().question("www.a.com", 1).build();
    compressed[7] = 2;
    compressed.extend_from_slice(&rr(&[0xc0, 12], 5, 1, 100, &[1, b'b', 0xc0, 16]));
    let b_at = compressed.len() - 4;
    compressed.extend_from_slice(&rr(&[0xc0, b_at as u8], 1, 1, 50, &[10, 0, 0, 1]));
    vec![
        compressed,
        Builder::response()
            .question("www.a.com", 1)
            .cname("www.a.com", "b.net", 300)
            .cname("b.net", "c.org", 60)
            .a("c.org", [1, 2, 3, 4], 120)
            .aaaa("c.org", Ipv6Addr::LOCALHOST, 120)
            .opt()
            .build(),
        Builder::response()
            .question("example.com", 1)
            .a("example.com", [1, 2, 3, 4], 300)
            .authority_raw(rr(&wire_name("com"), 2, 1, 60, &wire_name("ns.example.net")))
            .build(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(answers) = parse_response(&bytes) {
            check_answers(&answers);
        }
        let (answers, _) = parse_tcp_payload_partial(&bytes);
        check_answers(&answers);
        let _ = parse_tcp_payload(&bytes);
    }

    #[test]
    fn arbitrary_bodies_behind_a_response_header_never_panic(
        counts in proptest::array::uniform4(0u8..6),
        body in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut msg = vec![0x12, 0x34, 0x81, 0x80];
        for c in counts {
            msg.extend_from_slice(&u16::from(c).to_be_bytes());
        }
        msg.extend_from_slice(&body);
        if let Ok(answers) = parse_response(&msg) {
            check_answers(&answers);
        }
    }

    #[test]
    fn mutated_valid_messages_never_panic(
        which in 0usize..3,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut msg = valid_messages().swap_remove(which);
        for (at, byte) in edits {
            let i = at.index(msg.len());
            msg[i] = byte;
        }
        if truncate {
            msg.truncate(cut.index(msg.len() + 1));
        }
        if let Ok(answers) = parse_response(&msg) {
            check_answers(&answers);
        }
        let framed = tcp_frame(&msg);
        prop_assert_eq!(parse_tcp_payload(&framed), parse_response(&msg));
    }
}

#[test]
fn the_valid_messages_of_the_property_tests_parse() {
    for msg in valid_messages() {
        assert!(!parse_response(&msg).unwrap().is_empty());
    }
}
