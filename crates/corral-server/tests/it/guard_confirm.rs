//! Human confirmation through the API, counted on a ledger file: approve once and it runs
//! once; someone else's approve is a 404; an agent's approve is refused; a decision older than
//! the action is refused; expiry; changed arguments raise a new action; a retry after success
//! gets the stored outcome; dry-run runs nothing; budgets; disabled ops; `confirm: never`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::Server;
use crate::guard_fixture::{
    Fixture, Opts, action_id, approve, call, counts, decide, delegated, human, outcomes, pending,
    plain,
};

async fn list(s: &Server, token: &str) -> Vec<Value> {
    let r = crate::common::send(s.client().get(s.url("/confirmations")).bearer_auth(token)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["confirmations"].as_array().unwrap().clone()
}

#[tokio::test]
async fn the_requester_approves_once_and_the_op_runs_once() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["operator"]);
    let args = json!({"word": "hello"});

    let r = plain(&s, &ada, "ledger.append", args.clone()).await;
    let p = pending(&r);
    assert_eq!(p["tier"], "confirm");
    assert_eq!(p["op"], "ledger.append");
    assert_eq!(p["requester"], "ada");
    assert_eq!(p["args"], args);
    assert_eq!(p["args_canonical"], r#"{"word":"hello"}"#);
    assert!(
        p["reason"].as_str().unwrap().contains("append a word"),
        "{p}"
    );
    let id = p["action_id"].as_str().unwrap().to_owned();
    assert!(f.ledger_lines().is_empty(), "nothing ran before approval");

    // The same call again, before a decision: the same action, not a new one.
    assert_eq!(
        action_id(&plain(&s, &ada, "ledger.append", args.clone()).await),
        id
    );
    // What the person sees is byte for byte what will run.
    let mine = list(&s, &ada).await;
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0]["action_id"], id);
    assert_eq!(mine[0]["state"], "pending");
    assert_eq!(mine[0]["args_canonical"], r#"{"word":"hello"}"#);

    approve(&s, &ada, &id).await;
    let first = plain(&s, &ada, "ledger.append", args.clone()).await;
    assert_eq!(first.json().get("replayed"), None, "{}", first.text);
    assert!(first.headers.get("x-corral-replayed").is_none());
    let ran = first.ok();
    assert_eq!(f.ledger_lines(), ["hello"]);
    // A retry after success: the stored outcome, marked as such (body and header), and the op
    // does not run again.
    for _ in 0..3 {
        let again = plain(&s, &ada, "ledger.append", args.clone()).await;
        assert_eq!(again.json()["replayed"], true, "{}", again.text);
        assert_eq!(
            again
                .headers
                .get("x-corral-replayed")
                .and_then(|h| h.to_str().ok()),
            Some("true")
        );
        assert_eq!(again.ok(), ran);
    }
    assert_eq!(f.ledger_lines(), ["hello"]);
    // Approving again is refused: it was decided.
    decide(&s, &ada, &id, json!({"decision": "approve"}))
        .await
        .assert_error(409, "confirmation.already_decided");

    assert_eq!(
        outcomes(&s).await,
        counts(&[
            ("confirmation_raised", 2),
            ("confirmation_decided", 1),
            ("confirmation_consumed", 1),
            ("ok", 1),
            ("replayed", 3),
            ("denied", 1),
        ])
    );
    // Every event of the action names it.
    let events = s.store.audit_recent(None, 100).await.unwrap();
    assert!(
        events
            .iter()
            .filter(|e| e.op == "ledger.append")
            .all(|e| e.action_id.as_deref() == Some(id.as_str())),
        "{events:#?}"
    );
    let decided = events
        .iter()
        .find(|e| e.outcome.as_str() == "confirmation_decided")
        .unwrap();
    assert_eq!(decided.detail.as_deref(), Some("approve"));
    assert_eq!(decided.principal_id, "ada");
}

#[tokio::test]
async fn someone_elses_or_an_unknown_action_is_404_and_anyone_may_deny() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["operator"]);
    let bob = human("bob", &["operator"]);
    let args = json!({"word": "x"});
    let id = action_id(&plain(&s, &ada, "ledger.append", args.clone()).await);

    let theirs = decide(&s, &bob, &id, json!({"decision": "approve"})).await;
    theirs.assert_error(404, "confirmation.not_found");
    let unknown = decide(
        &s,
        &bob,
        "00000000-0000-4000-8000-000000000000",
        json!({"decision": "approve"}),
    )
    .await;
    unknown.assert_error(404, "confirmation.not_found");
    // Bob does not see it, nor can he tell it from an unknown one.
    assert!(list(&s, &bob).await.is_empty());
    assert_eq!(
        theirs.json()["error"].as_str().unwrap().replace(&id, "ID"),
        unknown.json()["error"]
            .as_str()
            .unwrap()
            .replace("00000000-0000-4000-8000-000000000000", "ID")
    );
    // But anyone in the tenant may deny it; then the retry is refused, and nothing ran.
    let r = decide(&s, &bob, &id, json!({"decision": "deny"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = plain(&s, &ada, "ledger.append", args).await;
    r.assert_error(403, "confirmation.denied");
    assert!(r.text.contains("`bob` denied"), "{}", r.text);
    assert!(f.ledger_lines().is_empty());
}

#[tokio::test]
async fn an_agent_raises_its_person_approves_out_of_band_and_the_agent_cannot_approve() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let agent = delegated("ada", "planner", &["operator"]);
    let args = json!({"word": "via-agent"});
    let p = pending(&plain(&s, &agent, "ledger.append", args.clone()).await);
    assert_eq!(p["requester"], "ada", "the person the agent acts for");
    let id = p["action_id"].as_str().unwrap().to_owned();
    let r = decide(&s, &agent, &id, json!({"decision": "approve"})).await;
    r.assert_error(403, "confirmation.approver_refused");
    assert!(f.ledger_lines().is_empty());
    // The person sees it, approves it, and the agent's retry runs it.
    let ada = human("ada", &["operator"]);
    assert_eq!(list(&s, &ada).await[0]["action_id"], id);
    approve(&s, &ada, &id).await;
    plain(&s, &agent, "ledger.append", args).await.ok();
    assert_eq!(f.ledger_lines(), ["via-agent"]);
}

#[tokio::test]
async fn a_decision_dated_before_the_action_is_refused() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["operator"]);
    let p = pending(&plain(&s, &ada, "ledger.append", json!({"word": "x"})).await);
    let id = p["action_id"].as_str().unwrap();
    let created = p["created_at_ms"].as_i64().unwrap();
    let r = decide(
        &s,
        &ada,
        id,
        json!({"decision": "approve", "decided_at_ms": created - 1}),
    )
    .await;
    r.assert_error(409, "confirmation.stale_decision");
    // Still pending: the retry is re-prompted, nothing ran.
    assert_eq!(
        action_id(&plain(&s, &ada, "ledger.append", json!({"word": "x"})).await),
        id
    );
    assert!(f.ledger_lines().is_empty());
    // A decision dated at (or after) the action counts.
    let r = decide(
        &s,
        &ada,
        id,
        json!({"decision": "approve", "decided_at_ms": created}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    plain(&s, &ada, "ledger.append", json!({"word": "x"}))
        .await
        .ok();
    assert_eq!(f.ledger_lines(), ["x"]);
}

#[tokio::test]
async fn malformed_decisions_are_400() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["operator"]);
    let id = action_id(&plain(&s, &ada, "ledger.append", json!({"word": "x"})).await);
    for body in [
        json!({}),
        json!({"decision": "yes"}),
        json!({"decision": "approve", "extra": 1}),
        json!({"decision": "approve", "decided_at_ms": "now"}),
        json!(["approve"]),
    ] {
        decide(&s, &ada, &id, body)
            .await
            .assert_error(400, "confirmation.invalid_decision");
    }
}

#[tokio::test]
async fn an_expired_action_is_gone_and_the_same_call_raises_a_new_one() {
    let f = Fixture::new();
    let s = f
        .start(&f.yaml("", "guardrails: {confirmation_ttl: 1s}\n"))
        .await;
    let ada = human("ada", &["operator"]);
    let args = json!({"word": "late"});
    let first = action_id(&plain(&s, &ada, "ledger.append", args.clone()).await);
    approve(&s, &ada, &first).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    // The approval expired with its action: the retry raises a new one and runs nothing.
    let second = action_id(&plain(&s, &ada, "ledger.append", args.clone()).await);
    assert_ne!(second, first);
    assert!(f.ledger_lines().is_empty());
    // A decision on the expired one: not found.
    decide(&s, &ada, &first, json!({"decision": "approve"}))
        .await
        .assert_error(404, "confirmation.not_found");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    decide(&s, &ada, &second, json!({"decision": "approve"}))
        .await
        .assert_error(404, "confirmation.not_found");
    assert!(list(&s, &ada).await.is_empty());
}

#[tokio::test]
async fn changed_arguments_raise_a_new_action_and_do_not_use_the_approval() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["admin"]);
    let a = action_id(&plain(&s, &ada, "ledger.append", json!({"word": "logs"})).await);
    approve(&s, &ada, &a).await;
    let b = action_id(&plain(&s, &ada, "ledger.append", json!({"word": "logs-v2"})).await);
    assert_ne!(a, b);
    assert!(f.ledger_lines().is_empty());
    // The approved one still runs with its own arguments, once.
    plain(&s, &ada, "ledger.append", json!({"word": "logs"}))
        .await
        .ok();
    assert_eq!(f.ledger_lines(), ["logs"]);
    // Another op with the same arguments is another action too.
    pending(&plain(&s, &ada, "ledger.drop", json!({"word": "logs"})).await);
    // And so is another person's identical call.
    let bob = human("bob", &["operator"]);
    let c = action_id(&plain(&s, &bob, "ledger.append", json!({"word": "logs"})).await);
    assert_ne!(c, a);
    assert_eq!(f.ledger_lines(), ["logs"]);
}

#[tokio::test]
async fn an_admin_lists_the_tenants_actions_and_others_only_their_own() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["operator"]);
    let bob = human("bob", &["operator"]);
    let root = human("root", &["admin"]);
    pending(&plain(&s, &ada, "ledger.append", json!({"word": "a"})).await);
    pending(&plain(&s, &bob, "ledger.append", json!({"word": "b"})).await);
    let who = |v: Vec<Value>| {
        let mut w: Vec<String> = v
            .iter()
            .map(|a| a["requester"].as_str().unwrap().to_owned())
            .collect();
        w.sort();
        w
    };
    assert_eq!(who(list(&s, &ada).await), ["ada"]);
    assert_eq!(who(list(&s, &bob).await), ["bob"]);
    assert_eq!(who(list(&s, &root).await), ["ada", "bob"]);
}

#[tokio::test]
async fn dry_run_answers_what_would_run_and_the_ledger_stays_empty() {
    let f = Fixture::new();
    f.ws.write("notes.txt", "hello");
    let s = f.start(&f.yaml("", "guardrails: {mode: dry_run}\n")).await;
    let ada = human("ada", &["admin"]);
    for (op, args) in [
        ("ledger.append", json!({"word": "nope"})),
        ("ledger.drop", json!({"word": "nope"})),
        (
            "files.write",
            json!({"path": f.ws.at("new.txt"), "content": "x"}),
        ),
        ("files.delete", json!({"path": f.ws.at("notes.txt")})),
    ] {
        let v = plain(&s, &ada, op, args.clone()).await.ok();
        assert_eq!(v["status"], "dry_run", "{v}");
        let msg = v["message"].as_str().unwrap();
        assert!(
            msg.starts_with(&format!("[DRY RUN] Would have called {op} with {{")),
            "{msg}"
        );
        assert_eq!(v["args"], args);
    }
    assert_eq!(
        plain(&s, &ada, "ledger.append", json!({"word": "nope"}))
            .await
            .ok()["args_canonical"],
        r#"{"word":"nope"}"#
    );
    // Reads still run.
    let read = plain(
        &s,
        &ada,
        "files.read",
        json!({"path": f.ws.at("notes.txt")}),
    )
    .await
    .ok();
    assert_eq!(read["content"], "hello");
    assert!(f.ledger_lines().is_empty());
    assert!(!f.ledger.exists());
    assert!(!f.ws.root.join("new.txt").exists());
    assert!(f.ws.root.join("notes.txt").exists());
    assert!(list(&s, &ada).await.is_empty(), "nobody is asked");
    assert_eq!(outcomes(&s).await.get("dry_run"), Some(&5));
}

#[tokio::test]
async fn a_run_in_dry_run_stays_in_dry_run() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["operator"]);
    let w = json!({"word": "w"});
    let dry = Opts {
        run: Some("preview"),
        dry_run: Some("true"),
        ..Opts::default()
    };
    let v = call(&s, &ada, "ledger.append", w.clone(), dry).await.ok();
    assert_eq!(v["status"], "dry_run");
    // Later calls of the run, even asking `false`, stay dry.
    for later in [None, Some("false")] {
        let o = Opts {
            run: Some("preview"),
            dry_run: later,
            ..Opts::default()
        };
        let v = call(&s, &ada, "ledger.append", w.clone(), o).await.ok();
        assert_eq!(v["status"], "dry_run");
    }
    // A call outside the run is not.
    pending(&plain(&s, &ada, "ledger.append", w).await);
    assert!(f.ledger_lines().is_empty());
}

#[tokio::test]
async fn run_budgets_refuse_with_429_naming_the_budget_and_are_neutral() {
    let f = Fixture::new();
    f.ws.write("notes.txt", "hello");
    let s = f
        .start(&f.yaml(
            "",
            "budgets: {max_calls: 3, max_calls_per_op: {ledger.peek: 1}}\n",
        ))
        .await;
    let ada = human("ada", &["operator"]);
    let read = json!({"path": f.ws.at("notes.txt")});
    let r1 = Opts {
        run: Some("r1"),
        ..Opts::default()
    };
    call(&s, &ada, "ledger.peek", json!({}), r1).await.ok();
    let r = call(&s, &ada, "ledger.peek", json!({}), r1).await;
    r.assert_error(429, "budget.exhausted");
    assert!(
        r.text.contains("budgets.max_calls_per_op.ledger.peek"),
        "{}",
        r.text
    );
    // A guarded call that waits for a person does not spend the budget.
    pending(&call(&s, &ada, "ledger.append", json!({"word": "w"}), r1).await);
    call(&s, &ada, "files.read", read.clone(), r1).await.ok();
    call(&s, &ada, "files.read", read.clone(), r1).await.ok();
    let r = call(&s, &ada, "files.read", read.clone(), r1).await;
    r.assert_error(429, "budget.exhausted");
    assert!(r.text.contains("`budgets.max_calls`"), "{}", r.text);
    // Another run, another principal's run of the same id, and calls outside runs are not
    // metered by r1.
    let r2 = Opts {
        run: Some("r2"),
        ..Opts::default()
    };
    call(&s, &ada, "files.read", read.clone(), r2).await.ok();
    call(
        &s,
        &human("bob", &["operator"]),
        "files.read",
        read.clone(),
        r1,
    )
    .await
    .ok();
    plain(&s, &ada, "files.read", read).await.ok();
    let counted = outcomes(&s).await;
    assert_eq!(counted.get("budget_refused"), Some(&2), "{counted:?}");
    assert_eq!(counted.get("op_error"), None, "refusals are not failures");
    // A malformed run id is refused before anything.
    let bad = Opts {
        run: Some("no spaces allowed"),
        ..Opts::default()
    };
    call(&s, &ada, "files.read", json!({}), bad)
        .await
        .assert_error(400, "run.invalid_header");
    let bad = Opts {
        autonomy: Some("L9"),
        ..Opts::default()
    };
    call(&s, &ada, "files.read", json!({}), bad)
        .await
        .assert_error(400, "run.invalid_header");
}

#[tokio::test]
async fn output_and_wall_time_budgets_refuse_once_reached() {
    let f = Fixture::new();
    f.ws.write("notes.txt", "hello");
    let s = f
        .start(&f.yaml("", "budgets: {max_output_bytes: 10B, max_wall_time: 1s}\n"))
        .await;
    let ada = human("ada", &["operator"]);
    let read = json!({"path": f.ws.at("notes.txt")});
    let bytes = Opts {
        run: Some("bytes"),
        ..Opts::default()
    };
    call(&s, &ada, "files.read", read.clone(), bytes).await.ok();
    let r = call(&s, &ada, "files.read", read.clone(), bytes).await;
    r.assert_error(429, "budget.exhausted");
    assert!(r.text.contains("budgets.max_output_bytes"), "{}", r.text);
    let slow = Opts {
        run: Some("slow"),
        ..Opts::default()
    };
    call(&s, &ada, "core.health", json!({}), slow).await.ok();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let r = call(&s, &ada, "core.health", json!({}), slow).await;
    r.assert_error(429, "budget.exhausted");
    assert!(r.text.contains("budgets.max_wall_time"), "{}", r.text);
}

#[tokio::test]
async fn a_disabled_op_is_gone_everywhere_and_refused_like_an_unknown_one() {
    let f = Fixture::new();
    let s = f
        .start(&f.yaml("", "disabled_ops: [ledger.drop, files.delete]\n"))
        .await;
    let ada = human("ada", &["operator"]);
    let gone = plain(&s, &ada, "ledger.drop", json!({"word": "w"})).await;
    gone.assert_error(404, "op.not_enabled");
    let unknown = plain(&s, &ada, "ledger.dorp", json!({"word": "w"})).await;
    unknown.assert_error(404, "op.not_enabled");
    assert_eq!(
        gone.json()["error"]
            .as_str()
            .unwrap()
            .replace("ledger.drop", "OP"),
        unknown.json()["error"]
            .as_str()
            .unwrap()
            .replace("ledger.dorp", "OP")
    );
    let ops = crate::common::send(s.client().get(s.url("/ops")).bearer_auth(&ada)).await;
    let ids: Vec<String> = ops.json()["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(ids.contains(&"ledger.append".to_owned()), "{ids:?}");
    assert!(
        !ids.iter()
            .any(|i| i == "ledger.drop" || i == "files.delete")
    );
    let openapi =
        crate::common::send(s.client().get(s.url("/openapi.json")).bearer_auth(&ada)).await;
    assert!(!openapi.text.contains("ledger.drop"));
    let counted = outcomes(&s).await;
    assert_eq!(counted.get("not_enabled"), Some(&2), "neutral: {counted:?}");
}

#[tokio::test]
async fn confirm_never_runs_confirm_tier_calls_unattended_but_not_destructive_ones() {
    let f = Fixture::new();
    let s = f
        .start(&f.yaml(
            "  - name: unattended
    allow: [ledger.append]
    principals: [\"id:ci\"]
    confirm: never
",
            "autonomy: {pins: [{principal: \"kind:service\", level: L4}]}\n",
        ))
        .await;
    // The `ledger` rule comes first and decides for everyone but `ci`, whose calls the
    // `unattended` rule also allows; the deciding rule is the first that allows.
    let ci = crate::guard_fixture::service("ci", &["admin"]);
    let ada = human("ada", &["operator"]);
    pending(&plain(&s, &ada, "ledger.append", json!({"word": "a"})).await);
    // For `ci`, the `ledger` rule decides first too: still confirmed. Only a rule that decides
    // may waive confirmation.
    pending(&plain(&s, &ci, "ledger.append", json!({"word": "c"})).await);
    assert!(f.ledger_lines().is_empty());

    // With the unattended rule first, `ci`'s confirm-tier calls run at once; its destructive
    // ones and everyone else's still wait.
    let f = Fixture::new();
    let yaml = f
        .yaml("", "autonomy: {pins: [{principal: \"kind:service\", level: L4}]}\n")
        .replace(
            "rules:\n",
            "rules:\n  - name: unattended\n    allow: [ledger.append]\n    principals: [\"id:ci\"]\n    confirm: never\n",
        );
    let s = f.start(&yaml).await;
    plain(&s, &ci, "ledger.append", json!({"word": "c"}))
        .await
        .ok();
    assert_eq!(f.ledger_lines(), ["c"]);
    pending(&plain(&s, &ci, "ledger.drop", json!({"word": "c"})).await);
    pending(&plain(&s, &ada, "ledger.append", json!({"word": "a"})).await);
    assert_eq!(f.ledger_lines(), ["c"]);
}

#[tokio::test]
async fn audit_rows_of_guarded_calls_hold_no_argument_value() {
    const SECRET: &str = "SECRETWORD42";
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["operator"]);
    let args = json!({"word": SECRET});
    let id = action_id(&plain(&s, &ada, "ledger.append", args.clone()).await);
    approve(&s, &ada, &id).await;
    plain(&s, &ada, "ledger.append", args.clone()).await.ok();
    plain(&s, &ada, "ledger.append", args).await.ok();
    let events = s.store.audit_recent(None, 100).await.unwrap();
    assert_eq!(events.len(), 5);
    for e in &events {
        let text = serde_json::to_string(e).unwrap();
        assert!(!text.contains(SECRET), "{text}");
        assert_eq!(e.args_shape, json!({"word": "string"}), "{text}");
    }
}

/// Calls `call` through the gateway (a confirm-tier call: 202) and approves its action as
/// `caller`, a person: the action's id.
async fn raise_and_approve(
    gw: &corral_guard::Gateway,
    caller: &corral_guard::Caller,
    call: corral_guard::Call,
) -> String {
    let corral_guard::Reply::Refused(r) = gw.call(call).await else {
        panic!("a guarded call waits for a person")
    };
    assert_eq!(r.status(), 202, "{}", r.message);
    let id = r.details.unwrap()["action_id"].as_str().unwrap().to_owned();
    gw.decide_confirmation(caller, &id, &json!({"decision": "approve"}), "approve")
        .await
        .unwrap();
    id
}

#[tokio::test]
async fn an_approved_call_whose_request_is_dropped_mid_run_is_never_run_again() {
    use corral_guard::{Call, CallOptions, Caller, Reply};
    let f = Fixture::new();
    let yaml = f.yaml("", "").replace(
        "custom:\n",
        &format!(
            "custom:\n  ledger.slow:\n    argv: [/bin/sh, -c, \"sleep 2; echo slow >> {}\"]\n    effects: [write]\n",
            f.ledger.display()
        ),
    );
    let (state, _store) = corral_server::serve::build_state(&f.load(&yaml), 1 << 20)
        .await
        .unwrap();
    let gw = state.gateway().clone();
    let caller = Caller::new(corral_policy::Principal::new("ada", &["operator"]));
    let call = |rid: &str| Call {
        caller: caller.clone(),
        op: "ledger.slow".to_owned(),
        args: json!({}),
        request_id: rid.to_owned(),
    };
    raise_and_approve(&gw, &caller, call("r1")).await;
    // The retry that takes the approval is dropped while the op runs.
    let running = {
        let gw = gw.clone();
        let c = call("r3");
        tokio::spawn(async move { gw.call_with(c, CallOptions::default()).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.abort();
    let _ = running.await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The next retry is told, and nothing runs again.
    match gw.call(call("r4")).await {
        Reply::Refused(r) => {
            assert_eq!(
                (r.status(), r.code),
                (409, "confirmation.not_replayable"),
                "{}",
                r.message
            );
            assert!(r.message.contains("interrupted"), "{}", r.message);
        }
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(
        f.ledger_lines().len() <= 1,
        "ran at most once: {:?}",
        f.ledger_lines()
    );
}

/// The process that took an approval died before storing the outcome (`kill -9`: no drop ran):
/// once its lease has run out, a retry is told at once that the call was cut off and may have
/// partly run, instead of waiting on an action nobody will finish; nothing runs again.
#[tokio::test]
async fn a_retry_after_the_runner_died_is_told_the_call_was_cut_off() {
    use corral_guard::confirm::{ConfirmationStore, RUNNING_LEASE_MS};
    use corral_guard::{Call, Caller, Reply};
    let f = Fixture::new();
    let (state, store) = corral_server::serve::build_state(&f.load(&f.yaml("", "")), 1 << 20)
        .await
        .unwrap();
    let gw = state.gateway().clone();
    let caller = Caller::new(corral_policy::Principal::new("ada", &["operator"]));
    let call = |rid: &str| Call {
        caller: caller.clone(),
        op: "ledger.append".to_owned(),
        args: json!({"word": "w"}),
        request_id: rid.to_owned(),
    };
    let id = raise_and_approve(&gw, &caller, call("r1")).await;
    // Another process took the approval, a lease ago and a second, and died holding it.
    let a = store.get(gw.tenant(), &id).await.unwrap().unwrap();
    let then = corral_guard::now_ms() - RUNNING_LEASE_MS - 1_000;
    assert!(store.consume(&a.key, then).await.unwrap().is_some());
    let started = std::time::Instant::now();
    match gw.call(call("r3")).await {
        Reply::Refused(r) => {
            assert_eq!(
                (r.status(), r.code),
                (409, "confirmation.not_replayable"),
                "{}",
                r.message
            );
            assert!(r.message.contains("cut off"), "{}", r.message);
            assert!(r.message.contains(&id), "{}", r.message);
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5), "told at once");
    // The same answer again, stored; and nothing ran.
    let Reply::Refused(again) = gw.call(call("r4")).await else {
        panic!("stored outcome")
    };
    assert_eq!(again.code, "confirmation.not_replayable");
    assert!(f.ledger_lines().is_empty(), "{:?}", f.ledger_lines());
}

/// An approved call whose program could not be started (`exec.spawn_failed`: nothing ran) does
/// not use the approval up: the refusal says so, and once the cause is fixed the same call runs,
/// once; a retry after that is the stored outcome.
#[tokio::test]
async fn an_approval_survives_a_failure_before_the_program_started() {
    let f = Fixture::new();
    let tool = f.ws.base().join("tool.sh");
    let yaml = f.yaml("", "").replace(
        "custom:\n",
        &format!(
            "custom:\n  tool.run:\n    argv: [{}]\n    effects: [write]\n    summary: run the tool\n",
            tool.display()
        ),
    );
    let yaml = yaml.replace("allow: [\"ledger.*\"]", "allow: [\"ledger.*\", tool.run]");
    let s = f.start(&yaml).await;
    let ada = human("ada", &["operator"]);
    let id = action_id(&plain(&s, &ada, "tool.run", json!({})).await);
    approve(&s, &ada, &id).await;

    let failed = plain(&s, &ada, "tool.run", json!({})).await;
    failed.assert_error(502, "exec.spawn_failed");
    assert!(
        failed.text.contains("still holds"),
        "the refusal says the approval holds: {}",
        failed.text
    );
    assert!(f.ledger_lines().is_empty());

    std::fs::write(
        &tool,
        format!("#!/bin/sh\necho ran >> {}\n", f.ledger.display()),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let ran = plain(&s, &ada, "tool.run", json!({})).await;
    assert_eq!(ran.status, 200, "{}", ran.text);
    assert_eq!(ran.json().get("replayed"), None);
    assert_eq!(f.ledger_lines(), ["ran"]);
    let again = plain(&s, &ada, "tool.run", json!({})).await;
    assert_eq!(again.json()["replayed"], true, "{}", again.text);
    assert_eq!(f.ledger_lines(), ["ran"], "it ran once");
}
