//! The wire error: `{error, type, code, op, request_id}` with the status of its code. A 5xx
//! body is generic; the real error goes to the log under the request id. The one 2xx in the
//! catalog, `202 confirmation.required`, has the same shape plus the action's fields
//! (`action_id`, `tier`, `reason`, `args`, `approve`, ...).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use corral_guard::Refusal;
use serde::Serialize;

/// The JSON body of every error.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ErrorBody {
    /// What is wrong and what to change.
    pub error: String,
    /// The code's family: `op`, `policy`, `auth`, `args`, `limit`, `files`, `net`, `server`...
    #[serde(rename = "type")]
    pub kind: String,
    /// The stable code.
    pub code: String,
    /// The op, when the error is about a call.
    pub op: Option<String>,
    /// The request id (also in the `x-request-id` header).
    pub request_id: String,
    /// More fields, for some codes (`confirmation.required`: the action, its canonical
    /// arguments, its tier and reason, and how to approve it).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Map<String, serde_json::Value>>,
}

/// An error answer.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The status: the catalog's for the body's code.
    status: u16,
    /// The body.
    pub body: ErrorBody,
    /// For 429s.
    pub retry_after_secs: Option<u64>,
    /// The stored refusal of an approved call that had run already (`X-Corral-Replayed`).
    replayed: bool,
}

/// The header marking an answer that is an approved call's stored outcome (it did not run
/// again).
pub const REPLAYED_HEADER: &str = "x-corral-replayed";

impl ApiError {
    /// From a gateway refusal.
    pub fn from_refusal(r: &Refusal, op: Option<&str>, request_id: &str) -> Self {
        let error = if r.status() >= 500 && r.code == corral_policy::codes::SERVER_INTERNAL {
            format!("internal error; see the server log for request {request_id}")
        } else {
            r.message.clone()
        };
        Self {
            status: r.status(),
            body: ErrorBody {
                error,
                kind: r.kind().to_owned(),
                code: r.code.to_owned(),
                op: op.map(str::to_owned),
                request_id: request_id.to_owned(),
                details: match &r.details {
                    Some(serde_json::Value::Object(m)) => Some(m.clone()),
                    _ => None,
                },
            },
            retry_after_secs: r
                .retry_after
                // An agent's CLI being installed: ask again after the install manager's pause.
                .or_else(|| {
                    (r.code == corral_policy::codes::AGENTS_INSTALLING)
                        .then_some(corral_agents::install::RETRY_AFTER)
                })
                .map(|d| d.as_secs_f64().ceil().max(1.0) as u64),
            replayed: false,
        }
    }

    /// An error with a code and message; its status is the code's in the catalog.
    pub fn new(
        code: &'static str,
        message: impl Into<String>,
        op: Option<&str>,
        request_id: &str,
    ) -> Self {
        let r = Refusal::new(code, message);
        Self::from_refusal(&r, op, request_id)
    }
}

impl ApiError {
    /// The same error marked as an approved call's stored outcome: `"replayed": true` in the
    /// body and `X-Corral-Replayed: true` (the call did not run again).
    #[must_use]
    pub fn replayed(mut self) -> Self {
        self.replayed = true;
        self.body
            .details
            .get_or_insert_with(serde_json::Map::new)
            .insert("replayed".to_owned(), serde_json::Value::Bool(true));
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The same error answered with another status (the LLM proxy keeps a provider's client
    /// error status on `llm.upstream`).
    #[must_use]
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }
}

impl ApiError {
    /// The same error for an MCP client, which reads only JSON-RPC: the same status and
    /// headers, and the body a JSON-RPC 2.0 error (`id: null`, code `-32001`, corral's message,
    /// corral's whole error body as `data`).
    pub fn into_jsonrpc_response(self) -> Response {
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32001, "message": self.body.error, "data": &self.body},
        });
        let mut resp = self.into_response();
        resp.headers_mut().remove(header::CONTENT_LENGTH);
        *resp.body_mut() = axum::body::Body::from(body.to_string());
        resp
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (status, axum::Json(&self.body)).into_response();
        if let Ok(v) = HeaderValue::from_str(&self.body.request_id) {
            resp.headers_mut().insert("x-request-id", v);
        }
        if let Some(s) = self.retry_after_secs
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        if self.replayed {
            resp.headers_mut()
                .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
        }
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}
