//! The one place where Rust error enums become Python exceptions.
//!
//! Every `pyclassify_core` error type that can cross into Python gets its exception class and
//! its conversion here, so the rest of the glue just maps errors through these functions and
//! Python sees one consistent exception hierarchy. Panics never cross: pyo3 turns a panic in a
//! `#[pyfunction]` into `PanicException`, and tests/test_selector_fuzz.py holds us to none.

use pyclassify_core::selector::{SelectorError as CoreSelectorError, SelectorErrorKind};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

create_exception!(
    _engine,
    SelectorError,
    PyValueError,
    "A selector (or Kubernetes LabelSelector) that cannot be parsed or compiled.\n\n\
     Attributes: message, position (character offset into the text, or None),\n\
     field (LabelSelector field path, or None), kind ('syntax', 'too-long', 'label-selector')."
);

/// Converts a core selector error; `text` is the selector it came from, to turn the byte
/// offset into a character offset a person can count.
pub(crate) fn selector_error(e: &CoreSelectorError, text: &str) -> PyErr {
    Python::attach(|py| {
        let position = match e.field {
            Some(_) => None,
            None => Some(text.get(..e.pos).map_or(e.pos, |s| s.chars().count())),
        };
        let kind = match e.kind {
            SelectorErrorKind::Syntax => "syntax",
            SelectorErrorKind::TooLong => "too-long",
            SelectorErrorKind::LabelSelector => "label-selector",
        };
        let rendered = match (&e.field, position) {
            (Some(f), _) if !f.is_empty() => format!("{f}: {}", e.message),
            (_, Some(p)) => format!("at position {p}: {}", e.message),
            _ => e.message.clone(),
        };
        let err = SelectorError::new_err(rendered);
        let value = err.value(py);
        let set = || -> PyResult<()> {
            value.setattr("message", e.message.as_str())?;
            value.setattr("position", position)?;
            value.setattr("field", e.field.as_deref())?;
            value.setattr("kind", kind)?;
            Ok(())
        };
        match set() {
            Ok(()) => err,
            Err(other) => other,
        }
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SelectorError", m.py().get_type::<SelectorError>())?;
    Ok(())
}
