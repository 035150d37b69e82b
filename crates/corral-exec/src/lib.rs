//! Isolation backends behind one `Backend` trait, each attesting what it really applied.
//!
//! **Architecture invariant:** a backend that cannot enforce what was asked returns
//! `ExecError::Unavailable`; it never runs the command under a weaker sandbox. This is the only
//! crate allowed `unsafe` (the `pre_exec` hooks, and the `linux` backend's sandbox helper).

mod common;
pub mod linux;
pub mod mock;
pub mod process;
mod repository;

pub use linux::{HELPER_ARG, helper_main};
pub use repository::enclosing_repository;

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

/// The memory cap of a run whose config sets none (`commands.run`, custom ops, upstream MCP
/// servers): 1 GiB. Raising it is explicit in config (`limits.memory`).
pub const DEFAULT_MEMORY: u64 = corral_policy::limits::DEFAULT_MEMORY;

/// The write quota of a run when the request sets none: what one run may add to its writable
/// roots, bytes (see [`ResourceLimits::write_quota`]).
pub const DEFAULT_WRITE_QUOTA: u64 = corral_policy::limits::DEFAULT_WRITE_QUOTA;

/// Resource limits applied to the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResourceLimits {
    /// `RLIMIT_CPU`, seconds.
    pub cpu_seconds: Option<u64>,
    /// A memory limit asked for explicitly, bytes: `RLIMIT_AS`, and in the `linux` backend a
    /// memory cgroup too (a run whose limit has no cgroup to enforce it is refused).
    pub memory: Option<u64>,
    /// The cap that applies when `memory` is `None` (corral's safe default, see
    /// [`DEFAULT_MEMORY`], not the config's): enforced by a memory cgroup where the backend
    /// has one, else by `RLIMIT_AS` only, and attested as whichever enforced it
    /// (`cgroup:memory` or `rlimit:as`). It never makes a run fail for want of a cgroup.
    pub default_memory: Option<u64>,
    /// `RLIMIT_NPROC` (and, where a backend can, a cgroup `pids.max`).
    pub processes: Option<u32>,
    /// `RLIMIT_FSIZE`, bytes.
    pub file_size: Option<u64>,
    /// `RLIMIT_NOFILE`.
    pub open_files: Option<u64>,
    /// What one run may write into its writable roots in total, bytes (`None`:
    /// [`DEFAULT_WRITE_QUOTA`]). A backend with a copy-on-write layer enforces it (the `linux`
    /// backend: the size and inode count of the layer's tmpfs, attested as `quota:<bytes>`);
    /// the `process` backend cannot, and never attests it.
    pub write_quota: Option<u64>,
}

/// What to run. Built by an op from a policy grant; never from raw caller input.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// Program and arguments; no shell unless argv says `sh -c` explicitly.
    pub argv: Vec<String>,
    /// Working directory (already jailed by the policy).
    pub cwd: PathBuf,
    /// The whole environment of the child: nothing else is inherited.
    pub env: Vec<(String, String)>,
    /// Bytes written to the child's stdin, which is then closed.
    pub stdin: Option<Vec<u8>>,
    /// Wall-clock limit; the whole process group is killed when it passes.
    pub timeout: Duration,
    /// Bytes kept of stdout and of stderr each; the rest is drained and dropped.
    pub max_output_bytes: u64,
    /// rlimits.
    pub limits: ResourceLimits,
    /// Directories the command may read (used by isolating backends).
    pub read_paths: Vec<PathBuf>,
    /// Directories the command may write (used by isolating backends).
    pub write_paths: Vec<PathBuf>,
    /// What no change of the run may create, change or delete in `write_paths` (`.git` and
    /// `.corral` at any depth always). A backend with a copy-on-write layer checks every change
    /// against it before applying it to the host, and reports the refused ones in
    /// [`ExecOutput::changes`].
    pub protected: corral_policy::Protected,
    /// The network of this run; `None`: the backend's own setting. A backend that cannot
    /// confine the network as asked refuses the run.
    pub network: Option<RunNetwork>,
    /// The only programs the run may execute (landlock's execute right), as absolute paths in
    /// the run's view: files, or directories for every file beneath; `None`: any program it
    /// can read. The backend adds what starting them needs (an ELF's dynamic loader, a script's
    /// `#!` interpreter), so listing a script makes its interpreter executable too. The run's
    /// `argv[0]` must be in it. A backend that cannot confine execution refuses the run.
    pub exec_only: Option<Vec<PathBuf>>,
    /// Changes to hold for a person instead of applying them (an agent scope's
    /// `confirm_writes_outside`); `None`: every change is applied. Needs a backend with a
    /// copy-on-write layer; one without refuses the run.
    pub hold: Option<Hold>,
    /// Apply the run's copy-on-write layer only if the program exited 0 (a timeout, a signal
    /// or a non-zero exit discards every change: [`Changes::discarded`]); `false`: whatever
    /// the program did is applied, as it ended.
    pub apply_only_if_ok: bool,
    /// The run may change the host beyond its write paths (an agent scope's `permissions:
    /// full`); `None`: only its write paths. Needs a backend with a copy-on-write layer, which
    /// gathers those changes too and applies them through the same checks; one without refuses
    /// the run. The `linux` backend attests it `fs:unconfined`.
    pub host_writes: Option<HostWrites>,
}

/// What a run that may change the host beyond its write paths ([`ExecRequest::host_writes`])
/// still may not: in the `linux` backend its further write paths are the host's top-level
/// directories ([`linux::host_roots`]), and besides `protected` (refused at every change as
/// always, its paths hidden) these trees are kept out.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostWrites {
    /// corral's own trees that hold some of the run's paths (the state directory, which holds
    /// an agent's home and its CLI's install), absolute: each is hidden from the run but for
    /// the run's own paths inside it, and no change in it is applied but through a write path
    /// inside it. The backend adds its own runtime directory.
    pub keep_out: Vec<PathBuf>,
}

/// Which changes of a run are held, and where: a change beneath `within` (one of the run's
/// write paths) and outside every `free` directory is not applied; it is written beneath
/// `into` (an empty host directory outside every path of the run) at its path relative to
/// `within`, and listed in [`Changes::held`]. A deletion is only listed. Protected paths are
/// refused as always, never held.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hold {
    /// The write path whose changes are judged.
    pub within: PathBuf,
    /// Directories beneath `within` whose changes are applied as usual.
    pub free: Vec<PathBuf>,
    /// Where held content goes.
    pub into: PathBuf,
}

/// One held change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeldChange {
    /// The host path it is for.
    pub path: String,
    /// `write` (a file, a symlink or a directory made or changed: its content is in the hold),
    /// `delete` (the entry goes), or `replace` (a directory emptied, then filled from the hold).
    pub kind: String,
}

/// The network one run asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunNetwork {
    /// Nothing reachable, not even loopback.
    None,
    /// Only the sandbox's own loopback.
    Loopback,
    /// Only what corral's egress proxy admits (see `linux::egress`).
    Egress(Egress),
    /// Only corral's own API for this run: the sandbox's `127.0.0.1:`[`linux::PROXY_PORT`]
    /// ([`linux::CORRAL_LINK_URL`]) is served by the link, in this process; nothing else is
    /// reachable (a lab run's external program).
    Corral(CorralLink),
    /// Corral's own API for this run and, on the same socket, corral's egress proxy (an agent
    /// whose scope has an allow-list): a request whose target is in origin form (`POST /v1/...`)
    /// is the link's; any other (`CONNECT host:port`, an absolute `http://` URI, garbage) is the
    /// proxy's, checked against the allow-list. The program's proxy variables point there with
    /// loopback exempt (`NO_PROXY`), so that its calls to the link go straight to it.
    CorralAndEgress(CorralLink, Egress),
}

/// The SHA-256 of a token a [`CorralLink`] accepts (a lab step's, an agent turn's): all a link
/// keeps of it.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    /// The digest of `token`.
    pub fn of(token: &str) -> Self {
        use sha2::Digest as _;
        Self(sha2::Sha256::digest(token.as_bytes()).into())
    }

    /// Whether `presented` is the token (compared by digest, in constant time).
    pub fn accepts(&self, presented: &str) -> bool {
        use sha2::Digest as _;
        use subtle::ConstantTimeEq as _;
        let other: [u8; 32] = sha2::Sha256::digest(presented.as_bytes()).into();
        self.0.ct_eq(&other).into()
    }
}

impl fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenDigest(..)")
    }
}

/// Serves the connections a sandboxed program makes to corral's own API: each accepted TCP
/// connection is handed to the link's function, which serves it (HTTP) until it closes.
#[derive(Clone)]
pub struct CorralLink(
    std::sync::Arc<dyn Fn(tokio::net::TcpStream) -> BoxFuture<'static, ()> + Send + Sync>,
);

impl CorralLink {
    /// A link serving each connection with `serve`.
    pub fn new(
        serve: impl Fn(tokio::net::TcpStream) -> BoxFuture<'static, ()> + Send + Sync + 'static,
    ) -> Self {
        Self(std::sync::Arc::new(serve))
    }

    /// Serves one connection.
    pub fn serve(&self, conn: tokio::net::TcpStream) -> BoxFuture<'static, ()> {
        (self.0)(conn)
    }
}

impl fmt::Debug for CorralLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CorralLink")
    }
}

impl PartialEq for CorralLink {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CorralLink {}

/// An egress allow-list and where the proxy reports each connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    /// What the proxy admits.
    pub allow: corral_policy::scope::EgressAllowList,
    /// Gets one record per connection, when it ended or was refused.
    pub log: EgressLog,
}

/// What the egress proxy did with one connection: never a byte of its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRecord {
    /// The host the program asked for (as it wrote it, lowercased; cut at 255 bytes).
    pub host: String,
    /// The port it asked for.
    pub port: u16,
    /// The address the proxy connected to (or refused).
    pub addr: Option<std::net::IpAddr>,
    /// Whether the connection was made.
    pub allowed: bool,
    /// Why it was refused, or why it failed after being allowed.
    pub reason: Option<String>,
    /// Bytes from the program to the remote.
    pub bytes_up: u64,
    /// Bytes from the remote to the program.
    pub bytes_down: u64,
}

/// Where egress records go: a callback, called from the proxy's tasks.
#[derive(Clone)]
pub struct EgressLog(std::sync::Arc<dyn Fn(EgressRecord) + Send + Sync>);

impl EgressLog {
    /// A log calling `f` for each record.
    pub fn new(f: impl Fn(EgressRecord) + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(f))
    }

    /// A log that drops every record.
    pub fn discard() -> Self {
        Self::new(|_| {})
    }

    /// Reports one record.
    pub fn record(&self, r: EgressRecord) {
        (self.0)(r);
    }
}

impl fmt::Debug for EgressLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EgressLog")
    }
}

impl PartialEq for EgressLog {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for EgressLog {}

/// What a backend actually applied to one run (a plain record, defined in corral-ports so
/// storage can audit it without linking this crate).
pub use corral_ports::attestation::Attestation;

/// The result of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Exit code, when the child exited.
    pub exit_code: Option<i32>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i32>,
    /// Captured stdout (at most `max_output_bytes`).
    pub stdout: Vec<u8>,
    /// Captured stderr (at most `max_output_bytes`).
    pub stderr: Vec<u8>,
    /// Whether stdout was cut at the cap.
    pub stdout_truncated: bool,
    /// Whether stderr was cut at the cap.
    pub stderr_truncated: bool,
    /// Whether the timeout killed it.
    pub timed_out: bool,
    /// Wall-clock time.
    pub duration: Duration,
    /// What was applied.
    pub attestation: Attestation,
    /// What the run changed in its writable roots, when the backend gathered its writes in a
    /// copy-on-write layer and applied them afterwards (`None`: the writes went straight to the
    /// host, as with the `process` backend and [`Backend::run_attached`]).
    pub changes: Option<Changes>,
}

/// Most refused changes listed one by one in [`Changes::refused`]; the rest are counted.
pub const MAX_REFUSED_LISTED: usize = 100;

/// What a run's copy-on-write layer brought back to the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Changes {
    /// Entries created, changed or deleted on the host.
    pub applied: u64,
    /// Bytes of file content written to the host.
    pub bytes: u64,
    /// Changes that were not applied, and why (at most [`MAX_REFUSED_LISTED`]).
    pub refused: Vec<RefusedChange>,
    /// Refused changes beyond the listed ones.
    pub refused_unlisted: u64,
    /// Changes held for a person ([`ExecRequest::hold`]), at most [`MAX_REFUSED_LISTED`].
    #[serde(default)]
    pub held: Vec<HeldChange>,
    /// Held changes beyond the listed ones.
    #[serde(default)]
    pub held_unlisted: u64,
    /// Nothing was applied: the run asked for its changes only if it succeeded, and it did
    /// not ([`ExecRequest::apply_only_if_ok`]).
    #[serde(default)]
    pub discarded: bool,
}

/// One change that did not reach the host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RefusedChange {
    /// The host path it was for.
    pub path: String,
    /// The stable code of the refusal (`corral_policy::codes`): `policy.path_denied` (a
    /// protected location), `exec.write_quota` (over the run's write quota), or
    /// `exec.change_refused` (anything else that kept it from the host).
    #[serde(default)]
    pub code: String,
    /// Why it was refused.
    pub reason: String,
}

/// A run that did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The backend cannot enforce what it promises on this host.
    #[error("the `{backend}` backend cannot run here: {missing}")]
    Unavailable {
        /// The backend.
        backend: &'static str,
        /// The missing primitive and how to get it.
        missing: String,
    },
    /// The program could not be started.
    #[error("cannot start `{program}`: {reason}")]
    Spawn {
        /// argv[0].
        program: String,
        /// Why.
        reason: String,
    },
    /// The request was malformed (empty argv, NUL bytes).
    #[error("invalid exec request: {0}")]
    Invalid(String),
    /// The backend lost track of a run whose program may have started (its helper or child
    /// could not be reaped, or it made no report): what the program did is unknown. The other
    /// variants all happen before the program starts; this one never does.
    #[error("the `{backend}` backend lost track of the run: {what}; the program may have run")]
    Lost {
        /// The backend.
        backend: &'static str,
        /// What was lost.
        what: String,
    },
}

impl ExecError {
    /// The stable code (see `corral_policy::codes`).
    pub fn code(&self) -> &'static str {
        match self {
            ExecError::Unavailable { .. } => "isolation.unavailable",
            ExecError::Spawn { .. } => "exec.spawn_failed",
            ExecError::Invalid(_) => "exec.invalid",
            ExecError::Lost { .. } => "exec.lost",
        }
    }
}

/// The pipes of a long-lived process started by [`Backend::run_attached`], and what was
/// applied to it: the caller talks to the process over its stdin and stdout.
pub struct Attached {
    /// The process's stdin.
    pub stdin: Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
    /// The process's stdout.
    pub stdout: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    /// What the backend applied (`destroyed` is `false`: the process is running).
    pub attestation: Attestation,
}

impl fmt::Debug for Attached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attached")
            .field("attestation", &self.attestation)
            .finish_non_exhaustive()
    }
}

/// Where [`Backend::run_attached`] sends the process's pipes once it started.
pub type AttachTx = tokio::sync::oneshot::Sender<Attached>;

/// A boxed future, so `Backend` stays object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs commands under some isolation and attests what it applied.
pub trait Backend: Send + Sync + fmt::Debug {
    /// The backend's name.
    fn name(&self) -> &'static str;
    /// Checks that every primitive the backend needs is present on this host.
    fn preflight(&self) -> Result<(), ExecError>;
    /// Runs one command.
    fn run(&self, req: ExecRequest) -> BoxFuture<'_, Result<ExecOutput, ExecError>>;
    /// Runs a long-lived process whose stdin and stdout the caller talks over (an upstream MCP
    /// server), under the same isolation as [`Backend::run`]: once the process started, its
    /// pipes go to `attach` (`req.stdin` is ignored; stdout is the caller's, stderr is captured
    /// with the usual cap). Resolves when the process ended or `req.timeout` passed; dropping the
    /// future kills the process and destroys its sandbox. A backend that cannot host such a
    /// process returns `ExecError::Unavailable`.
    ///
    /// Unlike [`Backend::run`], an attached process's writes are live by default: its write
    /// paths are bound read-write, with no copy-on-write layer, so no write quota and no
    /// protection check of its changes (`ExecOutput::changes` is `None`). What still holds
    /// there: the read-only binds of metadata that exists when it starts, and the `linux`
    /// backend's seccomp filter (no setuid or setgid bit, no extended attribute, so no file
    /// capability). A `linux` backend made `with_attached_write_layer()` (`corral run`) gives
    /// attached runs the layer too, applied when the process ended, as for [`Backend::run`].
    fn run_attached(
        &self,
        req: ExecRequest,
        attach: AttachTx,
    ) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        let _ = (req, attach);
        let backend = self.name();
        Box::pin(async move {
            Err(ExecError::Unavailable {
                backend,
                missing: "this backend cannot host a long-lived process".to_owned(),
            })
        })
    }
}
