//! `AgentScope`: what a hosted coding agent (`agents.<adapter>.*`) may do: its workdir, how much
//! of it the agent may change, which programs it may execute, which models it may ask,
//! how many turns it may take, and where its network may reach beyond corral's LLM proxy.
//!
//! An agent is NOT confined by the `paths:` or `commands:` scopes of other rules: those judge
//! the arguments of one op call, while an agent runs many steps inside the isolation backend.
//! The agent scope is what the sandbox is built from (the workdir bound per `permissions`,
//! everything else read-only or absent, the network per `network`), and what the runtime checks
//! each session against (`AgentScope::check`).

use std::fmt;

use crate::codes;
use crate::error::PolicyError;
use crate::principal::Principal;
use crate::scope::egress::NetworkSpec;
use crate::scope::path::{JailedPath, NormPath, PathScope, PathScopeSpec};

/// The adapters corral hosts (stable ones), by the name used in op ids and config.
pub const ADAPTERS: &[&str] = &["codex", "claude_code"];

/// The kinds of step an agent session records in the audit, as op ids `agents.<a>.<kind>`
/// (without values): a model turn, a command the agent ran, a file it changed, a connection
/// through the egress proxy. They are not ops of the catalog: the agent scope, not a rule per
/// step, decides what the agent may do.
pub const STEP_KINDS: &[&str] = &["model", "exec", "write", "connect"];

/// The audit op id of one step kind of an adapter (`agents.codex.exec`).
pub fn step_op_id(adapter: &str, kind: &str) -> String {
    format!("agents.{adapter}.{kind}")
}

/// Whether `name` is a known adapter.
pub fn is_adapter(name: &str) -> bool {
    ADAPTERS.contains(&name)
}

/// Checks an adapter name: unknown ones are refused with did-you-mean.
pub fn parse_adapter(name: &str) -> Result<&'static str, PolicyError> {
    ADAPTERS
        .iter()
        .copied()
        .find(|a| *a == name)
        .ok_or_else(|| PolicyError::UnknownAdapter {
            name: name.to_owned(),
            suggestions: crate::suggest::closest(name, ADAPTERS.iter().copied()),
        })
}

/// How much of its workdir (and of the rest of the system) an agent may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum AgentPermissions {
    /// The workdir is mounted read-only; the agent changes nothing (the default).
    #[default]
    ReadOnly,
    /// The agent may change files beneath the workdir; everything else is read-only or absent.
    WorkspaceWrite,
    /// The agent may change the host beyond its workdir: the host's top-level directories but
    /// the system ones, as far as corral's user may, through the sandbox's checked
    /// copy-on-write layer (corral's own files and state, `.git` internals and the `protected:`
    /// globs stay refused; network, limits and seccomp as for every agent). Needs
    /// `unconfined_ok: true` and is always a lint warning.
    Full,
}

impl AgentPermissions {
    /// Every value, in order.
    pub const ALL: [AgentPermissions; 3] = [
        AgentPermissions::ReadOnly,
        AgentPermissions::WorkspaceWrite,
        AgentPermissions::Full,
    ];

    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentPermissions::ReadOnly => "read-only",
            AgentPermissions::WorkspaceWrite => "workspace-write",
            AgentPermissions::Full => "full",
        }
    }

    /// Parses a config name (`read_only` and `workspace_write` are accepted too).
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.replace('_', "-");
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// Whether the agent may change its workdir.
    pub fn writes(self) -> bool {
        !matches!(self, AgentPermissions::ReadOnly)
    }
}

impl fmt::Display for AgentPermissions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an agent scope is written: the input of `AgentScope::compile`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentScopeSpec {
    /// The one directory the agent works in: absolute, never `/`, no globs; `{principal.id}`
    /// may stand for a whole component. A session's workdir must lie beneath it.
    pub workdir: String,
    /// What the agent may change; `None` when not written (then `read-only`). Kept apart from
    /// the default so the lint can tell an unstated choice from a stated one.
    pub permissions: Option<AgentPermissions>,
    /// The programs the agent may execute besides its CLI and its shell (`/bin/sh`,
    /// `/bin/bash`): names looked up on the sandbox's `PATH` (`pytest`, `git`) or absolute
    /// paths, enforced by the kernel (landlock's execute right); empty: any program the
    /// sandbox shows.
    pub commands: Vec<String>,
    /// Model names the agent may ask for; empty: any model the LLM proxy serves.
    pub models: Vec<String>,
    /// Most model turns one session may take; `None`: no limit from the scope.
    pub max_turns: Option<u32>,
    /// The explicit opt-in `permissions: full` needs.
    pub unconfined_ok: bool,
    /// Where the agent's network may reach beyond corral's LLM proxy; `None`: only the proxy.
    pub network: Option<NetworkSpec>,
    /// With `workspace-write`: a write outside these directories (each beneath the workdir)
    /// needs a person's confirmation; empty: no write needs one.
    pub confirm_writes_outside: Vec<String>,
}

/// A compiled agent scope.
#[derive(Debug, Clone)]
pub struct AgentScope {
    spec: AgentScopeSpec,
    workdir: PathScope,
    confirm_free: Option<PathScope>,
}

/// What a session asks for: checked by `AgentScope::check`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentAsk<'a> {
    /// The model the session asks for; `None`: the adapter's default.
    pub model: Option<&'a str>,
    /// The workdir the session asks for (absolute, or relative to the scope's workdir);
    /// `None`: the scope's workdir.
    pub workdir: Option<&'a str>,
    /// The turns the session has already taken (0 when it starts).
    pub turns: u32,
}

/// Why a session was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentRefusal {
    /// The model is not in `models`.
    ModelNotAllowed,
    /// The workdir is not beneath the scope's workdir (or cannot be checked).
    WorkdirOutside,
    /// The session has taken `max_turns` turns.
    TurnsExhausted,
}

impl AgentRefusal {
    /// The stable code.
    pub fn code(self) -> &'static str {
        match self {
            AgentRefusal::ModelNotAllowed => codes::AGENTS_MODEL_NOT_ALLOWED,
            AgentRefusal::WorkdirOutside => codes::AGENTS_WORKDIR_OUTSIDE,
            AgentRefusal::TurnsExhausted => codes::AGENTS_MAX_TURNS,
        }
    }
}

/// What the agent scope grants one session: what the runtime builds the sandbox from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentGrant {
    /// The session's workdir, jailed beneath the scope's workdir.
    pub workdir: JailedPath,
    /// What the agent may change.
    pub permissions: AgentPermissions,
    /// The model asked for (checked against `models`), or the first of `models` when none
    /// was; `None`: the adapter's default (no model asked, no `models` listed).
    pub model: Option<String>,
    /// The programs the agent may execute besides its CLI and its shell; empty: any.
    pub commands: Vec<String>,
    /// Turns left for the session; `None`: no limit from the scope.
    pub turns_left: Option<u32>,
    /// Where the network may reach beyond the LLM proxy; `None`: only the proxy.
    pub network: Option<NetworkSpec>,
    /// With the scope's `confirm_writes_outside`: its directories for the caller (absolute,
    /// `{principal.id}` filled in; one that cannot be filled in is left out, so more waits
    /// for a person, never less), whose changes apply as usual while every other change
    /// beneath the workdir waits for a person; `None`: no change waits.
    pub confirm_writes_outside: Option<Vec<String>>,
}

fn invalid(what: String, fix: &str) -> PolicyError {
    PolicyError::InvalidScope {
        what,
        fix: fix.to_owned(),
    }
}

/// A `commands` entry: a program name (`pytest`) or an absolute path that is not beneath the
/// workdir (a program there is one the agent could rewrite, then run as anything).
fn check_program(c: &str, workdir: &PathScope) -> Result<(), PolicyError> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n != "."
            && n != ".."
            && n.len() <= 255
            && n.chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "._+-".contains(ch))
    };
    if let Some(abs) = c.strip_prefix('/') {
        let Some(norm) = NormPath::new(c).filter(|_| abs.split('/').all(name_ok)) else {
            return Err(invalid(
                format!("program `{c}` in `commands` is not a plain absolute path"),
                "write a program name (`pytest`) or an absolute path without `..`, globs or `//`",
            ));
        };
        if workdir.may_contain(&norm.parts) {
            return Err(invalid(
                format!("program `{c}` in `commands` lies beneath the workdir"),
                "list programs the agent cannot change: installed ones such as `/usr/bin/git`",
            ));
        }
        return Ok(());
    }
    if !name_ok(c) {
        return Err(invalid(
            format!(
                "`{c}` in `commands` is not a program name: agent scopes list the programs the \
                 agent may execute, not argv patterns"
            ),
            "write the program alone (`pytest`, `git`) or its absolute path",
        ));
    }
    Ok(())
}

impl AgentScope {
    /// Validates and compiles an agent scope. `permissions: full` without `unconfined_ok: true`
    /// is refused, as are `full` with `confirm_writes_outside` and a `confirm_writes_outside`
    /// directory outside the workdir.
    pub fn compile(spec: AgentScopeSpec) -> Result<Self, PolicyError> {
        if spec.workdir.is_empty() {
            return Err(invalid(
                "an agent scope needs a `workdir`".to_owned(),
                "add `workdir: /workspace`",
            ));
        }
        let workdir = PathScope::compile(PathScopeSpec {
            roots: vec![spec.workdir.clone()],
            ..PathScopeSpec::default()
        })?;
        if spec.permissions == Some(AgentPermissions::Full) && !spec.unconfined_ok {
            return Err(invalid(
                "`permissions: full` lets the agent change the host beyond its workdir (as far \
                 as corral's user may), not confined to the workdir"
                    .to_owned(),
                "use `permissions: workspace-write`, or add `unconfined_ok: true` if that is \
                 really meant",
            ));
        }
        if spec.permissions == Some(AgentPermissions::Full)
            && !spec.confirm_writes_outside.is_empty()
        {
            return Err(invalid(
                "`confirm_writes_outside` holds writes in the workdir only, and `permissions: \
                 full` writes beyond it too, which no person would confirm"
                    .to_owned(),
                "use `permissions: workspace-write` with `confirm_writes_outside`, or drop \
                 `confirm_writes_outside`",
            ));
        }
        for c in &spec.commands {
            check_program(c, &workdir)?;
        }
        if let Some(m) = spec.models.iter().find(|m| m.trim().is_empty()) {
            return Err(invalid(
                format!("model name `{m}` is empty"),
                "list model names such as `gpt-5-codex`",
            ));
        }
        let confirm_free = if spec.confirm_writes_outside.is_empty() {
            None
        } else {
            let free = PathScope::compile(PathScopeSpec {
                roots: spec.confirm_writes_outside.clone(),
                ..PathScopeSpec::default()
            })?;
            for d in &spec.confirm_writes_outside {
                let inside = NormPath::new(d)
                    .is_some_and(|n| workdir.may_contain(&n.parts) || d.contains('{'));
                if !inside {
                    return Err(invalid(
                        format!(
                            "`confirm_writes_outside` directory `{d}` is not beneath the workdir `{}`",
                            spec.workdir
                        ),
                        "list directories beneath the workdir; the agent writes nowhere else",
                    ));
                }
            }
            Some(free)
        };
        Ok(Self {
            spec,
            workdir,
            confirm_free,
        })
    }

    /// The scope as written.
    pub fn spec(&self) -> &AgentScopeSpec {
        &self.spec
    }

    /// The permissions in force (`read-only` when not written).
    pub fn permissions(&self) -> AgentPermissions {
        self.spec.permissions.unwrap_or_default()
    }

    /// The scope's workdir with `{principal.id}` filled in, or `None` when it cannot be.
    pub fn workdir_for(&self, p: &Principal) -> Option<String> {
        self.workdir.roots_for(p).into_iter().next()
    }

    /// Whether `workdir` (absolute, or relative to the scope's workdir) lies beneath the
    /// scope's workdir: the jailed path, or `None`.
    pub fn admit_workdir(&self, workdir: Option<&str>, p: &Principal) -> Option<JailedPath> {
        self.workdir.check(workdir.unwrap_or("."), p).ok()
    }

    /// Whether the scope lets the agent ask for `model` (`None`: the adapter's default, always
    /// allowed).
    pub fn model_allowed(&self, model: Option<&str>) -> bool {
        match model {
            None => true,
            Some(m) => self.spec.models.is_empty() || self.spec.models.iter().any(|x| x == m),
        }
    }

    /// Checks what a session asks for: the model, the workdir and the turns taken so far. The
    /// runtime calls it when a session starts and before each turn.
    pub fn check(&self, ask: AgentAsk<'_>, p: &Principal) -> Result<AgentGrant, AgentRefusal> {
        if !self.model_allowed(ask.model) {
            return Err(AgentRefusal::ModelNotAllowed);
        }
        let workdir = self
            .admit_workdir(ask.workdir, p)
            .ok_or(AgentRefusal::WorkdirOutside)?;
        let turns_left = match self.spec.max_turns {
            Some(max) if ask.turns >= max => return Err(AgentRefusal::TurnsExhausted),
            Some(max) => Some(max - ask.turns),
            None => None,
        };
        Ok(AgentGrant {
            workdir,
            permissions: self.permissions(),
            // No model asked for: the scope's first listed one (a scope that lists models
            // never lets the adapter's own default through), else the adapter's default.
            model: ask
                .model
                .or_else(|| self.spec.models.first().map(String::as_str))
                .map(str::to_owned),
            commands: self.spec.commands.clone(),
            turns_left,
            network: self.spec.network.clone(),
            confirm_writes_outside: self.confirm_free.as_ref().map(|f| f.roots_for(p)),
        })
    }

    /// Whether a write the agent made at `path` (absolute) needs a person's confirmation: with
    /// `confirm_writes_outside` set, a write beneath the workdir but outside every listed
    /// directory does (and so does a path that cannot be checked: a failing check asks).
    pub fn write_needs_confirmation(&self, path: &str, p: &Principal) -> bool {
        let Some(free) = &self.confirm_free else {
            return false;
        };
        match NormPath::new(path) {
            Some(n) => free.admit(&n, p).is_err(),
            None => true,
        }
    }

    /// Whether the agent's filesystem is not confined to its workdir (`permissions: full`,
    /// which a compiled scope has only with `unconfined_ok: true`).
    pub fn unconfined(&self) -> bool {
        self.permissions() == AgentPermissions::Full
    }
}

/// A message for a refusal: what is wrong and how to fix it.
pub fn refusal_message(r: AgentRefusal, scope: &AgentScope, ask: &AgentAsk<'_>) -> String {
    match r {
        AgentRefusal::ModelNotAllowed => format!(
            "model `{}` is not in the agent scope's models [{}]; ask for one of them, or add it \
             to `agents.models`",
            ask.model.unwrap_or(""),
            scope.spec.models.join(", ")
        ),
        AgentRefusal::WorkdirOutside => format!(
            "workdir `{}` is outside the agent scope's workdir `{}`; omit `workdir` or pass one \
             beneath it",
            ask.workdir.unwrap_or(""),
            scope.spec.workdir
        ),
        AgentRefusal::TurnsExhausted => format!(
            "the session has taken {} turns, the agent scope's `max_turns`; start a new session, \
             or raise `agents.max_turns`",
            ask.turns
        ),
    }
}
