//! The agents host's ops that need no session: `agents.<a>.install` (the adapter's CLI per
//! `install: {mode}`: installed, or `agents.installing` while a lazy install runs, or the
//! mode's refusal). The session ops (`run`, `sessions.create`, `sessions.send_event`) are
//! served by the agents API, which holds the sessions.

use std::sync::Arc;

use corral_agents::{Adapter, InstallMode, Installer};
use corral_config::Loaded;
use corral_ops::{Op, OpCtx, OpError, OpOutput};
use corral_policy::OpSpec;
use serde_json::json;

/// The installer of a deployment: its state directory, its `install:` mode.
pub fn installer(loaded: &Loaded) -> Arc<Installer> {
    let mode = InstallMode::parse(loaded.config.install.mode.as_str()).unwrap_or(InstallMode::Lazy);
    Arc::new(Installer::new(&loaded.state_dir, mode))
}

/// `agents.<a>.install`.
#[derive(Debug)]
pub struct AgentInstall {
    spec: OpSpec,
    adapter: Adapter,
    installer: Arc<Installer>,
}

impl AgentInstall {
    /// The op `spec` installing `adapter` with `installer`; `None` when the op id names no
    /// adapter corral hosts.
    pub fn new(spec: OpSpec, installer: Arc<Installer>) -> Option<Self> {
        let name = spec
            .id
            .as_str()
            .strip_prefix("agents.")?
            .strip_suffix(".install")?;
        let adapter = Adapter::parse(name)?;
        Some(Self {
            spec,
            adapter,
            installer,
        })
    }
}

impl Op for AgentInstall {
    fn spec(&self) -> &OpSpec {
        &self.spec
    }

    fn call(&self, _ctx: OpCtx) -> corral_exec::BoxFuture<'_, Result<OpOutput, OpError>> {
        Box::pin(async move {
            let installed = self
                .installer
                .ensure(self.adapter)
                .map_err(|e| OpError::new(e.code, e.message))?;
            Ok(OpOutput::Json {
                value: json!({
                    "adapter": self.adapter.name(),
                    "version": installed.version,
                    "installed": true,
                }),
                attestation: None,
            })
        })
    }
}
