//! Rules (`allow`/`deny` with selectors, principals, scopes and limits) and policies that
//! compose them.

use std::fmt;
use std::ops::Add;
use std::sync::Arc;

use crate::hook::Authorize;
use crate::limits::Limits;
use crate::op::OpSpec;
use crate::principal::{Principal, PrincipalSelector};
use crate::protect::Protected;
use crate::scope::{AgentScope, CommandScope, PathScope, UrlScope};
use crate::selector::Selector;

/// Whether a rule allows or denies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleEffect {
    /// Mounts ops and admits calls inside its scopes.
    Allow,
    /// Refuses calls; beats every allow.
    Deny,
}

impl RuleEffect {
    /// `allow` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleEffect::Allow => "allow",
            RuleEffect::Deny => "deny",
        }
    }
}

/// One rule.
#[derive(Clone)]
pub struct Rule {
    /// A name shown in decisions and traces (`rules[2]`, `preset:readonly`, or given).
    pub name: Arc<str>,
    /// Allow or deny.
    pub effect: RuleEffect,
    /// Which ops it reaches.
    pub selectors: Vec<Selector>,
    /// Which callers it reaches; empty means every caller.
    pub principals: Vec<PrincipalSelector>,
    /// Path scope: for an allow, where paths may lie; for a deny, where they may not.
    pub paths: Option<PathScope>,
    /// Command scope.
    pub commands: Option<CommandScope>,
    /// Url scope.
    pub urls: Option<UrlScope>,
    /// Agent scope: what a hosted coding agent may do (allow rules only).
    pub agents: Option<AgentScope>,
    /// Limits that apply when this rule decides.
    pub limits: Limits,
    /// Why (shown on a deny).
    pub reason: Option<String>,
    /// A hook run when this rule allows a call.
    pub hook: Option<Arc<dyn Authorize>>,
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule")
            .field("name", &self.name)
            .field("effect", &self.effect)
            .field("selectors", &self.selectors)
            .field("principals", &self.principals)
            .field("paths", &self.paths.as_ref().map(PathScope::spec))
            .field("commands", &self.commands.as_ref().map(CommandScope::spec))
            .field("urls", &self.urls.as_ref().map(UrlScope::spec))
            .field("agents", &self.agents.as_ref().map(AgentScope::spec))
            .field("limits", &self.limits)
            .field("reason", &self.reason)
            .field("hook", &self.hook.is_some())
            .finish()
    }
}

impl Rule {
    fn new(effect: RuleEffect, name: &str, selectors: Vec<Selector>) -> Self {
        Self {
            name: Arc::from(name),
            effect,
            selectors,
            principals: Vec::new(),
            paths: None,
            commands: None,
            urls: None,
            agents: None,
            limits: Limits::NONE,
            reason: None,
            hook: None,
        }
    }

    /// An allow rule.
    pub fn allow(name: &str, selectors: Vec<Selector>) -> Self {
        Self::new(RuleEffect::Allow, name, selectors)
    }

    /// A deny rule.
    pub fn deny(name: &str, selectors: Vec<Selector>) -> Self {
        Self::new(RuleEffect::Deny, name, selectors)
    }

    /// Targets callers.
    pub fn principals(mut self, p: Vec<PrincipalSelector>) -> Self {
        self.principals = p;
        self
    }

    /// Sets the path scope.
    pub fn paths(mut self, s: PathScope) -> Self {
        self.paths = Some(s);
        self
    }

    /// Sets the command scope.
    pub fn commands(mut self, s: CommandScope) -> Self {
        self.commands = Some(s);
        self
    }

    /// Sets the url scope.
    pub fn urls(mut self, s: UrlScope) -> Self {
        self.urls = Some(s);
        self
    }

    /// Sets the agent scope.
    pub fn agents(mut self, s: AgentScope) -> Self {
        self.agents = Some(s);
        self
    }

    /// Sets limits.
    pub fn limits(mut self, l: Limits) -> Self {
        self.limits = l;
        self
    }

    /// Sets the reason.
    pub fn reason(mut self, r: &str) -> Self {
        self.reason = Some(r.to_owned());
        self
    }

    /// Attaches a hook.
    pub fn hook(mut self, h: Arc<dyn Authorize>) -> Self {
        self.hook = Some(h);
        self
    }

    /// Whether the rule reaches this caller.
    pub fn reaches_principal(&self, p: &Principal) -> bool {
        self.principals.is_empty() || self.principals.iter().any(|s| s.matches(p))
    }

    /// Whether this (allow) rule mounts `op`: a selector mounts it and, for an op that hosts a
    /// coding agent, the rule carries an `agents:` scope or names the op or the `agents`
    /// namespace (`agents.codex.run`, `agents.**`). So `*`, `effect:exec` or a group never open
    /// a coding agent by accident, and a rule that names one without a scope is refused
    /// (`policy.scope_required`; a load error in config).
    pub fn mounts(&self, op: &OpSpec) -> bool {
        let mut by = self.selectors.iter().filter(|s| s.mounts(op)).peekable();
        if by.peek().is_none() {
            return false;
        }
        !op.agent_scoped || self.agents.is_some() || by.any(Selector::names_agents)
    }

    /// Whether the rule has any scope.
    pub fn is_scoped(&self) -> bool {
        self.paths.is_some() || self.commands.is_some() || self.urls.is_some()
    }
}

/// An ordered list of rules, global hooks and limits. Default deny: an empty policy mounts only
/// what the engine always mounts (`core.health`, unless denied).
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// The rules, in order. Order decides which allow rule is named; it never lets an allow
    /// beat a deny.
    pub rules: Vec<Rule>,
    /// Hooks run on every allowed call.
    pub hooks: Vec<Arc<dyn Authorize>>,
    /// Limits that apply to every call.
    pub limits: Limits,
    /// Locations no op may change (`.git`, `.corral`, corral's state, config and key files,
    /// the config's `protected:` list), and of those, corral's own files may not be read.
    pub protected: Protected,
}

impl Policy {
    /// An empty policy.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a rule.
    pub fn rule(mut self, r: Rule) -> Self {
        self.rules.push(r);
        self
    }

    /// Appends a global hook.
    pub fn authorize(mut self, h: Arc<dyn Authorize>) -> Self {
        self.hooks.push(h);
        self
    }

    /// Denies the selected ops for everyone, with a reason.
    pub fn without(mut self, selectors: Vec<Selector>, reason: &str) -> Self {
        let name = format!(
            "without({})",
            selectors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        self.rules.push(Rule::deny(&name, selectors).reason(reason));
        self
    }

    /// Protects an absolute, resolved path (a directory with what is beneath it, or a file)
    /// from every path scope, reads included.
    pub fn protect(mut self, dir: &str) -> Self {
        self.protected.add_path(dir);
        self
    }

    /// Protects everything `p` protects, too.
    pub fn protect_all(mut self, p: &Protected) -> Self {
        self.protected = self.protected.union(p);
        self
    }
}

impl Add for Policy {
    type Output = Policy;

    /// The union of two policies: both rule lists, both hook lists, the minimum of the limits.
    /// Deny still wins: a deny in either policy beats an allow in either.
    fn add(mut self, rhs: Policy) -> Policy {
        self.rules.extend(rhs.rules);
        self.hooks.extend(rhs.hooks);
        self.limits = self.limits.min(&rhs.limits);
        self.protected = self.protected.union(&rhs.protected);
        self
    }
}
