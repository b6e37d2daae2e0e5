//! Any bytes, as a DNS message or as a TCP payload of length-prefixed messages, either teach
//! facts or return a DnsError: no panic, no hang. What is taught is well formed (lowercase
//! printable names without empty labels, within the per-message bound); a message framed alone
//! in a TCP payload teaches what it teaches alone; the facts store stays within its capacity and
//! the learned names match themselves as patterns.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pyclassify_core::dns::{
    parse_response, parse_tcp_payload, parse_tcp_payload_partial, Answer, DomainFacts,
    DomainPattern, MAX_FACTS_PER_MESSAGE,
};

fn check(answers: &[Answer]) {
    assert!(answers.len() <= MAX_FACTS_PER_MESSAGE);
    for a in answers {
        assert!(!a.name.is_empty() && a.name.len() <= 253, "{a:?}");
        assert!(!a.name.starts_with('.') && !a.name.ends_with('.') && !a.name.contains(".."));
        assert!(a
            .name
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && !b.is_ascii_uppercase()));
    }
}

fuzz_target!(|data: &[u8]| {
    let single = parse_response(data);
    if let Ok(answers) = &single {
        check(answers);
        let facts = DomainFacts::new(8, 1);
        facts.learn_answers(answers, 1_000);
        assert!(facts.len() <= 8);
        for a in answers.iter().take(8) {
            // A name may hold `*` as a plain character; one without is a valid exact pattern.
            match DomainPattern::parse(&a.name) {
                Ok(exact) => assert!(exact.matches(&a.name), "{a:?}"),
                Err(e) => assert!(a.name.contains('*'), "{a:?}: {e}"),
            }
        }
    }
    if data.len() <= usize::from(u16::MAX) {
        let mut framed = (data.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(data);
        assert_eq!(parse_tcp_payload(&framed), single);
    }
    let (answers, error) = parse_tcp_payload_partial(data);
    check(&answers);
    match parse_tcp_payload(data) {
        Ok(all) => assert!(error.is_none() && all == answers),
        Err(e) => assert_eq!(Some(e), error),
    }
});
