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
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use tokio::process::Command;

use crate::common::{
    Captured, Exit, RlimitSpec, capture, describe_spawn_error, exited, feed, kill_group,
    rlimit_plan, validate,
};
use crate::{
    AttachTx, Attached, Attestation, Backend, BoxFuture, ExecError, ExecOutput, ExecRequest,
    ResourceLimits,
};

/// The backend's name, in attestations and errors.
const NAME: &str = "process";

/// How long the pipes are still read after the child exited (and its group was killed). Output a
/// process wrote before exiting is already in the pipe, so this only matters when something that
/// escaped the process group still holds a pipe open.
const PIPE_GRACE: Duration = Duration::from_millis(1000);

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
        Box::pin(run(req, None))
    }

    fn run_attached(
        &self,
        req: ExecRequest,
        attach: AttachTx,
    ) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        Box::pin(run(req, Some(attach)))
    }
}

/// What the child applies to itself between `fork` and `exec`. Plain `Copy` data, so the hook
/// neither allocates nor frees.
#[derive(Debug, Clone, Copy)]
struct ChildSetup {
    /// The rlimits to set, already clamped to the hard limits corral itself runs under.
    rlimits: [Option<RlimitSpec>; 5],
    /// corral's pid, to catch corral dying before `PR_SET_PDEATHSIG` took effect.
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    parent: Pid,
}

impl ChildSetup {
    /// Computes the rlimits (in the parent, where failing is cheap and reportable).
    fn new(limits: &ResourceLimits) -> Self {
        ChildSetup {
            rlimits: rlimit_plan(limits),
            parent: rustix::process::getpid(),
        }
    }

    /// Runs in the child after `fork`, before `exec`: async-signal-safe system calls only, no
    /// allocation (rustix's calls are raw syscalls; `io::Error::from_raw_os_error` does not
    /// allocate).
    fn apply(&self) -> io::Result<()> {
        for rlimit in self.rlimits.iter().flatten() {
            rlimit.apply()?;
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
        let rlimits = self.rlimits.iter().flatten().map(|r| r.kind.primitive());
        let pdeathsig =
            cfg!(any(target_os = "linux", target_os = "android")).then_some("pdeathsig");
        pdeathsig.into_iter().chain(rlimits)
    }
}

/// Kills a process group when dropped, unless taken first.
struct GroupKill(Option<Pid>);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            kill_group(pgid);
        }
    }
}

/// Checked up front so a bad directory is not reported as a missing program (both are ENOENT):
/// the working directory exists and is a directory; else why not.
async fn check_cwd(cwd: &std::path::Path) -> Result<(), String> {
    match crate::common::cwd_problem(cwd, tokio::fs::metadata(cwd).await, false) {
        None => Ok(()),
        Some(problem) => Err(problem),
    }
}

/// The child's command: `argv` with only `env`, in `cwd`, in a process group of its own, its
/// stdin piped when `piped_stdin` (else null), stdout and stderr piped, and `setup` (rlimits,
/// PDEATHSIG) applied in the child before `exec`.
fn command(
    argv: &[String],
    env: &[(String, String)],
    cwd: &std::path::Path,
    piped_stdin: bool,
    setup: ChildSetup,
) -> Command {
    let mut cmd = Command::new(argv.first().map_or("", String::as_str));
    cmd.args(argv.iter().skip(1))
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(if piped_stdin {
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
    cmd
}

/// Phase 2 of a run: kills what is left of the group (the child is unreaped, so the id is still
/// ours), and the child itself if it was not reaped, then its exit status. Returns whether the
/// timeout passed, and the status.
async fn end_group(
    child: &mut tokio::process::Child,
    group: &mut GroupKill,
    waited: Result<io::Result<Exit>, tokio::time::error::Elapsed>,
) -> io::Result<(bool, std::process::ExitStatus)> {
    let (timed_out, reaped) = match waited {
        Ok(Ok(Exit::Reaped(status))) => (false, Some(status)),
        Ok(Ok(Exit::Zombie)) => (false, None),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "waiting for the child failed; killing it");
            (false, None)
        }
        Err(_elapsed) => (true, None),
    };
    if let Some(pgid) = group.0.take() {
        kill_group(pgid);
    }
    if reaped.is_none() {
        // In case the child left its group; a no-op if it already exited.
        if let Err(e) = child.start_kill() {
            tracing::debug!(error = %e, "killing the child directly failed");
        }
    }
    let status = match reaped {
        Some(status) => status,
        None => child.wait().await?,
    };
    Ok((timed_out, status))
}

async fn run(req: ExecRequest, attach: Option<AttachTx>) -> Result<ExecOutput, ExecError> {
    validate(&req)?;
    refuse_egress(&req)?;
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

    check_cwd(&cwd).await.map_err(&spawn_error)?;

    let setup = ChildSetup::new(&limits);
    let mut cmd = command(
        &argv,
        &env,
        &cwd,
        stdin.is_some() || attach.is_some(),
        setup,
    );

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
    // Declared after `child`, so dropped before it: a run abandoned mid-way (an upstream MCP
    // server's supervisor gave up on it) kills the whole group while the child still pins it.
    let mut group = GroupKill(Some(pgid));

    let mut out = Captured::default();
    let mut err = Captured::default();
    let (timed_out, status, duration) = {
        let (stdin_pipe, stdout_pipe, stderr_pipe) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let attestation = attestation(primitives.clone());
        let io = async {
            match attach {
                Some(tx) => {
                    if let (Some(stdin), Some(stdout)) = (stdin_pipe, stdout_pipe) {
                        let _ = tx.send(Attached {
                            stdin: Box::new(stdin),
                            stdout: Box::new(stdout),
                            attestation,
                        });
                    }
                    capture(stderr_pipe, max_output_bytes, &mut err).await;
                }
                None => {
                    tokio::join!(
                        feed(stdin_pipe, None, stdin),
                        capture(stdout_pipe, max_output_bytes, &mut out),
                        capture(stderr_pipe, max_output_bytes, &mut err),
                    );
                }
            }
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

        // Phase 2: kill what is left of the group and reap the child.
        let (timed_out, status) = end_group(&mut child, &mut group, waited)
            .await
            .map_err(lost_child)?;
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
        attestation: attestation(primitives),
        changes: None,
    })
}

/// A child that could not be reaped: it started, so what it did is unknown (never a failure
/// to start, which would give an approval back).
fn lost_child(e: std::io::Error) -> ExecError {
    ExecError::Lost {
        backend: NAME,
        what: format!("the child could not be reaped: {e}"),
    }
}

/// What this backend attests: not isolated, nothing destroyed, the primitives it applied.
fn attestation(primitives: Vec<String>) -> Attestation {
    Attestation {
        backend: NAME,
        isolated: false,
        destroyed: false,
        primitives,
    }
}

/// An allow-list (of the network, of the programs run) promises that nothing else is
/// reachable: a plain child cannot keep it.
fn refuse_egress(req: &ExecRequest) -> Result<(), ExecError> {
    if req.hold.is_some() || req.apply_only_if_ok {
        return Err(ExecError::Unavailable {
            backend: "process",
            missing: "holding changes for a person, or applying them only if the run succeeds, \
                      needs a copy-on-write layer; use \
                      `isolation: {backend: linux}`"
                .to_owned(),
        });
    }
    if req.exec_only.is_some() {
        return Err(ExecError::Unavailable {
            backend: "process",
            missing: "a run that may execute only some programs needs landlock; use \
                      `isolation: {backend: linux}`"
                .to_owned(),
        });
    }
    if matches!(
        req.network,
        Some(crate::RunNetwork::Corral(_) | crate::RunNetwork::CorralAndEgress(..))
    ) {
        return Err(ExecError::Unavailable {
            backend: "process",
            missing: "a program whose only network is corral's own API needs a network namespace; \
                      use `isolation: {backend: linux}`"
                .to_owned(),
        });
    }
    if matches!(req.network, Some(crate::RunNetwork::Egress(_))) {
        return Err(ExecError::Unavailable {
            backend: "process",
            missing: "an egress allow-list (`network: {allow: [...]}`) needs a network namespace; \
                      use `isolation: {backend: linux}`"
                .to_owned(),
        });
    }
    Ok(())
}
