//! Canonical JSON (RFC 8785, the JSON Canonicalization Scheme) for `serde_json::Value`, and the
//! SHA-256 digests built on it (a confirmation's key, an op's version).
//!
//! Why our own: the scheme is small for the values corral hashes (argument objects parsed by
//! serde_json, so no duplicate keys and no NaN or infinities), and the crates that implement it
//! are either unmaintained or pull in a float-printing dependency. What the RFC asks, and how:
//! - object members sorted by their names' UTF-16 code units (not bytes, not chars);
//! - strings escaped as ECMAScript's `JSON.stringify` does: `\"`, `\\`, `\b \f \n \r \t`, other
//!   controls as `\u00xx` (lowercase hex), everything else (non-ASCII included) as is;
//! - numbers as ECMAScript's `Number.prototype.toString` prints the IEEE-754 double: the
//!   shortest digits that round-trip (Rust's `{:e}` gives exactly those), placed by the ES rules
//!   (`1e+21`, `1e-7`, `0.000001`, `100`), `-0` as `0`; integers beyond 2^53 go through the
//!   double like any I-JSON number (so two of them can share a form: the guard refuses such
//!   arguments, [`inexact_integer`]);
//! - no whitespace.

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The canonical form of a JSON value.
pub fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write_value(v, &mut out);
    out
}

/// SHA-256 of the canonical form, lowercase hex.
pub fn digest(v: &Value) -> String {
    hex(&Sha256::digest(canonical(v).as_bytes()))
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

fn write_value(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write_value(v, out);
            }
            out.push('}');
        }
    }
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// 2^53: integers up to this magnitude are exact doubles, printed as integers.
pub(crate) const EXACT: u64 = 1 << 53;

/// The first integer in `v` beyond 2^53 in magnitude, as written: its canonical form is a
/// rounded double, which it shares with other integers. The guard refuses such arguments
/// (I-JSON, RFC 7493 2.2), so one canonical form (a confirmation's key, the arguments a person
/// approved, a mock's key, an audited hash) always means one value.
pub fn inexact_integer(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => {
            let beyond = match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => i.unsigned_abs() > EXACT,
                (None, Some(u)) => u > EXACT,
                (None, None) => false,
            };
            beyond.then(|| n.to_string())
        }
        Value::Array(items) => items.iter().find_map(inexact_integer),
        Value::Object(m) => m.values().find_map(inexact_integer),
        Value::Null | Value::Bool(_) | Value::String(_) => None,
    }
}

fn write_number(n: &serde_json::Number, out: &mut String) {
    if let Some(i) = n.as_i64()
        && i.unsigned_abs() <= EXACT
    {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64()
        && u <= EXACT
    {
        let _ = write!(out, "{u}");
    } else {
        // A float, or an integer beyond 2^53 (which an ES double rounds).
        write_double(n.as_f64().unwrap_or(0.0), out);
    }
}

/// ECMAScript's `Number::toString(x)` for a finite double.
fn write_double(x: f64, out: &mut String) {
    if x == 0.0 || !x.is_finite() {
        // -0 prints as 0; serde_json never holds NaN or infinities.
        out.push('0');
        return;
    }
    if x < 0.0 {
        out.push('-');
    }
    // `{:e}` prints the shortest round-tripping digits: `d[.ddd]e<exp>`.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exp: i64 = exp.parse().unwrap_or(0);
    // The value is 0.DIGITS x 10^n, with k digits.
    let k = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    let n = exp + 1;
    let zeros = |count: i64, out: &mut String| {
        for _ in 0..count {
            out.push('0');
        }
    };
    if k <= n && n <= 21 {
        out.push_str(&digits);
        zeros(n - k, out);
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(usize::try_from(n).unwrap_or(0));
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        zeros(-n, out);
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let e = n - 1;
        let _ = write!(out, "e{}{e}", if e >= 0 { "+" } else { "" });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn num(x: f64) -> String {
        let mut s = String::new();
        write_double(x, &mut s);
        s
    }

    #[test]
    fn the_rfc_8785_sample_canonicalizes_as_the_rfc_says() {
        let input: Value = serde_json::from_str(
            r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
                "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
                "literals": [null, true, false]}"#,
        )
        .unwrap_or_default();
        assert_eq!(
            canonical(&input),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    #[test]
    fn members_sort_by_utf16_code_units() {
        let input: Value = serde_json::from_str(
            r#"{"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\ud83d\ude00": 5, "\u0080": 6, "\u00f6": 7}"#,
        )
        .unwrap_or_default();
        let order: Vec<u64> = canonical(&input)
            .split(',')
            .filter_map(|m| m.trim_end_matches('}').rsplit(':').next()?.parse().ok())
            .collect();
        // \r, 1, \u0080, \u00f6, \u20ac, the emoji (a surrogate pair, 0xd83d), \ufb33.
        assert_eq!(order, vec![2, 4, 6, 7, 1, 5, 3]);
    }

    #[test]
    fn numbers_print_as_ecmascript_prints_them() {
        for (x, s) in [
            (1.0, "1"),
            (-1.5, "-1.5"),
            (100.0, "100"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (0.000001, "0.000001"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (0.1, "0.1"),
            (1.0 / 3.0, "0.3333333333333333"),
            (-0.0, "0"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (9007199254740993.0, "9007199254740992"),
        ] {
            assert_eq!(num(x), s, "{x:e}");
        }
        assert_eq!(canonical(&json!(9007199254740992_i64)), "9007199254740992");
        assert_eq!(canonical(&json!(-42)), "-42");
        // Beyond 2^53 an integer is a double, as in every ES implementation.
        assert_eq!(canonical(&json!(u64::MAX)), "18446744073709552000");
        assert_eq!(canonical(&json!(i64::MIN)), "-9223372036854776000");
    }

    #[test]
    fn controls_are_escaped_and_everything_else_is_kept() {
        let v = json!("a\u{1}\u{1f}\u{7f}é\u{2028}\t");
        assert_eq!(canonical(&v), "\"a\\u0001\\u001f\u{7f}é\u{2028}\\t\"");
    }

    #[test]
    fn the_digest_ignores_member_order_and_whitespace() {
        let a: Value =
            serde_json::from_str(r#"{"b": [1, 2], "a": {"y": 1, "x": "z"}}"#).unwrap_or_default();
        let b: Value =
            serde_json::from_str(r#"{"a":{"x":"z","y":1},"b":[1,2]}"#).unwrap_or_default();
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(
            digest(&a),
            digest(&json!({"a": {"x": "z", "y": 1}, "b": [2, 1]}))
        );
        assert_eq!(digest(&a).len(), 64);
    }
}
