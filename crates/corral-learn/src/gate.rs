//! Activation: the strict `CORRAL_LEARNING_MODE` flag, the refusal of every entry point but
//! `corral serve`, and the preconditions `serve` checks, as pure functions.
//!
//! The flag is `true`, `false` or unset (= false); anything else (`1`, `TRUE`, `yes`, an empty
//! or non-UTF-8 value) is an error, so a typo never silently turns the guard off or on.
//! [`missing`] returns every precondition that does not hold, each with its code, so `serve`
//! names them all at once.

use std::fmt;
use std::time::Duration;

use corral_policy::AutonomyLevel;
use corral_policy::codes;

use crate::watch::DEFAULT_GRACE;

/// The flag's environment variable.
pub const FLAG_ENV: &str = "CORRAL_LEARNING_MODE";
/// The grace period's environment variable (seconds).
pub const GRACE_ENV: &str = "CORRAL_LEARNING_GRACE_SECONDS";
/// The highest autonomy level learning mode runs at.
pub const MAX_AUTONOMY: AutonomyLevel = AutonomyLevel::L2;

/// An environment variable of learning mode that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError {
    /// The catalog code.
    pub code: &'static str,
    /// The variable.
    pub var: &'static str,
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let info = codes::lookup(self.code);
        write!(
            f,
            "error[{}]: `{}` {}; {}; see: {}",
            self.code,
            self.var,
            match self.code {
                codes::LEARNING_FLAG_INVALID => "is neither `true` nor `false`",
                codes::LEARNING_GRACE_INVALID => "is not a whole number of seconds",
                _ => info.map(|c| c.title).unwrap_or("is invalid"),
            },
            info.map(|c| c.fix).unwrap_or(""),
            codes::doc_id(self.code)
        )
    }
}

impl std::error::Error for EnvError {}

/// Reads the flag's value (`None`: unset). Strict: only `true` and `false`.
pub fn flag(value: Option<&std::ffi::OsStr>) -> Result<bool, EnvError> {
    let invalid = EnvError {
        code: codes::LEARNING_FLAG_INVALID,
        var: FLAG_ENV,
    };
    match value {
        None => Ok(false),
        Some(v) => match v.to_str() {
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(_) | None => Err(invalid),
        },
    }
}

/// Reads `CORRAL_LEARNING_MODE` from the process environment.
pub fn flag_from_env() -> Result<bool, EnvError> {
    flag(std::env::var_os(FLAG_ENV).as_deref())
}

/// Reads the grace period's value (`None`: unset, [`DEFAULT_GRACE`]).
pub fn grace(value: Option<&std::ffi::OsStr>) -> Result<Duration, EnvError> {
    match value {
        None => Ok(DEFAULT_GRACE),
        Some(v) => v
            .to_str()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u64>().ok())
            .map(Duration::from_secs)
            .ok_or(EnvError {
                code: codes::LEARNING_GRACE_INVALID,
                var: GRACE_ENV,
            }),
    }
}

/// Reads `CORRAL_LEARNING_GRACE_SECONDS` from the process environment.
pub fn grace_from_env() -> Result<Duration, EnvError> {
    grace(std::env::var_os(GRACE_ENV).as_deref())
}

/// For every entry point but `corral serve`: an error when the flag is set (or unreadable).
pub fn refuse_outside_serve(flag_value: Option<&std::ffi::OsStr>) -> Result<(), EnvError> {
    match flag(flag_value)? {
        false => Ok(()),
        true => Err(EnvError {
            code: codes::LEARNING_NOT_THIS_ENTRY_POINT,
            var: FLAG_ENV,
        }),
    }
}

/// What the server knows when it decides whether learning mode may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// `auth.tokens` or `auth.jwt` is configured.
    pub auth_configured: bool,
    /// The server would run in open mode (anonymous callers).
    pub open_mode: bool,
    /// The manifest at `CORRAL_SCENARIO_MANIFEST` read and validated.
    pub manifest_valid: bool,
    /// The configured autonomy level.
    pub autonomy: AutonomyLevel,
    /// The audit is on.
    pub audit_on: bool,
}

/// A precondition of learning mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Authentication is configured.
    Auth,
    /// Not open mode.
    NotOpenMode,
    /// A valid manifest.
    Manifest,
    /// Autonomy at most L2.
    Autonomy,
    /// The audit is on.
    Audit,
}

impl Precondition {
    /// Its catalog code.
    pub fn code(self) -> &'static str {
        match self {
            Precondition::Auth => codes::LEARNING_PRECONDITION_AUTH,
            Precondition::NotOpenMode => codes::LEARNING_PRECONDITION_OPEN_MODE,
            Precondition::Manifest => codes::LEARNING_PRECONDITION_MANIFEST,
            Precondition::Autonomy => codes::LEARNING_PRECONDITION_AUTONOMY,
            Precondition::Audit => codes::LEARNING_PRECONDITION_AUDIT,
        }
    }

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Precondition::Auth => "authentication configured",
            Precondition::NotOpenMode => "not open mode",
            Precondition::Manifest => "a valid scenario manifest",
            Precondition::Autonomy => "autonomy at most L2",
            Precondition::Audit => "the audit on",
        }
    }
}

impl fmt::Display for Precondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        let info = codes::lookup(code);
        write!(
            f,
            "error[{code}]: learning mode needs {}: {}; {}; see: {}",
            self.name(),
            info.map(|c| c.title).unwrap_or(""),
            info.map(|c| c.fix).unwrap_or(""),
            codes::doc_id(code)
        )
    }
}

/// Every precondition `facts` leaves unmet, in a fixed order; empty when learning mode may start.
pub fn missing(facts: &Facts) -> Vec<Precondition> {
    let Facts {
        auth_configured,
        open_mode,
        manifest_valid,
        autonomy,
        audit_on,
    } = *facts;
    let mut out = Vec::new();
    if !auth_configured {
        out.push(Precondition::Auth);
    }
    if open_mode {
        out.push(Precondition::NotOpenMode);
    }
    if !manifest_valid {
        out.push(Precondition::Manifest);
    }
    if autonomy > MAX_AUTONOMY {
        out.push(Precondition::Autonomy);
    }
    if !audit_on {
        out.push(Precondition::Audit);
    }
    out
}
