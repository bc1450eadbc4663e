//! Operations on JSON values shared by templates and conditions: text conversion, typed
//! equality, ordering (with the numeric-string rule) and arithmetic.

use serde_json::{Number, Value};
use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt::Write;

/// The text form of a value, as interpolation writes it: strings raw, numbers and booleans as
/// JSON, `null` as the empty string, arrays and objects as compact JSON.
pub fn to_text(value: &Value) -> Cow<'_, str> {
    match value {
        Value::String(s) => Cow::Borrowed(s),
        Value::Null => Cow::Borrowed(""),
        other => Cow::Owned(other.to_string()),
    }
}

/// Appends the text form of `value` to `out` (see [`to_text`]).
pub(crate) fn push_text(out: &mut String, value: &Value) {
    match value {
        Value::String(s) => out.push_str(s),
        Value::Null => {}
        // Writing to a String cannot fail.
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

/// A short name of the value's JSON type, for error messages.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The name of the value's type as a YAML or JSON file's author calls it ("a list", "a
/// mapping"), for "expected X, found Y" messages about workflow and stub files.
pub fn file_type_name(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
        other => type_name(other),
    }
}

/// Compares two numbers by value, whatever their representation (`7 == 7.0`).
fn number_cmp(a: &Number, b: &Number) -> Option<Ordering> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return Some(x.cmp(&y));
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return Some(x.cmp(&y));
    }
    a.as_f64()?.partial_cmp(&b.as_f64()?)
}

/// Typed equality: numbers by value, `null` equal only to `null`, arrays and objects member
/// by member; a string never equals a number (`"7" != 7`).
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_cmp(x, y) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// A string that holds a number (`" 7 "`, `"2.5"`), as LLM agents often send numbers.
fn numeric_string(s: &str) -> Option<f64> {
    let t = s.trim();
    // `str::parse::<f64>` also accepts "inf" and "NaN", which are not numbers here.
    if !t.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// Orders two values for `< <= > >=`: numbers by value, strings by code point, and a
/// numeric string against a number as a number. Anything else is an error.
pub(crate) fn order(a: &Value, b: &Value) -> Result<Ordering, String> {
    let unordered = || format!("cannot order {} and {}", describe(a), describe(b));
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_cmp(x, y).ok_or_else(unordered),
        (Value::String(x), Value::String(y)) => Ok(x.cmp(y)),
        (Value::Number(x), Value::String(y)) => {
            let y = numeric_string(y).ok_or_else(unordered)?;
            x.as_f64()
                .and_then(|x| x.partial_cmp(&y))
                .ok_or_else(unordered)
        }
        (Value::String(x), Value::Number(y)) => {
            let x = numeric_string(x).ok_or_else(unordered)?;
            y.as_f64()
                .and_then(|y| x.partial_cmp(&y))
                .ok_or_else(unordered)
        }
        _ => Err(unordered()),
    }
}

/// `concat` of the non-null values: arrays joined when every one is an array, text otherwise
/// (no values at all gives the empty string).
pub(crate) fn concat(values: Vec<Value>) -> Value {
    if !values.is_empty() && values.iter().all(Value::is_array) {
        let mut out = Vec::new();
        for v in values {
            if let Value::Array(items) = v {
                out.extend(items);
            }
        }
        return Value::Array(out);
    }
    let mut out = String::new();
    for v in &values {
        push_text(&mut out, v);
    }
    Value::String(out)
}

/// The value's type and, when short, the value itself, for error messages.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Array(_) | Value::Object(_) => type_name(value).into(),
        other => {
            let text = other.to_string();
            if text.chars().count() <= 40 {
                format!("{} ({text})", type_name(value))
            } else {
                type_name(value).into()
            }
        }
    }
}

/// An arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl ArithOp {
    fn symbol(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
        }
    }
}

/// A float result as a JSON number; infinities and NaN are errors.
fn float(f: f64) -> Result<Value, String> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| "the result is not a finite number".to_string())
}

/// Applies `op`: integers stay integers (division only when exact; overflow falls back to
/// floats), any float makes a float, `+` also joins two strings. Division by zero is an error.
pub(crate) fn arith(op: ArithOp, a: &Value, b: &Value) -> Result<Value, String> {
    let (x, y) = match (a, b) {
        (Value::Number(x), Value::Number(y)) => (x, y),
        (Value::String(x), Value::String(y)) if op == ArithOp::Add => {
            return Ok(Value::String(format!("{x}{y}")));
        }
        _ => {
            return Err(format!(
                "cannot apply '{}' to {} and {}",
                op.symbol(),
                describe(a),
                describe(b)
            ))
        }
    };
    if let (Some(i), Some(j)) = (x.as_i64(), y.as_i64()) {
        let exact = match op {
            ArithOp::Add => i.checked_add(j),
            ArithOp::Sub => i.checked_sub(j),
            ArithOp::Mul => i.checked_mul(j),
            ArithOp::Div if j == 0 => return Err("division by zero".into()),
            ArithOp::Div => i
                .checked_rem(j)
                .filter(|r| *r == 0)
                .and_then(|_| i.checked_div(j)),
        };
        if let Some(n) = exact {
            return Ok(Value::from(n));
        }
    }
    let (Some(f), Some(g)) = (x.as_f64(), y.as_f64()) else {
        return Err("not a finite number".into());
    };
    match op {
        ArithOp::Add => float(f + g),
        ArithOp::Sub => float(f - g),
        ArithOp::Mul => float(f * g),
        ArithOp::Div if g == 0.0 => Err("division by zero".into()),
        ArithOp::Div => float(f / g),
    }
}

/// Negates a number (`-x`).
pub(crate) fn negate(a: &Value) -> Result<Value, String> {
    match a {
        Value::Number(n) => match n.as_i64().and_then(i64::checked_neg) {
            Some(i) => Ok(Value::from(i)),
            None => float(-n.as_f64().unwrap_or(f64::NAN)),
        },
        other => Err(format!("cannot negate {}", describe(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_forms() {
        assert_eq!(to_text(&json!("a'b\"c")), "a'b\"c");
        assert_eq!(to_text(&json!(null)), "");
        assert_eq!(to_text(&json!(true)), "true");
        assert_eq!(to_text(&json!(2.5)), "2.5");
        assert_eq!(to_text(&json!({"k": [1, "x"]})), r#"{"k":[1,"x"]}"#);
    }

    #[test]
    fn equality_is_typed_but_numeric() {
        assert!(json_eq(&json!(7), &json!(7.0)));
        assert!(!json_eq(&json!("7"), &json!(7)));
        assert!(json_eq(&json!(null), &json!(null)));
        assert!(!json_eq(&json!(null), &json!(0)));
        assert!(!json_eq(&json!(null), &json!("")));
        assert!(json_eq(&json!([1, {"a": 2}]), &json!([1.0, {"a": 2.0}])));
        assert!(!json_eq(&json!({"a": 1}), &json!({"b": 1})));
    }

    #[test]
    fn ordering() {
        assert_eq!(order(&json!(2), &json!(2.5)), Ok(Ordering::Less));
        assert_eq!(order(&json!("7"), &json!(3)), Ok(Ordering::Greater));
        assert_eq!(order(&json!(3), &json!(" 7 ")), Ok(Ordering::Less));
        assert_eq!(order(&json!("b"), &json!("a")), Ok(Ordering::Greater));
        assert!(order(&json!("abc"), &json!(3)).is_err());
        assert!(order(&json!("inf"), &json!(3)).is_err());
        assert!(order(&json!(null), &json!(3)).is_err());
        assert!(order(&json!(true), &json!(false)).is_err());
    }

    #[test]
    fn arithmetic() {
        assert_eq!(arith(ArithOp::Mul, &json!(21), &json!(2)), Ok(json!(42)));
        assert_eq!(arith(ArithOp::Div, &json!(7), &json!(2)), Ok(json!(3.5)));
        assert_eq!(arith(ArithOp::Div, &json!(8), &json!(2)), Ok(json!(4)));
        assert_eq!(arith(ArithOp::Add, &json!(1.5), &json!(1)), Ok(json!(2.5)));
        assert_eq!(
            arith(ArithOp::Add, &json!("a"), &json!("b")),
            Ok(json!("ab"))
        );
        assert!(arith(ArithOp::Div, &json!(1), &json!(0)).is_err());
        assert!(arith(ArithOp::Sub, &json!("a"), &json!(1)).is_err());
        assert_eq!(
            arith(ArithOp::Add, &json!(i64::MAX), &json!(1)),
            Ok(json!(i64::MAX as f64 + 1.0))
        );
        assert_eq!(
            arith(ArithOp::Div, &json!(i64::MIN), &json!(-1)).map(|v| v.is_f64()),
            Ok(true)
        );
        assert_eq!(negate(&json!(3)), Ok(json!(-3)));
        assert!(negate(&json!("3")).is_err());
    }
}
