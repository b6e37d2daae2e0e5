//! Python face of `pyclassify_core::dns` (domains from DNS): glue only.
//!
//! `DomainFacts` wraps an `Arc` of the core store, so the engine binding can share the very store
//! Python feeds ([`PyDomainFacts::inner`]).

use std::net::IpAddr;
use std::sync::Arc;

use pyclassify_core::dns::{self as core, DomainFacts, DomainPattern};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::domain_pattern_exc;

fn ip(text: &str) -> PyResult<IpAddr> {
    text.trim().parse().map_err(|_| PyValueError::new_err(format!("{text:?} is not an IP address")))
}

fn patterns(texts: &[String]) -> PyResult<Vec<DomainPattern>> {
    texts.iter().map(|t| DomainPattern::parse(t).map_err(|m| domain_pattern_exc(&m, t))).collect()
}

/// What DNS has taught: (name, address) facts valid from when they were learned until their TTL
/// plus `grace_s` seconds have passed; at most `capacity` of them (a new fact in a full store
/// evicts the one that expires first). Thread-safe: calls release the GIL.
#[pyclass(name = "DomainFacts", module = "pyclassify._engine", frozen)]
pub struct PyDomainFacts {
    inner: Arc<DomainFacts>,
}

impl PyDomainFacts {
    /// The core store, shared (for the engine binding).
    #[allow(dead_code)] // taken by the engine binding
    pub fn inner(&self) -> Arc<DomainFacts> {
        Arc::clone(&self.inner)
    }
}

#[pymethods]
impl PyDomainFacts {
    #[new]
    #[pyo3(signature = (capacity = 100_000, grace_s = 0))]
    fn new(capacity: usize, grace_s: u32) -> Self {
        PyDomainFacts { inner: Arc::new(DomainFacts::new(capacity, grace_s)) }
    }

    /// Most facts kept.
    #[getter]
    fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    /// Seconds each fact stays valid beyond its TTL.
    #[getter]
    fn grace_s(&self) -> u32 {
        self.inner.grace_s()
    }

    /// Learns that `name` resolves to `ip` for `ttl` seconds from `now_ns`; whether it was new.
    fn learn(&self, py: Python<'_>, name: &str, ip: &str, ttl: u32, now_ns: u64) -> PyResult<bool> {
        let addr = self::ip(ip)?;
        Ok(py.detach(|| self.inner.learn(name, addr, ttl, now_ns)))
    }

    /// Learns what a DNS response teaches: `payload` is a UDP payload (one message) or, with
    /// `tcp`, a TCP payload of length-prefixed messages. Returns (new facts learned, the name of
    /// the error that stopped decoding or None); a TCP payload's complete messages before the
    /// error are learned.
    #[pyo3(signature = (payload, now_ns, tcp = false))]
    fn learn_payload(&self, py: Python<'_>, payload: &[u8], now_ns: u64, tcp: bool) -> (usize, Option<&'static str>) {
        py.detach(|| {
            let (learned, error) = self.inner.learn_payload(payload, now_ns, tcp);
            (learned, error.map(|e| e.name()))
        })
    }

    /// The names valid for `ip` at `now_ns` (None: at any time), sorted.
    #[pyo3(signature = (ip, now_ns = None))]
    fn names_at(&self, py: Python<'_>, ip: &str, now_ns: Option<u64>) -> PyResult<Vec<String>> {
        let addr = self::ip(ip)?;
        Ok(py.detach(|| self.inner.names_at(addr, now_ns)))
    }

    /// Whether a name valid for `ip` at `now_ns` (None: at any time) matches one of `patterns`
    /// (raises DomainPatternError for an invalid pattern).
    #[pyo3(signature = (ip, patterns, now_ns = None))]
    fn matches(&self, py: Python<'_>, ip: &str, patterns: Vec<String>, now_ns: Option<u64>) -> PyResult<bool> {
        let addr = self::ip(ip)?;
        let patterns = self::patterns(&patterns)?;
        Ok(py.detach(|| self.inner.matches(addr, now_ns, &patterns)))
    }

    /// Drops the facts that expired before `now_ns`; returns how many.
    fn expire(&self, py: Python<'_>, now_ns: u64) -> usize {
        py.detach(|| self.inner.expire(now_ns))
    }

    /// Counters since the store was made: learned, refreshed, evicted, expired.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.inner.stats().items() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// A counter bumped on every change.
    #[getter]
    fn generation(&self) -> u64 {
        self.inner.generation()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "DomainFacts(capacity={}, grace_s={}, len={})",
            self.inner.capacity(),
            self.inner.grace_s(),
            self.inner.len()
        )
    }
}

/// Why `text` is not a valid domain pattern, or None when it is.
#[pyfunction]
fn domain_pattern_error(text: &str) -> Option<String> {
    DomainPattern::parse(text).err()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDomainFacts>()?;
    m.add_function(wrap_pyfunction!(domain_pattern_error, m)?)?;
    m.add("DNS_ERROR_NAMES", core::DNS_ERROR_NAMES.to_vec())?;
    Ok(())
}
