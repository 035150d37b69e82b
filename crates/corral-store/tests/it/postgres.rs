//! The PostgreSQL backend, against the server in `CORRAL_TEST_POSTGRES_URL`, one fresh schema
//! per test.

use corral_store::{STORE_UNAVAILABLE, Store};
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use crate::common;

pub use crate::pg_schema::{Schema, server_url};

#[tokio::test]
async fn recent_events_filtered_by_run_op_principal_and_purpose() {
    let Some(schema) = Schema::create("flt").await else {
        return;
    };
    let store = Store::connect(&schema.url).await.unwrap();
    common::filters_match_exactly(&store).await;
    store.close().await;
    schema.drop().await;
}

#[tokio::test]
async fn round_trip_every_field() {
    let Some(schema) = Schema::create("rt").await else {
        return;
    };
    let store = Store::connect(&schema.url).await.unwrap();
    assert_eq!(store.backend_name(), "postgres");
    let password = url::Url::parse(&schema.url)
        .unwrap()
        .password()
        .unwrap_or_default()
        .to_owned();
    if !password.is_empty() {
        assert!(!format!("{store:?}").contains(&password));
    }
    common::round_trip(&store).await;
    store.close().await;
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_appends_from_32_tasks() {
    let Some(schema) = Schema::create("bulk").await else {
        return;
    };
    let store = Store::connect(&schema.url).await.unwrap();
    common::concurrent_appends(&store, 32, 10_000).await;
    store.close().await;
    schema.drop().await;
}

#[tokio::test]
async fn duplicate_request_id_is_an_error() {
    let Some(schema) = Schema::create("dup").await else {
        return;
    };
    let store = Store::connect(&schema.url).await.unwrap();
    common::duplicate_is_an_error(&store).await;
    store.close().await;
    schema.drop().await;
}

#[tokio::test]
async fn rows_survive_reopening() {
    let Some(schema) = Schema::create("reopen").await else {
        return;
    };
    common::survives_reopen(&schema.url).await;
    schema.drop().await;
}

#[tokio::test]
async fn the_schema_has_the_tenant_index() {
    let Some(schema) = Schema::create("idx").await else {
        return;
    };
    let store = Store::connect(&schema.url).await.unwrap();
    let mut conn = PgConnection::connect(&schema.url).await.unwrap();
    let def: String = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'audit_events_tenant_ts' \
         AND schemaname = current_schema()",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!(def.contains("(tenant, ts_ms)"), "{def}");
    conn.close().await.unwrap();
    store.close().await;
    schema.drop().await;
}

#[tokio::test]
async fn a_wrong_password_is_unavailable_and_not_echoed() {
    let Some(server) = server_url() else {
        return;
    };
    let mut url = url::Url::parse(&server).unwrap();
    let real = url.password().unwrap_or_default().to_owned();
    url.set_password(Some("Wr0ngPassw0rdXyz")).unwrap();
    let err = Store::connect(url.as_str()).await.unwrap_err();
    assert_eq!(err.code(), STORE_UNAVAILABLE, "{err}");
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains("Wr0ngPassw0rdXyz"), "{text}");
        if !real.is_empty() {
            assert!(!text.contains(&real), "{text}");
        }
    }
}

#[tokio::test]
async fn events_written_before_purposes_existed_read_back_as_live() {
    let Some(schema) = Schema::create("purpose").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut conn = PgConnection::connect(&schema.url).await.unwrap();
    common::migrator_before_purpose(dir.path())
        .await
        .run(&mut conn)
        .await
        .unwrap();
    sqlx::query(common::OLD_ROWS)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();

    let store = Store::connect(&schema.url).await.unwrap();
    common::old_rows_read_as_live(&store).await;
    store.close().await;
    schema.drop().await;
}
