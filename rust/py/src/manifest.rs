//! Python face of `pyclassify_core::manifest`: glue only. The reader builds plain Python objects
//! (dict/list/str/int/float/bool/None) directly, with mapping keys shared across objects.

use fnv::FnvBuildHasher;
use std::collections::HashMap;

use pyclassify_core::manifest::{
    decode, unit_lines, BuildError, Builder, ManifestStream, PathPart, Record, Scalar, Span, Syntax,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::errors::manifest_error;

/// Keys longer than this are not shared (they are rarely repeated).
const SHARED_KEY_MAX_LEN: usize = 64;
/// At most this many distinct keys are shared (a file of unique keys stays bounded).
const SHARED_KEYS_MAX: usize = 1 << 16;

/// Builds Python objects. Its methods run only inside `ManifestReader.__next__`, which Python
/// calls attached to the interpreter.
#[derive(Default)]
struct PyBuilder {
    /// FNV-1a: the shared-key table hashes many short strings.
    keys: HashMap<Box<str>, Py<PyString>, FnvBuildHasher>,
}

fn py() -> Python<'static> {
    // SAFETY: every caller runs under a #[pymethods] call, attached to the interpreter.
    unsafe { Python::assume_attached() }
}

fn build_error(e: PyErr) -> BuildError {
    BuildError(format!("cannot build the document: {e}"))
}

fn scalar_object(py: Python<'_>, scalar: &Scalar<'_>) -> PyResult<Py<PyAny>> {
    Ok(match scalar {
        Scalar::Null => py.None(),
        Scalar::Bool(b) => b.into_pyobject(py)?.to_owned().into_any().unbind(),
        Scalar::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
        Scalar::BigInt { negative, radix, digits } => {
            let n = py.get_type::<PyInt>().call1((digits.as_str(), *radix))?;
            if *negative {
                n.neg()?.unbind()
            } else {
                n.unbind()
            }
        }
        Scalar::Float(f) => PyFloat::new(py, *f).into_any().unbind(),
        Scalar::Str(s) => PyString::new(py, s).into_any().unbind(),
    })
}

impl Builder for PyBuilder {
    type Value = Py<PyAny>;
    type Map = Py<PyDict>;
    type Seq = Vec<Py<PyAny>>;

    fn scalar(&mut self, scalar: &Scalar<'_>) -> Result<Py<PyAny>, BuildError> {
        scalar_object(py(), scalar).map_err(build_error)
    }

    fn key(&mut self, scalar: &Scalar<'_>) -> Result<Py<PyAny>, BuildError> {
        let py = py();
        let Scalar::Str(s) = scalar else { return self.scalar(scalar) };
        if s.len() > SHARED_KEY_MAX_LEN {
            return Ok(PyString::new(py, s).into_any().unbind());
        }
        if let Some(shared) = self.keys.get(&**s) {
            return Ok(shared.clone_ref(py).into_any());
        }
        let key = PyString::new(py, s).unbind();
        if self.keys.len() < SHARED_KEYS_MAX {
            self.keys.insert(Box::from(&**s), key.clone_ref(py));
        }
        Ok(key.into_any())
    }

    fn map(&mut self) -> Result<Py<PyDict>, BuildError> {
        Ok(PyDict::new(py()).unbind())
    }

    fn insert(&mut self, map: &mut Py<PyDict>, key: Py<PyAny>, value: Py<PyAny>) -> Result<bool, BuildError> {
        let dict = map.bind(py());
        let before = dict.len();
        dict.set_item(key, value).map_err(build_error)?;
        Ok(dict.len() > before)
    }

    fn merge(&mut self, map: &mut Py<PyDict>, source: &Py<PyAny>) -> Result<bool, BuildError> {
        let py = py();
        let Ok(source) = source.bind(py).cast::<PyDict>() else { return Ok(false) };
        let dict = map.bind(py);
        for (k, v) in source.iter() {
            if !dict.contains(&k).map_err(build_error)? {
                dict.set_item(k, v).map_err(build_error)?;
            }
        }
        Ok(true)
    }

    fn map_value(&mut self, map: Py<PyDict>) -> Result<Py<PyAny>, BuildError> {
        Ok(map.into_any())
    }

    fn seq(&mut self) -> Result<Vec<Py<PyAny>>, BuildError> {
        Ok(Vec::new())
    }

    fn push(&mut self, seq: &mut Vec<Py<PyAny>>, value: Py<PyAny>) -> Result<(), BuildError> {
        seq.push(value);
        Ok(())
    }

    fn seq_value(&mut self, seq: Vec<Py<PyAny>>) -> Result<Py<PyAny>, BuildError> {
        PyList::new(py(), seq).map(|l| l.into_any().unbind()).map_err(build_error)
    }

    fn share(&self, value: &Py<PyAny>) -> Py<PyAny> {
        value.clone_ref(py())
    }

    fn describe(&self, key: &Py<PyAny>) -> String {
        let key = key.bind(py());
        match key.cast::<PyString>() {
            Ok(s) => format!("{:?}", s.to_string_lossy()),
            Err(_) => key.str().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        }
    }
}

fn syntax_name(syntax: Syntax) -> &'static str {
    match syntax {
        Syntax::Json => "json",
        Syntax::Yaml => "yaml",
    }
}

fn span_tuple<'py>(py: Python<'py>, span: Span) -> PyResult<Bound<'py, PyTuple>> {
    (span.start, span.end, span.line, span.col).into_pyobject(py)
}

/// The documents of one manifest file's bytes, one record at a time (see `_engine.pyi`).
#[pyclass(name = "ManifestReader", module = "pyclassify._engine")]
pub struct PyManifestReader {
    // Declared before `data`, so dropped before it: the stream borrows data's buffer.
    stream: Option<ManifestStream<'static, PyBuilder>>,
    /// A record to give before (or instead of) the stream's: the bytes are not UTF-8.
    first: Option<(u32, &'static str)>,
    syntax: Syntax,
    data: Py<PyBytes>,
}

#[pymethods]
impl PyManifestReader {
    #[new]
    fn new(data: Bound<'_, PyBytes>) -> Self {
        let bytes: &[u8] = data.as_bytes();
        // SAFETY: `bytes` is the buffer of an immutable bytes object that `self.data` keeps
        // alive for as long as the stream, which is dropped first.
        let bytes: &'static [u8] = unsafe { std::mem::transmute::<&[u8], &'static [u8]>(bytes) };
        let (stream, first, syntax) = match decode(bytes) {
            Ok((text, bom)) => {
                let stream = ManifestStream::new(text, bom, PyBuilder::default());
                let syntax = stream.syntax();
                (Some(stream), None, syntax)
            }
            Err(line) => (None, Some((line, "not UTF-8 text")), Syntax::Yaml),
        };
        PyManifestReader { stream, first, syntax, data: data.unbind() }
    }

    /// "json" or "yaml": how the text is read (JSON-looking text that is not JSON is YAML).
    #[getter]
    fn syntax(&self) -> &'static str {
        syntax_name(self.syntax)
    }

    /// The bytes being read.
    #[getter]
    fn data(&self, py: Python<'_>) -> Py<PyBytes> {
        self.data.clone_ref(py)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        if let Some((line, message)) = self.first.take() {
            return Ok(Some(("problem", line, message).into_pyobject(py)?));
        }
        let Some(record) = self.stream.as_mut().and_then(ManifestStream::next_record) else {
            self.stream = None;
            return Ok(None);
        };
        let tuple = match record {
            Record::Document { value, line, region } => {
                ("document", value, line, span_tuple(py, region)?).into_pyobject(py)?
            }
            Record::ListStart { kind, api_version, line, region } => {
                ("list", kind, api_version, line, span_tuple(py, region)?).into_pyobject(py)?
            }
            Record::ListItem { value, index, line, span } => {
                ("item", value, index, line, span_tuple(py, span)?).into_pyobject(py)?
            }
            Record::Fallback { region, line, item } => {
                let (index, span) = match item {
                    Some((index, span)) => (Some(index), Some(span_tuple(py, span)?)),
                    None => (None, None),
                };
                ("fallback", line, span_tuple(py, region)?, index, span).into_pyobject(py)?
            }
            Record::Problem { line, message } => ("problem", line, message).into_pyobject(py)?,
        };
        Ok(Some(tuple))
    }
}

/// The line of every key and item of one document or List item (`_engine.pyi`).
#[pyfunction]
#[pyo3(signature = (data, syntax, start, end, line, col, item=None))]
fn manifest_lines<'py>(
    py: Python<'py>,
    data: &[u8],
    syntax: &str,
    start: usize,
    end: usize,
    line: u32,
    col: u32,
    item: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let syntax = match syntax {
        "json" => Syntax::Json,
        "yaml" => Syntax::Yaml,
        other => return Err(manifest_error(&format!("unknown syntax {other:?}"))),
    };
    let end = if end == 0 { data.len() } else { end };
    let slice = data.get(start..end).ok_or_else(|| manifest_error("span outside the data"))?;
    let text = std::str::from_utf8(slice).map_err(|_| manifest_error("span is not UTF-8 text"))?;
    let lines = unit_lines(text, syntax, line, col, item).map_err(|e| manifest_error(&e))?;
    let out = PyDict::new(py);
    for (path, line) in lines {
        let mut parts = Vec::with_capacity(path.len());
        for part in path {
            parts.push(match part {
                PathPart::Key(k) => scalar_object(py, &k)?.into_bound(py),
                PathPart::Index(i) => i.into_pyobject(py)?.into_any(),
                PathPart::Hidden => continue,
            });
        }
        out.set_item(PyTuple::new(py, parts)?, line)?;
    }
    Ok(out)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyManifestReader>()?;
    m.add_function(wrap_pyfunction!(manifest_lines, m)?)?;
    Ok(())
}
