//! Audit events: one append-only record per decided call, and the port that stores them.
//!
//! An event holds the argument *shape* (keys and types) and a hash of the arguments, never their
//! values: no secret, path or learning-mode answer reaches the audit log.

use std::io::Write as _;

use crate::attestation::Attestation;
use crate::runs::RunPurpose;
use futures_core::future::BoxFuture;
use serde::{Deserialize, Serialize};

/// What happened to the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Allowed and run; the op succeeded.
    Ok,
    /// Allowed and run; the op failed.
    OpError,
    /// Refused by the policy (denied or not permitted).
    Denied,
    /// The op does not exist or is not enabled for the caller.
    NotEnabled,
    /// The arguments did not fit the op.
    InvalidArgs,
    /// A rate, concurrency or size limit refused it.
    Limited,
    /// The caller could not be authenticated.
    Unauthenticated,
    /// The autonomy level in force does not let the op run (neutral).
    AutonomyBlocked,
    /// The caller's role is below the one the op's tier needs.
    RbacDenied,
    /// The call raised (or met) a pending action: it waits for a human.
    ConfirmationRaised,
    /// A human approved or denied a pending action (`detail` says which).
    ConfirmationDecided,
    /// A retry consumed an approval (written before the op runs; the call's own event follows).
    ConfirmationConsumed,
    /// A run budget refused the call (neutral: not a failure, and nothing ran).
    BudgetRefused,
    /// Dry-run: the guarded call was described, not run.
    DryRun,
    /// A retry of an approved call that already ran: the stored outcome was returned, the op did
    /// not run again.
    Replayed,
}

impl Outcome {
    /// The snake_case name (as stored and as the `outcome` metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::OpError => "op_error",
            Outcome::Denied => "denied",
            Outcome::NotEnabled => "not_enabled",
            Outcome::InvalidArgs => "invalid_args",
            Outcome::Limited => "limited",
            Outcome::Unauthenticated => "unauthenticated",
            Outcome::AutonomyBlocked => "autonomy_blocked",
            Outcome::RbacDenied => "rbac_denied",
            Outcome::ConfirmationRaised => "confirmation_raised",
            Outcome::ConfirmationDecided => "confirmation_decided",
            Outcome::ConfirmationConsumed => "confirmation_consumed",
            Outcome::BudgetRefused => "budget_refused",
            Outcome::DryRun => "dry_run",
            Outcome::Replayed => "replayed",
        }
    }
}

/// What a backend applied to the run, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttestationRecord {
    /// Backend name.
    pub backend: String,
    /// Whether the run was isolated.
    pub isolated: bool,
    /// Whether ephemeral state was removed and checked.
    pub destroyed: bool,
    /// Primitives applied.
    pub primitives: Vec<String>,
}

impl From<&Attestation> for AttestationRecord {
    fn from(a: &Attestation) -> Self {
        Self {
            backend: a.backend.to_owned(),
            isolated: a.isolated,
            destroyed: a.destroyed,
            primitives: a.primitives.clone(),
        }
    }
}

/// One audit event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// The request id (unique).
    pub request_id: String,
    /// The tenant the caller belongs to (`default` without tenancy).
    pub tenant: String,
    /// Milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// The caller's id (`anonymous` in open mode, empty when unauthenticated).
    pub principal_id: String,
    /// `human`, `delegated` or `service`.
    pub principal_kind: String,
    /// For delegated callers: the chain of actors (RFC 8693 `act`), outermost first.
    pub act_chain: Vec<String>,
    /// The op id as called.
    pub op: String,
    /// What happened.
    pub outcome: Outcome,
    /// The stable code of a refusal or error.
    pub code: Option<String>,
    /// The rule that decided, if one did.
    pub rule: Option<String>,
    /// SHA-256 of the canonical JSON of the arguments, hex.
    pub args_hash: String,
    /// The arguments' keys and JSON types, e.g. `{"path":"string"}`.
    pub args_shape: serde_json::Value,
    /// The HTTP status answered.
    pub status: u16,
    /// Time from receipt to decision (and execution), in microseconds.
    pub duration_us: i64,
    /// For exec ops: what the backend applied.
    pub attestation: Option<AttestationRecord>,
    /// The confirmation action the event is about, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_id: Option<String>,
    /// The run (`X-Corral-Run`) the call belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// What a guard step decided, in a word or two: `approve`/`deny` for a decision, the budget
    /// for a budget refusal, the level for an autonomy refusal, the role for an RBAC refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Whether the call acted on the world (`live`) or ran against a lab's mocks (`simulation`):
    /// the purpose of the gateway that decided it. An event stored before events carried a
    /// purpose reads back as `live`.
    #[serde(default)]
    pub purpose: RunPurpose,
    /// The OpenTelemetry trace the call's spans belong to (32 hex digits), when `telemetry:`
    /// exported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// An audit event that could not be stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("audit event not stored: {0}")]
pub struct AuditError(pub String);

/// Where audit events go. `append` returns once the event is durably committed.
pub trait AuditSink: Send + Sync + std::fmt::Debug {
    /// Appends one event.
    fn append<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>>;
}

/// The JSON type name of a value, for the argument shape.
pub fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// The shape of a JSON argument object: each key with its JSON type, never the value.
pub fn args_shape(args: &serde_json::Value) -> serde_json::Value {
    match args {
        serde_json::Value::Object(m) => serde_json::Value::Object(
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        serde_json::Value::String(json_type(v).to_owned()),
                    )
                })
                .collect(),
        ),
        other => serde_json::Value::String(json_type(other).to_owned()),
    }
}

/// An extra audit sink: one JSON object per line, to stderr or appended to a file.
pub struct JsonLines {
    out: std::sync::Mutex<Box<dyn std::io::Write + Send>>,
}

impl std::fmt::Debug for JsonLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonLines")
    }
}

impl JsonLines {
    /// JSON lines on stderr.
    pub fn stderr() -> Self {
        Self {
            out: std::sync::Mutex::new(Box::new(std::io::stderr())),
        }
    }

    /// JSON lines appended to a file (created if missing, mode 0600).
    pub fn file(path: &std::path::Path) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        Ok(Self {
            out: std::sync::Mutex::new(Box::new(f)),
        })
    }
}

impl AuditSink for JsonLines {
    fn append<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async move {
            let mut line = serde_json::to_string(event).map_err(|e| AuditError(e.to_string()))?;
            line.push('\n');
            let mut out = self
                .out
                .lock()
                .map_err(|_| AuditError("audit sink lock poisoned".to_owned()))?;
            out.write_all(line.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| AuditError(e.to_string()))
        })
    }
}
