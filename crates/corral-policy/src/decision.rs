//! Decisions and the explain trace.

use std::sync::Arc;

use crate::limits::Limits;
use crate::resolved::ResolvedCheck;
use crate::rule::RuleEffect;
use crate::scope::{CommandGrant, JailedPath, SymlinkMode, UrlGrant};

/// A reference to the rule that decided, by position and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRef {
    /// Position in the policy's rule list (`usize::MAX` for the implicit health rule).
    pub index: usize,
    /// The rule's name.
    pub name: Arc<str>,
}

/// A call the policy admits, with everything the op needs to stay inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// The allow rule that decided.
    pub rule: RuleRef,
    /// Path arguments, jailed beneath their scope's roots, by parameter name.
    pub paths: Vec<(String, JailedPath)>,
    /// The admitted command, for ops that run one.
    pub command: Option<CommandGrant>,
    /// The admitted url, for ops that fetch one.
    pub url: Option<UrlGrant>,
    /// For an op that hosts a coding agent: what its agent scope grants the session (the
    /// workdir, permissions, model, turns), which the runtime builds the sandbox from.
    pub agent: Option<crate::scope::agent::AgentGrant>,
    /// The effective limits: the minimum of the global limits, the rule's, its scopes' and any
    /// hook's narrowing.
    pub limits: Limits,
    /// How the op must treat symlinks when it opens the paths.
    pub symlinks: SymlinkMode,
    /// For ops that run a command: the deciding rule's path-scope roots (templates filled in),
    /// which a sandbox binds; empty when the rule has no path scope (or the op runs nothing).
    pub roots: Vec<String>,
    /// Whether the deciding rule's path scope is read-only (a sandbox binds its roots
    /// read-only, and the command's cwd too).
    pub readonly: bool,
    /// What the op re-checks on the path it really opened: the protected locations and the
    /// deny patterns and deny rules that reach this call (a symlink may lead elsewhere).
    pub resolved: ResolvedCheck,
}

/// An allow rule that reached the call but whose scope refused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The rule.
    pub rule: RuleRef,
    /// The stable code of the clause that failed.
    pub code: &'static str,
    /// The clause that failed, in words.
    pub clause: String,
}

/// The policy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Admitted.
    Allowed(Box<Allowed>),
    /// A deny rule (or a hook) refused the call.
    Denied {
        /// The rule that denied.
        rule: RuleRef,
        /// The stable code.
        code: &'static str,
        /// Why.
        reason: String,
    },
    /// The op is mounted for the caller but no allow rule's scope admits these arguments.
    NotPermitted {
        /// Every allow rule that reached the call, closest first, with the clause that failed.
        candidates: Vec<Candidate>,
    },
    /// The op does not exist, or no allow rule mounts it for this caller.
    NotMounted,
}

impl Decision {
    /// Whether the call is admitted.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allowed(_))
    }

    /// The stable code of a refusal; `None` when allowed.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            Decision::Allowed(_) => None,
            Decision::Denied { code, .. } => Some(code),
            Decision::NotPermitted { candidates } => Some(
                candidates
                    .first()
                    .map_or(crate::codes::POLICY_NOT_PERMITTED, |c| c.code),
            ),
            Decision::NotMounted => Some(crate::codes::OP_NOT_ENABLED),
        }
    }

    /// `allowed`, `denied`, `not_permitted` or `not_mounted`.
    pub fn kind(&self) -> &'static str {
        match self {
            Decision::Allowed(_) => "allowed",
            Decision::Denied { .. } => "denied",
            Decision::NotPermitted { .. } => "not_permitted",
            Decision::NotMounted => "not_mounted",
        }
    }
}

/// What happened to one rule while deciding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceOutcome {
    /// The rule's selectors do not reach the op.
    OpNotSelected(String),
    /// The rule does not reach this caller.
    PrincipalNotMatched(String),
    /// The rule reached the call; a deny with no matching scope, or an allow whose scope failed.
    ScopeNotMatched {
        /// The clause's code.
        code: &'static str,
        /// The clause, in words.
        clause: String,
    },
    /// The rule matched and decided.
    Decided,
    /// The rule matched but an earlier rule had decided.
    AlsoMatched,
    /// The rule was not looked at because the decision was already made by a deny.
    NotReached,
}

/// One step of the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceStep {
    /// The rule.
    pub rule: RuleRef,
    /// Allow or deny.
    pub effect: RuleEffect,
    /// What happened.
    pub outcome: TraceOutcome,
}

/// A decision with the trace that explains it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The decision.
    pub decision: Decision,
    /// Every rule considered, in policy order, and what happened to it; then the hooks.
    pub trace: Vec<TraceStep>,
    /// Notes about the op itself (unknown id, explicit-only, hooks run).
    pub notes: Vec<String>,
}
