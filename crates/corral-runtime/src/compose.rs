//! From a loaded config to the deployment (engine + op handlers + guard settings), the upstream
//! servers' specs and the authenticator: pure functions of the config (and the upstreams' tool
//! lists), used at build and on reload. The only place that knows every concrete op.

use std::path::PathBuf;
use std::sync::Arc;

use corral_config::Loaded;
use corral_config::model::{CustomOpConfig, GuardrailsMode, JwtKey};
use corral_guard::guardrails::{Budgets, GuardPolicy, Mode};
use corral_guard::{Caller, Deployment};
use corral_mcp::upstream::{DEFAULT_CALL_TIMEOUT, UpstreamSpec, Upstreams};
use corral_ops::exec::{CommandsRun, CustomOp, CustomRun};
use corral_ops::files::{FileOp, FileOpKind};
use corral_ops::health::Health;
use corral_ops::http::{FetchConfig, HttpFetch};
use corral_ops::{Op, Registry};
use corral_policy::{Catalog, OpSpec, ParamKind};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::json;

use crate::agents::{AgentHost, AgentInstall, AgentSessionOp};
use crate::auth::{Authenticator, JwtConfig};

/// The handlers for every op in `catalog` (the config's, completed by the upstreams'); the
/// agents host's ops are served by `agents` (none without one: they answer 500).
pub fn registry(
    loaded: &Loaded,
    catalog: &Catalog,
    upstreams: &Upstreams,
    agents: Option<&Arc<AgentHost>>,
) -> Registry {
    let secret_envs = loaded.secret_envs();
    let mut ops: Vec<Arc<dyn Op>> = Vec::new();
    for spec in catalog.iter() {
        let spec = spec.clone();
        let file = |k| -> Arc<dyn Op> { Arc::new(FileOp::new(spec.clone(), k)) };
        let op: Arc<dyn Op> = match spec.id.as_str() {
            "core.health" => Arc::new(Health::new(spec.clone())),
            "files.list" => file(FileOpKind::List),
            "files.stat" => file(FileOpKind::Stat),
            "files.read" => file(FileOpKind::Read),
            "files.write" => file(FileOpKind::Write),
            "files.delete" => file(FileOpKind::Delete),
            "files.download" => file(FileOpKind::Download),
            "commands.run" => Arc::new(CommandsRun::new(spec.clone(), secret_envs.clone())),
            "http.fetch" | "http.download" => {
                Arc::new(HttpFetch::new(spec.clone(), FetchConfig::default()))
            }
            "llm.chat" => Arc::new(LlmRouteOnly { spec: spec.clone() }),
            id if id.starts_with("agents.") => match agent_op(&spec, agents) {
                Some(op) => op,
                None => continue,
            },
            id if id.starts_with("mcp.") => match upstreams.handler(&spec) {
                Some(op) => op,
                // A runtime that does not start the upstream servers (a one-shot local call of
                // another op) still has their declared tools in its catalog.
                None if upstreams.is_empty() && !loaded.config.mcp_servers.is_empty() => {
                    Arc::new(NotStarted { spec: spec.clone() })
                }
                None => {
                    tracing::error!(
                        op = id,
                        "upstream op has no running server; it will answer 500"
                    );
                    continue;
                }
            },
            id => match loaded.config.custom.iter().find(|c| c.id.value == id) {
                Some(c) => Arc::new(CustomOp::new(
                    spec.clone(),
                    custom_run(c, loaded),
                    secret_envs.clone(),
                )),
                None => {
                    tracing::error!(
                        op = id,
                        "op in the catalog has no handler; it will answer 500"
                    );
                    continue;
                }
            },
        };
        ops.push(op);
    }
    Registry::new(catalog.clone(), ops)
}

/// The handler of an agents-host op (`agents.<a>.install`, `.run`, `.sessions.*`); `None`
/// for the generic gate `agents.sessions.create` (decided in the engine, never run) and
/// without a host.
fn agent_op(spec: &OpSpec, agents: Option<&Arc<AgentHost>>) -> Option<Arc<dyn Op>> {
    let host = agents?;
    if spec.id.as_str().ends_with(".install") {
        return AgentInstall::new(spec.clone(), Arc::clone(host))
            .map(|o| Arc::new(o) as Arc<dyn Op>);
    }
    AgentSessionOp::new(spec.clone(), Arc::clone(host)).map(|o| Arc::new(o) as Arc<dyn Op>)
}

/// `llm.chat` called as an op (`POST /ops/llm.chat`, MCP): the model is reached through the LLM
/// proxy's routes only, which decide each request through the guard chain as this op and
/// forward it themselves; this handler answers everything else with where to go.
#[derive(Debug)]
struct LlmRouteOnly {
    spec: OpSpec,
}

impl Op for LlmRouteOnly {
    fn spec(&self) -> &OpSpec {
        &self.spec
    }

    fn call(
        &self,
        _ctx: corral_ops::OpCtx,
    ) -> corral_exec::BoxFuture<'_, Result<corral_ops::OpOutput, corral_ops::OpError>> {
        Box::pin(async move {
            Err(corral_ops::OpError::new(
                corral_policy::codes::LLM_BAD_REQUEST,
                "`llm.chat` is the LLM proxy's op: send the chat completion to `POST /v1/chat/completions` (OpenAI's shape) with your corral token",
            ))
        })
    }
}

/// An upstream tool of a runtime that did not start the upstream servers: every call answers
/// `upstream.unavailable`.
#[derive(Debug)]
struct NotStarted {
    spec: OpSpec,
}

impl Op for NotStarted {
    fn spec(&self) -> &OpSpec {
        &self.spec
    }

    fn call(
        &self,
        _ctx: corral_ops::OpCtx,
    ) -> corral_exec::BoxFuture<'_, Result<corral_ops::OpOutput, corral_ops::OpError>> {
        let id = self.spec.id.to_string();
        Box::pin(async move {
            Err(corral_ops::OpError::new(
                corral_policy::codes::UPSTREAM_UNAVAILABLE,
                format!(
                    "`{id}` is a tool of an upstream MCP server, and this process did not start the upstream servers; call it through `corral serve`, `corral mcp` or `corral call --local {id}`"
                ),
            ))
        })
    }
}

/// What a custom op runs and may see, from its config.
fn custom_run(c: &CustomOpConfig, loaded: &Loaded) -> CustomRun {
    let root = loaded.config.root.as_ref().map(|r| r.value.as_str());
    CustomRun {
        argv: c.argv.iter().map(|t| t.value.clone()).collect(),
        cwd: c.workdir(root).map(PathBuf::from),
        read_paths: c
            .read_paths
            .iter()
            .map(|p| PathBuf::from(&p.value))
            .collect(),
        write_paths: c
            .declared_write_paths(root)
            .into_iter()
            .map(PathBuf::from)
            .collect(),
        writable_params: c
            .params
            .iter()
            .filter(|p| p.writable && c.writes())
            .map(|p| p.name.value.clone())
            .collect(),
        timeout: c.timeout,
        network: c.network.clone(),
    }
}

/// The deployment of a loaded config, with the tools its upstream MCP servers listed, waiting
/// up to `wait` for servers that are still starting (start-up waits; a reload does not, so the
/// old deployment is replaced at once and the refresher completes the new one when they list).
pub async fn deployment(
    loaded: &Loaded,
    upstreams: &Upstreams,
    wait: std::time::Duration,
) -> Deployment {
    deployment_with(loaded, upstreams, wait, None).await
}

/// [`deployment`] with the agents host that serves the `agents.*` ops.
pub async fn deployment_with(
    loaded: &Loaded,
    upstreams: &Upstreams,
    wait: std::time::Duration,
    agents: Option<&Arc<AgentHost>>,
) -> Deployment {
    let mut catalog = loaded.catalog.clone();
    upstreams.complete_catalog(&mut catalog, wait).await;
    let (policy, protected) = protected_policy(loaded);
    Deployment {
        engine: corral_policy::Engine::new(catalog.clone(), policy),
        registry: registry(loaded, &catalog, upstreams, agents),
        protected,
        guard: guard_policy(loaded, &catalog, upstreams),
    }
}

/// The config's policy with corral's own files protected as they resolve now, and those files
/// (resolved) for the file ops' own check: every protected path is compared in its resolved
/// form (issue 11 item 3). The state directory is created first (as the store does), so a
/// symlink in its path is resolved too.
pub fn protected_policy(loaded: &Loaded) -> (corral_policy::Policy, Vec<PathBuf>) {
    let protected = own_paths(loaded);
    let mut policy = loaded.policy.clone();
    for form in &protected {
        policy = policy.protect(&form.to_string_lossy());
    }
    (policy, protected)
}

/// corral's own files (state directory, config, key files, a SQLite database outside the state
/// directory with its `-wal`, `-shm` and `-journal` beside it), each as configured and resolved
/// now, after creating the state directory (as the store does) so a symlink in its path is
/// resolved too.
pub fn own_paths(loaded: &Loaded) -> Vec<PathBuf> {
    if let Err(e) = std::fs::create_dir_all(&loaded.state_dir) {
        tracing::warn!(
            state_dir = %loaded.state_dir.display(),
            "cannot create the state directory: {e}"
        );
    }
    let mut protected = Vec::new();
    for f in corral_config::protect::resolved_again(loaded) {
        // The SQLite database's journals beside it are the database too (its latest pages,
        // which SQLite trusts when it opens it again): as much corral's own.
        let suffixes: &[&str] = match f.key {
            "storage.url" => &["", "-wal", "-shm", "-journal"],
            _ => &[""],
        };
        for form in f.forms() {
            for suffix in suffixes {
                let mut name = form.as_os_str().to_owned();
                name.push(suffix);
                let path = PathBuf::from(name);
                if !protected.contains(&path) {
                    protected.push(path);
                }
            }
        }
    }
    protected
}

/// The running deployment with its upstream tools taken again from the config's declarations
/// and the upstreams' current lists (one came up after start-up, restarted, or changed its list):
/// the same policy and guard settings, fresh `mcp.*` ops (a tool no longer listed goes away),
/// handlers and versions, every other handler kept.
pub async fn refresh_upstream_tools(current: &Deployment, upstreams: &Upstreams) -> Deployment {
    let mut catalog = current.registry.catalog().clone();
    upstreams
        .complete_catalog(&mut catalog, std::time::Duration::ZERO)
        .await;
    let mut ops: Vec<Arc<dyn Op>> = current
        .registry
        .handlers()
        .filter(|h| !h.spec().id.as_str().starts_with("mcp."))
        .cloned()
        .collect();
    let mut guard = current.guard.clone();
    guard.op_versions.retain(|id, _| !id.starts_with("mcp."));
    for spec in catalog.iter().filter(|s| s.id.as_str().starts_with("mcp.")) {
        if let Some(h) = upstreams.handler(spec) {
            ops.push(h);
        }
        guard.op_versions.insert(
            spec.id.to_string(),
            spec_version(spec, upstream_runs(spec, upstreams)),
        );
    }
    Deployment {
        engine: corral_policy::Engine::new(catalog.clone(), current.engine.policy().clone()),
        registry: Registry::new(catalog, ops),
        protected: current.protected.clone(),
        guard,
    }
}

/// The upstream tools (`mcp.*` ops) the config declares, before any server's list completes
/// them.
pub fn declared_upstream_tools(loaded: &Loaded) -> Vec<OpSpec> {
    loaded
        .catalog
        .iter()
        .filter(|s| s.id.namespace() == "mcp")
        .cloned()
        .collect()
}

/// The op ids `disabled_ops` removes (never mounted, upstream tools included).
pub fn disabled_ops(loaded: &Loaded) -> Vec<String> {
    loaded
        .config
        .disabled_ops
        .iter()
        .map(|o| o.value.clone())
        .collect()
}

/// The replay and judge ceilings (`budgets.replay`, `budgets.judge`).
pub fn lab_ceilings(loaded: &Loaded) -> corral_lab::shadow::Ceilings {
    let b = &loaded.config.budgets;
    corral_lab::shadow::Ceilings {
        replay_max_runs: b.replay.max_runs,
        replay_max_calls: b.replay.max_calls,
        judge_max_calls: b.judge.max_calls,
    }
}

/// The lab's declared programs, scorers and judges (`sandbox.programs`, `sandbox.scorers`,
/// `sandbox.judges`), paths made
/// absolute against the config's directory, run by `backend` (the deployment's: a program runs
/// only if it is `linux`).
pub fn lab_programs(
    loaded: &Loaded,
    backend: Arc<dyn corral_exec::Backend>,
) -> corral_lab::program::Programs {
    use corral_lab::program::{DEFAULT_TIMEOUT, ProgramSpec};
    // Corral's own files stay hidden from a program even under its `read_paths`.
    let protected = own_paths(loaded);
    let spec = |p: &corral_config::model::LabProgramConfig| {
        let read_paths: Vec<PathBuf> = p
            .read_paths
            .iter()
            .map(|r| loaded.absolute(&r.value))
            .collect();
        let mut argv: Vec<String> = p.command.iter().map(|c| c.value.clone()).collect();
        if let Some(program) = argv.first_mut()
            && program.contains('/')
        {
            *program = loaded.absolute(program).to_string_lossy().into_owned();
        }
        let cwd = p
            .cwd
            .as_ref()
            .map(|c| loaded.absolute(&c.value))
            .or_else(|| read_paths.first().cloned())
            .unwrap_or_else(|| PathBuf::from("/"));
        (
            p.name.value.clone(),
            Arc::new(ProgramSpec {
                name: p.name.value.clone(),
                argv,
                cwd,
                read_paths,
                timeout: p.timeout.unwrap_or(DEFAULT_TIMEOUT),
                memory: p.memory,
                processes: p.processes,
                protected: protected.clone(),
                tools: p
                    .tools
                    .as_ref()
                    .map(|t| t.iter().map(|o| o.value.clone()).collect()),
            }),
        )
    };
    corral_lab::program::Programs {
        agents: loaded.config.sandbox.programs.iter().map(spec).collect(),
        scorers: loaded.config.sandbox.scorers.iter().map(spec).collect(),
        judges: loaded.config.sandbox.judges.iter().map(spec).collect(),
        backend: Some(backend),
    }
}

/// How to run each `mcp_servers:` entry: paths made absolute against the config's directory,
/// the environment exactly `env_pass` (never a secret's variable) plus a default `PATH`.
pub fn upstream_specs(loaded: &Loaded) -> Vec<UpstreamSpec> {
    let secrets = loaded.secret_envs();
    let protected = own_paths(loaded);
    loaded
        .config
        .mcp_servers
        .iter()
        .map(|s| {
            let paths = |v: &[corral_config::model::Spanned<String>]| -> Vec<PathBuf> {
                v.iter().map(|p| loaded.absolute(&p.value)).collect()
            };
            let read_paths = paths(&s.read_paths);
            let write_paths = paths(&s.write_paths);
            let mut env: Vec<(String, String)> = s
                .env_pass
                .iter()
                .filter(|n| !secrets.contains(&n.value))
                .filter_map(|n| std::env::var(&n.value).ok().map(|v| (n.value.clone(), v)))
                .collect();
            if !env.iter().any(|(k, _)| k == "PATH") {
                env.push(("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()));
            }
            let cwd = s
                .cwd
                .as_ref()
                .map(|c| loaded.absolute(&c.value))
                .or_else(|| write_paths.first().cloned())
                .or_else(|| read_paths.first().cloned())
                .unwrap_or_else(|| PathBuf::from("/"));
            let mut argv: Vec<String> = s.command.iter().map(|c| c.value.clone()).collect();
            if let Some(program) = argv.first_mut()
                && program.contains('/')
            {
                *program = loaded.absolute(program).to_string_lossy().into_owned();
            }
            UpstreamSpec {
                name: s.name.value.clone(),
                argv,
                env,
                cwd,
                read_paths,
                write_paths,
                call_timeout: s.call_timeout.unwrap_or(DEFAULT_CALL_TIMEOUT),
                limits: corral_exec::ResourceLimits {
                    memory: s.memory,
                    // 1 GiB unless the server's entry sets `memory` (issue 11 item 5).
                    default_memory: Some(corral_exec::DEFAULT_MEMORY),
                    processes: s.processes,
                    ..corral_exec::ResourceLimits::default()
                },
                network: s.network.clone(),
                protected: protected.clone(),
            }
        })
        .collect()
}

/// An op's version: a digest of what it is (effects, tier, params) and what it runs: for a
/// custom op its argv template, cwd and timeout; for an upstream tool its server's command,
/// paths, variable names and limits. Part of a confirmation's key, so an approval given for one
/// definition of an op never runs another (a reload that changes the argv, or points an upstream
/// server at another program, needs a new approval).
pub fn op_version(spec: &OpSpec, loaded: &Loaded, upstreams: &Upstreams) -> String {
    let custom = loaded
        .config
        .custom
        .iter()
        .find(|c| c.id.value == spec.id.as_str())
        .map(|c| {
            let run = custom_run(c, loaded);
            json!({
                "argv": run.argv,
                "cwd": run.cwd,
                "read_paths": run.read_paths,
                "write_paths": run.write_paths,
                "writable_params": run.writable_params,
                "timeout_ms": c.timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
                "network": c.network.as_ref().map(corral_policy::scope::NetworkSpec::summary),
            })
        });
    spec_version(spec, custom.or_else(|| upstream_runs(spec, upstreams)))
}

/// For an upstream tool (`mcp.<server>.<tool>`): how its server is run. Variable names only:
/// their values may be secrets, and must not end up in a digest that is stored.
fn upstream_runs(spec: &OpSpec, upstreams: &Upstreams) -> Option<serde_json::Value> {
    let server = spec.id.as_str().strip_prefix("mcp.")?.split_once('.')?.0;
    let u = upstreams.spec(server)?;
    Some(json!({
        "upstream": {
            "argv": u.argv,
            "cwd": u.cwd,
            "env": u.env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            "read_paths": u.read_paths,
            "write_paths": u.write_paths,
            "call_timeout_ms": u64::try_from(u.call_timeout.as_millis()).unwrap_or(u64::MAX),
            "memory": u.limits.memory,
            "processes": u.limits.processes,
            "network": u.network.as_ref().map(corral_policy::scope::NetworkSpec::summary),
        }
    }))
}

/// `op_version` from the spec and, for a custom op, what it runs.
fn spec_version(spec: &OpSpec, custom: Option<serde_json::Value>) -> String {
    // By name: the order an upstream's schema lists its properties in is not part of the op.
    let mut ordered: Vec<&corral_policy::ParamSpec> = spec.params.iter().collect();
    ordered.sort_by(|a, b| a.name.cmp(&b.name));
    let params: Vec<serde_json::Value> = ordered
        .into_iter()
        .map(|p| {
            let extra = match &p.kind {
                ParamKind::Path { root } => json!(root),
                ParamKind::Enum(values) => json!(values),
                _ => serde_json::Value::Null,
            };
            json!({"name": p.name, "type": p.kind.name(), "required": p.required, "extra": extra})
        })
        .collect();
    let digest = corral_guard::canonical::digest(&json!({
        "id": spec.id.as_str(),
        "effects": spec.effective_effects().to_string(),
        "tier": spec.tier().as_str(),
        "params": params,
        "contained": spec.contained,
        "explicit_only": spec.explicit_only,
        "custom": custom,
    }));
    format!("sha256:{}", &digest[..16])
}

/// The guard steps' settings of a loaded config (autonomy, RBAC, mode, confirmation, budgets,
/// op versions).
pub fn guard_policy(loaded: &Loaded, catalog: &Catalog, upstreams: &Upstreams) -> GuardPolicy {
    let mut g = guard_settings(loaded);
    g.op_versions = catalog
        .iter()
        .map(|spec| (spec.id.to_string(), op_version(spec, loaded, upstreams)))
        .collect();
    g
}

/// The guard steps' settings a config alone decides (all but the op versions, which need the
/// upstreams): what `corral explain` runs offline.
pub fn guard_settings(loaded: &Loaded) -> GuardPolicy {
    let c = &loaded.config;
    let mut g = GuardPolicy::new();
    if let Some(a) = &c.autonomy {
        g.autonomy = a.level;
        g.pins = a
            .pins
            .iter()
            .map(|p| (p.principal.clone(), p.level))
            .collect();
    }
    // On whenever a principal can carry a tier role (issue 11 item 7), with the overrides of
    // `roles:` when there is one.
    g.rbac = loaded.rbac_cause().map(|_| {
        c.roles
            .iter()
            .flat_map(|r| r.overrides.iter())
            .map(|(op, role)| (op.value.clone(), *role))
            .collect()
    });
    g.mode = match c.guardrails.mode {
        GuardrailsMode::Enforce => Mode::Enforce,
        GuardrailsMode::DryRun => Mode::DryRun,
    };
    g.confirmation_ttl = c.guardrails.confirmation_ttl;
    g.max_pending = c.guardrails.max_pending;
    g.confirm_never_rules = loaded
        .origins
        .iter()
        .enumerate()
        .filter(|(_, o)| o.confirm_never)
        .map(|(i, _)| i)
        .collect();
    g.budgets = Budgets {
        max_calls: c.budgets.max_calls,
        max_calls_per_op: c
            .budgets
            .max_calls_per_op
            .iter()
            .map(|(op, n)| (op.value.clone(), *n))
            .collect(),
        max_wall_time: c.budgets.max_wall_time,
        max_output_bytes: c.budgets.max_output_bytes,
        max_tokens: c.budgets.tokens,
    };
    g
}

/// The authenticator of a loaded config.
pub fn authenticator(loaded: &Loaded) -> Result<Authenticator, String> {
    let tokens = loaded
        .tokens
        .iter()
        .map(|t| {
            let caller = Caller::new(t.principal.clone())
                .with_run(t.run.clone())
                .with_record(t.record);
            (t.secret.expose().to_owned(), caller)
        })
        .collect();
    let jwt = match (&loaded.config.auth.jwt, &loaded.jwt_key) {
        (Some(spec), Some(key)) => {
            let material = match key {
                JwtKey::Hs256(s) => s.expose().as_bytes(),
                JwtKey::Rs256Pem(pem) => pem.as_slice(),
            };
            let key_digest: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(material).into();
            let (key, algorithm) = match key {
                JwtKey::Hs256(s) => (
                    DecodingKey::from_secret(s.expose().as_bytes()),
                    Algorithm::HS256,
                ),
                JwtKey::Rs256Pem(pem) => (
                    DecodingKey::from_rsa_pem(pem)
                        .map_err(|e| format!("the RS256 public key is not usable: {e}"))?,
                    Algorithm::RS256,
                ),
            };
            Some(JwtConfig {
                key,
                algorithm,
                issuer: spec.issuer.clone(),
                audience: spec.audience.clone(),
                roles_claim: spec.roles_claim.clone(),
                tenant_claim: spec.tenant_claim.clone(),
                service_claim: spec.service_claim.clone(),
                run_claim: spec.run_claim.clone(),
                key_digest,
            })
        }
        _ => None,
    };
    Ok(Authenticator::new(tokens, jwt))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(argv: &str) -> UpstreamSpec {
        UpstreamSpec {
            name: "notes".to_owned(),
            argv: vec![argv.to_owned()],
            env: vec![("NOTES_TOKEN".to_owned(), "s3cret-value".to_owned())],
            cwd: PathBuf::from("/"),
            read_paths: Vec::new(),
            write_paths: Vec::new(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            limits: corral_exec::ResourceLimits::default(),
            network: None,
            protected: Vec::new(),
        }
    }

    fn op(id: &str) -> OpSpec {
        let id = corral_policy::OpId::parse(id).unwrap_or_else(|_| unreachable!());
        OpSpec::new(id, &[corral_policy::Effect::Write], "s")
    }

    #[tokio::test]
    async fn an_upstream_tools_version_changes_when_its_server_runs_another_program() {
        let backend: Arc<dyn corral_exec::Backend> =
            Arc::new(corral_exec::mock::MockBackend::default());
        let start =
            |argv: &str| Upstreams::start(vec![server(argv)], &backend, Vec::new(), Vec::new());
        let append = op("mcp.notes.append");
        let version = |u: &Upstreams| spec_version(&append, upstream_runs(&append, u));
        let (a, also_a, b) = (start("/opt/a"), start("/opt/a"), start("/opt/b"));
        assert_eq!(version(&a), version(&also_a));
        // An approval given while `notes` ran /opt/a does not run the tool on /opt/b.
        assert_ne!(version(&a), version(&b));
        // Variable names only: a value (often a secret) never goes into the digest's input.
        let input = upstream_runs(&append, &a).map(|v| v.to_string());
        assert!(
            input.as_deref().is_some_and(|i| i.contains("NOTES_TOKEN")),
            "{input:?}"
        );
        assert!(
            input.as_deref().is_some_and(|i| !i.contains("s3cret")),
            "{input:?}"
        );
        // Not an upstream tool, or another server's: no upstream part.
        assert!(upstream_runs(&op("files.write"), &a).is_none());
        assert!(upstream_runs(&op("mcp.other.append"), &a).is_none());
    }
}
