//! pyclassify-core: the decision engine of pyclassify, in plain Rust.
//!
//! No pyo3 here: this crate is tested with `cargo test --manifest-path rust/Cargo.toml` and
//! wrapped for Python by the `pyclassify-py` crate (`rust/py/`), which stays thin glue.
//!
//! - [`abi`]: the records shared with C, Cython and numpy, defined once; writes the C headers.
//! - [`admission`]: image-path patterns of ContainerAdmissionPolicy (linear-time regexes).
//! - [`batch`]: the packet header batch, the ABI shared with the Cython decoder and numpy.
//! - [`selector`]: the Calico selector language (parse, evaluate, canonical form).
//! - [`classifier`]: the bit-vector classifier's parts the engine's compiled programs are built
//!   of, and the multi-field rule types `render` lists rules as; with the `bench` feature, the
//!   priority classifiers measured beside DPDK's `rte_acl` (the bit-vector one, the linear
//!   baseline, TupleMerge).
//! - `classbench` (`bench` feature): ClassBench ruleset and trace parsers (gzip aware), for the
//!   classifier benchmarks (`src/bin/classbench.rs`, `benches/classifier.rs`).
//! - [`capi`]: the engine's C ABI, the function table native loops call without the GIL.
//! - [`conntrack`]: connection tracking (both directions, TCP state, timeouts, cap, revalidation).
//! - [`labelindex`]: incremental index of which endpoints each selector matches.
//! - [`manifest`]: reading YAML/JSON manifests fast, with the line of every field on demand.
//! - [`schema`]: strict field validation's fast path: does an object have only known fields
//!   of the right JSON types.
//! - [`dns`]: domains from DNS: a bounded response decoder, domain patterns, the learned facts.
//! - [`records`]: flow records (Hubble, Calico, VPC Flow Logs, conntrack, NetFlow/IPFIX) read
//!   into the header batch, one record judged as its connection's opening packet, with counts.
//! - [`prefetch`]: cache-line prefetch hints for lookups of many independent keys.
//! - [`http`]: HTTP rules without a proxy: bounded request-head reassembly, parsing, Calico's match.

pub mod abi;
pub mod admission;
pub mod batch;
pub mod capi;
#[cfg(feature = "bench")]
pub mod classbench;
pub mod classifier;
pub mod conntrack;
pub mod dns;
pub mod engine;
pub mod flows;
pub mod http;
pub mod labelindex;
pub mod manifest;
pub mod prefetch;
pub mod records;
pub mod schema;
pub mod selector;
