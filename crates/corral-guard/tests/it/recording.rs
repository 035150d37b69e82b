//! Recording calls (issue 15 step 2): which calls of which runs are recorded, who may ask for it,
//! what an event holds, and that a recorder's failure never changes the answer. A `Gateway` over
//! the `inproc-mock` backend with a recorder kept in memory.

use std::sync::{Arc, Mutex};

use corral_exec::BoxFuture;
use corral_exec::mock::{MockBackend, MockResponse};
use corral_guard::audit::{AuditError, AuditEvent, AuditSink};
use corral_guard::guardrails::GuardPolicy;
use corral_guard::recording::{
    AdmitRefusal, Recorded, RecordedCall, Recorder, RecorderError, RecordingKey,
};
use corral_guard::{Call, CallOptions, Caller, Deployment, Gateway, Reply};
use corral_ops::exec::{CustomOp, CustomRun};
use corral_ops::{Op, Registry};
use corral_policy::{
    Catalog, Effect, Engine, OpId, OpSpec, ParamKind, Policy, Principal, Rule, Selector,
};
use serde_json::{Value, json};

/// A recorder in memory; `fail` makes every write fail (as a store that is down).
#[derive(Debug, Default)]
struct Memory {
    events: Mutex<Vec<(RecordingKey, RecordedCall)>>,
    gapped: Mutex<Vec<RecordingKey>>,
    fail: bool,
}

impl Memory {
    fn events(&self) -> Vec<(RecordingKey, RecordedCall)> {
        self.events.lock().unwrap().clone()
    }
}

impl Recorder for Memory {
    fn admit<'a>(
        &'a self,
        _key: &'a RecordingKey,
        _now_ms: i64,
    ) -> BoxFuture<'a, Result<(), AdmitRefusal>> {
        Box::pin(async { Ok(()) })
    }

    fn record<'a>(
        &'a self,
        key: &'a RecordingKey,
        call: &'a RecordedCall,
        _now_ms: i64,
    ) -> BoxFuture<'a, Result<Recorded, RecorderError>> {
        Box::pin(async move {
            if self.fail {
                return Err(RecorderError("store.unavailable: down".to_owned()));
            }
            let mut events = self.events.lock().unwrap();
            events.push((key.clone(), call.clone()));
            Ok(Recorded::Stored {
                seq: events.len() as u64,
            })
        })
    }

    fn mark_gapped<'a>(
        &'a self,
        key: &'a RecordingKey,
        _now_ms: i64,
    ) -> BoxFuture<'a, Result<(), RecorderError>> {
        Box::pin(async move {
            self.gapped.lock().unwrap().push(key.clone());
            Ok(())
        })
    }
}

#[derive(Debug, Default)]
struct Audit(Mutex<Vec<AuditEvent>>);

impl AuditSink for Audit {
    fn append<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async move {
            self.0.lock().unwrap().push(event.clone());
            Ok(())
        })
    }
}

/// `notes.read {word}` answers from the mock (`notes read secret-word` -> "the secret value");
/// `notes.write` exists but no rule allows it.
fn gateway(recorder: Option<Arc<Memory>>) -> (Gateway, Arc<Audit>) {
    let read = OpSpec::new(OpId::parse("notes.read").unwrap(), &[Effect::Read], "read").param(
        "word",
        ParamKind::Word,
        true,
    );
    let write = OpSpec::new(
        OpId::parse("notes.write").unwrap(),
        &[Effect::Write],
        "write",
    );
    let mut catalog = Catalog::empty();
    catalog.add_custom(read.clone()).unwrap();
    catalog.add_custom(write.clone()).unwrap();
    let policy = Policy::new().rule(Rule::allow(
        "read",
        vec![Selector::parse("notes.read", &catalog).unwrap()],
    ));
    let custom = |spec: &OpSpec, argv: &[&str]| -> Arc<dyn Op> {
        let run = CustomRun {
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            ..CustomRun::default()
        };
        Arc::new(CustomOp::new(spec.clone(), run, Vec::new()))
    };
    let ops = vec![
        custom(&read, &["notes", "read", "{word}"]),
        custom(&write, &["notes", "write"]),
    ];
    let deployment = Deployment {
        engine: Engine::new(catalog.clone(), policy),
        registry: Registry::new(catalog, ops),
        protected: Vec::new(),
        guard: GuardPolicy::new(),
    };
    let backend = Arc::new(MockBackend::new([(
        "notes read secret-word".to_owned(),
        MockResponse::ok("the secret value"),
    )]));
    let audit = Arc::new(Audit::default());
    let mut g = Gateway::new(
        deployment,
        backend,
        vec![audit.clone() as Arc<dyn AuditSink>],
        "default",
    );
    if let Some(r) = recorder {
        g = g.with_recorder(r);
    }
    (g, audit)
}

async fn call(g: &Gateway, caller: Caller, op: &str, args: Value, opts: CallOptions) -> Reply {
    let call = Call {
        caller,
        op: op.to_owned(),
        args,
        request_id: "req-1".to_owned(),
    };
    g.call_with(call, opts).await
}

fn refusal(r: &Reply) -> (u16, &'static str, String) {
    match r {
        Reply::Refused(r) => (r.status(), r.code, r.message.clone()),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn json_of(r: Reply) -> Value {
    match r {
        Reply::Json(v) => v,
        other => panic!("expected JSON, got {other:?}"),
    }
}

fn recording_token(id: &str) -> Caller {
    Caller::new(Principal::new("agent", &[]))
        .with_run(Some(id.to_owned()))
        .with_record(true)
}

fn header(run: Option<&str>) -> CallOptions {
    CallOptions {
        run_id: run.map(str::to_owned),
        record: true,
        ..CallOptions::default()
    }
}

#[tokio::test]
async fn a_run_scoped_token_with_record_has_each_call_recorded_in_order_with_its_response_or_code()
{
    let rec = Arc::new(Memory::default());
    let (g, audit) = gateway(Some(rec.clone()));
    let caller = recording_token("task-7");
    let ok = call(
        &g,
        caller.clone(),
        "notes.read",
        json!({"word": "secret-word"}),
        CallOptions::default(),
    )
    .await;
    let answer = json_of(ok);
    let denied = call(&g, caller, "notes.write", json!({}), CallOptions::default()).await;
    assert_eq!(refusal(&denied).1, "op.not_enabled");

    let events = rec.events();
    assert_eq!(events.len(), 2);
    let (key, first) = &events[0];
    assert_eq!(
        (
            key.tenant.as_str(),
            key.run_id.as_str(),
            key.principal.as_str()
        ),
        ("default", "task-7", "agent")
    );
    assert_eq!(first.op, "notes.read");
    assert_eq!(
        first.args, r#"{"word":"secret-word"}"#,
        "canonical arguments"
    );
    assert_eq!(
        first.response.as_ref(),
        Some(&answer),
        "the response the caller got"
    );
    assert_eq!(first.error_code, None);
    let (_, second) = &events[1];
    assert_eq!(second.op, "notes.write");
    assert_eq!(
        (second.response.as_ref(), second.error_code.as_deref()),
        (None, Some("op.not_enabled"))
    );

    // The audit stays value-free: neither the argument nor the response is in it.
    let audit = serde_json::to_string(&*audit.0.lock().unwrap()).unwrap();
    assert!(!audit.contains("secret-word"), "{audit}");
    assert!(!audit.contains("the secret value"), "{audit}");
    assert!(answer.to_string().contains("the secret value"), "{answer}");
}

#[tokio::test]
async fn calls_of_a_run_not_marked_for_recording_are_not_recorded() {
    let rec = Arc::new(Memory::default());
    let (g, _) = gateway(Some(rec.clone()));
    let plain = Caller::new(Principal::new("agent", &["admin"])).with_run(Some("r".to_owned()));
    let opts = CallOptions {
        run_id: Some("r".to_owned()),
        ..CallOptions::default()
    };
    json_of(
        call(
            &g,
            plain,
            "notes.read",
            json!({"word": "secret-word"}),
            opts,
        )
        .await,
    );
    assert!(rec.events().is_empty());
}

#[tokio::test]
async fn the_record_header_from_an_operator_records_the_call_and_from_a_viewer_is_refused_403() {
    let rec = Arc::new(Memory::default());
    let (g, audit) = gateway(Some(rec.clone()));
    let viewer = Caller::new(Principal::new("vic", &["viewer"]));
    let r = call(
        &g,
        viewer,
        "notes.read",
        json!({"word": "secret-word"}),
        header(Some("r1")),
    )
    .await;
    let (status, code, message) = refusal(&r);
    assert_eq!((status, code), (403, "recording.not_allowed"));
    assert!(message.contains("`operator` or `admin`"), "{message}");
    assert!(
        rec.events().is_empty(),
        "a refused call is not recorded either"
    );
    let last = audit.0.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last.code.as_deref(), Some("recording.not_allowed"));
    // Nobody without a role either.
    let nobody = Caller::new(Principal::new("anon", &[]));
    let r = call(
        &g,
        nobody,
        "notes.read",
        json!({"word": "secret-word"}),
        header(Some("r1")),
    )
    .await;
    assert_eq!(refusal(&r).1, "recording.not_allowed");

    for role in ["operator", "admin"] {
        let who = Caller::new(Principal::new(role, &[role]));
        json_of(
            call(
                &g,
                who,
                "notes.read",
                json!({"word": "secret-word"}),
                header(Some("r2")),
            )
            .await,
        );
    }
    let events = rec.events();
    let who: Vec<&str> = events.iter().map(|(k, _)| k.principal.as_str()).collect();
    assert_eq!(who, ["operator", "admin"]);
}

#[tokio::test]
async fn the_record_header_without_a_run_is_refused_400_naming_the_run_header() {
    let rec = Arc::new(Memory::default());
    let (g, _) = gateway(Some(rec.clone()));
    let op = Caller::new(Principal::new("op", &["operator"]));
    let r = call(
        &g,
        op,
        "notes.read",
        json!({"word": "secret-word"}),
        header(None),
    )
    .await;
    let (status, code, message) = refusal(&r);
    assert_eq!((status, code), (400, "recording.header_invalid"));
    assert!(message.contains("X-Corral-Run"), "{message}");
    assert!(rec.events().is_empty());
}

#[tokio::test]
async fn a_call_asked_to_be_recorded_without_a_recorder_is_refused_not_answered_unrecorded() {
    let (g, _) = gateway(None);
    let r = call(
        &g,
        recording_token("t"),
        "notes.read",
        json!({"word": "secret-word"}),
        CallOptions::default(),
    )
    .await;
    let (status, code, _) = refusal(&r);
    assert_eq!((status, code), (503, "recording.unavailable"));
}

#[tokio::test]
async fn a_recorder_failure_leaves_the_answer_unchanged_and_marks_the_recording_gapped() {
    let rec = Arc::new(Memory {
        fail: true,
        ..Memory::default()
    });
    let (g, _) = gateway(Some(rec.clone()));
    let (unrecorded, _) = gateway(None);
    let with = json_of(
        call(
            &g,
            recording_token("t"),
            "notes.read",
            json!({"word": "secret-word"}),
            CallOptions::default(),
        )
        .await,
    );
    let plain = Caller::new(Principal::new("agent", &[]));
    let without = json_of(
        call(
            &unrecorded,
            plain,
            "notes.read",
            json!({"word": "secret-word"}),
            CallOptions::default(),
        )
        .await,
    );
    assert_eq!(with, without);
    let gapped = rec.gapped.lock().unwrap().clone();
    assert_eq!(gapped.len(), 1);
    assert_eq!(gapped[0].run_id, "t");
}
