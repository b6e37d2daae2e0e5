//! Python classes for the selector language (`pyclassify_core::selector`): glue only.

use std::collections::HashMap;

use pyclassify_core::selector::{self as core, LabelSelectorRequirement, SelectorError};
use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyMapping, PyTuple, PyType};

use crate::errors::selector_error;

/// A parsed Calico selector (Kubernetes LabelSelectors compile into the same form).
#[pyclass(name = "Selector", module = "pyclassify._engine", frozen)]
pub struct PySelector {
    inner: core::Selector,
}

/// Necessary conditions a selector puts on one label (for label indexes).
#[pyclass(name = "LabelRestriction", module = "pyclassify._engine", frozen, get_all)]
pub struct PyLabelRestriction {
    must_be_present: bool,
    must_be_absent: bool,
    /// Sorted values the label must take one of; None = no value restriction.
    must_have_one_of_values: Option<Vec<String>>,
}

#[pymethods]
impl PyLabelRestriction {
    fn __repr__(&self) -> String {
        format!(
            "LabelRestriction(must_be_present={}, must_be_absent={}, must_have_one_of_values={:?})",
            py_bool(self.must_be_present),
            py_bool(self.must_be_absent),
            self.must_have_one_of_values
        )
    }
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// Reads a Python mapping of str to str (dict fast path, any Mapping otherwise).
fn labels_from(obj: &Bound<'_, PyAny>) -> PyResult<HashMap<String, String>> {
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut out = HashMap::with_capacity(d.len());
        for (k, v) in d.iter() {
            out.insert(k.extract()?, v.extract()?);
        }
        return Ok(out);
    }
    let m = obj.cast::<PyMapping>()?;
    let mut out = HashMap::new();
    for item in m.items()?.iter() {
        let (k, v): (String, String) = item.extract()?;
        out.insert(k, v);
    }
    Ok(out)
}

fn field_error(field: &str, message: &str) -> PyErr {
    selector_error(&SelectorError::in_field(field, message), "")
}

/// Reads a `metav1.LabelSelector` mapping into its parts, naming the field of any error.
fn label_selector_parts(obj: &Bound<'_, PyAny>) -> PyResult<(Vec<(String, String)>, Vec<LabelSelectorRequirement>)> {
    let map = obj.cast::<PyMapping>().map_err(|_| field_error("", "a label selector must be a map"))?;
    let mut labels = Vec::new();
    let mut exprs = Vec::new();
    for item in map.items()?.iter() {
        let (key, value): (String, Bound<'_, PyAny>) = item.extract()?;
        match key.as_str() {
            "matchLabels" if value.is_none() => {}
            "matchLabels" => {
                let m = value
                    .cast::<PyMapping>()
                    .map_err(|_| field_error("matchLabels", "must be a map of label to value"))?;
                for kv in m.items()?.iter() {
                    let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = kv.extract()?;
                    let k: String = k.extract().map_err(|_| field_error("matchLabels", "keys must be strings"))?;
                    let v: String =
                        v.extract().map_err(|_| field_error(&format!("matchLabels.{k}"), "value must be a string"))?;
                    labels.push((k, v));
                }
            }
            "matchExpressions" if value.is_none() => {}
            "matchExpressions" => {
                let list: Vec<Bound<'_, PyAny>> =
                    value.extract().map_err(|_| field_error("matchExpressions", "must be a list"))?;
                for (i, e) in list.iter().enumerate() {
                    exprs.push(requirement(e, i)?);
                }
            }
            other => return Err(field_error(other, "unknown field (want matchLabels or matchExpressions)")),
        }
    }
    Ok((labels, exprs))
}

fn requirement(e: &Bound<'_, PyAny>, i: usize) -> PyResult<LabelSelectorRequirement> {
    let field = format!("matchExpressions[{i}]");
    let m = e.cast::<PyMapping>().map_err(|_| field_error(&field, "must be a map"))?;
    let get_str = |name: &str| -> PyResult<String> {
        match m.get_item(name) {
            Ok(v) if !v.is_none() => {
                v.extract().map_err(|_| field_error(&format!("{field}.{name}"), "must be a string"))
            }
            _ => Err(field_error(&format!("{field}.{name}"), "required")),
        }
    };
    let key = get_str("key")?;
    let operator = get_str("operator")?;
    let values = match m.get_item("values") {
        Ok(v) if !v.is_none() => v
            .extract::<Vec<String>>()
            .map_err(|_| field_error(&format!("{field}.values"), "must be a list of strings"))?,
        _ => Vec::new(),
    };
    for k in m.keys()?.iter() {
        let k: String = k.extract()?;
        if !matches!(k.as_str(), "key" | "operator" | "values") {
            return Err(field_error(&format!("{field}.{k}"), "unknown field"));
        }
    }
    Ok(LabelSelectorRequirement { key, operator, values })
}

impl PySelector {
    pub fn new_from(inner: core::Selector) -> Self {
        PySelector { inner }
    }
}

#[pymethods]
impl PySelector {
    /// Parses a Calico selector; raises SelectorError naming the position of the problem.
    #[new]
    fn py_new(text: &str) -> PyResult<Self> {
        Self::parse(text)
    }

    #[staticmethod]
    fn parse(text: &str) -> PyResult<Self> {
        core::Selector::parse(text).map(|inner| PySelector { inner }).map_err(|e| selector_error(&e, text))
    }

    /// The selector that matches everything, `all()`.
    #[staticmethod]
    fn all() -> Self {
        PySelector { inner: core::Selector::all() }
    }

    /// Compiles a Kubernetes LabelSelector mapping (`matchLabels`, `matchExpressions`).
    #[staticmethod]
    fn from_label_selector(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let (labels, exprs) = label_selector_parts(obj)?;
        core::Selector::from_label_selector(&labels, &exprs)
            .map(|inner| PySelector { inner })
            .map_err(|e| selector_error(&e, ""))
    }

    /// Calico's canonical text of the selector.
    #[getter]
    fn canonical(&self) -> String {
        self.inner.canonical()
    }

    fn matches(&self, labels: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.inner.matches(&labels_from(labels)?))
    }

    /// Label restrictions the selector implies: `{label: LabelRestriction}` (empty: none).
    fn restrictions(&self) -> HashMap<String, PyLabelRestriction> {
        self.inner
            .restrictions()
            .into_iter()
            .map(|(k, r)| {
                let values = r.must_have_one_of_values.map(|vs| vs.into_iter().collect());
                (
                    k,
                    PyLabelRestriction {
                        must_be_present: r.must_be_present,
                        must_be_absent: r.must_be_absent,
                        must_have_one_of_values: values,
                    },
                )
            })
            .collect()
    }

    /// Label keys the selector mentions, sorted.
    fn keys(&self) -> Vec<String> {
        self.inner.keys().into_iter().map(str::to_string).collect()
    }

    #[getter]
    fn contains_global(&self) -> bool {
        self.inner.contains_global()
    }

    #[getter]
    fn is_global(&self) -> bool {
        self.inner.is_global()
    }

    #[getter]
    fn is_all(&self) -> bool {
        self.inner.is_all()
    }

    /// The same selector with every label key prefixed.
    fn with_key_prefix(&self, prefix: &str) -> Self {
        PySelector { inner: self.inner.with_key_prefix(prefix) }
    }

    fn __and__(&self, other: PyRef<'_, PySelector>) -> Self {
        PySelector { inner: self.inner.and(&other.inner) }
    }

    fn __str__(&self) -> String {
        self.inner.canonical()
    }

    fn __repr__(&self) -> String {
        format!("Selector({:?})", self.inner.canonical())
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.inner.hash(&mut h);
        h.finish()
    }

    fn __richcmp__<'py>(&self, other: &Bound<'py, PyAny>, op: CompareOp) -> Bound<'py, PyAny> {
        let py = other.py();
        let eq = match other.cast::<PySelector>() {
            Ok(other) => self.inner == other.get().inner,
            Err(_) => return py.NotImplemented().into_bound(py),
        };
        match op {
            CompareOp::Eq => PyBool::new(py, eq).to_owned().into_any(),
            CompareOp::Ne => PyBool::new(py, !eq).to_owned().into_any(),
            _ => py.NotImplemented().into_bound(py),
        }
    }

    /// Pickles as its canonical text.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let args = PyTuple::new(py, [slf.get().inner.canonical()])?;
        Ok((py.get_type::<PySelector>(), args))
    }
}

/// Tokens of a selector as `[(calico_kind, value_or_None), ...]` (debugging, conformance).
#[pyfunction]
fn tokenize(text: &str) -> PyResult<Vec<(&'static str, Option<String>)>> {
    let tokens = core::tokenize(text).map_err(|e| selector_error(&e, text))?;
    Ok(tokens.into_iter().map(|t| (t.kind.calico_name(), t.kind.value().map(str::to_string))).collect())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySelector>()?;
    m.add_class::<PyLabelRestriction>()?;
    m.add_function(wrap_pyfunction!(tokenize, m)?)?;
    m.add("MAX_SELECTOR_LEN", core::MAX_SELECTOR_LEN)?;
    m.add("MAX_DEPTH", core::MAX_DEPTH)?;
    m.add("MAX_LABEL_LEN", core::MAX_LABEL_LEN)?;
    Ok(())
}
