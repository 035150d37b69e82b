//! Corral's storage: sqlx adapters for SQLite and Postgres, migrations, tenancy; implements the
//! guard's ports (from corral-ports: it links neither the guard nor the sandbox crate).
//! **Architecture invariant:** the only crate that knows SQL.
//!
//! # One store, two backends
//!
//! [`Store`] holds an enum over a typed [`SqlitePool`] and a typed [`PgPool`] rather than an
//! `sqlx::AnyPool`. Each operation is written once, SQL text and binds included, and the
//! `on_pool!` macro expands that one body for both pool types, so the queries stay a single set.
//! The typed pools buy what `AnyPool` cannot give without per-connection SQL hooks: SQLite's
//! options (WAL, `synchronous`, busy timeout, create-if-missing) are set through
//! `SqliteConnectOptions` (the `Any` driver only sees a URL, which cannot carry them), no
//! runtime driver registry has to be installed, and rows decode with each driver's own types.
//! The shared SQL uses `$N` placeholders, which both drivers accept, and only types both
//! databases know (`TEXT`, `INTEGER`, `BIGINT`; and `BYTEA` for bytes, PostgreSQL's name,
//! which SQLite takes as any column and keeps blobs in as they are), so one migration folder
//! serves both.
//!
//! # Durability
//!
//! SQLite runs in WAL mode with `synchronous=FULL`: the WAL is fsynced at every commit, so an
//! event whose `append` has returned survives a process crash *and* an OS crash or power loss.
//! (`NORMAL` would survive a process crash only; an audit log is worth one fsync per event.)
//! A 30 s busy timeout lets many concurrent writers queue on SQLite's single write lock instead
//! of failing with `SQLITE_BUSY`. PostgreSQL commits are durable under its default
//! `synchronous_commit=on`.
//!
//! # Append-only
//!
//! The crate has no `UPDATE` or `DELETE` statement for `audit_events`.
//!
//! # Runs
//!
//! `impl RunStore for Store` (`runs.rs`): run records and their budgets, shared by replicas.
//!
//! # Confirmations
//!
//! `impl ConfirmationStore for Store` (`confirm.rs`): pending actions, approvals and stored
//! outcomes, shared by every replica on one database and kept across restarts; the approval is
//! consumed exactly once (PostgreSQL: one `DELETE ... RETURNING` statement; SQLite: one
//! `BEGIN IMMEDIATE` transaction).
//!
//! # Lab
//!
//! [`lab`]: the lab's scenarios, runs, outputs and comparisons, tenant-scoped inherent methods
//! (`create_scenario`, `finish_run`, `append_outputs`, ...) that `corral-lab` calls.
//!
//! # Recordings
//!
//! [`recording`]: the call timelines of runs marked for recording (migration 0009), `impl
//! Recorder for Store`, capped per run and purged after their retention.
//!
//! # Tournaments
//!
//! [`tournament`]: graded tournaments (migration 0012), kept as the lab's JSON answer.
//!
//! # Agents host
//!
//! [`agents`]: saved agents, agent sessions (one turn at a time, claimed atomically) and their
//! numbered, append-only events (migration 0017). [`agent_holds`]: a session's held writes
//! (migration 0023), stored whole or not at all, claimed for applying with a lease, so any
//! replica applies a hold exactly once.
//!
//! # Console sessions
//!
//! [`ui_sessions`]: the web console's sessions (migration 0019), keyed by the hash of their
//! secret id, with absolute and idle expiry, shared by replicas.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Connection;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};

use crate::error::Redactor;

pub use crate::audit::{AuditCursor, AuditFilter};
pub use crate::error::{STORE_MIGRATION_FAILED, STORE_QUERY_FAILED, STORE_UNAVAILABLE, StoreError};
pub use crate::recorder::RecordingWriter;
pub use crate::writer::AuditWriter;

/// Runs the same body against whichever pool the store holds; `$p` is bound to the typed pool.
macro_rules! on_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        match $pool {
            $crate::Pool::Sqlite($p) => $body,
            $crate::Pool::Postgres($p) => $body,
        }
    };
}

pub mod agent_holds;
pub mod agents;
mod audit;
mod confirm;
mod error;
pub mod lab;
mod recorder;
pub mod recording;
mod runs;
pub mod shadow;
pub mod tournament;
pub mod ui_sessions;
mod writer;

/// The schema, embedded from `crates/corral-store/migrations/` (shared by both backends).
static MIGRATOR: Migrator = sqlx::migrate!();

/// How long SQLite waits on a locked database before giving up.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections in the SQLite pool (writes are serialised by SQLite anyway; WAL readers are not).
const SQLITE_MAX_CONNECTIONS: u32 = 8;
/// Connections in the PostgreSQL pool, per process.
const PG_MAX_CONNECTIONS: u32 = 16;
/// How long `connect` waits for the first connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a statement waits for a pooled connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a statement waits for a PostgreSQL connection: a healthy pool answers in
/// microseconds, so past this the server is down or unreachable, and a call is refused (`503
/// store.unavailable`) rather than held until it returns (sqlx retries the connect meanwhile).
const PG_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

/// Where corral keeps its state: a SQLite file or a PostgreSQL database.
///
/// Cloning is cheap and shares the pool.
#[derive(Debug, Clone)]
pub struct Store {
    pool: Pool,
    redactor: Redactor,
    recording_limits: recording::RecordingLimits,
    /// The recording writer, once spawned (`RecordingWriter::spawn`): reads flush it, `close`
    /// stops it cleanly. Weak: the writer stops when its last `RecordingWriter` is gone.
    recorder: Arc<std::sync::OnceLock<tokio::sync::mpsc::WeakSender<recorder::Job>>>,
    /// This process's recording writer epoch, once spawned: the `worker` of the shadow
    /// evaluations and lab runs it executes (migration 0014), so a dead process's are found.
    epoch: Arc<std::sync::OnceLock<String>>,
}

#[derive(Debug, Clone)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Store {
    /// Opens the store at `url` and brings its schema up to date.
    ///
    /// - `sqlite://PATH`: the file (and its parent directory) is created if missing. `PATH` is
    ///   taken literally (no query string, no percent-decoding), so `sqlite:///abs/path.db` and
    ///   `sqlite://relative/path.db` both work and [`Store::default_sqlite_url`] round-trips.
    /// - `postgres://USER:PASSWORD@HOST:PORT/DB` (or `postgresql://`), with sqlx's query
    ///   parameters (`sslmode`, `options[search_path]`, ...).
    ///
    /// Errors are `store.unavailable` (bad URL, unreachable server, bad credentials, unwritable
    /// file) or `store.migration_failed`; no message contains the password.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            Self::connect_sqlite(path).await
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Self::connect_postgres(url).await
        } else {
            let scheme = url
                .split_once(':')
                .map(|(s, _)| s)
                .filter(|s| {
                    s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                })
                .unwrap_or("");
            Err(StoreError::Unavailable {
                target: if scheme.is_empty() {
                    "<url>".to_owned()
                } else {
                    format!("{scheme}://...")
                },
                reason: "unsupported store URL; use `sqlite://PATH` or `postgres://...`".to_owned(),
            })
        }
    }

    /// The default store URL for a state directory: `sqlite://<state_dir>/corral.db`.
    pub fn default_sqlite_url(state_dir: &Path) -> String {
        format!("sqlite://{}", state_dir.join("corral.db").display())
    }

    /// This process's worker epoch (its recording writer's), once the writer is spawned: what
    /// marks the shadow evaluations and lab runs it executes.
    pub fn worker(&self) -> Option<&str> {
        self.epoch.get().map(String::as_str)
    }

    /// `"sqlite"` or `"postgres"`.
    pub fn backend_name(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "sqlite",
            Pool::Postgres(_) => "postgres",
        }
    }

    /// Closes every pooled connection, waiting for statements in flight. Later calls fail with
    /// `store.unavailable`. Dropping the store without calling this is safe: committed data is
    /// already durable.
    pub async fn close(&self) {
        // The recording writer first: it commits what it holds and marks its epoch clean.
        self.close_recordings().await;
        on_pool!(&self.pool, p => p.close().await)
    }

    async fn connect_sqlite(path: &str) -> Result<Store, StoreError> {
        let redactor = Redactor::plain(format!("sqlite://{path}"));
        if path.is_empty() {
            return Err(redactor.unavailable("the URL names no file; use `sqlite://PATH`"));
        }
        if path.contains('?') {
            return Err(redactor.unavailable(
                "SQLite store URLs take no query parameters; corral sets the options itself",
            ));
        }
        if path == ":memory:" || path.starts_with("file:") {
            return Err(redactor.unavailable("the SQLite store must be a file path"));
        }
        let file = Path::new(path);
        if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(parent).await.map_err(|e| {
                redactor.unavailable(format!("cannot create {}: {e}", parent.display()))
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(file)
            .create_if_missing(true)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(SQLITE_BUSY_TIMEOUT)
            .foreign_keys(true);

        // One connection first: it switches the file to WAL (a persistent property of the file,
        // so pooled connections need not ask again, which would need an exclusive lock), and
        // runs the migrations; its error is the real one rather than a pool timeout.
        let mut conn = tokio::time::timeout(
            CONNECT_TIMEOUT,
            SqliteConnection::connect_with(&options.clone().journal_mode(SqliteJournalMode::Wal)),
        )
        .await
        .map_err(|_| redactor.unavailable("timed out opening the database"))?
        .map_err(|e| redactor.unavailable(e))?;
        match sqlx::query_scalar::<_, String>("PRAGMA journal_mode")
            .fetch_one(&mut conn)
            .await
        {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => {}
            Ok(mode) => tracing::warn!(
                store = %redactor.target,
                journal_mode = %mode,
                "SQLite could not switch to WAL; writers will block readers"
            ),
            Err(e) => return Err(redactor.unavailable(e)),
        }
        MIGRATOR
            .run(&mut conn)
            .await
            .map_err(|e| redactor.migration_failed(e))?;
        let _ = conn.close().await;

        let pool = SqlitePoolOptions::new()
            .max_connections(SQLITE_MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(options);
        tracing::debug!(store = %redactor.target, "store opened");
        Ok(Store {
            pool: Pool::Sqlite(pool),
            redactor,
            recording_limits: recording::RecordingLimits::default(),
            recorder: Arc::default(),
            epoch: Arc::default(),
        })
    }

    async fn connect_postgres(url: &str) -> Result<Store, StoreError> {
        let parsed = url::Url::parse(url).map_err(|e| StoreError::Unavailable {
            target: "postgres://...".to_owned(),
            // `url::ParseError` never quotes its input.
            reason: format!("the URL cannot be parsed: {e}"),
        })?;
        let redactor = Redactor::for_url(&parsed);
        let options = PgConnectOptions::from_str(url).map_err(|e| redactor.unavailable(e))?;

        // One connection first: a clear error (refused, bad password) within CONNECT_TIMEOUT
        // instead of the pool's retry loop ending in a bare timeout; it also runs the migrations
        // (sqlx holds an advisory lock meanwhile, so replicas starting together are safe).
        let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options))
            .await
            .map_err(|_| redactor.unavailable("timed out connecting to the server"))?
            .map_err(|e| redactor.unavailable(e))?;
        MIGRATOR
            .run(&mut conn)
            .await
            .map_err(|e| redactor.migration_failed(e))?;
        let _ = conn.close().await;

        let pool = PgPoolOptions::new()
            .max_connections(PG_MAX_CONNECTIONS)
            .acquire_timeout(PG_ACQUIRE_TIMEOUT)
            .connect_lazy_with(options);
        tracing::debug!(store = %redactor.target, "store opened");
        Ok(Store {
            pool: Pool::Postgres(pool),
            redactor,
            recording_limits: recording::RecordingLimits::default(),
            recorder: Arc::default(),
            epoch: Arc::default(),
        })
    }
}
