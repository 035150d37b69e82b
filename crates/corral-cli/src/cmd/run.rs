//! `corral run -- CMD ARGS...`: one command from the shell in the linux sandbox, the way `bwrap`
//! or `srt` wrap a coding agent's commands, with the program's own stdio and exit code.
//!
//! The profile decides what of the host the sandbox sees besides the system directories
//! (`/usr`, `/bin`, `/lib*`, an allow-listed `/etc`, all read-only): `workspace` binds the
//! current directory read-write (`.git` and `.corral` in it stay read-only), `readonly` binds it
//! read-only, `none` binds nothing and runs in the sandbox's empty `/tmp`. `--read`/`--write`
//! add directories. Home and everything else is absent; the network is a namespace of its own
//! (`none`: no interface up; `loopback`: only `lo`). The environment is a short allow-list
//! (`PATH`, `TERM`, locale, `TZ`; `HOME=/tmp`) plus what `--env` passes: a token in the
//! shell's environment never reaches the program unless named.
//!
//! The program writes to corral's own stdout and stderr (inherited, so a terminal stays a
//! terminal and output is streamed); its stdin is corral's stdin, relayed through a pipe. The
//! exit code is the program's, 128 + N when signal N ended it, 124 when `--timeout` killed it,
//! and 125 when corral could not run it (isolation unavailable on this host, a path that cannot
//! be bound, bad usage, a config that does not load), 126 when the program could not be
//! executed, 127 when it was not found, as `docker run` and `env` do. Nothing is printed on
//! success; `--attest` adds one JSON line on stderr after the run with what the sandbox applied.
//!
//! Writes go through the backend's copy-on-write layer, as for `commands.run`: the write paths
//! are overlays, and their changes reach the host only when the program (and everything it
//! started) ended, each checked against the protected locations (`.git`, `.corral` and the
//! other VCS directories at any depth, a valid git `HEAD`, the config's `protected:` globs and
//! corral's own files) and the write quota. Each refused change is one line on stderr with its
//! code, and then the exit code is 125 whatever the program's: the host does not hold what the
//! program wrote, so `corral run -- make && deploy` must not go on (the program's own code is
//! in the message).
//!
//! `--config F` takes defaults from the file's `run:` section (`profile`, `read`, `write`,
//! `network`, `env`, `limits: {memory, processes, timeout, write_quota}`), its `isolation:`
//! (`network` when `run.network` is absent, `cgroup_parent`) and its `protected:` globs; flags
//! win over keys, and list flags add to the lists. Token secrets are not read: `corral run`
//! authenticates nobody.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::ValueEnum;
use corral_exec::linux::{HostUids, LinuxBackend, Network};
use corral_exec::{Backend, Changes, ExecError, ExecOutput, ExecRequest, ResourceLimits};
use corral_exec::{Egress, EgressLog, RunNetwork};
use corral_policy::codes;
use corral_policy::scope::{EgressAllowList, NetworkSpec};
use serde::Serialize;

use crate::context::{self, Threads};
use crate::{CliError, CliResult, Exit};

/// Exit code: corral could not run the command (as `docker run` and `env`).
pub const EXIT_CANNOT_RUN: u8 = 125;
/// Exit code: the program exists but could not be executed.
pub const EXIT_NOT_EXECUTABLE: u8 = 126;
/// Exit code: the program was not found in the sandbox.
pub const EXIT_NOT_FOUND: u8 = 127;
/// Exit code: `--timeout` passed and the sandbox was killed (as `timeout(1)`).
pub const EXIT_TIMED_OUT: u8 = 124;

/// The wall-clock limit when `--timeout` is not given: effectively none.
const NO_TIMEOUT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Variables passed from corral's environment unless `--env` says otherwise.
const PASSED_ENV: &[&str] = &[
    "PATH",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "LC_COLLATE",
    "LC_NUMERIC",
    "LC_TIME",
    "TZ",
];

/// `PATH` when corral's environment has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What of the host the sandbox sees besides the system directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Profile {
    /// The current directory read-write (its `.git` and `.corral` read-only).
    #[default]
    Workspace,
    /// The current directory read-only.
    Readonly,
    /// No host directory; the program runs in the sandbox's empty `/tmp`.
    None,
}

/// `--net`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Net {
    /// `none` or `loopback`.
    Mode(Network),
    /// `allow:HOST:PORT[,HOST:PORT...]`: only what corral's egress proxy admits.
    Allow(EgressAllowList),
}

/// Parses `--net`: `none`, `loopback`, or `allow:HOST:PORT[,HOST:PORT...]`.
pub fn parse_net(s: &str) -> Result<Net, String> {
    match s {
        "none" => Ok(Net::Mode(Network::None)),
        "loopback" => Ok(Net::Mode(Network::Loopback)),
        other => match other.strip_prefix("allow:") {
            Some(list) => {
                let entries: Vec<&str> = list.split(',').filter(|e| !e.is_empty()).collect();
                if entries.is_empty() {
                    return Err(
                        "`allow:` names no host; write `allow:api.github.com:443` (several joined by `,`)"
                            .into(),
                    );
                }
                EgressAllowList::parse(&entries)
                    .map(Net::Allow)
                    .map_err(|errs| {
                        errs.iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ")
                    })
            }
            None => Err(format!(
                "`{other}` is not a network mode; use `none` (no network), `loopback` (127.0.0.1 inside the sandbox only) or `allow:HOST:PORT` (only those, through corral's proxy)"
            )),
        },
    }
}

/// Parses `--timeout` (`30s`, `5m`, `1h`, `500ms`).
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    corral_policy::units::parse_duration(s).map_err(|_| {
        format!("`{s}` is not a duration; write a number and a unit: `500ms`, `30s`, `5m`, `1h`")
    })
}

/// Parses `--memory` (`512MiB`, `2GB`).
pub fn parse_memory(s: &str) -> Result<u64, String> {
    corral_policy::units::parse_size(s).map_err(|_| {
        format!("`{s}` is not a size; write a number and a unit: `512MiB`, `2GiB`, `1GB`")
    })
}

/// `corral run`'s options, as given on the command line.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The `run:` section of this corral config gives the defaults (only when given: no
    /// config is read otherwise); the flags below win over it.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// What of the host the sandbox sees besides the system directories (default:
    /// `workspace`).
    #[arg(long, value_enum)]
    pub profile: Option<Profile>,
    /// Network: `none` (no interface up), `loopback` (127.0.0.1 inside the sandbox only), or
    /// `allow:HOST:PORT[,HOST:PORT...]` (only those, through corral's egress proxy).
    #[arg(long, value_name = "MODE", value_parser = parse_net)]
    pub net: Option<Net>,
    /// After the run, print what the sandbox applied as one JSON line on stderr.
    #[arg(long)]
    pub attest: bool,
    /// Kill the sandbox after this long (`30s`, `5m`, `1h`); exit code 124.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub timeout: Option<std::time::Duration>,
    /// Memory limit of the whole sandbox (`512MiB`, `2GiB`), enforced by a memory cgroup;
    /// refused where the host has none.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub memory: Option<u64>,
    /// What the program may add to the host through its write paths (`64MiB`, `4GiB`;
    /// default 1 GiB); over it, its writes fail with "No space left on device" and the apply
    /// refuses the rest (exit 125).
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub write_quota: Option<u64>,
    /// Also show this directory or file, read-only (repeatable).
    #[arg(long, value_name = "PATH")]
    pub read: Vec<PathBuf>,
    /// Also show this directory or file, read-write (repeatable).
    #[arg(long, value_name = "PATH")]
    pub write: Vec<PathBuf>,
    /// Pass a variable: `NAME` (its value here) or `NAME=VALUE` (repeatable).
    #[arg(long, value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    /// The command and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub argv: Vec<String>,
}

/// The run's settings: the flags over the config's `run:` section over the defaults.
#[derive(Debug, Default)]
struct Settings {
    profile: Profile,
    net: Option<Net>,
    timeout: Option<Duration>,
    memory: Option<u64>,
    processes: Option<u32>,
    write_quota: Option<u64>,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    env: Vec<String>,
    protected: corral_policy::Protected,
    cgroup_parent: Option<PathBuf>,
    host_uids: Option<String>,
}

/// Reads no secret: every variable is a placeholder long enough for the token checks.
/// `corral run` authenticates nobody, so a config's token variables need not be set for it.
struct NoSecrets;

impl corral_config::Env for NoSecrets {
    fn var(&self, _name: &str) -> Option<String> {
        Some("corral-run-reads-no-secret-0123456789".to_owned())
    }
}

/// Merges the command line over `--config`'s file (when given) over the defaults.
fn settings(args: &Args) -> Result<Settings, Failure> {
    let mut s = Settings::default();
    let mut config_read = Vec::new();
    let mut config_write = Vec::new();
    if let Some(path) = &args.config {
        let loaded = corral_config::load_file_with_env(path, &NoSecrets).map_err(|e| Failure {
            code: e
                .diagnostics
                .iter()
                .find(|d| d.severity == corral_config::Severity::Error)
                .map_or(codes::CONFIG_INVALID_VALUE, |d| d.code),
            message: format!(
                "the config `{}` does not load:\n{}",
                path.display(),
                e.render().trim_end()
            ),
            exit: EXIT_CANNOT_RUN,
        })?;
        let c = &loaded.config;
        if c.isolation.backend == corral_config::model::BackendKind::Process {
            return Err(Failure::usage(format!(
                "the config `{}` sets `isolation.backend: process`, which isolates nothing, and `corral run` never runs a command unsandboxed; remove the key (or pass another `--config`)",
                path.display()
            )));
        }
        s.cgroup_parent.clone_from(&c.isolation.cgroup_parent);
        s.host_uids.clone_from(&c.isolation.host_uids);
        s.protected = loaded.policy.protected.clone();
        s.net = Some(Net::Mode(match c.isolation.network {
            corral_config::model::NetworkMode::None => Network::None,
            corral_config::model::NetworkMode::Loopback => Network::Loopback,
        }));
        if let Some(r) = &c.run {
            if let Some(p) = &r.profile {
                s.profile = match p.value {
                    corral_config::RunProfile::Workspace => Profile::Workspace,
                    corral_config::RunProfile::Readonly => Profile::Readonly,
                    corral_config::RunProfile::None => Profile::None,
                };
            }
            if let Some(n) = &r.network {
                s.net = Some(match n {
                    NetworkSpec::None => Net::Mode(Network::None),
                    NetworkSpec::Loopback => Net::Mode(Network::Loopback),
                    NetworkSpec::Allow(list) => Net::Allow(list.clone()),
                });
            }
            config_read = r.read.iter().map(|p| loaded.absolute(&p.value)).collect();
            config_write = r.write.iter().map(|p| loaded.absolute(&p.value)).collect();
            s.env = r.env.iter().map(|e| e.value.clone()).collect();
            s.timeout = r.timeout;
            s.memory = r.memory;
            s.processes = r.processes;
            s.write_quota = r.write_quota;
        }
    }
    if let Some(p) = args.profile {
        s.profile = p;
    }
    if args.net.is_some() {
        s.net.clone_from(&args.net);
    }
    s.timeout = args.timeout.or(s.timeout);
    s.memory = args.memory.or(s.memory);
    s.write_quota = args.write_quota.or(s.write_quota);
    s.read = config_read
        .into_iter()
        .chain(args.read.iter().cloned())
        .collect();
    s.write = config_write
        .into_iter()
        .chain(args.write.iter().cloned())
        .collect();
    // Later ones win: the command line's `--env` over the file's.
    s.env.extend(args.env.iter().cloned());
    Ok(s)
}

/// What `--attest` prints: one JSON line on stderr.
#[derive(Debug, Serialize)]
struct AttestOut<'a> {
    backend: &'a str,
    isolated: bool,
    destroyed: bool,
    primitives: &'a [String],
    exit_code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    duration_ms: u128,
}

/// A failure of corral's own, printed as `corral run: error[code]: message` (exit 125 unless
/// said otherwise).
struct Failure {
    code: &'static str,
    message: String,
    exit: u8,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: codes::EXEC_INVALID,
            message: message.into(),
            exit: EXIT_CANNOT_RUN,
        }
    }
}

impl From<Failure> for CliError {
    fn from(f: Failure) -> Self {
        CliError::line(
            Exit::Code(f.exit),
            format!("corral run: error[{}]: {}", f.code, f.message),
        )
    }
}

impl From<ExecError> for Failure {
    fn from(e: ExecError) -> Self {
        let exit = match &e {
            ExecError::Spawn { reason, .. } if reason.starts_with("no such program") => {
                EXIT_NOT_FOUND
            }
            ExecError::Spawn { .. } => EXIT_NOT_EXECUTABLE,
            ExecError::Unavailable { .. } | ExecError::Invalid(_) | ExecError::Lost { .. } => {
                EXIT_CANNOT_RUN
            }
        };
        let message = match &e {
            ExecError::Unavailable { .. } => format!(
                "{e}\n  corral never runs a command unsandboxed; `corral doctor` lists every isolation primitive of this host and how to get the missing ones"
            ),
            _ => e.to_string(),
        };
        Failure {
            code: e.code(),
            message,
            exit,
        }
    }
}

/// Runs `corral run`: the program's exit code, or corral's own failure (125 to 127).
pub fn run(args: Args) -> CliResult {
    Ok(Exit::Code(run_inner(args)?))
}

fn run_inner(args: Args) -> Result<u8, CliError> {
    // Learning mode is `corral serve`'s only: a sandboxed command here would run unguarded.
    corral_learn::gate::refuse_outside_serve(
        std::env::var_os(corral_learn::gate::FLAG_ENV).as_deref(),
    )
    .map_err(|e| CliError::line(Exit::Code(EXIT_CANNOT_RUN), format!("corral run: {e}")))?;
    let s = settings(&args)?;
    let req = request(&args.argv, &s)?;
    let backend = LinuxBackend::new(PathBuf::from("/proc/self/exe"))
        .with_network(match &s.net {
            Some(Net::Mode(m)) => *m,
            Some(Net::Allow(_)) | None => Network::None,
        })
        .with_cgroup_parent(s.cgroup_parent.clone())
        .with_inherited_output()
        .with_attached_write_layer()
        .with_host_uids(HostUids::from_setting(s.host_uids.as_deref()).map_err(Failure::usage)?)
        .map_err(Failure::usage)?
        // One run, then exit: no preflight probe (the helper refuses a run missing a primitive
        // step by step, and the probe then names the fix), and no warm sandbox to keep.
        .with_one_shot()
        .with_warm_pool(0);
    let rt = context::tokio_runtime(Threads::One).map_err(|e| Failure {
        code: codes::ISOLATION_UNAVAILABLE,
        message: format!("cannot start the runtime: {e}"),
        exit: EXIT_CANNOT_RUN,
    })?;
    let result = rt.block_on(supervise(&backend, req));
    // The stdin relay may still be blocked reading a terminal: do not wait for it.
    rt.shutdown_background();
    drop(backend);
    let out = result?;
    if args.attest {
        let a = &out.attestation;
        let line = AttestOut {
            backend: a.backend,
            isolated: a.isolated,
            destroyed: a.destroyed,
            primitives: &a.primitives,
            exit_code: out.exit_code,
            signal: out.signal,
            timed_out: out.timed_out,
            duration_ms: out.duration.as_millis(),
        };
        match serde_json::to_string(&line) {
            Ok(s) => eprintln!("{s}"),
            Err(e) => eprintln!("corral run: cannot encode the attestation: {e}"),
        }
    }
    let code = exit_code(&out, s.timeout);
    match &out.changes {
        Some(changes) if refused_any(changes) => Err(refused(changes, &out)),
        _ => Ok(code),
    }
}

fn refused_any(changes: &Changes) -> bool {
    !changes.refused.is_empty() || changes.refused_unlisted > 0
}

/// One line per change the apply refused, with its code, then what it means for the exit code
/// (125). Paths and reasons come from the sandbox's layer (names the program chose): they are
/// printed escaped, so no control character of theirs reaches the terminal.
fn refused(changes: &Changes, out: &ExecOutput) -> CliError {
    let mut lines: Vec<String> = changes
        .refused
        .iter()
        .map(|r| {
            let code = if r.code.is_empty() {
                codes::EXEC_CHANGE_REFUSED
            } else {
                r.code.as_str()
            };
            if r.path.is_empty() {
                format!("corral run: error[{code}]: {}", r.reason.escape_debug())
            } else {
                format!(
                    "corral run: error[{code}]: `{}` was not applied to the host: {}",
                    r.path.escape_debug(),
                    r.reason.escape_debug()
                )
            }
        })
        .collect();
    if changes.refused_unlisted > 0 {
        lines.push(format!(
            "corral run: ... and {} more changes refused, not listed",
            changes.refused_unlisted
        ));
    }
    let program = match (out.exit_code, out.signal) {
        _ if out.timed_out => "was killed at its timeout".to_owned(),
        (Some(c), _) => format!("exited with {c}"),
        (None, Some(sig)) => format!("was ended by signal {sig}"),
        (None, None) => "ended".to_owned(),
    };
    lines.push(format!(
        "corral run: the program {program}, but {} of its changes did not reach the host ({} applied); exit 125",
        changes.refused.len() as u64 + changes.refused_unlisted,
        changes.applied
    ));
    CliError::line(Exit::Code(EXIT_CANNOT_RUN), lines.join("\n"))
}

/// The exit code `corral run` ends with for a run that happened.
fn exit_code(out: &ExecOutput, timeout: Option<Duration>) -> u8 {
    if out.timed_out {
        let limit = timeout.map_or_else(String::new, |t| {
            format!(" after {}", corral_policy::units::format_duration(t))
        });
        eprintln!("corral run: the command timed out{limit} and was killed (--timeout)");
        return EXIT_TIMED_OUT;
    }
    match (out.exit_code, out.signal) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(EXIT_CANNOT_RUN),
        (None, Some(sig)) => u8::try_from((128 + sig) & 0xff).unwrap_or(EXIT_CANNOT_RUN),
        (None, None) => EXIT_CANNOT_RUN,
    }
}

/// Runs the request attached: corral's stdin is relayed to the program until either ends; its
/// stdout and stderr are corral's own (the backend inherits them).
async fn supervise(backend: &LinuxBackend, req: ExecRequest) -> Result<ExecOutput, Failure> {
    let (tx, rx) = tokio::sync::oneshot::channel::<corral_exec::Attached>();
    // Nothing reaches the program before the sandbox reported every primitive applied.
    let relay = tokio::spawn(async move {
        if let Ok(attached) = rx.await {
            let mut to_program = attached.stdin;
            // The program may stop reading, or end, first: that is no error of the run's.
            let _ = tokio::io::copy(&mut tokio::io::stdin(), &mut to_program).await;
            // EOF on corral's stdin, so EOF for the program (dropping the pipe closes it).
        }
    });
    let out = backend.run_attached(req, tx).await;
    relay.abort();
    out.map_err(Failure::from)
}

/// The sandbox request for these settings, from the current directory and environment.
fn request(argv: &[String], args: &Settings) -> Result<ExecRequest, Failure> {
    if argv.is_empty() {
        return Err(Failure::usage(
            "no command given; write it after `--`: `corral run -- make test`",
        ));
    }
    let here = std::env::current_dir().map_err(|e| {
        Failure::usage(format!(
            "the current directory is not usable: {e}; cd into the project first"
        ))
    })?;
    let mut read_paths = Vec::new();
    let mut write_paths = Vec::new();
    let cwd = match args.profile {
        Profile::Workspace | Profile::Readonly if here == Path::new("/") => {
            return Err(Failure::usage(
                "the current directory is `/`, which a sandbox never binds; cd into a project directory, or pass `--profile none`",
            ));
        }
        Profile::Workspace => {
            write_paths.push(here.clone());
            here
        }
        Profile::Readonly => {
            read_paths.push(here.clone());
            here
        }
        Profile::None => PathBuf::from("/tmp"),
    };
    for (flag, paths, out) in [
        ("--read", &args.read, &mut read_paths),
        ("--write", &args.write, &mut write_paths),
    ] {
        for p in paths {
            let real = std::fs::canonicalize(p).map_err(|e| {
                Failure::usage(format!(
                    "{flag} `{}` is not usable: {e}; pass an existing directory or file",
                    p.display()
                ))
            })?;
            out.push(real);
        }
    }
    Ok(ExecRequest {
        argv: argv.to_vec(),
        cwd,
        env: environment(&args.env)?,
        stdin: None,
        timeout: args.timeout.unwrap_or(NO_TIMEOUT),
        max_output_bytes: 0,
        limits: ResourceLimits {
            memory: args.memory,
            // 1 GiB unless `--memory` says otherwise (safe by default, issue 11 item 5).
            default_memory: Some(corral_exec::DEFAULT_MEMORY),
            processes: args.processes,
            write_quota: args.write_quota,
            ..ResourceLimits::default()
        },
        read_paths,
        write_paths,
        protected: args.protected.clone(),
        // An allow-list gets the proxy: the program sees `HTTP(S)_PROXY`, and a refusal's
        // reason in its own stderr.
        network: match &args.net {
            Some(Net::Allow(allow)) => Some(RunNetwork::Egress(Egress {
                allow: allow.clone(),
                log: EgressLog::discard(),
            })),
            Some(Net::Mode(_)) | None => None,
        },
        exec_only: None,
        hold: None,
        apply_only_if_ok: false,
        host_writes: None,
    })
}

/// The program's whole environment: the allow-listed variables of corral's own, `HOME=/tmp`,
/// then `--env NAME` (corral's value) and `--env NAME=VALUE`, later ones winning.
fn environment(extra: &[String]) -> Result<Vec<(String, String)>, Failure> {
    let mut env: Vec<(String, String)> = PASSED_ENV
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v)))
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    env.push(("HOME".into(), "/tmp".into()));
    for e in extra {
        let (name, value) = match e.split_once('=') {
            Some((n, v)) => (n.to_owned(), v.to_owned()),
            None => match std::env::var(e) {
                Ok(v) => (e.clone(), v),
                // Unset here: not set in the sandbox either.
                Err(_) => continue,
            },
        };
        let valid = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(Failure::usage(format!(
                "--env `{e}` is not `NAME` or `NAME=VALUE` with a name of letters, digits and `_`"
            )));
        }
        env.retain(|(k, _)| *k != name);
        env.push((name, value));
    }
    Ok(env)
}
