//! Shadow evaluations in the store (migration 0013), each check run on SQLite and on
//! PostgreSQL: created `running`, updated as runs finish, read back and listed per tenant.

use corral_store::Store;
use corral_store::lab::{LabStoreError, Page};
use corral_store::shadow::ShadowProgress;
use serde_json::json;

use crate::postgres::Schema;

macro_rules! on_both {
    ($name:ident) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_sqlite() {
                let dir = tempfile::tempdir().unwrap();
                let store = Store::connect(&Store::default_sqlite_url(dir.path()))
                    .await
                    .unwrap();
                super::$name(&store).await;
                store.close().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_postgres() {
                let Some(schema) = Schema::create("shadows").await else {
                    return;
                };
                let store = Store::connect(&schema.url).await.unwrap();
                super::$name(&store).await;
                store.close().await;
                schema.drop().await;
            }
        }
    };
}

on_both!(a_shadow_evaluation_is_stored_running_then_updated_and_read_back_by_its_tenant_only);
async fn a_shadow_evaluation_is_stored_running_then_updated_and_read_back_by_its_tenant_only(
    store: &Store,
) {
    let tasks = vec!["task-1".to_owned(), "task-2".to_owned()];
    let variants = vec!["v1".to_owned()];
    let s = store
        .create_shadow("acme", "olga", &tasks, &variants, 2, 10)
        .await
        .unwrap();
    assert_eq!((s.status.as_str(), s.planned, s.ran), ("running", 2, 0));
    assert_eq!(
        store.get_shadow("acme", &s.id).await.unwrap(),
        Some(s.clone())
    );
    assert_eq!(store.get_shadow("globex", &s.id).await.unwrap(), None);
    let done = ShadowProgress {
        status: "stopped_by_ceiling".to_owned(),
        ran: 1,
        runs: json!({"task-1": {"scenario_id": "sc", "runs": {"v1": "run-1"}}}),
        not_run: json!([{"variant": "v1", "task": "task-2"}]),
        report: json!({"stopped_by": "budgets.replay.max_runs", "note": "nul \u{0} kept"}),
        finished: true,
    };
    store.update_shadow("acme", &s.id, &done, 20).await.unwrap();
    let read = store.get_shadow("acme", &s.id).await.unwrap().unwrap();
    assert_eq!((read.status.as_str(), read.ran), ("stopped_by_ceiling", 1));
    assert_eq!(
        (&read.runs, &read.not_run, &read.report),
        (&done.runs, &done.not_run, &done.report)
    );
    assert_eq!((read.updated_ms, read.finished_ms), (20, Some(20)));
    assert_eq!((read.tasks, read.variants), (tasks, variants));
    // Another tenant cannot update it.
    let e = store
        .update_shadow("globex", &s.id, &done, 30)
        .await
        .unwrap_err();
    assert!(matches!(e, LabStoreError::NotFound { .. }), "{e:?}");
}

on_both!(shadow_evaluations_are_listed_newest_first_page_by_page);
async fn shadow_evaluations_are_listed_newest_first_page_by_page(store: &Store) {
    let mut ids = Vec::new();
    for t in 0..3 {
        let s = store
            .create_shadow("acme", "olga", &["t".to_owned()], &["v".to_owned()], 1, t)
            .await
            .unwrap();
        ids.push(s.id);
    }
    store
        .create_shadow("globex", "gus", &["t".to_owned()], &["v".to_owned()], 1, 5)
        .await
        .unwrap();
    let first = store
        .list_shadows(
            "acme",
            &Page {
                limit: 2,
                after: None,
            },
        )
        .await
        .unwrap();
    let second = store
        .list_shadows(
            "acme",
            &Page {
                limit: 2,
                after: first.next.clone(),
            },
        )
        .await
        .unwrap();
    let listed: Vec<String> = first
        .items
        .iter()
        .chain(&second.items)
        .map(|s| s.id.clone())
        .collect();
    ids.reverse();
    assert_eq!(listed, ids);
    assert!(second.next.is_none());
}
