//! The typed config: what `corral.yaml` says, with the spans the lint points at.

use std::fmt;
use std::time::Duration;

use corral_policy::presets::{Preset, PresetOptions};
use corral_policy::scope::{AgentScopeSpec, CommandScopeSpec, PathScopeSpec, UrlScopeSpec};
use corral_policy::{
    AutonomyLevel, Effect, Limits, ParamKind, PrincipalKind, PrincipalSelector, Role, RuleEffect,
    Tier,
};

use corral_policy::units::Rate;

use crate::yaml::Span;

/// A value and where it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spanned<T> {
    /// The value.
    pub value: T,
    /// Where it was written.
    pub span: Span,
}

impl<T> Spanned<T> {
    /// Pairs a value with a span.
    pub fn new(value: T, span: Span) -> Self {
        Self { value, span }
    }
}

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// Always 1.
    pub version: u32,
    /// Presets, in order.
    pub presets: Vec<PresetUse>,
    /// The default root for presets and `enable`.
    pub root: Option<Spanned<String>>,
    /// Corral's own state directory (always denied to every path scope).
    pub state_dir: Option<Spanned<String>>,
    /// Ops allowed to every caller with scopes from `root`.
    pub enable: Vec<Spanned<String>>,
    /// Ops denied to everyone.
    pub disable: Vec<Spanned<String>>,
    /// Rules, in order.
    pub rules: Vec<RuleConfig>,
    /// Custom ops.
    pub custom: Vec<CustomOpConfig>,
    /// Tokens.
    pub auth: AuthConfig,
    /// `console:` the web console's sign-in limit and the proxies trusted to name a client.
    pub console: ConsoleConfig,
    /// Audit sink.
    pub audit: AuditConfig,
    /// Storage.
    pub storage: StorageConfig,
    /// Where commands run.
    pub isolation: IsolationConfig,
    /// Limits for every call.
    pub limits: Limits,
    /// Reviewed ops whose mutating-looking names change only session state, with reasons.
    pub state_only: Vec<StateOnlyEntry>,
    /// Tiers raised by config.
    pub tiers: Vec<(Spanned<String>, Tier)>,
    /// `autonomy:` the process-wide level and the per-principal pins; `None` when absent.
    pub autonomy: Option<AutonomyConfig>,
    /// `roles:` RBAC by tier; `None` when absent (RBAC by tier is then off).
    pub roles: Option<RolesConfig>,
    /// `guardrails:` mode, confirmation TTL and store, replicas.
    pub guardrails: GuardrailsConfig,
    /// `budgets:` per-run budgets.
    pub budgets: BudgetsConfig,
    /// `disabled_ops:` ops removed from the catalog before anything is built from it.
    pub disabled_ops: Vec<Spanned<String>>,
    /// `protected:` globs no op may create, change or delete (beside `.git`, `.corral` and
    /// corral's own state, config and key files, which are always protected). A pattern
    /// without `/` matches a name at any depth.
    pub protected: Vec<Spanned<String>>,
    /// `mcp_servers:` upstream MCP servers corral runs in its sandbox; their tools become ops
    /// `mcp.<name>.<tool>`.
    pub mcp_servers: Vec<McpServerConfig>,
    /// `mcp:` the `/mcp` endpoint's `Host` and `Origin` allow-lists.
    pub mcp: McpConfig,
    /// `telemetry:` OpenTelemetry traces over OTLP; `None`: no trace leaves the process.
    pub telemetry: Option<TelemetryConfig>,
    /// `run:` the sandbox `corral run --config F` gives its command; `None` when absent.
    pub run: Option<RunConfig>,
    /// `sandbox:` the lab (scenarios, runs, comparisons).
    pub sandbox: SandboxConfig,
    /// `recordings:` how long recorded runs are kept and how large one may grow; each `None`
    /// is the store's default (30 days, 16 MiB, 10,000 events).
    pub recordings: RecordingsConfig,
    /// `llm:` the model provider the LLM proxy forwards to; `None`: the proxy's routes answer
    /// `503 llm.not_configured`.
    pub llm: Option<LlmConfig>,
    /// `agents:` the coding agents this deployment hosts; `None` when absent.
    pub agents: Option<AgentsConfig>,
    /// `install:` when the agents' CLIs are installed.
    pub install: InstallConfig,
}

/// `agents:` the adapters hosted (`agents: [codex]`, or `{adapters: [codex, claude_code],
/// default: codex}`). The `agent_host` preset hosts these when it lists none itself; the API
/// picks `default` when a request names no adapter.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentsConfig {
    /// The adapters, each a known name (`codex`, `claude_code`).
    pub adapters: Vec<Spanned<String>>,
    /// The adapter a request that names none gets; one of `adapters`.
    pub default: Option<Spanned<String>>,
}

impl AgentsConfig {
    /// The adapter names.
    pub fn names(&self) -> Vec<String> {
        self.adapters.iter().map(|a| a.value.clone()).collect()
    }
}

/// When an agent's CLI is installed (`install: {mode: ...}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InstallMode {
    /// On first use, into corral's state directory (a slow install answers 202 + Retry-After).
    #[default]
    Lazy,
    /// Only by `corral agents prepare` (an image build); a missing CLI is an error at use.
    Build,
    /// Never from the network: only what is already installed (or vendored) is used.
    Offline,
    /// Agents are not installed at all; a missing CLI is an error at use.
    Off,
}

impl InstallMode {
    /// Every mode, in order.
    pub const ALL: [InstallMode; 4] = [
        InstallMode::Lazy,
        InstallMode::Build,
        InstallMode::Offline,
        InstallMode::Off,
    ];

    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            InstallMode::Lazy => "lazy",
            InstallMode::Build => "build",
            InstallMode::Offline => "offline",
            InstallMode::Off => "off",
        }
    }
}

/// `install:`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InstallConfig {
    /// When the CLIs are installed (default `lazy`).
    pub mode: InstallMode,
}

/// `llm:` the model provider behind the LLM proxy (`/v1/chat/completions`, `/v1/responses`,
/// `/v1/messages`, `/v1/models`):
/// the names of the environment variables that hold its url and key, never the values.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LlmConfig {
    /// The variable holding the provider's OpenAI-compatible base url (`https://.../v1`).
    /// Required; `None` only while decoding a section that lacks it (an error).
    pub base_url_env: Option<Spanned<String>>,
    /// The variable holding the provider's API key; `None`: no key is sent (a local model).
    pub api_key_env: Option<Spanned<String>>,
    /// The agent name (`X-Corral-Agent`) of the root agent; `root` when absent.
    pub root_agent: Option<Spanned<String>>,
    /// The API the provider speaks; OpenAI when absent.
    pub api: Option<LlmApi>,
}

/// `llm.api`: the API the model provider speaks, which decides the proxy's routes to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LlmApi {
    /// `openai`: `/chat/completions`, `/responses`, `/models`, key as `Authorization: Bearer`.
    #[default]
    OpenAi,
    /// `anthropic`: the Messages API (`/v1/messages`, `/v1/models`), key as `x-api-key` with
    /// `anthropic-version`.
    Anthropic,
}

impl LlmConfig {
    /// The root agent's name when the config does not give one.
    pub const DEFAULT_ROOT_AGENT: &'static str = "root";

    /// The root agent's name (`root_agent`, or `root`).
    pub fn root_agent(&self) -> &str {
        self.root_agent
            .as_ref()
            .map_or(Self::DEFAULT_ROOT_AGENT, |r| r.value.as_str())
    }
}

/// `recordings:` the limits of recorded runs (issue 15).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordingsConfig {
    /// How long a recording is kept after its first event.
    pub retention: Option<Duration>,
    /// Bytes of stored events per recording.
    pub max_bytes: Option<u64>,
    /// Events per recording.
    pub max_events: Option<u64>,
    /// Live recordings per tenant.
    pub max_per_tenant: Option<u64>,
    /// Live recordings per principal (by identity) in a tenant: its share of the tenant's.
    pub max_per_principal: Option<u64>,
}

/// What of the host `corral run` shows the program besides the system directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunProfile {
    /// The current directory read-write (through the copy-on-write layer).
    Workspace,
    /// The current directory read-only.
    Readonly,
    /// No host directory; the program runs in the sandbox's empty `/tmp`.
    None,
}

/// `run:` the profile of `corral run --config F`, key by key as its flags (a flag given on the
/// command line wins over its key; `read`, `write` and `env` add to the flags' lists).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunConfig {
    /// `profile:` (`--profile`).
    pub profile: Option<Spanned<RunProfile>>,
    /// `read:` more directories or files shown read-only (`--read`), relative to the config's
    /// directory.
    pub read: Vec<Spanned<String>>,
    /// `write:` more directories or files shown read-write (`--write`), relative to the
    /// config's directory.
    pub write: Vec<Spanned<String>>,
    /// `network:` `none`, `loopback` or `{allow: [HOST:PORT, ...]}` (`--net`); `None`: the
    /// config's `isolation.network`.
    pub network: Option<corral_policy::scope::NetworkSpec>,
    /// `env:` `NAME` (its value in corral's environment) or `NAME=VALUE` (`--env`).
    pub env: Vec<Spanned<String>>,
    /// `limits.memory` (`--memory`).
    pub memory: Option<u64>,
    /// `limits.processes`: the run's process limit (no flag).
    pub processes: Option<u32>,
    /// `limits.timeout` (`--timeout`).
    pub timeout: Option<Duration>,
    /// `limits.write_quota` (`--write-quota`): what the run may add to its write paths.
    pub write_quota: Option<u64>,
    /// Where `run:` is written.
    pub span: Span,
}

/// `telemetry:` where the guard chain's spans go (OTLP over HTTP, protobuf).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP address: a base (`http://collector:4318`, spans go to its
    /// `/v1/traces`) or the traces URL itself (a path other than `/`).
    pub endpoint: String,
    /// The `service.name` resource attribute; `corral` when absent.
    pub service_name: Option<String>,
    /// The share of new traces kept, in millionths (1 to 1,000,000; `sample_ratio` 0.1 is
    /// 100,000); a call whose `traceparent` was sampled by its caller is kept whatever this is
    /// (parent-based sampling).
    pub sample_millionths: u32,
}

/// `mcp:` who may reach `/mcp` by which name. Defaults: loopback hosts only, no Origin check.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct McpConfig {
    /// `Host` values (`name` or `name:port`) `/mcp` answers; empty: the loopback names.
    pub allowed_hosts: Vec<Spanned<String>>,
    /// Browser `Origin`s (`scheme://host[:port]`) `/mcp` answers; empty: no Origin check.
    pub allowed_origins: Vec<Spanned<String>>,
    /// `tool_names: underscored`: tools are named with `__` for each `.` of the op id, for hosts
    /// that take only `^[a-zA-Z0-9_-]{1,64}$` (`false`: the op ids as they are).
    pub underscored_tool_names: bool,
}

impl McpConfig {
    /// The `Host` allow-list in force: the configured one, else the loopback names (DNS
    /// rebinding protection for a server on a developer's machine).
    pub fn hosts(&self) -> Vec<String> {
        if self.allowed_hosts.is_empty() {
            return vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        }
        self.allowed_hosts.iter().map(|h| h.value.clone()).collect()
    }
}

/// `sandbox:` the lab. On by default; `enabled: false` closes its routes, CLI commands and MCP
/// tools without deleting what it stored (turning it back on restores access).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Whether the lab answers.
    pub enabled: bool,
    /// `programs:` the external programs a run may name as its variant (run in the `linux`
    /// backend, reaching only corral's API for their run).
    pub programs: Vec<LabProgramConfig>,
    /// `scorers:` the external command scorers a run may name (`command:<name>`; run in the
    /// `linux` backend with no network).
    pub scorers: Vec<LabProgramConfig>,
    /// `record_runs:` record every lab run (its calls and its task input, under the run's id):
    /// what deterministic replay and the replay runner start from. Off by default: a recording
    /// holds values.
    pub record_runs: bool,
    /// `judges:` the external command judges a tournament may name (`command:<name>`; run in
    /// the `linux` backend with no network). A judge reads `{input, first, second, expected}`
    /// and answers `{"prefer": "first" | "second" | "tie"}`: another protocol than a scorer's,
    /// so it is declared apart.
    pub judges: Vec<LabProgramConfig>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            programs: Vec::new(),
            scorers: Vec::new(),
            record_runs: false,
            judges: Vec::new(),
        }
    }
}

/// One external program of the lab (`sandbox.programs.<name>`, `sandbox.scorers.<name>` or
/// `sandbox.judges.<name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabProgramConfig {
    /// Its name, as requests give it.
    pub name: Spanned<String>,
    /// The program and its arguments (no shell); a relative program path is the config
    /// directory's.
    pub command: Vec<Spanned<String>>,
    /// Directories it may read (besides the sandbox's system view), absolute after loading.
    pub read_paths: Vec<Spanned<String>>,
    /// Its working directory (default: the first read path, else `/`).
    pub cwd: Option<Spanned<String>>,
    /// How long one step (or one scoring) may take (default 60 s).
    pub timeout: Option<Duration>,
    /// Its memory limit, bytes (default: corral's 1 GiB cap).
    pub memory: Option<u64>,
    /// Its process limit (default 64).
    pub processes: Option<u32>,
    /// `tools:` the ops it calls, for a shadow evaluation's load-time check (`None`: not
    /// declared, so it is ineligible for shadow evaluation, `replay.tools_undeclared`).
    pub tools: Option<Vec<Spanned<String>>>,
    /// Where the entry starts.
    pub span: Span,
}

/// One upstream MCP server as written under `mcp_servers:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// Its name, the middle of its tools' op ids.
    pub name: Spanned<String>,
    /// The program and its arguments (no shell), run in the configured isolation backend.
    pub command: Vec<Spanned<String>>,
    /// Variables of corral's environment passed to it (nothing else is).
    pub env_pass: Vec<Spanned<String>>,
    /// Directories it may read (besides the sandbox's system view), absolute after loading.
    pub read_paths: Vec<Spanned<String>>,
    /// Directories it may write, absolute after loading.
    pub write_paths: Vec<Spanned<String>>,
    /// Its working directory (default: the first write path, else the first read path, else `/`).
    pub cwd: Option<Spanned<String>>,
    /// How long one tool call may take (default 60 s).
    pub call_timeout: Option<Duration>,
    /// Memory limit of the server process, bytes (a cgroup in the linux backend).
    pub memory: Option<u64>,
    /// Process limit of the server (default: the backend's, 1024 in the linux backend).
    pub processes: Option<u32>,
    /// The tools corral declares, with their effects; tools not declared here are `admin`.
    pub tools: Vec<McpToolConfig>,
    /// The server's network; `None`: the backend's (`isolation.network`).
    pub network: Option<corral_policy::scope::NetworkSpec>,
    /// Where the entry starts.
    pub span: Span,
}

/// One declared tool of an upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpToolConfig {
    /// The tool's name as the upstream lists it.
    pub name: Spanned<String>,
    /// Its effects; `None` when omitted (treated as admin, explicit-only).
    pub effects: Option<Vec<Effect>>,
    /// A raised tier.
    pub tier: Option<Tier>,
    /// Whether calling it twice with the same arguments does what calling it once does.
    pub idempotent: bool,
}

/// `autonomy:` either a level (`autonomy: L2`) or `{level, pins}`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AutonomyConfig {
    /// The process-wide level; `None`: no process-wide restriction (pins still apply).
    pub level: Option<AutonomyLevel>,
    /// Per-principal pins, in order.
    pub pins: Vec<AutonomyPin>,
    /// Where `autonomy:` was written.
    pub span: Span,
}

/// One `autonomy.pins` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutonomyPin {
    /// Who: `kind:service`, `id:x` or `role:r`.
    pub principal: PrincipalSelector,
    /// The level they are pinned to.
    pub level: AutonomyLevel,
    /// Where the pin was written.
    pub span: Span,
}

/// `roles:` RBAC by tier (present = on).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RolesConfig {
    /// Per-op role overrides (`op id -> role`); the override wins over the tier's role.
    pub overrides: Vec<(Spanned<String>, Role)>,
    /// Where `roles:` was written.
    pub span: Span,
}

/// `guardrails.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GuardrailsMode {
    /// Confirm- and destructive-tier calls wait for a human's approval.
    #[default]
    Enforce,
    /// Confirm- and destructive-tier calls answer `dry_run` and never run.
    DryRun,
}

/// `guardrails.confirmations`: where pending actions and approvals live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConfirmationBackend {
    /// The store (`storage:`: SQLite by default, Postgres for replicas); survives restarts.
    #[default]
    Store,
    /// This process only; lost on restart; refused with `replicas` above 1.
    Memory,
}

/// `guardrails:`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardrailsConfig {
    /// Enforce or dry-run.
    pub mode: GuardrailsMode,
    /// How long a pending action (and its approval, and its stored outcome) lives.
    pub confirmation_ttl: Duration,
    /// Where confirmations live.
    pub confirmations: ConfirmationBackend,
    /// How many pending actions one principal may have at once (20 by default).
    pub max_pending: u64,
    /// How many replicas of `corral serve` share this config (declared; 1 by default).
    pub replicas: u64,
}

impl Default for GuardrailsConfig {
    fn default() -> Self {
        Self {
            mode: GuardrailsMode::Enforce,
            confirmation_ttl: Duration::from_secs(300),
            confirmations: ConfirmationBackend::Store,
            max_pending: 20,
            replicas: 1,
        }
    }
}

/// `budgets:` per run (calls sharing an `X-Corral-Run` id). `0` (or absent) disables one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BudgetsConfig {
    /// Calls per run.
    pub max_calls: u64,
    /// Calls per run to one op.
    pub max_calls_per_op: Vec<(Spanned<String>, u64)>,
    /// Time from a run's first call.
    pub max_wall_time: Duration,
    /// Bytes of results per run.
    pub max_output_bytes: u64,
    /// Model tokens (prompt plus completion) per run, metered by the LLM proxy.
    pub tokens: u64,
    /// `replay:` the ceiling of one shadow evaluation's replay runs (purpose `replay`).
    pub replay: ReplayBudget,
    /// `judge:` the ceiling of one tournament's judge calls (purpose `judge`).
    pub judge: JudgeBudget,
}

/// The replay runs' ceiling (`budgets.replay`), per shadow evaluation: separate from the
/// judge's, so replay, which dominates, can never spend the grading budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayBudget {
    /// Runs (default [`ReplayBudget::DEFAULT_MAX_RUNS`]).
    pub max_runs: u64,
    /// Gateway calls, summed over the runs (default [`ReplayBudget::DEFAULT_MAX_CALLS`]).
    pub max_calls: u64,
}

impl ReplayBudget {
    /// The safe default of `max_runs`.
    pub const DEFAULT_MAX_RUNS: u64 = 100;
    /// The safe default of `max_calls`.
    pub const DEFAULT_MAX_CALLS: u64 = 10_000;
}

impl Default for ReplayBudget {
    fn default() -> Self {
        Self {
            max_runs: Self::DEFAULT_MAX_RUNS,
            max_calls: Self::DEFAULT_MAX_CALLS,
        }
    }
}

/// The judge calls' ceiling (`budgets.judge`), per tournament.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JudgeBudget {
    /// Judge calls (default [`JudgeBudget::DEFAULT_MAX_CALLS`]).
    pub max_calls: u64,
}

impl JudgeBudget {
    /// The safe default of `max_calls`.
    pub const DEFAULT_MAX_CALLS: u64 = 1_000;
}

impl Default for JudgeBudget {
    fn default() -> Self {
        Self {
            max_calls: Self::DEFAULT_MAX_CALLS,
        }
    }
}

/// One preset in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresetUse {
    /// Which.
    pub preset: Preset,
    /// Its options (root falls back to the top-level `root`).
    pub options: PresetOptions,
    /// Where it was named.
    pub span: Span,
    /// `confirm: never` (mapping form): the confirm-tier calls its rules allow run without a
    /// human's approval; its destructive ops stay confirmed.
    pub confirm_never: Option<Span>,
    /// `reason:` (mapping form): why it runs unattended on purpose.
    pub reason: Option<String>,
}

/// One rule as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleConfig {
    /// The name given, or `rules[i]`.
    pub name: String,
    /// Allow or deny.
    pub effect: RuleEffect,
    /// Selectors as written.
    pub selectors: Vec<Spanned<String>>,
    /// Principal selectors as written.
    pub principals: Vec<Spanned<String>>,
    /// Path scope.
    pub paths: Option<Spanned<PathScopeSpec>>,
    /// Command scope.
    pub commands: Option<Spanned<CommandScopeSpec>>,
    /// Where each of the command scope's allow patterns was written, aligned with
    /// `commands.allow`.
    pub command_allow_spans: Vec<Span>,
    /// Url scope.
    pub urls: Option<Spanned<UrlScopeSpec>>,
    /// Agent scope (allow rules only).
    pub agents: Option<Spanned<AgentScopeSpec>>,
    /// Limits.
    pub limits: Limits,
    /// Reason shown on a deny.
    pub reason: Option<String>,
    /// `confirm: never`: the confirm-tier calls this rule allows run without a human's approval.
    pub confirm_never: Option<Span>,
    /// Where the rule starts.
    pub span: Span,
    /// The key path, `rules[i]`.
    pub location: String,
}

/// One custom op as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomOpConfig {
    /// The op id.
    pub id: Spanned<String>,
    /// The argv template.
    pub argv: Vec<Spanned<String>>,
    /// Declared params, in order.
    pub params: Vec<ParamConfig>,
    /// Working directory; when omitted, see [`CustomOpConfig::workdir`].
    pub cwd: Option<String>,
    /// Directories (or files) the program may read besides its cwd.
    pub read_paths: Vec<Spanned<String>>,
    /// Directories (or files) the program may write. With the `write` effect and none declared
    /// (and no writable path param), the cwd is writable.
    pub write_paths: Vec<Spanned<String>>,
    /// Timeout.
    pub timeout: Option<Duration>,
    /// Effects; `None` when omitted (treated as admin, explicit-only).
    pub effects: Option<Vec<Effect>>,
    /// Writes land only in the run's ephemeral workspace.
    pub contained: bool,
    /// Mounted only by its exact id.
    pub explicit_only: bool,
    /// A raised tier.
    pub tier: Option<Tier>,
    /// One line for `describe`.
    pub summary: String,
    /// The program's network; `None`: the backend's (`isolation.network`).
    pub network: Option<corral_policy::scope::NetworkSpec>,
}

impl CustomOpConfig {
    /// The working directory the op runs in: its `cwd`, else the config's `root`, else the
    /// root of its first path param. `None` when there is none of them: the program then runs
    /// in its sandbox's private, empty `/tmp`, and sees no host directory but its paths.
    pub fn workdir(&self, config_root: Option<&str>) -> Option<String> {
        self.cwd
            .clone()
            .or_else(|| config_root.map(str::to_owned))
            .or_else(|| {
                self.params.iter().find_map(|p| match &p.kind {
                    ParamKind::Path { root: Some(r) } => Some(r.clone()),
                    _ => None,
                })
            })
    }

    /// Whether the op declares the `write` effect.
    pub fn writes(&self) -> bool {
        self.effects
            .as_ref()
            .is_some_and(|e| e.contains(&Effect::Write))
    }

    /// Where the program may write, as the config says it: the declared `write_paths`; with the
    /// `write` effect and none declared (and no writable path param), the working directory.
    pub fn declared_write_paths(&self, config_root: Option<&str>) -> Vec<String> {
        if !self.writes() {
            return Vec::new();
        }
        let declared: Vec<String> = self.write_paths.iter().map(|p| p.value.clone()).collect();
        if declared.is_empty() && !self.params.iter().any(|p| p.writable) {
            return self.workdir(config_root).into_iter().collect();
        }
        declared
    }
}

/// One custom op param.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamConfig {
    /// Its name.
    pub name: Spanned<String>,
    /// Its type.
    pub kind: ParamKind,
    /// Whether a call must give it.
    pub required: bool,
    /// A path param the program may write (bound read-write; needs the op's `write` effect).
    pub writable: bool,
}

/// `auth:`
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthConfig {
    /// Static tokens.
    pub tokens: Vec<TokenConfig>,
    /// JWT bearer tokens.
    pub jwt: Option<JwtSpec>,
}

/// `auth.jwt:` how bearer JWTs are verified and mapped to principals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtSpec {
    /// The variable holding the HS256 secret (at least 32 characters).
    pub hs256_secret_env: Option<Spanned<String>>,
    /// A PEM file with the RS256 public key.
    pub rs256_public_key_file: Option<Spanned<String>>,
    /// Required `iss`.
    pub issuer: Option<String>,
    /// Required `aud`.
    pub audience: Option<String>,
    /// The claim holding roles (default `roles`).
    pub roles_claim: String,
    /// The claim holding the tenant (default `tenant`).
    pub tenant_claim: String,
    /// A claim and value that mark a service principal.
    pub service_claim: Option<(String, String)>,
    /// The claim holding the run a token is scoped to (default `run`).
    pub run_claim: String,
    /// Where `jwt:` was written.
    pub span: Span,
}

/// A JWT verification key, read at load.
#[derive(Clone, PartialEq, Eq)]
pub enum JwtKey {
    /// An HS256 shared secret.
    Hs256(Secret),
    /// An RS256 public key, PEM.
    Rs256Pem(Vec<u8>),
}

impl fmt::Debug for JwtKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JwtKey::Hs256(_) => f.write_str("Hs256([redacted])"),
            JwtKey::Rs256Pem(_) => f.write_str("Rs256Pem"),
        }
    }
}

/// One static token. The secret itself lives in the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenConfig {
    /// The principal id.
    pub id: Spanned<String>,
    /// Roles.
    pub roles: Vec<String>,
    /// Kind.
    pub kind: PrincipalKind,
    /// The environment variable that holds the secret.
    pub token_env: Spanned<String>,
    /// A run-scoped token: every call it makes belongs to this run (its budgets always apply).
    pub run: Option<Spanned<String>>,
    /// Every call the token makes is recorded (only with `run:`).
    pub record: bool,
}

/// Where audit events go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AuditSink {
    /// The store (SQLite by default).
    #[default]
    Store,
    /// JSON lines on stderr.
    Stderr,
    /// JSON lines appended to a file.
    File(String),
    /// Nowhere (a lint warning).
    Off,
}

/// `audit:`
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditConfig {
    /// The sink.
    pub sink: AuditSink,
}

/// Which backend runs commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendKind {
    /// Namespaces, landlock, seccomp: `isolated: true`. The default.
    #[default]
    Linux,
    /// A plain child process: `isolated: false`, and every result says so.
    Process,
}

/// Network access inside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkMode {
    /// A network namespace with nothing in it (not even loopback up).
    #[default]
    None,
    /// A network namespace with only loopback up.
    Loopback,
}

/// `isolation:`
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IsolationConfig {
    /// The backend (`linux` unless the config says `process`).
    pub backend: BackendKind,
    /// Network inside the sandbox.
    pub network: NetworkMode,
    /// `cgroup_parent`: a cgroup v2 directory per-run cgroups go under, instead of corral's own
    /// cgroup (absolute).
    pub cgroup_parent: Option<std::path::PathBuf>,
    /// `host_uids`: which host ids a sandbox runs as when corral is host root: `auto` (the
    /// default: corral's `/etc/subuid` range, else a fixed unused one), `root`, or
    /// `START:COUNT`. Kept as written; the backend resolves it.
    pub host_uids: Option<String>,
}

/// `storage:`
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StorageConfig {
    /// `sqlite://PATH` or `postgres://...`; `None` means SQLite in the state directory.
    pub url: Option<String>,
}

/// One `state_only:` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateOnlyEntry {
    /// The op id.
    pub op: Spanned<String>,
    /// Why it changes nothing outside the agent's own session or user state.
    pub reason: String,
}

/// A secret read from the environment. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: String) -> Self {
        Self(s)
    }

    /// The secret, for constant-time comparison by the server.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// `console:` the web console's sign-in limit, and the reverse proxies trusted to say which
/// client they forward (read at start-up).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsoleConfig {
    /// `sign_in_rate:` as written; `None`: the default, [`ConsoleConfig::DEFAULT_SIGN_IN_RATE`].
    pub sign_in_rate: Option<SignInRate>,
    /// `trusted_proxies:` networks whose direct peers' `X-Forwarded-For` names the client;
    /// empty: the header is never read.
    pub trusted_proxies: Vec<Cidr>,
}

impl ConsoleConfig {
    /// Sign-in attempts per client address and per presented identity when `sign_in_rate` is
    /// not written: 10 a minute.
    pub const DEFAULT_SIGN_IN_RATE: Rate = Rate {
        count: 10,
        per: Duration::from_secs(60),
    };

    /// The sign-in limit in force; `None`: `off`, no limit.
    pub fn sign_in_limit(&self) -> Option<Rate> {
        match self.sign_in_rate {
            None => Some(Self::DEFAULT_SIGN_IN_RATE),
            Some(SignInRate::Limit(r)) => Some(r),
            Some(SignInRate::Off) => None,
        }
    }
}

/// `console.sign_in_rate:` a rate, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignInRate {
    /// At most this many attempts per window.
    Limit(Rate),
    /// No limit (the lint warns).
    Off,
}

/// A network: an address and how many of its leading bits count (`10.0.0.0/8`, `fd00::/8`;
/// a bare address is that one host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    // INVARIANT (no host bits): the bits of `addr` past `prefix` are zero; `parse` refuses
    // anything else, so `Display` writes back what was meant.
    addr: std::net::IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `address/prefix` or a bare address; `Err` says what is wrong.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: std::net::IpAddr = a
            .parse()
            .map_err(|_| format!("`{a}` is not an IPv4 or IPv6 address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|n| *n <= max && p.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| format!("the prefix length `{p}` is not 0 to {max}"))?,
        };
        let network = Self {
            addr: mask(addr, prefix),
            prefix,
        };
        if network.addr != addr {
            return Err(format!(
                "`{s}` has bits set past its /{prefix} prefix; the network is `{network}`"
            ));
        }
        Ok(network)
    }

    /// Whether `ip` is in this network (an IPv4-mapped IPv6 address counts as its IPv4 one).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
            v4 => v4,
        };
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == self.addr
    }
}

/// `ip` with every bit past the first `prefix` cleared.
fn mask(ip: std::net::IpAddr, prefix: u8) -> std::net::IpAddr {
    let keep = |bits: u32| {
        let p = u32::from(prefix).min(bits);
        if p == 0 {
            0
        } else {
            u128::MAX << (128 - p) >> (128 - bits)
        }
    };
    match ip {
        std::net::IpAddr::V4(v4) => {
            let m = u32::try_from(keep(32)).unwrap_or(u32::MAX);
            std::net::IpAddr::V4((u32::from(v4) & m).into())
        }
        std::net::IpAddr::V6(v6) => std::net::IpAddr::V6((u128::from(v6) & keep(128)).into()),
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}
