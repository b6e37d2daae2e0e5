//! `pyclassify._engine`: the pyo3 face of pyclassify-core.
//!
//! This crate is glue only: conversions and registration. Logic lives in `pyclassify-core`.
//! Each area has one file with a `register(m)` function, called once from the module init below;
//! Rust errors become Python exceptions only in `errors.rs`.

use pyo3::prelude::*;

mod admission;
mod batch;
mod conntrack;
mod dns;
mod engine;
mod errors;
mod flows;
mod labelindex;
mod manifest;
mod records;
mod schema;
mod selector;

/// Decision engine of pyclassify (Rust).
#[pymodule]
fn _engine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    batch::register(m)?;
    conntrack::register(m)?;
    selector::register(m)?;
    labelindex::register(m)?;
    engine::register(m)?;
    flows::register(m)?;
    admission::register(m)?;
    manifest::register(m)?;
    schema::register(m)?;
    dns::register(m)?;
    records::register(m)?;
    Ok(())
}
