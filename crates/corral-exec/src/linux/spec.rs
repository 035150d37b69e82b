//! What the parent tells the helper (a `Prep`, then a `Spec`, on the helper's stdin), and what
//! the helper reports back (`Status` lines, on the status pipe). Pure data: built and checked in
//! the parent, applied by the helper.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::Changes;
use crate::common::RlimitSpec;

/// Network inside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// A fresh network namespace; its only interface, `lo`, stays down: no socket can reach
    /// anything, not even 127.0.0.1.
    #[default]
    None,
    /// A fresh network namespace with `lo` up: the sandbox can talk to itself on 127.0.0.1, and
    /// to nothing else.
    Loopback,
    /// A fresh network namespace with `lo` up and one listening socket on
    /// `127.0.0.1:`[`super::egress::PROXY_PORT`] that corral's egress proxy (in the parent)
    /// accepts on: the only way out, and only to what the run's allow-list admits.
    Egress,
    /// A fresh network namespace with `lo` up and one listening socket on
    /// `127.0.0.1:`[`super::egress::PROXY_PORT`] whose connections the parent serves itself
    /// (corral's own API for the run, a [`crate::CorralLink`]): nothing else is reachable.
    CorralLink,
    /// As [`Network::CorralLink`], the same one socket also taking the egress proxy's
    /// requests (`CONNECT`, absolute URIs), checked against the run's allow-list.
    CorralLinkAndEgress,
}

impl Network {
    /// The attestation's name.
    pub fn primitive(self) -> &'static str {
        match self {
            Network::None => "netns:none",
            Network::Loopback => "netns:loopback",
            Network::Egress => "netns:egress-proxy",
            Network::CorralLink => "netns:corral-link",
            Network::CorralLinkAndEgress => "netns:corral-link+egress-proxy",
        }
    }
}

/// Where the sandbox's `/etc` comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EtcSource {
    /// The backend's prepared copy of the allowed files (and a `passwd`/`group` of its own),
    /// a host directory bound read-only at `/etc` in one mount; then each allowed host
    /// directory in `dirs` (relative to `/etc`) bound read-only on its mount point in it.
    Snapshot { dir: PathBuf, dirs: Vec<PathBuf> },
    /// Each allowed host entry bound one by one into a tmpfs `/etc` (for a run that binds a
    /// path of its own under `/etc`, which needs a writable directory to make its mount point).
    AllowList,
}

/// The request-independent half of a sandbox, sent first: a warm helper gets it, builds
/// everything it can (namespaces, the base root view) and then waits for its [`Spec`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Prep {
    /// An empty host directory the sandbox's root tmpfs is mounted on (in the sandbox's own
    /// mount namespace; the host only ever sees the empty directory).
    pub(crate) root_dir: PathBuf,
    /// The `/etc` of the view.
    pub(crate) etc: EtcSource,
    /// Network mode.
    pub(crate) network: Network,
    /// The run's cgroups (v1 directories): the helper moves itself into each one before it does
    /// anything else, so everything the sandbox ever forks is counted.
    pub(crate) cgroups: Vec<PathBuf>,
    /// The parent's pid, to catch it dying before `PR_SET_PDEATHSIG` took effect.
    pub(crate) parent_pid: i32,
    /// With [`Network::Egress`]: the parent's hand-over socket (a Unix socket path), where the
    /// helper sends the sandbox's listening socket (see `egress_bridge.rs`).
    #[serde(default)]
    pub(crate) egress_socket: Option<PathBuf>,
    /// As host root with `isolation.host_uids` on: the host ids the sandbox's user namespace
    /// maps inside `0..count` to; the program runs as the first (see `idmap.rs`). `None`: the
    /// caller's own id is mapped (for host root, the program is host root without capabilities).
    #[serde(default)]
    pub(crate) host_ids: Option<super::idmap::HostRange>,
}

/// The run, sent second: everything that depends on the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Spec {
    /// Program and arguments.
    pub(crate) argv: Vec<String>,
    /// The whole environment of the target.
    pub(crate) env: Vec<(String, String)>,
    /// Working directory (canonical, inside the sandbox's view).
    pub(crate) cwd: PathBuf,
    /// Bound read-only at the same absolute paths (canonical).
    pub(crate) read_paths: Vec<PathBuf>,
    /// Bound read-write at the same absolute paths (canonical).
    pub(crate) write_paths: Vec<PathBuf>,
    /// rlimits for the target.
    pub(crate) rlimits: Vec<RlimitSpec>,
    /// Wall-clock limit, milliseconds, from the moment the helper has the spec.
    pub(crate) timeout_ms: u64,
    /// Size of the per-run `/tmp` (and `/dev/shm`) tmpfs, bytes.
    pub(crate) tmp_bytes: u64,
    /// corral's own files and directories (state directory, config, key files), absolute:
    /// each one beneath a bind is covered by an empty read-only mount, and a bind inside one is
    /// refused (see `mounts::hide_own_files`).
    #[serde(default)]
    pub(crate) hidden: Vec<PathBuf>,
    /// The copy-on-write layer over `write_paths` (a one-shot run). `None`: they are bound
    /// read-write, so writes are live (an attached run: a long-lived upstream server).
    pub(crate) cow: Option<CowSpec>,
    /// The only files (or directories) the target may execute, with what starting them needs;
    /// `None`: anything it can read.
    pub(crate) exec_only: Option<Vec<PathBuf>>,
    /// A run that may change the host beyond the request's write paths
    /// (`ExecRequest::host_writes`); attested `fs:unconfined`.
    #[serde(default)]
    pub(crate) host: Option<HostSpec>,
}

/// What a run with host writes adds to its view (see `mounts::cover_kept_out`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HostSpec {
    /// The host's top-level directories among `write_paths`: overlays like any write path, but
    /// never walked for protected metadata to bind read-only (far too large; the apply checks
    /// every change against the protection, which is what decides).
    pub(crate) roots: Vec<PathBuf>,
    /// corral's own trees and files: each one in the view is covered (an empty read-only
    /// tmpfs, or `/dev/null` for a file) but for the run's own paths inside it, and no change
    /// in one is applied but through a write path inside it.
    pub(crate) keep_out: Vec<PathBuf>,
}

/// A run's copy-on-write layer: each write path is an overlay whose upper layer lives in a
/// per-run tmpfs of `quota` bytes, applied to the host after the run if `protected` allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CowSpec {
    /// Size of the layer's tmpfs, bytes (its inode count follows from it: [`cow_inodes`]).
    pub(crate) quota: u64,
    /// What no change may touch, as written (`corral_policy::ProtectedSpec`); the helper
    /// compiles it again, and refuses every change if it does not compile.
    pub(crate) protected: ProtectedWire,
    /// Changes to hold rather than apply.
    #[serde(default)]
    pub(crate) hold: Option<crate::Hold>,
    /// Apply the layer only if the target exited 0.
    #[serde(default)]
    pub(crate) apply_only_if_ok: bool,
}

/// `corral_policy::ProtectedSpec` on the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProtectedWire {
    pub(crate) names: Vec<String>,
    pub(crate) paths: Vec<String>,
    pub(crate) globs: Vec<String>,
}

impl ProtectedWire {
    pub(crate) fn of(spec: &corral_policy::ProtectedSpec) -> Self {
        ProtectedWire {
            names: spec.names.clone(),
            paths: spec.paths.clone(),
            globs: spec.globs.clone(),
        }
    }

    pub(crate) fn compile(&self) -> Result<corral_policy::Protected, String> {
        corral_policy::Protected::compile(corral_policy::ProtectedSpec {
            names: self.names.clone(),
            paths: self.paths.clone(),
            globs: self.globs.clone(),
        })
        .map_err(|e| e.to_string())
    }
}

/// The inode cap of a layer of `quota` bytes: one per 4 KiB, within [1024, 2^20], so many
/// small (or empty) files cannot get around the byte quota.
pub(crate) fn cow_inodes(quota: u64) -> u64 {
    (quota / 4096).clamp(1024, 1 << 20)
}

/// Why set-up failed, so the parent can map it to an `ExecError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FailKind {
    /// A primitive could not be applied: the run is refused (`isolation.unavailable`).
    Unavailable,
    /// The target could not be started (no such program, bad cwd).
    Spawn,
    /// The request cannot be represented (a path that cannot be bound).
    Invalid,
}

/// One line on the status pipe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    /// Sent by the target process right before `execve`: everything listed was applied.
    Ready { primitives: Vec<String> },
    /// A step failed; nothing was run (or, after `Ready`, `execve` failed).
    Failed {
        kind: FailKind,
        step: String,
        error: String,
    },
    /// Sent by the sandbox's init when the target ended.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// Sent by the helper after the sandbox's init was reaped, before `Done`: what the run's
    /// copy-on-write layer brought back to the host.
    Changes { changes: Changes },
    /// Sent by the helper when the sandbox's init was reaped: every process of the pid namespace
    /// is gone (the kernel frees them all before init's exit is reported).
    Done { timed_out: bool },
}

/// Largest message (prep or spec) the helper accepts, bytes.
pub(crate) const MAX_SPEC_BYTES: u64 = 16 * 1024 * 1024;

/// A message as sent: an 8-byte little-endian length, then JSON.
pub(crate) fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, String> {
    let json = serde_json::to_vec(msg).map_err(|e| format!("cannot encode the spec: {e}"))?;
    let len = u64::try_from(json.len()).map_err(|e| e.to_string())?;
    if len > MAX_SPEC_BYTES {
        return Err(format!("the spec is too large ({len} bytes)"));
    }
    let mut out = len.to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    Ok(out)
}
