//! Python face of `pyclassify_core::schema`: glue only. The walker reads the Python objects a
//! manifest was read into (dict/list/str/int/float/bool/None) in place.

use pyclassify_core::schema::{Schemas, Shape, Value};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};

/// The bundled schemas, compiled: whether an object conforms to its kind's schema.
#[pyclass(name = "SchemaChecker", module = "pyclassify._engine", frozen)]
pub struct PySchemaChecker {
    inner: Schemas,
}

struct PyValue<'py>(Bound<'py, PyAny>);

impl Value for PyValue<'_> {
    fn kind_of(&self) -> Option<(String, String)> {
        let d = self.0.cast::<PyDict>().ok()?;
        let field = |name: &str| -> Option<String> {
            let v = d.get_item(name).ok()??;
            Some(v.cast::<PyString>().ok()?.to_str().ok()?.to_owned())
        };
        Some((field("apiVersion")?, field("kind")?))
    }

    fn shape(&self) -> Shape {
        let v = &self.0;
        if v.is_exact_instance_of::<PyString>() {
            Shape::Str
        } else if v.is_exact_instance_of::<PyDict>() {
            Shape::Map
        } else if v.is_exact_instance_of::<PyList>() {
            Shape::List
        } else if v.is_exact_instance_of::<PyBool>() {
            Shape::Bool
        } else if v.is_exact_instance_of::<PyInt>() {
            v.extract::<i64>().map_or(Shape::BigInt, Shape::Int)
        } else if v.is_none() {
            Shape::Null
        } else if v.is_exact_instance_of::<PyFloat>() {
            Shape::Float
        } else {
            Shape::Other
        }
    }

    fn entries<F: FnMut(Option<&str>, Self) -> bool>(&self, mut f: F) -> bool {
        let Ok(d) = self.0.cast::<PyDict>() else { return true };
        for (k, v) in d.iter() {
            let key = k.cast::<PyString>().ok().and_then(|s| s.to_str().ok());
            if !f(key, PyValue(v)) {
                return false;
            }
        }
        true
    }

    fn items<F: FnMut(Self) -> bool>(&self, mut f: F) -> bool {
        let Ok(l) = self.0.cast::<PyList>() else { return true };
        l.iter().all(|item| f(PyValue(item)))
    }
}

#[pymethods]
impl PySchemaChecker {
    /// Compiles the schema files (their JSON text); ValueError if one is not a schema file.
    #[new]
    fn py_new(files: Vec<String>) -> PyResult<Self> {
        let texts: Vec<&str> = files.iter().map(String::as_str).collect();
        let inner = Schemas::from_json(&texts).map_err(PyValueError::new_err)?;
        Ok(PySchemaChecker { inner })
    }

    /// Every `apiVersion/Kind` with a schema, sorted.
    #[getter]
    fn kinds(&self) -> Vec<String> {
        let mut out: Vec<String> = self.inner.kinds().collect();
        out.sort();
        out
    }

    /// Whether the object `obj` conforms to the schema of its own apiVersion and kind (to one of
    /// its shapes; a typed list to `v1` `List`); None when there is no such schema. False also
    /// for a value whose JSON type it cannot tell (a timestamp, an integer beyond 64 bits): the
    /// detailed walk in Python judges those.
    fn check(&self, obj: &Bound<'_, PyAny>) -> Option<bool> {
        self.inner.check(&PyValue(obj.clone()))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySchemaChecker>()?;
    Ok(())
}
