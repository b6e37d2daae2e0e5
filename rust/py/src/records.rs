//! Python face of `pyclassify_core::records` (flow records into the header batch): glue only.
//! Chunks are read without the GIL; each call hands back the batch it completed as the raw
//! bytes of `HEADER_DTYPE` and `FLOW_COUNTS_DTYPE` arrays.

use pyclassify_core::batch::PacketHeader;
use pyclassify_core::records::{detect, Format, FlowCounts, RecordBatch, Stream};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

fn as_bytes<T>(items: &[T]) -> &[u8] {
    // SAFETY: PacketHeader and FlowCounts are repr(C) records without padding (the ABI tests
    // hold them to that): every byte is initialized.
    unsafe { std::slice::from_raw_parts(items.as_ptr() as *const u8, std::mem::size_of_val(items)) }
}

/// One input of flow records read chunk by chunk: `feed` returns the records each chunk
/// completes; the names they use (`names_since`) and the problems met (`problems`) accumulate.
#[pyclass(name = "RecordStream", module = "pyclassify._engine")]
pub struct PyRecordStream {
    inner: Stream,
    batch: RecordBatch,
}

#[pymethods]
impl PyRecordStream {
    #[new]
    fn new(format: &str) -> PyResult<Self> {
        let f = Format::from_name(format)
            .ok_or_else(|| PyValueError::new_err(format!("{format:?} is not a flow record format")))?;
        let inner = Stream::new(f)
            .ok_or_else(|| PyValueError::new_err(format!("{format} is not read record by record here")))?;
        Ok(PyRecordStream { inner, batch: RecordBatch::default() })
    }

    /// Reads what `chunk` completes (`last`: nothing follows); returns the records as
    /// (headers, counts) bytes, `HEADER_DTYPE` and `FLOW_COUNTS_DTYPE` arrays of one length.
    fn feed<'py>(&mut self, py: Python<'py>, chunk: &[u8], last: bool) -> (Bound<'py, PyBytes>, Bound<'py, PyBytes>) {
        let (inner, batch) = (&mut self.inner, &mut self.batch);
        batch.clear();
        py.detach(|| inner.feed(chunk, last, batch));
        (PyBytes::new(py, as_bytes::<PacketHeader>(&batch.headers)), PyBytes::new(py, as_bytes::<FlowCounts>(&batch.counts)))
    }

    /// The names records used from number `start` on, as (kind, namespace, name).
    fn names_since(&self, start: usize) -> Vec<(String, String, String)> {
        self.inner.names.since(start).iter().map(|n| (n.kind.clone(), n.namespace.clone(), n.name.clone())).collect()
    }

    /// How many names records have used.
    #[getter]
    fn name_count(&self) -> usize {
        self.inner.names.len()
    }

    /// Records read so far.
    #[getter]
    fn records(&self) -> u64 {
        self.inner.records
    }

    /// (count per reason, [(reason, position, detail)] of the first few of each reason).
    fn problems(&self) -> (Vec<(String, u64)>, Vec<(String, u64, String)>) {
        let p = &self.inner.problems;
        (
            p.counts.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            p.first.iter().map(|(k, pos, d)| (k.to_string(), *pos, d.clone())).collect(),
        )
    }
}

/// The format of an input whose first bytes are `head` (`"pcap"`, `"hubble"`, ...), or None.
#[pyfunction]
fn detect_format(head: &[u8]) -> Option<&'static str> {
    detect(head).map(Format::name)
}

/// Every input format as (name, what it is).
#[pyfunction]
fn record_formats() -> Vec<(&'static str, &'static str)> {
    Format::ALL.iter().map(|f| (f.name(), f.title())).collect()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRecordStream>()?;
    m.add_function(wrap_pyfunction!(detect_format, m)?)?;
    m.add_function(wrap_pyfunction!(record_formats, m)?)?;
    Ok(())
}
