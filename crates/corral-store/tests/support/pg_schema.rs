//! The PostgreSQL server in `CORRAL_TEST_POSTGRES_URL`, one fresh schema per test. Shared by
//! corral-store's and corral-server's integration tests (each includes this file with `#[path]`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::postgres::PgConnection;
use sqlx::{Connection, Executor};

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
            "corral_t_{test}_{}_{}_{}",
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

    /// Every audit row of the schema, each as the JSON text of all its columns.
    #[allow(
        dead_code,
        reason = "used by corral-server's tests, not corral-store's"
    )]
    pub async fn audit_rows_as_json(&self) -> Vec<String> {
        let mut conn = PgConnection::connect(&self.url).await.unwrap();
        let rows: Vec<String> =
            sqlx::query_scalar("SELECT row_to_json(a)::text FROM audit_events a")
                .fetch_all(&mut conn)
                .await
                .unwrap();
        conn.close().await.unwrap();
        rows
    }

    /// Drops the schema (only reached when the test passed; a failed run leaves it to inspect).
    /// A server the test dropped may still be closing (its recording writer marks its own work
    /// in a last transaction), and PostgreSQL then picks the DROP as a deadlock's victim: that
    /// is retried, any other error is not.
    pub async fn drop(self) {
        let mut conn = PgConnection::connect(&self.server).await.unwrap();
        let sql = format!("DROP SCHEMA {} CASCADE", self.name);
        let mut tries = 0;
        loop {
            match conn.execute(sql.as_str()).await {
                Ok(_) => break,
                Err(sqlx::Error::Database(e))
                    if e.code().as_deref() == Some("40P01") && tries < 5 =>
                {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                Err(e) => panic!("cannot drop the test schema {}: {e}", self.name),
            }
        }
        conn.close().await.unwrap();
    }
}
