//! The services a runtime is built on, each from its config section: the store (`storage`), the
//! isolation backend (`isolation`), the audit sinks (`audit`) and the confirmation store
//! (`guardrails.confirmations`).

use std::path::PathBuf;
use std::sync::Arc;

use corral_config::Loaded;
use corral_config::model::ConfirmationBackend;
use corral_exec::Backend;
use corral_exec::linux::{LinuxBackend, Network};
use corral_exec::process::ProcessBackend;
use corral_guard::audit::AuditSink;
use corral_guard::confirm::{ConfirmationStore, MemoryConfirmations};
use corral_store::Store;

use crate::RuntimeError;

/// Opens the store the config names (`storage.url`, else SQLite in the state directory), after
/// checking again, on the paths as they resolve now, that the state directory lies inside no
/// root callers can write (issue 11 item 3; checked at load too).
pub(crate) async fn store(loaded: &Loaded) -> Result<Arc<Store>, RuntimeError> {
    if let Some(d) = corral_config::protect::writable_conflicts(loaded).first() {
        return Err(RuntimeError::Protected(d.to_string()));
    }
    let url = loaded
        .config
        .storage
        .url
        .clone()
        .unwrap_or_else(|| Store::default_sqlite_url(&loaded.state_dir));
    let r = &loaded.config.recordings;
    let defaults = corral_store::recording::RecordingLimits::default();
    let store = Store::connect(&url)
        .await
        .map_err(|e| RuntimeError::Store(e.to_string()))?
        .with_recording_limits(corral_store::recording::RecordingLimits {
            max_bytes: r.max_bytes.unwrap_or(defaults.max_bytes),
            max_events: r.max_events.unwrap_or(defaults.max_events),
            retention: r.retention.unwrap_or(defaults.retention),
            max_per_tenant: r.max_per_tenant.unwrap_or(defaults.max_per_tenant),
            max_per_principal: r.max_per_principal.unwrap_or(defaults.max_per_principal),
        });
    Ok(Arc::new(store))
}

/// The backend the config asks for (`isolation.backend`). A long-lived linux backend runs its
/// preflight here; when it fails corral still starts, and every exec op answers 503
/// `isolation.unavailable` naming the missing primitive: never a fallback to `process`. A
/// one-shot one (`one_shot`) skips the probe: its helper checks each primitive itself.
pub(crate) fn backend(loaded: &Loaded, one_shot: bool) -> Result<Arc<dyn Backend>, RuntimeError> {
    use corral_config::model::BackendKind;
    match loaded.config.isolation.backend {
        BackendKind::Linux => {
            let mut linux = linux_backend(loaded)?;
            if one_shot {
                linux = linux.with_one_shot();
            } else if let Err(e) = linux.preflight() {
                tracing::error!(
                    code = e.code(),
                    "{e}; every exec op will answer 503 until this is fixed (see `corral doctor`)"
                );
            }
            Ok(Arc::new(linux))
        }
        BackendKind::Process => {
            tracing::warn!(
                "isolation.backend is `process`: commands run without isolation and every result says `isolated: false`"
            );
            Ok(Arc::new(ProcessBackend::new()))
        }
    }
}

/// The `linux` backend as `isolation:` sets it (network, cgroup parent, host uids). The
/// running binary is the helper (`corral __sandbox-exec`); `/proc/self/exe` names it even if
/// the file on disk was replaced since.
fn linux_backend(loaded: &Loaded) -> Result<LinuxBackend, RuntimeError> {
    use corral_config::model::NetworkMode;
    let network = match loaded.config.isolation.network {
        NetworkMode::None => Network::None,
        NetworkMode::Loopback => Network::Loopback,
    };
    let host_uids =
        corral_exec::linux::HostUids::from_setting(loaded.config.isolation.host_uids.as_deref())
            .map_err(RuntimeError::Isolation)?;
    LinuxBackend::new(PathBuf::from("/proc/self/exe"))
        .with_network(network)
        .with_cgroup_parent(loaded.config.isolation.cgroup_parent.clone())
        .with_host_uids(host_uids)
        .map_err(RuntimeError::Isolation)
}

/// The backend agent sessions' turns run in: the `linux` backend as the config sets it, whose
/// attached runs write through the copy-on-write layer (a turn's changes are checked against
/// the protection, `.git` at any depth among it, and applied when it ends); its helper checks
/// each primitive itself (no second preflight). `None` with `isolation.backend: process`.
pub(crate) fn agents_backend(loaded: &Loaded) -> Result<Option<Arc<dyn Backend>>, RuntimeError> {
    use corral_config::model::BackendKind;
    if loaded.config.isolation.backend != BackendKind::Linux {
        return Ok(None);
    }
    let linux = linux_backend(loaded)?
        .with_attached_write_layer()
        .with_one_shot();
    Ok(Some(Arc::new(linux)))
}

/// The audit sinks: the store (through one group-commit writer task) first, then the one
/// `audit.sink` adds (stderr or a JSON Lines file).
pub(crate) fn audit_sinks(
    loaded: &Loaded,
    store: &Store,
) -> Result<Vec<Arc<dyn AuditSink>>, RuntimeError> {
    // One writer task commits concurrent calls' events together (group commit).
    let writer = corral_store::AuditWriter::spawn(store.clone());
    let mut sinks: Vec<Arc<dyn AuditSink>> = vec![Arc::new(writer)];
    match &loaded.config.audit.sink {
        corral_config::model::AuditSink::Stderr => {
            sinks.push(Arc::new(corral_guard::audit::JsonLines::stderr()))
        }
        corral_config::model::AuditSink::File(path) => {
            let sink = corral_guard::audit::JsonLines::file(&audit_file_path(loaded, path))
                .map_err(|e| RuntimeError::Store(format!("audit file `{path}`: {e}")))?;
            sinks.push(Arc::new(sink));
        }
        corral_config::model::AuditSink::Store | corral_config::model::AuditSink::Off => {}
    }
    Ok(sinks)
}

/// Where confirmations live (`guardrails.confirmations`): the store (default), or this process.
pub(crate) fn confirmations(loaded: &Loaded, store: &Arc<Store>) -> Arc<dyn ConfirmationStore> {
    match loaded.config.guardrails.confirmations {
        ConfirmationBackend::Store => store.clone(),
        ConfirmationBackend::Memory => {
            tracing::warn!(
                "guardrails.confirmations: memory: pending actions and approvals live in this process only; they are lost on restart and invisible to other replicas"
            );
            Arc::new(MemoryConfirmations::new())
        }
    }
}

/// Upstream servers outside the `linux` backend run unconfined: said once per start or reload.
pub(crate) fn warn_if_unisolated(loaded: &Loaded, backend: &Arc<dyn Backend>) {
    if !loaded.config.mcp_servers.is_empty() && backend.name() != "linux" {
        tracing::warn!(
            backend = backend.name(),
            "upstream MCP servers run without isolation: `read_paths`/`write_paths` confine nothing outside the `linux` backend"
        );
    }
}

/// An `audit.sink` file's path: absolute as given, else beside the state directory.
fn audit_file_path(loaded: &Loaded, p: &str) -> PathBuf {
    let base = PathBuf::from(&loaded.state_dir);
    let base = base.parent().map(PathBuf::from).unwrap_or(base);
    if p.starts_with('/') {
        PathBuf::from(p)
    } else {
        base.join(p)
    }
}
