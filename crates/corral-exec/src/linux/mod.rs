//! The `linux` backend: each run in fresh user, mount, pid, net, ipc and uts namespaces, on a
//! minimal root view, under landlock, seccomp, `no_new_privs`, no capabilities, rlimits and
//! per-run cgroups (v2 or v1, see `cgroup.rs`). Every run has a process limit: the pids cgroup,
//! or for a caller other than host root RLIMIT_NPROC in the run's own user namespace; a run that
//! asks for a memory limit needs the memory cgroup (refused without it), and the default memory
//! cap uses it when there is one, else RLIMIT_AS. It attests `isolated: true` only when the helper
//! reported every one of those applied; when the host lacks a required primitive, every run is
//! refused with `ExecError::Unavailable` naming it, never run weaker.
//!
//! The set-up is not done between `fork` and `exec` of this (multi-threaded) process: the backend
//! starts the helper, a fresh single-threaded process (`corral __sandbox-exec`, see `helper.rs`),
//! sends it a [`spec::Prep`] and then a [`spec::Spec`] on stdin and reads its reports on a status
//! pipe. The helper applies everything and `execve`s the target; stdin, stdout and stderr are the
//! target's. Helpers are started by the backend's starter thread (`pool.rs`), which keeps a few
//! **warm** ones that got their `Prep` (namespaces and the request-independent root view are
//! built) and wait for a run's `Spec`.
//!
//! Per run, the parent:
//!
//! - checks the request's paths and refuses `/`, `/proc`, `/sys` and `/dev`;
//! - checks its copy of the allowed `/etc` against the host's (`etc.rs`), and takes a sandbox
//!   made from the current copy: a warm one, or one started for the run. Each has an empty
//!   per-run directory (the mount point of the sandbox's root tmpfs, which only the sandbox's
//!   mount namespace sees) and per-run cgroups, which the helper joins before it forks anything;
//! - sets the run's `pids.max`, then sends the spec;
//! - gives a one-shot run's write paths a copy-on-write layer (`ResourceLimits::write_quota`
//!   sized), which the helper applies to the host after the run, change by change, against
//!   `ExecRequest::protected` (`apply.rs`); an attached run gets read-write binds instead,
//!   unless the backend is `with_attached_write_layer()` (`corral run`);
//! - captures output with the same caps as the `process` backend; the helper kills the sandbox's
//!   pid 1 (so the whole pid namespace) when the timeout passes, and the parent kills the helper's
//!   process group if the helper itself overstays;
//! - removes the directory and the cgroups, and attests `destroyed: true` only when the helper
//!   reported the pid namespace empty and both removals are checked.
//!
//! **Host writes** ([`crate::ExecRequest::host_writes`], an agent scope's `permissions: full`):
//! the run may change the host beyond its write paths, as far as its user may, and nothing else
//! of the sandbox changes. How, and why so:
//!
//! - Not `/` as one write root, and never a live read-write bind of the host: a bind would
//!   skip every apply-time check (protected names and globs, git repositories, set-id bits,
//!   symlinks, the quota), and an overlay of `/` would carry `/proc`, `/sys`, `/dev`, the
//!   host's whole `/etc` and `/run` into the view, and could not be made at all in a user
//!   namespace on a host with any mount (the kernel refuses to copy a directory without the
//!   mounts locked beneath it).
//! - Instead each top-level host directory ([`host_roots`]: `/home`, `/tmp`, `/opt`, `/srv`,
//!   `/var`, `/root`, ...; not the system directories, which stay the read-only view, nor
//!   `/proc`, `/sys`, `/dev`, `/run`, `/boot`) is one more write path: an overlay in the same
//!   copy-on-write layer, its changes applied after the run by the same helper through the
//!   same checks as the workdir's. A directory with a filesystem mounted beneath it is left out
//!   (see [`host_roots`]); the apply never crosses a mount (`RESOLVE_NO_XDEV`).
//! - The cost: a dozen more overlay mounts per run (no copy; a file is copied up only when
//!   changed), and no walk of those roots for nested `.git` to bind read-only (they hold far more
//!   than `MAX_SCAN_DIRS` directories): there, a `.git` change is refused at apply time only,
//!   which is what decides anyway. The write quota (`DEFAULT_WRITE_QUOTA` unless set) and the
//!   tmpfs it sizes cover every root together; `MAX_WRITE_PATHS` (200) is
//!   far off.
//! - corral's own places in those roots: its files (`ExecRequest::protected`'s paths) are
//!   hidden as always; the trees of `HostWrites::keep_out` (the state directory, holding an
//!   agent's home and its CLI's install), this backend's runtime directory (its copies of
//!   `/etc`, its sockets) and its helper binary (corral) are covered in the view by an empty
//!   read-only tmpfs (or `/dev/null`), with only the run's own paths inside them bound again on
//!   top, and the apply refuses any change in them but through a write path inside one. A hold
//!   must lie in one of them.
//! - The user: what the apply writes, it writes as the helper, so as corral's user (host root
//!   with `isolation.host_uids`, whose idmapped roots make root's files the program's own): a
//!   change the host does not let that user make is refused when applied. The program's view
//!   may let it try more (an overlay's top directory is the run's own).
//! - The run attests `fs:unconfined`.

mod apply;
mod cgroup;
mod egress;
mod egress_bridge;
mod etc;
mod exec_allow;
mod helper;
mod idmap;
mod landlock_rules;
mod mounts;
mod pool;
mod probe;
mod seccomp;
mod spec;

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use tokio::sync::oneshot;

use crate::common::{Captured, RlimitSpec, capture, feed, kill_group, rlimit_plan, validate};
use crate::{
    AttachTx, Attached, Attestation, Backend, BoxFuture, Changes, DEFAULT_WRITE_QUOTA, ExecError,
    ExecOutput, ExecRequest, RefusedChange, RunNetwork,
};

pub use egress::{CORRAL_LINK_URL, LOOPBACK_NO_PROXY, MAX_LINK_CONNECTIONS, PROXY_PORT, proxy_env};
pub use exec_allow::{SEARCH_PATH, find_program};
use helper::HELPER_MARKER_ENV;
pub use helper::{HELPER_ARG, helper_main};
pub use idmap::{DEFAULT_HOST_RANGE, HostRange, HostUids};
pub use probe::{Primitive, container, container_from, probe, probe_for};
pub use spec::Network;

use cgroup::Controller;
use pool::{Etc, Launch, Pool, Sandbox, Want};
use spec::{CowSpec, FailKind, ProtectedWire, Spec, Status};

/// The backend's name, in attestations and errors.
const NAME: &str = "linux";

/// How long the helper may overstay the request's timeout (set-up and tear-down) before the
/// parent kills its process group.
const HELPER_GRACE: Duration = Duration::from_secs(5);
/// How fast the helper is assumed to apply a run's copy-on-write layer at worst, bytes per
/// second: the helper's grace grows by the quota's worth of it.
const APPLY_BYTES_PER_SEC: u64 = 32 * 1024 * 1024;
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

/// Numbers the egress proxies started by this process.
static EGRESS_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Warm sandboxes a backend keeps ready by default (see [`LinuxBackend::with_warm_pool`]).
pub const DEFAULT_WARM_POOL: usize = 1;

/// Namespaces, a minimal root view, landlock, seccomp, no capabilities, rlimits and cgroups.
#[derive(Debug)]
pub struct LinuxBackend {
    helper: PathBuf,
    network: Network,
    runtime_dir: PathBuf,
    warm: usize,
    /// Whether the target's stdout and stderr are this process's own.
    inherit_output: bool,
    /// Whether attached runs write through the copy-on-write layer too.
    attached_layer: bool,
    /// Set once the preflight passed.
    preflight: OnceLock<()>,
    /// One-shot: no preflight probe before a run (see [`LinuxBackend::with_one_shot`]).
    one_shot: bool,
    /// Set by the first preflight.
    checked_once: std::sync::atomic::AtomicBool,
    cgroups: OnceLock<cgroup::Support>,
    /// `isolation.cgroup_parent`: the v2 cgroup per-run cgroups go under, instead of corral's
    /// own.
    cgroup_parent: Option<PathBuf>,
    /// The current copy of the allowed `/etc`.
    etc: Mutex<Option<Arc<etc::Snapshot>>>,
    /// The starter thread (made on first use, after the backend is configured).
    pool: OnceLock<Pool>,
    /// `isolation.host_uids`, resolved: as host root, the host ids the program runs as.
    host_ids: Option<HostRange>,
}

impl LinuxBackend {
    /// A backend whose helper is `helper_exe`: a binary that calls [`helper_main`] when its
    /// argv[1] is [`HELPER_ARG`] (the `corral` binary itself: pass `/proc/self/exe`).
    pub fn new(helper_exe: PathBuf) -> Self {
        let uid = rustix::process::getuid().as_raw();
        LinuxBackend {
            helper: helper_exe,
            network: Network::None,
            runtime_dir: default_runtime_dir(uid),
            warm: DEFAULT_WARM_POOL,
            inherit_output: false,
            attached_layer: false,
            preflight: OnceLock::new(),
            one_shot: false,
            checked_once: std::sync::atomic::AtomicBool::new(false),
            cgroups: OnceLock::new(),
            cgroup_parent: None,
            etc: Mutex::new(None),
            pool: OnceLock::new(),
            host_ids: None,
        }
    }

    /// As host root, run every sandboxed program as an unprivileged host uid (see `idmap.rs`):
    /// `range`'s first id, with the run's paths idmapped so their files keep their owner. A run
    /// whose mapping or idmapped bind fails is refused. `None` (and any caller but host root):
    /// the caller's own id is mapped.
    pub fn with_host_ids(mut self, range: Option<HostRange>) -> Self {
        self.host_ids = range.filter(|_| rustix::process::getuid().is_root());
        self
    }

    /// [`Self::with_host_ids`] with the range `setting` names on this host (`isolation.host_uids`;
    /// `auto`: corral's `/etc/subuid` entry, else [`DEFAULT_HOST_RANGE`]). Only host root is
    /// affected; for anyone else `setting` is not even resolved. An entry that does not make a
    /// usable range is an error, never a silent fall-back to running as host root.
    pub fn with_host_uids(self, setting: HostUids) -> Result<Self, String> {
        if !rustix::process::getuid().is_root() {
            return Ok(self);
        }
        Ok(self.with_host_ids(setting.resolve()?))
    }

    /// The host ids sandboxes run as, when [`Self::with_host_ids`] applied a range.
    pub fn host_ids(&self) -> Option<HostRange> {
        self.host_ids
    }

    /// How many warm sandboxes to keep ready (default [`DEFAULT_WARM_POOL`]; 0: every run
    /// starts its own). A warm sandbox has its namespaces and the request-independent part of
    /// its root view made, and waits for a run; it holds nothing of any request. They are made
    /// once the preflight passed, and killed and removed with the backend.
    pub fn with_warm_pool(mut self, size: usize) -> Self {
        self.warm = size;
        self
    }

    /// Every run's stdout and stderr are this process's own stdout and stderr (a terminal, a
    /// pipe, a file), inherited by the target directly instead of captured: the program writes
    /// to them itself, streamed, and sees a terminal when there is one (it runs in a session of
    /// its own, so it cannot push input into that terminal). `ExecOutput::stdout`/`stderr` stay
    /// empty, and [`Backend::run_attached`] gives an empty stdout; stdin is still the run's
    /// (`req.stdin`, or the attached writer). For `corral run`, which sandboxes one command from
    /// the shell; a backend of a server never does this. Warm sandboxes start with the same
    /// descriptors, so it is a backend setting, not a request's.
    pub fn with_inherited_output(mut self) -> Self {
        self.inherit_output = true;
        self
    }

    /// Attached runs ([`Backend::run_attached`]) write through the same copy-on-write layer as
    /// one-shot runs: their write paths are overlays whose changes the helper checks and applies
    /// once the process (and its whole pid namespace) ended, with the write quota and the
    /// protection of [`Backend::run`]; `ExecOutput::changes` says what came of it. Their writes
    /// are not visible on the host while they run. For `corral run`, whose program ends; an
    /// upstream MCP server's writes must be live (the agent reads them at once), so a server's
    /// backend never does this.
    pub fn with_attached_write_layer(mut self) -> Self {
        self.attached_layer = true;
        self
    }

    /// For a process that makes one run and exits (`corral run`, `corral call --local`): runs
    /// skip the preflight probe, which would try every primitive in a throwaway child (a user,
    /// mount, pid, network, ipc and uts namespace, landlock and seccomp, a cgroup made and
    /// removed) only to have the sandbox's helper do the same again. The helper checks and
    /// reports each step itself and never execs the target unless every one succeeded, so a
    /// host missing a primitive still gets no run; only after such a refusal does the probe run,
    /// to name the missing primitive and its fix in the error. What the helper cannot see is
    /// still checked first: that `RLIMIT_NPROC` binds in a fresh user namespace, for a caller
    /// whose process limit it is. [`Backend::preflight`] still probes everything.
    pub fn with_one_shot(mut self) -> Self {
        self.one_shot = true;
        self
    }

    /// The network mode of every run (default: [`Network::None`]).
    pub fn with_network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    /// Where the per-run mount-point directories and the copy of `/etc` are made (default:
    /// `/dev/shm/corral-sandbox-<uid>` when `/dev/shm` is a tmpfs, else
    /// `$TMPDIR/corral-sandbox-<uid>`).
    pub fn with_runtime_dir(mut self, dir: PathBuf) -> Self {
        self.runtime_dir = dir;
        self
    }

    /// Per-run cgroups go under this cgroup v2 directory (`isolation.cgroup_parent`) instead of
    /// corral's own cgroup: it must enable `pids` (and `memory`, for runs with a memory limit)
    /// in its `cgroup.subtree_control`, and corral's user must be able to write it.
    pub fn with_cgroup_parent(mut self, parent: Option<PathBuf>) -> Self {
        self.cgroup_parent = parent;
        self
    }

    /// The network mode.
    pub fn network(&self) -> Network {
        self.network
    }

    /// The starter thread, started on first use.
    fn pool(&self) -> Result<&Pool, ExecError> {
        if let Some(pool) = self.pool.get() {
            return Ok(pool);
        }
        static SWEEP: std::sync::Once = std::sync::Once::new();
        SWEEP.call_once(|| sweep_stale(&self.runtime_dir, &self.cgroups()));
        let pool = Pool::new(
            Launch {
                helper: self.helper.clone(),
                runtime_dir: self.runtime_dir.clone(),
                network: self.network,
                inherit_output: self.inherit_output,
                host_ids: self.host_ids,
            },
            self.warm,
        )?;
        // A racing first use may have won; its pool is the one kept, this one stops.
        Ok(self.pool.get_or_init(|| pool))
    }

    /// The current copy of the allowed `/etc`: checked against the host's on every use, and
    /// made again when an entry changed.
    fn etc_snapshot(&self) -> Result<Arc<etc::Snapshot>, ExecError> {
        let mut current = self
            .etc
            .lock()
            .map_err(|_| unavailable("the /etc copy's lock is poisoned"))?;
        if let Some(snap) = current.as_ref().filter(|s| s.is_current()) {
            return Ok(Arc::clone(snap));
        }
        ensure_dir(&self.runtime_dir)?;
        let snap = Arc::new(
            etc::Snapshot::shared(&self.runtime_dir, mounts::Ids::of_caller())
                .map_err(unavailable)?,
        );
        *current = Some(Arc::clone(&snap));
        Ok(snap)
    }

    /// Starts warming sandboxes (best effort: a failure here is the next run's error).
    fn prewarm(&self) {
        if self.warm == 0 {
            return;
        }
        let warmed = self.etc_snapshot().and_then(|snap| {
            self.pool()?.prewarm(Want {
                etc: Etc::Snapshot(snap),
                required: required_cgroups(None, self.host_ids),
                cgroups: self.cgroups().into_owned(),
                network: None,
                egress_socket: None,
            });
            Ok(())
        });
        if let Err(e) = warmed {
            tracing::debug!(error = %e, "cannot warm sandboxes yet");
        }
    }

    /// The hierarchies per-run cgroups go under. Cached once a `pids` place was found, or when
    /// none is needed (a caller RLIMIT_NPROC binds): for host root, a missing one is looked for
    /// again on the next run. Whether a cgroup can really be made is learnt by making each
    /// run's (a failure refuses that run, it never drops the limit for later ones).
    fn cgroups(&self) -> std::borrow::Cow<'_, cgroup::Support> {
        if let Some(support) = self.cgroups.get() {
            return std::borrow::Cow::Borrowed(support);
        }
        let support = cgroup::detect(self.cgroup_parent.as_deref());
        if support.pids.is_some() || nproc_binds(self.host_ids) {
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
        if !self.helper.exists() {
            return Err(unavailable(format!(
                "the sandbox helper `{}` does not exist",
                self.helper.display()
            )));
        }
        self.probe_first()
    }

    /// Before a run of a one-shot backend: only what the helper cannot check itself (that
    /// `RLIMIT_NPROC` binds, when it is the run's process limit); the full probe when that fails.
    fn check_run(&self) -> Result<(), ExecError> {
        if !self.one_shot || self.preflight.get().is_some() {
            return self.check();
        }
        if !self.helper.exists() {
            return Err(unavailable(format!(
                "the sandbox helper `{}` does not exist",
                self.helper.display()
            )));
        }
        // A normal user's own limit (as host root with host ids, the helper attests it).
        if nproc_binds(None) && probe::nproc_userns().is_err() {
            return self.probe_first();
        }
        Ok(())
    }

    /// A one-shot run refused for a missing primitive: the probe names it and its fix (the
    /// helper's own error says only which step failed). Any other error is returned as it is.
    fn explain_refusal(&self, e: ExecError) -> ExecError {
        if !self.one_shot || self.preflight.get().is_some() {
            return e;
        }
        let ExecError::Unavailable { missing, .. } = &e else {
            return e;
        };
        match probe_for(self.cgroup_parent.as_deref())
            .into_iter()
            .find(|p| p.required && !p.available)
        {
            Some(p) => unavailable(format!(
                "{} is missing: {}; fix: {} (the sandbox refused the run at {missing})",
                p.name, p.detail, p.fix
            )),
            None => e,
        }
    }

    /// The preflight probe (see [`LinuxBackend::check`]).
    fn probe_first(&self) -> Result<(), ExecError> {
        // The first check starts warming before it probes, so that the two overlap: a warm
        // sandbox holds nothing of any request, and no run gives it one before a check passed.
        let first = !self
            .checked_once
            .swap(true, std::sync::atomic::Ordering::Relaxed);
        if first {
            self.prewarm();
        }
        if let Some(p) = probe_for(self.cgroup_parent.as_deref())
            .into_iter()
            .find(|p| p.required && !p.available)
        {
            if let Some(pool) = self.pool.get() {
                pool.cool();
            }
            return Err(unavailable(format!(
                "{} is missing: {}; fix: {}",
                p.name, p.detail, p.fix
            )));
        }
        if self.preflight.set(()).is_ok() && !first {
            self.prewarm();
        }
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
        Box::pin(async move {
            self.run_one(req, None)
                .await
                .map_err(|e| self.explain_refusal(e))
        })
    }

    fn run_attached(
        &self,
        req: ExecRequest,
        attach: AttachTx,
    ) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        Box::pin(async move {
            self.run_one(req, Some(attach))
                .await
                .map_err(|e| self.explain_refusal(e))
        })
    }
}

/// Whether `RLIMIT_NPROC` binds corral's runs: it binds every caller but host uid 0, and inside
/// the run's fresh user namespace it counts only that namespace's processes (Linux 5.14+). With
/// `host_ids` (host root's `isolation.host_uids`) the program is not host root either.
fn nproc_binds(host_ids: Option<HostRange>) -> bool {
    host_ids.is_some() || !rustix::process::getuid().is_root()
}

/// The cgroups a run cannot do without: `pids` when nothing else bounds its processes (host
/// root), `memory` when the request asks for a memory limit explicitly.
fn required_cgroups(memory: Option<u64>, host_ids: Option<HostRange>) -> Vec<Controller> {
    let mut required = Vec::new();
    if !nproc_binds(host_ids) {
        required.push(Controller::Pids);
    }
    if memory.is_some() {
        required.push(Controller::Memory);
    }
    required
}

fn unavailable(missing: impl Into<String>) -> ExecError {
    ExecError::Unavailable {
        backend: NAME,
        missing: missing.into(),
    }
}

/// The run's working directory, checked on the host for a clear error (the sandbox resolves
/// it in its own view): an absolute path to a directory; else why not.
fn usable_cwd(cwd: &Path) -> Result<PathBuf, String> {
    match crate::common::cwd_problem(cwd, std::fs::metadata(cwd), true) {
        None => Ok(cwd.to_path_buf()),
        Some(problem) => Err(problem),
    }
}

/// The write paths a sandbox takes: at most `helper::MAX_WRITE_PATHS`, and none inside a git
/// repository that has no `.git` in its path (a bare one): the apply checks the write path and
/// what lies beneath it, not its ancestors, and a live bind checks nothing, so such a run never
/// starts.
fn check_write_paths(write_paths: &[PathBuf]) -> Result<(), ExecError> {
    if write_paths.len() > helper::MAX_WRITE_PATHS {
        return Err(ExecError::Invalid(format!(
            "{} write paths are more than a sandbox takes ({}); write to fewer, wider roots",
            write_paths.len(),
            helper::MAX_WRITE_PATHS
        )));
    }
    for w in write_paths {
        if let Some(head) = w.parent().and_then(crate::enclosing_repository) {
            return Err(ExecError::Invalid(format!(
                "the write path `{}` lies inside a git repository (`{}`), whose config and hooks git on the host runs; write outside it",
                w.display(),
                head.display()
            )));
        }
    }
    Ok(())
}

/// Entries at the top of the host's `/` that are never write paths of a run with
/// [`ExecRequest::host_writes`], besides the system directories (`/usr`, `/bin`, `/sbin`,
/// `/lib*`, `/etc`, which stay the sandbox's read-only view): `/proc`, `/sys` and `/dev` (never
/// bound), `/run` (the host's running daemons: their sockets, pid files and secrets), `/boot`
/// and `lost+found`.
const NOT_HOST_ROOTS: &[&str] = &["proc", "sys", "dev", "run", "boot", "lost+found"];

/// The host directories a run with [`ExecRequest::host_writes`] may change besides its write
/// paths: every directory at the top of the host's `/` (not a symlink, a UTF-8 name) but the
/// system directories and [`NOT_HOST_ROOTS`], and but one with another filesystem mounted
/// beneath it (`/var` holding a container runtime's mounts, `/mnt` a drive): the kernel lets no
/// user namespace copy a directory without what is mounted beneath it, and an overlay needs that
/// copy; such a directory stays out of the run's view. Sorted. Each is a write path of its own,
/// an overlay over its one filesystem (and the apply never crosses into another).
pub fn host_roots() -> Result<Vec<PathBuf>, ExecError> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| unavailable(format!("cannot read /proc/self/mountinfo: {e}")))?;
    Ok(top_level_dirs()?
        .into_iter()
        .filter(|r| !mounted_beneath(&mountinfo, r))
        .collect())
}

/// Whether `/proc/self/mountinfo` (`mountinfo`) has a mount point strictly beneath `dir`. A
/// mount point's escapes (`\040` for a space, ...) are left as they are: a name with one is
/// beneath the same top-level directory either way.
fn mounted_beneath(mountinfo: &str, dir: &Path) -> bool {
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(Path::new)
        .any(|m| m.starts_with(dir) && m != dir)
}

/// The directories at the top of the host's `/` that may be [`host_roots`], before the mount
/// check.
fn top_level_dirs() -> Result<Vec<PathBuf>, ExecError> {
    let entries = std::fs::read_dir("/")
        .map_err(|e| unavailable(format!("cannot list the host's `/`: {e}")))?;
    let mut roots: Vec<PathBuf> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let path = Path::new("/").join(&name);
            let system = landlock_rules::SYSTEM_DIRS
                .iter()
                .any(|d| Path::new(d) == path);
            let dir = e.file_type().is_ok_and(|t| t.is_dir());
            (dir && !system && !NOT_HOST_ROOTS.contains(&name.as_str())).then_some(path)
        })
        .collect();
    roots.sort();
    Ok(roots)
}

/// A [`crate::Hold`], checked: `within` is a write path, each free directory lies beneath it,
/// and `into` is an empty directory outside every write path.
fn check_hold(hold: &crate::Hold, write_paths: &[PathBuf]) -> Result<(), ExecError> {
    let bad = |what: String| Err(ExecError::Invalid(format!("the hold: {what}")));
    if !write_paths.contains(&hold.within) {
        return bad(format!(
            "`{}` is not one of the run's write paths",
            hold.within.display()
        ));
    }
    if let Some(f) = hold.free.iter().find(|f| !f.starts_with(&hold.within)) {
        return bad(format!(
            "the free directory `{}` is not beneath `{}`",
            f.display(),
            hold.within.display()
        ));
    }
    if !hold.into.is_absolute() || write_paths.iter().any(|w| hold.into.starts_with(w)) {
        return bad(format!(
            "`{}` is not an absolute path outside the run's write paths",
            hold.into.display()
        ));
    }
    match std::fs::read_dir(&hold.into).map(|mut d| d.next().is_none()) {
        Ok(true) => Ok(()),
        Ok(false) => bad(format!("`{}` is not empty", hold.into.display())),
        Err(e) => bad(format!("`{}`: {e}", hold.into.display())),
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

/// The run's protection on the wire, with the metadata names the backend always keeps
/// read-only (`.hg`, `.jj`, `.svn` besides `.git` and `.corral`) added: a new one is refused too.
fn protected_wire(protected: &corral_policy::Protected) -> ProtectedWire {
    let mut wire = ProtectedWire::of(protected.spec());
    for name in mounts::PROTECTED_NAMES {
        if !wire.names.iter().any(|n| n == name) {
            wire.names.push((*name).to_owned());
        }
    }
    wire
}

/// `/dev/shm/corral-sandbox-<uid>` when `/dev/shm` is a memory filesystem (per-run directories
/// are made and removed all the time, and a busy disk makes each of those cost up to a
/// millisecond), else `$TMPDIR/corral-sandbox-<uid>`.
fn default_runtime_dir(uid: u32) -> PathBuf {
    let name = format!("corral-sandbox-{uid}");
    let shm = Path::new("/dev/shm");
    match rustix::fs::statfs(shm) {
        Ok(fs) if fs.f_type == libc::TMPFS_MAGIC => shm.join(name),
        _ => std::env::temp_dir().join(name),
    }
}

/// Removes what runs of corral processes that are gone left behind (a crash, a `SIGKILL`): their
/// empty per-run directories, their copies of `/etc`, their empty cgroups. Best effort, once per
/// process; whatever still holds a process or a file stays.
fn sweep_stale(runtime_dir: &Path, cgroups: &cgroup::Support) {
    let me = std::process::id();
    let dead = |name: &str, prefix: &str| -> bool {
        name.strip_prefix(prefix)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| pid != me && !Path::new(&format!("/proc/{pid}")).exists())
    };
    if let Ok(entries) = std::fs::read_dir(runtime_dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if dead(name, "etc-") {
                let _ = std::fs::remove_dir_all(entry.path());
            } else if dead(name, "") {
                let _ = std::fs::remove_dir(entry.path());
            }
        }
    }
    for base in cgroups.bases() {
        let Ok(entries) = std::fs::read_dir(base) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if dead(name, "corral-probe-") || dead(name, "corral-") {
                let _ = std::fs::remove_dir(entry.path());
            }
        }
    }
}

/// Makes the per-run directory (and its 0700 parent, which must be ours and not a symlink).
fn make_run_dir(base: &Path, run_id: &str) -> Result<PathBuf, ExecError> {
    ensure_dir(base)?;
    let dir = base.join(run_id);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| unavailable(format!("cannot make {}: {e}", dir.display())))?;
    Ok(dir)
}

/// Makes `base` (0700) unless it exists; it must be a directory of corral's user, not a symlink.
fn ensure_dir(base: &Path) -> Result<(), ExecError> {
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
    // What corral finds there (the shared copy of /etc) is trusted as its own user's.
    if meta.mode() & 0o077 != 0 {
        return Err(unavailable(format!(
            "{} is open to other users (mode {:o}); remove it, and corral makes it again with mode 0700",
            base.display(),
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// What the status pipe said.
#[derive(Debug, Default)]
struct Reports {
    ready: Option<Vec<String>>,
    failed: Option<(FailKind, String, String)>,
    exited: Option<(Option<i32>, Option<i32>)>,
    changes: Option<Changes>,
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
            Ok(Status::Changes { changes }) => r.changes = Some(changes),
            Ok(Status::Done { timed_out }) => r.done = Some(timed_out),
            Err(e) => tracing::warn!(error = %e, "unreadable report from the sandbox helper"),
        }
    }
    r
}

/// Reads the status pipe to its end (on a blocking thread: its writers are the helper and the
/// sandbox's init, which both die with the run). `ready` gets the helper's primitives as soon as
/// its `Ready` report arrives (the target is about to be `execve`d under all of them). With the
/// bytes: whether the pipe was read to its end (no read error).
async fn read_status(fd: OwnedFd, ready: Option<oneshot::Sender<Vec<String>>>) -> (Vec<u8>, bool) {
    tokio::task::spawn_blocking(move || {
        let mut ready = ready;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        let ended = loop {
            match rustix::io::read(&fd, &mut buf) {
                Ok(0) => break true,
                Ok(n) => out.extend_from_slice(buf.get(..n).unwrap_or_default()),
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => break false,
            }
            // Complete lines only: a report cut by the read's boundary is parsed next time.
            let complete = out
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |end| end + 1);
            if ready.is_some()
                && let Some(primitives) =
                    parse_reports(out.get(..complete).unwrap_or_default()).ready
                && let Some(tx) = ready.take()
            {
                let _ = tx.send(primitives);
            }
        };
        (out, ended)
    })
    .await
    .unwrap_or_default()
}

impl LinuxBackend {
    /// The run's copy-on-write layer (`None`: an attached run on a backend without the
    /// attached layer, whose writes are live), its hold checked.
    fn cow_layer(
        &self,
        req: &ExecRequest,
        attached: bool,
        write_paths: &[PathBuf],
    ) -> Result<Option<CowSpec>, ExecError> {
        let cow = (!attached || self.attached_layer).then(|| CowSpec {
            quota: req.limits.write_quota.unwrap_or(DEFAULT_WRITE_QUOTA),
            protected: protected_wire(&req.protected),
            hold: req.hold.clone(),
            apply_only_if_ok: req.apply_only_if_ok,
        });
        if cow.is_none() && req.apply_only_if_ok {
            return Err(ExecError::Invalid(
                "a run whose writes are live (attached, without the copy-on-write layer) cannot apply them only if it succeeds".into(),
            ));
        }
        if let Some(hold) = &req.hold {
            if cow.is_none() {
                return Err(ExecError::Invalid(
                    "a run whose writes are live (attached, without the copy-on-write layer) cannot hold changes for a person".into(),
                ));
            }
            check_hold(hold, write_paths)?;
        }
        Ok(cow)
    }

    /// A run with [`ExecRequest::host_writes`]: its write paths with the host's top-level
    /// directories ([`host_roots`]) added, and what its view keeps out (the request's trees,
    /// this backend's runtime directory and its helper binary, which is corral's own). It needs
    /// the copy-on-write layer, and a hold of it must lie in a tree kept out (else the program
    /// could write into the hold). Any other run: its write paths as they are.
    fn host_writes(
        &self,
        req: &ExecRequest,
        layered: bool,
        mut write_paths: Vec<PathBuf>,
    ) -> Result<(Vec<PathBuf>, Option<spec::HostSpec>), ExecError> {
        let Some(hw) = &req.host_writes else {
            return Ok((write_paths, None));
        };
        if !layered {
            return Err(ExecError::Invalid(
                "a run whose writes are live (attached, without the copy-on-write layer) cannot change the host beyond its write paths".into(),
            ));
        }
        let mut keep_out = Vec::new();
        for k in hw.keep_out.iter().chain([&self.runtime_dir]) {
            let normal = k.is_absolute()
                && k.components().all(|c| {
                    matches!(
                        c,
                        std::path::Component::RootDir | std::path::Component::Normal(_)
                    )
                });
            if !normal || k.as_os_str().len() <= 1 || k.to_str().is_none() {
                return Err(ExecError::Invalid(format!(
                    "the tree to keep out `{}` is not a normalized absolute UTF-8 path below `/`",
                    k.display()
                )));
            }
            keep_out.push(k.components().collect::<PathBuf>());
        }
        // The helper is corral's own binary (`/proc/self/exe`, resolved).
        if let Some(exe) = std::fs::canonicalize(&self.helper)
            .ok()
            .filter(|p| p.to_str().is_some())
        {
            keep_out.push(exe);
        }
        if let Some(h) = &req.hold
            && !keep_out.iter().any(|k| h.into.starts_with(k))
        {
            return Err(ExecError::Invalid(format!(
                "the hold: `{}` lies outside the trees kept out of a run that may change the host, which could write into it",
                h.into.display()
            )));
        }
        // A top-level directory that is itself kept out (a state directory such as `/data`)
        // is no write path: it would be shown whole (only a tree strictly beneath a write path
        // is covered) and its changes taken for those of a write path inside it. One that is
        // itself protected (`protected: [/srv]`) stays as every run sees it: hidden.
        let roots: Vec<PathBuf> = host_roots()?
            .into_iter()
            .filter(|r| !write_paths.contains(r) && !keep_out.iter().any(|k| r.starts_with(k)))
            .filter(|r| r.to_str().is_some_and(|s| req.protected.hit(s).is_none()))
            .collect();
        write_paths.extend(roots.iter().cloned());
        check_write_paths(&write_paths)?;
        Ok((write_paths, Some(spec::HostSpec { roots, keep_out })))
    }

    async fn run_one(
        &self,
        req: ExecRequest,
        attach: Option<AttachTx>,
    ) -> Result<ExecOutput, ExecError> {
        self.check_run()?;
        validate(&req)?;
        let program = req.argv.first().cloned().unwrap_or_default();
        let spawn_error = |reason: String| ExecError::Spawn {
            program: program.clone(),
            reason,
        };
        let read_paths = sandbox_paths(&req.read_paths, "read")?;
        let write_paths = sandbox_paths(&req.write_paths, "write")?;
        // Checked on the host for a clear error; the sandbox resolves it in its own view.
        let cwd = usable_cwd(&req.cwd).map_err(&spawn_error)?;
        // A path of the run's own under /etc needs a writable /etc to make its mount point in.
        let etc = if read_paths
            .iter()
            .chain(&write_paths)
            .any(|p| p.starts_with("/etc") && p != Path::new("/etc"))
        {
            Etc::AllowList
        } else {
            Etc::Snapshot(self.etc_snapshot()?)
        };

        check_write_paths(&write_paths)?;
        // A one-shot run writes into a copy-on-write layer applied after it; an attached one
        // (a long-lived upstream server, whose writes must be live) gets read-write binds,
        // unless the backend gives attached runs the layer too (`corral run`).
        let cow = self.cow_layer(&req, attach.is_some(), &write_paths)?;
        let (write_paths, host) = self.host_writes(&req, cow.is_some(), write_paths)?;
        let cow_quota = cow.as_ref().map(|c| c.quota);

        let (network, egress) = run_network(req.network.as_ref());
        let network = network.filter(|n| *n != self.network);
        let mut proxy = match &egress {
            Some(_) => Some(self.egress_proxy()?),
            None => None,
        };

        let env = match &egress {
            Some(egress::Served::Egress(_)) => egress::with_proxy_env(&req.env, ""),
            Some(egress::Served::Both(..)) => {
                egress::with_proxy_env(&req.env, egress::LOOPBACK_NO_PROXY)
            }
            Some(egress::Served::Corral(_)) | None => req.env.clone(),
        };

        let pool = self.pool()?;
        let want = Want {
            etc,
            required: required_cgroups(req.limits.memory, self.host_ids),
            cgroups: self.cgroups().into_owned(),
            network,
            egress_socket: proxy.as_ref().map(|p| p.path().to_path_buf()),
        };
        let mut taken = Taken {
            sandbox: Some(pool.take(want).await?),
            pool,
        };
        let prepared = match taken.sandbox.as_mut() {
            Some(sb) => self.prepare_limits(sb, &req).and_then(|rlimits| {
                let memory = req.limits.memory.or(req.limits.default_memory);
                let spec = Spec {
                    argv: req.argv.clone(),
                    env,
                    cwd,
                    read_paths,
                    write_paths,
                    rlimits,
                    timeout_ms: u64::try_from(req.timeout.as_millis()).unwrap_or(u64::MAX),
                    tmp_bytes: memory.map_or(DEFAULT_TMP_BYTES, |m| m.min(DEFAULT_TMP_BYTES)),
                    hidden: req
                        .protected
                        .spec()
                        .paths
                        .iter()
                        .map(PathBuf::from)
                        .collect(),
                    cow: cow.clone(),
                    exec_only: req.exec_only.as_deref().map(exec_allow::closure),
                    host: host.clone(),
                };
                spec::encode(&spec).map_err(ExecError::Invalid)
            }),
            None => Err(unavailable("the sandbox went missing")),
        };
        // The proxy takes the sandbox's listening socket before the spec (so the target) goes.
        let prepared = match (prepared, proxy.as_mut(), egress, &taken.sandbox) {
            (Ok(encoded), Some(p), Some(e), Some(sb)) => p
                .start(sb.pgid.as_raw_nonzero().get(), e)
                .await
                .map(|()| encoded),
            (r, ..) => r,
        };
        let result = match prepared {
            Ok(encoded) => {
                self.drive(&req, encoded, attach, cow_quota, &mut taken, &spawn_error)
                    .await
            }
            Err(e) => Err(e),
        };
        let destroyed = taken.destroy().await;
        if let Some(p) = proxy {
            p.finish().await;
        }
        let mut out = result?;
        out.attestation.destroyed &= destroyed;
        Ok(out)
    }

    /// A new egress proxy for one run, its socket in the runtime directory.
    fn egress_proxy(&self) -> Result<egress::Proxy, ExecError> {
        ensure_dir(&self.runtime_dir)?;
        let id = format!(
            "{}-e{}",
            std::process::id(),
            EGRESS_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        egress::Proxy::bind(&self.runtime_dir, &id)
    }

    /// Fail closed: every run has a process limit (the default one when the request sets none)
    /// and a memory cap (the request's, else its default one). Writes the run's limits into its
    /// cgroups, before the sandbox gets its spec, and returns the rlimits the target gets:
    ///
    /// - processes: the pids cgroup; without one, `RLIMIT_NPROC` inside the run's user
    ///   namespace for a caller it binds (`rlimit:nproc-userns`), and no run for host root;
    /// - an explicit memory limit: the memory cgroup (no cgroup, no run) and `RLIMIT_AS`;
    /// - the default memory cap: the memory cgroup when the sandbox has one, else `RLIMIT_AS`
    ///   only, attested as such.
    fn prepare_limits(
        &self,
        sb: &mut Sandbox,
        req: &ExecRequest,
    ) -> Result<Vec<RlimitSpec>, ExecError> {
        let Some(cg) = sb.cgroups.as_mut() else {
            return Err(unavailable("cgroup: the run has no cgroups"));
        };
        let cgroup_err = |e: String| unavailable(format!("cgroup: {e}"));
        let mut limits = req.limits;
        let processes = req
            .limits
            .processes
            .map_or(DEFAULT_PIDS_MAX, u64::from)
            .saturating_add(OWN_PIDS);
        if cg.has(Controller::Pids) {
            cg.set_pids_max(processes).map_err(cgroup_err)?;
        } else if !nproc_binds(self.host_ids) {
            return Err(unavailable(cgroup::missing(
                Controller::Pids,
                &self.cgroups(),
            )));
        }
        if nproc_binds(self.host_ids) {
            // The helper and the init are in the run's user namespace too.
            limits.processes = Some(u32::try_from(processes).unwrap_or(u32::MAX));
        }
        match (req.limits.memory, req.limits.default_memory) {
            (Some(m), _) => {
                if !cg.has(Controller::Memory) {
                    return Err(unavailable(cgroup::missing(
                        Controller::Memory,
                        &self.cgroups(),
                    )));
                }
                cg.set_memory_max(m).map_err(cgroup_err)?;
            }
            (None, Some(d)) if cg.has(Controller::Memory) => {
                cg.set_memory_max(d).map_err(cgroup_err)?;
                // The cgroup enforces it: no `RLIMIT_AS` (address space is not memory).
                limits.default_memory = None;
            }
            (None, _) => {}
        }
        Ok(rlimit_plan(&limits).into_iter().flatten().collect())
    }

    /// The run started when the helper reported every primitive applied and no failure; else
    /// the error its report (or its silence) says: unavailable, invalid, or the program's own.
    /// `read_fully`: whether the status pipe was read to its end (else a report may have gone
    /// unread, and silence proves nothing).
    fn check_started(
        &self,
        reports: &mut Reports,
        helper_status: std::process::ExitStatus,
        read_fully: bool,
        spawn_error: &(dyn Fn(String) -> ExecError + Sync),
    ) -> Result<(), ExecError> {
        match (&reports.ready, reports.failed.take()) {
            (None, Some((kind, step, error))) => {
                let msg = format!("{step}: {error}");
                Err(match kind {
                    FailKind::Unavailable => unavailable(msg),
                    FailKind::Spawn => spawn_error(error),
                    FailKind::Invalid => ExecError::Invalid(msg),
                })
            }
            (Some(_), Some((_, _, error))) => Err(spawn_error(error)),
            // The whole status pipe read, and no report in it: the helper never said `Ready`,
            // which it does before starting the program, so nothing ran.
            (None, None) if read_fully => Err(unavailable(format!(
                "the sandbox helper `{}` made no report (it ended with {helper_status}); is it a corral binary?",
                self.helper.display()
            ))),
            // A report may have gone unread (its reader was not done in time): the program may
            // have run, so this is not a failure to start.
            (None, None) => Err(ExecError::Lost {
                backend: NAME,
                what: format!(
                    "the sandbox helper `{}` made no report that was read (it ended with {helper_status}); is it a corral binary?",
                    self.helper.display()
                ),
            }),
            (Some(_), None) => Ok(()),
        }
    }

    async fn drive(
        &self,
        req: &ExecRequest,
        encoded: Vec<u8>,
        attach: Option<AttachTx>,
        cow_quota: Option<u64>,
        taken: &mut Taken<'_>,
        spawn_error: &(dyn Fn(String) -> ExecError + Sync),
    ) -> Result<ExecOutput, ExecError> {
        let Some(sb) = taken.sandbox.as_mut() else {
            return Err(unavailable("the sandbox went missing"));
        };
        let pgid = sb.pgid;
        let (stdin_pipe, stdout_pipe, stderr_pipe) = helper_pipes(sb)?;
        let pidfd = sb
            .pidfd
            .try_clone()
            .map_err(|e| unavailable(format!("pidfd: {e}")))?;
        let (ready_tx, ready_rx) = match attach {
            Some(_) => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let status_task = sb
            .status
            .take()
            .map(|fd| tokio::spawn(read_status(fd, ready_tx)));
        let cgroup_primitives: Vec<String> = sb
            .cgroups
            .as_ref()
            .map(|cg| cg.primitives().map(String::from).collect())
            .unwrap_or_default();

        let start = Instant::now();
        let mut out = Captured::default();
        let mut err = Captured::default();
        // The helper applies the run's layer after the timeout too: its grace covers that.
        let apply_grace = Duration::from_secs(cow_quota.map_or(0, |q| q / APPLY_BYTES_PER_SEC));
        let backup = req
            .timeout
            .saturating_add(HELPER_GRACE)
            .saturating_add(apply_grace);
        let (killed, duration) = {
            let io = async {
                match (attach, ready_rx) {
                    (Some(tx), Some(ready)) => {
                        tokio::join!(
                            hand_over(
                                stdin_pipe,
                                stdout_pipe,
                                encoded,
                                ready,
                                cgroup_primitives,
                                tx
                            ),
                            capture(stderr_pipe, req.max_output_bytes, &mut err),
                        );
                    }
                    _ => {
                        tokio::join!(
                            feed(stdin_pipe, Some(encoded), req.stdin.clone()),
                            capture(stdout_pipe, req.max_output_bytes, &mut out),
                            capture(stderr_pipe, req.max_output_bytes, &mut err),
                        );
                    }
                }
            };
            wait_for_helper(io, &pidfd, pgid, backup, start).await
        };
        let helper_status = taken.reap().await?;
        let (status_bytes, read_fully) = match status_task {
            Some(task) => match tokio::time::timeout(PIPE_GRACE, task).await {
                Ok(Ok(read)) => read,
                _ => (Vec::new(), false),
            },
            None => (Vec::new(), false),
        };
        let mut reports = parse_reports(&status_bytes);
        self.check_started(&mut reports, helper_status, read_fully, spawn_error)?;
        let primitives_from_helper = reports.ready.unwrap_or_default();
        let timed_out = reports.done.unwrap_or(false) || killed;
        let (exit_code, signal) = match reports.exited {
            Some((code, signal)) if !timed_out => (code, signal),
            _ if timed_out => (None, Some(Signal::KILL.as_raw())),
            _ => (helper_status.code(), helper_status.signal()),
        };
        let cgroups = taken.sandbox.as_ref().and_then(|sb| sb.cgroups.as_ref());
        // The pid namespace is empty once the helper reaped its init (reported as `Done`), or
        // once the run's pids cgroup has no process left.
        let ns_gone = reports.done.is_some()
            || cgroups.is_some_and(|cg| cg.has(Controller::Pids) && cg.empty());

        // A run with a layer always says what came of it: no report means the helper did not
        // get to the end of applying it.
        let changes = run_changes(cow_quota, reports.changes, &primitives_from_helper);
        let mut primitives: Vec<String> = vec!["env:clear".into()];
        primitives.extend(primitives_from_helper);
        if let Some(cg) = cgroups {
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
            changes,
        })
    }
}

/// The sandbox helper's stdin, stdout and stderr, as tokio pipes.
type HelperPipes = (
    Option<tokio::process::ChildStdin>,
    Option<tokio::process::ChildStdout>,
    Option<tokio::process::ChildStderr>,
);

/// Takes the helper's stdin, stdout and stderr pipes from the sandbox, for tokio.
fn helper_pipes(sb: &mut Sandbox) -> Result<HelperPipes, ExecError> {
    let io_err = |e: std::io::Error| unavailable(format!("the sandbox helper's pipes: {e}"));
    let stdin = sb
        .stdin
        .take()
        .map(tokio::process::ChildStdin::from_std)
        .transpose()
        .map_err(io_err)?;
    let stdout = sb
        .stdout
        .take()
        .map(tokio::process::ChildStdout::from_std)
        .transpose()
        .map_err(io_err)?;
    let stderr = sb
        .stderr
        .take()
        .map(tokio::process::ChildStderr::from_std)
        .transpose()
        .map_err(io_err)?;
    Ok((stdin, stdout, stderr))
}

/// What came of a run's copy-on-write layer: the helper's report; for a run with a layer and no
/// report (the helper did not get to the end of applying it), one refusal saying so.
fn run_changes(
    cow_quota: Option<u64>,
    reported: Option<Changes>,
    primitives_from_helper: &[String],
) -> Option<Changes> {
    match (cow_quota, reported) {
        (Some(_), Some(changes)) => Some(changes),
        (Some(_), None) if primitives_from_helper.iter().any(|p| p == "cow:overlay") => {
            Some(Changes {
                refused: vec![RefusedChange {
                    path: String::new(),
                    code: corral_policy::codes::EXEC_CHANGE_REFUSED.to_owned(),
                    reason: "the sandbox ended before the run's changes were applied: none, or only some, reached the host".into(),
                }],
                ..Changes::default()
            })
        }
        _ => None,
    }
}

/// Attached mode: sends the spec, waits for the helper's `Ready` (every primitive applied, the
/// target about to start), then gives the target's stdin and stdout to the caller (an empty
/// stdout when the backend's output is inherited). No `Ready` (the helper refused the run): the
/// caller gets nothing, and the run's error says why.
async fn hand_over(
    stdin: Option<tokio::process::ChildStdin>,
    stdout: Option<tokio::process::ChildStdout>,
    spec: Vec<u8>,
    ready: oneshot::Receiver<Vec<String>>,
    cgroup_primitives: Vec<String>,
    attach: AttachTx,
) {
    use tokio::io::AsyncWriteExt;
    let Some(mut stdin) = stdin else {
        return;
    };
    let stdout: Box<dyn tokio::io::AsyncRead + Send + Unpin> = match stdout {
        Some(pipe) => Box::new(pipe),
        None => Box::new(tokio::io::empty()),
    };
    if let Err(e) = stdin.write_all(&spec).await {
        tracing::debug!(error = %e, "the sandbox helper stopped reading its spec");
        return;
    }
    let Ok(from_helper) = ready.await else {
        return;
    };
    let mut primitives: Vec<String> = vec!["env:clear".into()];
    primitives.extend(from_helper);
    primitives.extend(cgroup_primitives);
    let _ = attach.send(Attached {
        stdin: Box::new(stdin),
        stdout,
        attestation: Attestation {
            backend: NAME,
            isolated: true,
            destroyed: false,
            primitives,
        },
    });
}

/// How often the helper's state is re-checked even without a `SIGCHLD` (belt and braces).
const EXIT_POLL: Duration = Duration::from_millis(500);

/// Drives the run's I/O until the helper exits (or `backup` passes), then kills the process
/// group whatever happened, and gives the pipes `PIPE_GRACE` to drain. Returns whether the
/// helper had to be killed, and how long the run took from `start`.
async fn wait_for_helper(
    io: impl std::future::Future<Output = ()>,
    pidfd: &OwnedFd,
    pgid: Pid,
    backup: Duration,
    start: Instant,
) -> (bool, Duration) {
    let mut io = std::pin::pin!(io);
    let mut io_done = false;
    let waited = {
        let exit = tokio::time::timeout(backup, exited(pidfd));
        let mut exit = std::pin::pin!(exit);
        loop {
            tokio::select! {
                r = &mut exit => break r,
                () = &mut io, if !io_done => io_done = true,
            }
        }
    };
    let killed = match waited {
        Ok(Ok(())) => false,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "waiting for the sandbox helper failed; killing it");
            true
        }
        Err(_elapsed) => {
            tracing::warn!("the sandbox helper overstayed its timeout; killing it");
            true
        }
    };
    // The helper and the sandbox's init share this group (the target has its own session, but
    // dies with the init's pid namespace). The helper is not reaped yet, so its pid (the
    // group's id) cannot have been reused.
    kill_group(pgid);
    let duration = start.elapsed();
    if !io_done && tokio::time::timeout(PIPE_GRACE, &mut io).await.is_err() {
        tracing::debug!("something still holds the sandbox's pipes; not waiting");
    }
    (killed, duration)
}

/// Waits until the helper has exited, without reaping it (so its pid, the process group's id,
/// stays pinned for the group kill): `waitid(WEXITED | WNOWAIT | WNOHANG)` on its pidfd at every
/// `SIGCHLD`.
async fn exited(pidfd: &OwnedFd) -> std::io::Result<()> {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    use tokio::signal::unix::{SignalKind, signal};
    // Registered before the first check, so an exit in between is not missed.
    let mut sigchld = signal(SignalKind::child()).ok();
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
    loop {
        match waitid(WaitId::PidFd(pidfd.as_fd()), options) {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        match &mut sigchld {
            Some(sigchld) => {
                tokio::select! {
                    _ = sigchld.recv() => {}
                    () = tokio::time::sleep(EXIT_POLL) => {}
                }
            }
            None => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// A sandbox taken from the pool for one run. Dropped unfinished (the run's future was
/// abandoned), it goes back to the starter thread, which kills and removes it.
#[derive(Debug)]
struct Taken<'a> {
    sandbox: Option<Sandbox>,
    pool: &'a Pool,
}

impl Taken<'_> {
    /// Kills what is left of the helper's group and reaps the helper.
    async fn reap(&mut self) -> Result<std::process::ExitStatus, ExecError> {
        let lost = |what: String| ExecError::Lost {
            backend: NAME,
            what,
        };
        let Some(sb) = self.sandbox.as_mut() else {
            return Err(lost("the sandbox went missing".to_owned()));
        };
        if let Some(status) = sb.try_reap() {
            return status
                .map_err(|e| lost(format!("the sandbox helper could not be reaped: {e}")));
        }
        let Some(mut sb) = self.sandbox.take() else {
            return Err(lost("the sandbox went missing".to_owned()));
        };
        // It was killed: this wait is short.
        let (sb, status) = tokio::task::spawn_blocking(move || {
            let status = sb.reap();
            (sb, status)
        })
        .await
        .map_err(|e| lost(format!("the sandbox helper could not be reaped: {e}")))?;
        self.sandbox = Some(sb);
        status.map_err(|e| lost(format!("the sandbox helper could not be reaped: {e}")))
    }

    /// Removes the run's directory and cgroups (killing and reaping the helper first if that
    /// was not done); whether both are verifiably gone.
    async fn destroy(&mut self) -> bool {
        let Some(mut sb) = self.sandbox.take() else {
            return false;
        };
        // The usual case needs no waiting: the helper exited and its cgroups are empty.
        if matches!(sb.try_reap(), Some(Ok(_))) && sb.cgroups_empty() {
            let gone = sb.remove_state();
            self.pool.finished();
            return gone;
        }
        let gone = tokio::task::spawn_blocking(move || {
            if let Err(e) = sb.reap() {
                tracing::debug!(error = %e, "the sandbox helper was reaped already");
            }
            sb.remove_state()
        })
        .await
        .unwrap_or(false);
        self.pool.finished();
        gone
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(sb) = self.sandbox.take() {
            self.pool.discard(sb);
        }
    }
}

/// The network a run asks for, when it is not the backend's, and what serves its one listening
/// socket: the egress proxy for an allow-list, the link for corral's own API.
fn run_network(net: Option<&RunNetwork>) -> (Option<Network>, Option<egress::Served>) {
    match net {
        None => (None, None),
        Some(RunNetwork::None) => (Some(Network::None), None),
        Some(RunNetwork::Loopback) => (Some(Network::Loopback), None),
        Some(RunNetwork::Egress(e)) => (
            Some(Network::Egress),
            Some(egress::Served::Egress(e.clone())),
        ),
        Some(RunNetwork::Corral(l)) => (
            Some(Network::CorralLink),
            Some(egress::Served::Corral(l.clone())),
        ),
        Some(RunNetwork::CorralAndEgress(l, e)) => (
            Some(Network::CorralLinkAndEgress),
            Some(egress::Served::Both(l.clone(), e.clone())),
        ),
    }
}
