//! The documents of one manifest file, one [`Record`] at a time.
//!
//! A document becomes one record when it ends. The items of a List (`kind: List` or a typed
//! `FooList`) become one record each, as they are read, even when the List is one huge document:
//! when the `items` of a top-level mapping begin and its `kind` is not known yet (kubectl prints
//! it after the items), the reader looks ahead for it (JSON: from a first pass over the text that
//! also validates it; YAML: a copy of the parser reads on without building anything).

use super::builder::Builder;
use super::driver::{Driver, Failure, Step};
use super::events::{Event, EventSource, Located, Pos, Support, SyntaxError, TopLevelScan, TopLevelType};
use super::json::JsonEvents;
use super::scalar::Scalar;
use super::yaml::YamlEvents;
use super::TOO_LARGE;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    Json,
    Yaml,
}

impl Syntax {
    pub fn name(self) -> &'static str {
        match self {
            Syntax::Json => "JSON",
            Syntax::Yaml => "YAML",
        }
    }
}

/// A stretch of the input: byte offsets (`end` exclusive; 0 while unknown), and the line and
/// column where it starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    pub line: u32,
    pub col: u32,
}

#[derive(Debug, PartialEq)]
pub enum Record<V> {
    /// A whole document (`value` may be any node, null for an empty document). `region` is a
    /// text that reads alone as this document (with the directives before it).
    Document {
        value: V,
        line: u32,
        region: Span,
    },
    /// A List whose items follow as [`Record::ListItem`]s; its `region` ends later (end 0).
    ListStart {
        kind: V,
        api_version: Option<V>,
        line: u32,
        region: Span,
    },
    ListItem {
        value: V,
        index: usize,
        line: u32,
        span: Span,
    },
    /// A document, or the item `index` (at `span`) of the List in `region`, that only the
    /// ruamel path reads.
    Fallback {
        region: Span,
        line: u32,
        item: Option<(usize, Span)>,
    },
    /// An invalid document or item (skipped), or invalid syntax (the last record).
    Problem {
        line: u32,
        message: String,
    },
}

// One reader per manifest on the stack: its size costs nothing, and boxing the larger variant
// would put an indirection in front of every event.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Reader<'t> {
    Json(JsonEvents<'t>),
    Yaml(YamlEvents<'t>),
}

impl<'t> Reader<'t> {
    pub(crate) fn new(text: &'t str, syntax: Syntax, first_line: u32) -> Self {
        match syntax {
            Syntax::Json => Reader::Json(JsonEvents::new(text, first_line)),
            Syntax::Yaml => Reader::Yaml(YamlEvents::new(text, first_line)),
        }
    }
}

impl<'t> EventSource<'t> for Reader<'t> {
    fn next_event(&mut self) -> Result<Located<'t>, SyntaxError> {
        match self {
            Reader::Json(r) => r.next_event(),
            Reader::Yaml(r) => r.next_event(),
        }
    }

    fn byte_offset(&mut self, index: usize) -> usize {
        match self {
            Reader::Json(r) => r.byte_offset(index),
            Reader::Yaml(r) => r.byte_offset(index),
        }
    }

    fn top_level_type_ahead(&self) -> TopLevelType {
        match self {
            Reader::Json(r) => r.top_level_type_ahead(),
            Reader::Yaml(r) => r.top_level_type_ahead(),
        }
    }
}

#[derive(Default)]
struct DocumentState {
    region: Span,
    root_line: Option<u32>,
    /// Left whole to the ruamel path.
    fallback: bool,
    /// Invalid: the rest of it is skipped.
    skipping: bool,
    /// `kind`/`apiVersion` of the top-level mapping so far.
    scan: Option<TopLevelScan>,
    /// The last event was the key `items` of the top-level mapping.
    items_key: bool,
    /// How many `items` keys the top-level mapping has had so far (a second is a duplicate key:
    /// the document is invalid, and its items are not streamed from it).
    items_keys: usize,
    /// Its items are being handed out one by one.
    list: Option<ListProgress>,
    /// It was a streamed List: the document itself is not a record.
    streamed: bool,
}

struct ListProgress {
    index: usize,
    item: Option<ItemProgress>,
}

struct ItemProgress {
    start: Pos,
    /// After a failure: containers of the item still open (to skip), and whether it falls back.
    skip: Option<(usize, bool)>,
}

/// Reads a manifest file's text into [`Record`]s, building values with `B`.
pub struct ManifestStream<'t, B: Builder> {
    reader: Reader<'t>,
    driver: Driver<B>,
    syntax: Syntax,
    /// Bytes before `text` in the caller's buffer (a byte order mark), added to every offset.
    offset: usize,
    /// JSON-looking text that is not JSON is read as YAML; if that fails before anything was
    /// read, this is the error to report.
    json_error: Option<SyntaxError>,
    produced: bool,
    done: bool,
    doc: DocumentState,
    doc_value: Option<B::Value>,
}

impl<'t, B: Builder> ManifestStream<'t, B> {
    /// `text` is the file's text after `offset` bytes of the caller's buffer (its BOM).
    pub fn new(text: &'t str, offset: usize, builder: B) -> Self {
        let looks_like_json = text.trim_start_matches([' ', '\t', '\r', '\n']).starts_with(['{', '[']);
        let (reader, syntax, json_error) = if looks_like_json {
            match JsonEvents::skim(text) {
                Ok(r) => (Reader::Json(r), Syntax::Json, None),
                Err(e) => (Reader::Yaml(YamlEvents::new(text, 1)), Syntax::Yaml, Some(e)),
            }
        } else {
            (Reader::Yaml(YamlEvents::new(text, 1)), Syntax::Yaml, None)
        };
        ManifestStream {
            reader,
            driver: Driver::new(builder),
            syntax,
            offset,
            json_error,
            produced: false,
            done: false,
            doc: DocumentState::default(),
            doc_value: None,
        }
    }

    /// Another bound than [`super::MAX_NODES_PER_DOCUMENT`] on the nodes of a document (or
    /// of one item of a streamed List).
    pub fn with_node_budget(mut self, budget: usize) -> Self {
        self.driver.set_budget(budget);
        self
    }

    /// How the text is read: JSON, or YAML (which JSON that is not quite JSON falls back to).
    pub fn syntax(&self) -> Syntax {
        self.syntax
    }

    pub fn builder(&mut self) -> &mut B {
        &mut self.driver.builder
    }

    pub fn next_record(&mut self) -> Option<Record<B::Value>> {
        while !self.done {
            let (event, start, end) = match self.reader.next_event() {
                Ok(located) => located,
                Err(e) => return Some(self.fatal(e)),
            };
            if let Some(record) = self.on_event(event, start, end) {
                if !matches!(record, Record::Problem { .. }) {
                    self.produced = true;
                }
                return Some(record);
            }
        }
        None
    }

    fn fatal(&mut self, error: SyntaxError) -> Record<B::Value> {
        self.done = true;
        let error = match self.json_error.take() {
            Some(json_error) if !self.produced => json_error,
            _ => error,
        };
        Record::Problem { line: error.line, message: error.message }
    }

    fn byte(&mut self, index: usize) -> usize {
        self.reader.byte_offset(index) + self.offset
    }

    fn span(&mut self, start: Pos, end: Pos) -> Span {
        Span { start: self.byte(start.index), end: self.byte(end.index), line: start.line, col: start.col }
    }

    fn problem(&self, failure: Failure, at: u32) -> Option<Record<B::Value>> {
        let (line, message) = match failure {
            Failure::Fallback => return None,
            Failure::Duplicate { line, key } => {
                (line, format!("invalid {}: found duplicate key {key}", self.syntax.name()))
            }
            Failure::BadMerge { line } => {
                (line, "invalid YAML: expected a mapping or list of mappings for merging".into())
            }
            Failure::TooLarge { line } => (line, TOO_LARGE.into()),
            Failure::Build { message } => (at, message),
        };
        Some(Record::Problem { line, message })
    }

    fn on_event(&mut self, event: Event<'t>, start: Pos, end: Pos) -> Option<Record<B::Value>> {
        match event {
            Event::StreamEnd => {
                self.done = true;
                None
            }
            Event::DocStart { region, fallback } => {
                let start = self.byte(region.index);
                self.doc = DocumentState {
                    region: Span { start, end: 0, line: region.line, col: region.col },
                    fallback,
                    ..DocumentState::default()
                };
                self.doc_value = None;
                self.driver.start_document();
                None
            }
            Event::DocEnd => self.end_document(start),
            _ if self.doc.list.is_some() => self.on_item_event(event, start, end),
            _ if self.doc.fallback || self.doc.skipping => None,
            _ => self.on_document_event(event, start),
        }
    }

    fn on_document_event(&mut self, event: Event<'t>, start: Pos) -> Option<Record<B::Value>> {
        if self.doc.root_line.is_none() {
            self.doc.root_line = Some(start.line);
            if matches!(event, Event::MapStart { .. }) {
                self.doc.scan = Some(TopLevelScan::new());
            }
        }
        if let Some(scan) = &mut self.doc.scan {
            if !scan.feed(&event) {
                self.doc.scan = None;
            }
        }
        let at_top = self.driver.depth() == 1 && !self.doc.streamed;
        if std::mem::take(&mut self.doc.items_key)
            && at_top
            && self.doc.items_keys == 1
            && matches!(event, Event::SeqStart { support: Support::Native, .. })
        {
            if let Some(record) = self.start_list() {
                return Some(record);
            }
        }
        self.doc.items_key = at_top
            && self.driver.expecting_key()
            && matches!(&event, Event::Scalar { value: Scalar::Str(k), .. } if k == "items");
        self.doc.items_keys += usize::from(self.doc.items_key);
        match self.driver.feed(event, start) {
            Ok(Step::More) => None,
            Ok(Step::Done(value)) => {
                self.doc_value = Some(value);
                None
            }
            Err(failure) => {
                self.driver.abandon(0);
                if self.doc.streamed {
                    // The header of a List already handed out: nothing of it is used.
                    self.doc.skipping = true;
                    return self.problem(failure, start.line);
                }
                match failure {
                    Failure::Fallback => self.doc.fallback = true,
                    _ => self.doc.skipping = true,
                }
                self.problem(failure, start.line)
            }
        }
    }

    /// The `items` of the top-level mapping begin: hand them out one by one if this is a List.
    fn start_list(&mut self) -> Option<Record<B::Value>> {
        let seen = self.doc.scan.take().map(|scan| scan.found).unwrap_or_default();
        let ahead = if seen.kind.is_none() || (seen.api_version.is_none() && !seen.api_version_not_scalar) {
            self.reader.top_level_type_ahead()
        } else {
            TopLevelType::default()
        };
        let kind = seen.kind.or(ahead.kind)?;
        let is_list = matches!(&kind, Scalar::Str(k) if k.ends_with("List"));
        if !is_list || seen.api_version_not_scalar || ahead.api_version_not_scalar {
            return None;
        }
        let api_version = seen.api_version.or(ahead.api_version);
        let kind = self.driver.builder.scalar(&kind).ok()?;
        let api_version = match api_version {
            Some(v) => Some(self.driver.builder.scalar(&v).ok()?),
            None => None,
        };
        self.driver.set_unit_depth(1);
        self.doc.list = Some(ListProgress { index: 0, item: None });
        self.doc.streamed = true;
        Some(Record::ListStart {
            kind,
            api_version,
            line: self.doc.root_line.unwrap_or(self.doc.region.line),
            region: self.doc.region,
        })
    }

    fn on_item_event(&mut self, event: Event<'t>, start: Pos, end: Pos) -> Option<Record<B::Value>> {
        let list = self.doc.list.as_mut()?;
        let item = match &mut list.item {
            Some(item) => item,
            None if event == Event::SeqEnd => {
                // The items end; the rest of the top-level mapping follows (and is dropped).
                self.doc.list = None;
                self.driver.set_unit_depth(0);
                self.driver.reset_budget();
                let placeholder = self.driver.builder.scalar(&Scalar::Null);
                let attached = placeholder.map_err(Failure::from).and_then(|p| self.driver.attach(p, start.line));
                if let Err(failure) = attached {
                    self.driver.abandon(0);
                    self.doc.skipping = true;
                    return self.problem(failure, start.line);
                }
                return None;
            }
            None => {
                self.driver.reset_budget();
                let list = self.doc.list.as_mut()?;
                list.item.insert(ItemProgress { start, skip: None })
            }
        };
        if let Some((open, fallback)) = &mut item.skip {
            match event {
                Event::MapStart { .. } | Event::SeqStart { .. } => *open += 1,
                Event::MapEnd | Event::SeqEnd => *open -= 1,
                _ => {}
            }
            return if *open == 0 {
                let fallback = *fallback;
                self.end_failed_item(fallback, end)
            } else {
                None
            };
        }
        let item_start = item.start;
        match self.driver.feed(event, start) {
            Ok(Step::More) => None,
            Ok(Step::Done(value)) => {
                let span = self.span(item_start, end);
                let list = self.doc.list.as_mut()?;
                let index = list.index;
                list.index += 1;
                list.item = None;
                Some(Record::ListItem { value, index, line: item_start.line, span })
            }
            Err(failure) => {
                let still_open = self.driver.abandon(1);
                let fallback = failure == Failure::Fallback;
                let problem = self.problem(failure, start.line);
                if still_open == 0 {
                    let done = self.end_failed_item(fallback, end);
                    return problem.or(done);
                }
                if let Some(item) = self.doc.list.as_mut().and_then(|l| l.item.as_mut()) {
                    item.skip = Some((still_open, fallback));
                }
                problem
            }
        }
    }

    fn end_failed_item(&mut self, fallback: bool, end: Pos) -> Option<Record<B::Value>> {
        let list = self.doc.list.as_mut()?;
        let item = list.item.take()?;
        let index = list.index;
        list.index += 1;
        if !fallback {
            return None;
        }
        let span = self.span(item.start, end);
        Some(Record::Fallback { region: self.doc.region, line: item.start.line, item: Some((index, span)) })
    }

    fn end_document(&mut self, at: Pos) -> Option<Record<B::Value>> {
        self.doc.region.end = self.byte(at.index);
        let line = self.doc.root_line.unwrap_or(self.doc.region.line);
        let value = self.doc_value.take();
        if self.doc.streamed || self.doc.skipping {
            return None;
        }
        if self.doc.fallback {
            return Some(Record::Fallback { region: self.doc.region, line, item: None });
        }
        value.map(|value| Record::Document { value, line, region: self.doc.region })
    }
}
