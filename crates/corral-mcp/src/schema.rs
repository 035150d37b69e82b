//! An op's parameters as a JSON schema: shared by the MCP tool list and the OpenAPI document.

use corral_policy::{OpSpec, ParamKind};
use serde_json::{Value, json};

/// A text parameter holds no NUL character (no path, command or URL can).
const NO_NUL: &str = "^[^\\u0000]*$";

/// 2^53, the largest integer magnitude a JSON number holds exactly.
const EXACT_INTEGER: i64 = 1 << 53;

/// One parameter's schema.
pub fn param_schema(kind: &ParamKind) -> Value {
    match kind {
        ParamKind::Argv => {
            json!({"type": "array", "minItems": 1, "items": {"type": "string", "pattern": NO_NUL}})
        }
        // Within 2^53: beyond it JSON numbers stop being exact, and the guard refuses them.
        ParamKind::Int => {
            json!({"type": "integer", "minimum": -EXACT_INTEGER, "maximum": EXACT_INTEGER})
        }
        ParamKind::Bool => json!({"type": "boolean"}),
        ParamKind::Json => json!({}),
        ParamKind::Enum(values) => json!({"type": "string", "enum": values}),
        ParamKind::Word => json!({"type": "string", "pattern": "^[A-Za-z0-9_][A-Za-z0-9_.-]*$"}),
        ParamKind::Url => json!({"type": "string", "format": "uri", "pattern": NO_NUL}),
        ParamKind::Path { .. } | ParamKind::Cwd | ParamKind::CommandLine | ParamKind::String => {
            json!({"type": "string", "pattern": NO_NUL})
        }
    }
}

/// What a parameter of this kind takes, for the clients that show it (MCP hosts, OpenAPI).
pub fn param_description(kind: &ParamKind) -> String {
    match kind {
        ParamKind::Argv => {
            "the program and its arguments, one string each; run with no shell, and only as the rule's command patterns allow".to_owned()
        }
        ParamKind::CommandLine => {
            "a command line, split like a shell would (no shell runs it), checked against the rule's command patterns".to_owned()
        }
        ParamKind::Cwd => "the working directory: beneath the rule's command `cwd`".to_owned(),
        ParamKind::Path { .. } => {
            "a path beneath the rule's roots (a relative one is anchored at the first root); deny patterns hold for where a symlink really leads".to_owned()
        }
        ParamKind::Url => {
            "an http(s) URL the rule's url scope admits (internal addresses are refused)".to_owned()
        }
        ParamKind::Int => "an integer".to_owned(),
        ParamKind::Bool => "true or false".to_owned(),
        ParamKind::Json => "any JSON value".to_owned(),
        ParamKind::Enum(values) => format!("one of: {}", values.join(", ")),
        ParamKind::Word => {
            "one word: letters, digits, `_`, `.` and `-`, not starting with `.` or `-`".to_owned()
        }
        ParamKind::String => "text".to_owned(),
    }
}

/// The op's arguments object: `{type: object, properties, required, additionalProperties: false}`,
/// each property with its description.
pub fn input_schema(op: &OpSpec) -> serde_json::Map<String, Value> {
    let props: serde_json::Map<String, Value> = op
        .params
        .iter()
        .map(|p| {
            let mut schema = param_schema(&p.kind);
            if let Some(m) = schema.as_object_mut() {
                m.insert(
                    "description".to_owned(),
                    Value::String(param_description(&p.kind)),
                );
            }
            (p.name.clone(), schema)
        })
        .collect();
    let required: Vec<&str> = op
        .params
        .iter()
        .filter(|p| p.required)
        .map(|p| p.name.as_str())
        .collect();
    let mut m = serde_json::Map::new();
    m.insert("type".to_owned(), json!("object"));
    m.insert("properties".to_owned(), Value::Object(props));
    m.insert("required".to_owned(), json!(required));
    m.insert("additionalProperties".to_owned(), json!(false));
    m
}
