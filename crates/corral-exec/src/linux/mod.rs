//! The `linux` backend: each run in fresh user, mount, pid, net, ipc and uts namespaces, on a
//! minimal root view, under landlock, seccomp, `no_new_privs`, no capabilities, rlimits and
//! per-run cgroups (always `pids`; `memory` when the request limits memory: a run whose limit has
//! no cgroup to enforce it is refused). It attests `isolated: true` only when the helper
//! reported every one of those applied; when the host lacks a required primitive, every run is
//! refused with `ExecError::Unavailable` naming it, never run weaker.
//!
//! The set-up is not done between `fork` and `exec` of this (multi-threaded) process: the backend
//! starts the helper, a fresh single-threaded process (`corral __sandbox-exec`, see `helper.rs`),
//! sends it a [`spec::Spec`] on stdin and reads its reports on a status pipe. The helper applies
//! everything and `execve`s the target; stdin, stdout and stderr are the target's.
//!
//! Per run, the parent:
//!
//! - canonicalizes the request's paths and refuses `/`, `/proc`, `/sys` and `/dev`;
//! - makes an empty per-run directory (the mount point of the sandbox's root tmpfs, which only
//!   the sandbox's mount namespace sees) and per-run cgroups, moving the helper into them before
//!   it reads the spec;
//! - captures output with the same caps as the `process` backend; the helper kills the sandbox's
//!   pid 1 (so the whole pid namespace) when the timeout passes, and the parent kills the helper's
//!   process group if the helper itself overstays;
//! - removes the directory and the cgroups, and attests `destroyed: true` only when the helper
//!   reported the pid namespace empty and both removals are checked.

mod cgroup;
mod helper;
mod landlock_rules;
mod mounts;
mod probe;
mod seccomp;
mod spec;

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use tokio::process::Command;

use crate::common::{Captured, Exit, capture, exited, feed, kill_group, rlimit_plan, validate};
use crate::{Attestation, Backend, BoxFuture, ExecError, ExecOutput, ExecRequest};

pub use helper::{HELPER_ARG, helper_main};
pub use probe::{Primitive, probe};
pub use spec::Network;

use spec::{FailKind, Spec, Status};

/// The backend's name, in attestations and errors.
const NAME: &str = "linux";

/// How long the helper may overstay the request's timeout (set-up and tear-down) before the
/// parent kills its process group.
const HELPER_GRACE: Duration = Duration::from_secs(5);
/// How long the pipes are still read after the helper exited.
const PIPE_GRACE: Duration = Duration::from_millis(1000);
/// How long the run's cgroups may take to empty after the helper exited.
const CGROUP_GRACE: Duration = Duration::from_secs(2);
/// `pids.max` when the request sets no process limit: a fork bomb is always contained.
pub const DEFAULT_PIDS_MAX: u64 = 1024;
/// Processes of the sandbox's own (the helper and the init), added to the request's limit.
const OWN_PIDS: u64 = 2;
/// Size of the per-run `/tmp` (and `/dev/shm`) tmpfs, unless the memory limit is smaller.
const DEFAULT_TMP_BYTES: u64 = 512 * 1024 * 1024;

/// Numbers runs within this process.
static RUN_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Namespaces, a minimal root view, landlock, seccomp, no capabilities, rlimits and cgroups.
#[derive(Debug)]
pub struct LinuxBackend {
    helper: PathBuf,
    network: Network,
    runtime_dir: PathBuf,
    /// Set once the preflight passed.
    preflight: OnceLock<()>,
    cgroups: OnceLock<cgroup::Support>,
}

impl LinuxBackend {
    /// A backend whose helper is `helper_exe`: a binary that calls [`helper_main`] when its
    /// argv[1] is [`HELPER_ARG`] (the `corral` binary itself: pass `/proc/self/exe`).
    pub fn new(helper_exe: PathBuf) -> Self {
        let uid = rustix::process::getuid().as_raw();
        LinuxBackend {
            helper: helper_exe,
            network: Network::None,
            runtime_dir: std::env::temp_dir().join(format!("corral-sandbox-{uid}")),
            preflight: OnceLock::new(),
            cgroups: OnceLock::new(),
        }
    }

    /// The network mode of every run (default: [`Network::None`]).
    pub fn with_network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    /// Where the per-run mount-point directories are made (default:
    /// `$TMPDIR/corral-sandbox-<uid>`).
    pub fn with_runtime_dir(mut self, dir: PathBuf) -> Self {
        self.runtime_dir = dir;
        self
    }

    /// The network mode.
    pub fn network(&self) -> Network {
        self.network
    }

    /// The hierarchies per-run cgroups go under. Cached only once a `pids` hierarchy was found:
    /// nothing transient is ever remembered, and whether a cgroup can really be made is learnt
    /// by making each run's (a failure refuses that run, it never drops the limit for later
    /// ones).
    fn cgroups(&self) -> std::borrow::Cow<'_, cgroup::Support> {
        if let Some(support) = self.cgroups.get() {
            return std::borrow::Cow::Borrowed(support);
        }
        let support = cgroup::detect();
        if support.pids.is_some() {
            return std::borrow::Cow::Borrowed(self.cgroups.get_or_init(|| support));
        }
        std::borrow::Cow::Owned(support)
    }

    /// The first required primitive this host lacks, as the error every run returns. Only a
    /// pass is cached: a failure is probed again on the next run (it may have been transient,
    /// and refusing is the answer meanwhile).
    fn check(&self) -> Result<(), ExecError> {
        if self.preflight.get().is_some() {
            return Ok(());
        }
        if let Some(p) = probe().into_iter().find(|p| p.required && !p.available) {
            return Err(unavailable(format!(
                "{} is missing: {}; fix: {}",
                p.name, p.detail, p.fix
            )));
        }
        if !self.helper.exists() {
            return Err(unavailable(format!(
                "the sandbox helper `{}` does not exist",
                self.helper.display()
            )));
        }
        let _ = self.preflight.set(());
        Ok(())
    }
}

impl Backend for LinuxBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn preflight(&self) -> Result<(), ExecError> {
        self.check()
    }

    fn run(&self, req: ExecRequest) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        Box::pin(self.run_one(req))
    }
}

fn unavailable(missing: impl Into<String>) -> ExecError {
    ExecError::Unavailable {
        backend: NAME,
        missing: missing.into(),
    }
}

/// The request's paths, checked: absolute, normalized, existing, and none the sandbox never
/// binds. They are not canonicalized: the helper opens each one without following any symlink
/// and refuses the run if one is in the way, so a root swapped for a symlink never redirects a
/// bind to the symlink's target.
fn sandbox_paths(paths: &[PathBuf], what: &str) -> Result<Vec<PathBuf>, ExecError> {
    paths
        .iter()
        .map(|p| {
            let normal = p.is_absolute()
                && p.components().all(|c| {
                    matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_))
                });
            if !normal {
                return Err(ExecError::Invalid(format!(
                    "the {what} path `{}` is not a normalized absolute path",
                    p.display()
                )));
            }
            let c: PathBuf = p.components().collect();
            if mounts::forbidden(&c) {
                return Err(ExecError::Invalid(format!(
                    "the {what} path `{}` cannot be bound into a sandbox (`/`, `/proc`, `/sys` and `/dev` never are)",
                    c.display()
                )));
            }
            if c.to_str().is_none() {
                return Err(ExecError::Invalid(format!(
                    "the {what} path `{}` is not UTF-8",
                    c.display()
                )));
            }
            if let Err(e) = std::fs::symlink_metadata(&c) {
                return Err(ExecError::Invalid(format!(
                    "the {what} path `{}` is not usable: {e}",
                    c.display()
                )));
            }
            Ok(c)
        })
        .collect()
}

/// Makes the per-run directory (and its 0700 parent, which must be ours and not a symlink).
fn make_run_dir(base: &Path, run_id: &str) -> Result<PathBuf, ExecError> {
    match std::fs::DirBuilder::new().mode(0o700).create(base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(unavailable(format!("cannot make {}: {e}", base.display()))),
    }
    let meta = std::fs::symlink_metadata(base)
        .map_err(|e| unavailable(format!("{}: {e}", base.display())))?;
    if !meta.is_dir() || meta.uid() != rustix::process::getuid().as_raw() {
        return Err(unavailable(format!(
            "{} is not a directory owned by corral's user",
            base.display()
        )));
    }
    let dir = base.join(run_id);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| unavailable(format!("cannot make {}: {e}", dir.display())))?;
    Ok(dir)
}

/// What the status pipe said.
#[derive(Debug, Default)]
struct Reports {
    ready: Option<Vec<String>>,
    failed: Option<(FailKind, String, String)>,
    exited: Option<(Option<i32>, Option<i32>)>,
    done: Option<bool>,
}

fn parse_reports(bytes: &[u8]) -> Reports {
    let mut r = Reports::default();
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<Status>(line) {
            Ok(Status::Ready { primitives }) => r.ready = Some(primitives),
            Ok(Status::Failed { kind, step, error }) => {
                if r.failed.is_none() {
                    r.failed = Some((kind, step, error));
                }
            }
            Ok(Status::Exited { code, signal }) => r.exited = Some((code, signal)),
            Ok(Status::Done { timed_out }) => r.done = Some(timed_out),
            Err(e) => tracing::warn!(error = %e, "unreadable report from the sandbox helper"),
        }
    }
    r
}

/// Reads the status pipe to its end (on a blocking thread: its writers are the helper and the
/// sandbox's init, which both die with the run).
async fn read_status(fd: OwnedFd) -> Vec<u8> {
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match rustix::io::read(&fd, &mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(buf.get(..n).unwrap_or_default()),
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => break,
            }
        }
        out
    })
    .await
    .unwrap_or_default()
}

impl LinuxBackend {
    async fn run_one(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
        self.check()?;
        validate(&req)?;
        let program = req.argv.first().cloned().unwrap_or_default();
        let spawn_error = |reason: String| ExecError::Spawn {
            program: program.clone(),
            reason,
        };
        let read_paths = sandbox_paths(&req.read_paths, "read")?;
        let write_paths = sandbox_paths(&req.write_paths, "write")?;
        // Checked on the host for a clear error; the sandbox resolves it in its own view.
        let cwd = match std::fs::metadata(&req.cwd) {
            Ok(m) if m.is_dir() && req.cwd.is_absolute() => req.cwd.clone(),
            Ok(_) => {
                return Err(spawn_error(format!(
                    "the working directory `{}` is not an absolute path to a directory",
                    req.cwd.display()
                )));
            }
            Err(e) => {
                return Err(spawn_error(format!(
                    "the working directory `{}` is not usable: {e}",
                    req.cwd.display()
                )));
            }
        };

        let run_id = format!(
            "{}-{}",
            std::process::id(),
            RUN_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let root_dir = make_run_dir(&self.runtime_dir, &run_id)?;
        let mut run = Run {
            root_dir: Some(root_dir.clone()),
            cgroups: None,
        };

        let rlimits: Vec<_> = rlimit_plan(&req.limits).into_iter().flatten().collect();
        let spec = Spec {
            argv: req.argv.clone(),
            env: req.env.clone(),
            cwd,
            read_paths,
            write_paths,
            root_dir,
            network: self.network,
            rlimits,
            timeout_ms: u64::try_from(req.timeout.as_millis()).unwrap_or(u64::MAX),
            tmp_bytes: req
                .limits
                .memory
                .map_or(DEFAULT_TMP_BYTES, |m| m.min(DEFAULT_TMP_BYTES)),
            parent_pid: rustix::process::getpid().as_raw_nonzero().get(),
        };
        let encoded = spec::encode(&spec).map_err(ExecError::Invalid)?;

        let pids_max = req
            .limits
            .processes
            .map_or(DEFAULT_PIDS_MAX, u64::from)
            .saturating_add(OWN_PIDS);
        // Fail closed: every run has a process limit (the default one when the request sets
        // none), and the pids cgroup is what enforces it (RLIMIT_NPROC is void for a host-root
        // caller); a memory limit likewise needs its memory cgroup. No cgroup, no run.
        let cgroups =
            cgroup::RunCgroups::create(&self.cgroups(), &run_id, pids_max, req.limits.memory);
        let result = match cgroups {
            Ok(cg)
                if cg.has("cgroup:pids")
                    && (req.limits.memory.is_none() || cg.has("cgroup:memory")) =>
            {
                run.cgroups = Some(cg);
                self.spawn_and_wait(&req, encoded, &mut run, &spawn_error)
                    .await
            }
            Ok(cg) => {
                run.cgroups = Some(cg);
                Err(unavailable(
                    "cgroup: the run's limits have no cgroup to enforce them",
                ))
            }
            Err((e, partial)) => {
                run.cgroups = Some(partial);
                Err(unavailable(format!("cgroup: {e}")))
            }
        };
        let destroyed = run.destroy().await;
        let mut out = result?;
        out.attestation.destroyed &= destroyed;
        Ok(out)
    }

    async fn spawn_and_wait(
        &self,
        req: &ExecRequest,
        encoded: Vec<u8>,
        run: &mut Run,
        spawn_error: &(dyn Fn(String) -> ExecError + Sync),
    ) -> Result<ExecOutput, ExecError> {
        let (status_read, status_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| unavailable(format!("status pipe: {e}")))?;
        let status_fd = status_write.as_raw_fd();
        let parent = rustix::process::getpid();
        let mut cmd = Command::new(&self.helper);
        cmd.arg(HELPER_ARG)
            .arg(status_fd.to_string())
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        #[expect(
            unsafe_code,
            reason = "pre_exec keeps the status pipe open across exec and sets PDEATHSIG"
        )]
        // SAFETY: the closure runs in the forked child before `exec` and only makes raw system
        // calls through rustix (fcntl, prctl, getppid): no lock, no allocation. The descriptor
        // is borrowed from `status_write`, which the parent keeps open until after `spawn`.
        unsafe {
            cmd.pre_exec(move || {
                let fd = std::os::fd::BorrowedFd::borrow_raw(status_fd);
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
                if rustix::process::getppid() != Some(parent) {
                    return Err(rustix::io::Errno::SRCH.into());
                }
                Ok(())
            });
        }
        let start = Instant::now();
        let mut child = cmd.spawn().map_err(|e| {
            unavailable(format!(
                "cannot start the sandbox helper `{}`: {e}",
                self.helper.display()
            ))
        })?;
        drop(status_write);
        let Some(pid) = child.id() else {
            return Err(unavailable("the sandbox helper has no process id"));
        };
        let Some(pgid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
            return Err(unavailable("the sandbox helper has no process id"));
        };
        // Into the cgroups before it reads its spec, so nothing it forks escapes them.
        if let Some(cg) = &run.cgroups {
            if let Err(e) = cg.add(pid) {
                kill_group(pgid);
                let _ = child.wait().await;
                return Err(unavailable(format!("cgroup: {e}")));
            }
        }
        let status_task = tokio::spawn(read_status(status_read));

        let mut out = Captured::default();
        let mut err = Captured::default();
        let backup = req.timeout.saturating_add(HELPER_GRACE);
        let (killed, helper_status, duration) = {
            let (stdin_pipe, stdout_pipe, stderr_pipe) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take());
            let io = async {
                tokio::join!(
                    feed(stdin_pipe, Some(encoded), req.stdin.clone()),
                    capture(stdout_pipe, req.max_output_bytes, &mut out),
                    capture(stderr_pipe, req.max_output_bytes, &mut err),
                );
            };
            let mut io = std::pin::pin!(io);
            let mut io_done = false;
            let waited = {
                let exit = tokio::time::timeout(backup, exited(&mut child, pgid));
                let mut exit = std::pin::pin!(exit);
                loop {
                    tokio::select! {
                        r = &mut exit => break r,
                        () = &mut io, if !io_done => io_done = true,
                    }
                }
            };
            let (killed, reaped) = match waited {
                Ok(Ok(Exit::Reaped(status))) => (false, Some(status)),
                Ok(Ok(Exit::Zombie)) => (false, None),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "waiting for the sandbox helper failed; killing it");
                    (true, None)
                }
                Err(_elapsed) => {
                    tracing::warn!("the sandbox helper overstayed its timeout; killing it");
                    (true, None)
                }
            };
            // The helper and the sandbox's init share this group (the target has its own
            // session, but dies with the init's pid namespace).
            kill_group(pgid);
            let status = match reaped {
                Some(s) => s,
                None => child
                    .wait()
                    .await
                    .map_err(|e| unavailable(format!("lost track of the sandbox helper: {e}")))?,
            };
            let duration = start.elapsed();
            if !io_done && tokio::time::timeout(PIPE_GRACE, &mut io).await.is_err() {
                tracing::debug!("something still holds the sandbox's pipes; not waiting");
            }
            (killed, status, duration)
        };
        let status_bytes = match tokio::time::timeout(PIPE_GRACE, status_task).await {
            Ok(Ok(bytes)) => bytes,
            _ => Vec::new(),
        };
        let reports = parse_reports(&status_bytes);

        match (&reports.ready, reports.failed) {
            (None, Some((kind, step, error))) => {
                let msg = format!("{step}: {error}");
                return Err(match kind {
                    FailKind::Unavailable => unavailable(msg),
                    FailKind::Spawn => spawn_error(error),
                    FailKind::Invalid => ExecError::Invalid(msg),
                });
            }
            (Some(_), Some((_, _, error))) => return Err(spawn_error(error)),
            (None, None) => {
                return Err(unavailable(format!(
                    "the sandbox helper `{}` made no report (it ended with {helper_status}); is it a corral binary?",
                    self.helper.display()
                )));
            }
            (Some(_), None) => {}
        }
        let primitives_from_helper = reports.ready.unwrap_or_default();
        let timed_out = reports.done.unwrap_or(false) || killed;
        let (exit_code, signal) = match reports.exited {
            Some((code, signal)) if !timed_out => (code, signal),
            _ if timed_out => (None, Some(Signal::KILL.as_raw())),
            _ => (helper_status.code(), helper_status.signal()),
        };
        // The pid namespace is empty once the helper reaped its init (reported as `Done`), or
        // once the run's pids cgroup has no process left.
        let ns_gone = reports.done.is_some()
            || run
                .cgroups
                .as_ref()
                .is_some_and(|cg| cg.primitives().any(|p| p == "cgroup:pids") && cg.empty());

        let mut primitives: Vec<String> = vec!["env:clear".into()];
        primitives.extend(primitives_from_helper);
        if let Some(cg) = &run.cgroups {
            primitives.extend(cg.primitives().map(String::from));
        }
        Ok(ExecOutput {
            exit_code,
            signal,
            stdout: out.bytes,
            stderr: err.bytes,
            stdout_truncated: out.truncated,
            stderr_truncated: err.truncated,
            timed_out,
            duration,
            attestation: Attestation {
                backend: NAME,
                isolated: true,
                destroyed: ns_gone,
                primitives,
            },
        })
    }
}

/// A run's host-side state, removed after the run.
#[derive(Debug)]
struct Run {
    root_dir: Option<PathBuf>,
    cgroups: Option<cgroup::RunCgroups>,
}

impl Run {
    /// Removes the run's directory and cgroups; whether both are verifiably gone.
    async fn destroy(&mut self) -> bool {
        let dir = self.root_dir.take();
        let cgroups = self.cgroups.take();
        tokio::task::spawn_blocking(move || {
            let cg_gone = cgroups.is_none_or(|cg| cg.remove(CGROUP_GRACE));
            let dir_gone = dir.is_none_or(|dir| {
                if let Err(e) = std::fs::remove_dir(&dir) {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the run's directory");
                }
                matches!(std::fs::symlink_metadata(&dir), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
            });
            cg_gone && dir_gone
        })
        .await
        .unwrap_or(false)
    }
}
