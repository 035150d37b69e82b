//! The guard chain's order and its matrices, through the API: a call that fails several steps is
//! refused by the earliest (autonomy, RBAC, policy, budgets, confirmation); role x tier;
//! autonomy level x tier; principal kind x decision.

use serde_json::json;

use crate::common::{AGENT_ENV, AGENT_TOKEN, Server, Workspace, token_env};
use crate::guard_fixture::{
    Fixture, Opts, action_id, call, counts, decide, delegated, human, outcomes, pending, plain,
    service,
};

#[tokio::test]
async fn a_call_that_fails_several_steps_is_refused_by_the_earliest() {
    let f = Fixture::new();
    f.ws.write("notes.txt", "hello");
    let s = f
        .start(&f.yaml("", "roles: {}\nbudgets: {max_calls: 1}\n"))
        .await;
    let viewer = human("ada", &["viewer"]);
    let operator = human("ada", &["operator"]);
    let inside = json!({"path": f.ws.at("new.txt"), "content": "x"});
    let outside = json!({"path": "/etc/corral-test", "content": "x"});
    let spent = Opts {
        run: Some("spent"),
        ..Opts::default()
    };
    // A run lowered to L2 keeps its level, so the autonomy step gets a run of its own.
    let spent_low = Opts {
        run: Some("spent-low"),
        ..Opts::default()
    };
    // Spend each run's one call.
    for run in [spent, spent_low] {
        call(
            &s,
            &viewer,
            "files.read",
            json!({"path": f.ws.at("notes.txt")}),
            run,
        )
        .await
        .ok();
    }

    // Autonomy (L2 forbids a write), RBAC (a viewer), policy (outside the root), budget
    // (spent) and confirmation all fail: autonomy answers.
    let low = Opts {
        autonomy: Some("L2"),
        ..spent_low
    };
    let r = call(&s, &viewer, "files.write", outside.clone(), low).await;
    r.assert_error(403, "autonomy.blocked");
    assert!(r.text.contains("needs autonomy L3"), "{}", r.text);
    // Without the autonomy step: RBAC, naming the role needed.
    let r = call(&s, &viewer, "files.write", outside.clone(), spent).await;
    r.assert_error(403, "rbac.denied");
    assert!(r.text.contains("needs the role `operator`"), "{}", r.text);
    // An operator: the policy.
    let r = call(&s, &operator, "files.write", outside.clone(), spent).await;
    r.assert_error(403, "policy.path_outside_scope");
    // Inside the root: the budget.
    let r = call(&s, &operator, "files.write", inside.clone(), spent).await;
    r.assert_error(429, "budget.exhausted");
    assert!(r.text.contains("budgets.max_calls"), "{}", r.text);
    // A fresh run: the confirmation.
    let fresh = Opts {
        run: Some("fresh"),
        ..Opts::default()
    };
    pending(&call(&s, &operator, "files.write", inside, fresh).await);
    assert!(!f.ws.root.join("new.txt").exists());

    assert_eq!(
        outcomes(&s).await,
        counts(&[
            ("ok", 2),
            ("autonomy_blocked", 1),
            ("rbac_denied", 1),
            ("denied", 1),
            ("budget_refused", 1),
            ("confirmation_raised", 1),
        ])
    );
    // The refusals before the budget step did not spend the fresh run's budget: its one call
    // raised a confirmation, which gives the call back.
    let r = call(
        &s,
        &operator,
        "files.read",
        json!({"path": f.ws.at("notes.txt")}),
        fresh,
    )
    .await;
    r.ok();
}

/// The ops of each tier the matrices use, with arguments that pass the policy.
fn tier_ops(f: &Fixture) -> [(&'static str, &'static str, serde_json::Value); 3] {
    [
        ("read", "files.read", json!({"path": f.ws.at("notes.txt")})),
        ("confirm", "ledger.append", json!({"word": "w"})),
        ("destructive", "ledger.drop", json!({"word": "w"})),
    ]
}

#[tokio::test]
async fn role_by_tier() {
    // With a `roles:` block, and (issue 11 item 7) without one: JWT auth alone turns RBAC on.
    for roles_block in ["roles: {}\n", ""] {
        role_by_tier_with(roles_block).await;
    }
}

async fn role_by_tier_with(roles_block: &str) {
    let f = Fixture::new();
    f.ws.write("notes.txt", "hello");
    let s = f.start(&f.yaml("", roles_block)).await;
    // (role, [read, confirm, destructive] admitted by RBAC)
    let matrix: [(&[&str], [bool; 3]); 5] = [
        (&[], [false, false, false]),
        (&["grader"], [false, false, false]),
        (&["viewer"], [true, false, false]),
        (&["operator"], [true, true, false]),
        (&["admin", "grader"], [true, true, true]),
    ];
    for (roles, admitted) in matrix {
        let token = human("ada", roles);
        for ((tier, op, args), ok) in tier_ops(&f).into_iter().zip(admitted) {
            let r = plain(&s, &token, op, args).await;
            if ok {
                // Past RBAC: a read runs, a guarded op waits for a person.
                let expected = if tier == "read" { 200 } else { 202 };
                assert_eq!(r.status, expected, "{roles:?} x {tier}: {}", r.text);
            } else {
                r.assert_error(403, "rbac.denied");
                let need = match tier {
                    "read" => "viewer",
                    "confirm" => "operator",
                    _ => "admin",
                };
                assert!(
                    r.text.contains(&format!("needs the role `{need}`")),
                    "{roles:?} x {tier}: {}",
                    r.text
                );
            }
        }
    }
    assert!(f.ledger_lines().is_empty());
}

#[tokio::test]
async fn role_overrides_raise_and_lower_what_an_op_needs() {
    let f = Fixture::new();
    f.ws.write("notes.txt", "hello");
    let s = f
        .start(&f.yaml(
            "",
            "roles:\n  overrides: {files.read: operator, ledger.drop: operator}\n",
        ))
        .await;
    let viewer = human("ada", &["viewer"]);
    let operator = human("ada", &["operator"]);
    let read = json!({"path": f.ws.at("notes.txt")});
    let r = plain(&s, &viewer, "files.read", read.clone()).await;
    r.assert_error(403, "rbac.denied");
    assert!(r.text.contains("`roles.overrides`"), "{}", r.text);
    plain(&s, &operator, "files.read", read).await.ok();
    // Lowered: an operator may ask for the destructive op (which still waits for a person).
    pending(&plain(&s, &operator, "ledger.drop", json!({"word": "w"})).await);
}

#[tokio::test]
async fn a_viewer_token_cannot_delete_without_a_roles_block() {
    // issue 11 item 7: without a `roles:` block, a token with `roles: [viewer]` called
    // `files.delete`, approved its own action, and deleted the file.
    let ws = Workspace::new();
    ws.write("victim.txt", "keep me");
    let yaml = format!(
        "version: 1\npreset: workspace_jail\nroot: {}\nstate_dir: {}\nauth:\n  tokens:\n    - {{id: agent, roles: [viewer], token_env: {AGENT_ENV}}}\n",
        ws.root.display(),
        ws.state.display()
    );
    let s = Server::start(&ws.load(&yaml, &token_env()))
        .await
        .with_token(AGENT_TOKEN);
    let r = s
        .call("files.delete", json!({"path": ws.at("victim.txt")}))
        .await;
    r.assert_error(403, "rbac.denied");
    assert!(
        r.text.contains("needs the role `admin`") && r.text.contains("you have the role `viewer`"),
        "{}",
        r.text
    );
    // Nothing was raised for the viewer to approve, and the file is there.
    assert_eq!(outcomes(&s).await, counts(&[("rbac_denied", 1)]));
    assert_eq!(
        std::fs::read_to_string(ws.root.join("victim.txt")).unwrap(),
        "keep me"
    );
    // What a viewer may do, it does.
    s.call("files.read", json!({"path": ws.at("victim.txt")}))
        .await
        .ok();
}

#[tokio::test]
async fn with_only_rule_roles_rbac_stays_off_and_roles_only_matter_to_rules() {
    // issue 11 item 7, the other side: a config where no principal can carry a tier role
    // (no `roles:`, no JWT, no token with one) keeps working as before.
    let ws = Workspace::new();
    ws.write("notes.txt", "hello");
    let yaml = format!(
        "version: 1\nroot: {root}\nstate_dir: {}\nrules:\n  - allow: [\"files.*\"]\n    principals: [role:grader]\n    paths: {{roots: [{root}], readonly: false}}\nauth:\n  tokens:\n    - {{id: grader, roles: [grader], token_env: {AGENT_ENV}}}\n",
        ws.state.display(),
        root = ws.root.display(),
    );
    let s = Server::start(&ws.load(&yaml, &token_env()))
        .await
        .with_token(AGENT_TOKEN);
    s.call("files.read", json!({"path": ws.at("notes.txt")}))
        .await
        .ok();
    pending(
        &s.call("files.delete", json!({"path": ws.at("notes.txt")}))
            .await,
    );
}

#[tokio::test]
async fn with_jwt_a_caller_without_a_tier_role_is_refused_every_op() {
    // issue 11 item 7: a JWT's roles claim can carry a tier role, so JWT auth turns RBAC on;
    // a caller whose claim carries none is refused, with the fix.
    let f = Fixture::new();
    f.ws.write("notes.txt", "hello");
    let s = f.start(&f.yaml("", "")).await;
    for roles in [&[][..], &["grader"][..]] {
        let token = human("ada", roles);
        for (_, op, args) in tier_ops(&f) {
            let r = plain(&s, &token, op, args).await;
            r.assert_error(403, "rbac.denied");
            assert!(
                r.text.contains("you have no tier role"),
                "{roles:?} {op}: {}",
                r.text
            );
        }
    }
    assert!(f.ledger_lines().is_empty());
}

#[tokio::test]
async fn autonomy_level_by_tier() {
    let f = Fixture::new();
    f.ws.write("notes.txt", "hello");
    // (level, [core.health, read, confirm, destructive] admitted)
    let matrix = [
        ("L0", [true, false, false, false]),
        ("L1", [true, true, false, false]),
        ("L2", [true, true, false, false]),
        ("L3", [true, true, true, false]),
        ("L4", [true, true, true, true]),
    ];
    let token = human("ada", &["admin"]);
    let mut ops = vec![("core", "core.health", json!({}))];
    ops.extend(tier_ops(&f));
    for (level, admitted) in matrix {
        // The process-wide level, and the same level asked by a call of an unrestricted
        // process: the same answers.
        let s = f.start(&f.yaml("", &format!("autonomy: {level}\n"))).await;
        let open = f.start(&f.yaml("", "")).await;
        for ((tier, op, args), ok) in ops.iter().zip(admitted) {
            let lowered = Opts {
                autonomy: Some(level),
                ..Opts::default()
            };
            for (how, r) in [
                ("process", plain(&s, &token, op, args.clone()).await),
                ("call", call(&open, &token, op, args.clone(), lowered).await),
            ] {
                if ok {
                    let expected = if matches!(*tier, "read" | "core") {
                        200
                    } else {
                        202
                    };
                    assert_eq!(r.status, expected, "{level} ({how}) x {tier}: {}", r.text);
                } else {
                    r.assert_error(403, "autonomy.blocked");
                    assert!(r.text.contains(level), "{}", r.text);
                }
            }
        }
    }
    assert!(f.ledger_lines().is_empty());
}

#[tokio::test]
async fn a_service_is_pinned_to_l2_unless_a_pin_says_otherwise_and_the_process_caps_pins() {
    let f = Fixture::new();
    f.ws.write("notes.txt", "hello");
    let read = json!({"path": f.ws.at("notes.txt")});
    let ci = service("ci", &["admin"]);
    // No level configured: a service is pinned to L2, a person is not restricted.
    let s = f.start(&f.yaml("", "")).await;
    plain(&s, &ci, "files.read", read.clone()).await.ok();
    let r = plain(&s, &ci, "ledger.append", json!({"word": "w"})).await;
    r.assert_error(403, "autonomy.blocked");
    assert!(r.text.contains("service principals"), "{}", r.text);
    pending(
        &plain(
            &s,
            &human("ada", &["admin"]),
            "ledger.append",
            json!({"word": "w"}),
        )
        .await,
    );
    // A pin raises the service to L4; another pins one person down to L0.
    let s = f
        .start(&f.yaml(
            "",
            "autonomy:\n  pins:\n    - {principal: \"kind:service\", level: L4}\n    - {principal: \"id:bob\", level: L0}\n",
        ))
        .await;
    pending(&plain(&s, &ci, "ledger.drop", json!({"word": "w"})).await);
    let r = plain(&s, &human("bob", &["admin"]), "files.read", read.clone()).await;
    r.assert_error(403, "autonomy.blocked");
    assert!(r.text.contains("pin for `id:bob`"), "{}", r.text);
    // The process-wide level caps every pin.
    let s = f
        .start(&f.yaml(
            "",
            "autonomy:\n  level: L3\n  pins: [{principal: \"kind:service\", level: L4}]\n",
        ))
        .await;
    pending(&plain(&s, &ci, "ledger.append", json!({"word": "w"})).await);
    plain(&s, &ci, "ledger.drop", json!({"word": "w"}))
        .await
        .assert_error(403, "autonomy.blocked");
}

#[tokio::test]
async fn a_run_lowers_its_own_level_and_never_raises_it() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["admin"]);
    let w = json!({"word": "w"});
    let run = |autonomy| Opts {
        run: Some("r1"),
        autonomy,
        ..Opts::default()
    };
    pending(&call(&s, &ada, "ledger.append", w.clone(), run(None)).await);
    call(&s, &ada, "ledger.append", w.clone(), run(Some("L2")))
        .await
        .assert_error(403, "autonomy.blocked");
    // Asking for more later changes nothing, nor does asking nothing.
    for again in [Some("L4"), None] {
        let r = call(&s, &ada, "ledger.append", w.clone(), run(again)).await;
        r.assert_error(403, "autonomy.blocked");
        assert!(r.text.contains("this run lowered itself"), "{}", r.text);
    }
    // Another run is not affected.
    let other = Opts {
        run: Some("r2"),
        ..Opts::default()
    };
    pending(&call(&s, &ada, "ledger.append", w, other).await);
}

#[tokio::test]
async fn principal_kind_by_decision() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["admin"]);
    // (decider, approve?, expected status, code)
    let cases: [(&str, String, bool, u16, &str); 8] = [
        ("ada, human", human("ada", &["admin"]), true, 200, ""),
        (
            "ada's agent",
            delegated("ada", "agent-1", &["admin"]),
            true,
            403,
            "confirmation.approver_refused",
        ),
        // A service is not the person whose id it shares (issue 11 item 8): someone else, so
        // their action is unknown to it.
        (
            "a service named ada",
            service("ada", &["admin"]),
            true,
            404,
            "confirmation.not_found",
        ),
        (
            "bob, human",
            human("bob", &["admin"]),
            true,
            404,
            "confirmation.not_found",
        ),
        ("ada, human", human("ada", &["admin"]), false, 200, ""),
        (
            "ada's agent",
            delegated("ada", "agent-1", &["admin"]),
            false,
            200,
            "",
        ),
        ("a service", service("ci", &["admin"]), false, 200, ""),
        ("bob, human", human("bob", &["admin"]), false, 200, ""),
    ];
    for (i, (who, token, approve, status, code)) in cases.into_iter().enumerate() {
        let word = format!("w{i}");
        let id = action_id(&plain(&s, &ada, "ledger.append", json!({"word": word})).await);
        let decision = if approve { "approve" } else { "deny" };
        let r = decide(&s, &token, &id, json!({"decision": decision})).await;
        if status == 200 {
            assert_eq!(r.status, 200, "{who} {decision}: {}", r.text);
            let state = if approve { "approved" } else { "denied" };
            assert_eq!(r.json()["action"]["state"], state, "{}", r.text);
        } else {
            r.assert_error(status, code);
        }
        // What the retry gets: the op runs only after a person's approval.
        let retry = plain(&s, &ada, "ledger.append", json!({"word": word})).await;
        match (approve, status) {
            (true, 200) => {
                retry.ok();
            }
            (false, 200) => retry.assert_error(403, "confirmation.denied"),
            _ => {
                pending(&retry);
            }
        }
    }
    assert_eq!(f.ledger_lines(), ["w0"]);
}

/// The ids `GET /ops` lists for a token.
async fn listed(s: &crate::common::Server, token: &str) -> Vec<String> {
    let r = crate::common::send(s.client().get(s.url("/ops")).bearer_auth(token)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut ids: Vec<String> = r.json()["ops"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|o| o["id"].as_str().map(str::to_owned))
                .filter(|id| id.starts_with("ledger."))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

#[tokio::test]
async fn get_ops_lists_only_what_the_callers_role_and_autonomy_level_let_them_call() {
    let f = Fixture::new();
    let s = f
        .start(&f.yaml(
            "",
            "roles: {}\nautonomy: {pins: [{principal: \"kind:service\", level: L1}]}\n",
        ))
        .await;
    // RBAC by tier: read for viewers, confirm for operators, destructive for admins.
    assert_eq!(
        listed(&s, &human("ada", &["viewer"])).await,
        ["ledger.peek"]
    );
    assert_eq!(
        listed(&s, &human("ada", &["operator"])).await,
        ["ledger.append", "ledger.peek"]
    );
    assert_eq!(
        listed(&s, &human("ada", &["admin"])).await,
        ["ledger.append", "ledger.drop", "ledger.peek"]
    );
    // An admin service pinned to L1 (reads only) is offered the reads only.
    assert_eq!(
        listed(&s, &service("batch", &["admin"])).await,
        ["ledger.peek"]
    );
    // What is listed is what the chain lets through: the viewer's unlisted op is refused.
    let r = plain(
        &s,
        &human("ada", &["viewer"]),
        "ledger.append",
        json!({"word": "w"}),
    )
    .await;
    r.assert_error(403, "rbac.denied");
}
