//! ClassBench parsers: clear errors with line numbers on malformed input, never a panic.

use proptest::prelude::*;
use pyclassify_core::classbench::{parse_rules, parse_trace, ParseError};

fn rules_err(text: &str) -> ParseError {
    parse_rules(text.as_bytes()).expect_err("must be rejected")
}

const GOOD: &str = "@1.2.3.0/24\t0.0.0.0/0\t0 : 65535\t80 : 80\t0x06/0xFF\t0x0000/0x0000\n";

#[test]
fn good_ruleset_parses_with_line_order_priorities() {
    let text = format!("{GOOD}\n{GOOD}");
    let rules = parse_rules(text.as_bytes()).unwrap();
    assert_eq!(rules.len(), 2);
    assert_eq!((rules[0].id, rules[0].priority), (0, 0));
    assert_eq!((rules[1].id, rules[1].priority), (1, 1));
}

#[test]
fn malformed_rule_lines_name_their_line() {
    let cases: &[(&str, &str)] = &[
        ("1.2.3.0/24\t0.0.0.0/0\t0 : 65535\t80 : 80\t0x06/0xFF", "must start with '@'"),
        ("@1.2.3.0/24\t0.0.0.0/0\t0 : 65535\t80 : 80", "expected 5 or 6"),
        ("@1.2.3.0/33\t0.0.0.0/0\t0 : 65535\t80 : 80\t0x06/0xFF", "too long"),
        ("@1.2.3/24\t0.0.0.0/0\t0 : 65535\t80 : 80\t0x06/0xFF", "bad address"),
        ("@1.2.3.0\t0.0.0.0/0\t0 : 65535\t80 : 80\t0x06/0xFF", "ADDRESS/LENGTH"),
        ("@1.2.3.0/24\t0.0.0.0/0\t9 : 8\t80 : 80\t0x06/0xFF", "lo > hi"),
        ("@1.2.3.0/24\t0.0.0.0/0\t0 : 65536\t80 : 80\t0x06/0xFF", "bad port"),
        ("@1.2.3.0/24\t0.0.0.0/0\t0 - 5\t80 : 80\t0x06/0xFF", "LO : HI"),
        ("@1.2.3.0/24\t0.0.0.0/0\t0 : 5\t80 : 80\t0x06/0x0F", "partial mask"),
        ("@1.2.3.0/24\t0.0.0.0/0\t0 : 5\t80 : 80\t6/0xFF", "expected hex"),
        ("@1.2.3.0/24\t0.0.0.0/0\t0 : 5\t80 : 80\t0x106/0xFF", "does not fit"),
        ("@1.2.3.0/24\t0.0.0.0/0\t0 : 5\t80 : 80\t0x06/0xFF\tzz", "VALUE/MASK"),
    ];
    for (bad, why) in cases {
        // Two good lines and a blank one before: the bad line is line 4.
        let text = format!("{GOOD}{GOOD}\n{bad}\n{GOOD}");
        let e = rules_err(&text);
        assert_eq!(e.line, 4, "{bad:?}: {e}");
        assert!(e.message.contains(why), "{bad:?}: got {e}");
        assert!(e.to_string().starts_with("line 4: "), "{e}");
    }
}

#[test]
fn non_utf8_is_an_error_not_a_panic() {
    let mut bytes = GOOD.as_bytes().to_vec();
    bytes.extend_from_slice(b"@\xff\xfe\n");
    let e = parse_rules(&bytes[..]).unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.message.contains("UTF-8"));
}

#[test]
fn malformed_trace_lines_name_their_line() {
    let good = "4283694307\t4108558644\t65535\t6789\t6\t4294967295\t141\n";
    for (bad, why) in [
        ("1 2 3 4 5 6", "expected 7 fields"),
        ("1 2 3 4 5 6 7 8", "expected 7 fields"),
        ("4294967296 2 3 4 5 6 7", "source address"),
        ("1 2 65536 4 5 6 7", "source port"),
        ("1 2 3 4 256 6 7", "protocol"),
        ("1 2 3 4 5 6 x", "rule number"),
    ] {
        let text = format!("{good}{bad}\n");
        let e = parse_trace(text.as_bytes()).unwrap_err();
        assert_eq!(e.line, 2, "{bad:?}");
        assert!(e.message.contains(why), "{bad:?}: got {e}");
    }
    let t = parse_trace(good.as_bytes()).unwrap();
    assert_eq!(t[0].rule, 141);
    assert_eq!((t[0].key.sport, t[0].key.dport, t[0].key.proto), (65535, 6789, 6));
}

#[test]
fn gzip_files_and_missing_files() {
    use pyclassify_core::classbench::{load_rules, load_trace};
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("pyclassify-cb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gz = dir.join("r.rules.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(GOOD.as_bytes()).unwrap();
    std::fs::write(&gz, enc.finish().unwrap()).unwrap();
    assert_eq!(load_rules(&gz).unwrap().len(), 1);
    // Plain text works too, whatever the name.
    let plain = dir.join("plain.gz");
    std::fs::write(&plain, GOOD).unwrap();
    assert_eq!(load_rules(&plain).unwrap().len(), 1);
    // A truncated gzip stream is a read error with the file named.
    let bytes = std::fs::read(&gz).unwrap();
    let cut = dir.join("cut.gz");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = load_rules(&cut).unwrap_err();
    assert!(e.to_string().contains("cut.gz"), "{e}");
    let e = load_trace(&dir.join("missing.trace.gz")).unwrap_err();
    assert!(e.to_string().contains("cannot open"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

proptest! {
    /// Fuzz: arbitrary bytes never panic; on error the line is within the input.
    #[test]
    fn arbitrary_input_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let lines = bytes.iter().filter(|&&b| b == b'\n').count() + 1;
        if let Err(e) = parse_rules(&bytes[..]) { prop_assert!(e.line >= 1 && e.line <= lines); }
        if let Err(e) = parse_trace(&bytes[..]) { prop_assert!(e.line >= 1 && e.line <= lines); }
    }

    /// Fuzz near the grammar: mutate one byte of a good rule line.
    #[test]
    fn mutated_rule_lines_never_panic(i in 0usize..GOOD.len(), b in any::<u8>()) {
        let mut bytes = GOOD.as_bytes().to_vec();
        bytes[i] = b;
        let _ = parse_rules(&bytes[..]);
    }
}
