//! Python face of `pyclassify_core::records` (flow records into the header batch): glue only.
//! Chunks are read without the GIL; each call hands back the batch it completed as the raw
//! bytes of `HEADER_DTYPE` and `FLOW_COUNTS_DTYPE` arrays.

use pyclassify_core::batch::PacketHeader;
use pyclassify_core::engine::PacketVerdict;
use pyclassify_core::records::tally::{DecisionKey, Measures, Tally};
use pyclassify_core::records::{detect, Format, FlowCounts, RecordBatch, Stream};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::conntrack::checked_buffer;

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

/// Flow records' verdicts summed, weighted by records, flows, packets and bytes.
#[pyclass(name = "RecordTally", module = "pyclassify._engine")]
pub struct PyRecordTally {
    inner: Tally,
}

#[pymethods]
impl PyRecordTally {
    #[new]
    fn new() -> Self {
        PyRecordTally { inner: Tally::default() }
    }

    /// Adds a batch: `verdicts` (`VERDICT_DTYPE`) and `counts` (`FLOW_COUNTS_DTYPE`), one each
    /// per record (a verdict is ignored where its record was not placed).
    fn add(&mut self, py: Python<'_>, verdicts: &Bound<'_, PyAny>, counts: &Bound<'_, PyAny>) -> PyResult<()> {
        let c = checked_buffer(counts, "counts", std::mem::size_of::<FlowCounts>(), std::mem::align_of::<FlowCounts>(), None, false)?;
        let n = c.item_count();
        let v = checked_buffer(verdicts, "verdicts", std::mem::size_of::<PacketVerdict>(), std::mem::align_of::<PacketVerdict>(), Some(n), false)?;
        let (v_ptr, c_ptr) = (v.buf_ptr() as usize, c.buf_ptr() as usize);
        let inner = &mut self.inner;
        py.detach(move || {
            if n == 0 {
                return;
            }
            // SAFETY: both buffers were checked (item size, count, alignment, contiguity) and
            // stay acquired until this returns.
            let (vs, cs) = unsafe {
                (
                    std::slice::from_raw_parts(v_ptr as *const PacketVerdict, n),
                    std::slice::from_raw_parts(c_ptr as *const FlowCounts, n),
                )
            };
            inner.add(vs, cs);
        });
        drop((v, c));
        Ok(())
    }

    /// (totals, allowed, denied, unplaced, [no policy egress, ingress]), each
    /// [records, flows, packets, bytes].
    fn measures(&self) -> (Measures, Measures, Measures, Measures, [Measures; 2]) {
        let t = &self.inner;
        (t.totals, t.allowed, t.denied, t.unplaced, t.no_policy)
    }

    /// [((direction, tier, source_kind, source, rule, reason, allow), measures)].
    fn by_rule(&self) -> Vec<(DecisionKey, Measures)> {
        self.inner.by_rule.iter().map(|(k, m)| (*k, *m)).collect()
    }

    /// Judged records by [own verdict 0 none, 1 allow, 2 deny, 3 other][policy's 0 deny, 1 allow].
    fn reported(&self) -> [[u64; 2]; 4] {
        self.inner.reported
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
    m.add_class::<PyRecordTally>()?;
    m.add_function(wrap_pyfunction!(detect_format, m)?)?;
    m.add_function(wrap_pyfunction!(record_formats, m)?)?;
    Ok(())
}
