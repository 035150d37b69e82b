//! The stable codes of this crate's refusals: names for entries of corral's one catalog
//! (`corral_policy::codes`, which docs/errors.md is generated from).

pub use corral_policy::codes::{
    AGENTS_ADAPTER_REQUIRED, AGENTS_AGENT_ERROR, AGENTS_ENVIRONMENT_UNSUPPORTED,
    AGENTS_HOLD_APPLYING, AGENTS_HOLD_INVALID, AGENTS_HOLD_NOT_FOUND, AGENTS_HOLD_TOO_LARGE,
    AGENTS_INSTALL_FAILED, AGENTS_INSTALL_OFF, AGENTS_INSTALLING, AGENTS_INVALID, AGENTS_MAX_TURNS,
    AGENTS_NOT_INSTALLED, AGENTS_OUTPUT, AGENTS_SANDBOX, AGENTS_SESSION_BUSY, AGENTS_TIMEOUT,
    AGENTS_TURN_FAILED,
};

/// A turn was asked for while another runs: the store's `agents.session_busy` (one code for
/// one meaning, whichever layer finds it).
pub const AGENTS_TURN_BUSY: &str = AGENTS_SESSION_BUSY;

/// Every code of this crate (each one in the catalog).
pub const ALL: &[&str] = &[
    AGENTS_INSTALLING,
    AGENTS_NOT_INSTALLED,
    AGENTS_INSTALL_OFF,
    AGENTS_INSTALL_FAILED,
    AGENTS_SESSION_BUSY,
    AGENTS_MAX_TURNS,
    AGENTS_SANDBOX,
    AGENTS_INVALID,
    AGENTS_OUTPUT,
    AGENTS_TURN_FAILED,
    AGENTS_TIMEOUT,
    AGENTS_AGENT_ERROR,
    AGENTS_ADAPTER_REQUIRED,
    AGENTS_ENVIRONMENT_UNSUPPORTED,
    AGENTS_HOLD_NOT_FOUND,
    AGENTS_HOLD_APPLYING,
    AGENTS_HOLD_TOO_LARGE,
    AGENTS_HOLD_INVALID,
];
