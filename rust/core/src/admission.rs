//! Image-path patterns of Calico's ContainerAdmissionPolicy (`imagePath: {operator, values}`).
//!
//! A rule's `imagePath.values` are regular expressions matched against a container's image
//! reference exactly as the pod spec writes it (`gcr.io/company/app:1.2`, `nginx`,
//! `repo/app@sha256:...`).
//!
//! **Anchoring.** A pattern matches if it matches *anywhere* in the image reference (Go's
//! `regexp.MatchString`, which is what the Calico API's Go types imply): the seed's sample writes
//! `^gcr.io/company/production-repository/.*` with an explicit `^`, which would be pointless if
//! patterns were anchored implicitly. Write `^...$` to match the whole reference.
//!
//! **Linear time.** Patterns compile with the `regex` crate, whose engines (lazy DFA, PikeVM,
//! bounded backtracker with a visited set) never backtrack exponentially: matching is
//! O(pattern size x image length) for every pattern, including ReDoS shapes such as `(a+)+$`.
//! Backreferences and look-around, which no linear engine supports, are syntax errors.
//!
//! **Limits.** Untrusted policy text cannot make the engine huge: at most
//! [`MAX_PATTERNS`] patterns per set of at most [`MAX_PATTERN_LEN`] bytes each, nesting at most
//! [`NEST_LIMIT`] deep, and each compiled program at most [`SIZE_LIMIT`] bytes
//! (`RegexBuilder::size_limit`; `{1000}{1000}`-style repetition bombs fail here). Images longer
//! than [`MAX_IMAGE_LEN`] bytes match nothing (no container runtime accepts such a reference).

use std::fmt;

use regex::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};

/// Most patterns in one set (one rule's `imagePath.values`).
pub const MAX_PATTERNS: usize = 1024;
/// Longest pattern, in bytes.
pub const MAX_PATTERN_LEN: usize = 4096;
/// Largest compiled program of one pattern, in bytes (`RegexBuilder::size_limit`).
pub const SIZE_LIMIT: usize = 1 << 20;
/// Largest lazy-DFA cache of one pattern or set, in bytes (`RegexBuilder::dfa_size_limit`).
pub const DFA_SIZE_LIMIT: usize = 2 << 20;
/// Largest compiled program of a whole set (the union of its patterns), in bytes.
pub const SET_SIZE_LIMIT: usize = 8 << 20;
/// Deepest nesting of groups and repetitions.
pub const NEST_LIMIT: u32 = 64;
/// Longest image reference that can match anything, in bytes.
pub const MAX_IMAGE_LEN: usize = 64 * 1024;

/// Why a pattern (or a set) cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternError {
    /// Index of the offending pattern in the set; `None` when the set as a whole is the problem
    /// (too many patterns, or their union is too large).
    pub index: Option<usize>,
    pub message: String,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(i) => write!(f, "pattern {i}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for PatternError {}

/// Compiles one pattern with the limits above, or says why it cannot be compiled.
pub fn compile_pattern(pattern: &str) -> Result<Regex, String> {
    if pattern.len() > MAX_PATTERN_LEN {
        return Err(format!("pattern is {} bytes long; at most {MAX_PATTERN_LEN} are allowed", pattern.len()));
    }
    RegexBuilder::new(pattern)
        .size_limit(SIZE_LIMIT)
        .dfa_size_limit(DFA_SIZE_LIMIT)
        .nest_limit(NEST_LIMIT)
        .build()
        .map_err(describe)
}

fn describe(e: regex::Error) -> String {
    match e {
        regex::Error::Syntax(text) => {
            // The crate's message is multi-line (pattern, caret, "error: ..."): keep it one line
            // but keep the caret's position as a column number.
            let mut column = None;
            let mut message = None;
            for line in text.lines() {
                if let Some(pos) = line.find('^') {
                    if line[..pos].trim().is_empty() && column.is_none() {
                        column = Some(pos);
                    }
                }
                if let Some(rest) = line.strip_prefix("error: ") {
                    message = Some(rest.to_string());
                }
            }
            let message = message.unwrap_or_else(|| text.lines().last().unwrap_or("syntax error").trim().to_string());
            match column {
                Some(c) => format!("invalid regular expression at offset {}: {message}", c.saturating_sub(4)),
                None => format!("invalid regular expression: {message}"),
            }
        }
        regex::Error::CompiledTooBig(limit) => {
            format!("regular expression is too large once compiled (limit {limit} bytes); simplify it or split it")
        }
        other => format!("invalid regular expression: {other}"),
    }
}

/// A rule's image patterns, compiled once: "does any pattern match this image, and which first?"
#[derive(Debug, Clone)]
pub struct ImagePatternSet {
    patterns: Vec<String>,
    set: RegexSet,
}

impl ImagePatternSet {
    /// Compiles every pattern; the first one that cannot be compiled is the error.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Self, PatternError> {
        if patterns.len() > MAX_PATTERNS {
            return Err(PatternError {
                index: None,
                message: format!("{} patterns; at most {MAX_PATTERNS} are allowed in one rule", patterns.len()),
            });
        }
        let patterns: Vec<String> = patterns.iter().map(|p| p.as_ref().to_string()).collect();
        for (i, p) in patterns.iter().enumerate() {
            compile_pattern(p).map_err(|message| PatternError { index: Some(i), message })?;
        }
        let set = RegexSetBuilder::new(&patterns)
            .size_limit(SET_SIZE_LIMIT)
            .dfa_size_limit(DFA_SIZE_LIMIT)
            .nest_limit(NEST_LIMIT)
            .build()
            .map_err(|e| PatternError { index: None, message: describe(e) })?;
        Ok(ImagePatternSet { patterns, set })
    }

    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    pub fn len(&self) -> usize {
        self.patterns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether any pattern matches somewhere in `image`.
    pub fn is_match(&self, image: &str) -> bool {
        image.len() <= MAX_IMAGE_LEN && self.set.is_match(image)
    }

    /// The index of the first pattern (in the order given) that matches `image`.
    pub fn first_match(&self, image: &str) -> Option<usize> {
        if image.len() > MAX_IMAGE_LEN {
            return None;
        }
        self.set.matches(image).iter().next()
    }

    /// Indexes of every pattern that matches `image`, ascending.
    pub fn matches(&self, image: &str) -> Vec<usize> {
        if image.len() > MAX_IMAGE_LEN {
            return Vec::new();
        }
        self.set.matches(image).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(p: &[&str]) -> ImagePatternSet {
        ImagePatternSet::new(p).expect("compiles")
    }

    #[test]
    fn seed_pattern_matches_the_production_repository_only() {
        let s = set(&["^gcr.io/company/production-repository/.*"]);
        assert!(s.is_match("gcr.io/company/production-repository/app:1.0"));
        assert!(s.is_match("gcr.io/company/production-repository/team/app@sha256:0123"));
        assert!(!s.is_match("gcr.io/company/staging-repository/app:1.0"));
        assert!(!s.is_match("docker.io/gcr.io/company/production-repository/app"));
        assert!(!s.is_match("gcr.io/company/production-repository"));
    }

    #[test]
    fn patterns_are_unanchored_unless_written_anchored() {
        let s = set(&["nginx"]);
        assert!(s.is_match("nginx"));
        assert!(s.is_match("docker.io/library/nginx:1.27"));
        let anchored = set(&["^nginx$"]);
        assert!(anchored.is_match("nginx"));
        assert!(!anchored.is_match("nginx:1.27"));
    }

    #[test]
    fn first_match_is_in_the_order_given() {
        let s = set(&["^quay.io/", "app", "^gcr.io/"]);
        assert_eq!(s.first_match("gcr.io/x/app:1"), Some(1));
        assert_eq!(s.matches("gcr.io/x/app:1"), vec![1, 2]);
        assert_eq!(s.first_match("quay.io/x/y"), Some(0));
        assert_eq!(s.first_match("docker.io/x/y"), None);
    }

    #[test]
    fn empty_set_matches_nothing() {
        let s = set(&[]);
        assert!(s.is_empty());
        assert!(!s.is_match("anything"));
        assert_eq!(s.first_match(""), None);
    }

    #[test]
    fn redos_shapes_answer_correctly_on_long_input() {
        let long_a = "a".repeat(50_000);
        let hostile = format!("{long_a}!");
        for p in ["^(a+)+$", "^(a|a)*$", "^(a|aa)+$", "(.*a){20}$", "^(a*)*b$"] {
            let s = set(&[p]);
            assert!(!s.is_match(&hostile), "{p} on a...a!");
        }
        assert!(set(&["^(a+)+$"]).is_match(&long_a));
        assert!(!set(&["^(a*)*b$"]).is_match(&long_a));
    }

    #[test]
    fn syntax_errors_name_the_pattern() {
        let e = ImagePatternSet::new(&["^ok$", "gcr.io/(unclosed"]).unwrap_err();
        assert_eq!(e.index, Some(1));
        assert!(e.message.contains("invalid regular expression"), "{}", e.message);
        assert!(!e.message.contains('\n'));
    }

    #[test]
    fn backreferences_and_lookaround_are_refused() {
        assert!(ImagePatternSet::new(&[r"(a)\1"]).is_err());
        assert!(ImagePatternSet::new(&[r"gcr(?=\.io)"]).is_err());
        assert!(ImagePatternSet::new(&[r"(?<!x)gcr"]).is_err());
    }

    #[test]
    fn repetition_bombs_hit_the_size_limit() {
        let e = ImagePatternSet::new(&["((a{1000}){1000}){1000}"]).unwrap_err();
        assert_eq!(e.index, Some(0));
        assert!(e.message.contains("too large"), "{}", e.message);
        let e = ImagePatternSet::new(&["\\w{5000}"]).unwrap_err();
        assert!(e.message.contains("too large"), "{}", e.message);
    }

    #[test]
    fn nesting_and_length_limits() {
        let deep = format!("{}a{}", "(".repeat(200), ")".repeat(200));
        assert!(ImagePatternSet::new(&[deep.as_str()]).is_err());
        let long = "a".repeat(MAX_PATTERN_LEN + 1);
        let e = ImagePatternSet::new(&[long.as_str()]).unwrap_err();
        assert!(e.message.contains("at most"), "{}", e.message);
        let many: Vec<String> = (0..MAX_PATTERNS + 1).map(|i| format!("^r{i}/")).collect();
        let e = ImagePatternSet::new(&many).unwrap_err();
        assert_eq!(e.index, None);
    }

    #[test]
    fn oversized_image_matches_nothing() {
        let s = set(&[".*"]);
        assert!(s.is_match(""));
        assert!(!s.is_match(&"x".repeat(MAX_IMAGE_LEN + 1)));
    }

    #[test]
    fn unicode_images_and_patterns() {
        let s = set(&["^registry\\.例え/.+"]);
        assert!(s.is_match("registry.例え/app"));
        assert!(!s.is_match("registryX例え/app"));
    }
}
