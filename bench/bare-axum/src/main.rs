//! The baselines for `bench/gateway.sh`: a bare axum server that answers `POST /ops/core.health`
//! with the same JSON corral returns (`{"ok": true, "op", "request_id", "result"}`, a fresh
//! UUID v7 request id, time-ordered as corral's, and an `x-request-id` header). Same runtime
//! as `corral serve` (tokio multi-thread, one worker per core).
//!
//! - `bare-axum [ADDR]`: nothing else: no authentication, policy, limits, metrics or audit.
//! - `bare-axum [ADDR] --durable FILE`: the durable baseline (issue 20): each request appends one
//!   row, shaped like corral's audit event (19 columns), to the SQLite file `FILE` and answers
//!   only after the row's commit. The same durability and the same group commit as corral's
//!   audit writer: WAL, `synchronous=FULL`, one writer thread owning one connection, which
//!   commits every row waiting at that moment in one `BEGIN IMMEDIATE` transaction (at most
//!   256) with one cached prepared `INSERT`, and hands a batch's answers to one relay task on
//!   the runtime (one cross-thread wake per batch). What corral adds on top of this is its
//!   guard chain.
//!
//! Default ADDR: `127.0.0.1:9100`.

use std::sync::mpsc as std_mpsc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header::HeaderName};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

/// Rows committed in one transaction at most (as corral's writer).
const MAX_BATCH: usize = 256;

/// One row to append, and where its caller learns it is committed.
struct Job {
    request_id: String,
    ts_ms: i64,
    done: oneshot::Sender<bool>,
}

/// A committed (or failed) batch's answers.
type Answers = Vec<(oneshot::Sender<bool>, bool)>;

#[derive(Clone)]
struct Durable(Option<std_mpsc::Sender<Job>>);

fn answer(rid: &str) -> Response {
    let mut resp = axum::Json(json!({
        "ok": true,
        "op": "core.health",
        "request_id": rid,
        "result": {"status": "ok"},
    }))
    .into_response();
    if let Ok(v) = HeaderValue::from_str(rid) {
        resp.headers_mut()
            .insert(HeaderName::from_static("x-request-id"), v);
    }
    resp
}

async fn health(State(durable): State<Durable>) -> Response {
    // Time-ordered (v7), as corral's request ids are: rows append at the primary key's end.
    let rid = uuid::Uuid::now_v7().to_string();
    if let Some(writer) = &durable.0 {
        let (done, committed) = oneshot::channel();
        let ts_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let sent = writer.send(Job {
            request_id: rid.clone(),
            ts_ms,
            done,
        });
        if sent.is_err() || !committed.await.unwrap_or(false) {
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
    }
    answer(&rid)
}

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS events (
    request_id TEXT NOT NULL PRIMARY KEY, tenant TEXT NOT NULL, ts_ms BIGINT NOT NULL,
    principal_id TEXT NOT NULL, principal_kind TEXT NOT NULL, act_chain TEXT NOT NULL,
    op TEXT NOT NULL, outcome TEXT NOT NULL, code TEXT, rule TEXT, args_hash TEXT NOT NULL,
    args_shape TEXT NOT NULL, status INTEGER NOT NULL, duration_us BIGINT NOT NULL,
    attestation TEXT, action_id TEXT, run_id TEXT, detail TEXT, purpose TEXT NOT NULL);
    CREATE INDEX IF NOT EXISTS events_ts ON events (ts_ms);";

const INSERT: &str = "INSERT INTO events (request_id, tenant, ts_ms, principal_id, principal_kind, \
    act_chain, op, outcome, code, rule, args_hash, args_shape, status, duration_us, attestation, \
    action_id, run_id, detail, purpose) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)";

/// The writer thread: opens `file` (WAL, `synchronous=FULL`), then commits batches until every
/// sender is gone.
fn writer(file: &str, rx: std_mpsc::Receiver<Job>, relay: mpsc::UnboundedSender<Answers>) {
    let conn = match open(file) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bare-axum: cannot open {file}: {e}");
            std::process::exit(2);
        }
    };
    let mut jobs: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    while let Ok(first) = rx.recv() {
        jobs.push(first);
        while jobs.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let ok = commit(&conn, &jobs).is_ok();
        let _ = relay.send(jobs.drain(..).map(|j| (j.done, ok)).collect());
    }
}

fn open(file: &str) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(file)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.busy_timeout(std::time::Duration::from_secs(30))?;
    conn.execute_batch(SCHEMA)?;
    Ok(conn)
}

fn commit(conn: &rusqlite::Connection, jobs: &[Job]) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let inserted = (|| {
        let mut stmt = conn.prepare_cached(INSERT)?;
        for j in jobs {
            stmt.execute(rusqlite::params![
                j.request_id,
                "default",
                j.ts_ms,
                "agent",
                "service",
                "[]",
                "core.health",
                "ok",
                None::<&str>,
                "rule-1",
                "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
                "{}",
                200,
                42,
                None::<&str>,
                None::<&str>,
                None::<&str>,
                None::<&str>,
                "live",
            ])?;
        }
        Ok(())
    })();
    let committed = inserted.and_then(|()| conn.execute_batch("COMMIT"));
    if committed.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    committed
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let durable_file = args
        .iter()
        .position(|a| a == "--durable")
        .and_then(|i| args.get(i + 1).cloned());
    let addr = args
        .iter()
        .find(|a| !a.starts_with("--") && Some(*a) != durable_file.as_ref())
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:9100".to_owned());
    let durable = match &durable_file {
        None => Durable(None),
        Some(file) => {
            let (tx, rx) = std_mpsc::channel::<Job>();
            let (relay_tx, mut relay_rx) = mpsc::unbounded_channel::<Answers>();
            tokio::spawn(async move {
                while let Some(batch) = relay_rx.recv().await {
                    for (done, ok) in batch {
                        let _ = done.send(ok);
                    }
                }
            });
            let file = file.clone();
            std::thread::spawn(move || writer(&file, rx, relay_tx));
            Durable(Some(tx))
        }
    };
    let app = Router::new()
        .route("/ops/core.health", post(health))
        .with_state(durable);
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bare-axum: cannot listen on {addr}: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mode = durable_file.map_or_else(|| "bare".to_owned(), |f| format!("durable ({f})"));
    eprintln!("bare-axum ({mode}) listening on http://{addr}");
    match axum::serve(listener, app).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bare-axum: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
