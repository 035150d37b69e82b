//! The client's error: a refusal the server answered ([`ClientError::Api`], mirroring the wire
//! error), or a failure to talk to it.

use std::time::Duration;

use serde::Deserialize;

/// The JSON body of every corral error: `{error, type, code, op, request_id}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WireError {
    /// What is wrong and what to change.
    pub error: String,
    /// The code's family (`op`, `policy`, `auth`, `args`, `limit`, ...).
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The stable code, e.g. `policy.path_denied` (listed in `docs/errors.md`).
    pub code: String,
    /// The op, when the error is about a call.
    #[serde(default)]
    pub op: Option<String>,
    /// The request id, to find the call in the audit log.
    #[serde(default)]
    pub request_id: Option<String>,
    /// The code's further fields (`confirmation.required`: `action_id`, `approve`, `deny`,
    /// `args`, `tier`, `reason`, `expires_at_ms`, ...).
    #[serde(flatten)]
    pub details: serde_json::Map<String, serde_json::Value>,
}

/// Why a client call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a corral error.
    #[error("{message} [{code}, HTTP {status}]")]
    Api {
        /// The HTTP status (401, 403, 404, 429, ...).
        status: u16,
        /// The stable code, e.g. `auth.missing`, `policy.path_outside_scope`, `op.not_enabled`.
        code: String,
        /// The server's message: what is wrong and what to change.
        message: String,
        /// The request id, when the server sent one.
        request_id: Option<String>,
        /// For 429 and 503: when to try again (`Retry-After`).
        retry_after: Option<Duration>,
        /// The code's further fields (`confirmation.required`: `action_id`, `approve`, ...);
        /// empty for most codes.
        details: serde_json::Map<String, serde_json::Value>,
    },
    /// The server could not be reached, or the connection failed mid-answer.
    #[error("cannot reach the server: {message}")]
    Transport {
        /// What went wrong, with its causes.
        message: String,
    },
    /// The server answered something that is not corral's protocol (e.g. a proxy's error page).
    #[error("unexpected answer{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Protocol {
        /// The HTTP status, if a response arrived.
        status: Option<u16>,
        /// What was wrong with it.
        message: String,
    },
    /// The base URL is unusable.
    #[error("invalid server URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// Why it is refused.
        reason: String,
    },
    /// The token cannot be sent.
    #[error("invalid token: {reason}")]
    InvalidToken {
        /// Why.
        reason: String,
    },
}

impl ClientError {
    /// The stable code of an API error.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The code's family (`type` on the wire: `op`, `policy`, `auth`, `args`, `limit`, ...).
    pub fn kind(&self) -> Option<&str> {
        self.code().map(|c| c.split('.').next().unwrap_or(c))
    }

    /// The HTTP status, when a response arrived.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            ClientError::Protocol { status, .. } => *status,
            _ => None,
        }
    }

    /// Whether the server refused the call (as opposed to not being reachable or not speaking
    /// corral's protocol).
    pub fn is_api(&self) -> bool {
        matches!(self, ClientError::Api { .. })
    }
}
