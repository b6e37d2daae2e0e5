//! Python face of replay's native accounting (`pyclassify_core::flows`): glue only. Both read
//! `HEADER_DTYPE` batches through the buffer protocol and run without the GIL.

use pyclassify_core::batch::PacketHeader;
use pyclassify_core::engine::PacketVerdict;
use pyclassify_core::flows::{FlowSet, RuleKey, ServiceIndex, VerdictCounts, VerdictTally};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::conntrack::{checked_buffer, header_buffer};

fn header_slice<'a>(ptr: usize, n: usize) -> &'a [PacketHeader] {
    if n == 0 {
        return &[];
    }
    // SAFETY: callers pass a buffer checked by `checked_buffer` (item size, alignment, count)
    // that stays acquired while the slice is used.
    unsafe { std::slice::from_raw_parts(ptr as *const PacketHeader, n) }
}

/// The distinct connections (5-tuples, the same both ways) of every batch added.
#[pyclass(name = "FlowSet", module = "pyclassify._engine")]
pub struct PyFlowSet {
    inner: FlowSet,
}

#[pymethods]
impl PyFlowSet {
    #[new]
    fn new() -> Self {
        PyFlowSet { inner: FlowSet::new() }
    }

    /// Adds the connections of a `HEADER_DTYPE` batch; rows where `skip` (bool or uint8, one
    /// per header) is true are left out.
    #[pyo3(signature = (headers, skip=None))]
    fn add(&mut self, py: Python<'_>, headers: &Bound<'_, PyAny>, skip: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let hdrs = header_buffer(headers, "headers")?;
        let n = hdrs.item_count();
        let mask = skip.map(|s| checked_buffer(s, "skip", 1, 1, Some(n), false)).transpose()?;
        let (h_ptr, m_ptr) = (hdrs.buf_ptr() as usize, mask.as_ref().map(|m| m.buf_ptr() as usize));
        let inner = &mut self.inner;
        py.detach(move || {
            let hs = header_slice(h_ptr, n);
            let ms: &[u8] = match m_ptr {
                // SAFETY: checked above: n one-byte items, acquired until this returns.
                Some(p) if n > 0 => unsafe { std::slice::from_raw_parts(p as *const u8, n) },
                _ => &[],
            };
            inner.add(hs, ms);
        });
        drop((hdrs, mask));
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

/// A batch's verdicts counted (`pyclassify_core::flows::VerdictTally`); the table of decisions
/// by rule is kept between batches so that its memory is reused.
#[pyclass(name = "VerdictTally", module = "pyclassify._engine")]
pub struct PyVerdictTally {
    inner: VerdictTally,
}

type BatchCounts = (u64, u64, Vec<u64>, u64, u64, (u64, u64), Vec<(RuleKey, u64)>);

#[pymethods]
impl PyVerdictTally {
    #[new]
    fn new() -> Self {
        PyVerdictTally { inner: VerdictTally::new() }
    }

    /// Counts a `VERDICT_DTYPE` batch: `(packets, allowed, [packets by reason], policy_allowed,
    /// pickups, (no policy egress, ingress), [((direction, tier, source_kind, source, rule,
    /// reason, allow), packets), ...])`. `outcomes_by_rule`: HTTP outcomes (module
    /// documentation of `pyclassify_core::flows`) are counted by rule too.
    #[pyo3(signature = (verdicts, outcomes_by_rule=false))]
    fn add(&mut self, py: Python<'_>, verdicts: &Bound<'_, PyAny>, outcomes_by_rule: bool) -> PyResult<BatchCounts> {
        let size = std::mem::size_of::<PacketVerdict>();
        let buf = checked_buffer(verdicts, "verdicts", size, std::mem::align_of::<PacketVerdict>(), None, false)?;
        let (ptr, n) = (buf.buf_ptr() as usize, buf.item_count());
        let inner = &mut self.inner;
        let (c, by_rule) = py.detach(move || {
            if n == 0 {
                return (VerdictCounts::default(), Vec::new());
            }
            // SAFETY: checked above (item size, alignment), acquired until this returns;
            // every bit pattern of the record's integer fields is valid.
            let c = inner.add(unsafe { std::slice::from_raw_parts(ptr as *const PacketVerdict, n) }, outcomes_by_rule);
            (c, inner.drain())
        });
        drop(buf);
        let no_policy = (c.no_policy[0], c.no_policy[1]);
        Ok((c.packets, c.allowed, c.by_reason.to_vec(), c.policy_allowed, c.pickups, no_policy, by_rule))
    }
}

/// Service entries `[(address: 16 bytes, protocol, port), ...]` (the first of equal keys wins)
/// and the lookup of a batch against them.
#[pyclass(name = "ServiceIndex", module = "pyclassify._engine", frozen)]
pub struct PyServiceIndex {
    inner: ServiceIndex,
}

#[pymethods]
impl PyServiceIndex {
    #[new]
    fn new(entries: Vec<(Vec<u8>, u8, u16)>) -> PyResult<Self> {
        let mut keys = Vec::with_capacity(entries.len());
        for (i, (address, protocol, port)) in entries.into_iter().enumerate() {
            let address: [u8; 16] = address.try_into().map_err(|a: Vec<u8>| {
                PyValueError::new_err(format!("entry {i}: the address must be 16 bytes, got {}", a.len()))
            })?;
            keys.push((address, protocol, port));
        }
        Ok(PyServiceIndex { inner: ServiceIndex::new(keys) })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Per header of a `HEADER_DTYPE` batch: into `entry` (int64) the entry its destination
    /// (then `forward` (bool) true) or else its source is, -1 if neither.
    fn lookup(
        &self,
        py: Python<'_>,
        headers: &Bound<'_, PyAny>,
        entry: &Bound<'_, PyAny>,
        forward: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let hdrs = header_buffer(headers, "headers")?;
        let n = hdrs.item_count();
        let e = checked_buffer(entry, "entry", 8, 8, Some(n), true)?;
        let f = checked_buffer(forward, "forward", 1, 1, Some(n), true)?;
        let (h_ptr, e_ptr, f_ptr) = (hdrs.buf_ptr() as usize, e.buf_ptr() as usize, f.buf_ptr() as usize);
        let inner = &self.inner;
        py.detach(move || {
            if n == 0 {
                return;
            }
            // SAFETY: all three checked (item size, count, alignment, writability), acquired
            // until this returns; `forward` only ever receives 0 or 1 (valid bools).
            let (es, fs) = unsafe {
                (
                    std::slice::from_raw_parts_mut(e_ptr as *mut i64, n),
                    std::slice::from_raw_parts_mut(f_ptr as *mut bool, n),
                )
            };
            inner.lookup(header_slice(h_ptr, n), es, fs);
        });
        drop((hdrs, e, f));
        Ok(())
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFlowSet>()?;
    m.add_class::<PyVerdictTally>()?;
    m.add_class::<PyServiceIndex>()?;
    Ok(())
}
