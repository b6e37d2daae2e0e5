//! Calico's domain patterns (`destination.domains`).
//!
//! From the Calico docs: "When a configured domain name has no wildcard (*), it matches exactly
//! that domain name. With a single asterisk in any part of the domain name, it matches 1 or more
//! path components at that position. Not supported: multiple wildcards in the same domain (*.*),
//! asterisks that are not the entire component (www.g*.com), more general wildcards."
//!
//! So `*.example.com` matches `a.example.com` and `a.b.example.com`, not `example.com`;
//! `www.*.com` matches `www.a.com` and `www.a.b.com`; `update.*` matches `update.a` and
//! `update.a.b`; a lone `*` matches every name of one or more labels. Matching ignores ASCII case
//! and a trailing dot, on both sides.

use std::fmt;

/// Longest pattern text (a name is at most 253 characters written out).
const MAX_PATTERN_LEN: usize = 253;
/// Longest label (RFC 1035 §2.3.4).
const MAX_LABEL_LEN: usize = 63;

/// One domain pattern: exact, or one `*` label standing for one or more labels.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DomainPattern {
    /// The normalized text (lowercase, no trailing dot).
    text: String,
    /// With a wildcard: the labels before it with their dot (`"www."`, or `""`) and those after
    /// it with theirs (`".com"`, or `""`).
    wildcard: Option<(String, String)>,
}

impl fmt::Debug for DomainPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DomainPattern({:?})", self.text)
    }
}

impl fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl DomainPattern {
    /// Parses a pattern. Refused (with a message saying why): an empty pattern, empty labels,
    /// two `*`, a `*` that is not a whole label, a label of more than 63 bytes, a pattern of more
    /// than 253, characters that are not printable ASCII.
    pub fn parse(text: &str) -> Result<DomainPattern, String> {
        let trimmed = text.strip_suffix('.').unwrap_or(text);
        if trimmed.is_empty() {
            return Err(format!("domain pattern {text:?} is empty"));
        }
        if trimmed.len() > MAX_PATTERN_LEN {
            return Err(format!("domain pattern {text:?} is longer than {MAX_PATTERN_LEN} characters"));
        }
        if let Some(c) = trimmed.chars().find(|c| !matches!(c, '!'..='~')) {
            return Err(format!("domain pattern {text:?} has the character {c:?} (only printable ASCII)"));
        }
        let lower = trimmed.to_ascii_lowercase();
        let mut star: Option<usize> = None;
        for (i, label) in lower.split('.').enumerate() {
            if label.is_empty() {
                return Err(format!("domain pattern {text:?} has an empty label"));
            }
            if label.len() > MAX_LABEL_LEN {
                return Err(format!("domain pattern {text:?} has a label longer than {MAX_LABEL_LEN} characters"));
            }
            if label == "*" {
                if star.is_some() {
                    return Err(format!("domain pattern {text:?} has more than one wildcard"));
                }
                star = Some(i);
            } else if label.contains('*') {
                return Err(format!("domain pattern {text:?}: a wildcard must be a whole label ({label:?})"));
            }
        }
        let wildcard = star.map(|_| {
            let (before, after) = lower.split_once('*').unwrap_or((&lower, ""));
            (before.to_string(), after.to_string())
        });
        Ok(DomainPattern { text: lower, wildcard })
    }

    /// Whether `name` matches (ASCII case ignored, one trailing dot ignored).
    pub fn matches(&self, name: &str) -> bool {
        let name = name.strip_suffix('.').unwrap_or(name);
        match &self.wildcard {
            None => name.eq_ignore_ascii_case(&self.text),
            Some((before, after)) => {
                let Some(middle_len) = name.len().checked_sub(before.len()).and_then(|n| n.checked_sub(after.len()))
                else {
                    return false;
                };
                if middle_len == 0 {
                    return false;
                }
                let (Some(head), Some(middle), Some(tail)) = (
                    name.get(..before.len()),
                    name.get(before.len()..before.len() + middle_len),
                    name.get(before.len() + middle_len..),
                ) else {
                    return false;
                };
                head.eq_ignore_ascii_case(before)
                    && tail.eq_ignore_ascii_case(after)
                    && middle.split('.').all(|label| !label.is_empty())
            }
        }
    }

    /// The normalized text: lowercase, no trailing dot.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the pattern has a wildcard.
    pub fn is_wildcard(&self) -> bool {
        self.wildcard.is_some()
    }
}
