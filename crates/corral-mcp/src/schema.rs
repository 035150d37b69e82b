//! An op's parameters as a JSON schema: shared by the MCP tool list and the OpenAPI document.

use corral_policy::{OpSpec, ParamKind};
use serde_json::{Value, json};

/// One parameter's schema.
pub fn param_schema(kind: &ParamKind) -> Value {
    match kind {
        ParamKind::Argv => json!({"type": "array", "items": {"type": "string"}}),
        ParamKind::Int => json!({"type": "integer"}),
        ParamKind::Bool => json!({"type": "boolean"}),
        ParamKind::Json => json!({}),
        ParamKind::Enum(values) => json!({"type": "string", "enum": values}),
        ParamKind::Word => json!({"type": "string", "pattern": "^[A-Za-z0-9_][A-Za-z0-9_.-]*$"}),
        ParamKind::Url => json!({"type": "string", "format": "uri"}),
        ParamKind::Path { .. } | ParamKind::Cwd | ParamKind::CommandLine | ParamKind::String => {
            json!({"type": "string"})
        }
    }
}

/// The op's arguments object: `{type: object, properties, required, additionalProperties: false}`.
pub fn input_schema(op: &OpSpec) -> serde_json::Map<String, Value> {
    let props: serde_json::Map<String, Value> = op
        .params
        .iter()
        .map(|p| (p.name.clone(), param_schema(&p.kind)))
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
