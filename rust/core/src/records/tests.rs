use super::*;

fn read(format: Format, input: &[u8], chunk: usize) -> (RecordBatch, Stream) {
    let mut s = Stream::new(format).expect("a record format");
    let mut out = RecordBatch::default();
    let mut parts = input.chunks(chunk.max(1)).peekable();
    if parts.peek().is_none() {
        s.feed(&[], true, &mut out);
    }
    while let Some(p) = parts.next() {
        s.feed(p, parts.peek().is_none(), &mut out);
    }
    (out, s)
}

fn v4(h: &[u8; 16]) -> String {
    format!("{}.{}.{}.{}", h[12], h[13], h[14], h[15])
}

const HUBBLE: &str = r#"{"flow":{"time":"2024-05-01T10:00:00.5Z","verdict":"FORWARDED","IP":{"source":"10.0.1.10","destination":"10.0.2.20","ipVersion":"IPv4"},"l4":{"TCP":{"source_port":43210,"destination_port":8080,"flags":{"SYN":true}}},"source":{"namespace":"frontend","pod_name":"web"},"destination":{"namespace":"backend","pod_name":"api"},"Type":"L3_L4","traffic_direction":"EGRESS","is_reply":false},"node_name":"n1","time":"2024-05-01T10:00:00.5Z"}
{"time":"2024-05-01T10:00:01Z","verdict":"DROPPED","IP":{"source":"10.0.2.20","destination":"10.0.1.10"},"l4":{"TCP":{"source_port":8080,"destination_port":43211,"flags":{"SYN":true,"ACK":true}}},"is_reply":true}
not json
"#;

#[test]
fn hubble_lines_in_any_chunking() {
    for chunk in [1, 7, 4096] {
        let (out, s) = read(Format::Hubble, HUBBLE.as_bytes(), chunk);
        assert_eq!(out.len(), 2, "chunk {chunk}");
        let (h, c) = (&out.headers[0], &out.counts[0]);
        assert_eq!(
            (v4(&h.src_addr), v4(&h.dst_addr), h.sport, h.dport, h.protocol),
            ("10.0.1.10".into(), "10.0.2.20".into(), 43210, 8080, 6)
        );
        assert_eq!((c.reported, c.orientation, c.flows, c.position), (REPORTED_ALLOW, ORIENT_STATED, 1, 1));
        assert_eq!(c.first_ns, 1_714_557_600_500_000_000);
        assert_eq!(s.names.since(c.src_name as usize)[0].name, "web");
        // the reply is judged as its connection's opening direction
        let (h, c) = (&out.headers[1], &out.counts[1]);
        assert_eq!(
            (v4(&h.src_addr), h.sport, h.dport, c.orientation, c.reported, c.flows),
            ("10.0.1.10".into(), 43211, 8080, ORIENT_REVERSED, REPORTED_DENY, 0)
        );
        assert_eq!(s.problems.counts.get("not_json"), Some(&1));
        assert_eq!(s.problems.first[0].1, 3);
    }
}

#[test]
fn calico_and_goldmane() {
    let input = concat!(
        r#"{"start_time":1700000000,"end_time":1700000300,"action":"deny","source_ip":"10.0.1.10","source_name":"web","source_namespace":"frontend","source_type":"wep","source_port":null,"dest_ip":"10.0.2.20","dest_name":"-","dest_name_aggr":"api-*","dest_namespace":"backend","dest_type":"wep","dest_port":5432,"proto":"tcp","reporter":"dst","bytes_in":10,"bytes_out":20,"packets_in":1,"packets_out":2,"num_flows":3,"num_flows_started":2}"#,
        "\n",
        r#"{"id":"7","flow":{"Key":{"source_name":"client-*","source_namespace":"a","source_type":"WorkloadEndpoint","dest_name":"server-*","dest_namespace":"b","dest_type":"WorkloadEndpoint","dest_port":"80","proto":"TCP","reporter":"Dst","action":"Allow"},"start_time":"1700000000","end_time":"1700000015","packets_in":"5","bytes_in":"500","num_connections_started":"4"}}"#,
        "\n",
    );
    let (out, s) = read(Format::Calico, input.as_bytes(), 13);
    assert_eq!(out.len(), 2);
    let c = &out.counts[0];
    assert_eq!((c.packets, c.bytes, c.flows, c.reported, c.has_src, c.has_dst), (3, 30, 2, REPORTED_DENY, 1, 1));
    assert_eq!(out.headers[0].dport, 5432);
    assert_eq!(s.names.since(c.dst_name as usize)[0].name, "api-*");
    let c = &out.counts[1];
    assert_eq!((c.packets, c.bytes, c.flows, c.reported, c.has_src, c.has_dst), (5, 500, 4, REPORTED_ALLOW, 0, 0));
    assert_eq!(
        s.names.since(c.src_name as usize)[0],
        EndpointName { kind: "wep".into(), namespace: "a".into(), name: "client-*".into() }
    );
    assert_eq!(out.headers[1].dport, 80);
}

#[test]
fn vpc_default_and_custom_orders() {
    let default = "2 123456789010 eni-1 10.0.1.10 10.0.2.20 49152 443 6 20 4249 1418530010 1418530070 ACCEPT OK\n\
                   2 123456789010 eni-1 10.0.2.20 10.0.1.10 443 49152 6 18 3000 1418530010 1418530070 REJECT OK\n\
                   2 123456789010 eni-1 - - - - - - - 1418530010 1418530070 - NODATA\n\
                   2 123456789010 eni-1 10.0.2.20\n";
    let (out, s) = read(Format::Vpc, default.as_bytes(), 5);
    assert_eq!(out.len(), 2);
    assert_eq!((out.headers[0].sport, out.headers[0].dport, out.counts[0].flows), (49152, 443, 1));
    // the reply's record is turned around and counts no new connection
    assert_eq!(
        (v4(&out.headers[1].src_addr), out.headers[1].dport, out.counts[1].orientation, out.counts[1].flows),
        ("10.0.1.10".into(), 443, ORIENT_REVERSED, 0)
    );
    assert_eq!(out.counts[1].reported, REPORTED_DENY);
    assert_eq!(s.problems.counts.get("nodata"), Some(&1));
    assert_eq!(s.problems.counts.get("truncated_record"), Some(&1));

    let custom = "version vpc-id srcaddr dstaddr pkt-srcaddr pkt-dstaddr srcport dstport protocol tcp-flags packets bytes start end action log-status flow-direction\n\
                  5 vpc-1 10.0.0.5 10.0.0.6 10.0.1.10 10.0.2.20 40000 5432 6 2 3 180 1700000000 1700000060 ACCEPT OK egress\n";
    let (out, _) = read(Format::Vpc, custom.as_bytes(), 4096);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (v4(&out.headers[0].src_addr), v4(&out.headers[0].dst_addr), out.counts[0].orientation),
        ("10.0.1.10".into(), "10.0.2.20".into(), ORIENT_STATED)
    );
    let unknown = "version src dst\n2 a b\n";
    let (out, s) = read(Format::Vpc, unknown.as_bytes(), 4096);
    assert_eq!(out.len(), 0);
    assert_eq!(s.problems.counts.get("unknown_field_order"), Some(&2));
}

#[test]
fn conntrack_list_and_events() {
    let input = "tcp      6 431999 ESTABLISHED src=10.0.1.10 dst=10.96.0.10 sport=40000 dport=80 packets=5 bytes=300 src=10.0.2.20 dst=10.0.1.10 sport=8080 dport=40000 packets=4 bytes=200 [ASSURED] mark=0 use=1\n\
                 ipv4     2 udp      17 29 src=10.0.1.10 dst=10.0.2.20 sport=5353 dport=53 [UNREPLIED] src=10.0.2.20 dst=10.0.1.10 sport=53 dport=5353 mark=0 use=1\n\
                 [1700000000.250000]\t    [NEW] icmp     1 30 src=10.0.1.10 dst=10.0.2.20 type=8 code=0 id=7 [UNREPLIED] src=10.0.2.20 dst=10.0.1.10 type=0 code=0 id=7\n\
                 [1700000001.000000]\t [DESTROY] icmp     1 src=10.0.1.10 dst=10.0.2.20 type=8 code=0 id=7 packets=1 bytes=84 src=10.0.2.20 dst=10.0.1.10 type=0 code=0 id=7 packets=1 bytes=84\n\
                 tcp 6 garbage\n";
    let (out, s) = read(Format::Conntrack, input.as_bytes(), 9);
    assert_eq!(out.len(), 4);
    // DNAT: judged against where the connection was delivered
    assert_eq!(
        (v4(&out.headers[0].dst_addr), out.headers[0].dport, out.counts[0].packets, out.counts[0].bytes),
        ("10.0.2.20".into(), 8080, 9, 500)
    );
    assert_eq!((out.headers[1].protocol, out.headers[1].dport), (17, 53));
    assert_eq!((out.headers[2].icmp_type, out.counts[2].flows, out.counts[2].packets), (8, 1, 0));
    assert_eq!((out.counts[3].flows, out.counts[3].packets), (0, 2));
    assert_eq!(s.problems.counts.get("truncated_record"), Some(&1));
}

/// A NetFlow v5 record: source, destination, source port, destination port, protocol, TCP flags.
type V5Record = ([u8; 4], [u8; 4], u16, u16, u8, u8);

fn v5_message(records: &[V5Record]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&5u16.to_be_bytes());
    m.extend_from_slice(&(records.len() as u16).to_be_bytes());
    m.extend_from_slice(&10_000u32.to_be_bytes()); // uptime ms
    m.extend_from_slice(&1_700_000_000u32.to_be_bytes());
    m.extend_from_slice(&0u32.to_be_bytes());
    m.extend_from_slice(&[0; 8]);
    for (s, d, sp, dp, proto, flags) in records {
        let mut r = [0u8; 48];
        r[0..4].copy_from_slice(s);
        r[4..8].copy_from_slice(d);
        r[16..20].copy_from_slice(&3u32.to_be_bytes());
        r[20..24].copy_from_slice(&180u32.to_be_bytes());
        r[24..28].copy_from_slice(&9_000u32.to_be_bytes());
        r[28..32].copy_from_slice(&9_500u32.to_be_bytes());
        r[32..34].copy_from_slice(&sp.to_be_bytes());
        r[34..36].copy_from_slice(&dp.to_be_bytes());
        r[37] = *flags;
        r[38] = *proto;
        m.extend_from_slice(&r);
    }
    m
}

fn ipfix_template_and_data(domain: u32, with_template: bool) -> Vec<u8> {
    let mut sets = Vec::new();
    if with_template {
        // template 256: src v4 (8), dst v4 (12), sport (7), dport (11), proto (4), packets (2, 8 bytes), bytes (1, 8), start ms (152, 8)
        let fields: [(u16, u16); 8] = [(8, 4), (12, 4), (7, 2), (11, 2), (4, 1), (2, 8), (1, 8), (152, 8)];
        let mut t = Vec::new();
        t.extend_from_slice(&256u16.to_be_bytes());
        t.extend_from_slice(&(fields.len() as u16).to_be_bytes());
        for (id, len) in fields {
            t.extend_from_slice(&id.to_be_bytes());
            t.extend_from_slice(&len.to_be_bytes());
        }
        sets.extend_from_slice(&2u16.to_be_bytes());
        sets.extend_from_slice(&((t.len() + 4) as u16).to_be_bytes());
        sets.extend_from_slice(&t);
    }
    let mut d = Vec::new();
    d.extend_from_slice(&[10, 0, 1, 10, 10, 0, 2, 20]);
    d.extend_from_slice(&50000u16.to_be_bytes());
    d.extend_from_slice(&5432u16.to_be_bytes());
    d.push(6);
    d.extend_from_slice(&7u64.to_be_bytes());
    d.extend_from_slice(&700u64.to_be_bytes());
    d.extend_from_slice(&1_700_000_000_000u64.to_be_bytes());
    sets.extend_from_slice(&256u16.to_be_bytes());
    sets.extend_from_slice(&((d.len() + 4) as u16).to_be_bytes());
    sets.extend_from_slice(&d);
    let mut m = Vec::new();
    m.extend_from_slice(&10u16.to_be_bytes());
    m.extend_from_slice(&((sets.len() + 16) as u16).to_be_bytes());
    m.extend_from_slice(&1_700_000_000u32.to_be_bytes());
    m.extend_from_slice(&0u32.to_be_bytes());
    m.extend_from_slice(&domain.to_be_bytes());
    m.extend_from_slice(&sets);
    m
}

#[test]
fn netflow_v5_and_ipfix_back_to_back() {
    let mut input = v5_message(&[
        ([10, 0, 1, 10], [10, 0, 2, 20], 40000, 80, 6, 0x1b),
        ([10, 0, 2, 20], [10, 0, 1, 10], 80, 40000, 6, 0x1b),
    ]);
    input.extend(ipfix_template_and_data(1, false)); // data before its template
    input.extend(ipfix_template_and_data(1, true));
    for chunk in [1, 3, 100, 65536] {
        let (out, s) = read(Format::Netflow, &input, chunk);
        assert_eq!(out.len(), 3, "chunk {chunk}");
        assert_eq!((out.headers[0].dport, out.counts[0].packets, out.counts[0].flows), (80, 3, 1));
        assert_eq!(out.counts[0].first_ns, (1_700_000_000_000 - 1_000) * 1_000_000);
        assert_eq!(
            (out.headers[1].dport, out.headers[1].sport, out.counts[1].orientation, out.counts[1].flows),
            (80, 40000, ORIENT_REVERSED, 0)
        );
        assert_eq!((out.headers[2].dport, out.counts[2].packets, out.counts[2].bytes), (5432, 7, 700));
        assert_eq!(s.problems.counts.get("missing_template"), Some(&1));
        assert_eq!(s.problems.first[0].1, 24 + 2 * 48 + 16); // the data set of the second message
    }
}

#[test]
fn netflow_corruption_resynchronizes() {
    let mut input = v5_message(&[([10, 0, 1, 10], [10, 0, 2, 20], 40000, 80, 6, 2)]);
    input.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0xff]);
    input.extend(v5_message(&[([10, 0, 1, 11], [10, 0, 2, 20], 40001, 80, 6, 2)]));
    let mut cut = v5_message(&[([10, 0, 1, 12], [10, 0, 2, 20], 40002, 80, 6, 2)]);
    cut.truncate(40);
    input.extend(cut);
    let (out, s) = read(Format::Netflow, &input, 17);
    assert_eq!(out.len(), 2);
    assert_eq!(s.problems.counts.get("corrupt_message"), Some(&1));
    assert_eq!(s.problems.counts.get("truncated_record"), Some(&1));
}
