//! What the reader builds values with: a [`Builder`] supplied by the caller (Python objects in
//! the pyo3 glue), and [`ValueBuilder`], a plain Rust tree for tests and fuzzing.

use std::rc::Rc;

use super::scalar::Scalar;

/// Makes the values of a document. Containers are built bottom-up: a mapping or sequence is
/// filled, then turned into a value. An alias is its anchor's value shared ([`Builder::share`]),
/// never expanded.
pub trait Builder {
    type Value;
    type Map;
    type Seq;

    fn scalar(&mut self, scalar: &Scalar<'_>) -> Result<Self::Value, BuildError>;
    /// A mapping key (keys repeat across objects: a builder may reuse them).
    fn key(&mut self, scalar: &Scalar<'_>) -> Result<Self::Value, BuildError> {
        self.scalar(scalar)
    }
    fn map(&mut self) -> Result<Self::Map, BuildError>;
    /// Adds `key: value` unless an equal key is there: then returns false and adds nothing.
    fn insert(&mut self, map: &mut Self::Map, key: Self::Value, value: Self::Value) -> Result<bool, BuildError>;
    /// Adds every entry of `source` whose key `map` lacks (a YAML merge key, `<<`); false if
    /// `source` is not a mapping.
    fn merge(&mut self, map: &mut Self::Map, source: &Self::Value) -> Result<bool, BuildError>;
    fn map_value(&mut self, map: Self::Map) -> Result<Self::Value, BuildError>;
    fn seq(&mut self) -> Result<Self::Seq, BuildError>;
    fn push(&mut self, seq: &mut Self::Seq, value: Self::Value) -> Result<(), BuildError>;
    fn seq_value(&mut self, seq: Self::Seq) -> Result<Self::Value, BuildError>;
    /// Another reference to the same value (cheap: a reference count).
    fn share(&self, value: &Self::Value) -> Self::Value;
    /// A key as an error message shows it (`"kind"`, `1`).
    fn describe(&self, key: &Self::Value) -> String;
}

/// The builder could not make a value (in Python: out of memory, an exception in a callback).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError(pub String);

/// A document as a plain Rust tree. Mappings keep their keys in order; aliases share the node.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    BigInt(bool, u32, String),
    Float(f64),
    Str(String),
    Seq(Rc<Vec<Value>>),
    Map(Rc<Vec<(Value, Value)>>),
}

impl Value {
    /// The value at `key` of a mapping.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(entries) => entries.iter().find(|(k, _)| matches!(k, Value::Str(s) if s == key)).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Equality as Python's dict sees keys: `1 == 1.0 == True`.
    fn same_key(&self, other: &Value) -> bool {
        fn number(v: &Value) -> Option<f64> {
            match v {
                Value::Bool(b) => Some(f64::from(u8::from(*b))),
                Value::Int(i) => Some(*i as f64),
                Value::Float(f) => Some(*f),
                _ => None,
            }
        }
        match (number(self), number(other)) {
            (Some(a), Some(b)) => a == b,
            _ => self == other,
        }
    }
}

/// Builds [`Value`] trees.
#[derive(Default)]
pub struct ValueBuilder;

impl Builder for ValueBuilder {
    type Value = Value;
    type Map = Vec<(Value, Value)>;
    type Seq = Vec<Value>;

    fn scalar(&mut self, scalar: &Scalar<'_>) -> Result<Value, BuildError> {
        Ok(match scalar {
            Scalar::Null => Value::Null,
            Scalar::Bool(b) => Value::Bool(*b),
            Scalar::Int(i) => Value::Int(*i),
            Scalar::BigInt { negative, radix, digits } => Value::BigInt(*negative, *radix, digits.clone()),
            Scalar::Float(f) => Value::Float(*f),
            Scalar::Str(s) => Value::Str(s.to_string()),
        })
    }

    fn map(&mut self) -> Result<Self::Map, BuildError> {
        Ok(Vec::new())
    }

    fn insert(&mut self, map: &mut Self::Map, key: Value, value: Value) -> Result<bool, BuildError> {
        if map.iter().any(|(k, _)| k.same_key(&key)) {
            return Ok(false);
        }
        map.push((key, value));
        Ok(true)
    }

    fn merge(&mut self, map: &mut Self::Map, source: &Value) -> Result<bool, BuildError> {
        let Value::Map(entries) = source else { return Ok(false) };
        for (k, v) in entries.iter() {
            self.insert(map, k.clone(), v.clone())?;
        }
        Ok(true)
    }

    fn map_value(&mut self, map: Self::Map) -> Result<Value, BuildError> {
        Ok(Value::Map(Rc::new(map)))
    }

    fn seq(&mut self) -> Result<Self::Seq, BuildError> {
        Ok(Vec::new())
    }

    fn push(&mut self, seq: &mut Self::Seq, value: Value) -> Result<(), BuildError> {
        seq.push(value);
        Ok(())
    }

    fn seq_value(&mut self, seq: Self::Seq) -> Result<Value, BuildError> {
        Ok(Value::Seq(Rc::new(seq)))
    }

    fn share(&self, value: &Value) -> Value {
        value.clone()
    }

    fn describe(&self, key: &Value) -> String {
        match key {
            Value::Str(s) => format!("{s:?}"),
            other => format!("{other:?}"),
        }
    }
}

/// Builds nothing: for the position pass, which wants only the lines.
#[derive(Default)]
pub struct NoValues;

impl Builder for NoValues {
    type Value = ();
    type Map = ();
    type Seq = ();

    fn scalar(&mut self, _: &Scalar<'_>) -> Result<(), BuildError> {
        Ok(())
    }
    fn map(&mut self) -> Result<(), BuildError> {
        Ok(())
    }
    fn insert(&mut self, _: &mut (), _: (), _: ()) -> Result<bool, BuildError> {
        Ok(true)
    }
    fn merge(&mut self, _: &mut (), _: &()) -> Result<bool, BuildError> {
        Ok(true)
    }
    fn map_value(&mut self, _: ()) -> Result<(), BuildError> {
        Ok(())
    }
    fn seq(&mut self) -> Result<(), BuildError> {
        Ok(())
    }
    fn push(&mut self, _: &mut (), _: ()) -> Result<(), BuildError> {
        Ok(())
    }
    fn seq_value(&mut self, _: ()) -> Result<(), BuildError> {
        Ok(())
    }
    fn share(&self, _: &()) {}
    fn describe(&self, _: &()) -> String {
        String::new()
    }
}
