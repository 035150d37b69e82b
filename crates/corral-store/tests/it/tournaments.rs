//! Stored tournaments (migration 0012), each check run on SQLite and on PostgreSQL:
//! `tournaments::<check>::on_sqlite` and `tournaments::<check>::on_postgres`.

use corral_store::Store;
use serde_json::json;

use crate::postgres::Schema;

/// Runs `$check(&Store)` on a fresh SQLite file and on a fresh PostgreSQL schema.
macro_rules! on_both {
    ($name:ident) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn on_sqlite() {
                let dir = tempfile::tempdir().unwrap();
                let store = Store::connect(&Store::default_sqlite_url(dir.path()))
                    .await
                    .unwrap();
                super::$name(&store).await;
                store.close().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn on_postgres() {
                let Some(schema) = Schema::create("tourn").await else {
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

async fn a_tournament_reads_back_as_stored_in_its_tenant_and_is_none_in_another(store: &Store) {
    let details = json!({
        "ranking": [{"rank": 1, "variant": "long \u{202e}", "strength": 2.000_000_000_000_1}],
        "errors": [{"message": "judge printed \"\\u0000?\""}],
    });
    let t = store
        .append_tournament("acme", "olga", &details, 1_767_225_600_000)
        .await
        .unwrap();
    let got = store.get_tournament("acme", &t.id).await.unwrap().unwrap();
    assert_eq!(got, t);
    assert_eq!(got.details, details);
    assert_eq!(store.get_tournament("other", &t.id).await.unwrap(), None);
    assert_eq!(
        store.get_tournament("acme", "no-such-id").await.unwrap(),
        None
    );
    let e = store
        .append_tournament("acme", "ol\0ga", &details, 1)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "lab.invalid_record");
}
on_both!(a_tournament_reads_back_as_stored_in_its_tenant_and_is_none_in_another);
