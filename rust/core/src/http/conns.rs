//! The connections whose verdict depends on their HTTP requests, and each one's request stream.
//!
//! A connection that policy admits only provisionally (its verdict awaits a request,
//! `Verdict::awaits_request`) is *watched*: its client-to-server TCP payloads are fed here in
//! sequence order and come out as complete request heads, each for the caller to judge. A watched
//! connection stays watched after its first request is allowed, so pipelined requests are judged
//! too. The table is bounded (`cap` connections, each holding at most one head in progress):
//! when it is full of live connections, a new one cannot be watched and the caller denies it.
#![deny(clippy::indexing_slicing)]

use std::collections::HashMap;

use super::{HttpError, Request, RequestStream, DEFAULT_MAX_HEAD, DEFAULT_MAX_SEGMENTS, HTTP_ERROR_NAMES};
use crate::conntrack::FlowKey;

/// What one segment of a watched connection brought.
#[derive(Debug)]
pub enum Fed {
    /// Request heads it completed (possibly none: a head in progress, a body going by, or bytes
    /// read before: a retransmission).
    Requests(Vec<Request>),
    /// It starts after a gap in what was read: not read, to be held back (dropped) so that the
    /// server never receives bytes the judge did not read; the client resends it in order.
    Ahead,
    /// The stream cannot be judged (not HTTP, malformed, over a bound): deny the connection.
    Broken(HttpError),
}

/// Counters of a [`HttpConns`] table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpStats {
    /// Connections admitted provisionally and watched.
    pub watched: u64,
    /// Request heads read off watched connections.
    pub requests: u64,
    /// Connections that could not be watched: the table was full of live ones.
    pub full: u64,
    /// Segments after a gap in what was read: not read, held back ([`Fed::Ahead`]) (a
    /// retransmission of bytes already read is ignored silently).
    pub out_of_order: u64,
    /// Broken streams by [`HttpError`] (index as in [`HTTP_ERROR_NAMES`]).
    pub errors: [u64; HTTP_ERROR_NAMES.len()],
}

struct Watched {
    stream: RequestStream,
    /// The sequence number of the next byte the stream wants; None before the first payload.
    next_seq: Option<u32>,
    /// Request heads read so far.
    requests: u64,
    /// When it was watched or last fed a segment (ns).
    last_ns: u64,
    /// When it was watched: the connection's opening (ns).
    opened_ns: u64,
}

/// The watched connections, by original-direction key (client to server).
pub struct HttpConns {
    map: HashMap<FlowKey, Watched>,
    cap: usize,
    max_head: usize,
    max_segments: usize,
    stats: HttpStats,
}

impl HttpConns {
    /// A table of at most `cap` connections, each head at most `max_head` bytes over
    /// `max_segments` segments.
    pub fn new(cap: usize, max_head: usize, max_segments: usize) -> HttpConns {
        HttpConns { map: HashMap::new(), cap: cap.max(1), max_head, max_segments, stats: HttpStats::default() }
    }

    /// Watched connections (some may have ended: they are dropped when room is needed).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn stats(&self) -> HttpStats {
        self.stats
    }

    /// Starts watching `key` (original direction) at `now_ns`; `next_seq` is the sequence number
    /// of the client's first byte (its SYN's + 1): bytes before it are never read, bytes after a
    /// gap are held back. None: from the first segment fed (only where nothing can come before
    /// it). When the table is full, the connections `alive` (given each one's key and when it
    /// was last fed) says have ended are dropped first; false if it is still full (deny the
    /// connection). Watching a key again starts its stream afresh (a new connection reusing it).
    pub fn watch(
        &mut self,
        key: FlowKey,
        next_seq: Option<u32>,
        now_ns: u64,
        alive: impl Fn(&FlowKey, u64) -> bool,
    ) -> bool {
        if self.map.len() >= self.cap && !self.map.contains_key(&key) {
            self.map.retain(|k, w| alive(k, w.last_ns));
            if self.map.len() >= self.cap {
                self.stats.full += 1;
                return false;
            }
        }
        let stream = RequestStream::new(self.max_head, self.max_segments);
        self.map.insert(key, Watched { stream, next_seq, requests: 0, last_ns: now_ns, opened_ns: now_ns });
        self.stats.watched += 1;
        true
    }

    /// Whether `key` (original direction) is watched.
    pub fn watches(&self, key: &FlowKey) -> bool {
        self.map.contains_key(key)
    }

    /// Whether `key` is watched and none of its requests has been read yet.
    pub fn awaiting(&self, key: &FlowKey) -> bool {
        self.map.get(key).is_some_and(|w| w.requests == 0)
    }

    /// When `key` began to be watched (its connection's opening), if it is watched.
    pub fn opened_at(&self, key: &FlowKey) -> Option<u64> {
        self.map.get(key).map(|w| w.opened_ns)
    }

    /// Stops watching `key`.
    pub fn forget(&mut self, key: &FlowKey) {
        self.map.remove(key);
    }

    /// Feeds one client-to-server segment (`seq`: its first byte's TCP sequence number) of a
    /// watched connection, seen at `now_ns`; None if `key` is not watched. Bytes already read
    /// (retransmissions, the overlapping start of a segment) are skipped; a segment after a gap
    /// is not read ([`Fed::Ahead`]).
    pub fn feed(&mut self, key: &FlowKey, seq: u32, payload: &[u8], now_ns: u64) -> Option<Fed> {
        let w = self.map.get_mut(key)?;
        w.last_ns = now_ns;
        if payload.is_empty() {
            return Some(Fed::Requests(Vec::new()));
        }
        let skip = match w.next_seq {
            None => 0,
            Some(next) => {
                let ahead = seq.wrapping_sub(next);
                if ahead != 0 && ahead < 1 << 31 {
                    self.stats.out_of_order += 1;
                    return Some(Fed::Ahead);
                }
                // at or before the next byte: skip what was read already
                next.wrapping_sub(seq) as usize
            }
        };
        let Some(fresh) = payload.get(skip..) else {
            return Some(Fed::Requests(Vec::new())); // wholly a retransmission
        };
        if fresh.is_empty() {
            return Some(Fed::Requests(Vec::new()));
        }
        w.next_seq = Some(seq.wrapping_add(payload.len() as u32));
        match w.stream.push(fresh) {
            Ok(requests) => {
                w.requests += requests.len() as u64;
                self.stats.requests += requests.len() as u64;
                Some(Fed::Requests(requests))
            }
            Err(e) => {
                if let Some(n) = self.stats.errors.get_mut(e as usize) {
                    *n += 1;
                }
                self.map.remove(key);
                Some(Fed::Broken(e))
            }
        }
    }
}

impl Default for HttpConns {
    fn default() -> Self {
        HttpConns::new(65_536, DEFAULT_MAX_HEAD, DEFAULT_MAX_SEGMENTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(sport: u16) -> FlowKey {
        FlowKey::new([0; 16], [1; 16], sport, 80, 6)
    }

    fn paths(f: Option<Fed>) -> Vec<String> {
        match f {
            Some(Fed::Requests(r)) => r.into_iter().map(|r| format!("{} {}", r.method, r.path)).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn requests_in_sequence_with_retransmissions_and_gaps() {
        let mut t = HttpConns::default();
        let k = key(1000);
        assert!(t.feed(&k, 1, b"GET / HTTP/1.1\r\n\r\n", 0).is_none());
        assert!(t.watch(k, None, 0, |_, _| true));
        assert!(paths(t.feed(&k, 100, b"GET /a HTTP/1.1\r\nHo", 0)).is_empty());
        // a retransmission of what was read, then one overlapping the end of it
        assert!(paths(t.feed(&k, 100, b"GET /a HTTP/1.1\r\nHo", 0)).is_empty());
        // a gap: not read, held back
        assert!(matches!(t.feed(&k, 200, b"GET /x HTTP/1.1\r\n\r\n", 0), Some(Fed::Ahead)));
        assert_eq!(t.stats().out_of_order, 1);
        let next = 100 + 19;
        assert_eq!(paths(t.feed(&k, next - 2, b"Host: h\r\n\r\nGET /b HTTP/1.1\r\n\r\n", 0)), vec!["GET /a", "GET /b"]);
        assert_eq!(t.stats().requests, 2);
    }

    #[test]
    fn bytes_before_the_first_are_never_read() {
        let mut t = HttpConns::default();
        let k = key(1003);
        t.watch(k, Some(101), 0, |_, _| true);
        // a first segment far ahead of the SYN's next byte is held back, not read
        assert!(matches!(t.feed(&k, 500, b"GET /evil HTTP/1.1\r\n\r\n", 0), Some(Fed::Ahead)));
        assert_eq!(paths(t.feed(&k, 101, b"GET /ok HTTP/1.1\r\n\r\n", 0)), vec!["GET /ok"]);
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut t = HttpConns::default();
        let k = key(1001);
        t.watch(k, None, 0, |_, _| true);
        let seq = u32::MAX - 3;
        assert!(paths(t.feed(&k, seq, b"GET /w", 0)).is_empty());
        assert_eq!(paths(t.feed(&k, seq.wrapping_add(6), b" HTTP/1.1\r\n\r\n", 0)), vec!["GET /w"]);
    }

    #[test]
    fn a_broken_stream_is_forgotten_and_counted() {
        let mut t = HttpConns::default();
        let k = key(1002);
        t.watch(k, None, 0, |_, _| true);
        assert!(matches!(t.feed(&k, 0, b"\x16\x03\x01\x02\x00", 0), Some(Fed::Broken(HttpError::NotHttp))));
        assert!(!t.watches(&k));
        assert_eq!(t.stats().errors.get(HttpError::NotHttp as usize), Some(&1));
    }

    #[test]
    fn full_table_drops_ended_connections_first() {
        let mut t = HttpConns::new(2, DEFAULT_MAX_HEAD, DEFAULT_MAX_SEGMENTS);
        assert!(t.watch(key(1), None, 0, |_, _| true));
        assert!(t.watch(key(2), None, 0, |_, _| true));
        assert!(!t.watch(key(3), None, 0, |_, _| true));
        assert_eq!(t.stats().full, 1);
        assert!(t.watch(key(3), None, 0, |k, _| k.sport != 1));
        assert!(!t.watches(&key(1)) && t.watches(&key(3)));
    }
}
