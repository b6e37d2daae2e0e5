//! Python face of the multi-field classifier (`pyclassify_core::classifier`): glue only. It
//! exists so the classifier can be measured (and used) on ClassBench data from numpy: header
//! batches in, rule ids out, without the GIL.

use std::path::PathBuf;

use pyclassify_core::batch::PacketHeader;
use pyclassify_core::classbench;
use pyclassify_core::classifier::{Classifier, LinearScan, PacketKey, TupleMerge};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::conntrack::{checked_buffer, header_buffer};

/// A first-match classifier over ClassBench-style rules (TupleMerge, or a linear scan).
#[pyclass(name = "RuleClassifier", module = "pyclassify._engine", frozen)]
pub struct PyRuleClassifier {
    inner: Box<dyn Classifier>,
}

#[pymethods]
impl PyRuleClassifier {
    /// Loads a ClassBench ruleset (`*.rules` or `*.rules.gz`; rule i gets id = priority = i).
    /// `algorithm`: "tuplemerge" (default) or "linear" (the baseline).
    #[staticmethod]
    #[pyo3(signature = (path, algorithm="tuplemerge"))]
    fn from_classbench(py: Python<'_>, path: PathBuf, algorithm: &str) -> PyResult<Self> {
        let algorithm = algorithm.to_string();
        let inner: Box<dyn Classifier> = py
            .detach(move || -> Result<Box<dyn Classifier>, String> {
                let rules = classbench::load_rules(&path).map_err(|e| e.to_string())?;
                Ok(match algorithm.as_str() {
                    "linear" => Box::new(LinearScan::build(&rules).map_err(|e| e.to_string())?),
                    "tuplemerge" => Box::new(TupleMerge::build(&rules).map_err(|e| e.to_string())?),
                    other => return Err(format!("unknown algorithm {other:?} (tuplemerge or linear)")),
                })
            })
            .map_err(PyValueError::new_err)?;
        Ok(PyRuleClassifier { inner })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Bytes the classifier's structures hold (their capacities), for the benchmarks.
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    /// For each header of a `HEADER_DTYPE` batch, the id of the first matching rule, or -1,
    /// written into `out` (int64, one per header). Runs without the GIL.
    fn classify(&self, py: Python<'_>, headers: &Bound<'_, PyAny>, out: &Bound<'_, PyAny>) -> PyResult<()> {
        let hdrs = header_buffer(headers, "headers")?;
        let n = hdrs.item_count();
        let ids = checked_buffer(out, "out", 8, 8, Some(n), true)?;
        let (h_ptr, o_ptr) = (hdrs.buf_ptr() as usize, ids.buf_ptr() as usize);
        let classifier = &self.inner;
        py.detach(move || {
            if n == 0 {
                return;
            }
            // SAFETY: both buffers were checked (item size, count, alignment, writability) and
            // stay acquired until this function returns.
            let (hs, os) = unsafe {
                (
                    std::slice::from_raw_parts(h_ptr as *const PacketHeader, n),
                    std::slice::from_raw_parts_mut(o_ptr as *mut i64, n),
                )
            };
            for (h, o) in hs.iter().zip(os.iter_mut()) {
                *o = classifier.classify(&PacketKey::from_header(h)).map_or(-1, |m| m.id as i64);
            }
        });
        drop((hdrs, ids));
        Ok(())
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRuleClassifier>()?;
    Ok(())
}
