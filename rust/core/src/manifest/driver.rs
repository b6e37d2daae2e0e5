//! Builds one node (a document, or one item of a List) from events through a [`Builder`]:
//! mappings with duplicate-key checks and merge keys, sequences, anchors shared by their
//! aliases (never expanded), a node budget and a depth limit. Optionally records the line of
//! every key and item on the way (the position pass).

use std::collections::HashMap;

use super::builder::{BuildError, Builder};
use super::events::{Event, Pos, Support};
use super::scalar::Scalar;
use super::{MAX_DEPTH, MAX_NODES_PER_DOCUMENT};

/// Why a node was not built.
#[derive(Debug, PartialEq)]
pub(crate) enum Failure {
    /// It uses what only the ruamel path reads (see [`Support`]).
    Fallback,
    Duplicate {
        line: u32,
        key: String,
    },
    /// A merge key's value is not a mapping or a list of mappings.
    BadMerge {
        line: u32,
    },
    /// Over the node budget, nested too deeply, or an alias inside its own anchor.
    TooLarge {
        line: u32,
    },
    /// The builder failed.
    Build {
        message: String,
    },
}

impl From<BuildError> for Failure {
    fn from(e: BuildError) -> Self {
        Failure::Build { message: e.0 }
    }
}

pub(crate) enum Step<V> {
    More,
    Done(V),
}

/// One step of a field path: a mapping key or a sequence index.
#[derive(Clone, Debug, PartialEq)]
pub enum PathPart {
    Key(Scalar<'static>),
    Index(usize),
    /// Below a merge key (`<<`) or inside a complex key: not a field of the document, dropped
    /// from the result.
    Hidden,
}

/// The lines the position pass records: (field path, 1-based line).
pub type Lines = Vec<(Vec<PathPart>, u32)>;

struct LineLog {
    path: Vec<PathPart>,
    entries: Lines,
    /// Record only below `items[i]` (one item of a List read in its whole document).
    only_item: Option<usize>,
}

impl LineLog {
    /// Whether the path is below `items[only_item]` (always, without `only_item`).
    fn inside(&self) -> bool {
        self.only_item.is_none_or(|i| {
            matches!(self.path.first(), Some(PathPart::Key(Scalar::Str(k))) if k == "items")
                && self.path.get(1) == Some(&PathPart::Index(i))
        })
    }

    fn record(&mut self, line: u32) {
        if !self.inside() {
            return;
        }
        if !self.path.contains(&PathPart::Hidden) {
            self.entries.push((self.path.clone(), line));
        }
    }
}

enum Frame<B: Builder> {
    Map {
        map: B::Map,
        key: Option<(B::Value, u32, bool)>,
        merges: Vec<(B::Value, u32)>,
        anchor: usize,
        line: u32,
    },
    Seq {
        seq: B::Seq,
        anchor: usize,
        len: usize,
    },
    /// The sequence after a merge key: the mappings to merge.
    Merges {
        sources: Vec<(B::Value, u32)>,
    },
}

enum Anchored<V> {
    Building,
    Built(V),
    /// Its node was not built here (left to the fallback, or invalid).
    Unavailable,
}

pub(crate) struct Driver<B: Builder> {
    pub builder: B,
    stack: Vec<Frame<B>>,
    anchors: HashMap<usize, Anchored<B::Value>>,
    nodes: usize,
    budget: usize,
    /// Containers open in the event stream (frames or not): what to skip after a failure.
    open: usize,
    /// Nodes completing at this depth are handed out, not attached (the items of a List).
    unit_depth: usize,
    lines: Option<LineLog>,
}

impl<B: Builder> Driver<B> {
    pub fn new(builder: B) -> Self {
        Driver {
            builder,
            stack: Vec::new(),
            anchors: HashMap::new(),
            nodes: 0,
            budget: MAX_NODES_PER_DOCUMENT,
            open: 0,
            unit_depth: 0,
            lines: None,
        }
    }

    /// A driver of the position pass: records lines (below `items[only_item]` if given).
    pub fn recording_lines(builder: B, only_item: Option<usize>) -> Self {
        let mut d = Driver::new(builder);
        d.lines = Some(LineLog { path: Vec::new(), entries: Vec::new(), only_item });
        d
    }

    /// Whether the one List item the lines are recorded for has been read whole (what follows
    /// it need not be read, nor even be valid).
    pub fn past_item(&self) -> bool {
        self.lines.as_ref().is_some_and(|l| l.only_item.is_some() && !l.entries.is_empty() && !l.inside())
    }

    pub fn take_lines(&mut self) -> Lines {
        self.lines.as_mut().map(|l| std::mem::take(&mut l.entries)).unwrap_or_default()
    }

    /// Forgets everything of the last document (anchors do not cross documents).
    pub fn start_document(&mut self) {
        self.stack.clear();
        self.anchors.clear();
        self.nodes = 0;
        self.open = 0;
        self.unit_depth = 0;
    }

    /// Another node budget than [`MAX_NODES_PER_DOCUMENT`] (tests).
    pub fn set_budget(&mut self, budget: usize) {
        self.budget = budget;
    }

    /// The node budget starts again: each item of a streamed List has its own, as a document
    /// does (they are handed out one by one; aliases are shared, never expanded, either way).
    pub fn reset_budget(&mut self) {
        self.nodes = 0;
    }

    /// Frames open (0 between nodes).
    pub fn depth(&self) -> usize {
        self.stack.len()
    }

    /// Hands out nodes that complete at `depth` instead of attaching them.
    pub fn set_unit_depth(&mut self, depth: usize) {
        self.unit_depth = depth;
    }

    /// The next event is a mapping key.
    pub fn expecting_key(&self) -> bool {
        matches!(self.stack.last(), Some(Frame::Map { key: None, .. }))
    }

    /// Gives up the node under construction above `depth` frames (after a failure): its
    /// anchors become unavailable. Returns how many containers of it are still open in the
    /// event stream (to skip).
    pub fn abandon(&mut self, depth: usize) -> usize {
        self.stack.truncate(depth);
        for anchored in self.anchors.values_mut() {
            if matches!(anchored, Anchored::Building) {
                *anchored = Anchored::Unavailable;
            }
        }
        let still_open = self.open.saturating_sub(depth);
        self.open = depth;
        still_open
    }

    /// Completes the value of the pending key or item with `value` built elsewhere.
    pub fn attach(&mut self, value: B::Value, line: u32) -> Result<Step<B::Value>, Failure> {
        self.complete(value, line)
    }

    pub fn feed(&mut self, event: Event<'_>, at: Pos) -> Result<Step<B::Value>, Failure> {
        match event {
            Event::MapStart { .. } | Event::SeqStart { .. } => self.open += 1,
            Event::MapEnd | Event::SeqEnd => self.open = self.open.saturating_sub(1),
            _ => {}
        }
        self.nodes += 1;
        if self.nodes > self.budget {
            return Err(Failure::TooLarge { line: at.line });
        }
        match event {
            Event::MapStart { anchor, support } | Event::SeqStart { anchor, support } => {
                let is_map = matches!(event, Event::MapStart { .. });
                if self.unsupported(support) {
                    return Err(Failure::Fallback);
                }
                if self.expecting_key() {
                    // A complex key: only the position pass reads it (as no field).
                    let Some(log) = &mut self.lines else { return Err(Failure::Fallback) };
                    log.path.push(PathPart::Hidden);
                }
                if self.stack.len() >= MAX_DEPTH {
                    return Err(Failure::TooLarge { line: at.line });
                }
                self.enter_value(at.line);
                if anchor != 0 {
                    self.anchors.insert(anchor, Anchored::Building);
                }
                let merging = matches!(self.stack.last(), Some(Frame::Map { key: Some((_, _, true)), .. }));
                let frame = if is_map {
                    Frame::Map { map: self.builder.map()?, key: None, merges: Vec::new(), anchor, line: at.line }
                } else if merging {
                    Frame::Merges { sources: Vec::new() }
                } else {
                    Frame::Seq { seq: self.builder.seq()?, anchor, len: 0 }
                };
                self.stack.push(frame);
                Ok(Step::More)
            }
            Event::Scalar { value, anchor, support, merge } => {
                if self.unsupported(support) {
                    return Err(Failure::Fallback);
                }
                if self.expecting_key() {
                    let key = self.builder.key(&value)?;
                    if anchor != 0 {
                        self.anchors.insert(anchor, Anchored::Built(self.builder.share(&key)));
                    }
                    if let Some(log) = &mut self.lines {
                        log.path.push(if merge { PathPart::Hidden } else { PathPart::Key(value.into_owned()) });
                        log.record(at.line);
                    }
                    if let Some(Frame::Map { key: slot, .. }) = self.stack.last_mut() {
                        *slot = Some((key, at.line, merge));
                    }
                    return Ok(Step::More);
                }
                self.enter_value(at.line);
                let built = self.builder.scalar(&value)?;
                if anchor != 0 {
                    self.anchors.insert(anchor, Anchored::Built(self.builder.share(&built)));
                }
                self.complete(built, at.line)
            }
            Event::Alias(id) => {
                if self.expecting_key() {
                    // An alias as a key: only the position pass reads it (as no field).
                    let Some(log) = &mut self.lines else { return Err(Failure::Fallback) };
                    log.path.push(PathPart::Hidden);
                    let key = self.builder.scalar(&Scalar::Null)?;
                    if let Some(Frame::Map { key: slot, .. }) = self.stack.last_mut() {
                        *slot = Some((key, at.line, false));
                    }
                    return Ok(Step::More);
                }
                let value = match self.anchors.get(&id) {
                    Some(Anchored::Built(v)) => self.builder.share(v),
                    Some(Anchored::Building) => {
                        return Err(Failure::TooLarge { line: at.line });
                    }
                    _ => return Err(Failure::Fallback),
                };
                self.enter_value(at.line);
                self.complete(value, at.line)
            }
            Event::MapEnd => match self.stack.pop() {
                Some(Frame::Map { mut map, merges, anchor, line, .. }) => {
                    for (source, merge_line) in &merges {
                        if !self.builder.merge(&mut map, source)? {
                            return Err(Failure::BadMerge { line: *merge_line });
                        }
                    }
                    let value = self.builder.map_value(map)?;
                    self.built(anchor, &value);
                    self.complete(value, line)
                }
                _ => Err(Failure::Build { message: "unbalanced mapping end".into() }),
            },
            Event::SeqEnd => match self.stack.pop() {
                Some(Frame::Seq { seq, anchor, .. }) => {
                    let value = self.builder.seq_value(seq)?;
                    self.built(anchor, &value);
                    self.complete(value, at.line)
                }
                Some(Frame::Merges { sources }) => {
                    if let Some(log) = &mut self.lines {
                        log.path.pop();
                    }
                    if let Some(Frame::Map { key, merges, .. }) = self.stack.last_mut() {
                        *key = None;
                        merges.extend(sources);
                    }
                    Ok(Step::More)
                }
                _ => Err(Failure::Build { message: "unbalanced sequence end".into() }),
            },
            Event::StreamEnd | Event::DocStart { .. } | Event::DocEnd => {
                Err(Failure::Build { message: "document ended inside a node".into() })
            }
        }
    }

    /// Whether a node with this support stops the build (the position pass reads every node).
    fn unsupported(&self, support: Support) -> bool {
        support == Support::Fallback && self.lines.is_none()
    }

    fn built(&mut self, anchor: usize, value: &B::Value) {
        if anchor != 0 {
            self.anchors.insert(anchor, Anchored::Built(self.builder.share(value)));
        }
    }

    /// A value begins: as an item, it has a path step and a line of its own.
    fn enter_value(&mut self, line: u32) {
        let Some(log) = &mut self.lines else { return };
        match self.stack.last() {
            None => log.record(line), // the root: path ()
            Some(Frame::Seq { len, .. }) => {
                log.path.push(PathPart::Index(*len));
                log.record(line);
            }
            Some(Frame::Merges { sources }) => {
                log.path.push(PathPart::Index(sources.len()));
            }
            Some(Frame::Map { .. }) => {} // the key recorded the line
        }
    }

    fn complete(&mut self, value: B::Value, line: u32) -> Result<Step<B::Value>, Failure> {
        if self.stack.len() <= self.unit_depth {
            return Ok(Step::Done(value));
        }
        if let Some(log) = &mut self.lines {
            log.path.pop();
        }
        match self.stack.last_mut() {
            None => Ok(Step::Done(value)),
            Some(Frame::Map { map, key, merges, .. }) => {
                let Some((k, key_line, is_merge)) = key.take() else {
                    // A complex key just ended (position pass): its value follows.
                    *key = Some((value, line, false));
                    if let Some(log) = &mut self.lines {
                        log.path.push(PathPart::Hidden);
                    }
                    return Ok(Step::More);
                };
                if is_merge {
                    merges.push((value, key_line));
                } else {
                    let shown = self.builder.share(&k);
                    if !self.builder.insert(map, k, value)? {
                        return Err(Failure::Duplicate { line: key_line, key: self.builder.describe(&shown) });
                    }
                }
                Ok(Step::More)
            }
            Some(Frame::Seq { seq, len, .. }) => {
                self.builder.push(seq, value)?;
                *len += 1;
                Ok(Step::More)
            }
            Some(Frame::Merges { sources }) => {
                sources.push((value, line));
                Ok(Step::More)
            }
        }
    }
}
