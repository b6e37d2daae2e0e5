//! Kubernetes `metav1.LabelSelector` compiled into the same tree as Calico selectors.

use super::ast::Node;
use super::error::SelectorError;

/// One `matchExpressions` entry as written (operator unchecked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

/// `matchLabels` AND every `matchExpressions` requirement; an empty selector matches all.
pub fn from_label_selector(
    match_labels: &[(String, String)],
    match_expressions: &[LabelSelectorRequirement],
) -> Result<Node, SelectorError> {
    let mut terms = Vec::with_capacity(match_labels.len() + match_expressions.len());
    let mut labels: Vec<&(String, String)> = match_labels.iter().collect();
    labels.sort();
    for (k, v) in labels {
        check_literal(&format!("matchLabels.{k}"), v)?;
        terms.push(Node::Eq(k.clone(), v.clone()));
    }
    for (i, req) in match_expressions.iter().enumerate() {
        let field = format!("matchExpressions[{i}]");
        if req.key.is_empty() {
            return Err(SelectorError::in_field(format!("{field}.key"), "key must not be empty"));
        }
        for (j, v) in req.values.iter().enumerate() {
            check_literal(&format!("{field}.values[{j}]"), v)?;
        }
        let values = || req.values.iter().cloned().collect();
        let node = match req.operator.as_str() {
            "In" | "NotIn" if req.values.is_empty() => {
                return Err(SelectorError::in_field(
                    format!("{field}.values"),
                    format!("must be non-empty when operator is {}", req.operator),
                ))
            }
            "Exists" | "DoesNotExist" if !req.values.is_empty() => {
                return Err(SelectorError::in_field(
                    format!("{field}.values"),
                    format!("must be empty when operator is {}", req.operator),
                ))
            }
            "In" => Node::In(req.key.clone(), values()),
            "NotIn" => Node::NotIn(req.key.clone(), values()),
            "Exists" => Node::Has(req.key.clone()),
            "DoesNotExist" => Node::Not(Box::new(Node::Has(req.key.clone()))),
            other => {
                return Err(SelectorError::in_field(
                    format!("{field}.operator"),
                    format!("unsupported operator {other:?} (want In, NotIn, Exists or DoesNotExist)"),
                ))
            }
        };
        terms.push(node);
    }
    Ok(match terms.len() {
        0 => Node::All,
        1 => terms.pop().unwrap(),
        _ => Node::And(terms),
    })
}

/// A value holding both quote characters cannot be printed as a selector literal.
fn check_literal(field: &str, v: &str) -> Result<(), SelectorError> {
    if v.contains('"') && v.contains('\'') {
        return Err(SelectorError::in_field(field, "value contains both quote characters"));
    }
    Ok(())
}
