//! The ops of a sandboxed replay (issue 15 item 3): `SafeRegistry` cannot hold an unsafe op,
//! `check_tools` names the first unsafe or unknown tool a variant declares, and a gateway over a
//! replay deployment answers a call of an unsafe op `404 op.not_enabled` even when its policy
//! allows everything and no load check ran (the call-time defence, reached here directly).

use std::sync::{Arc, Mutex};

use corral_exec::BoxFuture;
use corral_exec::mock::MockBackend;
use corral_guard::audit::{AuditError, AuditEvent, AuditSink};
use corral_guard::guardrails::GuardPolicy;
use corral_guard::{Call, Caller, Deployment, Gateway, Reply};
use corral_ops::replay::{SafeOp, SafeRegistry, check_tools};
use corral_ops::{Op, OpCtx, OpError, OpOutput, Registry};
use corral_policy::{
    Catalog, Effect, Engine, OpId, OpSpec, Policy, Principal, Rule, Selector, codes,
};
use serde_json::json;

/// An op that answers `{"ran": <id>}` and counts its calls.
#[derive(Debug)]
struct Counting {
    spec: OpSpec,
    calls: Arc<Mutex<u32>>,
}

impl Op for Counting {
    fn spec(&self) -> &OpSpec {
        &self.spec
    }

    fn call(&self, _ctx: OpCtx) -> BoxFuture<'_, Result<OpOutput, OpError>> {
        if let Ok(mut n) = self.calls.lock() {
            *n += 1;
        }
        let id = self.spec.id.to_string();
        Box::pin(async move {
            Ok(OpOutput::Json {
                value: json!({ "ran": id }),
                attestation: None,
            })
        })
    }
}

#[derive(Debug, Default)]
struct Discard;

impl AuditSink for Discard {
    fn append<'a>(&'a self, _event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async { Ok(()) })
    }
}

fn spec(id: &str, effect: Effect, contained: bool) -> OpSpec {
    let mut s = OpSpec::new(OpId::parse(id).unwrap(), &[effect], "a test op");
    s.contained = contained;
    s
}

/// `notes.read` (read), `notes.scratch` (write, contained in the run's workspace) and
/// `notes.publish` (write, outside it), each counting its calls.
fn registry() -> (Registry, Arc<Mutex<u32>>) {
    let calls = Arc::new(Mutex::new(0));
    let specs = [
        spec("notes.read", Effect::Read, false),
        spec("notes.scratch", Effect::Write, true),
        spec("notes.publish", Effect::Write, false),
    ];
    let mut catalog = Catalog::empty();
    let mut ops: Vec<Arc<dyn Op>> = Vec::new();
    for s in specs {
        catalog.add_custom(s.clone()).unwrap();
        ops.push(Arc::new(Counting {
            spec: s,
            calls: Arc::clone(&calls),
        }));
    }
    (Registry::new(catalog, ops), calls)
}

#[test]
fn contained_vouches_only_for_writes_never_for_delete_exec_net_admin_or_no_declared_effect() {
    use corral_policy::Safety;
    assert_eq!(spec("a.write", Effect::Write, true).safety(), Safety::Safe);
    for effect in [Effect::Delete, Effect::Exec, Effect::Net, Effect::Admin] {
        assert_eq!(
            spec("a.op", effect, true).safety(),
            Safety::Unsafe,
            "{effect:?}"
        );
    }
    let mut none = OpSpec::new(OpId::parse("a.none").unwrap(), &[], "declares nothing");
    none.contained = true;
    assert_eq!(none.safety(), Safety::Unsafe);
}

#[test]
fn a_safe_registry_keeps_reads_and_contained_writes_and_names_what_it_left_out() {
    let (full, _) = registry();
    let (safe, left_out) = SafeRegistry::of(&full);
    assert_eq!(left_out, ["notes.publish"]);
    assert!(safe.catalog().get("notes.publish").is_none());
    assert!(safe.get("notes.publish").is_none());
    for id in ["notes.read", "notes.scratch"] {
        assert!(
            safe.catalog().get(id).is_some() && safe.get(id).is_some(),
            "{id}"
        );
    }
    let replay = safe.to_registry();
    assert!(replay.get("notes.publish").is_none());
    assert!(replay.catalog().get("notes.publish").is_none());
}

#[test]
fn no_constructor_accepts_an_unsafe_op() {
    let (full, _) = registry();
    let publish = Arc::clone(full.get("notes.publish").unwrap());
    let err = SafeOp::new(publish).unwrap_err();
    assert_eq!(err.id, "notes.publish");
    assert!(err.to_string().contains("unsafe to replay"), "{err}");
    assert!(SafeOp::new(Arc::clone(full.get("notes.read").unwrap())).is_ok());
}

#[test]
fn the_load_check_names_the_first_unsafe_or_unknown_tool() {
    let (full, _) = registry();
    let catalog = full.catalog();
    assert!(check_tools(catalog, ["notes.read", "notes.scratch"]).is_ok());
    let e = check_tools(catalog, ["notes.read", "notes.publish", "notes.nope"]).unwrap_err();
    assert_eq!(
        (e.code, e.op.as_str()),
        (codes::REPLAY_UNSAFE_OP, "notes.publish")
    );
    assert!(e.message.contains("`notes.publish`"), "{}", e.message);
    let e = check_tools(catalog, ["notes.nope", "notes.publish"]).unwrap_err();
    assert_eq!(
        (e.code, e.op.as_str()),
        (codes::REPLAY_UNKNOWN_OP, "notes.nope")
    );
}

#[tokio::test]
async fn at_call_time_an_unsafe_op_is_not_enabled_even_when_the_policy_allows_everything() {
    let (full, calls) = registry();
    let (safe, _) = SafeRegistry::of(&full);
    // A policy that would allow every op of the full catalog: the load check is bypassed.
    let selectors = ["notes.read", "notes.scratch", "notes.publish"]
        .iter()
        .map(|id| Selector::parse(id, full.catalog()).unwrap())
        .collect();
    let policy = Policy::new().rule(Rule::allow("everything", selectors));
    let deployment = Deployment {
        engine: Engine::new(safe.catalog().clone(), policy),
        registry: safe.to_registry(),
        protected: Vec::new(),
        guard: GuardPolicy::new(),
    };
    let gateway = Gateway::new(
        deployment,
        Arc::new(MockBackend::default()),
        vec![Arc::new(Discard)],
        "default",
    );
    let call = |op: &str| Call {
        caller: Caller::new(Principal::anonymous()),
        op: op.to_owned(),
        args: json!({}),
        request_id: format!("r-{op}"),
    };
    match gateway.call(call("notes.publish")).await {
        Reply::Refused(r) => {
            assert_eq!((r.code, r.status()), (codes::OP_NOT_ENABLED, 404), "{r:?}")
        }
        other => panic!("an unsafe op answered in a replay: {other:?}"),
    }
    assert_eq!(*calls.lock().unwrap(), 0, "the unsafe handler never ran");
    match gateway.call(call("notes.read")).await {
        Reply::Json(v) => assert_eq!(v, json!({"ran": "notes.read"})),
        other => panic!("a safe op was refused: {other:?}"),
    }
    assert_eq!(*calls.lock().unwrap(), 1);
}
