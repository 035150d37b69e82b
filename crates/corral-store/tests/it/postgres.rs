//! The PostgreSQL backend, against the server in `CORRAL_TEST_POSTGRES_URL`, one fresh schema
//! per test.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use corral_store::{STORE_UNAVAILABLE, Store};
use sqlx::postgres::PgConnection;
use sqlx::{Connection, Executor};

use crate::common;

pub const URL_ENV: &str = "CORRAL_TEST_POSTGRES_URL";

/// The server's URL; `None` (after a notice) outside CI when unset. In CI (`CI=true`) an unset
/// URL fails the test.
pub fn server_url() -> Option<String> {
    match std::env::var(URL_ENV) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            let how = format!(
                "{URL_ENV} is unset, so the PostgreSQL tests cannot run. Start a throwaway server \
                 with `eval \"$(scripts/postgres-test-server | tail -n1)\"` (from the workspace \
                 root; installs Debian's postgresql if needed), or set {URL_ENV} to \
                 postgres://USER:PASSWORD@HOST:PORT/DB of a role that may create schemas"
            );
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{how}");
            }
            eprintln!("notice: skipping a PostgreSQL test: {how}");
            None
        }
    }
}

/// A fresh schema on the test server, and a store URL whose `search_path` is that schema.
pub struct Schema {
    server: String,
    name: String,
    pub url: String,
}

impl Schema {
    pub async fn create(test: &str) -> Option<Schema> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let server = server_url()?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let name = format!(
            "corral_test_{test}_{}_{}_{}",
            std::process::id(),
            nanos % 1_000_000_000,
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        assert!(name.len() <= 63, "schema name too long: {name}");
        let mut conn = PgConnection::connect(&server).await.unwrap();
        conn.execute(format!("CREATE SCHEMA {name}").as_str())
            .await
            .unwrap();
        conn.close().await.unwrap();
        let mut url = url::Url::parse(&server).unwrap();
        url.query_pairs_mut()
            .append_pair("options[search_path]", &name);
        Some(Schema {
            server,
            name,
            url: url.to_string(),
        })
    }

    /// Drops the schema (only reached when the test passed; a failed run leaves it to inspect).
    pub async fn drop(self) {
        let mut conn = PgConnection::connect(&self.server).await.unwrap();
        conn.execute(format!("DROP SCHEMA {} CASCADE", self.name).as_str())
            .await
            .unwrap();
        conn.close().await.unwrap();
    }
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
