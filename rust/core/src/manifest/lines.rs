//! The position pass: the line of every mapping key and sequence item of one document or List
//! item, read again from its own span of the file (only for documents that have a problem to
//! report). A List item can be read alone from its span; one that refers to an anchor outside
//! itself is read within its whole List document instead (`only_item`).

use super::builder::NoValues;
use super::driver::{Driver, Lines, PathPart, Step};
use super::events::{Event, EventSource};
use super::stream::{Reader, Syntax};

/// The lines of every key and item of one document or List item read alone (the position
/// pass): `text` is its region or span, which starts at `line` and column `col` of its file.
/// With `only_item`, `text` is a List's whole document and only `items[only_item]` is recorded,
/// relative to the item.
pub fn unit_lines(text: &str, syntax: Syntax, line: u32, col: u32, only_item: Option<usize>) -> Result<Lines, String> {
    // Indentation matters to YAML: the text keeps its first line's column.
    let padded;
    let text = if col > 0 && syntax == Syntax::Yaml {
        padded = " ".repeat(col as usize) + text;
        padded.as_str()
    } else {
        text
    };
    let mut reader = Reader::new(text, syntax, line);
    let mut driver = Driver::recording_lines(NoValues, only_item);
    loop {
        let (event, start, _) = reader.next_event().map_err(|e| e.message)?;
        match event {
            Event::StreamEnd | Event::DocEnd => break,
            Event::DocStart { .. } => {}
            _ => match driver.feed(event, start) {
                Ok(Step::More) if driver.past_item() => break, // the rest of the List is not needed
                Ok(Step::More) => {}
                Ok(Step::Done(())) => break,
                Err(failure) => return Err(format!("{failure:?}")),
            },
        }
    }
    let mut lines = driver.take_lines();
    if only_item.is_some() {
        for (path, _) in &mut lines {
            path.drain(..2);
        }
        lines.retain(|(path, _)| !path.contains(&PathPart::Hidden));
    }
    Ok(lines)
}
