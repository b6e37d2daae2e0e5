//! The manifest reader through its public API: records, streamed List items, positions,
//! fallbacks and problems.

use std::rc::Rc;

use pyclassify_core::manifest::{
    decode, unit_lines, ManifestStream, PathPart, Record, Scalar, Span, Syntax, Value, ValueBuilder,
};

fn records(text: &str) -> Vec<Record<Value>> {
    let mut stream = ManifestStream::new(text, 0, ValueBuilder);
    std::iter::from_fn(|| stream.next_record()).collect()
}

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

fn map(entries: &[(&str, Value)]) -> Value {
    Value::Map(Rc::new(entries.iter().map(|(k, v)| (s(k), v.clone())).collect()))
}

fn key(k: &str) -> PathPart {
    PathPart::Key(Scalar::Str(k.to_string().into()))
}

fn lines_of(text: &str, syntax: Syntax, span: Span, item: Option<usize>) -> Vec<(Vec<PathPart>, u32)> {
    let end = if span.end == 0 { text.len() } else { span.end };
    unit_lines(&text[span.start..end], syntax, span.line, span.col, item).unwrap()
}

#[test]
fn documents_with_their_lines_and_regions() {
    let text = "---\napiVersion: v1\nkind: Namespace\n---\n---\n# only a comment\n---\nkind: X\nmetadata:\n  name: b\n";
    let got = records(text);
    assert_eq!(got.len(), 4);
    let Record::Document { value, line, .. } = &got[0] else { panic!("{got:?}") };
    assert_eq!((value.get("kind"), *line), (Some(&s("Namespace")), 2));
    assert!(matches!(got[1], Record::Document { value: Value::Null, .. }));
    let Record::Document { line, region, .. } = &got[3] else { panic!() };
    assert_eq!(*line, 8);
    let lines = lines_of(text, Syntax::Yaml, *region, None);
    assert!(lines.contains(&(vec![key("metadata"), key("name")], 10)), "{lines:?}");
    assert!(lines.contains(&(vec![], 8)));
}

#[test]
fn a_directive_after_old_mac_line_ends_places_its_document() {
    // A lone \r ends a line: the directive (non-ASCII, which saphyr miscounts) is on line 3, and
    // the second document's root on line 7; its region read again alone says the same.
    assert_second_document_at("\r\r%NOTE \u{e9}t\u{e9}\n---\nkind: A\n---\nkind: B\r", 7);
}

#[test]
fn a_directive_after_a_byte_order_mark_places_its_document() {
    // A BOM may begin a document's lines: the directive after it (non-ASCII) is one, and the
    // second document's root is on line 6, read alone too.
    assert_second_document_at("\n\u{feff}%NOTE \u{e9}t\u{e9}\n---\nkind: A\n---\nkind: B\n", 6);
}

/// The second document of `text` is on `line`, as the stream says and as its region read alone.
fn assert_second_document_at(text: &str, line: u32) {
    let got = records(text);
    let Record::Document { line: at, region, .. } = &got[1] else { panic!("{got:?}") };
    assert_eq!(*at, line);
    assert!(lines_of(text, Syntax::Yaml, *region, None).contains(&(vec![], line)), "{region:?}");
}

#[test]
fn a_list_item_read_in_its_list_needs_only_what_comes_before_it() {
    // An alias item is read within its whole List (its anchor is outside it); the List goes on
    // broken after it, which the stream says later: the item's lines are read all the same.
    let text = "kind: List\napiVersion: v1\nitems:\n- &a {kind: Pod, metadata: {name: x}}\n- *a\nbroken: [\n";
    let got = records(text);
    let Record::ListStart { region, .. } = &got[0] else { panic!("{got:?}") };
    let Record::ListItem { index: 1, line: 5, .. } = &got[2] else { panic!("{got:?}") };
    assert!(matches!(got.last(), Some(Record::Problem { .. })), "{got:?}");
    assert_eq!(lines_of(text, Syntax::Yaml, *region, Some(1)), vec![(vec![], 5)]);
}

#[test]
fn a_second_items_key_is_a_duplicate_not_a_list() {
    // The second `items` (before `kind: List`) is not streamed as the List's items: the
    // document is invalid (duplicate keys), and says so.
    let got = records("apiVersion: v1\nitems:\n- a: 1\nkind: Pod\nitems:\n- b: 2\nkind: List\n");
    assert!(!got.iter().any(|r| matches!(r, Record::ListStart { .. } | Record::ListItem { .. })), "{got:?}");
    assert!(
        got.iter().any(|r| matches!(r, Record::Problem { message, .. } if message.contains("duplicate key"))),
        "{got:?}"
    );
}

#[test]
fn list_items_stream_one_by_one_even_when_kind_comes_last() {
    let text = "apiVersion: v1\nitems:\n- kind: Pod\n  metadata: {name: a}\n- kind: Pod\n  spec:\n    containers:\n    - name: c\nkind: List\nmetadata:\n  resourceVersion: \"\"\n";
    let got = records(text);
    let Record::ListStart { kind, api_version, line, .. } = &got[0] else { panic!("{got:?}") };
    assert_eq!((kind, api_version.as_ref(), *line), (&s("List"), Some(&s("v1")), 1));
    let Record::ListItem { index: 1, line: 5, span, value } = &got[2] else { panic!("{got:?}") };
    assert_eq!(value.get("kind"), Some(&s("Pod")));
    let lines = lines_of(text, Syntax::Yaml, *span, None);
    assert!(lines.contains(&(vec![key("spec"), key("containers"), PathPart::Index(0), key("name")], 8)), "{lines:?}");
    assert!(lines.contains(&(vec![], 5)));
    assert_eq!(got.len(), 3);
}

#[test]
fn a_mapping_with_items_that_is_not_a_list_is_one_document() {
    let got = records("kind: Thing\nitems: [1, 2]\n");
    assert!(matches!(&got[..], [Record::Document { .. }]), "{got:?}");
}

#[test]
fn json_list_items_and_their_lines() {
    let text = "{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n        {\n            \"kind\": \"Pod\",\n            \"metadata\": {\"name\": \"a\"}\n        }\n    ],\n    \"kind\": \"PodList\"\n}\n";
    let mut stream = ManifestStream::new(text, 0, ValueBuilder);
    assert_eq!(stream.syntax(), Syntax::Json);
    let got: Vec<_> = std::iter::from_fn(|| stream.next_record()).collect();
    let Record::ListItem { line: 4, span, .. } = &got[1] else { panic!("{got:?}") };
    assert!(text[span.start..span.end].starts_with('{') && text[span.start..span.end].ends_with('}'));
    let lines = lines_of(text, Syntax::Json, *span, None);
    assert!(lines.contains(&(vec![key("metadata"), key("name")], 6)), "{lines:?}");
}

#[test]
fn json_that_is_not_json_is_read_as_yaml_and_reports_the_json_error_if_that_fails() {
    let got = records("{a: b, kind: K}\n");
    assert!(matches!(&got[..], [Record::Document { .. }]), "{got:?}");
    let got = records("{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"Pod\",,\n}\n");
    assert_eq!(
        got,
        [Record::Problem {
            line: 3,
            message: "invalid JSON: Expecting property name enclosed in double quotes".into()
        }]
    );
}

#[test]
fn duplicate_keys_drop_their_document_only() {
    let got = records("apiVersion: v1\nkind: Pod\nkind: Pod\n---\nkind: B\n");
    assert_eq!(got[0], Record::Problem { line: 3, message: "invalid YAML: found duplicate key \"kind\"".into() });
    assert!(matches!(&got[1], Record::Document { line: 5, .. }));
    let got = records("{\"a\": 1, \"a\": 2}");
    assert_eq!(got, [Record::Problem { line: 1, message: "invalid JSON: found duplicate key \"a\"".into() }]);
}

#[test]
fn syntax_errors_end_the_stream_after_the_documents_before_them() {
    let got = records("kind: A\n---\na: b: c\n---\nkind: C\n");
    assert!(matches!(&got[0], Record::Document { .. }));
    assert!(matches!(&got[1], Record::Problem { line: 3, message } if message.starts_with("invalid YAML")), "{got:?}");
    assert_eq!(got.len(), 2);
}

#[test]
fn aliases_share_their_anchor_and_merges_apply_as_ruamel_does() {
    let got = records("a: &a {x: 1, y: 2}\nb: &b {x: 5, z: 6}\nv:\n  <<: [*a, *b]\n  w: 3\nu: *a\n");
    let Record::Document { value, .. } = &got[0] else { panic!("{got:?}") };
    let (Some(Value::Map(a)), Some(Value::Map(u))) = (value.get("a"), value.get("u")) else { panic!() };
    assert!(Rc::ptr_eq(a, u));
    assert_eq!(
        value.get("v"),
        Some(&map(&[("w", Value::Int(3)), ("x", Value::Int(1)), ("y", Value::Int(2)), ("z", Value::Int(6))]))
    );
}

#[test]
fn recursive_and_too_deep_documents_are_problems() {
    let got = records("a: &a [*a]\n---\nkind: B\n");
    assert!(
        matches!(&got[0], Record::Problem { line: 1, message } if message.starts_with("document too large")),
        "{got:?}"
    );
    assert!(matches!(&got[1], Record::Document { .. }));
    let deep = "[".repeat(300) + &"]".repeat(300);
    assert!(
        matches!(&records(&deep)[..], [Record::Problem { message, .. }] if message.starts_with("document too large"))
    );
}

#[test]
fn tags_only_ruamel_reads_fall_back_per_document_or_item() {
    let text = "a: !!set {x, y}\n---\nb: !foo 12\n";
    let got = records(text);
    let Record::Fallback { region, line: 1, item: None } = &got[0] else { panic!("{got:?}") };
    assert_eq!(&text[region.start..region.end], "a: !!set {x, y}\n");
    assert_eq!(
        got[1],
        Record::Document {
            value: map(&[("b", s("12"))]),
            line: 3,
            region: match &got[1] {
                Record::Document { region, .. } => *region,
                _ => unreachable!(),
            }
        }
    );
    let text = "kind: List\nitems:\n- a: 1\n- b: !!binary aGk=\n  c: [1, 2]\n- d: 4\n";
    let got = records(text);
    assert!(matches!(&got[0], Record::ListStart { .. }));
    let Record::Fallback { item: Some((1, span)), line: 4, .. } = &got[2] else { panic!("{got:?}") };
    assert_eq!(&text[span.start..span.end], "b: !!binary aGk=\n  c: [1, 2]\n");
    assert!(matches!(&got[3], Record::ListItem { index: 2, line: 6, .. }));
}

#[test]
fn item_lines_read_from_the_whole_list_when_needed() {
    let text = "kind: List\nitems:\n- &x {a: 1}\n- b:\n    c: *x\n";
    let got = records(text);
    let Record::ListStart { region, .. } = &got[0] else { panic!("{got:?}") };
    let lines = lines_of(text, Syntax::Yaml, *region, Some(1));
    assert_eq!(lines, [(vec![], 4), (vec![key("b")], 4), (vec![key("b"), key("c")], 5)]);
}

#[test]
fn decoding_skips_the_bom_and_names_the_line_of_bad_bytes() {
    assert_eq!(decode(b"\xEF\xBB\xBFa: 1\n"), Ok(("a: 1\n", 3)));
    assert_eq!(decode(b"apiVersion: v1\nkind: \xff\n"), Err(2));
}

#[test]
fn the_node_budget_is_per_document_and_per_streamed_list_item() {
    let item = "{\"kind\": \"Pod\", \"a\": [1, 2, 3], \"b\": {\"c\": 4}}";
    let list = format!("{{\"kind\": \"List\", \"items\": [{}]}}", [item; 5].join(", "));
    let mut stream = ManifestStream::new(&list, 0, ValueBuilder).with_node_budget(20);
    let got: Vec<_> = std::iter::from_fn(|| stream.next_record()).collect();
    assert_eq!(got.iter().filter(|r| matches!(r, Record::ListItem { .. })).count(), 5, "{got:?}");
    let whole = format!("{{\"kind\": \"Thing\", \"items\": [{}]}}", [item; 5].join(", "));
    let mut stream = ManifestStream::new(&whole, 0, ValueBuilder).with_node_budget(20);
    let got: Vec<_> = std::iter::from_fn(|| stream.next_record()).collect();
    assert!(
        matches!(&got[..], [Record::Problem { message, .. }] if message.starts_with("document too large")),
        "{got:?}"
    );
}

#[test]
fn a_directive_with_non_ascii_text_does_not_shift_the_regions_after_it() {
    // saphyr-parser 0.3.4 counts a directive's bytes as characters (found by the fuzzer): the
    // regions after it must still start and end where their documents do.
    let text = "%RESERVED pär\u{4b1}m\n---\nkind: A\n...\n---\nkind: B\n";
    let got = records(text);
    let regions: Vec<(Span, u32)> = got
        .iter()
        .map(|r| match r {
            Record::Document { region, line, .. } => (*region, *line),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(regions.len(), 2);
    for (region, line) in regions {
        let end = if region.end == 0 { text.len() } else { region.end };
        assert!(text.is_char_boundary(region.start) && text.is_char_boundary(end), "{region:?}");
        assert!(!text[region.start..end].contains(".."), "{region:?}: {:?}", &text[region.start..end]);
        assert!(lines_of(text, Syntax::Yaml, region, None).contains(&(vec![], line)));
    }
}
