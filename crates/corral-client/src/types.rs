//! The typed answers of the listing routes (`/ops`, `/capabilities`, `/me`, `/healthz`) and the
//! call envelope. Unknown fields are ignored and missing optional ones default, so a newer
//! server stays readable.

use serde::{Deserialize, Serialize};

/// `{"ok": true, "op", "request_id", "result"}`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Envelope {
    #[serde(default)]
    pub op: String,
    #[serde(default)]
    pub request_id: String,
    #[serde(default)]
    pub result: serde_json::Value,
    #[serde(default)]
    pub replayed: bool,
}

/// `GET /ops`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct OpList {
    pub ops: Vec<OpInfo>,
}

/// One parameter of an op.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamInfo {
    /// The name.
    pub name: String,
    /// The kind (`path`, `argv`, `int`, `bool`, `string`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    /// Whether the call must give it.
    #[serde(default)]
    pub required: bool,
}

/// An op the caller may call, as `GET /ops` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpInfo {
    /// The id, e.g. `files.read`.
    pub id: String,
    /// Its effects (`read`, `write`, `exec`, `network`, ...).
    #[serde(default)]
    pub effects: Vec<String>,
    /// Its tier.
    #[serde(default)]
    pub tier: String,
    /// Its safety.
    #[serde(default)]
    pub safety: String,
    /// One line on what it does.
    #[serde(default)]
    pub summary: String,
    /// Its parameters.
    #[serde(default)]
    pub params: Vec<ParamInfo>,
}

/// The limits that apply to a caller's calls of one op (`null`: none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OpLimits {
    /// Largest file read or written, bytes.
    pub max_bytes: Option<u64>,
    /// Most directory entries listed.
    pub max_entries: Option<u64>,
    /// Wall-clock timeout, milliseconds.
    pub timeout_ms: Option<u64>,
    /// Largest captured output, bytes.
    pub max_output_bytes: Option<u64>,
    /// Rate limit, e.g. `10/s`.
    pub rate: Option<String>,
    /// Calls in flight at once.
    pub concurrency: Option<u64>,
    /// CPU seconds per command.
    pub cpu_seconds: Option<u64>,
    /// Memory per command, bytes.
    pub memory: Option<u64>,
    /// Processes per command.
    pub processes: Option<u64>,
}

/// An op with its limits, as `GET /capabilities` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityOp {
    /// The op.
    #[serde(flatten)]
    pub op: OpInfo,
    /// Its limits for this caller.
    #[serde(default)]
    pub limits: OpLimits,
}

/// `GET /capabilities`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// The caller's principal id.
    pub principal: String,
    /// What the caller may call.
    pub ops: Vec<CapabilityOp>,
}

/// `GET /me`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Me {
    /// The principal id (`anonymous` in open mode).
    pub id: String,
    /// Its roles.
    #[serde(default)]
    pub roles: Vec<String>,
    /// `human`, `service`, `delegated`, ...
    #[serde(default)]
    pub kind: String,
    /// The tenant, for multi-tenant JWTs.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Whether a credential authenticated the caller.
    #[serde(default)]
    pub authenticated: bool,
    /// For delegated callers, the actors behind the call (outermost first).
    #[serde(default)]
    pub act_chain: Vec<String>,
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok` when the server is up.
    pub status: String,
    /// The server's version.
    #[serde(default)]
    pub version: String,
    /// `open` or `auth`.
    #[serde(default)]
    pub mode: String,
    /// The isolation backend.
    #[serde(default)]
    pub backend: String,
    /// The storage backend.
    #[serde(default)]
    pub storage: String,
}
