//! Any bytes, as one request head or as a connection's client-to-server stream, either give
//! requests or an HttpError: no panic, no hang. The first two bytes choose how the stream is cut
//! into segments and its max_head. What is parsed is well formed (a token method, a visible-ASCII
//! path starting with `/` or `*` alone, without query, a lowercase host); the stream gives the
//! same result (requests, error, bytes held) cut into segments as whole, holds at most max_head
//! bytes, and stays failed once failed; a request matches an HttpMatch of its own method and path.
//! Through `HttpConns` (sequence numbers, wrapping), each segment preceded by a copy of the next
//! one (ahead of what was read: held back) and followed by a retransmission of itself, the
//! stream gives the same requests or error as whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pyclassify_core::conntrack::FlowKey;
use pyclassify_core::http::{parse_head, Fed, HttpConns, HttpError, HttpMatch, PathMatch, Request, RequestStream};

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn check(r: &Request) {
    assert!(!r.method.is_empty() && r.method.bytes().all(is_tchar), "{r:?}");
    assert!(r.path.starts_with('/') || (r.path == "*" && r.method == "OPTIONS"), "{r:?}");
    assert!(r.path.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b'?' && b != b'#'));
    if let Some(host) = &r.host {
        assert!(!host.is_empty() && !host.bytes().any(|b| b.is_ascii_uppercase()), "{r:?}");
        assert!(host.starts_with('[') || !host.contains(':'), "{r:?}");
    }
    assert!(r.version_minor <= 9);
    let own = HttpMatch {
        methods: vec![r.method.clone()],
        paths: vec![PathMatch::Exact(r.path.clone())],
    };
    assert!(own.matches(r) && HttpMatch::default().matches(r));
    let other = HttpMatch {
        methods: vec![format!("{}X", r.method)],
        paths: vec![PathMatch::Prefix(String::new())],
    };
    assert!(!other.matches(r));
}

fuzz_target!(|input: &[u8]| {
    let (cut, max_head, data) = match input {
        [a, b, rest @ ..] => (usize::from(*a % 32) + 1, usize::from(*b) * 8, rest),
        _ => return,
    };
    if let Ok(r) = parse_head(data) {
        check(&r);
    }

    let mut whole = RequestStream::new(max_head, usize::MAX);
    let mut split = RequestStream::new(max_head, usize::MAX);
    let a = whole.push(data);
    let mut b: Result<Vec<Request>, HttpError> = Ok(Vec::new());
    for segment in data.chunks(cut) {
        match split.push(segment) {
            Ok(requests) => {
                assert!(b.is_ok());
                if let Ok(all) = &mut b {
                    all.extend(requests);
                }
            }
            Err(e) => {
                assert!(b.is_ok() || b == Err(e));
                b = Err(e);
            }
        }
        assert!(split.pending() <= max_head.max(1));
    }
    assert_eq!(a, b);
    assert_eq!(whole.pending(), split.pending());
    match &a {
        Ok(requests) => requests.iter().for_each(check),
        Err(e) => {
            assert_eq!(whole.push(b"GET / HTTP/1.1\r\n\r\n"), Err(*e));
            assert_eq!(whole.pending(), 0);
        }
    }

    let key = FlowKey::new([0; 16], [1; 16], 40000, 80, 6);
    let isn = u32::MAX - u32::from(input[0]); // wraps within the first 256 bytes
    let mut conns = HttpConns::new(1, max_head, usize::MAX);
    assert!(conns.watch(key, Some(isn), 0, |_, _| true));
    let mut via: Result<Vec<Request>, HttpError> = Ok(Vec::new());
    let segments: Vec<&[u8]> = data.chunks(cut).collect();
    let mut seq = isn;
    for (i, segment) in segments.iter().enumerate() {
        let after = seq.wrapping_add(segment.len() as u32);
        if let Some(next) = segments.get(i + 1) {
            assert!(matches!(conns.feed(&key, after, next, 0), Some(Fed::Ahead)));
        }
        match conns.feed(&key, seq, segment, 0) {
            Some(Fed::Requests(requests)) => {
                if let Ok(all) = &mut via {
                    all.extend(requests);
                }
            }
            Some(Fed::Broken(e)) => {
                via = Err(e);
                assert!(conns.feed(&key, after, b"x", 0).is_none()); // forgotten once broken
                break;
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(conns.feed(&key, seq, segment, 0), Some(Fed::Requests(r)) if r.is_empty()));
        seq = after;
    }
    assert_eq!(a, via);

    // Few segments allowed per head: never more than that before a head completes.
    let mut few = RequestStream::new(max_head, 3);
    for segment in data.chunks(cut) {
        if few.push(segment).is_err() {
            break;
        }
    }
});
