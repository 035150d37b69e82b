//! Ops that run programs: `commands.run` (argv admitted by a `CommandScope`) and `custom:` ops
//! (a fixed argv template filled with typed params). Both run through the configured backend.

use std::path::PathBuf;
use std::time::Duration;

use corral_exec::BoxFuture;
use corral_exec::{
    DEFAULT_WRITE_QUOTA, Egress, EgressLog, EgressRecord, ExecError, ExecOutput, ExecRequest,
    ResourceLimits, RunNetwork,
};
use corral_policy::scope::NetworkSpec;
use corral_policy::{ArgValue, OpSpec, Protected, codes};
use serde_json::json;

use crate::{Op, OpCtx, OpError, OpOutput};

/// Timeout when neither the rule nor the config sets one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Output kept per stream when nothing sets `max_output_bytes`.
pub const DEFAULT_MAX_OUTPUT: u64 = 1 << 20;

/// Variables that never reach a child, whatever `env_pass` says: corral's own settings and
/// secrets, and the dynamic loader's hooks.
fn env_forbidden(name: &str) -> bool {
    name.starts_with("CORRAL_") || name.starts_with("LD_") || name.starts_with("DYLD_")
}

/// The child's environment: `env_pass` names read from the server's environment (minus the
/// forbidden ones and any `secret_envs`), then `env_set`.
pub fn child_env(
    pass: &[String],
    set: &[(String, String)],
    secret_envs: &[String],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = pass
        .iter()
        .filter(|n| !env_forbidden(n) && !secret_envs.contains(n))
        .filter_map(|n| std::env::var(n).ok().map(|v| (n.clone(), v)))
        .collect();
    for (k, v) in set {
        if env_forbidden(k) {
            continue;
        }
        env.retain(|(n, _)| n != k);
        env.push((k.clone(), v.clone()));
    }
    if !env.iter().any(|(n, _)| n == "PATH") {
        env.push(("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()));
    }
    env
}

/// The backend's network request for a `network:` setting (`None`: the backend's own). With an
/// allow-list, each connection's record goes to `log`, or, without one, to the server's log.
pub fn run_network(spec: Option<&NetworkSpec>, log: Option<&EgressLog>) -> Option<RunNetwork> {
    Some(match spec? {
        NetworkSpec::None => RunNetwork::None,
        NetworkSpec::Loopback => RunNetwork::Loopback,
        NetworkSpec::Allow(allow) => RunNetwork::Egress(Egress {
            allow: allow.clone(),
            log: log.cloned().unwrap_or_else(|| EgressLog::new(trace_egress)),
        }),
    })
}

/// Writes an egress record to the server's log (hosts and byte counts, never payloads).
pub fn trace_egress(r: EgressRecord) {
    tracing::info!(
        host = %r.host,
        port = r.port,
        addr = ?r.addr,
        allowed = r.allowed,
        reason = r.reason.as_deref().unwrap_or(""),
        bytes_up = r.bytes_up,
        bytes_down = r.bytes_down,
        "egress"
    );
}

fn exec_error(e: &ExecError) -> OpError {
    let code = match e {
        ExecError::Unavailable { .. } => codes::ISOLATION_UNAVAILABLE,
        ExecError::Spawn { .. } => codes::EXEC_SPAWN_FAILED,
        ExecError::Invalid(_) => codes::EXEC_INVALID,
        ExecError::Lost { .. } => codes::EXEC_LOST,
    };
    OpError::new(code, e.to_string())
}

fn result_json(out: &ExecOutput) -> serde_json::Value {
    json!({
        "exit_code": out.exit_code,
        "signal": out.signal,
        "stdout": String::from_utf8_lossy(&out.stdout),
        "stderr": String::from_utf8_lossy(&out.stderr),
        "stdout_truncated": out.stdout_truncated,
        "stderr_truncated": out.stderr_truncated,
        "timed_out": out.timed_out,
        "duration_ms": u64::try_from(out.duration.as_millis()).unwrap_or(u64::MAX),
        "attestation": {
            "backend": out.attestation.backend,
            "isolated": out.attestation.isolated,
            "destroyed": out.attestation.destroyed,
            "primitives": out.attestation.primitives,
        },
        // What the run's copy-on-write layer brought back to the host (null: the backend wrote
        // straight to it, e.g. `process`).
        "changes": out.changes.as_ref().map(|c| json!({
            "applied": c.applied,
            "bytes": c.bytes,
            "refused": c.refused.iter().map(|r| json!({"path": r.path, "code": r.code, "reason": r.reason})).collect::<Vec<_>>(),
            "refused_unlisted": c.refused_unlisted,
        })),
    })
}

/// What no command may change: `.git` and `.corral` at any depth, and the directories the
/// context protects (corral's state). Fails closed: a protection that does not compile refuses
/// the run.
fn protection(ctx: &OpCtx) -> Result<Protected, OpError> {
    // The policy's own protection (names, corral's files, the config's `protected:` globs),
    // plus the deployment's protected directories.
    let mut protected = ctx.grant.resolved.protected().clone();
    for p in &ctx.protected {
        protected.add_path(&p.to_string_lossy());
    }
    Ok(protected)
}

fn limits_of(ctx: &OpCtx) -> (Duration, u64, ResourceLimits) {
    let l = &ctx.grant.limits;
    (
        l.timeout.unwrap_or(DEFAULT_TIMEOUT),
        l.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT),
        ResourceLimits {
            cpu_seconds: l.cpu_seconds,
            memory: l.memory,
            // 1 GiB unless the config sets `limits.memory` (issue 11 item 5).
            default_memory: Some(corral_exec::DEFAULT_MEMORY),
            processes: l.processes,
            file_size: l.max_bytes,
            open_files: Some(1024),
            // 1 GiB unless the config sets `limits.write_quota`.
            write_quota: Some(l.write_quota.unwrap_or(DEFAULT_WRITE_QUOTA)),
        },
    )
}

async fn run(ctx: &OpCtx, req: ExecRequest) -> Result<OpOutput, OpError> {
    let out = ctx.backend.run(req).await.map_err(|e| exec_error(&e))?;
    Ok(OpOutput::Json {
        value: result_json(&out),
        attestation: Some(out.attestation),
    })
}

/// `commands.run`.
#[derive(Debug)]
pub struct CommandsRun {
    spec: OpSpec,
    secret_envs: Vec<String>,
}

impl CommandsRun {
    /// The op; `secret_envs` are variables (token secrets) that never reach a child.
    pub fn new(spec: OpSpec, secret_envs: Vec<String>) -> Self {
        Self { spec, secret_envs }
    }
}

impl Op for CommandsRun {
    fn spec(&self) -> &OpSpec {
        &self.spec
    }

    fn call(&self, ctx: OpCtx) -> BoxFuture<'_, Result<OpOutput, OpError>> {
        Box::pin(async move {
            let Some(grant) = ctx.grant.command.clone() else {
                return Err(OpError::new(
                    codes::POLICY_COMMAND_NOT_ALLOWED,
                    "the policy grant holds no command for this call",
                ));
            };
            let argv = if grant.shell {
                let line = match ctx.args.get("command") {
                    Some(ArgValue::Str(s)) => s.clone(),
                    _ => grant.argv.join(" "),
                };
                vec!["/bin/sh".to_owned(), "-c".to_owned(), line]
            } else {
                grant.argv.clone()
            };
            let cwd = grant
                .cwd
                .as_ref()
                .map(|c| PathBuf::from(c.absolute()))
                .ok_or_else(|| {
                    OpError::new(
                        codes::POLICY_CWD_OUTSIDE_SCOPE,
                        "the command scope has no cwd; set `cwd:` on the rule's commands",
                    )
                })?;
            let (timeout, max_output, limits) = limits_of(&ctx);
            let stdin = match ctx.args.get("stdin") {
                Some(ArgValue::Str(s)) => Some(s.clone().into_bytes()),
                _ => None,
            };
            // The sandbox sees the rule's path-scope roots and the cwd: writable unless the
            // scope is read-only (ci_runner's default), never more.
            let mut read_paths: Vec<PathBuf> = ctx.grant.roots.iter().map(PathBuf::from).collect();
            if !read_paths.iter().any(|r| cwd.starts_with(r)) {
                read_paths.push(cwd.clone());
            }
            let write_paths = if ctx.grant.readonly {
                Vec::new()
            } else {
                read_paths.clone()
            };
            let req = ExecRequest {
                argv,
                cwd: cwd.clone(),
                env: child_env(&grant.env_pass, &grant.env_set, &self.secret_envs),
                stdin,
                timeout,
                max_output_bytes: max_output,
                limits,
                read_paths,
                write_paths,
                protected: protection(&ctx)?,
                network: run_network(grant.network.as_ref(), ctx.egress_log.as_ref()),
                exec_only: None,
                hold: None,
                apply_only_if_ok: false,
                host_writes: None,
            };
            run(&ctx, req).await
        })
    }
}

/// Where a custom op without a working directory runs: in an isolating backend, the run's own
/// empty tmpfs.
pub const PRIVATE_TMP: &str = "/tmp";

/// What a `custom:` op runs, and what its sandbox may see, as the config says it.
#[derive(Debug, Clone, Default)]
pub struct CustomRun {
    /// The argv template.
    pub argv: Vec<String>,
    /// The working directory (bound read-only unless it is a write path); `None`: the
    /// sandbox's private, empty `/tmp`, with no host directory bound for it.
    pub cwd: Option<PathBuf>,
    /// Other paths the program may read.
    pub read_paths: Vec<PathBuf>,
    /// Paths the program may write (already empty unless the op has the `write` effect).
    pub write_paths: Vec<PathBuf>,
    /// Path params whose jailed path is bound read-write (the op has the `write` effect).
    pub writable_params: Vec<String>,
    /// The op's own timeout.
    pub timeout: Option<Duration>,
    /// The program's network; `None`: the backend's.
    pub network: Option<NetworkSpec>,
}

/// A `custom:` op: a fixed argv whose `{param}` placeholders are filled with the call's typed
/// arguments (paths with their jailed absolute form). No shell. Its sandbox sees its cwd, its
/// declared paths and the jailed path of each path param, nothing else.
#[derive(Debug)]
pub struct CustomOp {
    spec: OpSpec,
    run: CustomRun,
    secret_envs: Vec<String>,
}

impl CustomOp {
    /// A custom op.
    pub fn new(spec: OpSpec, run: CustomRun, secret_envs: Vec<String>) -> Self {
        Self {
            spec,
            run,
            secret_envs,
        }
    }

    /// The paths the sandbox binds: (read, write). A path param's jailed path is bound when it
    /// exists, read-write for a writable param; a writable param whose file does not exist yet
    /// gets its parent directory (within the param's root) so the program can create it.
    pub fn bound_paths(&self, ctx: &OpCtx) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let mut read: Vec<PathBuf> = self.run.cwd.iter().cloned().collect();
        read.extend(self.run.read_paths.iter().cloned());
        let mut write: Vec<PathBuf> = self.run.write_paths.clone();
        for (name, jp) in &ctx.grant.paths {
            let path = PathBuf::from(jp.absolute());
            let writable = self.run.writable_params.iter().any(|w| w == name);
            let bound = if path.symlink_metadata().is_ok() {
                Some(path)
            } else if writable {
                // The nearest existing ancestor that is still inside the jail.
                let root = PathBuf::from(jp.root());
                path.ancestors()
                    .skip(1)
                    .take_while(|a| a.starts_with(&root))
                    .find(|a| a.is_dir())
                    .map(PathBuf::from)
            } else {
                None
            };
            match (bound, writable) {
                (Some(p), true) => write.push(p),
                (Some(p), false) => read.push(p),
                (None, _) => {}
            }
        }
        for w in &write {
            if !read.contains(w) {
                read.push(w.clone());
            }
        }
        (read, write)
    }

    /// Fills the template. Every placeholder must have a value; a path param takes its jailed
    /// absolute path, never the raw argument.
    pub fn render(&self, ctx: &OpCtx) -> Result<Vec<String>, OpError> {
        let value_of =
            |name: &str| -> Option<String> {
                if let Some((_, jp)) = ctx.grant.paths.iter().find(|(n, _)| n == name) {
                    return Some(jp.absolute());
                }
                if self.spec.params.iter().any(|p| {
                    p.name == name && matches!(p.kind, corral_policy::ParamKind::Path { .. })
                }) {
                    return None;
                }
                match ctx.args.get(name)? {
                    ArgValue::Str(s) => Some(s.clone()),
                    ArgValue::Int(i) => Some(i.to_string()),
                    ArgValue::Bool(b) => Some(b.to_string()),
                    ArgValue::List(_) | ArgValue::Json(_) => None,
                }
            };
        let mut out = Vec::with_capacity(self.run.argv.len());
        for tok in &self.run.argv {
            let mut s = String::new();
            let mut rest = tok.as_str();
            while let Some(start) = rest.find('{') {
                let Some(end) = rest[start..].find('}') else {
                    break;
                };
                let name = &rest[start + 1..start + end];
                let v = value_of(name).ok_or_else(|| {
                    OpError::new(
                        codes::ARGS_MISSING,
                        format!("op `{}` needs the argument `{name}`", self.spec.id),
                    )
                })?;
                s.push_str(&rest[..start]);
                s.push_str(&v);
                rest = &rest[start + end + 1..];
            }
            s.push_str(rest);
            out.push(s);
        }
        Ok(out)
    }
}

impl Op for CustomOp {
    fn spec(&self) -> &OpSpec {
        &self.spec
    }

    fn call(&self, ctx: OpCtx) -> BoxFuture<'_, Result<OpOutput, OpError>> {
        Box::pin(async move {
            let argv = self.render(&ctx)?;
            let (timeout, max_output, limits) = limits_of(&ctx);
            let timeout = self.run.timeout.map_or(timeout, |t| t.min(timeout));
            let (read_paths, write_paths) = self.bound_paths(&ctx);
            let req = ExecRequest {
                argv,
                cwd: self
                    .run
                    .cwd
                    .clone()
                    .unwrap_or_else(|| PathBuf::from(PRIVATE_TMP)),
                env: child_env(&[], &[], &self.secret_envs),
                stdin: None,
                timeout,
                max_output_bytes: max_output,
                limits,
                read_paths,
                write_paths,
                protected: protection(&ctx)?,
                network: run_network(self.run.network.as_ref(), ctx.egress_log.as_ref()),
                exec_only: None,
                hold: None,
                apply_only_if_ok: false,
                host_writes: None,
            };
            run(&ctx, req).await
        })
    }
}
