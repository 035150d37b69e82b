//! The OpenAPI 3.1 document, generated from the ops a caller may call: one `POST /ops/{id}`
//! path per op, its parameters as a JSON schema, and the shared error schema.

use corral_policy::{OpSpec, ParamKind};
use serde_json::{Value, json};

fn param_schema(kind: &ParamKind) -> Value {
    match kind {
        ParamKind::Argv => json!({"type": "array", "items": {"type": "string"}}),
        ParamKind::Int => json!({"type": "integer"}),
        ParamKind::Bool => json!({"type": "boolean"}),
        ParamKind::Enum(values) => json!({"type": "string", "enum": values}),
        ParamKind::Word => json!({"type": "string", "pattern": "^[A-Za-z0-9_][A-Za-z0-9_.-]*$"}),
        ParamKind::Url => json!({"type": "string", "format": "uri"}),
        ParamKind::Path { .. } | ParamKind::Cwd | ParamKind::CommandLine | ParamKind::String => {
            json!({"type": "string"})
        }
    }
}

/// The document.
pub fn document(ops: &[&OpSpec]) -> Value {
    let mut paths = serde_json::Map::new();
    for op in ops {
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
        let err = json!({"$ref": "#/components/schemas/Error"});
        paths.insert(
            format!("/ops/{}", op.id),
            json!({"post": {
                "operationId": op.id.as_str(),
                "summary": op.summary,
                "x-corral-effects": op.effective_effects().iter().map(|e| e.as_str()).collect::<Vec<_>>(),
                "x-corral-tier": op.tier().as_str(),
                "requestBody": {"content": {"application/json": {"schema": {
                    "type": "object", "properties": props, "required": required, "additionalProperties": false
                }}}},
                "responses": {
                    "200": {"description": "the op's result", "content": {"application/json": {"schema": {"type": "object"}}}},
                    "400": {"description": "args.*", "content": {"application/json": {"schema": err}}},
                    "401": {"description": "auth.*", "content": {"application/json": {"schema": err}}},
                    "403": {"description": "policy.*", "content": {"application/json": {"schema": err}}},
                    "404": {"description": "op.not_enabled", "content": {"application/json": {"schema": err}}},
                    "413": {"description": "limit.*", "content": {"application/json": {"schema": err}}},
                    "429": {"description": "limit.*", "content": {"application/json": {"schema": err}}}
                },
                "security": [{"bearer": []}]
            }}),
        );
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "corral", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": {"type": "object", "required": ["error", "type", "code", "request_id"], "properties": {
                "error": {"type": "string"}, "type": {"type": "string"}, "code": {"type": "string"},
                "op": {"type": ["string", "null"]}, "request_id": {"type": "string"}
            }}}
        }
    })
}
