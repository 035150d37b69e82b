//! Turns a JSON argument object into typed `Args` by the op's parameter kinds, and hashes it
//! for the audit log.

use corral_policy::{ArgValue, Args, OpSpec, ParamKind, codes};
use sha2::{Digest, Sha256};

/// An argument object that does not fit the op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgsRejection {
    /// `args.malformed`, `args.invalid`, `args.unknown` or `args.missing`.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
}

/// Converts JSON arguments to `Args`, then checks them against the op's params.
pub fn parse_args(spec: &OpSpec, json: &serde_json::Value) -> Result<Args, ArgsRejection> {
    let obj = match json {
        serde_json::Value::Object(m) => m,
        other => {
            let what = match other {
                serde_json::Value::Null => "`null` (or the body is empty)",
                serde_json::Value::Array(_) => "an array",
                _ => "a single value",
            };
            return Err(ArgsRejection {
                code: codes::ARGS_MALFORMED,
                message: format!(
                    "the arguments are {what}, not a JSON object of them; send `{{}}` for none"
                ),
            });
        }
    };
    let mut args = Args::new();
    for (name, v) in obj {
        if let Some(n) = crate::canonical::inexact_integer(v) {
            return Err(ArgsRejection {
                code: codes::ARGS_INVALID,
                message: format!(
                    "argument `{name}` holds the integer {n}, beyond 2^53, where JSON numbers stop being exact (it would share its canonical form, and so a confirmation or a mock, with other integers); pass it as a string"
                ),
            });
        }
        let kind = spec
            .params
            .iter()
            .find(|p| &p.name == name)
            .map(|p| &p.kind);
        let Some(kind) = kind else {
            return Err(ArgsRejection {
                code: codes::ARGS_UNKNOWN,
                message: format!(
                    "op `{}` has no parameter `{name}`; its parameters are: {}",
                    spec.id,
                    spec.params
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        };
        let bad = |expected: &str| ArgsRejection {
            code: codes::ARGS_INVALID,
            message: format!("argument `{name}` of `{}` must be {expected}", spec.id),
        };
        let value = match (kind, v) {
            (ParamKind::Argv, serde_json::Value::Array(items)) => ArgValue::List(
                items
                    .iter()
                    .map(|i| i.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| bad("a list of strings"))?,
            ),
            (ParamKind::Argv, _) => return Err(bad("a list of strings")),
            (ParamKind::Int, serde_json::Value::Number(n)) => {
                ArgValue::Int(integer_of(n).ok_or_else(|| bad("an integer"))?)
            }
            (ParamKind::Int, _) => return Err(bad("an integer")),
            (ParamKind::Bool, serde_json::Value::Bool(b)) => ArgValue::Bool(*b),
            (ParamKind::Bool, _) => return Err(bad("`true` or `false`")),
            (ParamKind::Json, v) => ArgValue::Json(v.to_string()),
            (
                ParamKind::Path { .. }
                | ParamKind::Cwd
                | ParamKind::CommandLine
                | ParamKind::Url
                | ParamKind::Word
                | ParamKind::String
                | ParamKind::Enum(_),
                serde_json::Value::String(s),
            ) => ArgValue::Str(s.clone()),
            (_, _) => return Err(bad("a string")),
        };
        args = args.with(name, value);
    }
    corral_policy::validate_args(spec, &args).map_err(|e| ArgsRejection {
        code: e.code,
        message: e.message,
    })?;
    Ok(args)
}

/// A JSON number as an integer: `75` or `75.0` (JSON Schema's `integer` admits both), never
/// `75.5` nor a fraction-less double beyond 2^53 in magnitude (no longer the integer written).
pub fn integer_of(n: &serde_json::Number) -> Option<i64> {
    n.as_i64().or_else(|| {
        let f = n.as_f64()?;
        (f.fract() == 0.0 && f.abs() <= crate::canonical::EXACT as f64).then_some(f as i64)
    })
}

/// SHA-256 of the canonical (key-sorted) JSON of the arguments, hex.
pub fn args_hash(json: &serde_json::Value) -> String {
    let canonical = serde_json::to_vec(json).unwrap_or_default();
    crate::canonical::hex(&Sha256::digest(&canonical))
}
