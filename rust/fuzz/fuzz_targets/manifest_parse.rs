//! Any bytes either read into records or become problems: no panic, no hang, no stack
//! overflow. Every document's region reads again alone through the position pass, with the
//! document's own line at its root; every List item's span does too (or, when it refers to an
//! anchor outside itself, its List's whole document does).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pyclassify_core::manifest::{decode, unit_lines, ManifestStream, Record, Span, Syntax, ValueBuilder};

fn text(data: &[u8], span: Span) -> &str {
    let end = if span.end == 0 { data.len() } else { span.end };
    std::str::from_utf8(&data[span.start..end]).expect("spans start and end on character boundaries")
}

fn root_line(data: &[u8], syntax: Syntax, span: Span, item: Option<usize>) -> Result<Option<u32>, String> {
    let lines = unit_lines(text(data, span), syntax, span.line, span.col, item)?;
    Ok(lines.iter().find(|(path, _)| path.is_empty()).map(|(_, line)| *line))
}

fuzz_target!(|data: &[u8]| {
    let Ok((source, bom)) = decode(data) else { return };
    let mut stream = ManifestStream::new(source, bom, ValueBuilder);
    let syntax = stream.syntax();
    let mut list_region = Span::default();
    while let Some(record) = stream.next_record() {
        match record {
            Record::Document { region, line, .. } => {
                let root = root_line(data, syntax, region, None);
                assert_eq!(root, Ok(Some(line)), "document region {region:?} of {source:?}");
            }
            Record::ListStart { region, .. } => list_region = region,
            Record::ListItem { span, line, index, .. } => {
                let alone = root_line(data, syntax, span, None);
                if alone != Ok(Some(line)) {
                    let whole = root_line(data, syntax, list_region, Some(index));
                    assert_eq!(whole, Ok(Some(line)), "item {index} at {span:?} of {source:?}");
                }
            }
            Record::Fallback { region, .. } => {
                let _ = text(data, region);
            }
            Record::Problem { line, .. } => assert!(line >= 1),
        }
    }
});
