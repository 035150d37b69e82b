//! A simulation gateway (the lab's): ops answered by `SimulatedOps` after every check of the
//! chain, never by the deployment's handlers, and runs metered under their own purpose.

use std::sync::{Arc, Mutex};

use corral_exec::mock::MockBackend;
use corral_guard::audit::{AuditError, AuditEvent, AuditSink, JsonLines};
use corral_guard::guardrails::{Budgets, GuardPolicy};
use corral_guard::runs::{RunLedger, RunPurpose};
use corral_guard::{Call, CallOptions, Caller, Deployment, Gateway, Reply, SimulatedOps};
use corral_ops::{OpError, OpOutput, Registry};
use corral_policy::{
    Catalog, Effect, Engine, OpId, OpSpec, ParamKind, Policy, Principal, Rule, Selector,
};
use serde_json::{Value, json};

/// Keeps every event it is given.
#[derive(Debug, Default)]
struct Recorded(Mutex<Vec<AuditEvent>>);

impl AuditSink for Recorded {
    fn append<'a>(
        &'a self,
        event: &'a AuditEvent,
    ) -> futures_core::future::BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async move {
            self.0.lock().unwrap().push(event.clone());
            Ok(())
        })
    }
}

/// Answers `{"echo": <args>}` and remembers what it was asked.
#[derive(Debug, Default)]
struct Echo(Mutex<Vec<String>>);

impl SimulatedOps for Echo {
    fn answer(&self, spec: &OpSpec, args: &Value) -> Result<OpOutput, OpError> {
        self.0.lock().unwrap().push(spec.id.to_string());
        Ok(OpOutput::Json {
            value: json!({"echo": args}),
            attestation: None,
        })
    }
}

/// `ledger.peek` allowed, `ledger.drop` denied; every run may make one call. No handler at all:
/// a call that reached the registry would answer `server.internal`.
fn deployment() -> Arc<Deployment> {
    let peek = OpSpec::new(OpId::parse("ledger.peek").unwrap(), &[Effect::Read], "peek").param(
        "n",
        ParamKind::Int,
        true,
    );
    let drop = OpSpec::new(OpId::parse("ledger.drop").unwrap(), &[Effect::Read], "drop").param(
        "n",
        ParamKind::Int,
        true,
    );
    let mut catalog = Catalog::empty();
    catalog.add_custom(peek).unwrap();
    catalog.add_custom(drop).unwrap();
    let policy = Policy::new()
        .rule(Rule::allow(
            "ledger",
            vec![Selector::parse("ledger.*", &catalog).unwrap()],
        ))
        .rule(Rule::deny(
            "no-drop",
            vec![Selector::parse("ledger.drop", &catalog).unwrap()],
        ));
    let mut guard = GuardPolicy::new();
    guard.budgets = Budgets {
        max_calls: 1,
        ..Budgets::default()
    };
    Arc::new(Deployment {
        engine: Engine::new(catalog.clone(), policy),
        registry: Registry::new(catalog, Vec::new()),
        protected: Vec::new(),
        guard,
    })
}

async fn call(g: &Gateway, op: &str, run: &str, n: u32) -> Reply {
    let call = Call {
        caller: Caller::new(Principal::new("ada", &[])),
        op: op.to_owned(),
        args: json!({"n": n}),
        request_id: format!("{run}/{n}"),
    };
    let opts = CallOptions {
        run_id: Some(run.to_owned()),
        ..CallOptions::default()
    };
    g.call_with(call, opts).await
}

fn code(r: &Reply) -> Option<&'static str> {
    match r {
        Reply::Refused(r) => Some(r.code),
        Reply::Json(_) | Reply::Stream(_) => None,
    }
}

#[tokio::test]
async fn a_simulated_gateway_answers_allowed_calls_from_its_mocks_and_still_refuses_denied_ones() {
    let echo = Arc::new(Echo::default());
    let g = Gateway::shared(
        deployment(),
        Arc::new(MockBackend::default()),
        Vec::new(),
        "default",
    )
    .simulated(echo.clone());
    match call(&g, "ledger.peek", "r1", 1).await {
        Reply::Json(v) => assert_eq!(v, json!({"echo": {"n": 1}})),
        other => panic!("expected the mock's answer, got {:?}", code(&other)),
    }
    let denied = call(&g, "ledger.drop", "r2", 1).await;
    // A whole-op deny unmounts it: refused at the first step, the mocks never asked.
    assert_eq!(code(&denied), Some("op.not_enabled"));
    assert_eq!(*echo.0.lock().unwrap(), vec!["ledger.peek".to_owned()]);
}

#[tokio::test]
async fn a_simulation_run_is_metered_apart_from_the_live_run_of_the_same_id() {
    let runs = Arc::new(RunLedger::default());
    let d = deployment();
    let backend = Arc::new(MockBackend::default());
    let live = Gateway::shared(d.clone(), backend.clone(), Vec::new(), "default")
        .with_runs(runs.clone())
        .simulated(Arc::new(Echo::default()));
    let sim = Gateway::shared(d, backend, Vec::new(), "default")
        .with_runs(runs)
        .with_purpose(RunPurpose::Simulation)
        .simulated(Arc::new(Echo::default()));
    assert_eq!(sim.purpose(), RunPurpose::Simulation);
    assert_eq!(code(&call(&live, "ledger.peek", "same", 1).await), None);
    // The live run's one call does not spend the simulation's budget...
    assert_eq!(code(&call(&sim, "ledger.peek", "same", 2).await), None);
    // ...and each run's own budget still holds.
    assert_eq!(
        code(&call(&sim, "ledger.peek", "same", 3).await),
        Some("budget.exhausted")
    );
    assert_eq!(
        code(&call(&live, "ledger.peek", "same", 4).await),
        Some("budget.exhausted")
    );
}

/// An answered call, a refused one, an unauthenticated request and one refused by the surface,
/// through `g`: the request id and purpose of each audit event, in order.
async fn purposes_audited(g: &Gateway, recorded: &Recorded) -> Vec<(String, String)> {
    call(g, "ledger.peek", "p", 1).await;
    call(g, "ledger.drop", "p", 2).await;
    g.audit_unauthenticated("ledger.peek", "p/3", "auth.missing", 401)
        .await;
    let caller = Caller::new(Principal::new("ada", &[]));
    g.audit_rejected(&caller, "ledger.peek", "p/4", "args.invalid", 400)
        .await;
    recorded
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|e| (e.request_id.clone(), e.purpose.as_str().to_owned()))
        .collect()
}

#[tokio::test]
async fn every_audit_event_of_a_simulation_gateway_says_simulation_and_of_a_live_one_live() {
    for (purpose, name) in [
        (RunPurpose::Simulation, "simulation"),
        (RunPurpose::Live, "live"),
    ] {
        let recorded = Arc::new(Recorded::default());
        let g = Gateway::shared(
            deployment(),
            Arc::new(MockBackend::default()),
            vec![recorded.clone()],
            "default",
        )
        .with_purpose(purpose)
        .simulated(Arc::new(Echo::default()));
        let want: Vec<(String, String)> = ["p/1", "p/2", "p/3", "p/4"]
            .into_iter()
            .map(|rid| (rid.to_owned(), name.to_owned()))
            .collect();
        assert_eq!(purposes_audited(&g, &recorded).await, want);
    }
}

#[tokio::test]
async fn the_json_lines_audit_file_holds_each_events_purpose_and_an_old_line_reads_as_live() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let recorded = Arc::new(Recorded::default());
    let sim = Gateway::shared(
        deployment(),
        Arc::new(MockBackend::default()),
        vec![recorded, Arc::new(JsonLines::file(&path).unwrap())],
        "default",
    )
    .with_purpose(RunPurpose::Simulation)
    .simulated(Arc::new(Echo::default()));
    assert!(code(&call(&sim, "ledger.peek", "f", 1).await).is_none());
    let text = std::fs::read_to_string(&path).unwrap();
    let line: Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(
        (&line["request_id"], &line["purpose"]),
        (&json!("f/1"), &json!("simulation")),
        "{text}"
    );

    // A line an older corral wrote has no purpose: it was a live call.
    let mut old = line.clone();
    old.as_object_mut().unwrap().remove("purpose");
    let event: AuditEvent = serde_json::from_value(old).unwrap();
    assert_eq!(event.purpose, RunPurpose::Live);
}
