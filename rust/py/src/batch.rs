//! Python view of the header batch layout (`pyclassify_core::batch`).
//!
//! Exposed so that `tests/test_batch_abi.py` can hold the Rust layout against the C header
//! (Cython) and the numpy dtype; the engine itself reads batches through the buffer protocol,
//! never field by field from Python.

use pyclassify_core::batch::{FIELDS, FLAGS, HEADER_SIZE};
use pyo3::prelude::*;

/// Layout of `PacketHeader` as `[(name, offset, size), ...]` in declaration order.
#[pyfunction]
fn header_layout() -> Vec<(&'static str, usize, usize)> {
    FIELDS.to_vec()
}

/// The `flags` bits of `PacketHeader` as `[(name, value), ...]`.
#[pyfunction]
fn header_flags() -> Vec<(&'static str, u8)> {
    FLAGS.to_vec()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("HEADER_SIZE", HEADER_SIZE)?;
    m.add_function(wrap_pyfunction!(header_layout, m)?)?;
    m.add_function(wrap_pyfunction!(header_flags, m)?)?;
    Ok(())
}
