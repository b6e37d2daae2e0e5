//! `pyclassify/engine_spec.py`, the Python side of the engine spec: one `TypedDict` per struct
//! of [`super::spec`], written from their JSON Schema (schemars reads the serde attributes, so a
//! field is `NotRequired` exactly when serde accepts the object without it). `pyclassify.engine`
//! annotates its builders with them, so mypy checks every key it writes against the Rust types.
//! The file is committed and generated: `committed_python_types_are_generated` fails when it
//! differs from what this writes, and
//! `cargo run --manifest-path rust/Cargo.toml -p pyclassify-core --bin engine-spec` rewrites it.

use std::collections::BTreeMap;

use schemars::Schema;
use serde_json::{Map, Value};

use super::spec::{Delta, Spec};

/// The file, relative to the repository.
pub const PATH: &str = "pyclassify/engine_spec.py";

const HEADER: &str = "\"\"\"The engine spec's JSON as `pyclassify.engine` writes it and the Rust engine reads it
(`rust/core/src/engine/spec.rs`): generated from the Rust types, do not edit. Regenerate with
`cargo run --manifest-path rust/Cargo.toml -p pyclassify-core --bin engine-spec`; `cargo test`
fails while this file differs from what the generator writes. The engine refuses a key that is
not declared here.\"\"\"

from typing import NotRequired, TypeAlias, TypedDict
";

/// The Python source of `pyclassify/engine_spec.py`.
pub fn python_types() -> String {
    let mut defs: BTreeMap<String, Value> = BTreeMap::new();
    for (name, schema) in [("Delta", schemars::schema_for!(Delta)), ("Spec", schemars::schema_for!(Spec))] {
        let mut root = schema_value(schema);
        if let Some(Value::Object(more)) = root.remove("$defs") {
            defs.extend(more);
        }
        root.remove("$schema");
        root.remove("title");
        defs.insert(name.to_string(), Value::Object(root));
    }
    let mut out = String::from(HEADER);
    for (name, def) in &defs {
        out.push_str("\n\n");
        out.push_str(&declaration(name, def));
    }
    out
}

fn schema_value(schema: Schema) -> Map<String, Value> {
    match schema.to_value() {
        Value::Object(m) => m,
        other => panic!("a schema that is not an object: {other}"),
    }
}

/// A struct as a `TypedDict`, anything else as a type alias.
fn declaration(name: &str, def: &Value) -> String {
    let Some(properties) = def.get("properties").and_then(Value::as_object) else {
        return format!("{name}: TypeAlias = {}\n", python_type(def));
    };
    assert_eq!(
        def.get("additionalProperties"),
        Some(&Value::Bool(false)),
        "{name} accepts unknown fields: give it #[serde(deny_unknown_fields)]"
    );
    let required: Vec<&str> = def
        .get("required")
        .and_then(Value::as_array)
        .map_or(Vec::new(), |r| r.iter().filter_map(Value::as_str).collect());
    let mut out = format!("class {name}(TypedDict):\n");
    if let Some(doc) = description(def) {
        out.push_str(&format!("    \"\"\"{}\"\"\"\n\n", doc.replace('\n', "\n    ")));
    }
    for (field, schema) in properties {
        if let Some(doc) = description(schema) {
            for line in doc.lines() {
                out.push_str(&format!("    #: {line}\n").replace("#: \n", "#:\n"));
            }
        }
        // A type naming another definition is quoted: definitions are in name order, and a
        // string annotation keeps `NotRequired` visible to `TypedDict` (`__required_keys__`).
        let ty = python_type(schema);
        let ty = if mentions_definition(&ty) { format!("\"{ty}\"") } else { ty };
        if required.contains(&field.as_str()) {
            out.push_str(&format!("    {field}: {ty}\n"));
        } else {
            out.push_str(&format!("    {field}: NotRequired[{ty}]\n"));
        }
    }
    out
}

fn mentions_definition(ty: &str) -> bool {
    ty.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .any(|w| w != "None" && w.starts_with(|c: char| c.is_ascii_uppercase()))
}

fn description(schema: &Value) -> Option<String> {
    schema.get("description").and_then(Value::as_str).map(|d| d.replace("\"\"\"", "'''").replace("\\", "\\\\"))
}

/// The Python annotation of a JSON Schema.
fn python_type(schema: &Value) -> String {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        return r.rsplit('/').next().expect("a $ref names a definition").to_string();
    }
    if let Some(alts) = schema.get("anyOf").or_else(|| schema.get("oneOf")).and_then(Value::as_array) {
        return union(alts.iter().map(python_type).collect());
    }
    match schema.get("type") {
        Some(Value::Array(types)) => union(
            types
                .iter()
                .map(|t| {
                    let mut one = schema.clone();
                    one["type"] = t.clone();
                    python_type(&one)
                })
                .collect(),
        ),
        Some(Value::String(t)) => match t.as_str() {
            "string" => "str".into(),
            "integer" => "int".into(),
            "number" => "float".into(),
            "boolean" => "bool".into(),
            "null" => "None".into(),
            "array" => match (schema.get("prefixItems").and_then(Value::as_array), schema.get("items")) {
                (Some(items), _) => format!("tuple[{}]", items.iter().map(python_type).collect::<Vec<_>>().join(", ")),
                (None, Some(items)) => format!("list[{}]", python_type(items)),
                (None, None) => panic!("an array without items: {schema}"),
            },
            "object" => match schema.get("additionalProperties") {
                Some(values @ Value::Object(_)) => format!("dict[str, {}]", python_type(values)),
                _ => panic!("an object without a value type: {schema}"),
            },
            other => panic!("JSON Schema type {other:?} has no Python type here"),
        },
        _ => panic!("a schema this generator does not know: {schema}"),
    }
}

fn union(mut parts: Vec<String>) -> String {
    // None last, as the package writes optional types.
    if let Some(i) = parts.iter().position(|p| p == "None") {
        let none = parts.remove(i);
        parts.push(none);
    }
    parts.join(" | ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn committed_python_types_are_generated() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let committed = std::fs::read_to_string(root.join(super::PATH)).unwrap_or_default();
        assert!(
            committed == super::python_types(),
            "{} differs from what rust/core/src/engine/spec_py.rs generates: run \
             `cargo run --manifest-path rust/Cargo.toml -p pyclassify-core --bin engine-spec` and commit",
            super::PATH
        );
    }
}
