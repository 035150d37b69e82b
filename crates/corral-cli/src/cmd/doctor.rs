//! `corral doctor`: which isolation primitives this host offers, which backends can run, and
//! where confirmations live (memory: one replica, lost on restart).
//!
//! In a container (Docker, Podman, a Kubernetes pod), the report names it and each missing
//! namespace or /proc carries the container's fix (corral's seccomp profile, an unmasked /proc).
//!
//! Every primitive is tried for real (corral_exec::linux::probe), and when the linux backend's
//! primitives are all there, one command (`/bin/true`) is run through it end to end, so the
//! answer is what a run would get. Exit 0 when the configured backend (`isolation.backend`,
//! `linux` unless the config says `process`) can run here, 1 when it cannot, 2 for a config
//! that does not load.

use std::path::PathBuf;
use std::time::Duration;

use corral_config::model::{BackendKind, ConfirmationBackend, NetworkMode};
use corral_exec::linux::{HostUids, LinuxBackend, Network, Primitive};
use corral_exec::{Backend, ExecRequest, ResourceLimits};
use serde::Serialize;

use crate::context::{self, Threads};
use crate::{CliError, CliResult, Exit, Format};

#[derive(Debug, Serialize)]
struct PrimitiveOut {
    name: &'static str,
    available: bool,
    required: bool,
    detail: String,
    fix: String,
}

impl From<&Primitive> for PrimitiveOut {
    fn from(p: &Primitive) -> Self {
        PrimitiveOut {
            name: p.name,
            available: p.available,
            required: p.required,
            detail: p.detail.clone(),
            fix: p.fix.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
struct BackendOut {
    name: &'static str,
    can_run: bool,
    isolated: bool,
    detail: String,
}

/// Where confirmations (pending actions, approvals, stored outcomes) live.
#[derive(Debug, Serialize)]
struct ConfirmationsOut {
    store: &'static str,
    shared_by_replicas: bool,
    survives_restart: bool,
    detail: &'static str,
}

impl ConfirmationsOut {
    fn of(backend: ConfirmationBackend, storage_url: Option<&str>) -> Self {
        let postgres = storage_url
            .is_some_and(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"));
        match (backend, postgres) {
            (ConfirmationBackend::Memory, _) => Self {
                store: "memory",
                shared_by_replicas: false,
                survives_restart: false,
                detail: "this process only: correct for a single replica; a restart loses pending actions and approvals",
            },
            (ConfirmationBackend::Store, true) => Self {
                store: "postgres",
                shared_by_replicas: true,
                survives_restart: true,
                detail: "shared by every replica on the database; kept across restarts",
            },
            (ConfirmationBackend::Store, false) => Self {
                store: "sqlite",
                shared_by_replicas: false,
                survives_restart: true,
                detail: "kept across restarts; one host (use Postgres for replicas)",
            },
        }
    }
}

#[derive(Debug, Serialize)]
struct Report {
    /// The container corral runs in and how that was told (`corral_exec::linux::container`), or
    /// `null` on a host: in one, a missing namespace or /proc gets the container's fix.
    container: Option<String>,
    configured_backend: &'static str,
    network: &'static str,
    /// Which host ids sandboxed programs run as (`isolation.host_uids`).
    host_ids: String,
    confirmations: ConfirmationsOut,
    ok: bool,
    primitives: Vec<PrimitiveOut>,
    backends: Vec<BackendOut>,
    /// Each mounted agent adapter's CLI: its installed version, or missing and the fix.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    agents: Vec<super::agents::AgentOut>,
}

/// What the config says about isolation and confirmations.
struct Configured {
    /// The install of each adapter the config mounts (`agents:`).
    agents: Vec<super::agents::AgentOut>,
    backend: BackendKind,
    network: NetworkMode,
    /// `isolation.cgroup_parent`.
    cgroup_parent: Option<PathBuf>,
    /// `isolation.host_uids`, as written (`auto` when absent).
    host_uids: String,
    confirmations: ConfirmationsOut,
}

/// The configured backend, network and cgroup parent, and where confirmations live: from the
/// config when one is given or found, else the defaults (`linux`, `none`, corral's own cgroup,
/// the SQLite store).
fn configured(flag: Option<PathBuf>) -> Result<Configured, CliError> {
    Ok(match context::load_if_any(flag, false)? {
        None => Configured {
            agents: Vec::new(),
            backend: BackendKind::default(),
            network: NetworkMode::default(),
            cgroup_parent: None,
            host_uids: "auto".to_owned(),
            confirmations: ConfirmationsOut::of(ConfirmationBackend::default(), None),
        },
        Some(l) => Configured {
            agents: super::agents::doctor_lines(Some(&l)),
            backend: l.config.isolation.backend,
            network: l.config.isolation.network,
            cgroup_parent: l.config.isolation.cgroup_parent.clone(),
            host_uids: l
                .config
                .isolation
                .host_uids
                .clone()
                .unwrap_or_else(|| "auto".to_owned()),
            confirmations: ConfirmationsOut::of(
                l.config.guardrails.confirmations,
                l.config.storage.url.as_deref(),
            ),
        },
    })
}

/// The host ids setting (`isolation.host_uids`) and, in words, which host ids sandboxed
/// programs run as here.
fn host_ids(written: &str) -> (Result<HostUids, String>, String) {
    let setting = HostUids::parse(written);
    let words = match &setting {
        Err(e) => format!("cannot tell: {e}"),
        Ok(_) if !running_as_root() => {
            "your own uid, mapped to root inside a user namespace of the run's own (corral is not root)".to_owned()
        }
        Ok(h) => match h.resolve() {
            Err(e) => format!("cannot tell: {e}"),
            Ok(None) => "host root without capabilities (`isolation.host_uids: root`); set `auto` so a kernel bug in the namespace code reaches no root-owned process".to_owned(),
            Ok(Some(r)) => format!(
                "host uid {} gid {} (a range of {} ids, `isolation.host_uids: {written}`; files keep their owners through idmapped mounts)",
                r.uid, r.gid, r.count
            ),
        },
    };
    (setting, words)
}

/// The probe checks `RLIMIT_NPROC` as corral's own uid, which as host root it never binds; with
/// host ids the program runs as an unprivileged uid, where it does (the test run attests it).
fn with_host_ids(mut p: PrimitiveOut, setting: &Result<HostUids, String>) -> PrimitiveOut {
    let ranged =
        matches!(setting, Ok(h) if running_as_root() && h.resolve().is_ok_and(|r| r.is_some()));
    if p.name == "rlimit:nproc-userns" && !p.available && ranged {
        p.available = true;
        p.detail = "binds the program: it runs as an unprivileged host uid (`isolation.host_uids`), whose process count RLIMIT_NPROC limits in the run's user namespace".to_owned();
        p.fix = String::new();
    }
    p
}

/// A failed test run in a container: an `ENOSYS` or `EPERM` there is most often the container's
/// seccomp profile (a call the probe does not make, such as the copy-on-write layer's fsopen).
fn in_container_hint(detail: String) -> String {
    let refused = detail.contains("(os error 38)") || detail.contains("(os error 1)");
    match corral_exec::linux::container() {
        Some(c) if refused => format!(
            "{detail}; in a container ({c}) a call refused like this is most often its seccomp profile: load deploy/seccomp-corral.json (docs/DEPLOY.md)"
        ),
        _ => detail,
    }
}

/// Whether this process runs as host root (`/proc/self` belongs to the caller's uid).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Runs `/bin/true` through the linux backend with a write path (an empty directory of its
/// own under the temp directory, so the run gets the copy-on-write layer a `commands.run` gets);
/// `Ok` with what it attested, or why it failed.
fn smoke_run(
    network: Network,
    cgroup_parent: Option<PathBuf>,
    host_uids: HostUids,
) -> Result<String, String> {
    let backend = LinuxBackend::new(PathBuf::from("/proc/self/exe"))
        .with_network(network)
        .with_cgroup_parent(cgroup_parent)
        .with_host_uids(host_uids)?;
    let rt = context::tokio_runtime(Threads::One)
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let scratch = std::env::temp_dir().join(format!("corral-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)
        .map_err(|e| format!("cannot make {}: {e}", scratch.display()))?;
    let result = smoke_run_in(&rt, &backend, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// [`smoke_run`]'s run, with `scratch` as its write path.
fn smoke_run_in(
    rt: &tokio::runtime::Runtime,
    backend: &LinuxBackend,
    scratch: &std::path::Path,
) -> Result<String, String> {
    let req = ExecRequest {
        argv: vec!["/bin/true".into()],
        cwd: PathBuf::from("/"),
        env: Vec::new(),
        stdin: None,
        timeout: Duration::from_secs(10),
        max_output_bytes: 4096,
        limits: ResourceLimits {
            default_memory: Some(corral_exec::DEFAULT_MEMORY),
            ..ResourceLimits::default()
        },
        read_paths: Vec::new(),
        write_paths: vec![scratch.to_path_buf()],
        protected: Default::default(),
        network: None,
        exec_only: None,
        hold: None,
        apply_only_if_ok: false,
        host_writes: None,
    };
    let out = rt.block_on(backend.run(req)).map_err(|e| e.to_string())?;
    let a = &out.attestation;
    if out.exit_code != Some(0) || !a.isolated {
        return Err(format!(
            "a test run of /bin/true ended with {:?} (isolated: {})",
            out.exit_code, a.isolated
        ));
    }
    Ok(format!(
        "a test run of /bin/true with a write path succeeded in {} ms (isolated: true, destroyed: {}, {})",
        out.duration.as_millis(),
        a.destroyed,
        a.primitives.join(" ")
    ))
}

/// Runs `corral doctor`.
pub fn run(config: Option<PathBuf>, format: Format) -> CliResult {
    let Configured {
        agents,
        backend: kind,
        network: net,
        cgroup_parent,
        host_uids,
        confirmations,
    } = configured(config)?;
    let network = match net {
        NetworkMode::None => Network::None,
        NetworkMode::Loopback => Network::Loopback,
    };
    let (host_setting, host_ids) = host_ids(&host_uids);
    let primitives = corral_exec::linux::probe_for(cgroup_parent.as_deref());
    let missing: Vec<&Primitive> = primitives
        .iter()
        .filter(|p| p.required && !p.available)
        .collect();
    let linux = if let Err(e) = &host_setting {
        BackendOut {
            name: "linux",
            can_run: false,
            isolated: true,
            detail: format!("isolation.host_uids: {e}"),
        }
    } else if missing.is_empty() {
        match smoke_run(
            network,
            cgroup_parent,
            host_setting.clone().unwrap_or_default(),
        ) {
            Ok(detail) => BackendOut {
                name: "linux",
                can_run: true,
                isolated: true,
                detail,
            },
            Err(e) => BackendOut {
                name: "linux",
                can_run: false,
                isolated: true,
                detail: in_container_hint(e),
            },
        }
    } else {
        BackendOut {
            name: "linux",
            can_run: false,
            isolated: true,
            detail: format!(
                "missing: {}",
                missing
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    };
    let process = BackendOut {
        name: "process",
        can_run: true,
        isolated: false,
        detail: "a plain child process with rlimits: runs anywhere, isolates nothing".into(),
    };
    let configured_backend = match kind {
        BackendKind::Linux => "linux",
        BackendKind::Process => "process",
    };
    let ok = match kind {
        BackendKind::Linux => linux.can_run,
        BackendKind::Process => true,
    };
    let report = Report {
        container: corral_exec::linux::container(),
        configured_backend,
        network: network.primitive().trim_start_matches("netns:"),
        host_ids,
        confirmations,
        ok,
        primitives: primitives
            .iter()
            .map(|p| with_host_ids(PrimitiveOut::from(p), &host_setting))
            .collect(),
        backends: vec![linux, process],
        agents,
    };
    match format {
        Format::Json => crate::output::print_json(&report),
        Format::Human => print_human(&report),
    }
    Ok(if ok { Exit::Ok } else { Exit::Findings })
}

fn print_human(r: &Report) {
    let width = r.primitives.iter().map(|p| p.name.len()).max().unwrap_or(0);
    if let Some(c) = &r.container {
        outln!("in a container: {c} (docs/DEPLOY.md says what the sandbox needs in one)");
    }
    outln!("isolation primitives:");
    for p in &r.primitives {
        let mark = match (p.available, p.required) {
            (true, _) => "ok",
            (false, true) => "MISSING",
            (false, false) => "absent",
        };
        outln!("  {:width$}  {mark:7}  {}", p.name, p.detail);
        if !p.available && !p.fix.is_empty() {
            outln!("  {:width$}           fix: {}", "", p.fix);
        }
    }
    outln!("backends:");
    for b in &r.backends {
        let can = if b.can_run { "can run" } else { "CANNOT run" };
        outln!(
            "  {:8} {can:10} isolated: {:5}  {}",
            b.name,
            b.isolated,
            b.detail
        );
    }
    let verdict = if r.ok {
        "can run here"
    } else {
        "CANNOT run here"
    };
    outln!(
        "configured backend: {} (network: {}): {verdict}",
        r.configured_backend,
        r.network
    );
    outln!("sandboxed programs run as: {}", r.host_ids);
    super::agents::print_doctor_lines(&r.agents);
    outln!(
        "confirmations: {}: {}",
        r.confirmations.store,
        r.confirmations.detail
    );
}
