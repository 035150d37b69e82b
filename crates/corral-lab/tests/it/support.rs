//! A base deployment as `corral serve` builds one, from a config YAML: the real file and http
//! handlers (a lab world must never reach them), and an audit sink kept in memory.

use std::path::Path;
use std::sync::{Arc, Mutex};

use corral_exec::BoxFuture;
use corral_guard::Deployment;
use corral_guard::audit::{AuditError, AuditEvent, AuditSink};
use corral_guard::guardrails::{Budgets, GuardPolicy};
use corral_lab::world::Lab;
use corral_ops::files::{FileOp, FileOpKind};
use corral_ops::http::{FetchConfig, HttpFetch};
use corral_ops::{Op, Registry};
use corral_policy::Principal;

/// An audit sink in memory.
#[derive(Debug, Default)]
pub struct Recorded(pub Mutex<Vec<AuditEvent>>);

impl Recorded {
    /// The events so far.
    pub fn events(&self) -> Vec<AuditEvent> {
        self.0.lock().unwrap().clone()
    }
}

impl AuditSink for Recorded {
    fn append<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async move {
            self.0.lock().unwrap().push(event.clone());
            Ok(())
        })
    }
}

/// An audit sink that always fails (the store is down).
#[derive(Debug, Default)]
pub struct Broken;

impl AuditSink for Broken {
    fn append<'a>(&'a self, _event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async { Err(AuditError("store.unavailable: down".to_owned())) })
    }
}

struct NoEnv;

impl corral_config::Env for NoEnv {
    fn var(&self, _name: &str) -> Option<String> {
        None
    }
}

/// The config of the tests: `files.read` under `root` except `root/private`, `http.fetch` of
/// `api.example.test` only (unattended: no person approves a simulated call).
pub fn config(root: &Path) -> String {
    let root = root.display();
    format!(
        "version: 1
rules:
  - allow: [files.read]
    paths: {{roots: [{root}], deny: ['{root}/private/**']}}
  - allow: [http.fetch]
    urls: {{hosts: [api.example.test]}}
    confirm: never
"
    )
}

/// The deployment of a config: its engine, the real handlers of its file and http ops.
pub fn deployment(yaml: &str, base: &Path) -> Deployment {
    let loaded = match corral_config::load_str("corral.yaml", yaml, base, &NoEnv) {
        Ok(l) => l,
        Err(e) => panic!("{}", e.render()),
    };
    let mut ops: Vec<Arc<dyn Op>> = Vec::new();
    for spec in loaded.catalog.iter() {
        let s = spec.clone();
        match spec.id.as_str() {
            "files.read" => ops.push(Arc::new(FileOp::new(s, FileOpKind::Read))),
            "files.list" => ops.push(Arc::new(FileOp::new(s, FileOpKind::List))),
            "http.fetch" => ops.push(Arc::new(HttpFetch::new(s, FetchConfig::default()))),
            _ => {}
        }
    }
    // The guard settings the tests' configs use, as the server's composition root reads them.
    let mut guard = GuardPolicy::new();
    guard.confirm_never_rules = loaded
        .origins
        .iter()
        .enumerate()
        .filter(|(_, o)| o.confirm_never)
        .map(|(i, _)| i)
        .collect();
    let b = &loaded.config.budgets;
    guard.budgets = Budgets {
        max_calls: b.max_calls,
        max_calls_per_op: b
            .max_calls_per_op
            .iter()
            .map(|(op, n)| (op.value.clone(), *n))
            .collect(),
        max_wall_time: b.max_wall_time,
        max_output_bytes: b.max_output_bytes,
        max_tokens: b.tokens,
    };
    Deployment {
        engine: loaded.engine(),
        registry: Registry::new(loaded.catalog.clone(), ops),
        protected: Vec::new(),
        guard,
    }
}

/// A lab over the tests' deployment rooted at `root`, auditing to `audit`.
pub fn lab(root: &Path, audit: Arc<dyn AuditSink>) -> Lab {
    Lab::new(&deployment(&config(root), root), vec![audit], "default").unwrap()
}

/// The caller of the tests' runs.
pub fn ada() -> Principal {
    Principal::new("ada", &["operator"])
}
