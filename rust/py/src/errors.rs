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

create_exception!(
    _engine,
    ImagePatternError,
    PyValueError,
    "An image-path regular expression (ContainerAdmissionPolicy) that cannot be compiled.\n\n\
     Attributes: message, index (position of the pattern in the list, or None when the set as a\n\
     whole is too large)."
);

/// Converts a core image-pattern error (`pyclassify_core::admission::PatternError`).
pub(crate) fn image_pattern_error(e: &pyclassify_core::admission::PatternError) -> PyErr {
    Python::attach(|py| {
        let err = ImagePatternError::new_err(e.to_string());
        let value = err.value(py);
        let set = || -> PyResult<()> {
            value.setattr("message", e.message.as_str())?;
            value.setattr("index", e.index)?;
            Ok(())
        };
        match set() {
            Ok(()) => err,
            Err(other) => other,
        }
    })
}

create_exception!(
    _engine,
    EngineError,
    PyValueError,
    "The engine could not be built from its spec, or was asked about an impossible flow."
);

/// Converts an engine error (a bad spec, a selector in it, an impossible flow).
pub(crate) fn engine_error(e: pyclassify_core::engine::EngineError) -> PyErr {
    EngineError::new_err(e.to_string())
}

create_exception!(
    _engine,
    ConnTrackError,
    PyValueError,
    "A connection tracker configuration out of range, or batch inputs that do not fit together."
);

/// Converts a conntrack error (`pyclassify_core::conntrack::CtError`).
pub(crate) fn conntrack_error(e: &pyclassify_core::conntrack::CtError) -> PyErr {
    ConnTrackError::new_err(e.to_string())
}

create_exception!(
    _engine,
    ManifestError,
    PyValueError,
    "The lines of a manifest document could not be recovered (a span that is not a document)."
);

/// Converts a manifest position-pass error (`pyclassify_core::manifest::unit_lines`).
pub(crate) fn manifest_error(message: &str) -> PyErr {
    ManifestError::new_err(message.to_string())
}

create_exception!(
    _engine,
    DomainPatternError,
    PyValueError,
    "A domain pattern (Calico `domains`) that cannot be parsed.\n\n\
     Attributes: message, pattern (the text given)."
);

/// Converts a core domain-pattern refusal (`pyclassify_core::dns::DomainPattern::parse`);
/// `pattern` is the text it came from.
pub(crate) fn domain_pattern_exc(message: &str, pattern: &str) -> PyErr {
    Python::attach(|py| {
        let err = DomainPatternError::new_err(message.to_string());
        let value = err.value(py);
        let set = || -> PyResult<()> {
            value.setattr("message", message)?;
            value.setattr("pattern", pattern)?;
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
    m.add("ConnTrackError", m.py().get_type::<ConnTrackError>())?;
    m.add("EngineError", m.py().get_type::<EngineError>())?;
    m.add("ImagePatternError", m.py().get_type::<ImagePatternError>())?;
    m.add("ManifestError", m.py().get_type::<ManifestError>())?;
    m.add("DomainPatternError", m.py().get_type::<DomainPatternError>())?;
    Ok(())
}
