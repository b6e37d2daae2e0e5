//! pyclassify-core: the decision engine of pyclassify, in plain Rust.
//!
//! No pyo3 here: this crate is tested with `cargo test --manifest-path rust/Cargo.toml` and
//! wrapped for Python by the `pyclassify-py` crate (`rust/py/`), which stays thin glue.
//!
//! - [`batch`]: the packet header batch, the ABI shared with the Cython decoder and numpy.
//! - [`selector`]: the Calico selector language (parse, evaluate, canonical form).

pub mod batch;
pub mod selector;
