//! Confirmations an attacker cannot abuse (issue 11): a flood of pending actions is capped per
//! requester, their arguments are bounded, and the listing is paged (item 6); an action
//! belongs to its requester's full identity, so a JWT with the same `sub` as a static token
//! can neither approve nor see its actions (item 8); a decision dated in the future is refused.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::common::{Reply, Server, send};
use crate::guard_fixture::{
    Fixture, JWT_ENV, JWT_SECRET, action_id, approve, decide, human, pending, plain,
};

const SVC_ENV: &str = "CORRAL_IT_ABUSE_AGENT";
const SVC_TOKEN: &str = "abuse-agent-0123456789abcdef0123456789";
const ADA_ENV: &str = "CORRAL_IT_ABUSE_ADA";
const ADA_TOKEN: &str = "abuse-ada-0123456789abcdef0123456789ab";

async fn list(s: &Server, token: &str, query: &str) -> Reply {
    send(
        s.client()
            .get(s.url(&format!("/confirmations{query}")))
            .bearer_auth(token),
    )
    .await
}

fn ids(r: &Reply) -> Vec<String> {
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["confirmations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action_id"].as_str().unwrap().to_owned())
        .collect()
}

fn write(path: &str, content: &str) -> Value {
    json!({"path": path, "content": content})
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

// issue 11 item 6: a flood of confirmations (60 distinct calls raised 60 pending actions): the
// default cap, 20 per requester, holds, with its code, the cap and how to clear them; nothing
// of the refused call is stored.
#[tokio::test]
async fn a_flood_of_distinct_guarded_calls_stops_at_twenty_pending_actions() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["operator"]);
    for i in 0..20 {
        pending(&plain(&s, &ada, "files.write", write(&format!("f{i}.txt"), "x")).await);
    }
    let r = plain(&s, &ada, "files.write", write("f20.txt", "x")).await;
    r.assert_error(429, "confirmation.too_many_pending");
    let msg = r.json()["error"].as_str().unwrap().to_owned();
    for part in [
        "already has 20 pending actions",
        "`guardrails.max_pending` (20)",
        "GET /confirmations",
        "approve or deny",
        "expires in",
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    assert!(r.headers.get("retry-after").is_some(), "{:?}", r.headers);
    // Nothing was raised for it: ada still has 20.
    let all = ids(&list(&s, &ada, "?limit=200").await);
    assert_eq!(all.len(), 20);
    // Another person is not held by ada's flood.
    pending(
        &plain(
            &s,
            &human("bob", &["operator"]),
            "files.write",
            write("b.txt", "x"),
        )
        .await,
    );
}

// issue 11 item 6: the cap is a setting; a decision frees a place; the same call again (its
// action is live) is still answered with that action, not refused.
#[tokio::test]
async fn the_pending_cap_is_guardrails_max_pending_and_a_decision_frees_a_place() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "guardrails: {max_pending: 2}\n")).await;
    let ada = human("ada", &["operator"]);
    let first = action_id(&plain(&s, &ada, "files.write", write("a.txt", "1")).await);
    pending(&plain(&s, &ada, "files.write", write("b.txt", "2")).await);
    let r = plain(&s, &ada, "files.write", write("c.txt", "3")).await;
    r.assert_error(429, "confirmation.too_many_pending");
    assert!(
        r.text.contains("`guardrails.max_pending` (2)"),
        "{}",
        r.text
    );
    // The same call as a live action is not a new one.
    assert_eq!(
        action_id(&plain(&s, &ada, "files.write", write("a.txt", "1")).await),
        first
    );
    let denied = decide(&s, &ada, &first, json!({"decision": "deny"})).await;
    assert_eq!(denied.status, 200, "{}", denied.text);
    pending(&plain(&s, &ada, "files.write", write("c.txt", "3")).await);
}

// issue 11 item 6: ~0.9 MB of arguments were stored per pending action; an action holds at
// most 64 KiB of canonical arguments, and a larger call is refused before anything is stored.
#[tokio::test]
async fn a_guarded_call_with_over_64_kib_of_arguments_is_refused_and_nothing_is_stored() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["operator"]);
    let big = "x".repeat(64 * 1024);
    let r = plain(&s, &ada, "files.write", write("big.txt", &big)).await;
    r.assert_error(413, "confirmation.args_too_large");
    let msg = r.json()["error"].as_str().unwrap().to_owned();
    assert!(msg.contains("65536 bytes (64 KiB)"), "{msg}");
    assert!(msg.contains("smaller arguments"), "{msg}");
    assert!(ids(&list(&s, &ada, "").await).is_empty());
    assert!(!f.ws.root.join("big.txt").exists());
    // Just under the cap is an ordinary pending action.
    let fits = "x".repeat(64 * 1024 - 64);
    pending(&plain(&s, &ada, "files.write", write("fits.txt", &fits)).await);
}

// issue 11 item 6: one `GET /confirmations` answered 110 MB; it is a page (`limit`, 50 by
// default, at most 200) with a cursor to the next (`next`, `null` on the last page).
#[tokio::test]
async fn the_listing_is_paged_with_a_cursor_and_bounded_limits() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["operator"]);
    let mut raised = Vec::new();
    for i in 0..7 {
        raised.push(action_id(
            &plain(&s, &ada, "files.write", write(&format!("p{i}.txt"), "x")).await,
        ));
    }
    let mut seen = Vec::new();
    let mut query = "?limit=3".to_owned();
    let mut pages = 0;
    loop {
        let r = list(&s, &ada, &query).await;
        let page = ids(&r);
        assert!(page.len() <= 3, "{page:?}");
        seen.extend(page);
        pages += 1;
        match r.json()["next"].as_str() {
            Some(next) => query = format!("?limit=3&after={next}"),
            None => break,
        }
        assert!(pages < 10);
    }
    assert_eq!(pages, 3, "3 + 3 + 1");
    raised.reverse();
    assert_eq!(seen, raised, "newest first, nothing skipped or repeated");
    let r = list(&s, &ada, "").await;
    assert_eq!(ids(&r).len(), 7);
    assert_eq!(r.json()["next"], Value::Null);

    for bad in [
        "?limit=0",
        "?limit=201",
        "?limit=x",
        "?after=nope",
        "?after=1.a%20b",
    ] {
        list(&s, &ada, bad).await.assert_error(400, "args.invalid");
    }
    list(&s, &ada, "?page=2")
        .await
        .assert_error(400, "args.unknown");
}

/// A fixture with the JWT issuer and two static tokens: `agent` (a service pinned to L4) and
/// `ada` (kind human, the default).
async fn tokens_and_jwt(f: &Fixture) -> Server {
    let extra = format!(
        "  tokens:
    - {{id: agent, kind: service, roles: [operator], token_env: {SVC_ENV}}}
    - {{id: ada, roles: [operator], token_env: {ADA_ENV}}}
autonomy: {{pins: [{{principal: \"id:agent\", level: L4}}]}}
"
    );
    let loaded = f.ws.load(
        &f.yaml("", &extra),
        &[
            (JWT_ENV, JWT_SECRET),
            (SVC_ENV, SVC_TOKEN),
            (ADA_ENV, ADA_TOKEN),
        ],
    );
    Server::start(&loaded).await
}

// issue 11 item 8: an approval matched by id string alone. The static service token `agent`
// raises; a human JWT with `sub: agent` tries to approve: refused exactly like an unknown
// action, it does not see the action, and its own same call is its own action.
#[tokio::test]
async fn a_jwt_with_the_sub_of_a_static_token_cannot_approve_or_see_its_action() {
    let f = Fixture::new();
    let s = tokens_and_jwt(&f).await;
    let args = json!({"word": "svc"});
    let p = pending(&plain(&s, SVC_TOKEN, "ledger.append", args.clone()).await);
    assert_eq!(p["requester"], "agent");
    let theirs = p["action_id"].as_str().unwrap().to_owned();

    let impostor = human("agent", &["operator"]);
    let r = decide(&s, &impostor, &theirs, json!({"decision": "approve"})).await;
    r.assert_error(404, "confirmation.not_found");
    let unknown = "00000000-0000-4000-8000-000000000000";
    let u = decide(&s, &impostor, unknown, json!({"decision": "approve"})).await;
    assert_eq!(
        r.json()["error"].as_str().unwrap().replace(&theirs, "ID"),
        u.json()["error"].as_str().unwrap().replace(unknown, "ID"),
    );
    assert!(ids(&list(&s, &impostor, "").await).is_empty());
    // The same call by the JWT is another requester's: another action, not the token's.
    let mine = action_id(&plain(&s, &impostor, "ledger.append", args.clone()).await);
    assert_ne!(mine, theirs);
    assert!(f.ledger_lines().is_empty());
    // The token's action is still pending, and its retry still waits.
    assert_eq!(
        action_id(&plain(&s, SVC_TOKEN, "ledger.append", args.clone()).await),
        theirs
    );
    // The same human identity approving its own action still works, and runs it once.
    approve(&s, &impostor, &mine).await;
    plain(&s, &impostor, "ledger.append", args.clone())
        .await
        .ok();
    assert_eq!(f.ledger_lines(), ["svc"]);
    assert_eq!(
        action_id(&plain(&s, SVC_TOKEN, "ledger.append", args).await),
        theirs,
        "the token's action was not approved by the JWT's approval"
    );
}

// issue 11 item 8: the origin alone tells two people apart: a static token `ada` of kind human
// and a JWT `sub: ada` are two identities; each approves only its own.
#[tokio::test]
async fn a_static_human_token_and_a_jwt_with_its_id_are_different_people() {
    let f = Fixture::new();
    let s = tokens_and_jwt(&f).await;
    let args = json!({"word": "tok"});
    let p = pending(&plain(&s, ADA_TOKEN, "ledger.append", args.clone()).await);
    let id = p["action_id"].as_str().unwrap().to_owned();
    let jwt_ada = human("ada", &["operator"]);
    decide(&s, &jwt_ada, &id, json!({"decision": "approve"}))
        .await
        .assert_error(404, "confirmation.not_found");
    let listed = list(&s, ADA_TOKEN, "").await;
    assert_eq!(ids(&listed), std::slice::from_ref(&id));
    assert_eq!(
        listed.json()["confirmations"][0]["requester_identity"],
        "token:person:ada"
    );
    approve(&s, ADA_TOKEN, &id).await;
    plain(&s, ADA_TOKEN, "ledger.append", args).await.ok();
    assert_eq!(f.ledger_lines(), ["tok"]);
}

// issue 11, wrong errors: a decision dated in year 2286 was accepted. A decision dated beyond
// the clock skew (5 minutes) is refused and changes nothing; within it, it counts.
#[tokio::test]
async fn a_decision_dated_in_the_future_beyond_clock_skew_is_refused() {
    let f = Fixture::new();
    let s = f.start(&f.yaml("", "")).await;
    let ada = human("ada", &["operator"]);
    let id = action_id(&plain(&s, &ada, "ledger.append", json!({"word": "x"})).await);
    for at in [9_999_999_999_999_i64, now_ms() + 10 * 60 * 1000] {
        let r = decide(
            &s,
            &ada,
            &id,
            json!({"decision": "approve", "decided_at_ms": at}),
        )
        .await;
        r.assert_error(400, "confirmation.future_decision");
        let msg = r.json()["error"].as_str().unwrap().to_owned();
        assert!(
            msg.contains("more than 300 s after the server's clock"),
            "{msg}"
        );
        assert!(msg.contains("without `decided_at_ms`"), "{msg}");
    }
    assert_eq!(
        action_id(&plain(&s, &ada, "ledger.append", json!({"word": "x"})).await),
        id,
        "still pending"
    );
    let r = decide(
        &s,
        &ada,
        &id,
        json!({"decision": "approve", "decided_at_ms": now_ms() + 60_000}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
}
