//! Reading Kubernetes manifests: YAML and JSON files into documents, at input speed, with the
//! line of every field recovered only for the documents that need it.
//!
//! - [`ManifestStream`] reads a file's text into [`Record`]s one at a time: whole documents,
//!   and the items of a List one by one (even when the List is one huge document). Values are
//!   built by the caller's [`Builder`] (Python objects in the pyo3 glue), aliases shared, never
//!   expanded. Each record carries a cheap handle to its text: a byte [`Span`] and its line.
//! - [`unit_lines`] is the position pass: it re-reads one document or List item from its span
//!   and returns the line of every mapping key and sequence item (field path → line), for error
//!   messages that name `file:line: field.path`.
//!
//! YAML is read by saphyr-parser (YAML 1.2, events with positions), its scalars resolved as
//! ruamel.yaml's round-trip loader resolves them (the loader this replaces; `scalar`). JSON has
//! its own reader (`json`), which also validates a file in a first pass so that JSON-looking
//! text that is not JSON can be read as YAML instead. The few constructs only ruamel reads
//! (`!!set`, `!!binary`, `!!omap` and other core tags, complex keys, `%YAML 1.1`) come out as
//! [`Record::Fallback`], for the caller's ruamel path.
//!
//! Bad input never panics: it becomes a [`Record::Problem`] (`cargo fuzz run manifest_parse`).

mod builder;
mod driver;
mod events;
mod json;
mod lines;
mod scalar;
mod stream;
mod yaml;

pub use builder::{BuildError, Builder, NoValues, Value, ValueBuilder};
pub use driver::{Lines, PathPart};
pub use lines::unit_lines;
pub use scalar::{resolve_plain, Scalar};
pub use stream::{ManifestStream, Record, Span, Syntax};

/// A bound on the nodes of one document, far beyond any real manifest.
pub const MAX_NODES_PER_DOCUMENT: usize = 5_000_000;
/// A bound on nesting, far beyond any real manifest (and within Python's recursion limit for
/// whoever walks the result).
pub const MAX_DEPTH: usize = 256;

pub(crate) const TOO_LARGE: &str =
    "document too large, nested too deeply or recursive (an alias inside its own anchor)";

/// The text of a manifest file's bytes and the length of its byte order mark; or, when the
/// bytes are not UTF-8, the 1-based line of the first bad byte.
pub fn decode(bytes: &[u8]) -> Result<(&str, usize), u32> {
    let bom = if bytes.starts_with(b"\xEF\xBB\xBF") { 3 } else { 0 };
    match std::str::from_utf8(&bytes[bom..]) {
        Ok(text) => Ok((text, bom)),
        Err(e) => {
            let bad = bom + e.valid_up_to();
            Err(bytes[..bad].iter().filter(|&&b| b == b'\n').count() as u32 + 1)
        }
    }
}
