//! Errors raised while building a policy (never while deciding: a decision is always a value).

use crate::codes;
use crate::op::Tier;

/// An error building ops, scopes, selectors or rules. Messages are lowercase, user input in
/// backticks; `code()` gives the stable code and `fix()` the way out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The op id is malformed.
    #[error("`{id}` is not a valid op id: {why}")]
    InvalidOpId {
        /// The id as written.
        id: String,
        /// Why it is refused.
        why: String,
    },
    /// A selector names an op that does not exist.
    #[error("unknown op `{op}`")]
    UnknownOp {
        /// The id as written.
        op: String,
        /// Close matches.
        suggestions: Vec<String>,
    },
    /// A selector is malformed.
    #[error("`{selector}` is not a valid selector: {why}")]
    InvalidSelector {
        /// The selector as written.
        selector: String,
        /// Why it is refused.
        why: String,
        /// Close matches.
        suggestions: Vec<String>,
    },
    /// A principal selector is malformed.
    #[error("`{selector}` is not a valid principal selector")]
    InvalidPrincipal {
        /// The selector as written.
        selector: String,
    },
    /// A custom op uses a reserved namespace.
    #[error("custom op `{op}` uses the reserved namespace `{namespace}`")]
    ReservedNamespace {
        /// The op id.
        op: String,
        /// The reserved namespace.
        namespace: String,
    },
    /// Two ops share an id.
    #[error("op `{op}` is defined twice")]
    DuplicateOp {
        /// The op id.
        op: String,
    },
    /// Config tried to lower a tier.
    #[error("op `{op}` cannot be lowered to tier `{asked}`: its effects make it `{derived}`")]
    TierLowered {
        /// The op id.
        op: String,
        /// The tier from its effects.
        derived: Tier,
        /// The tier config asked for.
        asked: Tier,
    },
    /// A scope is malformed.
    #[error("{what}")]
    InvalidScope {
        /// What is wrong.
        what: String,
        /// How to fix it.
        fix: String,
    },
    /// A size, duration or rate string is malformed.
    #[error("`{value}` is not a valid {kind}")]
    InvalidUnit {
        /// `size`, `duration` or `rate`.
        kind: &'static str,
        /// The value as written.
        value: String,
    },
    /// A protection was disabled without `unsafe: true`.
    #[error("{what} needs `unsafe: true`")]
    UnsafeRequired {
        /// What was asked.
        what: String,
    },
    /// A preset name is unknown.
    #[error("unknown preset `{name}`")]
    UnknownPreset {
        /// The name as written.
        name: String,
        /// Close matches.
        suggestions: Vec<String>,
    },
    /// An agent adapter name is unknown.
    #[error("unknown agent adapter `{name}`")]
    UnknownAdapter {
        /// The name as written.
        name: String,
        /// Close matches.
        suggestions: Vec<String>,
    },
    /// A preset is missing an option it needs.
    #[error("preset `{preset}` needs `{option}`")]
    PresetOption {
        /// The preset.
        preset: String,
        /// The missing option.
        option: String,
    },
}

impl PolicyError {
    /// The stable code from the catalog.
    pub fn code(&self) -> &'static str {
        match self {
            PolicyError::InvalidOpId { .. } => codes::OP_INVALID_ID,
            PolicyError::UnknownOp { .. } => codes::CONFIG_UNKNOWN_OP,
            PolicyError::InvalidSelector { .. } => codes::CONFIG_INVALID_SELECTOR,
            PolicyError::InvalidPrincipal { .. } => codes::CONFIG_INVALID_PRINCIPAL,
            PolicyError::ReservedNamespace { .. }
            | PolicyError::DuplicateOp { .. }
            | PolicyError::TierLowered { .. } => codes::CONFIG_INVALID_OP,
            PolicyError::InvalidScope { .. } => codes::CONFIG_INVALID_SCOPE,
            PolicyError::InvalidUnit { kind, .. } => match *kind {
                "size" => codes::CONFIG_INVALID_SIZE,
                "duration" => codes::CONFIG_INVALID_DURATION,
                _ => codes::CONFIG_INVALID_RATE,
            },
            PolicyError::UnsafeRequired { .. } => codes::CONFIG_UNSAFE_REQUIRED,
            PolicyError::UnknownPreset { .. } => codes::CONFIG_UNKNOWN_PRESET,
            PolicyError::PresetOption { .. } => codes::CONFIG_MISSING_KEY,
            PolicyError::UnknownAdapter { .. } => codes::CONFIG_UNKNOWN_ADAPTER,
        }
    }

    /// How to fix it, with close matches where there are some.
    pub fn fix(&self) -> String {
        let did_you_mean = |s: &[String]| match s {
            [] => None,
            [one] => Some(format!("did you mean `{one}`?")),
            many => Some(format!(
                "did you mean one of {}?",
                many.iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
        match self {
            PolicyError::UnknownOp { op, suggestions } => {
                if let Some(rest) = op.strip_prefix("ops.") {
                    return format!("op ids are written without the `ops.` prefix: write `{rest}`");
                }
                did_you_mean(suggestions)
                    .unwrap_or_else(|| "use an op id that `corral describe` lists".to_owned())
            }
            PolicyError::InvalidSelector { suggestions, .. } => did_you_mean(suggestions)
                .unwrap_or_else(|| {
                    "write an op id, `ns.*`, `ns.**`, `group:NAME`, `effect:E`, `tier:T` or `*`"
                        .to_owned()
                }),
            PolicyError::UnknownPreset { suggestions, .. } => did_you_mean(suggestions)
                .unwrap_or_else(|| {
                    format!("use one of {}", crate::presets::PRESET_NAMES.join(", "))
                }),
            PolicyError::UnknownAdapter { suggestions, .. } => did_you_mean(suggestions)
                .unwrap_or_else(|| {
                    format!(
                        "use one of {}",
                        crate::scope::ADAPTERS
                            .iter()
                            .map(|a| format!("`{a}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }),
            PolicyError::InvalidScope { fix, .. } => fix.clone(),
            PolicyError::InvalidOpId { .. }
            | PolicyError::InvalidPrincipal { .. }
            | PolicyError::ReservedNamespace { .. }
            | PolicyError::DuplicateOp { .. }
            | PolicyError::TierLowered { .. }
            | PolicyError::InvalidUnit { .. }
            | PolicyError::UnsafeRequired { .. }
            | PolicyError::PresetOption { .. } => codes::lookup(self.code())
                .map(|c| c.fix.to_owned())
                .unwrap_or_default(),
        }
    }
}
