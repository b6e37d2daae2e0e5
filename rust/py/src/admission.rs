//! Python face of `pyclassify_core::admission` (ContainerAdmissionPolicy image patterns): glue only.

use pyclassify_core::admission as core;
use pyo3::prelude::*;

use crate::errors::image_pattern_error;

/// The regular expressions of one `imagePath` criterion, compiled once (linear-time engine).
///
/// A pattern matches if it matches anywhere in the image reference (write `^...$` to anchor).
#[pyclass(name = "ImagePatternSet", module = "pyclassify._engine", frozen)]
pub struct PyImagePatternSet {
    inner: core::ImagePatternSet,
}

#[pymethods]
impl PyImagePatternSet {
    #[new]
    fn new(patterns: Vec<String>) -> PyResult<Self> {
        core::ImagePatternSet::new(&patterns)
            .map(|inner| PyImagePatternSet { inner })
            .map_err(|e| image_pattern_error(&e))
    }

    /// The patterns, in the order given.
    #[getter]
    fn patterns(&self) -> Vec<String> {
        self.inner.patterns().to_vec()
    }

    /// Whether any pattern matches somewhere in `image`.
    fn is_match(&self, py: Python<'_>, image: &str) -> bool {
        py.detach(|| self.inner.is_match(image))
    }

    /// Index of the first pattern (in the order given) that matches `image`, or None.
    fn first_match(&self, py: Python<'_>, image: &str) -> Option<usize> {
        py.detach(|| self.inner.first_match(image))
    }

    /// Indexes of every pattern that matches `image`, ascending.
    fn matches(&self, py: Python<'_>, image: &str) -> Vec<usize> {
        py.detach(|| self.inner.matches(image))
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!("ImagePatternSet({:?})", self.inner.patterns())
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyImagePatternSet>()?;
    m.add("MAX_IMAGE_PATTERNS", core::MAX_PATTERNS)?;
    m.add("MAX_IMAGE_PATTERN_LEN", core::MAX_PATTERN_LEN)?;
    m.add("MAX_IMAGE_LEN", core::MAX_IMAGE_LEN)?;
    Ok(())
}
