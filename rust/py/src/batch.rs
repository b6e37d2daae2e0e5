//! Python view of the header batch layout (`pyclassify_core::batch`).
//!
//! Exposed so that `tests/test_batch_abi.py` can hold the Rust layout against the C header
//! (Cython) and the numpy dtype; the engine itself reads batches through the buffer protocol,
//! never field by field from Python.

use pyclassify_core::abi::headers::RECORDS;
use pyclassify_core::batch::{fields, ENCAP_KINDS, ERROR_KINDS, FLAGS, HEADER_SIZE};
use pyclassify_core::capi::ENGINE_API_SIZE;
use pyo3::prelude::*;

/// Layout of `PacketHeader` as `[(name, offset, size), ...]` in declaration order.
#[pyfunction]
fn header_layout() -> Vec<(&'static str, usize, usize)> {
    fields()
}

/// The `flags` bits of `PacketHeader` as `[(name, value), ...]`.
#[pyfunction]
fn header_flags() -> Vec<(&'static str, u8)> {
    FLAGS.iter().map(|&(name, bit, _)| (name, bit)).collect()
}

/// The values of `PacketHeader.error_kind` as `[(name, value), ...]` in value order.
#[pyfunction]
fn error_kinds() -> Vec<(&'static str, u8)> {
    ERROR_KINDS.iter().map(|&(name, value, _)| (name, value)).collect()
}

/// The values of `PacketHeader.encap` (the tunnel a packet was found in) as `[(name, value), ...]`
/// in value order.
#[pyfunction]
fn encap_kinds() -> Vec<(&'static str, u8)> {
    ENCAP_KINDS.iter().map(|&(name, value, _)| (name, value)).collect()
}

type PyField = (&'static str, usize, usize, String);

/// Every record shared with C and numpy (`pyclassify_core::abi::headers::RECORDS`), a nested record
/// before its user: `[(name, (c_name, size, align, [(field, offset, size, type), ...])), ...]`,
/// fields in declaration order; a type is `u8`, `u16`, `u32`, `u64`, `i32`, `u8[N]` or the Rust
/// name of a nested record.
#[pyfunction]
fn record_layouts() -> Vec<(&'static str, (&'static str, usize, usize, Vec<PyField>))> {
    RECORDS
        .iter()
        .map(|r| {
            let fields = r.fields.iter().map(|f| (f.name, f.offset, f.size, f.ty.name())).collect();
            (r.rust_name, (r.c_name, r.size, r.align, fields))
        })
        .collect()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("HEADER_SIZE", HEADER_SIZE)?;
    m.add("ENGINE_API_SIZE", ENGINE_API_SIZE)?;
    m.add_function(wrap_pyfunction!(header_layout, m)?)?;
    m.add_function(wrap_pyfunction!(header_flags, m)?)?;
    m.add_function(wrap_pyfunction!(error_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(encap_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(record_layouts, m)?)?;
    Ok(())
}
