//! The `process` backend: a plain child process with rlimits, a timeout that kills its whole
//! process group, and capped output. It isolates nothing and says so: `isolated: false`.
//!
//! What it does to each run:
//!
//! - no shell: `argv[0]` is the program (a bare name is looked up in the child's own `PATH`,
//!   i.e. the one in `req.env`, by `execvp`);
//! - the environment is cleared and set to exactly `req.env`; the working directory is `req.cwd`;
//! - the child leads a new process group; the group is sent `SIGKILL` when the timeout passes and
//!   again after a normal exit, so background grandchildren do not outlive the run;
//! - rlimits are applied in the child between `fork` and `exec`, and on Linux the child gets
//!   `PR_SET_PDEATHSIG(SIGKILL)` so it dies with corral;
//! - stdout and stderr are read concurrently, each capped at `max_output_bytes`; the rest is read
//!   and dropped so the child never blocks on a full pipe.
//!
//! What it does not do: a process that calls `setsid`/`setpgid` leaves the group and escapes the
//! group kill (a cgroup would be needed for that; see the `linux` backend). The call itself still
//! returns: the pipes are only waited for a short while after the exit. `PR_SET_PDEATHSIG` fires
//! when the *thread* that spawned the child exits, not only the process: drive `run` on a thread
//! that outlives the run (any tokio runtime worker, or the thread of a `block_on`).

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Resource, Rlimit, Signal};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};

use crate::{Attestation, Backend, BoxFuture, ExecError, ExecOutput, ExecRequest, ResourceLimits};

/// The backend's name, in attestations and errors.
const NAME: &str = "process";

/// How long the pipes are still read after the child exited (and its group was killed). Output a
/// process wrote before exiting is already in the pipe, so this only matters when something that
/// escaped the process group still holds a pipe open.
const PIPE_GRACE: Duration = Duration::from_millis(1000);

/// Read buffer size for stdout and stderr.
const READ_CHUNK: usize = 64 * 1024;

/// A plain child process: rlimits, process-group kill on timeout, capped output, no isolation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessBackend;

impl ProcessBackend {
    /// The backend.
    pub fn new() -> Self {
        ProcessBackend
    }
}

impl Backend for ProcessBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn preflight(&self) -> Result<(), ExecError> {
        // A plain process needs nothing the host could lack.
        Ok(())
    }

    fn run(&self, req: ExecRequest) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        Box::pin(run(req))
    }
}

/// Rejects requests `exec` could not represent faithfully.
fn validate(req: &ExecRequest) -> Result<(), ExecError> {
    let Some(program) = req.argv.first() else {
        return Err(ExecError::Invalid("argv is empty".into()));
    };
    if program.is_empty() {
        return Err(ExecError::Invalid("argv[0] is empty".into()));
    }
    if let Some(i) = req.argv.iter().position(|a| a.contains('\0')) {
        return Err(ExecError::Invalid(format!("argv[{i}] contains a NUL byte")));
    }
    for (key, value) in &req.env {
        if key.is_empty() {
            return Err(ExecError::Invalid(
                "an environment variable has an empty name".into(),
            ));
        }
        if key.contains('\0') || value.contains('\0') {
            return Err(ExecError::Invalid(format!(
                "environment variable `{}` contains a NUL byte",
                key.escape_debug()
            )));
        }
        if key.contains('=') {
            return Err(ExecError::Invalid(format!(
                "environment variable name `{key}` contains `=`"
            )));
        }
    }
    if req.cwd.as_os_str().as_bytes().contains(&0) {
        return Err(ExecError::Invalid(
            "the working directory contains a NUL byte".into(),
        ));
    }
    Ok(())
}

/// What the child applies to itself between `fork` and `exec`. Plain `Copy` data, so the hook
/// neither allocates nor frees.
#[derive(Debug, Clone, Copy)]
struct ChildSetup {
    /// The rlimits to set, already clamped to the hard limits corral itself runs under.
    rlimits: [Option<(Resource, Rlimit)>; 5],
    /// corral's pid, to catch corral dying before `PR_SET_PDEATHSIG` took effect.
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    parent: Pid,
}

impl ChildSetup {
    /// Computes the rlimits (in the parent, where failing is cheap and reportable).
    fn new(limits: &ResourceLimits) -> Self {
        let soft_hard = |resource: Resource, soft: u64, hard: u64| {
            // Asking for more than corral's own hard limit would fail with EPERM; the child
            // inherits that hard limit anyway, so the tighter one is what applies.
            let ceiling = rustix::process::getrlimit(resource)
                .maximum
                .unwrap_or(u64::MAX);
            let rlimit = Rlimit {
                current: Some(soft.min(ceiling)),
                maximum: Some(hard.min(ceiling)),
            };
            Some((resource, rlimit))
        };
        let same = |resource: Resource, value: u64| soft_hard(resource, value, value);
        ChildSetup {
            rlimits: [
                // One second between SIGXCPU (soft) and SIGKILL (hard): a chance to exit cleanly.
                limits
                    .cpu_seconds
                    .and_then(|s| soft_hard(Resource::Cpu, s, s.saturating_add(1))),
                limits.memory.and_then(|m| same(Resource::As, m)),
                limits
                    .processes
                    .and_then(|p| same(Resource::Nproc, u64::from(p))),
                limits.file_size.and_then(|f| same(Resource::Fsize, f)),
                limits.open_files.and_then(|n| same(Resource::Nofile, n)),
            ],
            parent: rustix::process::getpid(),
        }
    }

    /// Runs in the child after `fork`, before `exec`: async-signal-safe system calls only, no
    /// allocation (rustix's calls are raw syscalls; `io::Error::from_raw_os_error` does not
    /// allocate).
    fn apply(&self) -> io::Result<()> {
        for (resource, rlimit) in self.rlimits.iter().flatten() {
            rustix::process::setrlimit(*resource, *rlimit)?;
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            // corral may have died between `fork` and the `prctl`: then the signal never comes.
            if rustix::process::getppid() != Some(self.parent) {
                return Err(rustix::io::Errno::SRCH.into());
            }
        }
        Ok(())
    }

    /// The attestation's names for what `apply` sets.
    fn primitives(&self) -> impl Iterator<Item = &'static str> + '_ {
        let rlimits = self
            .rlimits
            .iter()
            .flatten()
            .map(|(resource, _)| match resource {
                Resource::Cpu => "rlimit:cpu",
                Resource::As => "rlimit:as",
                Resource::Nproc => "rlimit:nproc",
                Resource::Fsize => "rlimit:fsize",
                Resource::Nofile => "rlimit:nofile",
                _ => "rlimit:other",
            });
        let pdeathsig =
            cfg!(any(target_os = "linux", target_os = "android")).then_some("pdeathsig");
        pdeathsig.into_iter().chain(rlimits)
    }
}

/// At most `cap` bytes of one output stream, and whether more came.
#[derive(Debug, Default)]
struct Captured {
    bytes: Vec<u8>,
    truncated: bool,
}

/// Reads `pipe` to its end, keeping the first `cap` bytes in `out` and dropping the rest.
async fn capture(pipe: Option<impl AsyncRead + Unpin>, cap: u64, out: &mut Captured) {
    let Some(mut pipe) = pipe else { return };
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::debug!(error = %e, "reading the child's output failed");
                return;
            }
        };
        let room = cap.saturating_sub(out.bytes.len());
        let keep = n.min(room);
        if let Some(kept) = buf.get(..keep) {
            out.bytes.extend_from_slice(kept);
        }
        if keep < n {
            out.truncated = true;
        }
    }
}

/// Writes `data` to the child's stdin, then closes it. A child that exits without reading it all
/// is not an error (`EPIPE`).
async fn feed(stdin: Option<ChildStdin>, data: Option<Vec<u8>>) {
    let (Some(mut stdin), Some(data)) = (stdin, data) else {
        return;
    };
    if let Err(e) = stdin.write_all(&data).await {
        tracing::debug!(error = %e, "writing the child's stdin stopped early");
    }
    drop(stdin);
}

/// How the child's exit was noticed.
enum Exit {
    /// Exited and already reaped (fallback path): its pid may be reused now.
    Reaped(ExitStatus),
    /// Exited but not reaped (a zombie): its pid, hence its process group id, is still pinned.
    Zombie,
}

/// How often the child's state is re-checked even without a `SIGCHLD` (belt and braces).
const EXIT_POLL: Duration = Duration::from_millis(500);

/// Waits for the child to exit without reaping it, so that killing its process group afterwards
/// cannot hit a recycled id: `waitid(WEXITED | WNOWAIT | WNOHANG)` on every `SIGCHLD`. Falls
/// back to reaping it (`Child::wait`) when `SIGCHLD` cannot be watched.
async fn exited(child: &mut Child, pid: Pid) -> io::Result<Exit> {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    use tokio::signal::unix::{SignalKind, signal};

    // Registered before the first check, so an exit in between is not missed.
    let mut sigchld = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "cannot watch SIGCHLD; reaping before the group kill");
            return child.wait().await.map(Exit::Reaped);
        }
    };
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
    loop {
        match waitid(WaitId::Pid(pid), options) {
            Ok(Some(_)) => return Ok(Exit::Zombie),
            Ok(None) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        tokio::select! {
            _ = sigchld.recv() => {}
            () = tokio::time::sleep(EXIT_POLL) => {}
        }
    }
}

/// `SIGKILL` to the whole process group led by the child. An empty group (`ESRCH`) is fine.
fn kill_group(pgid: Pid) {
    match rustix::process::kill_process_group(pgid, Signal::KILL) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => {}
        Err(e) => {
            let pgid = pgid.as_raw_nonzero().get();
            tracing::warn!(pgid, error = %e, "killing the process group failed");
        }
    }
}

async fn run(req: ExecRequest) -> Result<ExecOutput, ExecError> {
    validate(&req)?;
    let ExecRequest {
        argv,
        cwd,
        env,
        stdin,
        timeout,
        max_output_bytes,
        limits,
        ..
    } = req;
    let program = argv.first().cloned().unwrap_or_default();
    let spawn_error = |reason: String| ExecError::Spawn {
        program: program.clone(),
        reason,
    };

    // Checked up front so a bad directory is not reported as a missing program (both are ENOENT).
    match tokio::fs::metadata(&cwd).await {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(spawn_error(format!(
                "the working directory `{}` is not a directory",
                cwd.display()
            )));
        }
        Err(e) => {
            return Err(spawn_error(format!(
                "the working directory `{}` is not usable: {e}",
                cwd.display()
            )));
        }
    }

    let setup = ChildSetup::new(&limits);
    let mut cmd = Command::new(&program);
    cmd.args(argv.iter().skip(1))
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(&cwd)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    #[expect(
        unsafe_code,
        reason = "pre_exec is the only way to set rlimits and PDEATHSIG in the child"
    )]
    // SAFETY: the closure runs in the forked child before `exec`. `ChildSetup::apply` only makes
    // raw system calls (setrlimit, prctl, getppid) through rustix, touches no locks, and neither
    // allocates nor frees: its data is a `Copy` value moved into the closure, and its error path
    // builds an `io::Error` from a raw errno, which does not allocate.
    unsafe {
        cmd.pre_exec(move || setup.apply());
    }

    let mut primitives: Vec<String> = vec!["env:clear".into(), "pgroup".into()];
    primitives.extend(setup.primitives().map(String::from));

    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| spawn_error(describe_spawn_error(&e)))?;
    let Some(pgid) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw)
    else {
        // Only possible if the child was already reaped, which nothing here has done.
        return Err(spawn_error("the child has no process id".into()));
    };

    let mut out = Captured::default();
    let mut err = Captured::default();
    let (timed_out, status, duration) = {
        let (stdin_pipe, stdout_pipe, stderr_pipe) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let io = async {
            tokio::join!(
                feed(stdin_pipe, stdin),
                capture(stdout_pipe, max_output_bytes, &mut out),
                capture(stderr_pipe, max_output_bytes, &mut err),
            );
        };
        let mut io = std::pin::pin!(io);
        let mut io_done = false;

        // Phase 1: the child runs, its output is read, until it exits or the timeout passes.
        let waited = {
            let exit = tokio::time::timeout(timeout, exited(&mut child, pgid));
            let mut exit = std::pin::pin!(exit);
            loop {
                tokio::select! {
                    r = &mut exit => break r,
                    () = &mut io, if !io_done => io_done = true,
                }
            }
        };

        // Phase 2: kill what is left of the group (the child is unreaped, so the id is still ours).
        let (timed_out, reaped) = match waited {
            Ok(Ok(Exit::Reaped(status))) => (false, Some(status)),
            Ok(Ok(Exit::Zombie)) => (false, None),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "waiting for the child failed; killing it");
                (false, None)
            }
            Err(_elapsed) => (true, None),
        };
        kill_group(pgid);
        if reaped.is_none() {
            // In case the child left its group; a no-op if it already exited.
            if let Err(e) = child.start_kill() {
                tracing::debug!(error = %e, "killing the child directly failed");
            }
        }
        let status = match reaped {
            Some(status) => status,
            None => child
                .wait()
                .await
                .map_err(|e| spawn_error(format!("lost track of the child: {e}")))?,
        };
        let duration = start.elapsed();

        // Phase 3: read what is still in the pipes, but do not wait on whatever escaped the group.
        if !io_done && tokio::time::timeout(PIPE_GRACE, &mut io).await.is_err() {
            tracing::debug!(
                "a process outside the group still holds the child's pipes; not waiting"
            );
        }
        (timed_out, status, duration)
    };

    Ok(ExecOutput {
        exit_code: status.code(),
        signal: status.signal(),
        stdout: out.bytes,
        stderr: err.bytes,
        stdout_truncated: out.truncated,
        stderr_truncated: err.truncated,
        timed_out,
        duration,
        attestation: Attestation {
            backend: NAME,
            isolated: false,
            destroyed: false,
            primitives,
        },
    })
}

/// A reason that says what went wrong, not only the errno.
fn describe_spawn_error(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => format!("no such program (or its interpreter is missing): {e}"),
        io::ErrorKind::PermissionDenied => {
            format!(
                "permission denied (not executable, or a parent directory is not searchable): {e}"
            )
        }
        _ => e.to_string(),
    }
}
