//! Strict field validation of manifests, the fast path: whether an object has only the fields
//! its kind's schema knows, each of a JSON type the schema allows.
//!
//! The schemas are the files `pyclassify/schemas/*.json` (written by `scripts/update_schemas.py`
//! from pinned Kubernetes, network-policy-api and Calico releases): `kinds` maps
//! `apiVersion/Kind` to a `$ref` into `definitions` (or to `anyOf` several: a version served in
//! more than one shape, an object conforms to one of them), whose nodes keep only `type` (a name or a
//! list of names), `properties`, `additionalProperties`, `items`, `format` (int32, int64),
//! `x-kubernetes-int-or-string` and `x-kubernetes-preserve-unknown-fields`. They are compiled
//! once into a table of [`Node`]s; [`Schemas::conforms`] walks any tree that implements
//! [`Value`] (the Python objects a manifest was read into) without allocating.
//!
//! It answers yes or no. "No" means "look closer": the control plane (`pyclassify.kinds.schema`,
//! the same rules over the same files) then walks the object itself and words each problem with
//! its field path. A value this walker does not know the JSON type of (a YAML timestamp, an
//! integer beyond 64 bits) is a "no" too, for that walk to judge.

use std::collections::HashMap;

use fnv::FnvBuildHasher;
use serde_json::Value as Json;

// FNV-1a: field names are short, and looked up once per field of every object.
type Fields = HashMap<Box<str>, u32, FnvBuildHasher>;

const STRING: u8 = 1;
const INTEGER: u8 = 2;
/// `number`: an integer or a float.
const NUMBER: u8 = 4;
const BOOLEAN: u8 = 8;
const OBJECT: u8 = 16;
const ARRAY: u8 = 32;
const ANY: u8 = u8::MAX;

/// One compiled schema node; children are indices into [`Schemas`]' table.
#[derive(Debug, Clone, Default)]
struct Node {
    types: u8,
    props: Option<Fields>,
    extra: Option<u32>,
    items: Option<u32>,
    preserve: bool,
    bounds: Option<(i64, i64)>,
}

/// What a value is, as JSON sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Null,
    Bool,
    Int(i64),
    /// An integer beyond 64 bits (no Kubernetes field holds one).
    BigInt,
    Float,
    Str,
    Map,
    List,
    /// Anything else (a YAML timestamp, binary): the detailed walk judges it.
    Other,
}

/// A tree of values to check: a mapping's entries and a list's items are visited through
/// callbacks that return false to stop (the walk stops at the first problem).
pub trait Value: Sized {
    fn shape(&self) -> Shape;
    /// A mapping's `apiVersion` and `kind`, when both are strings.
    fn kind_of(&self) -> Option<(String, String)>;
    /// Calls `f` with each entry (its key when the key is a string) until `f` returns false;
    /// returns false then, true when every entry was visited.
    fn entries<F: FnMut(Option<&str>, Self) -> bool>(&self, f: F) -> bool;
    /// Calls `f` with each item until it returns false; returns false then.
    fn items<F: FnMut(Self) -> bool>(&self, f: F) -> bool;
}

/// The compiled schemas of every kind.
#[derive(Debug, Clone, Default)]
pub struct Schemas {
    nodes: Vec<Node>,
    /// apiVersion -> kind -> the kind's roots: an object conforms when it conforms to one.
    kinds: HashMap<Box<str>, KindRoots, FnvBuildHasher>,
}

/// Of one apiVersion: kind -> the kind's roots.
type KindRoots = HashMap<Box<str>, Vec<u32>, FnvBuildHasher>;

impl Schemas {
    /// Compiles the schema files (their JSON text). Every `$ref` must name a definition of one
    /// of them.
    pub fn from_json(files: &[&str]) -> Result<Schemas, String> {
        let mut definitions: HashMap<String, Json> = HashMap::new();
        let mut kinds: Vec<(String, Vec<String>)> = Vec::new();
        for (i, text) in files.iter().enumerate() {
            let data: Json = serde_json::from_str(text).map_err(|e| format!("schema file {i}: {e}"))?;
            let defs =
                data.get("definitions").and_then(Json::as_object).ok_or(format!("schema file {i}: no definitions"))?;
            for (name, node) in defs {
                definitions.insert(name.clone(), node.clone());
            }
            let entries = data.get("kinds").and_then(Json::as_object).ok_or(format!("schema file {i}: no kinds"))?;
            for (key, entry) in entries {
                let shapes = match entry.get("anyOf").and_then(Json::as_array) {
                    Some(list) => list.iter().collect(),
                    None => vec![entry],
                };
                let mut names = Vec::new();
                for shape in shapes {
                    let target = shape.get("$ref").and_then(Json::as_str).ok_or(format!("kind {key}: no $ref"))?;
                    names.push(ref_name(target).to_owned());
                }
                kinds.push((key.clone(), names));
            }
        }
        let mut compiler = Compiler { definitions: &definitions, ids: HashMap::new(), nodes: Vec::new() };
        let mut out: HashMap<Box<str>, HashMap<Box<str>, Vec<u32>, _>, _> = HashMap::default();
        for (key, names) in kinds {
            let ids = names.iter().map(|n| compiler.definition(n)).collect::<Result<Vec<u32>, String>>()?;
            let (api_version, kind) = key.rsplit_once('/').ok_or(format!("kind {key}: not apiVersion/Kind"))?;
            out.entry(api_version.into()).or_default().insert(kind.into(), ids);
        }
        Ok(Schemas { nodes: compiler.nodes, kinds: out })
    }

    /// The root nodes of `api_version`/`kind` (one per shape), if a schema of it is bundled. A
    /// typed list read whole (`PodList`, ...) is a `v1` `List`: its items are objects of their own.
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<&[u32]> {
        let found = self.kinds.get(api_version).and_then(|k| k.get(kind));
        match found {
            Some(roots) => Some(roots),
            None if kind.ends_with("List") && kind != "List" => self.kind("v1", "List"),
            None => None,
        }
    }

    /// Every `apiVersion/Kind` with a schema.
    pub fn kinds(&self) -> impl Iterator<Item = String> + '_ {
        self.kinds.iter().flat_map(|(v, ks)| ks.keys().map(move |k| format!("{v}/{k}")))
    }

    /// Whether an object conforms to the schema of its own `apiVersion` and `kind` (read from
    /// it); None when it has no schema (or no string apiVersion and kind).
    pub fn check<V: Value>(&self, value: &V) -> Option<bool> {
        let (api_version, kind) = value.kind_of()?;
        let roots = self.kind(&api_version, &kind)?;
        Some(self.conforms(roots, value))
    }

    /// Whether `value` conforms to one of the nodes `roots` (from [`Schemas::kind`]).
    pub fn conforms<V: Value>(&self, roots: &[u32], value: &V) -> bool {
        roots.iter().any(|&root| self.walk(root, value))
    }

    fn walk<V: Value>(&self, id: u32, value: &V) -> bool {
        let node = &self.nodes[id as usize];
        match value.shape() {
            Shape::Null => true,
            Shape::Bool => node.types & BOOLEAN != 0,
            Shape::Int(n) => {
                node.types & (INTEGER | NUMBER) != 0 && node.bounds.is_none_or(|(lo, hi)| lo <= n && n <= hi)
            }
            Shape::Float => node.types & NUMBER != 0,
            Shape::Str => node.types & STRING != 0,
            Shape::BigInt | Shape::Other => false,
            Shape::Map => {
                if node.types & OBJECT == 0 {
                    return false;
                }
                if node.props.is_none() && node.extra.is_none() {
                    return true; // free-form, or preserved without known fields
                }
                value.entries(|key, child| {
                    let known = match (key, &node.props) {
                        (Some(k), Some(props)) => props.get(k).copied(),
                        _ => None,
                    };
                    match known.or(node.extra) {
                        Some(c) => self.walk(c, &child),
                        None => node.preserve,
                    }
                })
            }
            Shape::List => {
                if node.types & ARRAY == 0 {
                    return false;
                }
                match node.items {
                    Some(items) => value.items(|item| self.walk(items, &item)),
                    None => true,
                }
            }
        }
    }
}

fn ref_name(target: &str) -> &str {
    target.strip_prefix("#/definitions/").unwrap_or(target)
}

struct Compiler<'a> {
    definitions: &'a HashMap<String, Json>,
    ids: HashMap<String, u32>,
    nodes: Vec<Node>,
}

impl Compiler<'_> {
    /// The node of a named definition, compiled once (definitions may refer to themselves).
    fn definition(&mut self, name: &str) -> Result<u32, String> {
        if let Some(&id) = self.ids.get(name) {
            return Ok(id);
        }
        let raw = self.definitions.get(name).ok_or(format!("no definition {name}"))?;
        let id = self.push(Node::default());
        self.ids.insert(name.to_owned(), id);
        let node = self.node(raw)?;
        self.nodes[id as usize] = node;
        Ok(id)
    }

    fn push(&mut self, node: Node) -> u32 {
        self.nodes.push(node);
        (self.nodes.len() - 1) as u32
    }

    fn child(&mut self, raw: &Json) -> Result<u32, String> {
        if let Some(target) = raw.get("$ref").and_then(Json::as_str) {
            return self.definition(ref_name(target));
        }
        let node = self.node(raw)?;
        Ok(self.push(node))
    }

    fn node(&mut self, raw: &Json) -> Result<Node, String> {
        if let Some(target) = raw.get("$ref").and_then(Json::as_str) {
            let id = self.definition(ref_name(target))?;
            return Ok(self.nodes[id as usize].clone());
        }
        let mut node = Node { types: ANY, ..Node::default() };
        if raw.get("x-kubernetes-int-or-string").and_then(Json::as_bool) == Some(true) {
            node.types = INTEGER | STRING;
            return Ok(node);
        }
        match raw.get("type") {
            None => {}
            Some(Json::String(t)) => node.types = type_bit(t)?,
            Some(Json::Array(ts)) => {
                node.types = 0;
                for t in ts {
                    node.types |= type_bit(t.as_str().ok_or("a type that is not a string")?)?;
                }
            }
            Some(other) => return Err(format!("type {other}")),
        }
        node.bounds = match raw.get("format").and_then(Json::as_str) {
            Some("int32") => Some((i64::from(i32::MIN), i64::from(i32::MAX))),
            Some("int64") => Some((i64::MIN, i64::MAX)),
            _ => None,
        };
        node.preserve = raw.get("x-kubernetes-preserve-unknown-fields").and_then(Json::as_bool) == Some(true);
        if let Some(props) = raw.get("properties").and_then(Json::as_object) {
            let mut out = Fields::with_capacity_and_hasher(props.len(), Default::default());
            for (key, child) in props {
                out.insert(key.as_str().into(), self.child(child)?);
            }
            node.props = Some(out);
        }
        if let Some(extra) = raw.get("additionalProperties") {
            node.extra = Some(self.child(extra)?);
        }
        if let Some(items) = raw.get("items") {
            node.items = Some(self.child(items)?);
        }
        Ok(node)
    }
}

fn type_bit(name: &str) -> Result<u8, String> {
    Ok(match name {
        "string" => STRING,
        "integer" => INTEGER,
        "number" => NUMBER,
        "boolean" => BOOLEAN,
        "object" => OBJECT,
        "array" => ARRAY,
        other => return Err(format!("unknown type {other:?}")),
    })
}

/// [`Value`] over `serde_json` values: the tests', and any Rust caller's.
impl Value for &Json {
    fn kind_of(&self) -> Option<(String, String)> {
        Some((self.get("apiVersion")?.as_str()?.to_owned(), self.get("kind")?.as_str()?.to_owned()))
    }

    fn shape(&self) -> Shape {
        match self {
            Json::Null => Shape::Null,
            Json::Bool(_) => Shape::Bool,
            Json::Number(n) => match n.as_i64() {
                Some(i) => Shape::Int(i),
                None if n.is_u64() => Shape::BigInt,
                None => Shape::Float,
            },
            Json::String(_) => Shape::Str,
            Json::Array(_) => Shape::List,
            Json::Object(_) => Shape::Map,
        }
    }

    fn entries<F: FnMut(Option<&str>, Self) -> bool>(&self, mut f: F) -> bool {
        match self {
            Json::Object(m) => m.iter().all(|(k, v)| f(Some(k), v)),
            _ => true,
        }
    }

    fn items<F: FnMut(Self) -> bool>(&self, mut f: F) -> bool {
        match self {
            Json::Array(a) => a.iter().all(&mut f),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schemas() -> Schemas {
        let file = json!({
            "kinds": {"v1/Thing": {"$ref": "#/definitions/Thing"}, "v1/Loose": {"$ref": "#/definitions/Loose"},
                      "v1/Either": {"anyOf": [{"$ref": "#/definitions/Thing"}, {"$ref": "#/definitions/Other"}]}},
            "definitions": {
                "Thing": {"type": "object", "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "port": {"type": "integer", "format": "int32"},
                    "target": {"x-kubernetes-int-or-string": true},
                    "quantity": {"type": ["string", "number"]},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "kept": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                             "properties": {"n": {"type": "integer"}}},
                    "list": {"type": "array", "items": {"$ref": "#/definitions/Thing"}},
                    "flag": {"type": "boolean"}
                }},
                "Loose": {},
                "Other": {"type": "object", "properties": {"other": {"type": "string"}}}
            }
        });
        Schemas::from_json(&[&file.to_string()]).unwrap()
    }

    fn conforms(value: serde_json::Value) -> bool {
        let s = schemas();
        s.conforms(s.kind("v1", "Thing").unwrap(), &&value)
    }

    #[test]
    fn known_fields_of_the_right_types_conform() {
        assert!(conforms(json!({"kind": "Thing", "port": 80, "target": "http", "quantity": 1.5,
                                "labels": {"a": "b"}, "raw": {"anything": [1]}, "kept": {"n": 1, "other": true},
                                "list": [{"port": 1, "flag": false}], "flag": null})));
        assert!(conforms(json!({"target": 8080, "quantity": "100m"})));
    }

    #[test]
    fn an_unknown_field_does_not_conform_at_any_depth() {
        assert!(!conforms(json!({"kidn": "Thing"})));
        assert!(!conforms(json!({"list": [{"port": 1}, {"prot": 1}]})));
    }

    #[test]
    fn a_value_of_another_type_does_not_conform() {
        assert!(!conforms(json!({"port": "80"})));
        assert!(!conforms(json!({"port": 80.0})));
        assert!(!conforms(json!({"port": true})));
        assert!(!conforms(json!({"labels": {"a": 1}})));
        assert!(!conforms(json!({"list": {"port": 1}})));
        assert!(!conforms(json!({"kept": {"n": "1"}})));
        assert!(!conforms(json!({"target": 1.5})));
        assert!(!conforms(json!(["not", "an", "object"])));
    }

    #[test]
    fn integers_must_fit_their_format() {
        assert!(conforms(json!({"port": 2147483647})));
        assert!(!conforms(json!({"port": 2147483648_i64})));
        assert!(!conforms(json!({"port": 18446744073709551615_u64})));
    }

    #[test]
    fn a_node_without_a_type_takes_anything() {
        let s = schemas();
        let root = s.kind("v1", "Loose").unwrap();
        assert!(s.conforms(root, &&json!({"x": 1})));
        assert!(s.conforms(root, &&json!("text")));
        assert!(s.kind("v1", "Other").is_none());
    }

    #[test]
    fn a_kind_of_several_shapes_takes_an_object_of_any_one() {
        let s = schemas();
        let roots = s.kind("v1", "Either").unwrap();
        assert!(s.conforms(roots, &&json!({"port": 1})));
        assert!(s.conforms(roots, &&json!({"other": "x"})));
        assert!(!s.conforms(roots, &&json!({"port": 1, "other": "x"})));
    }

    #[test]
    fn an_object_is_checked_against_its_own_kind() {
        let s = schemas();
        assert_eq!(s.check(&&json!({"apiVersion": "v1", "kind": "Thing", "port": 1})), Some(true));
        assert_eq!(s.check(&&json!({"apiVersion": "v1", "kind": "Thing", "prot": 1})), Some(false));
        assert_eq!(s.check(&&json!({"apiVersion": "v1", "kind": "Other"})), None);
        assert_eq!(s.check(&&json!({"apiVersion": "v1", "kind": 5})), None);
        let mut kinds: Vec<String> = s.kinds().collect();
        kinds.sort();
        assert_eq!(kinds, ["v1/Either", "v1/Loose", "v1/Thing"]);
    }

    #[test]
    fn a_reference_to_a_missing_definition_is_an_error() {
        let file = json!({"kinds": {"v1/A": {"$ref": "#/definitions/A"}}, "definitions": {}});
        assert!(Schemas::from_json(&[&file.to_string()]).is_err());
    }
}
