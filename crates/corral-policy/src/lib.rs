//! Corral's policy model: ops, effects, tiers, selectors, rules, scopes, limits and decisions.
//!
//! **Architecture invariant:** this crate does no I/O, runs no async code and knows no wire
//! format. Everything here is a pure function of its inputs, so the same decision is made by
//! the server, the CLI's `explain` and the lab.

mod builtin;
pub use builtin::{GENERIC_SESSION_GATE, STREAMED_OPS, session_create_adapter};
pub mod codes;
pub mod decision;
pub mod engine;
pub mod error;
pub mod guardrails;
pub mod hook;
pub mod limits;
pub mod op;
pub mod presets;
pub mod principal;
pub mod protect;
pub mod request;
pub mod resolved;
pub mod rule;
pub mod scope;
pub mod selector;
pub mod suggest;
pub mod units;

pub use decision::{Allowed, Candidate, Decision, Explanation, RuleRef, TraceOutcome, TraceStep};
pub use engine::Engine;
pub use error::PolicyError;
pub use guardrails::{AutonomyLevel, Role, valid_run_id};
pub use hook::{Authorize, FnHook, HookCtx, HookOutcome};
pub use limits::Limits;
pub use op::{
    Catalog, Effect, EffectSet, OpId, OpSpec, ParamKind, ParamSpec, Safety, ScopeKind, Tier,
};
pub use principal::{Principal, PrincipalKind, PrincipalOrigin, PrincipalSelector};
pub use protect::{Access, Protected, ProtectedHit, ProtectedSpec};
pub use request::{ArgError, ArgValue, Args, Request, path_too_long, validate_args};
pub use resolved::{ResolvedCheck, ResolvedRefusal};
pub use rule::{Policy, Rule, RuleEffect};
pub use selector::Selector;
