//! Scalars: what a node's text means, as ruamel.yaml's round-trip loader reads YAML 1.2.
//!
//! Plain (unquoted) scalars are resolved by the core schema as ruamel implements it, which is a
//! little wider than the spec: `0b101` is binary, `0o17` octal, `017` decimal 17, underscores
//! are allowed in numbers (`1_000`), `.5e+3` is a float but `.5e3` a string; `yes`/`no`/`on` are
//! strings; timestamps stay strings. Where ruamel would crash on a text its regular expressions
//! accept (`+_`, `0x_`, `.__`), the text is a string.

use std::borrow::Cow;

/// A scalar value, already resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar<'t> {
    Null,
    Bool(bool),
    Int(i64),
    /// An integer beyond i64: its digits (no sign, no underscores) in `radix`.
    BigInt {
        negative: bool,
        radix: u32,
        digits: String,
    },
    Float(f64),
    Str(Cow<'t, str>),
}

impl Scalar<'_> {
    pub fn into_owned(self) -> Scalar<'static> {
        match self {
            Scalar::Null => Scalar::Null,
            Scalar::Bool(b) => Scalar::Bool(b),
            Scalar::Int(i) => Scalar::Int(i),
            Scalar::BigInt { negative, radix, digits } => Scalar::BigInt { negative, radix, digits },
            Scalar::Float(f) => Scalar::Float(f),
            Scalar::Str(s) => Scalar::Str(Cow::Owned(s.into_owned())),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// The value of a plain YAML scalar.
pub fn resolve_plain(text: Cow<'_, str>) -> Scalar<'_> {
    let Some(&first) = text.as_bytes().first() else { return Scalar::Null };
    let resolved = match first {
        b'~' | b'n' | b'N' => match &*text {
            "~" | "null" | "Null" | "NULL" => Some(Scalar::Null),
            _ => None,
        },
        b't' | b'T' | b'f' | b'F' => match &*text {
            "true" | "True" | "TRUE" => Some(Scalar::Bool(true)),
            "false" | "False" | "FALSE" => Some(Scalar::Bool(false)),
            _ => None,
        },
        b'-' | b'+' | b'.' | b'0'..=b'9' => {
            // ruamel tries float before int for these first characters.
            float(&text).or_else(|| if first == b'.' { None } else { int(&text) })
        }
        _ => None,
    };
    resolved.unwrap_or(Scalar::Str(text))
}

fn split_sign(text: &str) -> (bool, &str) {
    match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    }
}

fn all(s: &[u8], ok: impl Fn(u8) -> bool) -> bool {
    s.iter().all(|&c| ok(c))
}

fn digit_or_underscore(c: u8) -> bool {
    c.is_ascii_digit() || c == b'_'
}

/// `[eE][-+]?[0-9]+` (`sign_required`: `[eE][-+][0-9]+`).
fn is_exponent(s: &[u8], sign_required: bool) -> bool {
    let Some((&e, rest)) = s.split_first() else { return false };
    if e != b'e' && e != b'E' {
        return false;
    }
    let digits = match rest.first() {
        Some(b'-' | b'+') => &rest[1..],
        _ if sign_required => return false,
        _ => rest,
    };
    !digits.is_empty() && all(digits, |c| c.is_ascii_digit())
}

/// ruamel's YAML 1.2 float expression:
/// `[-+]?([0-9][0-9_]*)\.[0-9_]*([eE][-+]?[0-9]+)?`, `[-+]?([0-9][0-9_]*)([eE][-+]?[0-9]+)`,
/// `[-+]?\.[0-9_]+([eE][-+][0-9]+)?`, `[-+]?\.(inf|Inf|INF)`, `\.(nan|NaN|NAN)`.
fn float(text: &str) -> Option<Scalar<'static>> {
    let (negative, body) = split_sign(text);
    let signed = body.len() != text.len();
    match body {
        ".inf" | ".Inf" | ".INF" => {
            return Some(Scalar::Float(if negative { f64::NEG_INFINITY } else { f64::INFINITY }));
        }
        ".nan" | ".NaN" | ".NAN" if !signed => return Some(Scalar::Float(f64::NAN)),
        _ => {}
    }
    let b = body.as_bytes();
    let matches = if b.first() == Some(&b'.') {
        let end = b[1..].iter().position(|&c| !digit_or_underscore(c)).map_or(b.len(), |p| p + 1);
        end > 1 && (end == b.len() || is_exponent(&b[end..], true))
    } else if b.first().is_some_and(u8::is_ascii_digit) {
        let int_end = b.iter().position(|&c| !digit_or_underscore(c)).unwrap_or(b.len());
        if b.get(int_end) == Some(&b'.') {
            let frac_end =
                b[int_end + 1..].iter().position(|&c| !digit_or_underscore(c)).map_or(b.len(), |p| int_end + 1 + p);
            frac_end == b.len() || is_exponent(&b[frac_end..], false)
        } else {
            int_end < b.len() && is_exponent(&b[int_end..], false)
        }
    } else {
        false
    };
    if !matches {
        return None;
    }
    let cleaned: String = text.chars().filter(|&c| c != '_').collect();
    cleaned.parse::<f64>().ok().map(Scalar::Float)
}

/// ruamel's YAML 1.2 int expression: `[-+]?0b[0-1_]+`, `[-+]?0o?[0-7_]+`, `[-+]?[0-9_]+`,
/// `[-+]?0x[0-9a-fA-F_]+`. Only the `0b`, `0o` and `0x` prefixes change the radix.
fn int(text: &str) -> Option<Scalar<'static>> {
    let (negative, body) = split_sign(text);
    let b = body.as_bytes();
    let (radix, digits) = if let Some(rest) = b.strip_prefix(b"0b") {
        (2, rest)
    } else if let Some(rest) = b.strip_prefix(b"0x") {
        (16, rest)
    } else if let Some(rest) = b.strip_prefix(b"0o") {
        (8, rest)
    } else {
        (10, b)
    };
    let valid = match radix {
        2 => all(digits, |c| c == b'0' || c == b'1' || c == b'_'),
        8 => all(digits, |c| (b'0'..=b'7').contains(&c) || c == b'_'),
        16 => all(digits, |c| c.is_ascii_hexdigit() || c == b'_'),
        _ => all(digits, digit_or_underscore),
    };
    if digits.is_empty() || !valid {
        return None;
    }
    let clean: String = digits.iter().filter(|&&c| c != b'_').map(|&c| char::from(c)).collect();
    if clean.is_empty() {
        return None; // `+_`, `0x_`: ruamel's expression accepts them, its constructor crashes
    }
    Some(match u64::from_str_radix(&clean, radix) {
        Ok(magnitude) if magnitude <= i64::MAX as u64 => {
            let m = magnitude as i64;
            Scalar::Int(if negative { -m } else { m })
        }
        Ok(magnitude) if negative && magnitude == i64::MIN.unsigned_abs() => Scalar::Int(i64::MIN),
        _ => {
            let digits = clean.trim_start_matches('0');
            Scalar::BigInt { negative, radix, digits: if digits.is_empty() { "0".into() } else { digits.into() } }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(text: &str) -> Scalar<'static> {
        resolve_plain(Cow::Borrowed(text)).into_owned()
    }

    fn s(text: &str) -> Scalar<'static> {
        Scalar::Str(Cow::Owned(text.into()))
    }

    #[test]
    fn as_ruamel_resolves_yaml_1_2() {
        for (text, want) in [
            ("", Scalar::Null),
            ("~", Scalar::Null),
            ("Null", Scalar::Null),
            ("nUll", s("nUll")),
            ("True", Scalar::Bool(true)),
            ("tRue", s("tRue")),
            ("yes", s("yes")),
            ("on", s("on")),
            ("0b101", Scalar::Int(5)),
            ("0o17", Scalar::Int(15)),
            ("017", Scalar::Int(17)),
            ("0x1F", Scalar::Int(31)),
            ("-0x1F", Scalar::Int(-31)),
            ("+12", Scalar::Int(12)),
            ("1_000", Scalar::Int(1000)),
            ("1__", Scalar::Int(1)),
            ("+_", s("+_")),
            ("0x_", s("0x_")),
            ("0o", s("0o")),
            ("0b2", s("0b2")),
            ("-", s("-")),
            ("1e", s("1e")),
            (".5", Scalar::Float(0.5)),
            (".5e+3", Scalar::Float(500.0)),
            (".5e3", s(".5e3")),
            ("1.", Scalar::Float(1.0)),
            ("1e5", Scalar::Float(100000.0)),
            ("-1.5E+03", Scalar::Float(-1500.0)),
            ("1_0.5_", Scalar::Float(10.5)),
            ("._5", Scalar::Float(0.5)),
            (".__", s(".__")),
            ("-.inf", Scalar::Float(f64::NEG_INFINITY)),
            ("-.nan", s("-.nan")),
            ("1e500", Scalar::Float(f64::INFINITY)),
            ("2024-01-01", s("2024-01-01")),
            ("12:30", s("12:30")),
            ("-9223372036854775808", Scalar::Int(i64::MIN)),
            (
                "9223372036854775808",
                Scalar::BigInt { negative: false, radix: 10, digits: "9223372036854775808".into() },
            ),
        ] {
            assert_eq!(r(text), want, "{text:?}");
        }
        assert!(matches!(r(".NaN"), Scalar::Float(f) if f.is_nan()));
    }
}
