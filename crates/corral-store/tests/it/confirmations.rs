//! The confirmation tables through the `ConfirmationStore` port, on SQLite and PostgreSQL: the
//! life of an action, one live action per key, exactly one consumer among many concurrent ones,
//! expiry, purging what expired, and survival across reopening.

use std::sync::Arc;

use corral_guard::confirm::{Action, ActionState, ConfirmationStore, StoredOutcome};
use corral_store::Store;

use crate::postgres::Schema;

fn action(id: &str, key: &str, created_ms: i64, ttl_ms: i64) -> Action {
    Action {
        action_id: id.to_owned(),
        key: key.to_owned(),
        tenant: "acme".to_owned(),
        requester: "ada".to_owned(),
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
    assert!(store.raise(&a, 1_000).await.unwrap());
    // A live action holds its key: a second raise changes nothing.
    let b = action("a-2", "k-1", 1_500, 10_000);
    assert!(!store.raise(&b, 1_500).await.unwrap());
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
    assert!(store.raise(&c, 11_000).await.unwrap());
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
    assert!(store.raise(&d, 20_000).await.unwrap());
    assert!(store.decide("a-4", false, "bob", 20_100).await.unwrap());
    assert_eq!(
        store.get("acme", "a-4").await.unwrap().unwrap().state,
        ActionState::Denied
    );
    assert_eq!(store.consume("k-2", 20_200).await.unwrap(), None);
    let e = action("a-5", "k-3", 30_000, 1_000);
    assert!(store.raise(&e, 30_000).await.unwrap());
    assert!(store.decide("a-5", true, "ada", 30_100).await.unwrap());
    assert_eq!(store.consume("k-3", 31_000).await.unwrap(), None, "expired");

    // Listing: live only, newest first, by requester or the whole tenant.
    let mut f = action("a-6", "k-4", 30_500, 10_000);
    f.requester = "bob".to_owned();
    assert!(store.raise(&f, 30_500).await.unwrap());
    let mine: Vec<String> = store
        .list("acme", Some("ada"), 30_600)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.action_id)
        .collect();
    assert_eq!(mine, ["a-5", "a-3"]);
    let all: Vec<String> = store
        .list("acme", None, 30_600)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.action_id)
        .collect();
    assert_eq!(all, ["a-6", "a-5", "a-3"]);
    assert!(store.list("other", None, 30_600).await.unwrap().is_empty());
}

/// `tasks` concurrent consumers of one approval: exactly one wins.
async fn one_consumer_wins(store: Arc<dyn ConfirmationStore>, tasks: usize) {
    let a = action("race-1", "race", 1_000, 60_000);
    assert!(store.raise(&a, 1_000).await.unwrap());
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
            store.raise(&a, 1_000).await.unwrap()
        }));
    }
    let mut wins = 0;
    for h in handles {
        wins += usize::from(h.await.unwrap());
    }
    assert_eq!(wins, 1);
    let listed = store.list("acme", Some("ada"), 1_001).await.unwrap();
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
    assert!(store.raise(&a, 1_000).await.unwrap());
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
    assert!(store.raise(&old, 100_000).await.unwrap());
    assert!(store.raise(&live, 100_000).await.unwrap());
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
    assert!(store.raise(&again, 200_000).await.unwrap());
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
    let store = corral_guard::confirm::MemoryConfirmations::new();
    lifecycle(&store).await;
    purging(&store).await;
    let store: Arc<dyn ConfirmationStore> =
        Arc::new(corral_guard::confirm::MemoryConfirmations::new());
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
