//! The Calico selector language: tokenizer, parser, evaluator, canonical printer and the
//! label restrictions a selector implies. Kubernetes LabelSelectors compile into the same tree.
//! This is the only implementation; Python and the CLI call it through `pyclassify._engine`.

mod ast;
mod error;
mod label_selector;
mod parser;
mod restrictions;
mod tokenizer;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

pub use ast::Node;
pub use error::{SelectorError, SelectorErrorKind};
pub use label_selector::LabelSelectorRequirement;
pub use restrictions::{LabelRestriction, Restrictions};
pub use tokenizer::{tokenize, Token, TokenKind};

/// Longest label name (Calico's tokenizer limit).
pub const MAX_LABEL_LEN: usize = 512;
/// Longest selector text we parse; longer input is hostile or a mistake.
pub const MAX_SELECTOR_LEN: usize = 1 << 20;
/// Deepest nesting of `(` and `!` we accept, so evaluation and printing cannot overflow the stack.
pub const MAX_DEPTH: usize = 128;

/// Anything that maps label keys to values.
pub trait Labels {
    fn get(&self, key: &str) -> Option<&str>;
}

impl<S: std::hash::BuildHasher> Labels for HashMap<String, String, S> {
    fn get(&self, key: &str) -> Option<&str> {
        HashMap::get(self, key).map(String::as_str)
    }
}

impl Labels for BTreeMap<String, String> {
    fn get(&self, key: &str) -> Option<&str> {
        BTreeMap::get(self, key).map(String::as_str)
    }
}

impl Labels for [(&str, &str)] {
    fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// A parsed selector. Equality is structural, which is the same as equal canonical text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Selector {
    root: Node,
}

impl Selector {
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        if text.len() > MAX_SELECTOR_LEN {
            return Err(SelectorError::new(
                SelectorErrorKind::TooLong,
                MAX_SELECTOR_LEN,
                format!("selector longer than {MAX_SELECTOR_LEN} bytes"),
            ));
        }
        let tokens = tokenize(text)?;
        let root = parser::Parser::new(tokens).parse_selector()?;
        Ok(Selector { root })
    }

    pub fn all() -> Selector {
        Selector { root: Node::All }
    }

    /// Compiles a Kubernetes LabelSelector (`matchLabels`, `matchExpressions`).
    pub fn from_label_selector(
        match_labels: &[(String, String)],
        match_expressions: &[LabelSelectorRequirement],
    ) -> Result<Selector, SelectorError> {
        let root = label_selector::from_label_selector(match_labels, match_expressions)?;
        Ok(Selector { root })
    }

    pub fn root(&self) -> &Node {
        &self.root
    }

    /// A selector from a tree built in code (the engine's composite selectors).
    pub fn from_node(root: Node) -> Selector {
        Selector { root }
    }

    pub fn into_node(self) -> Node {
        self.root
    }

    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        self.root.matches(labels)
    }

    pub fn canonical(&self) -> String {
        self.root.to_string()
    }

    /// Necessary conditions on labels (empty = none to index on).
    pub fn restrictions(&self) -> Restrictions {
        restrictions::restrictions(&self.root, false)
    }

    pub fn contains_global(&self) -> bool {
        self.root.contains_global()
    }

    /// True when the whole selector is `global()` (the one form a namespaceSelector may use).
    pub fn is_global(&self) -> bool {
        self.root == Node::Global
    }

    pub fn is_all(&self) -> bool {
        self.root == Node::All
    }

    /// The same selector with every label key prefixed (Calico's PrefixVisitor).
    pub fn with_key_prefix(&self, prefix: &str) -> Selector {
        let mut root = self.root.clone();
        root.map_keys(&|k| format!("{prefix}{k}"));
        Selector { root }
    }

    /// `self && other`, flattening nested conjunctions.
    pub fn and(&self, other: &Selector) -> Selector {
        let mut terms = Vec::new();
        for n in [&self.root, &other.root] {
            match n {
                Node::All => {}
                Node::And(ns) => terms.extend(ns.iter().cloned()),
                n => terms.push(n.clone()),
            }
        }
        let root = match terms.len() {
            0 => Node::All,
            1 => terms.pop().unwrap(),
            _ => Node::And(terms),
        };
        Selector { root }
    }

    /// Label keys the selector mentions.
    pub fn keys(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        self.root.keys(&mut out);
        out
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.root.fmt(f)
    }
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Selector::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn precedence_not_binds_tighter_than_and_than_or() {
        let s = Selector::parse("!a == 'x' && b == 'y' || has(c)").unwrap();
        assert_eq!(s.canonical(), "((!a == \"x\" && b == \"y\") || has(c))");
        assert!(s.matches(&labels(&[("c", "1")])));
        assert!(s.matches(&labels(&[("b", "y")])));
        assert!(!s.matches(&labels(&[("a", "x"), ("b", "y")])));
    }

    #[test]
    fn hostile_input_is_an_error_not_a_crash() {
        let deep = "(".repeat(10_000) + "all()" + &")".repeat(10_000);
        assert_eq!(Selector::parse(&deep).unwrap_err().kind, SelectorErrorKind::TooLong);
        let nots = "!".repeat(100_000) + "has(a)";
        assert_eq!(Selector::parse(&nots).unwrap_err().kind, SelectorErrorKind::TooLong);
        let long = "a == 'b' && ".repeat(200_000);
        assert!(Selector::parse(&long).is_err());
        let wide = vec!["has(a)"; 50_000].join(" || ");
        assert!(Selector::parse(&wide).is_ok());
    }

    #[test]
    fn error_positions_point_at_the_problem() {
        let e = Selector::parse("a == \"b\" && %").unwrap_err();
        assert_eq!(e.pos, 12);
        let e = Selector::parse("has(foo) &&").unwrap_err();
        assert_eq!(e.pos, 11);
    }

    #[test]
    fn label_selector_compiles_to_the_same_tree() {
        let s = Selector::from_label_selector(
            &[("app".into(), "web".into())],
            &[
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: vec!["b".into(), "a".into()],
                },
                LabelSelectorRequirement { key: "x".into(), operator: "DoesNotExist".into(), values: vec![] },
            ],
        )
        .unwrap();
        assert_eq!(s, Selector::parse("app == 'web' && tier in {'a','b'} && !has(x)").unwrap());
        let bad = Selector::from_label_selector(
            &[],
            &[LabelSelectorRequirement { key: "k".into(), operator: "Exists".into(), values: vec!["v".into()] }],
        )
        .unwrap_err();
        assert_eq!(bad.field.as_deref(), Some("matchExpressions[0].values"));
        assert!(Selector::from_label_selector(&[], &[]).unwrap().is_all());
    }

    #[test]
    fn prefix_and_conjunction() {
        let s = Selector::parse("a == 'b' && has(c)").unwrap().with_key_prefix("pcns.");
        assert_eq!(s.canonical(), "(pcns.a == \"b\" && has(pcns.c))");
        let both = Selector::parse("has(x)").unwrap().and(&s);
        assert_eq!(both.canonical(), "(has(x) && pcns.a == \"b\" && has(pcns.c))");
    }
}
