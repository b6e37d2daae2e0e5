//! Selector syntax tree: evaluation and Calico's canonical printing.

use std::collections::BTreeSet;
use std::fmt;

use super::Labels;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Node {
    All,
    /// `global()`: matches any labels; policy validation restricts where it may appear.
    Global,
    Has(String),
    Eq(String, String),
    Ne(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Contains(String, String),
    StartsWith(String, String),
    EndsWith(String, String),
    Not(Box<Node>),
    And(Vec<Node>),
    Or(Vec<Node>),
}

impl Node {
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        match self {
            Node::All | Node::Global => true,
            Node::Has(k) => labels.get(k).is_some(),
            Node::Eq(k, v) => labels.get(k) == Some(v.as_str()),
            Node::Ne(k, v) => labels.get(k) != Some(v.as_str()),
            Node::In(k, vs) => labels.get(k).is_some_and(|x| vs.contains(x)),
            Node::NotIn(k, vs) => !labels.get(k).is_some_and(|x| vs.contains(x)),
            Node::Contains(k, v) => labels.get(k).is_some_and(|x| x.contains(v.as_str())),
            Node::StartsWith(k, v) => labels.get(k).is_some_and(|x| x.starts_with(v.as_str())),
            Node::EndsWith(k, v) => labels.get(k).is_some_and(|x| x.ends_with(v.as_str())),
            Node::Not(n) => !n.matches(labels),
            Node::And(ns) => ns.iter().all(|n| n.matches(labels)),
            Node::Or(ns) => ns.iter().any(|n| n.matches(labels)),
        }
    }

    /// Whether `global()` appears anywhere in the tree.
    pub fn contains_global(&self) -> bool {
        match self {
            Node::Global => true,
            Node::Not(n) => n.contains_global(),
            Node::And(ns) | Node::Or(ns) => ns.iter().any(Node::contains_global),
            _ => false,
        }
    }

    /// Rewrites every label key with `f` (Calico's PrefixVisitor generalised).
    pub fn map_keys(&mut self, f: &dyn Fn(&str) -> String) {
        match self {
            Node::All | Node::Global => {}
            Node::Has(k)
            | Node::Eq(k, _)
            | Node::Ne(k, _)
            | Node::In(k, _)
            | Node::NotIn(k, _)
            | Node::Contains(k, _)
            | Node::StartsWith(k, _)
            | Node::EndsWith(k, _) => *k = f(k),
            Node::Not(n) => n.map_keys(f),
            Node::And(ns) | Node::Or(ns) => ns.iter_mut().for_each(|n| n.map_keys(f)),
        }
    }

    /// Every label key the tree mentions.
    pub fn keys<'a>(&'a self, out: &mut BTreeSet<&'a str>) {
        match self {
            Node::All | Node::Global => {}
            Node::Has(k)
            | Node::Eq(k, _)
            | Node::Ne(k, _)
            | Node::In(k, _)
            | Node::NotIn(k, _)
            | Node::Contains(k, _)
            | Node::StartsWith(k, _)
            | Node::EndsWith(k, _) => {
                out.insert(k.as_str());
            }
            Node::Not(n) => n.keys(out),
            Node::And(ns) | Node::Or(ns) => ns.iter().for_each(|n| n.keys(out)),
        }
    }

    pub fn depth(&self) -> usize {
        match self {
            Node::Not(n) => 1 + n.depth(),
            Node::And(ns) | Node::Or(ns) => 1 + ns.iter().map(Node::depth).max().unwrap_or(0),
            _ => 1,
        }
    }
}

/// Writes a literal in the quote style Calico uses: double quotes unless the value has one.
fn write_literal(f: &mut fmt::Formatter<'_>, v: &str) -> fmt::Result {
    if v.contains('"') {
        write!(f, "'{v}'")
    } else {
        write!(f, "\"{v}\"")
    }
}

fn write_set(f: &mut fmt::Formatter<'_>, vs: &BTreeSet<String>) -> fmt::Result {
    f.write_str("{")?;
    for (i, v) in vs.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write_literal(f, v)?;
    }
    f.write_str("}")
}

fn write_joined(f: &mut fmt::Formatter<'_>, ns: &[Node], op: &str) -> fmt::Result {
    f.write_str("(")?;
    for (i, n) in ns.iter().enumerate() {
        if i > 0 {
            f.write_str(op)?;
        }
        write!(f, "{n}")?;
    }
    f.write_str(")")
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::All => f.write_str("all()"),
            Node::Global => f.write_str("global()"),
            Node::Has(k) => write!(f, "has({k})"),
            Node::Eq(k, v) => {
                write!(f, "{k} == ")?;
                write_literal(f, v)
            }
            Node::Ne(k, v) => {
                write!(f, "{k} != ")?;
                write_literal(f, v)
            }
            Node::In(k, vs) => {
                write!(f, "{k} in ")?;
                write_set(f, vs)
            }
            Node::NotIn(k, vs) => {
                write!(f, "{k} not in ")?;
                write_set(f, vs)
            }
            Node::Contains(k, v) => {
                write!(f, "{k} contains ")?;
                write_literal(f, v)
            }
            Node::StartsWith(k, v) => {
                write!(f, "{k} starts with ")?;
                write_literal(f, v)
            }
            Node::EndsWith(k, v) => {
                write!(f, "{k} ends with ")?;
                write_literal(f, v)
            }
            Node::Not(n) => write!(f, "!{n}"),
            Node::And(ns) => write_joined(f, ns, " && "),
            Node::Or(ns) => write_joined(f, ns, " || "),
        }
    }
}
