//! Where sandboxes come from: one thread per backend (the *starter*) starts every helper, each
//! in its own per-run directory and cgroups, and gives it its [`Prep`]; the helper then builds
//! the request-independent part of the sandbox (namespaces, the base root view) and waits for
//! its [`Spec`](super::spec::Spec). The starter keeps up to `size` such **warm** sandboxes
//! ready, so that a run only sends its spec: the helper's start, the namespaces and most of the
//! mounts are off the run's path.
//!
//! A warm sandbox holds nothing of any request: a run's paths, environment, argv, limits and
//! stdin reach it only with the spec. It has a `pids.max` of its own two processes and no memory
//! limit until the run writes the run's limits, and the run's timeout starts when the helper
//! reads the spec. Every sandbox gets each cgroup the host offers; a run that needs one its warm
//! sandbox lacks, or that binds a path of its own under `/etc`, gets a sandbox started for it. A
//! warm sandbox made from an older copy of
//! `/etc`, or whose helper died or reported a failure while waiting, is discarded, never used.
//!
//! The starter thread is the helpers' parent thread, so `PR_SET_PDEATHSIG` ties them to it: it
//! lives as long as the backend, and when the backend is dropped it kills and removes every warm
//! sandbox before it ends.

use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use rustix::process::{Pid, Signal};

use super::cgroup::{Controller, RunCgroups, Support};
use super::etc::Snapshot;
use super::spec::{self, EtcSource, Network, Prep};
use super::{CGROUP_GRACE, HELPER_ARG, HELPER_MARKER_ENV, OWN_PIDS, make_run_dir, unavailable};
use crate::ExecError;
use crate::common::kill_group;

/// Numbers the sandboxes started by this process.
static RUN_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The `/etc` a sandbox is made with.
#[derive(Debug, Clone)]
pub(crate) enum Etc {
    /// The backend's current copy (kept alive as long as a sandbox uses it).
    Snapshot(Arc<Snapshot>),
    /// One bind per allowed entry.
    AllowList,
}

impl Etc {
    fn source(&self) -> EtcSource {
        match self {
            Etc::Snapshot(s) => EtcSource::Snapshot {
                dir: s.dir().to_path_buf(),
                dirs: s.dirs().to_vec(),
            },
            Etc::AllowList => EtcSource::AllowList,
        }
    }

    fn generation(&self) -> Option<u64> {
        match self {
            Etc::Snapshot(s) => Some(s.generation()),
            Etc::AllowList => None,
        }
    }
}

/// What every sandbox of a backend is started with.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub(crate) helper: PathBuf,
    pub(crate) runtime_dir: PathBuf,
    pub(crate) network: Network,
    /// The helpers' stdout and stderr are this process's own (see
    /// `LinuxBackend::with_inherited_output`), not pipes.
    pub(crate) inherit_output: bool,
    /// The host ids sandboxes map to (`isolation.host_uids`, as host root), if any.
    pub(crate) host_ids: Option<super::idmap::HostRange>,
}

/// What a run asks the starter for.
#[derive(Debug, Clone)]
pub(crate) struct Want {
    pub(crate) etc: Etc,
    /// The cgroups the run cannot do without (a sandbox lacking one is no use to it).
    pub(crate) required: Vec<Controller>,
    pub(crate) cgroups: Support,
    /// The run's network when it is not the backend's: a sandbox is started for the run.
    pub(crate) network: Option<Network>,
    /// With `Network::Egress`: the run's proxy hand-over socket.
    pub(crate) egress_socket: Option<PathBuf>,
}

impl Want {
    fn warm_ok(&self) -> bool {
        self.network.is_none()
            && self.egress_socket.is_none()
            && matches!(self.etc, Etc::Snapshot(_))
    }

    /// Whether `sandbox` has every cgroup this run requires.
    fn fits(&self, sandbox: &Sandbox) -> bool {
        self.required
            .iter()
            .all(|c| sandbox.cgroups.as_ref().is_some_and(|cg| cg.has(*c)))
    }
}

/// A started helper and its host-side state: given its `Prep` (so joining its cgroups before it
/// forks anything), not yet its spec.
#[derive(Debug)]
pub(crate) struct Sandbox {
    child: Child,
    /// Whether `child` was reaped: its pid (the group's id) may then name another process.
    reaped: bool,
    pub(crate) pgid: Pid,
    pub(crate) pidfd: OwnedFd,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) stdout: Option<ChildStdout>,
    pub(crate) stderr: Option<ChildStderr>,
    /// The status pipe's read end.
    pub(crate) status: Option<OwnedFd>,
    pub(crate) run_id: String,
    pub(crate) root_dir: Option<PathBuf>,
    pub(crate) cgroups: Option<RunCgroups>,
    /// Keeps the sandbox's copy of `/etc` alive.
    _etc: Etc,
}

impl Sandbox {
    /// Kills what is left of the helper's process group and reaps the helper (once).
    pub(crate) fn reap(&mut self) -> std::io::Result<std::process::ExitStatus> {
        if !self.reaped {
            kill_group(self.pgid);
        }
        let status = self.child.wait();
        self.reaped |= status.is_ok();
        status
    }

    /// Reaps the helper if it has exited (after killing what is left of its group); `None` if
    /// it still runs.
    pub(crate) fn try_reap(&mut self) -> Option<std::io::Result<std::process::ExitStatus>> {
        if !self.reaped {
            kill_group(self.pgid);
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.reaped = true;
                Some(Ok(status))
            }
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// Whether the run's cgroups hold no process any more (so removing them will not wait).
    pub(crate) fn cgroups_empty(&self) -> bool {
        self.cgroups.as_ref().is_none_or(RunCgroups::empty)
    }

    /// Removes the run's directory and cgroups; whether both are verifiably gone.
    pub(crate) fn remove_state(&mut self) -> bool {
        let cg_gone = self.cgroups.take().is_none_or(|cg| cg.remove(CGROUP_GRACE));
        let dir_gone = self.root_dir.take().is_none_or(|dir| {
            if let Err(e) = std::fs::remove_dir(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the run's directory");
            }
            matches!(std::fs::symlink_metadata(&dir), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
        });
        cg_gone && dir_gone
    }

    /// Kills, reaps and removes everything (a sandbox never used, or a run abandoned).
    fn destroy(mut self) {
        if let Err(e) = self.reap() {
            tracing::warn!(error = %e, "cannot reap a sandbox helper");
        }
        self.remove_state();
    }

    /// Whether it can still take a run: its helper is alive and nothing reported a failure.
    fn is_usable(&self) -> bool {
        use rustix::process::{WaitId, WaitIdOptions, waitid};
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
        if !matches!(waitid(WaitId::PidFd(self.pidfd.as_fd()), options), Ok(None)) {
            return false;
        }
        // Before its spec a sandbox reports nothing but a failure.
        let Some(status) = &self.status else {
            return false;
        };
        let mut fds = [rustix::event::PollFd::new(
            status,
            rustix::event::PollFlags::IN,
        )];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(0))
    }
}

/// Starts one sandbox: its directory and cgroups, the helper, its `Prep`.
fn start(launch: &Launch, want: &Want) -> Result<Sandbox, ExecError> {
    let run_id = format!(
        "{}-{}",
        std::process::id(),
        RUN_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let root_dir = make_run_dir(&launch.runtime_dir, &run_id)?;
    // Room for the helper and the init only, until the run sets its limit.
    let cgroups = match RunCgroups::create(&want.cgroups, &run_id, OWN_PIDS, &want.required) {
        Ok(cg) => cg,
        Err((e, partial)) => {
            partial.remove(CGROUP_GRACE);
            let _ = std::fs::remove_dir(&root_dir);
            return Err(unavailable(format!("cgroup: {e}")));
        }
    };
    let prep = Prep {
        root_dir: root_dir.clone(),
        etc: want.etc.source(),
        network: want.network.unwrap_or(launch.network),
        cgroups: cgroups.dirs().map(PathBuf::from).collect(),
        parent_pid: rustix::process::getpid().as_raw_nonzero().get(),
        egress_socket: want.egress_socket.clone(),
        host_ids: launch.host_ids,
    };
    let cleanup = |cgroups: RunCgroups, root_dir: &PathBuf| {
        cgroups.remove(CGROUP_GRACE);
        let _ = std::fs::remove_dir(root_dir);
    };
    let prep = match spec::encode(&prep) {
        Ok(p) => p,
        Err(e) => {
            cleanup(cgroups, &root_dir);
            return Err(ExecError::Invalid(e));
        }
    };
    let (mut child, status) = match spawn_helper(launch) {
        Ok(s) => s,
        Err(e) => {
            cleanup(cgroups, &root_dir);
            return Err(e);
        }
    };
    let ids = i32::try_from(child.id())
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| unavailable("the sandbox helper has no process id"))
        .and_then(|pgid| {
            // The child is ours and not reaped, so its pid names it until we wait for it.
            rustix::process::pidfd_open(pgid, rustix::process::PidfdFlags::NONBLOCK)
                .map(|pidfd| (pgid, pidfd))
                .map_err(|e| unavailable(format!("pidfd_open: {e}")))
        });
    let (pgid, pidfd) = match ids {
        Ok(ids) => ids,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            cleanup(cgroups, &root_dir);
            return Err(e);
        }
    };
    let mut sandbox = Sandbox {
        stdin: child.stdin.take(),
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
        child,
        reaped: false,
        pgid,
        pidfd,
        status: Some(status),
        run_id,
        root_dir: Some(root_dir),
        cgroups: Some(cgroups),
        _etc: want.etc.clone(),
    };
    // The helper joins its cgroups first thing (see `Prep::cgroups`).
    let sent = sandbox
        .stdin
        .as_mut()
        .ok_or_else(|| unavailable("the sandbox helper has no stdin"))
        .and_then(|stdin| {
            stdin.write_all(&prep).map_err(|e| {
                unavailable(format!(
                    "the sandbox helper `{}` did not take its prep: {e}",
                    launch.helper.display()
                ))
            })
        });
    match sent {
        Ok(()) => Ok(sandbox),
        Err(e) => {
            sandbox.destroy();
            Err(e)
        }
    }
}

/// Starts the helper process (its own process group; killed if this thread ends), with the
/// status pipe's write end as an extra descriptor. Returns it and the pipe's read end.
fn spawn_helper(launch: &Launch) -> Result<(Child, OwnedFd), ExecError> {
    // A binary whose `main` does not dispatch `__sandbox-exec` runs its own main again as the
    // "helper", which starts a helper of its own, and so on: a fork bomb. The marker set on
    // every helper breaks that chain at its first link, with the fix in the message.
    if std::env::var_os(HELPER_MARKER_ENV).is_some() {
        return Err(unavailable(format!(
            "this process was started as corral's sandbox helper but its `main` did not \
             dispatch it; call `corral_exec::helper_main()` first in `main` when argv[1] is \
             `{HELPER_ARG}`"
        )));
    }
    let (status_read, status_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| unavailable(format!("status pipe: {e}")))?;
    let status_fd = status_write.as_raw_fd();
    let parent = rustix::process::getpid();
    let output = || {
        if launch.inherit_output {
            Stdio::inherit()
        } else {
            Stdio::piped()
        }
    };
    let mut cmd = Command::new(&launch.helper);
    cmd.arg(HELPER_ARG)
        .arg(status_fd.to_string())
        .env_clear()
        .env(HELPER_MARKER_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(output())
        .stderr(output())
        .process_group(0);
    #[expect(
        unsafe_code,
        reason = "pre_exec keeps the status pipe open across exec and sets PDEATHSIG"
    )]
    // SAFETY: the closure runs in the forked child before `exec` and only makes raw system
    // calls through rustix (fcntl, prctl, getppid): no lock, no allocation. The descriptor is
    // borrowed from `status_write`, which this thread keeps open until after `spawn`.
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
    let child = cmd.spawn().map_err(|e| {
        unavailable(format!(
            "cannot start the sandbox helper `{}`: {e}",
            launch.helper.display()
        ))
    })?;
    drop(status_write);
    Ok((child, status_read))
}

#[derive(Debug)]
enum Msg {
    Take {
        want: Want,
        reply: tokio::sync::oneshot::Sender<Result<Sandbox, ExecError>>,
    },
    Prewarm(Want),
    /// Stop warming; remove the warm sandboxes.
    Cool,
    /// A run that took a sandbox ended (and removed it).
    Finished,
    /// A run that took a sandbox was abandoned before it removed it.
    Discard(Box<Sandbox>),
    Stop,
}

/// The starter thread of one backend.
#[derive(Debug)]
pub(crate) struct Pool {
    tx: mpsc::Sender<Msg>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pool {
    /// Starts the starter thread, which keeps up to `size` warm sandboxes once told what they
    /// are made of (by a `prewarm` or a `take`).
    pub(crate) fn new(launch: Launch, size: usize) -> Result<Self, ExecError> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("corral-sandbox-starter".into())
            .spawn(move || starter(&launch, size, &rx))
            .map_err(|e| unavailable(format!("cannot start the sandbox starter thread: {e}")))?;
        Ok(Pool {
            tx,
            thread: Some(thread),
        })
    }

    /// A sandbox for a run: a warm one when one fits, else one started now.
    pub(crate) async fn take(&self, want: Want) -> Result<Sandbox, ExecError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.tx
            .send(Msg::Take { want, reply })
            .map_err(|_| unavailable("the sandbox starter thread is gone"))?;
        rx.await
            .map_err(|_| unavailable("the sandbox starter thread is gone"))?
    }

    /// Warm sandboxes of this kind from now on.
    pub(crate) fn prewarm(&self, want: Want) {
        let _ = self.tx.send(Msg::Prewarm(want));
    }

    /// No more warm sandboxes (until the next `prewarm` or `take`); the idle ones are removed.
    pub(crate) fn cool(&self) {
        let _ = self.tx.send(Msg::Cool);
    }

    /// The run that took a sandbox ended and removed it.
    pub(crate) fn finished(&self) {
        let _ = self.tx.send(Msg::Finished);
    }

    /// The run that took `sandbox` was abandoned: the starter kills and removes it.
    pub(crate) fn discard(&self, sandbox: Sandbox) {
        if let Err(mpsc::SendError(Msg::Discard(sandbox))) =
            self.tx.send(Msg::Discard(Box::new(sandbox)))
        {
            sandbox.destroy();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Pause before trying again to warm a sandbox after a failure; doubled after each further
/// failure, up to `RETRY_MAX` (a run still gets a sandbox started for it meanwhile).
const RETRY_AFTER: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// How long after a run ended its replacement is started.
const REFILL_SETTLE: Duration = Duration::from_millis(2);

fn starter(launch: &Launch, size: usize, rx: &mpsc::Receiver<Msg>) {
    let mut idle: VecDeque<Sandbox> = VecDeque::new();
    // What warm sandboxes are made of; none until a run (or a prewarm) says.
    let mut recipe: Option<Want> = None;
    // Sandboxes taken by runs that have not ended yet.
    let mut in_use = 0usize;
    // When warming last failed, and how long to wait before the next try.
    let mut failed: Option<(std::time::Instant, Duration)> = None;
    // No refill before this.
    let mut settle: Option<std::time::Instant> = None;
    loop {
        let wanted = recipe.is_some() && idle.len() + in_use < size;
        let now = std::time::Instant::now();
        let wait = [
            failed.map(|(at, pause)| pause.saturating_sub(at.elapsed())),
            settle.map(|t| t.saturating_duration_since(now)),
        ]
        .into_iter()
        .flatten()
        .max();
        let msg = if wanted && wait.is_none_or(|w| w.is_zero()) {
            match rx.try_recv() {
                Ok(m) => Some(m),
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => break,
            }
        } else if let (true, Some(wait)) = (wanted, wait) {
            match rx.recv_timeout(wait) {
                Ok(m) => Some(m),
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match rx.recv() {
                Ok(m) => Some(m),
                Err(_) => break,
            }
        };
        let Some(msg) = msg else {
            // Nothing asked: warm one more.
            if let Some(want) = &recipe {
                match start(launch, want) {
                    Ok(s) => {
                        idle.push_back(s);
                        failed = None;
                    }
                    Err(e) => {
                        let pause = failed.map_or(RETRY_AFTER, |(_, p)| (p * 2).min(RETRY_MAX));
                        tracing::warn!(error = %e, retry_in = ?pause, "cannot warm a sandbox");
                        failed = Some((std::time::Instant::now(), pause));
                    }
                }
            }
            continue;
        };
        match msg {
            Msg::Take { want, reply } => {
                failed = None;
                let sandbox = sandbox_for(launch, &mut recipe, &mut idle, &want);
                let ok = sandbox.is_ok();
                match reply.send(sandbox) {
                    Ok(()) if ok => in_use += 1,
                    Ok(()) => {}
                    // The run was abandoned while it waited.
                    Err(Ok(s)) => s.destroy(),
                    Err(Err(_)) => {}
                }
            }
            Msg::Prewarm(want) => {
                failed = None;
                if want.warm_ok() {
                    adopt_recipe(&mut recipe, &mut idle, &want);
                }
            }
            Msg::Cool => {
                recipe = None;
                for s in idle.drain(..) {
                    s.destroy();
                }
            }
            Msg::Finished => {
                in_use = in_use.saturating_sub(1);
                // Refill a little later: a backend dropped right after its last run (a
                // one-shot CLI call) then never starts a sandbox only to remove it.
                settle = Some(std::time::Instant::now() + REFILL_SETTLE);
            }
            Msg::Discard(s) => {
                in_use = in_use.saturating_sub(1);
                s.destroy();
            }
            Msg::Stop => break,
        }
    }
    for s in idle {
        s.destroy();
    }
    // Whatever was still queued (an abandoned run's sandbox) goes too.
    while let Ok(msg) = rx.try_recv() {
        match msg {
            Msg::Discard(s) => s.destroy(),
            Msg::Take { reply, .. } => {
                let _ = reply.send(Err(unavailable("the backend is shutting down")));
            }
            _ => {}
        }
    }
}

/// A sandbox for a run that wants `want`: a warm one that fits when it may be warm (making
/// `want` the recipe), else one started for it.
fn sandbox_for(
    launch: &Launch,
    recipe: &mut Option<Want>,
    idle: &mut VecDeque<Sandbox>,
    want: &Want,
) -> Result<Sandbox, ExecError> {
    if !want.warm_ok() {
        return start(launch, want);
    }
    adopt_recipe(recipe, idle, want);
    next_usable(idle)
        .and_then(|s| {
            if want.fits(&s) {
                Some(s)
            } else {
                // Back in line for a run that needs less.
                idle.push_front(s);
                None
            }
        })
        .map_or_else(|| start(launch, want), Ok)
}

/// Makes `want` the recipe; warm sandboxes of an older `/etc` are discarded.
fn adopt_recipe(recipe: &mut Option<Want>, idle: &mut VecDeque<Sandbox>, want: &Want) {
    let same = recipe
        .as_ref()
        .is_some_and(|r| r.etc.generation() == want.etc.generation() && r.cgroups == want.cgroups);
    if !same {
        for s in idle.drain(..) {
            s.destroy();
        }
        // Warm sandboxes require what every run requires; a run's own needs (an explicit
        // memory limit) get a sandbox started for it when a warm one lacks them.
        let mut warm = want.clone();
        warm.required.retain(|c| *c == Controller::Pids);
        *recipe = Some(warm);
    }
}

/// The oldest warm sandbox that can still take a run; the unusable ones are removed.
fn next_usable(idle: &mut VecDeque<Sandbox>) -> Option<Sandbox> {
    while let Some(s) = idle.pop_front() {
        if s.is_usable() {
            return Some(s);
        }
        tracing::debug!(run = %s.run_id, "discarding a warm sandbox that died or failed");
        s.destroy();
    }
    None
}
