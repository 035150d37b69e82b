//! `guard-bench`: what the guard chain costs, in process.
//!
//! 1. **Guard-chain overhead per read-tier call above the bare policy decision.** The same
//!    `files.read` call (one allow rule over `/data/u0` with a deny glob, the path inside it)
//!    decided by `Engine::decide` alone (arguments already parsed), and run through
//!    `Gateway::call`: resolve, parse the JSON arguments, autonomy (L2), RBAC (on, a viewer),
//!    the same policy decision, limits, (read tier: no confirmation), the handler, one audit
//!    event, metrics. The handler is a no-op and the audit sink discards events, so what is left
//!    is the chain itself (storage and the op's own I/O are not the chain's). Also with a run
//!    (`X-Corral-Run`) and budgets on. Interleaved batches of 1,000 calls; per-call median and
//!    p99 of the batch means.
//! 2. **Confirmation consume latency** on SQLite (a file in a temp dir, WAL, `synchronous=FULL`)
//!    and PostgreSQL (`CORRAL_TEST_POSTGRES_URL`, a fresh schema): `ConfirmationStore::consume`
//!    of 1,000 approved actions, one at a time; p50 and p99.
//!
//! 3. **Recording overhead** (issue 15): the same call of a run, not recorded and recorded
//!    (a run-scoped caller with `record: true`) into a SQLite store (a temp dir, WAL,
//!    `synchronous=FULL`) and, when `CORRAL_TEST_POSTGRES_URL` is set, PostgreSQL; interleaved
//!    batches; per-call p50 of the batch means. `GUARD_BENCH_ONLY=recording` runs only this.
//!
//! `cargo bench -p guard-bench` (optimized). Prints the figures; `bench/RESULTS.md` keeps them.

// A benchmark harness: a broken fixture should abort loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use corral_exec::BoxFuture;
use corral_exec::process::ProcessBackend;
use corral_guard::audit::{AuditError, AuditEvent, AuditSink};
use corral_guard::confirm::{Action, ActionState, ConfirmationStore};
use corral_guard::guardrails::{Budgets, GuardPolicy};
use corral_guard::{Call, CallOptions, Caller, Deployment, Gateway, Reply};
use corral_ops::{Op, OpCtx, OpError, OpOutput, Registry};
use corral_policy::scope::{PathScope, PathScopeSpec};
use corral_policy::{
    ArgValue, Args, AutonomyLevel, Catalog, Engine, OpSpec, Policy, Principal, Request, Rule,
    Selector,
};
use serde_json::json;

const BATCH: usize = 1_000;
const BATCHES: usize = 300;
const WARMUP_BATCHES: usize = 30;
const CONSUMES: usize = 1_000;

/// A handler that does nothing.
#[derive(Debug)]
struct Noop(OpSpec);

impl Op for Noop {
    fn spec(&self) -> &OpSpec {
        &self.0
    }

    fn call(&self, _ctx: OpCtx) -> BoxFuture<'_, Result<OpOutput, OpError>> {
        Box::pin(std::future::ready(Ok(OpOutput::Json {
            value: serde_json::Value::Null,
            attestation: None,
        })))
    }
}

/// An audit sink that discards events.
#[derive(Debug)]
struct Discard;

impl AuditSink for Discard {
    fn append<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        black_box(event);
        Box::pin(std::future::ready(Ok(())))
    }
}

const PATH: &str = "/data/u0/notes/today.txt";

fn deployment(budgets: bool) -> Deployment {
    let catalog = Catalog::builtin();
    let scope = PathScope::compile(PathScopeSpec {
        roots: vec!["/data/u0".to_owned()],
        deny: vec!["*.secret".to_owned()],
        ..PathScopeSpec::default()
    })
    .unwrap();
    let policy = Policy::new().rule(
        Rule::allow(
            "reader",
            vec![Selector::parse("files.read", &catalog).unwrap()],
        )
        .paths(scope),
    );
    let spec = catalog.get("files.read").unwrap().clone();
    let registry = Registry::new(catalog.clone(), vec![Arc::new(Noop(spec)) as Arc<dyn Op>]);
    let mut guard = GuardPolicy::new();
    guard.autonomy = Some(AutonomyLevel::L2);
    guard.rbac = Some(HashMap::new());
    if budgets {
        guard.budgets = Budgets {
            max_calls: u64::MAX,
            max_calls_per_op: [("files.read".to_owned(), u64::MAX)].into_iter().collect(),
            max_wall_time: Duration::from_secs(3600 * 24),
            max_output_bytes: u64::MAX,
            max_tokens: 0,
        };
    }
    Deployment {
        engine: Engine::new(catalog, policy),
        registry,
        protected: Vec::new(),
        guard,
    }
}

fn principal() -> Principal {
    Principal::new("ada", &["viewer"])
}

fn call() -> Call {
    Call {
        caller: Caller::new(principal()),
        op: "files.read".to_owned(),
        args: json!({"path": PATH}),
        request_id: "bench".to_owned(),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn fmt(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns < 10_000 {
        format!("{ns} ns")
    } else if ns < 10_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{:.2} ms", ns as f64 / 1e6)
    }
}

struct Stats {
    min: Duration,
    p50: Duration,
    p99: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    Stats {
        min: v[0],
        p50: percentile(&v, 0.5),
        p99: percentile(&v, 0.99),
    }
}

/// Part 1: interleaved batches of the bare decision and of the chain (plain, and with a run).
fn chain_overhead() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let plain = Gateway::new(
        deployment(false),
        Arc::new(ProcessBackend::new()),
        vec![Arc::new(Discard)],
        "default",
    );
    let metered = Gateway::new(
        deployment(true),
        Arc::new(ProcessBackend::new()),
        vec![Arc::new(Discard)],
        "default",
    );
    let engine = plain.deployment();
    let p = principal();
    let args = Args::new().with("path", ArgValue::Str(PATH.to_owned()));
    // The calls agree before anything is timed.
    assert!(
        engine
            .engine
            .decide(&Request {
                op: "files.read",
                principal: &p,
                args: &args,
            })
            .is_allowed()
    );
    let run = CallOptions {
        run_id: Some("bench-run".to_owned()),
        ..CallOptions::default()
    };
    rt.block_on(async {
        let fut = plain.call(call());
        println!(
            "(size of a `Gateway::call` future: {} bytes)",
            std::mem::size_of_val(&fut)
        );
        drop(fut);
        assert!(matches!(plain.call(call()).await, Reply::Json(_)));
        assert!(matches!(
            metered.call_with(call(), run.clone()).await,
            Reply::Json(_)
        ));
    });

    let mut bare = Vec::with_capacity(BATCHES);
    let mut chain = Vec::with_capacity(BATCHES);
    let mut chain_run = Vec::with_capacity(BATCHES);
    for b in 0..WARMUP_BATCHES + BATCHES {
        // The calls are built outside the timed loop (a surface builds one per request).
        let calls: Vec<Call> = (0..BATCH).map(|_| call()).collect();
        let calls_run: Vec<Call> = (0..BATCH).map(|_| call()).collect();
        let t = Instant::now();
        for _ in 0..BATCH {
            black_box(engine.engine.decide(&Request {
                op: "files.read",
                principal: black_box(&p),
                args: black_box(&args),
            }));
        }
        let bare_t = t.elapsed();
        let t = Instant::now();
        rt.block_on(async {
            for c in calls {
                black_box(plain.call(c).await);
            }
        });
        let chain_t = t.elapsed();
        let t = Instant::now();
        rt.block_on(async {
            for c in calls_run {
                black_box(metered.call_with(c, run.clone()).await);
            }
        });
        let run_t = t.elapsed();
        if b >= WARMUP_BATCHES {
            bare.push(bare_t / BATCH as u32);
            chain.push(chain_t / BATCH as u32);
            chain_run.push(run_t / BATCH as u32);
        }
    }
    let (bare, chain, chain_run) = (stats(bare), stats(chain), stats(chain_run));
    println!(
        "## guard chain, per read-tier call ({BATCHES} batches of {BATCH}; fastest, p50 and p99 of the batch means)"
    );
    println!("| measurement | fastest batch | p50 | p99 |");
    println!("|---|---|---|---|");
    let row = |what: &str, s: &Stats| {
        println!(
            "| {what} | {} | {} | {} |",
            fmt(s.min),
            fmt(s.p50),
            fmt(s.p99)
        );
    };
    row("bare `Engine::decide`", &bare);
    row(
        "`Gateway::call` (whole chain, no-op handler, discarding sink)",
        &chain,
    );
    row("`Gateway::call_with` a run, budgets on", &chain_run);
    println!(
        "| **overhead above the decision** (chain - bare) | {} | **{}** | |",
        fmt(chain.min.saturating_sub(bare.min)),
        fmt(chain.p50.saturating_sub(bare.p50))
    );
    println!(
        "| overhead with a run and budgets | {} | {} | |",
        fmt(chain_run.min.saturating_sub(bare.min)),
        fmt(chain_run.p50.saturating_sub(bare.p50))
    );
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn action(i: usize, now: i64) -> Action {
    Action {
        action_id: format!("bench-{i:06}"),
        key: format!("key-{i:06}"),
        tenant: "default".to_owned(),
        requester: "ada".to_owned(),
        requester_identity: "token:person:ada".to_owned(),
        requester_kind: "human".to_owned(),
        op: "files.write".to_owned(),
        op_version: "v1".to_owned(),
        tier: "confirm".to_owned(),
        reason: "bench".to_owned(),
        args: format!(r#"{{"content":"x","path":"/data/{i}"}}"#),
        state: ActionState::Pending,
        created_ms: now,
        expires_ms: now + 3_600_000,
        decided_ms: None,
        decided_by: None,
        outcome: None,
    }
}

/// Part 2: `consume` of `CONSUMES` approved actions, one at a time.
async fn consume_latency(store: &dyn ConfirmationStore) -> Stats {
    let now = now_ms();
    for i in 0..CONSUMES {
        let a = action(i, now);
        assert_eq!(
            store.raise(&a, now, u64::MAX).await.unwrap(),
            corral_guard::confirm::Raised::Raised
        );
        assert!(store.decide(&a.action_id, true, "ada", now).await.unwrap());
    }
    let mut took = Vec::with_capacity(CONSUMES);
    for i in 0..CONSUMES {
        let key = format!("key-{i:06}");
        let t = Instant::now();
        let got = store.consume(&key, now).await.unwrap();
        took.push(t.elapsed());
        assert!(got.is_some(), "{key} was approved");
    }
    stats(took)
}

/// A throwaway schema of the PostgreSQL server at `server`, and a store on it.
struct PgSchema {
    conn: sqlx::postgres::PgConnection,
    name: String,
}

impl PgSchema {
    async fn create(server: &str, prefix: &str) -> (corral_store::Store, PgSchema) {
        use sqlx::{Connection, Executor};
        let name = format!("{prefix}_{}", std::process::id());
        let mut conn = sqlx::postgres::PgConnection::connect(server).await.unwrap();
        conn.execute(format!("CREATE SCHEMA {name}").as_str())
            .await
            .unwrap();
        let mut url = url::Url::parse(server).unwrap();
        url.query_pairs_mut()
            .append_pair("options[search_path]", &name);
        let store = corral_store::Store::connect(url.as_str()).await.unwrap();
        (store, PgSchema { conn, name })
    }

    async fn drop(mut self) {
        use sqlx::Executor;
        self.conn
            .execute(format!("DROP SCHEMA {} CASCADE", self.name).as_str())
            .await
            .unwrap();
    }
}

async fn consume_benches() {
    println!();
    println!("## confirmation consume ({CONSUMES} approved actions, consumed one at a time)");
    println!("| store | p50 | p99 |");
    println!("|---|---|---|");
    let dir = tempfile::tempdir().unwrap();
    let sqlite = corral_store::Store::connect(&corral_store::Store::default_sqlite_url(dir.path()))
        .await
        .unwrap();
    let s = consume_latency(&sqlite).await;
    println!(
        "| SQLite (`{}`, WAL, synchronous=FULL) | {} | {} |",
        dir.path().display(),
        fmt(s.p50),
        fmt(s.p99)
    );
    sqlite.close().await;

    let Ok(server) = std::env::var("CORRAL_TEST_POSTGRES_URL") else {
        println!("| PostgreSQL | skipped: `CORRAL_TEST_POSTGRES_URL` is unset | |");
        return;
    };
    let (pg, schema) = PgSchema::create(&server, "corral_bench").await;
    let s = consume_latency(&pg).await;
    println!(
        "| PostgreSQL (local, `DELETE ... RETURNING` in one statement) | {} | {} |",
        fmt(s.p50),
        fmt(s.p99)
    );
    pg.close().await;
    schema.drop().await;
}

/// Part 3: a run's call, not recorded and recorded into `store`; per-call p50 of the batches.
async fn recording_overhead(name: &str, store: corral_store::Store) {
    const REC_BATCH: usize = 100;
    const REC_BATCHES: usize = 40;
    let live = Gateway::new(
        deployment(false),
        Arc::new(ProcessBackend::new()),
        vec![Arc::new(Discard)],
        "default",
    );
    let recorded = Gateway::new(
        deployment(false),
        Arc::new(ProcessBackend::new()),
        vec![Arc::new(Discard)],
        "default",
    )
    .with_recorder(Arc::new(corral_store::RecordingWriter::spawn(&store)));
    let (mut plain, mut rec) = (Vec::new(), Vec::new());
    for b in 0..REC_BATCHES + 4 {
        let run = format!("bench-{b}");
        let t = Instant::now();
        for _ in 0..REC_BATCH {
            let mut c = call();
            c.caller = c.caller.with_run(Some(run.clone()));
            black_box(live.call(c).await);
        }
        let plain_t = t.elapsed();
        let t = Instant::now();
        for _ in 0..REC_BATCH {
            let mut c = call();
            c.caller = c.caller.with_run(Some(run.clone())).with_record(true);
            black_box(recorded.call(c).await);
        }
        let rec_t = t.elapsed();
        if b >= 4 {
            plain.push(plain_t / REC_BATCH as u32);
            rec.push(rec_t / REC_BATCH as u32);
        }
    }
    let r = store
        .recordings_of_run("default", "bench-4", 1)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(r.events, REC_BATCH as u64, "every call was recorded");
    let (plain, rec) = (stats(plain), stats(rec));
    println!(
        "| {name} | {} | {} | {} | {:.1}x |",
        fmt(plain.p50),
        fmt(rec.p50),
        fmt(rec.p50.saturating_sub(plain.p50)),
        rec.p50.as_secs_f64() / plain.p50.as_secs_f64()
    );
}

async fn recording_benches() {
    println!("## recording overhead, per call of a run (p50 of batch means)");
    println!("| store | not recorded | recorded | overhead | ratio |");
    println!("|---|---|---|---|---|");
    let dir = tempfile::tempdir().unwrap();
    let sqlite = corral_store::Store::connect(&corral_store::Store::default_sqlite_url(dir.path()))
        .await
        .unwrap();
    recording_overhead("SQLite (WAL, synchronous=FULL)", sqlite).await;
    if let Ok(server) = std::env::var("CORRAL_TEST_POSTGRES_URL") {
        // A fresh schema: the run ids of an earlier bench must not add to these.
        let (pg, schema) = PgSchema::create(&server, "corral_rec_bench").await;
        recording_overhead("PostgreSQL", pg.clone()).await;
        pg.close().await;
        schema.drop().await;
    }
}

fn main() {
    if std::env::var("GUARD_BENCH_ONLY").is_ok_and(|v| v == "recording") {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(recording_benches());
        return;
    }
    chain_overhead();
    if std::env::var("GUARD_BENCH_ONLY").is_ok_and(|v| v == "chain") {
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(consume_benches());
}
