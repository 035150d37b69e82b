//! Run records in the store, through the `RunStore` port, on SQLite and PostgreSQL: a run's
//! level and dry-run only tighten; each budget refuses once used up with the same words as the
//! in-memory ledger; a refund gives a call back; and of many concurrent charges to one run
//! (on PostgreSQL from two pools, as two replicas), exactly the budget's number pass. A run's
//! model-call lease has one holder at a time, lapses when it expires, and of many concurrent
//! takers over two pools exactly one gets it.

use std::sync::Arc;
use std::time::Duration;

use corral_policy::AutonomyLevel;
use corral_ports::runs::{Budgets, RunKey, RunLedger, RunPurpose, RunStore};
use corral_store::Store;

use crate::postgres::Schema;

fn key(run: &str) -> RunKey<'_> {
    RunKey {
        tenant: "acme",
        principal: "ada",
        purpose: RunPurpose::Live,
        run_id: run,
    }
}

fn budgets(max_calls: u64, per_op: &[(&str, u64)], max_output_bytes: u64) -> Budgets {
    Budgets {
        max_calls,
        max_calls_per_op: per_op.iter().map(|(o, n)| ((*o).to_owned(), *n)).collect(),
        max_wall_time: Duration::ZERO,
        max_output_bytes,
        max_tokens: 0,
    }
}

/// Level, dry-run, each budget, refunds; the same answers from `store` as from the ledger.
async fn budgets_and_settings(store: &dyn RunStore) {
    let memory = RunLedger::default();
    let k = key("r1");
    for s in [store, &memory as &dyn RunStore] {
        let v = s.enter(&k, 1_000, None, false).await.unwrap();
        assert_eq!((v.level, v.dry_run), (None, false), "{}", s.backend());
        let v = s
            .enter(&k, 1_001, Some(AutonomyLevel::L2), false)
            .await
            .unwrap();
        assert_eq!(v.level, Some(AutonomyLevel::L2));
        // Never raised again, and dry-run sticks.
        let v = s
            .enter(&k, 1_002, Some(AutonomyLevel::L4), true)
            .await
            .unwrap();
        assert_eq!((v.level, v.dry_run), (Some(AutonomyLevel::L2), true));
        let v = s.enter(&k, 1_003, None, false).await.unwrap();
        assert_eq!((v.level, v.dry_run), (Some(AutonomyLevel::L2), true));
    }
    let b = budgets(3, &[("files.write", 1)], 0);
    let mut answers = Vec::new();
    for s in [store, &memory as &dyn RunStore] {
        let mut got = Vec::new();
        for op in [
            "files.write",
            "files.write",
            "files.read",
            "files.read",
            "files.read",
        ] {
            got.push(s.charge(&k, op, &b, 2_000).await.unwrap());
        }
        answers.push(got);
    }
    assert_eq!(
        answers[0], answers[1],
        "the store answers as the ledger does"
    );
    let got = &answers[0];
    assert!(got[0].is_ok());
    assert_eq!(
        got[1].as_ref().unwrap_err().budget,
        "budgets.max_calls_per_op.files.write"
    );
    assert!(got[2].is_ok() && got[3].is_ok());
    let e = got[4].as_ref().unwrap_err();
    assert_eq!(e.budget, "budgets.max_calls");
    assert_eq!(e.detail, "the run has made its 3 calls");
    // A refunded call (it did not run) can be made again.
    store.refund(&k, "files.read").await.unwrap();
    assert!(
        store
            .charge(&k, "files.read", &b, 2_000)
            .await
            .unwrap()
            .is_ok()
    );
    assert!(
        store
            .charge(&k, "files.read", &b, 2_000)
            .await
            .unwrap()
            .is_err()
    );
    // Output bytes.
    let k2 = key("r2");
    store.enter(&k2, 1_000, None, false).await.unwrap();
    let ob = budgets(0, &[], 100);
    assert!(
        store
            .charge(&k2, "files.read", &ob, 1_000)
            .await
            .unwrap()
            .is_ok()
    );
    store.add_output(&k2, 150).await.unwrap();
    let e = store
        .charge(&k2, "files.read", &ob, 1_000)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.budget, "budgets.max_output_bytes");
    // Model tokens: only model calls are refused once the run used its budget.
    let k3 = key("r3");
    store.enter(&k3, 1_000, None, false).await.unwrap();
    let tb = Budgets {
        max_tokens: 50,
        ..Budgets::default()
    };
    assert!(
        store
            .charge(&k3, "llm.chat", &tb, 1_000)
            .await
            .unwrap()
            .is_ok()
    );
    store.charge_tokens(&k3, 30).await.unwrap();
    assert!(
        store
            .charge(&k3, "llm.chat", &tb, 1_000)
            .await
            .unwrap()
            .is_ok()
    );
    store.charge_tokens(&k3, 20).await.unwrap();
    let e = store
        .charge(&k3, "llm.chat", &tb, 1_000)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.budget, "budgets.tokens");
    assert!(
        store
            .charge(&k3, "files.read", &tb, 1_000)
            .await
            .unwrap()
            .is_ok()
    );
    // A run that was never opened cannot be charged (fail closed, not a free call).
    assert!(
        store
            .charge(&key("never"), "files.read", &b, 2_000)
            .await
            .is_err()
    );
    // Another principal's run of the same id is another run.
    let theirs = RunKey {
        principal: "bob",
        ..key("r1")
    };
    store.enter(&theirs, 3_000, None, false).await.unwrap();
    assert!(
        store
            .charge(&theirs, "files.write", &b, 3_000)
            .await
            .unwrap()
            .is_ok()
    );
}

/// `tasks` concurrent charges to one run with a budget of 10, spread over `stores`.
async fn exactly_the_budget_passes(stores: &[Arc<dyn RunStore>], tasks: usize) {
    let b = Arc::new(budgets(10, &[], 0));
    stores[0]
        .enter(&key("race"), 1_000, None, false)
        .await
        .unwrap();
    let mut handles = Vec::new();
    for i in 0..tasks {
        let s = Arc::clone(&stores[i % stores.len()]);
        let b = Arc::clone(&b);
        handles.push(tokio::spawn(async move {
            s.charge(&key("race"), "files.read", &b, 1_000)
                .await
                .unwrap()
                .is_ok()
        }));
    }
    let mut passed = 0;
    for h in handles {
        passed += usize::from(h.await.unwrap());
    }
    assert_eq!(passed, 10);
}

/// One holder at a time per run; renewal, release and expiry; the same from every store.
async fn model_call_leases(store: &dyn RunStore) {
    let k = key("leased");
    let b = backend_of(store);
    assert!(
        store
            .lease_model_call(&k, "call-a", 1_000, 31_000)
            .await
            .unwrap(),
        "{b}"
    );
    // Another call of the run, before the lease expires: refused.
    assert!(
        !store
            .lease_model_call(&k, "call-b", 2_000, 32_000)
            .await
            .unwrap(),
        "{b}"
    );
    // Another principal's run of the same id is another run.
    let other = RunKey {
        principal: "bob",
        ..key("leased")
    };
    assert!(
        store
            .lease_model_call(&other, "call-c", 2_000, 32_000)
            .await
            .unwrap(),
        "{b}"
    );
    // Only the holder renews or releases it.
    assert!(
        !store.renew_model_call(&k, "call-b", 90_000).await.unwrap(),
        "{b}"
    );
    store.release_model_call(&k, "call-b").await.unwrap();
    assert!(
        !store
            .lease_model_call(&k, "call-b", 3_000, 33_000)
            .await
            .unwrap(),
        "{b}"
    );
    assert!(
        store.renew_model_call(&k, "call-a", 60_000).await.unwrap(),
        "{b}"
    );
    // Renewed: still held past the first expiry.
    assert!(
        !store
            .lease_model_call(&k, "call-b", 40_000, 70_000)
            .await
            .unwrap(),
        "{b}"
    );
    // Released: the next call takes it.
    store.release_model_call(&k, "call-a").await.unwrap();
    assert!(
        store
            .lease_model_call(&k, "call-b", 41_000, 71_000)
            .await
            .unwrap(),
        "{b}"
    );
    // Its holder died (never released): the lease lapses at its expiry.
    assert!(
        !store
            .lease_model_call(&k, "call-d", 70_999, 100_000)
            .await
            .unwrap(),
        "{b}"
    );
    assert!(
        store
            .lease_model_call(&k, "call-d", 71_000, 101_000)
            .await
            .unwrap(),
        "{b}"
    );
    // The lapsed holder can no longer renew or release it.
    assert!(
        !store.renew_model_call(&k, "call-b", 200_000).await.unwrap(),
        "{b}"
    );
    store.release_model_call(&k, "call-b").await.unwrap();
    assert!(
        !store
            .lease_model_call(&k, "call-e", 72_000, 102_000)
            .await
            .unwrap(),
        "{b}"
    );
    store.release_model_call(&k, "call-d").await.unwrap();
    store.release_model_call(&other, "call-c").await.unwrap();
}

fn backend_of(store: &dyn RunStore) -> &'static str {
    store.backend()
}

/// `tasks` concurrent takers of one run's lease, spread over `stores`: exactly one gets it.
async fn exactly_one_takes_the_lease(stores: &[Arc<dyn RunStore>], tasks: usize) {
    let mut handles = Vec::new();
    for i in 0..tasks {
        let s = Arc::clone(&stores[i % stores.len()]);
        handles.push(tokio::spawn(async move {
            s.lease_model_call(&key("contended"), &format!("call-{i}"), 1_000, 31_000)
                .await
                .unwrap()
        }));
    }
    let mut taken = 0;
    for h in handles {
        taken += usize::from(h.await.unwrap());
    }
    assert_eq!(taken, 1);
}

#[tokio::test]
async fn the_memory_ledgers_model_call_lease_has_one_holder_at_a_time() {
    let memory = RunLedger::default();
    model_call_leases(&memory).await;
    assert_eq!(memory.leases(), 0, "every lease given back is forgotten");
    exactly_one_takes_the_lease(&[Arc::new(memory)], 32).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_run_budgets() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&Store::default_sqlite_url(dir.path()))
        .await
        .unwrap();
    budgets_and_settings(&store).await;
    purging_idle_runs(&store).await;
    model_call_leases(&store).await;
    let store: Arc<dyn RunStore> = Arc::new(store);
    exactly_the_budget_passes(&[Arc::clone(&store)], 64).await;
    exactly_one_takes_the_lease(&[store], 32).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_run_budgets_shared_by_two_pools() {
    let Some(schema) = Schema::create("runs").await else {
        return;
    };
    let a = Store::connect(&schema.url).await.unwrap();
    budgets_and_settings(&a).await;
    purging_idle_runs(&a).await;
    model_call_leases(&a).await;
    let b = Store::connect(&schema.url).await.unwrap();
    let stores: [Arc<dyn RunStore>; 2] = [Arc::new(a), Arc::new(b)];
    exactly_the_budget_passes(&stores, 64).await;
    exactly_one_takes_the_lease(&stores, 32).await;
    schema.drop().await;
}

/// Idle runs are purged with their per-op counts; a used id then starts afresh.
async fn purging_idle_runs(store: &Store) {
    let b = budgets(1, &[], 0);
    let old = key("idle");
    store.enter(&old, 1_000, None, false).await.unwrap();
    assert!(
        store
            .charge(&old, "files.read", &b, 1_000)
            .await
            .unwrap()
            .is_ok()
    );
    assert!(
        store
            .charge(&old, "files.read", &b, 1_000)
            .await
            .unwrap()
            .is_err()
    );
    let fresh = key("busy");
    store.enter(&fresh, 9_000, None, false).await.unwrap();
    assert!(store.purge_runs(5_000).await.unwrap() >= 1);
    // The busy run is kept; the idle id starts afresh.
    assert!(
        store
            .charge(&fresh, "files.read", &b, 9_000)
            .await
            .unwrap()
            .is_ok()
    );
    store.enter(&old, 10_000, None, false).await.unwrap();
    assert!(
        store
            .charge(&old, "files.read", &b, 10_000)
            .await
            .unwrap()
            .is_ok()
    );
}
