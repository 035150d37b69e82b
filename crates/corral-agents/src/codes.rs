//! The stable codes of this crate's refusals. They belong in `corral_policy::codes` (the
//! catalog that docs/errors.md is generated from); until the lead moves them there they live
//! here, with the same spelling.

/// An install of the adapter's CLI is running (mode `lazy` started it): retry after the time
/// the error gives.
pub const AGENTS_INSTALLING: &str = "agents.installing";
/// The adapter's CLI is not installed and the install mode may not fetch it (`build`:
/// `corral agents prepare` installs it ahead; `offline`: nothing is downloaded).
pub const AGENTS_NOT_INSTALLED: &str = "agents.not_installed";
/// The install mode is `off`: agents of this deployment never run.
pub const AGENTS_INSTALL_OFF: &str = "agents.install_off";
/// `npm install` of the adapter's CLI failed (its message quotes the end of npm's output).
pub const AGENTS_INSTALL_FAILED: &str = "agents.install_failed";
/// The session already has a turn running: one turn at a time per session.
pub const AGENTS_TURN_BUSY: &str = "agents.turn_busy";
/// The session used all its turns (`max_turns` of its scope).
pub const AGENTS_MAX_TURNS: &str = "agents.max_turns";
/// The agent's CLI could not be run in the sandbox (the isolation backend refused or failed).
pub const AGENTS_SANDBOX: &str = "agents.sandbox";
/// The session's request is malformed (an empty prompt, a prompt over its size limit, a
/// relative workdir).
pub const AGENTS_INVALID: &str = "agents.invalid";
/// Events about what the agent's output did wrong (a line over its limit, bytes that are not
/// UTF-8, JSON of no known shape, too many events): reported in the stream, never fatal to
/// the host.
pub const AGENTS_OUTPUT: &str = "agents.output";
/// The turn ended badly: the CLI exited non-zero, was killed by a signal or by a limit.
pub const AGENTS_TURN_FAILED: &str = "agents.turn_failed";
/// The turn was killed at its time limit.
pub const AGENTS_TIMEOUT: &str = "agents.timeout";

/// An error the agent itself reported (codex's `error` items, claude's failed results), in an
/// `error` event.
pub const AGENTS_AGENT_ERROR: &str = "agents.agent_error";

/// Every code of this crate, for the catalog.
pub const ALL: &[&str] = &[
    AGENTS_INSTALLING,
    AGENTS_NOT_INSTALLED,
    AGENTS_INSTALL_OFF,
    AGENTS_INSTALL_FAILED,
    AGENTS_TURN_BUSY,
    AGENTS_MAX_TURNS,
    AGENTS_SANDBOX,
    AGENTS_INVALID,
    AGENTS_OUTPUT,
    AGENTS_TURN_FAILED,
    AGENTS_TIMEOUT,
    AGENTS_AGENT_ERROR,
];
