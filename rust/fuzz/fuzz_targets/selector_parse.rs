//! Any input either parses or returns a SelectorError: no panic, no hang, no stack overflow.
//! What parses must print canonically, re-parse to the same tree, and evaluate without panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pyclassify_core::selector::Selector;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(sel) = Selector::parse(text) {
        let canonical = sel.canonical();
        let again = Selector::parse(&canonical).expect("canonical text parses");
        assert_eq!(again, sel, "canonical round trip of {text:?}");
        let labels: &[(&str, &str)] = &[("a", "b"), ("app", "web"), ("k8s-app", "")];
        assert_eq!(sel.matches(labels), again.matches(labels));
        let _ = sel.restrictions();
    }
});
