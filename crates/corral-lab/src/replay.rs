//! Sandboxed replay's world (issue 15 item 3): the running deployment with its real handlers,
//! on its isolation backend, but with every op whose replay safety class is unsafe structurally
//! absent (`corral_ops::replay::SafeRegistry`: neither spec nor handler), its calls metered under
//! purpose `replay`. A variant is checked before anything runs ([`eligible`]): the first unsafe
//! or unknown tool it declares is named, and no run is created.

use std::sync::Arc;

use corral_exec::Backend;
use corral_guard::audit::AuditSink;
use corral_guard::metering::Meter;
use corral_guard::runs::{RunLedger, RunPurpose};
use corral_guard::{Deployment, Gateway};
use corral_ops::replay::{Ineligible, SafeRegistry, check_tools};
use corral_policy::Engine;

use crate::workflow::Workflow;

/// The replay deployment of one base deployment: built once, a gateway per replay run.
#[derive(Debug, Clone)]
pub struct ReplayLab {
    base_catalog: corral_policy::Catalog,
    deployment: Arc<Deployment>,
    left_out: Vec<String>,
    backend: Arc<dyn Backend>,
    sinks: Vec<Arc<dyn AuditSink>>,
    tenant: String,
    runs: Arc<RunLedger>,
    meter: Arc<Meter>,
}

impl ReplayLab {
    /// The replay side of `base` (its policy and guard settings, its safe ops only), running
    /// commands on `backend` and auditing to `sinks`.
    pub fn new(
        base: &Deployment,
        backend: Arc<dyn Backend>,
        sinks: Vec<Arc<dyn AuditSink>>,
        tenant: &str,
    ) -> Self {
        let (safe, left_out) = SafeRegistry::of(&base.registry);
        let deployment = Deployment {
            engine: Engine::new(safe.catalog().clone(), base.engine.policy().clone()),
            registry: safe.to_registry(),
            protected: base.protected.clone(),
            guard: base.guard.clone(),
        };
        Self {
            base_catalog: base.engine.catalog().clone(),
            deployment: Arc::new(deployment),
            left_out,
            backend,
            sinks,
            tenant: tenant.to_owned(),
            runs: Arc::new(RunLedger::default()),
            meter: Arc::new(Meter::default()),
        }
    }

    /// This replay lab, its gateways' calls metered in `meter` (the runtime's).
    pub fn metered(mut self, meter: Arc<Meter>) -> Self {
        self.meter = meter;
        self
    }

    /// The ops a replay cannot call (unsafe in the base deployment), sorted.
    pub fn left_out(&self) -> &[String] {
        &self.left_out
    }

    /// The load-time check of a workflow variant against the base deployment's ops: its first
    /// unsafe or unknown tool, before any run exists.
    pub fn eligible(&self, workflow: &Workflow) -> Result<(), Ineligible> {
        eligible(&self.base_catalog, workflow.tools())
    }

    /// A gateway for one replay run: the safe deployment, the real handlers and backend,
    /// purpose `replay` (no surface or header can change it).
    pub fn gateway(&self) -> Gateway {
        Gateway::shared(
            Arc::clone(&self.deployment),
            Arc::clone(&self.backend),
            self.sinks.clone(),
            &self.tenant,
        )
        .with_runs(self.runs.clone())
        .with_meter(Arc::clone(&self.meter))
        .with_purpose(RunPurpose::Replay)
    }

    /// The replay runs' ledger (counted per purpose `replay`).
    pub fn ledger(&self) -> &Arc<RunLedger> {
        &self.runs
    }
}

/// The load-time check of the tools a variant declares (a workflow's ops, an external agent's
/// `tools:` list) against `catalog`: the first unsafe or unknown one is named.
pub fn eligible<'a>(
    catalog: &corral_policy::Catalog,
    tools: impl IntoIterator<Item = &'a str>,
) -> Result<(), Ineligible> {
    check_tools(catalog, tools)
}
