//! The SQLite backend, on a real file in a temp dir.

use std::process::Command;

use corral_store::Store;
use sqlx::Connection;
use sqlx::sqlite::SqliteConnection;

use crate::common;

async fn fresh() -> (tempfile::TempDir, String, Store) {
    let dir = tempfile::tempdir().unwrap();
    let url = Store::default_sqlite_url(dir.path());
    let store = Store::connect(&url).await.unwrap();
    (dir, url, store)
}

#[tokio::test]
async fn recent_events_filtered_by_run_op_principal_and_purpose() {
    let (_dir, _url, store) = fresh().await;
    common::filters_match_exactly(&store).await;
}

#[tokio::test]
async fn round_trip_every_field() {
    let (_dir, _url, store) = fresh().await;
    assert_eq!(store.backend_name(), "sqlite");
    common::round_trip(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_appends_from_32_tasks() {
    let (_dir, _url, store) = fresh().await;
    common::concurrent_appends(&store, 32, 10_000).await;
}

#[tokio::test]
async fn duplicate_request_id_is_an_error() {
    let (_dir, _url, store) = fresh().await;
    common::duplicate_is_an_error(&store).await;
}

#[tokio::test]
async fn rows_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    common::survives_reopen(&Store::default_sqlite_url(dir.path())).await;
}

#[tokio::test]
async fn connect_creates_directories_and_uses_wal() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("a/b/state");
    let url = Store::default_sqlite_url(&state);
    assert_eq!(url, format!("sqlite://{}/corral.db", state.display()));
    let store = Store::connect(&url).await.unwrap();
    let file = state.join("corral.db");
    assert!(file.is_file());

    let mut conn = SqliteConnection::connect(&format!("sqlite://{}", file.display()))
        .await
        .unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'audit_events' \
         ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(
        indexes.contains(&"audit_events_tenant_ts".to_owned()),
        "{indexes:?}"
    );
    conn.close().await.unwrap();
    store.close().await;
}

const CRASH_CHILD: &str = "CORRAL_STORE_TEST_CRASH_CHILD_URL";
const APPENDED: &str = "corral-store-test: appended";

/// An event whose append returned is on disk even if the process dies right after (the
/// process aborts without closing the store; the parent reopens the file).
#[test]
fn committed_append_survives_process_abort() {
    if let Ok(url) = std::env::var(CRASH_CHILD) {
        // Child: append, say so, die without any cleanup.
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let store = Store::connect(&url).await.unwrap();
            store
                .append_audit(&common::full_event("before-crash", true))
                .await
                .unwrap();
            println!("{APPENDED}");
            std::process::abort();
        });
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    let url = Store::default_sqlite_url(dir.path());
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "sqlite::committed_append_survives_process_abort",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_CHILD, &url)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(APPENDED),
        "child did not append: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "the child was meant to abort");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::connect(&url).await.unwrap();
        assert_eq!(
            store.audit_recent(None, 10).await.unwrap(),
            vec![common::full_event("before-crash", true)]
        );
    });
}

#[tokio::test]
async fn events_written_before_purposes_existed_read_back_as_live() {
    let dir = tempfile::tempdir().unwrap();
    let migrations = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.db");
    let mut conn = SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", file.display()))
        .await
        .unwrap();
    common::migrator_before_purpose(migrations.path())
        .await
        .run(&mut conn)
        .await
        .unwrap();
    sqlx::query(common::OLD_ROWS)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();

    let store = Store::connect(&Store::default_sqlite_url(dir.path()))
        .await
        .unwrap();
    common::old_rows_read_as_live(&store).await;
    store.close().await;
}
