//! Python class for the incremental label index (`pyclassify_core::labelindex`): glue only.
//! Ids of selectors, endpoints and parents are `str` on the Python side.

use pyclassify_core::labelindex::{IndexStrategy, LabelIndex, LabelMap, MatchChange, DEFAULT_PARENT_PREFIX};
use pyclassify_core::selector::Selector;
use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMapping, PyString};

use crate::errors::selector_error;
use crate::selector::PySelector;

/// Which endpoints each selector matches, kept up to date incrementally.
#[pyclass(name = "LabelIndex", module = "pyclassify._engine")]
pub struct PyLabelIndex {
    inner: LabelIndex<String, String, String>,
}

/// Reads a Python mapping of str to str, naming what was wrong.
fn label_map(obj: &Bound<'_, PyAny>) -> PyResult<LabelMap> {
    let bad = || PyTypeError::new_err("labels must be a mapping of str to str");
    let mut out = LabelMap::new();
    if let Ok(d) = obj.cast::<PyDict>() {
        for (k, v) in d.iter() {
            out.insert(k.extract().map_err(|_| bad())?, v.extract().map_err(|_| bad())?);
        }
        return Ok(out);
    }
    let m = obj.cast::<PyMapping>().map_err(|_| bad())?;
    for item in m.items()?.iter() {
        let (k, v): (String, String) = item.extract().map_err(|_| bad())?;
        out.insert(k, v);
    }
    Ok(out)
}

/// A `Selector` or selector text.
fn selector_from(obj: &Bound<'_, PyAny>) -> PyResult<Selector> {
    let text: String = if obj.is_instance_of::<PyString>() {
        obj.extract()?
    } else if obj.cast::<PySelector>().is_ok() {
        obj.getattr("canonical")?.extract()?
    } else {
        return Err(PyTypeError::new_err("selector must be a Selector or str"));
    };
    Selector::parse(&text).map_err(|e| selector_error(&e, &text))
}

#[pymethods]
impl PyLabelIndex {
    /// `parent_prefix`: prefix under which a parent's (namespace's) labels are visible on its
    /// endpoints; `record_events`: keep a log of match changes for `take_events()`.
    #[new]
    #[pyo3(signature = (parent_prefix = DEFAULT_PARENT_PREFIX, record_events = false))]
    fn py_new(parent_prefix: &str, record_events: bool) -> Self {
        let mut inner = LabelIndex::with_parent_prefix(parent_prefix);
        inner.set_record_events(record_events);
        PyLabelIndex { inner }
    }

    /// Adds or replaces selector `id` (a `Selector` or selector text).
    fn add_selector(&mut self, id: String, selector: &Bound<'_, PyAny>) -> PyResult<()> {
        let selector = selector_from(selector)?;
        self.inner.add_selector(id, selector);
        Ok(())
    }

    /// Removes selector `id`; False if there was none.
    fn remove_selector(&mut self, id: &str) -> bool {
        self.inner.remove_selector(&id.to_owned())
    }

    /// Adds or updates endpoint `id` with its own labels and optional parent (namespace) id.
    #[pyo3(signature = (id, labels, parent = None))]
    fn upsert_endpoint(&mut self, id: String, labels: &Bound<'_, PyAny>, parent: Option<String>) -> PyResult<()> {
        let labels = label_map(labels)?;
        self.inner.upsert_endpoint_with_parent(id, labels, parent);
        Ok(())
    }

    /// Removes endpoint `id`; False if there was none.
    fn remove_endpoint(&mut self, id: &str) -> bool {
        self.inner.remove_endpoint(&id.to_owned())
    }

    /// Sets the labels of parent `id` (unprefixed); its endpoints see them under the prefix.
    fn upsert_parent(&mut self, id: String, labels: &Bound<'_, PyAny>) -> PyResult<()> {
        let labels = label_map(labels)?;
        self.inner.upsert_parent(id, labels);
        Ok(())
    }

    /// Forgets parent `id`'s labels; False if it was not known.
    fn remove_parent(&mut self, id: &str) -> bool {
        self.inner.remove_parent(&id.to_owned())
    }

    /// Endpoints selector `id` matches, sorted; KeyError if there is no such selector.
    fn matching_endpoints(&self, id: &str) -> PyResult<Vec<String>> {
        let mut out: Vec<String> = self
            .inner
            .matching_endpoints(&id.to_owned())
            .ok_or_else(|| PyKeyError::new_err(format!("no selector {id:?}")))?
            .cloned()
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// Selectors that match endpoint `id`, sorted; KeyError if there is no such endpoint.
    fn matching_selectors(&self, id: &str) -> PyResult<Vec<String>> {
        let mut out: Vec<String> = self
            .inner
            .matching_selectors(&id.to_owned())
            .ok_or_else(|| PyKeyError::new_err(format!("no endpoint {id:?}")))?
            .cloned()
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// The labels selectors see on endpoint `id` (own over the parent's, prefixed).
    fn effective_labels(&self, id: &str) -> PyResult<LabelMap> {
        self.inner.effective_labels(&id.to_owned()).ok_or_else(|| PyKeyError::new_err(format!("no endpoint {id:?}")))
    }

    /// How selector `id` is indexed: `("values", key, values)`, `("present", key, [])`,
    /// `("scanned", None, [])` or `("never", None, [])`.
    fn strategy(&self, id: &str) -> PyResult<(&'static str, Option<String>, Vec<String>)> {
        let s =
            self.inner.strategy(&id.to_owned()).ok_or_else(|| PyKeyError::new_err(format!("no selector {id:?}")))?;
        Ok(match s {
            IndexStrategy::Values { key, values } => ("values", Some(key.clone()), values.clone()),
            IndexStrategy::Present { key } => ("present", Some(key.clone()), Vec::new()),
            IndexStrategy::Scanned => ("scanned", None, Vec::new()),
            IndexStrategy::Never => ("never", None, Vec::new()),
        })
    }

    /// Match changes since the last call, oldest first: `[(selector, endpoint, started), ...]`.
    fn take_events(&mut self) -> Vec<(String, String, bool)> {
        self.inner
            .take_events()
            .into_iter()
            .map(|e| (e.selector, e.endpoint, e.change == MatchChange::Started))
            .collect()
    }

    #[getter]
    fn get_record_events(&self) -> bool {
        self.inner.records_events()
    }

    #[setter]
    fn set_record_events(&mut self, on: bool) {
        self.inner.set_record_events(on);
    }

    #[getter]
    fn parent_prefix(&self) -> String {
        self.inner.parent_prefix().to_owned()
    }

    #[getter]
    fn selector_count(&self) -> usize {
        self.inner.selector_count()
    }

    #[getter]
    fn endpoint_count(&self) -> usize {
        self.inner.endpoint_count()
    }

    /// Selector evaluations done so far.
    #[getter]
    fn evaluations(&self) -> u64 {
        self.inner.evaluations()
    }

    /// Recomputes everything from scratch and raises RuntimeError on any disagreement (tests).
    fn check_invariants(&self) -> PyResult<()> {
        self.inner.check_invariants().map_err(PyRuntimeError::new_err)
    }

    fn __repr__(&self) -> String {
        format!(
            "LabelIndex(selectors={}, endpoints={}, parent_prefix={:?})",
            self.inner.selector_count(),
            self.inner.endpoint_count(),
            self.inner.parent_prefix()
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLabelIndex>()?;
    Ok(())
}
