//! The confirmation tables through the `ConfirmationStore` port, on SQLite and PostgreSQL: the
//! life of an action, one live action per key, exactly one consumer among many concurrent ones,
//! expiry, purging what expired, and survival across reopening.

use std::sync::Arc;

use corral_ports::confirm::{
    Action, ActionState, ConfirmationStore, Cursor, RUNNING_LEASE_MS, Raised, StoredOutcome,
};
use corral_store::Store;

use crate::postgres::Schema;

/// Raises without a pending cap; whether it became its key's live action.
async fn raise(store: &dyn ConfirmationStore, a: &Action, now_ms: i64) -> bool {
    match store.raise(a, now_ms, u64::MAX).await.unwrap() {
        Raised::Raised => true,
        Raised::KeyTaken => false,
        other => panic!("unexpected {other:?}"),
    }
}

fn action(id: &str, key: &str, created_ms: i64, ttl_ms: i64) -> Action {
    Action {
        action_id: id.to_owned(),
        key: key.to_owned(),
        tenant: "acme".to_owned(),
        requester: "ada".to_owned(),
        requester_identity: "jwt::person:ada".to_owned(),
        requester_kind: "human".to_owned(),
        op: "files.write".to_owned(),
        op_version: "v1".to_owned(),
        tier: "confirm".to_owned(),
        reason: "changes something".to_owned(),
        args: r#"{"content":"x","path":"a.txt"}"#.to_owned(),
        state: ActionState::Pending,
        created_ms,
        expires_ms: created_ms + ttl_ms,
        decided_ms: None,
        decided_by: None,
        outcome: None,
    }
}

/// The whole life of an action, and the rules around it.
async fn lifecycle(store: &dyn ConfirmationStore) {
    let a = action("a-1", "k-1", 1_000, 10_000);
    assert!(raise(store, &a, 1_000).await);
    // A live action holds its key: a second raise changes nothing.
    let b = action("a-2", "k-1", 1_500, 10_000);
    assert!(!raise(store, &b, 1_500).await);
    assert_eq!(store.current("k-1", 2_000).await.unwrap(), Some(a.clone()));
    assert_eq!(store.get("acme", "a-2").await.unwrap(), None);
    // Another tenant does not see it.
    assert_eq!(store.get("other", "a-1").await.unwrap(), None);
    assert_eq!(store.get("acme", "a-1").await.unwrap(), Some(a.clone()));

    // Nothing to consume before an approval.
    assert_eq!(store.consume("k-1", 2_000).await.unwrap(), None);
    assert!(store.decide("a-1", true, "ada", 2_500).await.unwrap());
    // Decided once only.
    assert!(!store.decide("a-1", false, "bob", 2_600).await.unwrap());
    let approved = store.get("acme", "a-1").await.unwrap().unwrap();
    assert_eq!(approved.state, ActionState::Approved);
    assert_eq!(approved.decided_ms, Some(2_500));
    assert_eq!(approved.decided_by.as_deref(), Some("ada"));

    // Consumed, then given back (its op did not start): approved again, consumable once more.
    let first = store.consume("k-1", 2_800).await.unwrap().unwrap();
    assert_eq!(first.state, ActionState::Running);
    // Not once it expired: its outcome is stored as usual then.
    assert!(!store.release("a-1", 12_000).await.unwrap());
    assert!(store.release("a-1", 2_900).await.unwrap());
    assert!(
        !store.release("a-1", 2_901).await.unwrap(),
        "only a running one"
    );
    assert_eq!(
        store.get("acme", "a-1").await.unwrap().unwrap().state,
        ActionState::Approved
    );
    let running = store.consume("k-1", 3_000).await.unwrap().unwrap();
    assert_eq!(running.action_id, "a-1");
    assert_eq!(running.state, ActionState::Running);
    assert_eq!(store.consume("k-1", 3_001).await.unwrap(), None, "once");
    let outcome = StoredOutcome::Json {
        value: serde_json::json!({"bytes": 1}),
    };
    store.finish("a-1", &outcome, 3_100).await.unwrap();
    let done = store.current("k-1", 4_000).await.unwrap().unwrap();
    assert_eq!(done.state, ActionState::Done);
    assert_eq!(done.outcome, Some(outcome));

    // Expired: gone from `current` and `list`, and the key can be raised again.
    assert_eq!(store.current("k-1", 11_000).await.unwrap(), None);
    let c = action("a-3", "k-1", 11_000, 30_000);
    assert!(raise(store, &c, 11_000).await);
    assert_eq!(
        store
            .current("k-1", 11_001)
            .await
            .unwrap()
            .map(|a| a.action_id),
        Some("a-3".to_owned())
    );

    // Deny; an approval that expired is never consumed.
    let d = action("a-4", "k-2", 20_000, 1_000);
    assert!(raise(store, &d, 20_000).await);
    assert!(store.decide("a-4", false, "bob", 20_100).await.unwrap());
    assert_eq!(
        store.get("acme", "a-4").await.unwrap().unwrap().state,
        ActionState::Denied
    );
    assert_eq!(store.consume("k-2", 20_200).await.unwrap(), None);
    let e = action("a-5", "k-3", 30_000, 1_000);
    assert!(raise(store, &e, 30_000).await);
    assert!(store.decide("a-5", true, "ada", 30_100).await.unwrap());
    assert_eq!(store.consume("k-3", 31_000).await.unwrap(), None, "expired");

    // Listing: live only, newest first, by requester or the whole tenant.
    let mut f = action("a-6", "k-4", 30_500, 10_000);
    f.requester = "bob".to_owned();
    f.requester_identity = "jwt::person:bob".to_owned();
    assert!(raise(store, &f, 30_500).await);
    let mine: Vec<String> = store
        .list("acme", Some("jwt::person:ada"), 30_600, None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.action_id)
        .collect();
    assert_eq!(mine, ["a-5", "a-3"]);
    let all: Vec<String> = store
        .list("acme", None, 30_600, None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.action_id)
        .collect();
    assert_eq!(all, ["a-6", "a-5", "a-3"]);
    assert!(
        store
            .list("other", None, 30_600, None, 100)
            .await
            .unwrap()
            .is_empty()
    );
}

/// `tasks` concurrent consumers of one approval: exactly one wins.
async fn one_consumer_wins(store: Arc<dyn ConfirmationStore>, tasks: usize) {
    let a = action("race-1", "race", 1_000, 60_000);
    assert!(raise(&*store, &a, 1_000).await);
    assert!(store.decide("race-1", true, "ada", 1_001).await.unwrap());
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let store = Arc::clone(&store);
        handles.push(tokio::spawn(async move {
            store.consume("race", 2_000).await.unwrap().is_some()
        }));
    }
    let mut wins = 0;
    for h in handles {
        wins += usize::from(h.await.unwrap());
    }
    assert_eq!(wins, 1);
    assert_eq!(
        store.get("acme", "race-1").await.unwrap().unwrap().state,
        ActionState::Running
    );
}

/// `tasks` concurrent raises of one key: one action.
async fn one_raise_wins(store: Arc<dyn ConfirmationStore>, tasks: usize) {
    let mut handles = Vec::new();
    for i in 0..tasks {
        let store = Arc::clone(&store);
        handles.push(tokio::spawn(async move {
            let a = action(&format!("raise-{i}"), "raise", 1_000, 60_000);
            raise(&*store, &a, 1_000).await
        }));
    }
    let mut wins = 0;
    for h in handles {
        wins += usize::from(h.await.unwrap());
    }
    assert_eq!(wins, 1);
    let listed = store
        .list("acme", Some("jwt::person:ada"), 1_001, None, 100)
        .await
        .unwrap();
    assert_eq!(
        listed.iter().filter(|a| a.key == "raise").count(),
        1,
        "{listed:?}"
    );
}

/// Raised and approved, the store reopened: the approval is still there, and runs once.
async fn survives_reopen(url: &str) {
    let store = Store::connect(url).await.unwrap();
    let a = action("keep-1", "keep", 1_000, 60_000);
    assert!(raise(&store, &a, 1_000).await);
    assert!(store.decide("keep-1", true, "ada", 1_001).await.unwrap());
    store.close().await;
    drop(store);
    let store = Store::connect(url).await.unwrap();
    assert_eq!(
        store.current("keep", 2_000).await.unwrap().unwrap().state,
        ActionState::Approved
    );
    assert!(store.consume("keep", 2_000).await.unwrap().is_some());
    assert!(store.consume("keep", 2_001).await.unwrap().is_none());
    store.close().await;
}

/// `purge` removes expired approvals and keys at once and expired actions after `keep_ms`;
/// nothing live. Run after `lifecycle` on the same store (whose actions expired long before).
async fn purging(store: &dyn ConfirmationStore) {
    let old = action("p-old", "pk-old", 100_000, 1_000);
    let live = action("p-live", "pk-live", 100_000, 1_000_000);
    assert!(raise(store, &old, 100_000).await);
    assert!(raise(store, &live, 100_000).await);
    assert!(store.decide("p-old", true, "ada", 100_500).await.unwrap());
    // A day's grace: the expired action is still there (a late decision hears "expired").
    assert_eq!(store.purge(200_000, 86_400_000).await.unwrap(), 0);
    assert!(store.get("acme", "p-old").await.unwrap().is_some());
    // No grace: it goes with its approval; the live action stays, still its key's.
    assert!(store.purge(200_000, 0).await.unwrap() >= 1);
    assert_eq!(store.get("acme", "p-old").await.unwrap(), None);
    assert_eq!(store.consume("pk-old", 100_900).await.unwrap(), None);
    assert_eq!(
        store.current("pk-live", 200_000).await.unwrap(),
        Some(live.clone())
    );
    assert!(store.get("acme", "p-live").await.unwrap().is_some());
    // The purged key is free for a new action.
    let again = action("p-again", "pk-old", 200_000, 1_000);
    assert!(raise(store, &again, 200_000).await);
}

/// issue 11 item 6 (a flood of confirmations): one requester gets at most `max` pending
/// actions; the next raise changes nothing and says how many and when the first expires; a
/// decided or expired action frees its place; another identity with the same id has its own.
async fn pending_cap(store: &dyn ConfirmationStore) {
    let max = 5;
    for i in 0..max {
        let a = action(&format!("f-{i}"), &format!("fk-{i}"), 1_000 + i, 60_000);
        assert_eq!(
            store.raise(&a, 1_000 + i, max as u64).await.unwrap(),
            Raised::Raised
        );
    }
    let over = action("f-over", "fk-over", 2_000, 60_000);
    assert_eq!(
        store.raise(&over, 2_000, max as u64).await.unwrap(),
        Raised::TooManyPending {
            pending: 5,
            first_expiry_ms: Some(61_000)
        }
    );
    assert_eq!(
        store.get("acme", "f-over").await.unwrap(),
        None,
        "not stored"
    );
    assert_eq!(
        store.current("fk-over", 2_000).await.unwrap(),
        None,
        "key not taken"
    );
    // A key that already has its live action is still found (the cap is about new ones).
    let same = action("f-same", "fk-0", 2_000, 60_000);
    assert_eq!(
        store.raise(&same, 2_000, max as u64).await.unwrap(),
        Raised::KeyTaken
    );
    // The same id from another origin is another requester, with its own cap.
    let mut token = action("f-token", "fk-token", 2_000, 60_000);
    token.requester_identity = "token:person:ada".to_owned();
    assert_eq!(
        store.raise(&token, 2_000, max as u64).await.unwrap(),
        Raised::Raised
    );
    // Another tenant too.
    let mut other = action("f-other", "fk-other", 2_000, 60_000);
    other.tenant = "other".to_owned();
    assert_eq!(
        store.raise(&other, 2_000, max as u64).await.unwrap(),
        Raised::Raised
    );
    // A decision frees a place (denied: not pending any more).
    assert!(store.decide("f-0", false, "bob", 2_100).await.unwrap());
    assert_eq!(
        store.raise(&over, 2_200, max as u64).await.unwrap(),
        Raised::Raised
    );
    let again = action("f-again", "fk-again", 2_300, 60_000);
    assert!(matches!(
        store.raise(&again, 2_300, max as u64).await.unwrap(),
        Raised::TooManyPending { pending: 5, .. }
    ));
    // Once they expire, none of them count.
    assert_eq!(
        store.raise(&again, 70_000, max as u64).await.unwrap(),
        Raised::Raised
    );
}

/// issue 11 item 6: `tasks` concurrent raises of distinct calls by one requester, capped at
/// `max`: exactly `max` are raised, on every backend (two pools for Postgres: two replicas).
async fn cap_holds_under_concurrency(
    a: Arc<dyn ConfirmationStore>,
    b: Arc<dyn ConfirmationStore>,
    tasks: usize,
    max: u64,
) {
    let mut handles = Vec::new();
    for i in 0..tasks {
        let store = if i % 2 == 0 {
            Arc::clone(&a)
        } else {
            Arc::clone(&b)
        };
        handles.push(tokio::spawn(async move {
            let x = action(&format!("c-{i}"), &format!("ck-{i}"), 1_000, 60_000);
            store.raise(&x, 1_000, max).await.unwrap() == Raised::Raised
        }));
    }
    let mut raised = 0;
    for h in handles {
        raised += u64::from(h.await.unwrap());
    }
    assert_eq!(raised, max);
    let listed = a
        .list("acme", Some("jwt::person:ada"), 1_001, None, 200)
        .await
        .unwrap();
    assert_eq!(listed.len() as u64, max, "{listed:?}");
}

/// issue 11 item 6: a listing is paged: `limit` actions at most, newest first, and the cursor
/// after the last one gives the next page, with nothing skipped or repeated (ties on
/// `created_ms` broken by id); filtered by the full identity.
async fn paging(store: &dyn ConfirmationStore) {
    let mut want = Vec::new();
    for i in 0..7 {
        // Two actions per millisecond, so the cursor must break ties.
        let a = action(
            &format!("pg-{i}"),
            &format!("pgk-{i}"),
            5_000 + i / 2,
            60_000,
        );
        assert!(raise(store, &a, 5_000).await);
        want.push((a.created_ms, a.action_id.clone()));
    }
    let mut theirs = action("pg-theirs", "pgk-theirs", 5_001, 60_000);
    theirs.requester_identity = "token:person:ada".to_owned();
    assert!(raise(store, &theirs, 5_000).await);
    want.sort_by(|x, y| y.cmp(x));
    let want: Vec<String> = want.into_iter().map(|(_, id)| id).collect();

    let mut got = Vec::new();
    let mut after: Option<Cursor> = None;
    let mut pages = 0;
    loop {
        let page = store
            .list("acme", Some("jwt::person:ada"), 5_100, after.as_ref(), 3)
            .await
            .unwrap();
        assert!(page.len() <= 3, "{page:?}");
        pages += 1;
        let Some(last) = page.last() else { break };
        after = Some(Cursor::parse(&Cursor::after(last).to_string()).unwrap());
        got.extend(page.into_iter().map(|a| a.action_id));
        assert!(pages < 10, "the pages never end: {got:?}");
    }
    assert_eq!(got, want);
    assert_eq!(pages, 4, "3 + 3 + 1, then an empty page");
    // The whole tenant (an admin's listing) has the other identity's too.
    let all = store.list("acme", None, 5_100, None, 200).await.unwrap();
    assert_eq!(all.len(), 8);
    // An action with no identity (stored before identities) is nobody's.
    assert!(
        store
            .list("acme", Some(""), 5_100, None, 200)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn sqlite_caps_pending_actions_per_requester_and_pages_the_listing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&Store::default_sqlite_url(dir.path()))
        .await
        .unwrap();
    pending_cap(&store).await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&Store::default_sqlite_url(dir.path()))
        .await
        .unwrap();
    paging(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_concurrent_raises_never_pass_the_pending_cap() {
    let dir = tempfile::tempdir().unwrap();
    let url = Store::default_sqlite_url(dir.path());
    let a: Arc<dyn ConfirmationStore> = Arc::new(Store::connect(&url).await.unwrap());
    let b: Arc<dyn ConfirmationStore> = Arc::new(Store::connect(&url).await.unwrap());
    cap_holds_under_concurrency(a, b, 32, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_caps_pending_actions_and_pages_the_listing() {
    pending_cap(&corral_ports::confirm::MemoryConfirmations::new()).await;
    paging(&corral_ports::confirm::MemoryConfirmations::new()).await;
    let m: Arc<dyn ConfirmationStore> = Arc::new(corral_ports::confirm::MemoryConfirmations::new());
    cap_holds_under_concurrency(Arc::clone(&m), m, 32, 5).await;
}

#[tokio::test]
async fn postgres_caps_pending_actions_per_requester_and_pages_the_listing() {
    let Some(schema) = Schema::create("cap").await else {
        return;
    };
    let store = Store::connect(&schema.url).await.unwrap();
    pending_cap(&store).await;
    store.close().await;
    schema.drop().await;
    let Some(schema) = Schema::create("page").await else {
        return;
    };
    let store = Store::connect(&schema.url).await.unwrap();
    paging(&store).await;
    store.close().await;
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_concurrent_raises_on_two_replicas_never_pass_the_pending_cap() {
    let Some(schema) = Schema::create("caprace").await else {
        return;
    };
    let a: Arc<dyn ConfirmationStore> = Arc::new(Store::connect(&schema.url).await.unwrap());
    let b: Arc<dyn ConfirmationStore> = Arc::new(Store::connect(&schema.url).await.unwrap());
    cap_holds_under_concurrency(a, b, 32, 5).await;
    schema.drop().await;
}

/// A running action's lease (issue 20, `kill -9` mid-run): `consume` starts it, `renew`
/// extends it, and `abandon` stores an outcome only once it ran out, never over a live runner
/// nor a finished action.
async fn leases(store: &dyn ConfirmationStore) {
    let cut = StoredOutcome::Refused {
        status: 409,
        code: "confirmation.not_replayable".to_owned(),
        message: "cut off".to_owned(),
    };
    let a = action("l-1", "lk-1", 100_000, 600_000);
    assert!(raise(store, &a, 100_000).await);
    assert!(store.decide("l-1", true, "ada", 100_100).await.unwrap());
    assert!(store.consume("lk-1", 100_200).await.unwrap().is_some());
    let lease_end = 100_200 + RUNNING_LEASE_MS;
    // The runner is alive until its lease ends: nothing is abandoned before.
    assert!(!store.abandon("l-1", &cut, lease_end - 1).await.unwrap());
    // Renewed: alive again for a lease from then.
    assert!(store.renew("l-1", lease_end + 10_000).await.unwrap());
    assert!(!store.abandon("l-1", &cut, lease_end + 1).await.unwrap());
    // Past the renewed end: abandoned, done with that outcome, once.
    assert!(
        store
            .abandon("l-1", &cut, lease_end + 10_001)
            .await
            .unwrap()
    );
    let done = store.get("acme", "l-1").await.unwrap().unwrap();
    assert_eq!(done.state, ActionState::Done);
    assert_eq!(done.outcome, Some(cut.clone()));
    assert!(
        !store
            .abandon("l-1", &cut, lease_end + 20_000)
            .await
            .unwrap()
    );
    assert!(
        !store.renew("l-1", lease_end + 30_000).await.unwrap(),
        "not running"
    );
    // A finished action is never abandoned, however late.
    let b = action("l-2", "lk-2", 100_000, 600_000);
    assert!(raise(store, &b, 100_000).await);
    assert!(store.decide("l-2", true, "ada", 100_100).await.unwrap());
    assert!(store.consume("lk-2", 100_200).await.unwrap().is_some());
    let ok = StoredOutcome::Json {
        value: serde_json::json!({"bytes": 1}),
    };
    store.finish("l-2", &ok, 100_300).await.unwrap();
    assert!(!store.abandon("l-2", &cut, 500_000).await.unwrap());
    assert_eq!(
        store.get("acme", "l-2").await.unwrap().unwrap().outcome,
        Some(ok)
    );
}

#[tokio::test]
async fn sqlite_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&Store::default_sqlite_url(dir.path()))
        .await
        .unwrap();
    assert_eq!(ConfirmationStore::backend(&store), "sqlite");
    lifecycle(&store).await;
    purging(&store).await;
    leases(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_exactly_one_of_64_consumers_and_raisers_wins() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ConfirmationStore> = Arc::new(
        Store::connect(&Store::default_sqlite_url(dir.path()))
            .await
            .unwrap(),
    );
    one_consumer_wins(Arc::clone(&store), 64).await;
    one_raise_wins(store, 64).await;
}

#[tokio::test]
async fn sqlite_approvals_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    survives_reopen(&Store::default_sqlite_url(dir.path())).await;
}

#[tokio::test]
async fn memory_lifecycle_and_races() {
    let store = corral_ports::confirm::MemoryConfirmations::new();
    lifecycle(&store).await;
    purging(&store).await;
    leases(&store).await;
    let store: Arc<dyn ConfirmationStore> =
        Arc::new(corral_ports::confirm::MemoryConfirmations::new());
    one_consumer_wins(Arc::clone(&store), 64).await;
    one_raise_wins(store, 64).await;
}

#[tokio::test]
async fn postgres_lifecycle() {
    let Some(schema) = Schema::create("conf").await else {
        return;
    };
    let store = Store::connect(&schema.url).await.unwrap();
    lifecycle(&store).await;
    purging(&store).await;
    leases(&store).await;
    store.close().await;
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_exactly_one_of_64_consumers_and_raisers_wins() {
    let Some(schema) = Schema::create("race").await else {
        return;
    };
    // Two stores (two pools), as two replicas would have.
    let a: Arc<dyn ConfirmationStore> = Arc::new(Store::connect(&schema.url).await.unwrap());
    one_consumer_wins(Arc::clone(&a), 64).await;
    let b: Arc<dyn ConfirmationStore> = Arc::new(Store::connect(&schema.url).await.unwrap());
    one_raise_wins(b, 64).await;
    schema.drop().await;
}

#[tokio::test]
async fn postgres_approvals_survive_reopening() {
    let Some(schema) = Schema::create("keep").await else {
        return;
    };
    survives_reopen(&schema.url).await;
    schema.drop().await;
}
