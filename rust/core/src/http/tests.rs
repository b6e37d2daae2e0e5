//! Tests of the request-head parser, the stream reassembly and Calico's HTTP match: one file for
//! the module's parts, which share the request builders below.

use proptest::prelude::*;

use super::*;

fn req(method: &str, path: &str, host: Option<&str>, version_minor: u8) -> Request {
    Request { method: method.to_string(), path: path.to_string(), host: host.map(str::to_string), version_minor }
}

fn stream() -> RequestStream {
    RequestStream::new(DEFAULT_MAX_HEAD, DEFAULT_MAX_SEGMENTS)
}

/// Push every segment; the requests of all, or the first error.
fn push_all(s: &mut RequestStream, segments: &[&[u8]]) -> Result<Vec<Request>, HttpError> {
    let mut out = Vec::new();
    for segment in segments {
        out.extend(s.push(segment)?);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// parse_head

#[test]
fn get_post_head_basics() {
    assert_eq!(
        parse_head(b"GET /index.html HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n"),
        Ok(req("GET", "/index.html", Some("example.com"), 1))
    );
    assert_eq!(
        parse_head(b"POST /api/v1/items HTTP/1.1\r\nHost: api\r\nContent-Length: 2\r\n\r\n"),
        Ok(req("POST", "/api/v1/items", Some("api"), 1))
    );
    assert_eq!(parse_head(b"HEAD / HTTP/1.0\r\n\r\n"), Ok(req("HEAD", "/", None, 0)));
    // Methods are tokens, kept as sent (case-sensitive).
    assert_eq!(parse_head(b"get /x HTTP/1.1\r\n\r\n"), Ok(req("get", "/x", None, 1)));
    assert_eq!(parse_head(b"M-SEARCH * HTTP/1.1\r\n\r\n"), Err(HttpError::BadTarget));
    assert_eq!(parse_head(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"), Ok(req("OPTIONS", "*", Some("a"), 1)));
    // Any 1.x minor version; bare LF line ends; OWS around values.
    assert_eq!(parse_head(b"PUT /p HTTP/1.9\nHost:\t h \t\n\n"), Ok(req("PUT", "/p", Some("h"), 9)));
}

#[test]
fn absolute_form() {
    assert_eq!(
        parse_head(b"GET http://Example.COM:8080/a/b?x=1 HTTP/1.1\r\n\r\n"),
        Ok(req("GET", "/a/b", Some("example.com"), 1))
    );
    assert_eq!(parse_head(b"GET HTTPS://h HTTP/1.1\r\n\r\n"), Ok(req("GET", "/", Some("h"), 1)));
    assert_eq!(parse_head(b"GET http://h?q HTTP/1.1\r\n\r\n"), Ok(req("GET", "/", Some("h"), 1)));
    assert_eq!(
        parse_head(b"GET http://[2001:DB8::1]:80/x HTTP/1.1\r\n\r\n"),
        Ok(req("GET", "/x", Some("[2001:db8::1]"), 1))
    );
    // The target's host wins over Host (RFC 9112 §3.2.2); Host must still be valid.
    assert_eq!(
        parse_head(b"GET http://a.example/x HTTP/1.1\r\nHost: b.example\r\n\r\n"),
        Ok(req("GET", "/x", Some("a.example"), 1))
    );
    assert_eq!(parse_head(b"GET http://a.example/x HTTP/1.1\r\nHost: b c\r\n\r\n"), Err(HttpError::BadHeader));
    for bad in [
        &b"GET http://user@h/x HTTP/1.1\r\n\r\n"[..],
        b"GET http:///x HTTP/1.1\r\n\r\n",
        b"GET http://:80/x HTTP/1.1\r\n\r\n",
        b"GET ftp://h/x HTTP/1.1\r\n\r\n",
        b"GET http:/h/x HTTP/1.1\r\n\r\n",
        b"GET http://h:8o/x HTTP/1.1\r\n\r\n",
        b"GET http://[::1/x HTTP/1.1\r\n\r\n",
        b"GET http://[zz]/x HTTP/1.1\r\n\r\n",
        b"GET http://h<x>/ HTTP/1.1\r\n\r\n",
        b"GET x HTTP/1.1\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\n\r\n",
    ] {
        assert_eq!(parse_head(bad), Err(HttpError::BadTarget), "{:?}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn query_and_fragment_stripped_no_decoding() {
    assert_eq!(parse_head(b"GET /search?q=a/b#f HTTP/1.1\r\n\r\n").unwrap().path, "/search");
    assert_eq!(parse_head(b"GET /a#b HTTP/1.1\r\n\r\n").unwrap().path, "/a");
    assert_eq!(parse_head(b"GET /?x HTTP/1.1\r\n\r\n").unwrap().path, "/");
    assert_eq!(parse_head(b"GET /a%2Fb/../c HTTP/1.1\r\n\r\n").unwrap().path, "/a%2Fb/../c");
}

#[test]
fn host_lowercased_port_stripped() {
    let host = |h: &str| parse_head(format!("GET / HTTP/1.1\r\nHost: {h}\r\n\r\n").as_bytes());
    assert_eq!(host("WWW.Example.Com:8443").unwrap().host.as_deref(), Some("www.example.com"));
    assert_eq!(host("10.0.0.1:80").unwrap().host.as_deref(), Some("10.0.0.1"));
    assert_eq!(host("h:").unwrap().host.as_deref(), Some("h"));
    assert_eq!(host("[2001:DB8:0::1]:443").unwrap().host.as_deref(), Some("[2001:db8::1]"));
    assert_eq!(host("a%2Db").unwrap().host.as_deref(), Some("a%2db"));
    assert_eq!(host("").unwrap().host, None);
    for bad in ["a b", "x:80a", ":80", "a/b", "a@b", "[::1", "[::1]x", "%zz", "a:1:2"] {
        assert_eq!(host(bad), Err(HttpError::BadHeader), "{bad:?}");
    }
    // Header names are case-insensitive; a second Host is refused.
    assert_eq!(parse_head(b"GET / HTTP/1.1\r\nhOsT: A\r\n\r\n").unwrap().host.as_deref(), Some("a"));
    assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"), Err(HttpError::BadHeader));
}

#[test]
fn invalid_request_lines() {
    let cases: &[(&[u8], HttpError)] = &[
        (b"G(ET / HTTP/1.1\r\n\r\n", HttpError::BadMethod),
        (b"GET\t/ HTTP/1.1\r\n\r\n", HttpError::BadMethod),
        (b"GE\x00T / HTTP/1.1\r\n\r\n", HttpError::BadMethod),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", HttpError::NotHttp),
        (b"{\"json\": 1}\r\n\r\n", HttpError::NotHttp),
        (b" GET / HTTP/1.1\r\n\r\n", HttpError::BadRequestLine),
        (b"GET\r\n\r\n", HttpError::BadRequestLine),
        (b"GET /\r\n\r\n", HttpError::BadRequestLine),
        (b"GET  / HTTP/1.1\r\n\r\n", HttpError::BadRequestLine),
        (b"GET / HTTP/1.1 \r\n\r\n", HttpError::BadRequestLine),
        (b"GET / HTTP/1.1 x\r\n\r\n", HttpError::BadRequestLine),
        (b"\r\n\r\n", HttpError::BadRequestLine),
        (b"", HttpError::BadRequestLine),
        (b"GET / HTTP/1.1", HttpError::BadRequestLine),
        (b"GET / HTTP/2.0\r\n\r\n", HttpError::BadVersion),
        (b"GET / HTTP/1.10\r\n\r\n", HttpError::BadVersion),
        (b"GET / http/1.1\r\n\r\n", HttpError::BadVersion),
        (b"GET / HTTP/1.x\r\n\r\n", HttpError::BadVersion),
        (b"GET / HTTP/1.\r\n\r\n", HttpError::BadVersion),
        (b"GET / HTTP/1.1\r\r\n\r\n", HttpError::BadVersion), // a bare CR
        (b"GET / RTSP/1.0\r\n\r\n", HttpError::BadVersion),
        (b"GET /a\x01b HTTP/1.1\r\n\r\n", HttpError::BadTarget),
        (b"GET /a\x7fb HTTP/1.1\r\n\r\n", HttpError::BadTarget),
        (b"GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n", HttpError::BadTarget),
        (b"GET /a\rb HTTP/1.1\r\n\r\n", HttpError::BadTarget),
        (b"GET * HTTP/1.1\r\n\r\n", HttpError::BadTarget),
    ];
    for (head, error) in cases {
        assert_eq!(parse_head(head), Err(*error), "{:?}", String::from_utf8_lossy(head));
        // The stream finds the same error, whole or byte by byte.
        // (Except where the stream waits for more: nothing yet, empty lines, no line end yet.)
        if [&b""[..], b"\r\n\r\n", b"GET / HTTP/1.1"].contains(head) {
            assert_eq!(RequestStream::new(1024, 1024).push(head), Ok(vec![]));
        } else {
            let mut s = RequestStream::new(1024, 1024);
            assert_eq!(s.push(head), Err(*error));
            let mut s = RequestStream::new(1024, 1024);
            let bytes: Vec<&[u8]> = head.chunks(1).collect();
            assert_eq!(push_all(&mut s, &bytes), Err(*error), "{head:?}");
        }
    }
}

#[test]
fn invalid_headers() {
    let cases: &[&[u8]] = &[
        b"GET / HTTP/1.1\r\nHost a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
        b"GET / HTTP/1.1\r\n: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nX@Y: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nX-A: a\r\n folded\r\n\r\n",
        b"GET / HTTP/1.1\r\nX-A: a\r\n\tfolded: x\r\n\r\n",
        b"GET / HTTP/1.1\r\n Host: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nX-A: a\x00b\r\n\r\n",
        b"GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n",
        b"GET / HTTP/1.1\r\nX-A: a\x7f\r\n\r\n",
        b"GET / HTTP/1.1\r\nX-A\r: a\r\n\r\n",
        // parse_head: a head not ending in an empty line, or followed by more.
        b"GET / HTTP/1.1\r\n",
        b"GET / HTTP/1.1\r\nX-A: a\r\n",
        b"GET / HTTP/1.1\r\n\r\nbody",
    ];
    for head in cases {
        assert_eq!(parse_head(head), Err(HttpError::BadHeader), "{:?}", String::from_utf8_lossy(head));
    }
    // Values may hold obs-text, spaces and tabs inside; an empty value is fine.
    assert!(parse_head(b"GET / HTTP/1.1\r\nX-A: caf\xc3\xa9 a\tb\r\nX-B:\r\n\r\n").is_ok());
}

#[test]
fn at_most_100_headers() {
    let head = |n: usize| {
        let mut h = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..n {
            h.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        h.extend_from_slice(b"\r\n");
        h
    };
    assert!(parse_head(&head(MAX_HEADERS)).is_ok());
    assert_eq!(parse_head(&head(MAX_HEADERS + 1)), Err(HttpError::TooLong));
}

#[test]
fn http2_preface_is_not_http() {
    assert_eq!(parse_head(b"PRI * HTTP/2.0\r\n\r\n"), Err(HttpError::NotHttp));
    let mut s = stream();
    assert_eq!(s.push(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Err(HttpError::NotHttp));
    // Detected as soon as the preface's request line is there, split or not.
    let mut s = stream();
    assert_eq!(s.push(b"PRI * HT"), Ok(vec![]));
    assert_eq!(s.push(b"TP/2.0"), Err(HttpError::NotHttp));
    assert_eq!(s.push(b"\r\n\r\nSM\r\n\r\n"), Err(HttpError::NotHttp));
    assert_eq!(s.pending(), 0);
}

#[test]
fn content_length_rules() {
    let cl = |v: &str| parse_head(format!("POST / HTTP/1.1\r\n{v}\r\n\r\n").as_bytes());
    for ok in [
        "Content-Length: 5",
        "content-length:5",
        "Content-Length: 5, 5",
        "Content-Length: 5\r\nContent-Length: 5",
        "Content-Length: 005\r\nContent-Length: 5",
        "Content-Length: 18446744073709551615",
        "Transfer-Encoding: chunked",
        "Transfer-Encoding: gzip, chunked",
        "Transfer-Encoding: gzip\r\nTransfer-Encoding: Chunked",
        "Transfer-Encoding: , chunked",
    ] {
        assert!(cl(ok).is_ok(), "{ok:?}");
    }
    for bad in [
        "Content-Length: 5\r\nContent-Length: 6",
        "Content-Length: 5, 6",
        "Content-Length: -1",
        "Content-Length: +5",
        "Content-Length: 0x10",
        "Content-Length: 5 5",
        "Content-Length: ",
        "Content-Length: 5,",
        "Content-Length: 18446744073709551616",
        // Request smuggling: both framings.
        "Content-Length: 5\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding: chunked\r\nContent-Length: 0",
        "Transfer-Encoding: chunked, gzip",
        "Transfer-Encoding: chunked, chunked",
        "Transfer-Encoding: gzip",
        "Transfer-Encoding: ",
        "Transfer-Encoding: chunked\u{b}",
        "Transfer-Encoding: \"chunked\"",
    ] {
        assert_eq!(cl(bad), Err(HttpError::BadHeader), "{bad:?}");
    }
    // Transfer-Encoding in HTTP/1.0 is faulty framing (RFC 9112 §6.1).
    assert_eq!(parse_head(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), Err(HttpError::BadHeader));
}

#[test]
fn error_names() {
    let names: Vec<&str> = HttpError::ALL.iter().map(HttpError::name).collect();
    assert_eq!(names, HTTP_ERROR_NAMES);
    let unique: std::collections::HashSet<&str> = names.iter().copied().collect();
    assert_eq!(unique.len(), names.len());
    assert_eq!(HttpError::TooManySegments.to_string(), "too_many_segments");
}

// ---------------------------------------------------------------------------------------------
// RequestStream

const GET_A: &[u8] = b"GET /a HTTP/1.1\r\nHost: Example.com:80\r\nUser-Agent: t\r\n\r\n";

#[test]
fn one_byte_segments_complete_with_the_head() {
    let mut s = RequestStream::new(DEFAULT_MAX_HEAD, GET_A.len());
    for (i, b) in GET_A.iter().enumerate() {
        let got = s.push(std::slice::from_ref(b)).unwrap();
        if i + 1 < GET_A.len() {
            assert!(got.is_empty(), "at {i}");
            assert_eq!(s.pending(), i + 1);
        } else {
            assert_eq!(got, vec![req("GET", "/a", Some("example.com"), 1)]);
            assert_eq!(s.pending(), 0);
        }
    }
    // The count starts again for the next head.
    for b in GET_A {
        s.push(std::slice::from_ref(b)).unwrap();
    }
}

#[test]
fn too_many_segments() {
    let mut s = RequestStream::new(DEFAULT_MAX_HEAD, GET_A.len() - 1);
    for (i, b) in GET_A.iter().enumerate() {
        let got = s.push(std::slice::from_ref(b));
        if i + 1 < GET_A.len() {
            assert_eq!(got, Ok(vec![]));
        } else {
            assert_eq!(got, Err(HttpError::TooManySegments));
        }
    }
    // Final: every later push fails the same way, nothing held.
    assert_eq!(s.push(b"GET / HTTP/1.1\r\n\r\n"), Err(HttpError::TooManySegments));
    assert_eq!(s.pending(), 0);
    // Empty segments are not counted.
    let mut s = RequestStream::new(DEFAULT_MAX_HEAD, 2);
    assert_eq!(s.push(b"GET / HT"), Ok(vec![]));
    for _ in 0..10 {
        assert_eq!(s.push(b""), Ok(vec![]));
    }
    assert_eq!(s.push(b"TP/1.1\r\n\r\n").unwrap().len(), 1);
}

#[test]
fn head_over_max_head_is_too_long() {
    let len = GET_A.len();
    // Exactly max_head fits, whole or split.
    let mut s = RequestStream::new(len, 64);
    assert_eq!(s.push(GET_A).unwrap().len(), 1);
    let mut s = RequestStream::new(len, 64);
    assert_eq!(push_all(&mut s, &[&GET_A[..10], &GET_A[10..]]).unwrap().len(), 1);
    // One byte less does not.
    let mut s = RequestStream::new(len - 1, 64);
    assert_eq!(s.push(GET_A), Err(HttpError::TooLong));
    let mut s = RequestStream::new(len - 1, 64);
    assert_eq!(s.push(&GET_A[..len - 2]), Ok(vec![]));
    assert_eq!(s.push(&GET_A[len - 2..]), Err(HttpError::TooLong));
    // A huge head in one segment: at most max_head bytes are ever held.
    let mut big = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
    big.resize(100_000, b'a');
    let mut s = RequestStream::new(1000, 64);
    assert_eq!(s.push(&big[..999]), Ok(vec![]));
    assert_eq!(s.pending(), 999);
    assert_eq!(s.push(&big[999..]), Err(HttpError::TooLong));
    assert_eq!(s.pending(), 0);
}

#[test]
fn pipelined_requests_in_one_segment() {
    let mut s = stream();
    let got = s
        .push(
            b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nHEAD /2 HTTP/1.1\r\nHost: a\r\n\r\nDELETE /3?x HTTP/1.1\r\n\r\nGET /4",
        )
        .unwrap();
    assert_eq!(
        got,
        vec![req("GET", "/1", Some("a"), 1), req("HEAD", "/2", Some("a"), 1), req("DELETE", "/3", None, 1),]
    );
    assert_eq!(s.pending(), 6);
    assert_eq!(s.push(b" HTTP/1.1\r\n\r\n").unwrap(), vec![req("GET", "/4", None, 1)]);
}

#[test]
fn content_length_body_between_requests() {
    // The body looks like a request: it must not be read as one.
    let body = b"GET /smuggled HTTP/1.1\r\n\r\n";
    let mut bytes = format!("POST /a HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(b"GET /b HTTP/1.1\r\n\r\n");
    let want = vec![req("POST", "/a", None, 1), req("GET", "/b", None, 1)];
    assert_eq!(stream().push(&bytes), Ok(want.clone()));
    // Split anywhere, the same; while in the body nothing is held.
    for cut in 1..bytes.len() {
        let mut s = stream();
        let (x, y) = bytes.split_at(cut);
        let mut got = s.push(x).unwrap();
        if cut >= bytes.len() - body.len() - 19 && cut <= bytes.len() - 19 {
            assert_eq!(s.pending(), 0, "cut {cut}");
        }
        got.extend(s.push(y).unwrap());
        assert_eq!(got, want, "cut {cut}");
    }
    // A body spread over many more segments than a head may use, then a request.
    let mut s = RequestStream::new(DEFAULT_MAX_HEAD, 4);
    assert_eq!(s.push(b"PUT /big HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n").unwrap().len(), 1);
    for _ in 0..1000 {
        assert_eq!(s.push(&[b'x'; 1000]), Ok(vec![]));
        assert_eq!(s.pending(), 0);
    }
    assert_eq!(s.push(b"GET /after HTTP/1.1\r\n\r\n").unwrap(), vec![req("GET", "/after", None, 1)]);
    // Content-Length: 0 and GET without a body end at their heads.
    let mut s = stream();
    let got = s.push(b"POST /z HTTP/1.1\r\nContent-Length: 0\r\n\r\nGET /y HTTP/1.1\r\n\r\n");
    assert_eq!(got.unwrap().len(), 2);
}

const CHUNKED: &[u8] = b"POST /up HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
5\r\nhello\r\n16;name=\"v\" \r\nGET /fake HTTP/1.1\r\n\r\n\r\n0\r\nX-Trailer: t\r\n\r\n\
GET /next HTTP/1.1\r\n\r\n";

#[test]
fn chunked_body_between_requests() {
    let want = vec![req("POST", "/up", None, 1), req("GET", "/next", None, 1)];
    assert_eq!(stream().push(CHUNKED), Ok(want.clone()));
    let mut s = RequestStream::new(DEFAULT_MAX_HEAD, 1000);
    let bytes: Vec<&[u8]> = CHUNKED.chunks(1).collect();
    assert_eq!(push_all(&mut s, &bytes), Ok(want.clone()));
    for cut in 1..CHUNKED.len() {
        let mut s = stream();
        assert_eq!(push_all(&mut s, &[&CHUNKED[..cut], &CHUNKED[cut..]]), Ok(want.clone()));
    }
    // Bare LFs, no trailers, a zero with leading zeros.
    let bare = b"POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n3\nabc\n000\n\nGET /n HTTP/1.1\n\n";
    assert_eq!(stream().push(bare).unwrap().len(), 2);
}

#[test]
fn chunked_framing_errors() {
    let head = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (body, error) in [
        (&b"zz\r\n"[..], HttpError::BadHeader),
        (b"\r\n", HttpError::BadHeader),
        (b";x\r\n", HttpError::BadHeader),
        (b"-1\r\n", HttpError::BadHeader),
        (b"5\rx", HttpError::BadHeader),
        (b"5 x\x00\r\n", HttpError::BadHeader),
        (b"3\r\nabcX", HttpError::BadHeader),
        (b"3\r\nabc\rX", HttpError::BadHeader),
        (b"10000000000000000\r\n", HttpError::BadHeader),
        (b"0\r\nX: \x01\r\n\r\n", HttpError::BadHeader),
        (b"0\r\nX: a\rb", HttpError::BadHeader),
        (b"0\r\n\rX", HttpError::BadHeader),
    ] {
        let mut bytes = head.to_vec();
        bytes.extend_from_slice(body);
        assert_eq!(stream().push(&bytes), Err(error), "{:?}", String::from_utf8_lossy(body));
    }
    // A chunk-size line, or a trailer section, longer than max_head.
    let mut s = RequestStream::new(100, 8);
    assert_eq!(s.push(head).unwrap().len(), 1);
    assert_eq!(s.push(b"5;"), Ok(vec![]));
    assert_eq!(s.push(&[b'a'; 98]), Ok(vec![]));
    assert_eq!(s.push(b"a"), Err(HttpError::TooLong));
    let mut s = RequestStream::new(100, 8);
    assert_eq!(s.push(head).unwrap().len(), 1);
    assert_eq!(s.push(b"0\r\nX: "), Ok(vec![]));
    assert_eq!(s.push(&[b'a'; 200]), Err(HttpError::TooLong));
}

#[test]
fn empty_lines_between_requests_are_skipped() {
    let mut s = stream();
    let got = push_all(&mut s, &[b"\r\n\r\nGET /a HTTP/1.1\r\n\r\n\r\n", b"\r", b"\nGET /b HTTP/1.1\r\n\r\n\n"]);
    assert_eq!(got, Ok(vec![req("GET", "/a", None, 1), req("GET", "/b", None, 1)]));
    assert_eq!(s.pending(), 0);
    // A CR not followed by LF is not an empty line.
    assert_eq!(stream().push(b"\r\rGET / HTTP/1.1\r\n\r\n"), Err(HttpError::NotHttp));
}

#[test]
fn not_http_fails_at_once() {
    // A TLS ClientHello start: no line end needed to tell.
    let mut s = stream();
    assert_eq!(s.push(&[0x16, 0x03, 0x01, 0x02, 0x00]), Err(HttpError::NotHttp));
    // A bad method, target or (once the line is complete) version before the head completes.
    assert_eq!(stream().push(b"GE(T"), Err(HttpError::BadMethod));
    assert_eq!(stream().push(b"GET /a\x00"), Err(HttpError::BadTarget));
    assert_eq!(stream().push(b"GET /a HTTP/9.9\r\nHost: x"), Err(HttpError::BadVersion));
    // ...but not a line that is merely unfinished.
    let mut s = stream();
    assert_eq!(s.push(b"GET /a HTTP/1.1\r"), Ok(vec![]));
    assert_eq!(s.push(b"\nHost: x\r\n"), Ok(vec![]));
    assert_eq!(s.push(b"\r\n").unwrap().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// HttpMatch

#[test]
fn http_match() {
    let get = req("GET", "/api/v1/items", Some("h"), 1);
    let post = req("POST", "/api", None, 1);
    let any = HttpMatch::default();
    assert!(any.matches(&get) && any.matches(&post));

    let methods = HttpMatch { methods: vec!["GET".into(), "HEAD".into()], paths: vec![] };
    assert!(methods.matches(&get));
    assert!(!methods.matches(&post));
    assert!(!methods.matches(&req("get", "/api/v1/items", None, 1)));

    let exact = HttpMatch { methods: vec![], paths: vec![PathMatch::Exact("/api".into())] };
    assert!(exact.matches(&post));
    assert!(!exact.matches(&get));
    assert!(!exact.matches(&req("POST", "/api/", None, 1)));

    let prefix = HttpMatch { methods: vec![], paths: vec![PathMatch::Prefix("/api/v1".into())] };
    assert!(prefix.matches(&get));
    assert!(!prefix.matches(&post));
    assert!(prefix.matches(&req("GET", "/api/v10", None, 1))); // a plain string prefix

    let both = HttpMatch {
        methods: vec!["POST".into()],
        paths: vec![PathMatch::Exact("/x".into()), PathMatch::Prefix("/api".into())],
    };
    assert!(both.matches(&post));
    assert!(!both.matches(&get)); // path matches, method does not
    assert!(!both.matches(&req("POST", "/y", None, 1)));

    // The query string is not part of the path.
    let parsed = parse_head(b"GET /api?x=/admin HTTP/1.1\r\n\r\n").unwrap();
    assert!(exact.matches(&parsed));
}

// ---------------------------------------------------------------------------------------------
// Properties

/// A valid request: its bytes and what parsing them gives.
fn valid_request() -> impl Strategy<Value = (Vec<u8>, Request)> {
    let method = prop_oneof![
        Just("GET".to_string()),
        Just("POST".to_string()),
        Just("HEAD".to_string()),
        Just("OPTIONS".to_string()),
        "[A-Z][A-Za-z_-]{0,7}",
    ];
    let path = "(/[a-zA-Z0-9._~%!$&'()*+,;=:@-]{0,8}){1,4}";
    let query = proptest::option::of("[a-z0-9=&/?]{0,10}");
    let host = proptest::option::of(("[a-zA-Z0-9.-]{1,12}", proptest::option::of(0u16..)));
    let headers = proptest::collection::vec(("X-[A-Za-z0-9]{1,8}", "[ -~]{0,16}"), 0..4);
    let body = prop_oneof![
        Just(None),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(|b| Some((false, vec![b]))),
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..20), 0..4).prop_map(|c| Some((true, c))),
    ];
    (method, path, query, host, headers, body, any::<bool>(), any::<bool>()).prop_map(
        |(method, path, query, host, headers, body, bare_lf, http10)| {
            let nl = if bare_lf { "\n" } else { "\r\n" };
            let chunked = matches!(body, Some((true, _)));
            let minor = if http10 && !chunked { 0 } else { 1 };
            let mut head = format!("{method} {path}");
            if let Some(q) = &query {
                head.push('?');
                head.push_str(q);
            }
            head.push_str(&format!(" HTTP/1.{minor}{nl}"));
            if let Some((name, port)) = &host {
                head.push_str(&format!("Host: {name}"));
                if let Some(p) = port {
                    head.push_str(&format!(":{p}"));
                }
                head.push_str(nl);
            }
            for (name, value) in &headers {
                head.push_str(&format!("{name}: {value}{nl}"));
            }
            let mut tail = Vec::new();
            match &body {
                None => {}
                Some((false, parts)) => {
                    let b = &parts[0];
                    head.push_str(&format!("Content-Length: {}{nl}", b.len()));
                    tail.extend_from_slice(b);
                }
                Some((true, chunks)) => {
                    head.push_str(&format!("Transfer-Encoding: chunked{nl}"));
                    for c in chunks {
                        tail.extend_from_slice(format!("{:x}{nl}", c.len()).as_bytes());
                        tail.extend_from_slice(c);
                        tail.extend_from_slice(nl.as_bytes());
                    }
                    tail.extend_from_slice(format!("0{nl}X-T: 1{nl}{nl}").as_bytes());
                }
            }
            head.push_str(nl);
            let mut bytes = head.into_bytes();
            bytes.extend_from_slice(&tail);
            let request =
                Request { method, path, host: host.map(|(h, _)| h.to_ascii_lowercase()), version_minor: minor };
            (bytes, request)
        },
    )
}

/// Push `bytes` cut at `cuts`; the requests of all pushes, or the first error.
fn push_cut(s: &mut RequestStream, bytes: &[u8], cuts: &[prop::sample::Index]) -> Result<Vec<Request>, HttpError> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
    at.push(0);
    at.push(bytes.len());
    at.sort_unstable();
    let segments: Vec<&[u8]> = at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect();
    push_all(s, &segments)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn valid_streams_split_anywhere_give_the_same_requests(
        requests in proptest::collection::vec(valid_request(), 1..5),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..20),
    ) {
        let bytes: Vec<u8> = requests.iter().flat_map(|(b, _)| b.clone()).collect();
        let want: Vec<Request> = requests.into_iter().map(|(_, r)| r).collect();
        let mut whole = RequestStream::new(DEFAULT_MAX_HEAD, DEFAULT_MAX_SEGMENTS);
        prop_assert_eq!(whole.push(&bytes), Ok(want.clone()));
        prop_assert_eq!(whole.pending(), 0);
        let mut split = RequestStream::new(DEFAULT_MAX_HEAD, DEFAULT_MAX_SEGMENTS);
        prop_assert_eq!(push_cut(&mut split, &bytes, &cuts), Ok(want));
        prop_assert_eq!(split.pending(), 0);
    }

    #[test]
    fn arbitrary_segments_never_panic(
        segments in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..12),
        max_head in 0usize..200,
        max_segments in 0usize..8,
    ) {
        let mut s = RequestStream::new(max_head, max_segments);
        let mut failed = None;
        for segment in &segments {
            match s.push(segment) {
                Ok(requests) => {
                    prop_assert!(failed.is_none());
                    for r in requests {
                        prop_assert!(r.path.starts_with('/') || r.path == "*");
                    }
                }
                Err(e) => {
                    prop_assert!(failed.is_none() || failed == Some(e));
                    failed = Some(e);
                    prop_assert_eq!(s.pending(), 0);
                }
            }
            prop_assert!(s.pending() <= max_head.max(1));
        }
        let _ = parse_head(&segments.concat());
    }

    #[test]
    fn mutated_valid_streams_split_or_whole_agree(
        requests in proptest::collection::vec(valid_request(), 1..4),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
        max_head in 16usize..300,
    ) {
        let mut bytes: Vec<u8> = requests.iter().flat_map(|(b, _)| b.clone()).collect();
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let mut whole = RequestStream::new(max_head, usize::MAX);
        let mut split = RequestStream::new(max_head, usize::MAX);
        let a = whole.push(&bytes);
        let b = push_cut(&mut split, &bytes, &cuts);
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(whole.pending(), split.pending());
        if let Ok(requests) = a {
            for r in requests {
                prop_assert!(r.path.starts_with('/') || r.path == "*");
                prop_assert!(!r.method.is_empty());
            }
        }
    }
}
