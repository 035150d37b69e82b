//! Coding-agent CLIs hosted in corral's sandbox: the adapters (`codex`, `claude_code`: how a
//! turn is launched and how its JSONL output becomes session events), the install manager
//! (their npm packages, pinned, in corral's state directory) and sessions (one turn at a time
//! in the `linux` backend, the network only corral's LLM proxy, events streamed as they come).
//!
//! Nothing here decides who may run an agent: the ops (`agents.<a>.run`, ...) and their
//! `AgentScope` do, and hand this crate what the scope allows.

pub mod adapter;
pub mod codes;
pub mod events;
pub mod hold;
pub mod install;
pub mod select;
pub mod session;

use std::fmt;
use std::time::Duration;

pub use adapter::{Adapter, Launch, OutputParser, Permissions, TurnSpec};
pub use events::{ChangeKind, SessionEvent, Usage};
pub use install::{InstallMode, InstallStatus, Installed, Installer, PINS};
pub use select::{AdapterAsk, Mounted, Selected, environment_workdir, select};
pub use session::{
    APPLY_TIMEOUT, ConfirmWrites, HoldApplied, ProxyLinks, Session, SessionConfig, SessionLimits,
    TokenDigest, TurnReport,
};

/// A refusal or failure of this crate, with its stable code ([`codes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentError {
    /// The stable code.
    pub code: &'static str,
    /// What is wrong, where, and how to fix it.
    pub message: String,
    /// For `agents.installing`: when to ask again (HTTP `202` + `Retry-After`).
    pub retry_after: Option<Duration>,
}

impl AgentError {
    /// An error with `code` and `message`.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// `agents.installing` for `adapter`.
    pub fn installing(adapter: Adapter) -> Self {
        let after = install::RETRY_AFTER;
        Self {
            code: codes::AGENTS_INSTALLING,
            message: format!(
                "`{}` {} is being installed; retry after {} s",
                adapter.name(),
                install::pin(adapter).version,
                after.as_secs()
            ),
            retry_after: Some(after),
        }
    }
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: {}", self.code, self.message)
    }
}

impl std::error::Error for AgentError {}
