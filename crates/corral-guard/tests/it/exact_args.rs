//! A confirmation binds the exact arguments a person approved: an integer beyond 2^53, where a
//! JSON number stops being exact and two different integers share one canonical form (and so one
//! action key), is refused before any action is raised, found or consumed.

use std::sync::Arc;

use corral_exec::mock::{MockBackend, MockResponse};
use corral_guard::guardrails::GuardPolicy;
use corral_guard::{Call, CallOptions, Caller, Deployment, Gateway, Reply};
use corral_ops::exec::{CustomOp, CustomRun};
use corral_ops::{Op, Registry};
use corral_policy::{
    Catalog, Effect, Engine, OpId, OpSpec, ParamKind, Policy, Principal, Rule, Selector,
};
use serde_json::{Value, json};

/// `acct.pay {amount: int}`: a write (confirm tier), running `acct pay <amount>`.
fn gateway() -> Gateway {
    let spec = OpSpec::new(OpId::parse("acct.pay").unwrap(), &[Effect::Write], "pays").param(
        "amount",
        ParamKind::Int,
        true,
    );
    let mut catalog = Catalog::empty();
    catalog.add_custom(spec.clone()).unwrap();
    let policy = Policy::new().rule(Rule::allow(
        "pay",
        vec![Selector::parse("acct.pay", &catalog).unwrap()],
    ));
    let run = CustomRun {
        argv: vec!["acct".to_owned(), "pay".to_owned(), "{amount}".to_owned()],
        ..CustomRun::default()
    };
    let ops: Vec<Arc<dyn Op>> = vec![Arc::new(CustomOp::new(spec, run, Vec::new()))];
    let deployment = Deployment {
        engine: Engine::new(catalog.clone(), policy),
        registry: Registry::new(catalog, ops),
        protected: Vec::new(),
        guard: GuardPolicy::new(),
    };
    let backend = MockBackend::new([
        (
            "acct pay 9007199254740992".to_owned(),
            MockResponse::ok("paid 9007199254740992"),
        ),
        (
            "acct pay 9007199254740993".to_owned(),
            MockResponse::ok("paid 9007199254740993"),
        ),
    ]);
    Gateway::new(deployment, Arc::new(backend), Vec::new(), "default")
}

async fn pay(gw: &Gateway, who: &Principal, amount: Value) -> Reply {
    let call = Call {
        caller: Caller::new(who.clone()),
        op: "acct.pay".to_owned(),
        args: json!({ "amount": amount }),
        request_id: uuid::Uuid::new_v4().to_string(),
    };
    gw.call_with(call, CallOptions::default()).await
}

#[tokio::test]
async fn an_approval_of_one_integer_is_never_consumed_by_a_call_with_another_beyond_two_to_the_53()
{
    let gw = gateway();
    let dave = Principal::new("dave", &["operator"]);
    let approved = json!(9_007_199_254_740_992_u64);
    let r = pay(&gw, &dave, approved.clone()).await;
    let Reply::Refused(r) = r else {
        panic!("expected confirmation.required, got {r:?}")
    };
    assert_eq!(r.code, "confirmation.required");
    let details = r.details.unwrap();
    assert_eq!(details["args"], json!({"amount": approved}));
    let id = details["action_id"].as_str().unwrap().to_owned();
    gw.decide_confirmation(
        &Caller::new(dave.clone()),
        &id,
        &json!({"decision": "approve"}),
        "d1",
    )
    .await
    .unwrap();
    // One more than the person approved: refused as it stands, the approval left alone.
    for other in [
        json!(9_007_199_254_740_993_u64),
        json!(-9_007_199_254_740_993_i64),
        json!(u64::MAX),
    ] {
        match pay(&gw, &dave, other.clone()).await {
            Reply::Refused(r) => {
                assert_eq!(r.code, "args.invalid", "{other}: {}", r.message);
                assert!(
                    r.message.contains("2^53") && r.message.contains("amount"),
                    "{}",
                    r.message
                );
            }
            other_reply => panic!("{other}: ran: {other_reply:?}"),
        }
    }
    // The approved call runs, with exactly the approved amount.
    match pay(&gw, &dave, approved).await {
        Reply::Json(v) => assert_eq!(v["stdout"], "paid 9007199254740992", "{v}"),
        other => panic!("{other:?}"),
    }
}
