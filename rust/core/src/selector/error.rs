//! The selector layer's one error type.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectorErrorKind {
    /// The text is not a selector.
    Syntax,
    /// Input, a label or the nesting is past a limit (hostile or oversized input).
    TooLong,
    /// A Kubernetes LabelSelector that cannot be expressed (bad operator, values).
    LabelSelector,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorError {
    pub kind: SelectorErrorKind,
    /// Byte offset into the selector text (0 for LabelSelector errors).
    pub pos: usize,
    pub message: String,
    /// For LabelSelector errors: the field the error is in, e.g. `matchExpressions[1].values`.
    pub field: Option<String>,
}

impl SelectorError {
    pub fn new(kind: SelectorErrorKind, pos: usize, message: impl Into<String>) -> Self {
        SelectorError { kind, pos, message: message.into(), field: None }
    }

    pub fn in_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        SelectorError {
            kind: SelectorErrorKind::LabelSelector,
            pos: 0,
            message: message.into(),
            field: Some(field.into()),
        }
    }
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{field}: {}", self.message),
            None => write!(f, "at position {}: {}", self.pos, self.message),
        }
    }
}

impl std::error::Error for SelectorError {}
