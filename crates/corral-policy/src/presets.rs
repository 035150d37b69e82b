//! Presets: the common policy shapes, each a plain `Policy` you can compose with `+`.

use std::time::Duration;

use crate::error::PolicyError;
use crate::limits::Limits;
use crate::op::OpId;
use crate::rule::{Policy, Rule};
use crate::scope::path::DEFAULT_SECRET_DENY;
use crate::scope::{
    AgentPermissions, AgentScope, AgentScopeSpec, CommandScope, CommandScopeSpec, PathScope,
    PathScopeSpec, UrlScope, UrlScopeSpec, parse_adapter,
};
use crate::selector::Selector;
use crate::suggest::closest;

/// Every preset name, in the canonical (underscore) spelling.
pub const PRESET_NAMES: &[&str] = &[
    "minimal",
    "files_readonly",
    "readonly",
    "download_only",
    "commands_only",
    "workspace_jail",
    "ci_runner",
    "full_access",
    "agent_host",
];

/// A preset by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Only `core.health`.
    Minimal,
    /// List, stat, read and download under the root.
    FilesReadonly,
    /// Every read op under the root, read-only.
    Readonly,
    /// Only `files.download` under the root.
    DownloadOnly,
    /// Only `commands.run` with the given patterns, cwd at the root.
    CommandsOnly,
    /// Files under the root (writable unless `readonly`), commands if patterns are given.
    WorkspaceJail,
    /// Read the workspace and run the given commands; the workspace is read-only by default.
    CiRunner,
    /// Everything under the root, any command: needs `unsafe: true`; always a lint error.
    FullAccess,
    /// Host coding agents (`agents: [codex]`) working in the root, read-only by default.
    AgentHost,
}

impl Preset {
    /// Parses a name in either spelling (`download_only` or `download-only`).
    pub fn parse(name: &str) -> Result<Self, PolicyError> {
        let canonical = name.replace('-', "_");
        let p = match canonical.as_str() {
            "minimal" => Preset::Minimal,
            "files_readonly" => Preset::FilesReadonly,
            "readonly" => Preset::Readonly,
            "download_only" => Preset::DownloadOnly,
            "commands_only" => Preset::CommandsOnly,
            "workspace_jail" => Preset::WorkspaceJail,
            "ci_runner" => Preset::CiRunner,
            "full_access" => Preset::FullAccess,
            "agent_host" => Preset::AgentHost,
            _ => {
                return Err(PolicyError::UnknownPreset {
                    name: name.to_owned(),
                    suggestions: closest(&canonical, PRESET_NAMES.iter().copied()),
                });
            }
        };
        Ok(p)
    }

    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Minimal => "minimal",
            Preset::FilesReadonly => "files_readonly",
            Preset::Readonly => "readonly",
            Preset::DownloadOnly => "download_only",
            Preset::CommandsOnly => "commands_only",
            Preset::WorkspaceJail => "workspace_jail",
            Preset::CiRunner => "ci_runner",
            Preset::FullAccess => "full_access",
            Preset::AgentHost => "agent_host",
        }
    }

    /// Whether the preset needs a root.
    pub fn needs_root(self) -> bool {
        !matches!(self, Preset::Minimal)
    }
}

/// Options a preset takes. `root` is the one keyword most presets need.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PresetOptions {
    /// The directory the preset scopes to.
    pub root: Option<String>,
    /// Command patterns (commands_only, workspace_jail, ci_runner, full_access).
    pub commands: Vec<String>,
    /// workspace_jail: make the files read-only.
    pub readonly: bool,
    /// ci_runner: let commands and file ops write the workspace.
    pub writable: bool,
    /// Command timeout (ci_runner defaults to 600s).
    pub timeout: Option<Duration>,
    /// Extra deny patterns, added to the default secret denies.
    pub deny: Vec<String>,
    /// Largest file (download_only and the file presets).
    pub max_bytes: Option<u64>,
    /// full_access: the explicit opt-in.
    pub unsafe_: bool,
    /// agent_host: the adapters to host (empty: `codex`).
    pub agents: Vec<String>,
    /// agent_host: what the agents may change (`None`: read-only). `full` is refused: a preset
    /// never runs an agent unconfined.
    pub permissions: Option<AgentPermissions>,
    /// download_only: the hosts `http.download` may `GET` from (https), saving beneath the
    /// root; empty: no fetching at all.
    pub urls: Vec<String>,
}

fn exact(ids: &[&str]) -> Result<Vec<Selector>, PolicyError> {
    ids.iter()
        .map(|id| OpId::parse(id).map(Selector::Exact))
        .collect()
}

/// Builds a preset's policy.
pub fn build(preset: Preset, opts: &PresetOptions) -> Result<Policy, PolicyError> {
    let name = format!("preset:{}", preset.name());
    let root = || {
        opts.root.clone().ok_or_else(|| PolicyError::PresetOption {
            preset: preset.name().to_owned(),
            option: "root".to_owned(),
        })
    };
    let deny: Vec<String> = DEFAULT_SECRET_DENY
        .iter()
        .map(|s| (*s).to_owned())
        .chain(opts.deny.iter().cloned())
        .collect();
    let paths = |readonly: bool| -> Result<PathScope, PolicyError> {
        PathScope::compile(PathScopeSpec {
            roots: vec![root()?],
            deny: deny.clone(),
            readonly,
            max_bytes: opts.max_bytes,
            ..PathScopeSpec::default()
        })
    };
    let commands = |timeout: Option<Duration>| -> Result<CommandScope, PolicyError> {
        CommandScope::compile(CommandScopeSpec {
            allow: opts.commands.clone(),
            cwd: Some(root()?),
            env_pass: vec!["PATH".to_owned(), "LANG".to_owned()],
            timeout,
            ..CommandScopeSpec::default()
        })
    };
    let needs_commands = || -> Result<(), PolicyError> {
        if opts.commands.is_empty() {
            return Err(PolicyError::PresetOption {
                preset: preset.name().to_owned(),
                option: "commands".to_owned(),
            });
        }
        Ok(())
    };
    let read_ops = ["files.list", "files.stat", "files.read", "files.download"];
    let policy = match preset {
        Preset::Minimal => Policy::new().rule(Rule::allow(&name, exact(&["core.health"])?)),
        Preset::FilesReadonly => {
            Policy::new().rule(Rule::allow(&name, exact(&read_ops)?).paths(paths(true)?))
        }
        Preset::Readonly => Policy::new().rule(
            Rule::allow(&name, vec![Selector::Effect(crate::op::Effect::Read)]).paths(paths(true)?),
        ),
        Preset::DownloadOnly => {
            let p = Policy::new()
                .rule(Rule::allow(&name, exact(&["files.download"])?).paths(paths(true)?));
            if opts.urls.is_empty() {
                p
            } else {
                // Reads only (`GET`, `HEAD`: the url scope's default), saved beneath the root.
                let urls = UrlScope::compile(UrlScopeSpec {
                    hosts: opts.urls.clone(),
                    ..UrlScopeSpec::default()
                })?;
                p.rule(
                    Rule::allow(&format!("{name}/fetch"), exact(&["http.download"])?)
                        .paths(paths(false)?)
                        .urls(urls),
                )
            }
        }
        Preset::CommandsOnly => {
            needs_commands()?;
            Policy::new()
                .rule(Rule::allow(&name, exact(&["commands.run"])?).commands(commands(None)?))
        }
        Preset::WorkspaceJail => {
            let mut p = Policy::new().rule(
                Rule::allow(
                    &format!("{name}/files"),
                    vec![Selector::OneLevel("files".to_owned())],
                )
                .paths(paths(opts.readonly)?),
            );
            if !opts.commands.is_empty() {
                p = p.rule(
                    Rule::allow(&format!("{name}/commands"), exact(&["commands.run"])?)
                        .commands(commands(opts.timeout)?)
                        .paths(paths(opts.readonly)?),
                );
            }
            p
        }
        Preset::CiRunner => {
            needs_commands()?;
            let timeout = opts.timeout.or(Some(Duration::from_secs(600)));
            let files = if opts.writable {
                vec![Selector::OneLevel("files".to_owned())]
            } else {
                exact(&read_ops)?
            };
            Policy::new()
                .rule(Rule::allow(&format!("{name}/files"), files).paths(paths(!opts.writable)?))
                .rule(
                    Rule::allow(&format!("{name}/commands"), exact(&["commands.run"])?)
                        .commands(commands(timeout)?)
                        .paths(paths(!opts.writable)?)
                        .limits(Limits {
                            timeout,
                            ..Limits::NONE
                        }),
                )
        }
        Preset::FullAccess => full_access(&name, opts, root)?,
        Preset::AgentHost => agent_host(&name, opts, &root()?)?,
    };
    Ok(policy)
}

/// The `full_access` preset: every op, any command (`sh ...` unless `commands` names some),
/// in the root; refused unless `unsafe` is set.
fn full_access(
    name: &str,
    opts: &PresetOptions,
    root: impl Fn() -> Result<String, PolicyError>,
) -> Result<Policy, PolicyError> {
    if !opts.unsafe_ {
        return Err(PolicyError::UnsafeRequired {
            what: "the `full_access` preset".to_owned(),
        });
    }
    let mut allow = opts.commands.clone();
    if allow.is_empty() {
        allow.push("sh ...".to_owned());
    }
    let cmd = CommandScope::compile(CommandScopeSpec {
        allow,
        cwd: Some(root()?),
        ..CommandScopeSpec::default()
    })?;
    Ok(Policy::new().rule(
        Rule::allow(name, vec![Selector::All])
            .paths(PathScope::compile(PathScopeSpec {
                roots: vec![root()?],
                ..PathScopeSpec::default()
            })?)
            .commands(cmd),
    ))
}

/// The `agent_host` preset: for each listed adapter (default `codex`), `agents.<a>.run`,
/// `agents.<a>.sessions.create`, `agents.<a>.sessions.send_event` and
/// `agents.<a>.sessions.apply_writes`, plus the generic gate
/// `agents.sessions.create`, with an agent scope whose workdir is the root (read-only unless
/// `permissions: workspace-write`). It mounts neither `agents.<a>.install` (an admin op: installs
/// happen on first use with `install: {mode: lazy}`) nor `llm.chat` (the agent's model traffic
/// is authorized by its session, not by the caller's rules).
fn agent_host(name: &str, opts: &PresetOptions, root: &str) -> Result<Policy, PolicyError> {
    if opts.permissions == Some(AgentPermissions::Full) {
        return Err(PolicyError::InvalidScope {
            what: "the `agent_host` preset never runs an agent with `permissions: full`".to_owned(),
            fix: "use `permissions: workspace-write`, or write a rule with an `agents:` scope \
                  that sets `unconfined_ok: true`"
                .to_owned(),
        });
    }
    let adapters: Vec<String> = if opts.agents.is_empty() {
        vec!["codex".to_owned()]
    } else {
        opts.agents.clone()
    };
    let mut ids = Vec::new();
    for a in &adapters {
        parse_adapter(a)?;
        for op in [
            "run",
            "sessions.create",
            "sessions.send_event",
            "sessions.apply_writes",
        ] {
            ids.push(format!("agents.{a}.{op}"));
        }
    }
    ids.push(crate::builtin::GENERIC_SESSION_GATE.to_owned());
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let scope = AgentScope::compile(AgentScopeSpec {
        workdir: root.to_owned(),
        permissions: Some(opts.permissions.unwrap_or_default()),
        ..AgentScopeSpec::default()
    })?;
    // The agents' model traffic goes through the guard chain as `llm.chat`, as the session's
    // owner in the session's run (its budgets, and any deny of `llm.chat`, apply): a host
    // whose agents cannot reach a model hosts nothing.
    Ok(Policy::new()
        .rule(Rule::allow(name, exact(&ids)?).agents(scope))
        .rule(Rule::allow(name, exact(&["llm.chat"])?)))
}
