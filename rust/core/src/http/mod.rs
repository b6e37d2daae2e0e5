//! HTTP rules without a proxy: what requests a connection carries, and Calico's `http` match on
//! them.
//!
//! Calico rules may match HTTP requests (`http: {methods, paths}`), which Calico enforces in an
//! Envoy proxy. Here the requests are read off the connection's client-to-server TCP payloads
//! instead, independent of the engine:
//!
//! - [`parse_head`] ([`request`]): one HTTP/1.x request head to a [`Request`] (method, path
//!   without query, host, version), strictly, with the body framing it announces;
//! - [`RequestStream`] ([`stream`]): the bounded reassembly of one connection's bytes into request
//!   heads, pipelining included, bodies (`Content-Length`, `chunked`) skipped and never stored;
//! - [`HttpMatch`] ([`matcher`]): Calico's match on a request's method and path;
//! - [`HttpConns`] ([`conns`]): the connections admitted provisionally, whose requests are
//!   judged as they complete (the engine's tracked judge loop, `engine::judge`).
//!
//! **Untrusted input.** The bytes come off the wire: nothing here panics or grows without bound,
//! whatever they are (a head at most `max_head` bytes over at most `max_segments` segments and
//! [`MAX_HEADERS`] fields; bodies counted, not held). A stream that cannot be judged — not HTTP,
//! malformed, ambiguous in its framing (`Content-Length` with `Transfer-Encoding`, conflicting
//! lengths: how requests are smuggled past a judge that reads them differently from the server)
//! or over a bound — fails with a named [`HttpError`] ([`HTTP_ERROR_NAMES`], metric labels), for
//! the caller to deny. There is no `unsafe` code in this module.
//!
//! **Not handled.** HTTP/2 (its preface is [`HttpError::NotHttp`]), TLS, `CONNECT` (its authority
//! form target is [`HttpError::BadTarget`]), and what follows a protocol upgrade (the stream keeps
//! reading HTTP/1.x requests, so WebSocket frames after an `Upgrade` fail).
#![forbid(unsafe_code)]

pub mod conns;
pub mod matcher;
pub mod request;
pub mod stream;

#[cfg(test)]
mod tests;

pub use conns::{Fed, HttpConns, HttpStats};
pub use matcher::{HttpMatch, PathMatch};
pub use request::{parse_head, HttpError, Request, HTTP_ERROR_NAMES, MAX_HEADERS};
pub use stream::{RequestStream, DEFAULT_MAX_HEAD, DEFAULT_MAX_SEGMENTS};
