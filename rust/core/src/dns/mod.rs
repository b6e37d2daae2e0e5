//! Domains from DNS (issue 13 item 1, the DNS half): what DNS answers teach about addresses.
//!
//! Calico policy can name destinations by domain (`destination.domains`): it learns the addresses
//! of those names from the DNS responses its workloads receive, and a name's addresses are allowed
//! for as long as the answer's TTL says. This module is that learning, independent of the engine:
//!
//! - [`parse_response`] / [`parse_tcp_payload`] ([`message`]): a bounded decoder of DNS response
//!   messages to the facts they teach ([`Answer`]: name, address, TTL), CNAME chains included;
//! - [`DomainPattern`] ([`pattern`]): Calico's domain patterns (exact, or one `*` label standing
//!   for one or more labels);
//! - [`DomainFacts`] ([`facts`]): the thread-safe, capacity-bounded store of what was learned,
//!   each fact valid in its window `[learned at, learned at + TTL + grace]`.
//!
//! **Untrusted input.** DNS payloads come off the wire: nothing here panics or grows without
//! bound, whatever the bytes (names at most 255 bytes and 127 labels, compression pointers only
//! backwards, at most [`MAX_ANSWER_RECORDS`] answer records and [`MAX_FACTS_PER_MESSAGE`] facts per
//! message, the store at most its capacity). There is no `unsafe` code in this module.
//!
//! **Sharing.** As the Calico docs warn: if names A, B and C resolve to one address and policy
//! allows A, traffic to that address is allowed whichever name the client meant —
//! [`DomainFacts::matches`] asks whether *any* name learned for the address matches.
#![forbid(unsafe_code)]

pub mod facts;
pub mod message;
pub mod pattern;

#[cfg(test)]
mod tests;

pub use facts::{DomainFacts, DomainFactsStats};
pub use message::{
    parse_response, parse_tcp_payload, parse_tcp_payload_partial, Answer, DnsError, DNS_ERROR_NAMES,
    MAX_ANSWER_RECORDS, MAX_CNAME_DEPTH, MAX_FACTS_PER_MESSAGE, MAX_NAME_LABELS, MAX_NAME_WIRE_LEN,
};
pub use pattern::DomainPattern;
