//! `corral agents prepare [ADAPTER]`: installs the coding-agent CLIs ahead of use (an image
//! build, with `install: {mode: build}`), and the agent lines of `corral doctor` (each
//! mounted adapter's installed version, or missing and the fix).

use std::path::PathBuf;

use corral_agents::{Adapter, InstallMode, InstallStatus, Installer};
use corral_config::Loaded;
use serde::Serialize;

use crate::context::{self, Threads};
use crate::{CliError, CliResult, Exit, Format};

/// The adapters the config mounts (`agents:`), and the installer of its state directory in
/// its install mode (`install:`).
fn configured(loaded: &Loaded) -> (Vec<Adapter>, Installer) {
    let adapters = loaded
        .config
        .agents
        .as_ref()
        .map(|a| a.names())
        .unwrap_or_default()
        .iter()
        .filter_map(|n| Adapter::parse(n))
        .collect();
    let mode = InstallMode::parse(loaded.config.install.mode.as_str()).unwrap_or(InstallMode::Lazy);
    (adapters, Installer::new(&loaded.state_dir, mode))
}

/// One adapter's install, as `corral doctor` and `corral agents prepare` show it.
#[derive(Debug, Serialize)]
pub struct AgentOut {
    /// The adapter.
    pub adapter: &'static str,
    /// Whether its CLI is installed.
    pub installed: bool,
    /// Its version, when installed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Where, when installed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// What to do when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// The install of each adapter the config mounts (none without `agents:`).
pub fn doctor_lines(loaded: Option<&Loaded>) -> Vec<AgentOut> {
    let Some(loaded) = loaded else {
        return Vec::new();
    };
    let (adapters, installer) = configured(loaded);
    adapters
        .into_iter()
        .map(|a| match installer.status(a) {
            InstallStatus::Installed { version, dir } => AgentOut {
                adapter: a.name(),
                installed: true,
                version: Some(version),
                dir: Some(dir),
                fix: None,
            },
            InstallStatus::Installing => AgentOut {
                adapter: a.name(),
                installed: false,
                version: None,
                dir: None,
                fix: Some("an install is running: ask again in a moment".to_owned()),
            },
            InstallStatus::Missing { fix } => AgentOut {
                adapter: a.name(),
                installed: false,
                version: None,
                dir: None,
                fix: Some(fix),
            },
        })
        .collect()
}

/// Prints the agent lines of `corral doctor`.
pub fn print_doctor_lines(agents: &[AgentOut]) {
    if agents.is_empty() {
        return;
    }
    outln!("agents:");
    for a in agents {
        match (&a.version, &a.fix) {
            (Some(v), _) => outln!("  {:12} installed {v}", a.adapter),
            (None, Some(fix)) => outln!("  {:12} MISSING    fix: {fix}", a.adapter),
            (None, None) => outln!("  {:12} MISSING", a.adapter),
        }
    }
}

/// Runs `corral agents prepare [ADAPTER]`: the named adapter, else every one the config
/// mounts.
pub fn prepare(config: Option<PathBuf>, adapter: Option<String>, format: Format) -> CliResult {
    let loaded = context::load_if_any(config, true)?
        .ok_or_else(|| CliError::usage("`corral agents prepare` needs a config"))?;
    let (mounted, installer) = configured(&loaded);
    let adapters = match adapter {
        Some(name) => vec![Adapter::parse(&name).ok_or_else(|| {
            CliError::usage(format!(
                "`{name}` is not an adapter corral hosts; name one of: {}",
                Adapter::ALL.map(Adapter::name).join(", ")
            ))
        })?],
        None if mounted.is_empty() => {
            return Err(CliError::usage(
                "the config mounts no agent adapter (`agents: [codex]`); name one: `corral agents prepare codex`",
            ));
        }
        None => mounted,
    };
    let rt = context::runtime(Threads::One)?;
    let mut out = Vec::new();
    for a in adapters {
        match rt.block_on(installer.prepare(a)) {
            Ok(i) => out.push(AgentOut {
                adapter: a.name(),
                installed: true,
                version: Some(i.version),
                dir: Some(i.dir),
                fix: None,
            }),
            Err(e) => return Err(CliError::coded(e.code, e.message).with_exit(Exit::Findings)),
        }
    }
    match format {
        Format::Json => crate::output::print_json(&out),
        Format::Human => {
            for a in &out {
                if let (Some(v), Some(d)) = (&a.version, &a.dir) {
                    outln!("{} {v} installed in {}", a.adapter, d.display());
                }
            }
        }
    }
    Ok(Exit::Ok)
}
