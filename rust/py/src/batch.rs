//! Python view of the header batch layout (`pyclassify_core::batch`).
//!
//! Exposed so that `tests/test_batch_abi.py` can hold the Rust layout against the C header
//! (Cython) and the numpy dtype; the engine itself reads batches through the buffer protocol,
//! never field by field from Python.

use pyclassify_core::batch::{PacketHeader, FIELDS, FLAGS, HEADER_SIZE};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// A header batch borrowed from a Python buffer, as a pointer that may cross `py.detach`.
pub(crate) struct HeaderSlice {
    ptr: usize,
    pub len: usize,
}

impl HeaderSlice {
    /// # Safety
    /// The `PyBuffer` it came from must still be held (not released) by the caller.
    pub unsafe fn get<'a>(&self) -> &'a [PacketHeader] {
        if self.len == 0 {
            return &[];
        }
        std::slice::from_raw_parts(self.ptr as *const PacketHeader, self.len)
    }
}

/// A writable byte array borrowed from a Python buffer (one output byte per header).
pub(crate) struct OutputSlice {
    ptr: usize,
    len: usize,
}

impl OutputSlice {
    /// # Safety
    /// The `PyBuffer` it came from must still be held, and nothing else may write it meanwhile.
    pub unsafe fn get<'a>(&self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.len)
    }
}

/// Checks a uint8 view of a `HEADER_DTYPE` array: C-contiguous, a whole number of 64-byte
/// headers, aligned for `PacketHeader` (numpy allocations are).
pub(crate) fn header_slice(_py: Python<'_>, buf: &PyBuffer<u8>) -> PyResult<HeaderSlice> {
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err("the header batch must be C-contiguous"));
    }
    let bytes = buf.len_bytes();
    if bytes % HEADER_SIZE != 0 {
        return Err(PyValueError::new_err(format!(
            "the header batch is {bytes} bytes, not a multiple of the {HEADER_SIZE}-byte header"
        )));
    }
    let ptr = buf.buf_ptr() as usize;
    if ptr % std::mem::align_of::<PacketHeader>() != 0 {
        return Err(PyValueError::new_err("the header batch is not 8-byte aligned"));
    }
    Ok(HeaderSlice { ptr, len: bytes / HEADER_SIZE })
}

/// Checks a writable, C-contiguous uint8 output of at least `n` bytes.
pub(crate) fn output_slice(_py: Python<'_>, buf: &PyBuffer<u8>, n: usize) -> PyResult<OutputSlice> {
    if buf.readonly() {
        return Err(PyTypeError::new_err("the output array is read-only"));
    }
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err("the output array must be C-contiguous"));
    }
    if buf.item_count() < n {
        return Err(PyValueError::new_err(format!("the output array holds {} items, need {n}", buf.item_count())));
    }
    Ok(OutputSlice { ptr: buf.buf_ptr() as usize, len: n })
}

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
