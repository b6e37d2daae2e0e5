//! Calico's `HTTPMatch` (a rule's `http` field): methods and paths.
//!
//! From the Calico docs: `methods` is "an optional field that restricts the rule to apply only to
//! HTTP requests that use one of the listed HTTP Methods (e.g. GET, PUT, etc.). Multiple methods
//! are OR'd together"; `paths` "restricts the rule to apply to HTTP requests that use one of the
//! listed HTTP Paths. Multiple paths are OR'd together", each `exact` or `prefix`. Methods
//! compare exactly, case-sensitively, as Envoy compares them; a prefix is a plain string prefix
//! (`/foo` matches `/foobar`), also as Envoy does. The request's path is compared as sent, query
//! string cut, neither percent-decoded nor dot-segment normalized ([`Request::path`]).
#![deny(clippy::indexing_slicing)]

use super::Request;

/// One entry of `paths`: `{exact: "/x"}` or `{prefix: "/x"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    /// The path is exactly this.
    Exact(String),
    /// The path starts with this.
    Prefix(String),
}

impl PathMatch {
    /// Whether `path` matches.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Exact(p) => path == p,
            PathMatch::Prefix(p) => path.starts_with(p.as_str()),
        }
    }
}

/// Calico's HTTPMatch: methods (exact, case-sensitive as Calico/Envoy treat them) and paths
/// (each `{exact: "/x"}` or `{prefix: "/x"}`); empty lists match anything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HttpMatch {
    pub methods: Vec<String>,
    pub paths: Vec<PathMatch>,
}

impl HttpMatch {
    /// Whether the request uses one of the methods (or there are none) and one of the paths (or
    /// there are none).
    pub fn matches(&self, r: &Request) -> bool {
        (self.methods.is_empty() || self.methods.contains(&r.method))
            && (self.paths.is_empty() || self.paths.iter().any(|p| p.matches(&r.path)))
    }
}
