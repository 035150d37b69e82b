//! The authorize hook: Rust code that may deny or narrow an allowed call, never widen it.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::limits::Limits;
use crate::op::OpSpec;
use crate::principal::Principal;
use crate::request::Args;
use crate::scope::JailedPath;

/// What a hook sees: read-only.
#[derive(Debug)]
pub struct HookCtx<'a> {
    /// The op being called.
    pub op: &'a OpSpec,
    /// The caller.
    pub principal: &'a Principal,
    /// The raw arguments.
    pub args: &'a Args,
    /// Path arguments as the scope jailed them.
    pub paths: &'a [(String, JailedPath)],
    /// The argv, for commands.
    pub argv: Option<&'a [String]>,
}

/// What a hook decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    /// No opinion: the rules' decision stands.
    NoOpinion,
    /// Agrees with the rules' allow (it can never allow what the rules did not).
    Allow,
    /// Denies, with a reason and a `policy.*` code (`policy.hook_denied` otherwise).
    Deny {
        /// Why, shown to the caller.
        reason: String,
        /// A `policy.*` code.
        code: String,
    },
    /// Allows with tighter limits.
    Narrow(Limits),
}

/// A hook. Returning `Err`, or panicking, denies the call.
pub trait Authorize: Send + Sync + fmt::Debug {
    /// Decides on an allowed call.
    fn authorize(&self, ctx: &HookCtx<'_>) -> Result<HookOutcome, String>;
}

/// Any `Fn(&HookCtx) -> Result<HookOutcome, String>` is a hook.
pub struct FnHook<F>(pub F);

impl<F> fmt::Debug for FnHook<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnHook")
    }
}

impl<F> Authorize for FnHook<F>
where
    F: Fn(&HookCtx<'_>) -> Result<HookOutcome, String> + Send + Sync,
{
    fn authorize(&self, ctx: &HookCtx<'_>) -> Result<HookOutcome, String> {
        (self.0)(ctx)
    }
}

/// Runs a hook and turns an error or a panic into a failure message.
pub(crate) fn run_hook(hook: &dyn Authorize, ctx: &HookCtx<'_>) -> Result<HookOutcome, String> {
    match catch_unwind(AssertUnwindSafe(|| hook.authorize(ctx))) {
        Ok(r) => r,
        Err(_) => Err("the hook panicked".to_owned()),
    }
}
