//! The event stream both readers (YAML and JSON) produce: documents, containers and resolved
//! scalars, each with its position.

use super::scalar::Scalar;

/// Where an event starts or ends. `index` is the reader's own unit (characters for YAML, bytes
/// for JSON); [`EventSource::byte_offset`] turns it into a byte offset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pos {
    pub line: u32,
    pub col: u32,
    pub index: usize,
}

/// Whether this reader builds a node itself or leaves it (and its whole document or List item)
/// to the ruamel.yaml path of the Python loader: core tags other than `!!str`/`!!map`/`!!seq`
/// (`!!set`, `!!binary`, `!!omap`, `!!int` ...), the non-specific tag `!`, complex keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Support {
    Native,
    Fallback,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Event<'t> {
    StreamEnd,
    /// `region`: where the document's text begins, with the directives and comments before it
    /// (a text that parses alone as this document). `fallback`: a directive makes the
    /// document's meaning differ (`%YAML 1.1`).
    DocStart {
        region: Pos,
        fallback: bool,
    },
    DocEnd,
    MapStart {
        anchor: usize,
        support: Support,
    },
    MapEnd,
    SeqStart {
        anchor: usize,
        support: Support,
    },
    SeqEnd,
    /// `merge`: the plain scalar `<<` (a merge key where it is a key).
    Scalar {
        value: Scalar<'t>,
        anchor: usize,
        support: Support,
        merge: bool,
    },
    Alias(usize),
}

/// Invalid syntax: after it a reader yields nothing more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub line: u32,
    pub message: String,
}

pub(crate) type Located<'t> = (Event<'t>, Pos, Pos);

pub(crate) trait EventSource<'t> {
    /// The next event with its start and end; `StreamEnd` again and again at the end.
    fn next_event(&mut self) -> Result<Located<'t>, SyntaxError>;
    /// The byte offset of a position's `index`, relative to the text the reader was given.
    /// Positions asked for must mostly move forward (it walks from the last one asked).
    fn byte_offset(&mut self, index: usize) -> usize;
    /// The values of the top-level mapping's `kind` and `apiVersion` that are still ahead
    /// (`None` if absent, not scalars, or unreadable).
    /// Called just after the start event of a value of the top-level mapping.
    fn top_level_type_ahead(&self) -> TopLevelType;
}

/// `kind` and `apiVersion` of a document's top-level mapping, when they are scalars.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct TopLevelType {
    pub kind: Option<Scalar<'static>>,
    pub api_version: Option<Scalar<'static>>,
    /// `apiVersion` is there but is not a scalar (a List then is not streamed).
    pub api_version_not_scalar: bool,
}

/// Collects `kind`/`apiVersion` of a top-level mapping from its events.
pub(crate) struct TopLevelScan {
    pub found: TopLevelType,
    depth: usize,
    expect: Expect,
    /// What comes at depth 1 once the container that started there ends.
    after_container: Expect,
}

#[derive(Clone, Copy)]
enum Expect {
    Key,
    Value(Option<&'static str>),
}

impl TopLevelScan {
    /// A scan fed from the top-level mapping's start event on.
    pub fn new() -> Self {
        TopLevelScan { found: TopLevelType::default(), depth: 0, expect: Expect::Key, after_container: Expect::Key }
    }

    /// A scan that starts just inside a container that is the value of some other key of the
    /// top-level mapping (the `items` sequence).
    pub fn inside_value() -> Self {
        TopLevelScan { depth: 2, ..Self::new() }
    }

    /// Feeds one event; false once the top-level mapping has ended.
    pub fn feed(&mut self, event: &Event<'_>) -> bool {
        match event {
            Event::MapStart { .. } | Event::SeqStart { .. } => {
                if self.depth == 1 {
                    self.after_container = match self.expect {
                        Expect::Key => Expect::Value(None),
                        Expect::Value(Some("apiVersion")) => {
                            self.found.api_version_not_scalar = true;
                            Expect::Key
                        }
                        Expect::Value(_) => Expect::Key,
                    };
                }
                self.depth += 1;
            }
            Event::MapEnd | Event::SeqEnd => {
                self.depth = self.depth.saturating_sub(1);
                match self.depth {
                    0 => return false,
                    1 => self.expect = self.after_container,
                    _ => {}
                }
            }
            Event::Scalar { value, .. } if self.depth == 1 => {
                self.expect = match self.expect {
                    Expect::Key => Expect::Value(match value.as_str() {
                        Some("kind") => Some("kind"),
                        Some("apiVersion") => Some("apiVersion"),
                        _ => None,
                    }),
                    Expect::Value(name) => {
                        if let Some(name) = name {
                            let slot = if name == "kind" { &mut self.found.kind } else { &mut self.found.api_version };
                            if slot.is_none() {
                                *slot = Some(value.clone().into_owned());
                            }
                        }
                        Expect::Key
                    }
                }
            }
            Event::Alias(_) if self.depth == 1 => {
                self.expect = match self.expect {
                    Expect::Key => Expect::Value(None),
                    Expect::Value(_) => Expect::Key,
                }
            }
            Event::StreamEnd | Event::DocEnd => return false,
            _ => {}
        }
        true
    }
}
