//! The guard chain's order, where it lives: a `Gateway` over the `inproc-mock` backend and the
//! memory stores (confirmations, runs, an audit sink kept in memory). For each step (resolve,
//! arguments, autonomy, RBAC, policy, limits, budgets, confirmation, execute) a call that is
//! refused exactly there, although it would fail every later step too, and nothing after it ran:
//! the backend saw no command, the audit recorded the step's outcome.

use std::sync::{Arc, Mutex};

use corral_exec::mock::{MockBackend, MockResponse, resource_of};
use corral_exec::{Backend, BoxFuture, ExecError, ExecOutput, ExecRequest};
use corral_guard::audit::{AuditError, AuditEvent, AuditSink};
use corral_guard::guardrails::{Budgets, GuardPolicy};
use corral_guard::{Call, CallOptions, Caller, Deployment, Gateway, Reply};
use corral_ops::exec::{CustomOp, CustomRun};
use corral_ops::{Op, Registry};
use corral_policy::scope::{PathScope, PathScopeSpec};
use corral_policy::units::Rate;
use corral_policy::{
    AutonomyLevel, Catalog, Effect, Engine, Limits, OpId, OpSpec, ParamKind, Policy, Principal,
    Rule, Selector,
};
use serde_json::{Value, json};

/// The mock backend, remembering every command it was asked to run; a command ending in
/// ` boom` cannot be started (the execute step's own refusal).
#[derive(Debug, Default)]
struct Seen {
    mock: MockBackend,
    runs: Mutex<Vec<String>>,
}

impl Seen {
    fn runs(&self) -> Vec<String> {
        self.runs.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Backend for Seen {
    fn name(&self) -> &'static str {
        "inproc-mock"
    }

    fn preflight(&self) -> Result<(), ExecError> {
        Ok(())
    }

    fn run(&self, req: ExecRequest) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        let resource = resource_of(&req);
        if let Ok(mut runs) = self.runs.lock() {
            runs.push(resource.clone());
        }
        if resource.ends_with(" boom") {
            return Box::pin(async move {
                Err(ExecError::Spawn {
                    program: resource,
                    reason: "the mock refuses it".to_owned(),
                })
            });
        }
        self.mock.run(req)
    }
}

/// An audit sink in memory.
#[derive(Debug, Default)]
struct Recorded(Mutex<Vec<AuditEvent>>);

impl Recorded {
    /// The events so far, as (outcome, code).
    fn outcomes(&self) -> Vec<(String, Option<String>)> {
        self.0
            .lock()
            .map(|e| {
                e.iter()
                    .map(|e| (e.outcome.as_str().to_owned(), e.code.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn last(&self) -> (String, Option<String>) {
        self.outcomes().pop().unwrap_or_default()
    }
}

impl AuditSink for Recorded {
    fn append<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async move {
            self.0
                .lock()
                .map_err(|_| AuditError("poisoned".to_owned()))?
                .push(event.clone());
            Ok(())
        })
    }
}

/// A gateway with two custom ops, each running through the backend:
/// `ledger.append {word, file}` (write effect: confirm tier, operators; `file` under the root,
/// 2 calls a minute per caller) and `ledger.peek` (read tier, viewers, no limit). RBAC is on and
/// every run may make one call.
struct Fixture {
    gateway: Gateway,
    backend: Arc<Seen>,
    audit: Arc<Recorded>,
    root: tempfile::TempDir,
}

fn op(id: &str, effect: Effect) -> OpSpec {
    let id = OpId::parse(id).unwrap();
    OpSpec::new(id, &[effect], "a ledger op")
}

impl Fixture {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let append = op("ledger.append", Effect::Write)
            .param("word", ParamKind::Word, true)
            .param("file", ParamKind::Path { root: None }, true);
        let peek = op("ledger.peek", Effect::Read);
        let mut catalog = Catalog::empty();
        catalog.add_custom(append.clone()).unwrap();
        catalog.add_custom(peek.clone()).unwrap();
        let paths = PathScope::compile(PathScopeSpec {
            roots: vec![root.path().display().to_string()],
            ..PathScopeSpec::default()
        })
        .unwrap();
        let policy = Policy::new()
            .rule(
                Rule::allow(
                    "append",
                    vec![Selector::parse("ledger.append", &catalog).unwrap()],
                )
                .paths(paths)
                .limits(Limits {
                    rate: Rate::parse("2/min").ok(),
                    ..Limits::NONE
                }),
            )
            .rule(Rule::allow(
                "peek",
                vec![Selector::parse("ledger.peek", &catalog).unwrap()],
            ));
        let custom = |spec: &OpSpec, argv: &[&str]| -> Arc<dyn Op> {
            let run = CustomRun {
                argv: argv.iter().map(|a| (*a).to_owned()).collect(),
                ..CustomRun::default()
            };
            Arc::new(CustomOp::new(spec.clone(), run, Vec::new()))
        };
        let ops = vec![
            custom(&append, &["ledger", "append", "{word}"]),
            custom(&peek, &["ledger", "peek"]),
        ];
        let mut guard = GuardPolicy::new();
        guard.rbac = Some(Default::default());
        guard.budgets = Budgets {
            max_calls: 1,
            ..Budgets::default()
        };
        let deployment = Deployment {
            engine: Engine::new(catalog.clone(), policy),
            registry: Registry::new(catalog, ops),
            protected: Vec::new(),
            guard,
        };
        let backend = Arc::new(Seen {
            mock: MockBackend::new([
                ("ledger peek".to_owned(), MockResponse::ok("(empty)")),
                ("ledger append w".to_owned(), MockResponse::ok("appended w")),
            ]),
            runs: Mutex::default(),
        });
        let audit = Arc::new(Recorded::default());
        let gateway = Gateway::new(
            deployment,
            backend.clone(),
            vec![audit.clone() as Arc<dyn AuditSink>],
            "default",
        );
        Self {
            gateway,
            backend,
            audit,
            root,
        }
    }

    /// A path under the root, or outside it.
    fn inside(&self) -> String {
        self.root.path().join("book").display().to_string()
    }

    async fn call(&self, who: &Principal, op: &str, args: Value, opts: CallOptions) -> Reply {
        let call = Call {
            caller: Caller::new(who.clone()),
            op: op.to_owned(),
            args,
            request_id: uuid::Uuid::new_v4().to_string(),
        };
        self.gateway.call_with(call, opts).await
    }
}

const OUTSIDE: &str = "/etc/corral-test";

fn run(id: &str) -> CallOptions {
    CallOptions {
        run_id: Some(id.to_owned()),
        ..CallOptions::default()
    }
}

/// The refusal's (status, code, message); panics on an answer that is not one.
fn refused(r: &Reply) -> (u16, &'static str, String) {
    match r {
        Reply::Refused(r) => (r.status(), r.code, r.message.clone()),
        Reply::Json(v) => panic!("expected a refusal, got {v}"),
        Reply::Stream(_) => panic!("expected a refusal, got a stream"),
    }
}

fn json_of(r: Reply) -> Value {
    match r {
        Reply::Json(v) => v,
        Reply::Refused(r) => panic!("expected a result, got {} {}", r.code, r.message),
        Reply::Stream(_) => panic!("expected a result, got a stream"),
    }
}

/// The action id of a `confirmation.required` answer.
fn action_id(r: &Reply) -> String {
    match r {
        Reply::Refused(r) if r.code == "confirmation.required" => r
            .details
            .as_ref()
            .and_then(|d| d["action_id"].as_str())
            .unwrap_or_default()
            .to_owned(),
        other => panic!("expected confirmation.required, got {:?}", refused(other)),
    }
}

/// Asserts the call was refused with `status` and `code`, audited as `outcome`, and that the
/// backend ran nothing more than `ran` before it.
fn assert_refused_at(
    f: &Fixture,
    r: &Reply,
    status: u16,
    code: &str,
    outcome: &str,
    ran: &[String],
) -> String {
    let (s, c, message) = refused(r);
    assert_eq!((s, c), (status, code), "{message}");
    assert_eq!(
        f.audit.last(),
        (outcome.to_owned(), Some(code.to_owned())),
        "{message}"
    );
    assert_eq!(f.backend.runs(), ran, "a step after `{outcome}` ran");
    message
}

#[tokio::test]
async fn a_call_that_fails_every_step_is_refused_by_the_earliest_and_nothing_after_it_runs() {
    let f = Fixture::new();
    let viewer = Principal::new("ada", &["viewer"]);
    let operator = Principal::new("ada", &["operator"]);
    let word = |file: &str| json!({"word": "w", "file": file});

    // Spend the one call of two runs (a read, which runs), and ada's two appends a minute (a
    // guarded op: it waits for a person, which gives the run's call back).
    for r in ["spent", "spent-low"] {
        json_of(f.call(&viewer, "ledger.peek", json!({}), run(r)).await);
    }
    for _ in 0..2 {
        action_id(
            &f.call(&operator, "ledger.append", word(&f.inside()), run("other"))
                .await,
        );
    }
    let ran = vec!["ledger peek".to_owned(), "ledger peek".to_owned()];
    assert_eq!(f.backend.runs(), ran);
    let low = CallOptions {
        autonomy: Some(AutonomyLevel::L2),
        ..run("spent-low")
    };

    // Resolve: an unknown op, with arguments that fit nothing, at L2, as a viewer.
    let r = f
        .call(&viewer, "ledger.nope", json!({"word": 5}), low.clone())
        .await;
    let m = assert_refused_at(&f, &r, 404, "op.not_enabled", "not_enabled", &ran);
    assert!(m.contains("`GET /ops` lists"), "{m}");
    // Arguments: a word that is not one.
    let bad = json!({"word": "two words", "file": OUTSIDE});
    let r = f.call(&viewer, "ledger.append", bad, low.clone()).await;
    let (_, code, _) = refused(&r);
    assert!(code.starts_with("args."), "{code}");
    assert_refused_at(&f, &r, 400, code, "invalid_args", &ran);
    // Autonomy: L2 forbids a write (and the viewer, the path, the rate and the budget all fail).
    let r = f.call(&viewer, "ledger.append", word(OUTSIDE), low).await;
    let m = assert_refused_at(&f, &r, 403, "autonomy.blocked", "autonomy_blocked", &ran);
    assert!(m.contains("needs autonomy L3"), "{m}");
    // RBAC: a viewer.
    let r = f
        .call(&viewer, "ledger.append", word(OUTSIDE), run("spent"))
        .await;
    let m = assert_refused_at(&f, &r, 403, "rbac.denied", "rbac_denied", &ran);
    assert!(m.contains("needs the role `operator`"), "{m}");
    // Policy: an operator, outside the root.
    let r = f
        .call(&operator, "ledger.append", word(OUTSIDE), run("spent"))
        .await;
    let m = assert_refused_at(&f, &r, 403, "policy.path_outside_scope", "denied", &ran);
    assert!(m.contains("rule `append`"), "{m}");
    // Limits: inside the root, over ada's rate.
    let r = f
        .call(&operator, "ledger.append", word(&f.inside()), run("spent"))
        .await;
    assert_refused_at(&f, &r, 429, "limit.rate", "limited", &ran);

    // Budgets: bob has his rate, not his run's call.
    let bob = Principal::new("bob", &["operator"]);
    json_of(f.call(&bob, "ledger.peek", json!({}), run("spent")).await);
    let ran = [ran, vec!["ledger peek".to_owned()]].concat();
    let r = f
        .call(&bob, "ledger.append", word(&f.inside()), run("spent"))
        .await;
    let m = assert_refused_at(&f, &r, 429, "budget.exhausted", "budget_refused", &ran);
    assert!(m.contains("budgets.max_calls"), "{m}");

    // Confirmation: a fresh run; the op waits for a person.
    let carol = Principal::new("carol", &["operator"]);
    let r = f
        .call(&carol, "ledger.append", word(&f.inside()), run("fresh"))
        .await;
    assert_refused_at(
        &f,
        &r,
        202,
        "confirmation.required",
        "confirmation_raised",
        &ran,
    );
    // Once she approves, the retry runs: the backend sees the command, once.
    let caller = Caller::new(carol.clone());
    f.gateway
        .decide_confirmation(
            &caller,
            &action_id(&r),
            &json!({"decision": "approve"}),
            "d1",
        )
        .await
        .unwrap();
    let v = json_of(
        f.call(&carol, "ledger.append", word(&f.inside()), run("fresh"))
            .await,
    );
    assert_eq!(v["stdout"], "appended w", "{v}");
    assert_eq!(v["attestation"]["backend"], "inproc-mock", "{v}");
    let ran = [ran, vec!["ledger append w".to_owned()]].concat();
    assert_eq!(f.backend.runs(), ran);
    let tail: Vec<_> = f.audit.outcomes().split_off(f.audit.outcomes().len() - 3);
    assert_eq!(
        tail,
        [
            ("confirmation_decided".to_owned(), None),
            ("confirmation_consumed".to_owned(), None),
            ("ok".to_owned(), None),
        ]
    );
}

#[tokio::test]
async fn an_approved_call_the_backend_cannot_start_is_refused_at_execute_and_ran_once() {
    let f = Fixture::new();
    let dave = Principal::new("dave", &["operator"]);
    let args = json!({"word": "boom", "file": f.inside()});
    let r = f
        .call(&dave, "ledger.append", args.clone(), CallOptions::default())
        .await;
    let id = action_id(&r);
    assert!(f.backend.runs().is_empty());
    f.gateway
        .decide_confirmation(
            &Caller::new(dave.clone()),
            &id,
            &json!({"decision": "approve"}),
            "d1",
        )
        .await
        .unwrap();
    let r = f
        .call(&dave, "ledger.append", args, CallOptions::default())
        .await;
    let ran = vec!["ledger append boom".to_owned()];
    let m = assert_refused_at(&f, &r, 502, "exec.spawn_failed", "op_error", &ran);
    assert!(m.contains("the mock refuses it"), "{m}");
}
