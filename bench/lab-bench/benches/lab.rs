//! `lab-bench`: how many mock steps a core runs through the lab's full call path.
//!
//! Every mode runs on one tokio thread (`current_thread`), `IN_FLIGHT` runs at once, each call
//! through `Gateway::call_with` (resolve, arguments, autonomy, RBAC, the policy decision,
//! limits, run budgets, execute, audit) with the audit committed by the store's SQLite writer
//! thread (WAL, `synchronous=FULL`) before the call returns:
//!
//! - **identity**: runs of the identity agent, `STEPS` steps each, every step mocked
//!   (one `scenario.resource` call per step), a fresh world per run;
//! - **workflow**: runs of a 5-call declarative workflow (`files.read`, `files.stat`,
//!   `files.list`, `files.read`, `files.stat`, arguments templated from the input and earlier
//!   answers), `STEPS / 5` steps each, so both modes make the same number of calls;
//! - **anchor**: the same number of plain `Gateway::call_with` calls of `core.health` (its real,
//!   trivial handler) on an ordinary gateway, same concurrency, same audit: what any call costs,
//!   so the ratio is the lab's own overhead per call.
//!
//! Each mode also runs with an audit sink that discards events, to split the lab's own cost
//! from the audit's. Figures: steps/s of wall time, and steps per CPU-second of the whole
//! process (the tokio thread plus the audit writer thread: "per core"), from `/proc/self/stat`.
//! Rounds are interleaved; medians are printed. Plus the cost of building one world.
//!
//! `cargo bench -p lab-bench` (optimized). `bench/RESULTS.md` keeps the figures.
//!
//! `cargo bench -p lab-bench -- compare` runs the other mode instead, issue 14's "a 10 variants
//! x 100 scenarios comparison's wall time with 1 and 2 workers": 100 scenarios of 5 mocked steps
//! created through `LabService` on SQLite in a temp dir (the audit by the store's writer), and
//! 10 variants, the identity agent as the baseline and 9 five-call declarative workflows
//! differing in their answers, run as 9 comparisons of a candidate against that baseline (each
//! comparison runs the baseline and the candidate on all 100 scenarios: 200 runs, 1000 steps,
//! 3000 op calls), through `LabService::compare`, the path HTTP uses, on a 2-thread tokio
//! runtime. The 9 comparisons run with `workers: 1`, then with `workers: 2`, in interleaved
//! rounds; wall time and process CPU time per round, medians, and a check that both give the
//! same verdicts.

// A benchmark harness: a broken fixture should abort loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use corral_exec::BoxFuture;
use corral_exec::mock::MockBackend;
use corral_guard::audit::{AuditError, AuditEvent, AuditSink};
use corral_guard::guardrails::GuardPolicy;
use corral_guard::{Call, CallOptions, Caller, Deployment, Gateway, Reply};
use corral_lab::agent::{Agent, Identity};
use corral_lab::runner::run_scenario;
use corral_lab::scenario::Scenario;
use corral_lab::service::{CompareBody, LabService, ReplayBody, ScenarioBody, VariantBody};
use corral_lab::workflow::Workflow;
use corral_lab::world::Lab;
use corral_ops::health::Health;
use corral_ops::{Op, Registry};
use corral_policy::scope::{PathScope, PathScopeSpec};
use corral_policy::{Catalog, Engine, Policy, Principal, Rule, Selector};
use serde_json::json;

const RUNS: usize = 200;
const STEPS: usize = 50;
const IN_FLIGHT: usize = 64;
const ROUNDS: usize = 5;
const ROOT: &str = "/data/u0";

#[derive(Debug)]
struct Discard;

impl AuditSink for Discard {
    fn append<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        std::hint::black_box(event);
        Box::pin(std::future::ready(Ok(())))
    }
}

fn deployment() -> Deployment {
    let catalog = Catalog::builtin();
    let scope = PathScope::compile(PathScopeSpec {
        roots: vec![ROOT.to_owned()],
        deny: vec!["*.secret".to_owned()],
        ..PathScopeSpec::default()
    })
    .unwrap();
    let policy = Policy::new().rule(
        Rule::allow(
            "reader",
            vec![
                Selector::parse("files.read", &catalog).unwrap(),
                Selector::parse("files.stat", &catalog).unwrap(),
                Selector::parse("files.list", &catalog).unwrap(),
            ],
        )
        .paths(scope),
    );
    let health = catalog.get("core.health").unwrap().clone();
    let registry = Registry::new(
        catalog.clone(),
        vec![Arc::new(Health::new(health)) as Arc<dyn Op>],
    );
    Deployment {
        engine: Engine::new(catalog, policy),
        registry,
        protected: Vec::new(),
        guard: GuardPolicy::new(),
    }
}

fn identity_scenario() -> Scenario {
    let steps: Vec<_> = (0..STEPS)
        .map(|i| json!({"input": format!("agent:user{i}@example.test")}))
        .collect();
    let mocks: Vec<_> = (0..STEPS)
        .map(|i| json!({"resource": format!("agent:user{i}@example.test"), "response": format!("account {i}")}))
        .collect();
    Scenario::from_json(&json!({"name": "identity", "steps": steps, "mocks": mocks})).unwrap()
}

const WORKFLOW: &str = r#"name: bench
version: 1
steps:
  - op: files.read
    args: {path: "/data/u0/{{input}}.json"}
    as: account
  - op: files.stat
    args: {path: "/data/u0/{{steps.account.content}}"}
    as: stat
  - op: files.list
    args: {path: "/data/u0/{{steps.account.content}}"}
    as: list
  - op: files.read
    args: {path: "/data/u0/{{steps.account.content}}/{{steps.list.entries.0}}"}
    as: note
  - op: files.stat
    args: {path: "/data/u0/{{input}}.json"}
output: "{{steps.note.content}} ({{steps.stat.size}} bytes)"
"#;

fn workflow_scenario() -> Scenario {
    let n = STEPS / 5;
    let steps: Vec<_> = (0..n).map(|i| json!({"input": format!("u{i}")})).collect();
    let mut mocks = Vec::new();
    for i in 0..n {
        let p = |s: String| json!({"path": format!("{ROOT}/{s}")});
        mocks.push(json!({"op": "files.read", "args": p(format!("u{i}.json")), "response": {"content": format!("d{i}")}}));
        mocks.push(json!({"op": "files.stat", "args": p(format!("d{i}")), "response": {"size": 4096, "kind": "dir"}}));
        mocks.push(json!({"op": "files.list", "args": p(format!("d{i}")), "response": {"entries": ["note.txt"]}}));
        mocks.push(json!({"op": "files.read", "args": p(format!("d{i}/note.txt")), "response": {"content": format!("note {i}")}}));
        mocks.push(json!({"op": "files.stat", "args": p(format!("u{i}.json")), "response": {"size": 10, "kind": "file"}}));
    }
    Scenario::from_json(&json!({"name": "workflow", "steps": steps, "mocks": mocks})).unwrap()
}

/// CPU time of the whole process so far (user + system), from `/proc/self/stat`.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // Fields 14 and 15 of the file (utime, stime), 12 and 13 after the command.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10) // CLK_TCK is 100 on Linux.
}

struct Figure {
    steps: usize,
    calls: usize,
    wall: Duration,
    cpu: Duration,
}

async fn lab_mode(
    lab: Arc<Lab>,
    scenario: Arc<Scenario>,
    agent: Arc<dyn Agent>,
    tag: String,
) -> Figure {
    let next = Arc::new(AtomicUsize::new(0));
    let (c0, t0) = (cpu(), Instant::now());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..IN_FLIGHT {
        let (lab, scenario, agent, next, tag) = (
            lab.clone(),
            scenario.clone(),
            agent.clone(),
            next.clone(),
            tag.clone(),
        );
        tasks.spawn(async move {
            let mut steps = 0;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= RUNS {
                    return steps;
                }
                let world = lab
                    .world(&scenario, &format!("{tag}-{i}"), Principal::new("ada", &[]))
                    .unwrap();
                let r = run_scenario(world, agent.as_ref(), 1, 1).await;
                assert_eq!(r.steps_ok, r.steps_total, "{:?}", r.agent_errors.first());
                steps += r.steps_total;
            }
        });
    }
    let mut steps = 0;
    while let Some(n) = tasks.join_next().await {
        steps += n.unwrap();
    }
    Figure {
        steps,
        calls: 0,
        wall: t0.elapsed(),
        cpu: cpu() - c0,
    }
}

async fn anchor_mode(gateway: Arc<Gateway>, calls: usize, tag: String) -> Figure {
    let next = Arc::new(AtomicUsize::new(0));
    let (c0, t0) = (cpu(), Instant::now());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..IN_FLIGHT {
        let (gateway, next, tag) = (gateway.clone(), next.clone(), tag.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= calls {
                    return;
                }
                let call = Call {
                    caller: Caller::new(Principal::new("ada", &[])),
                    op: "core.health".to_owned(),
                    args: json!({}),
                    request_id: format!("{tag}-{i}"),
                };
                let r = gateway.call_with(call, CallOptions::default()).await;
                assert!(matches!(r, Reply::Json(_)));
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    Figure {
        steps: calls,
        calls,
        wall: t0.elapsed(),
        cpu: cpu() - c0,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    if std::env::args().skip(1).any(|a| a == "replay") {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(replay_mode());
        return;
    }
    if std::env::args().skip(1).any(|a| a == "compare") {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(compare_mode());
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(throughput());
}

const CMP_SCENARIOS: usize = 100;
const CMP_STEPS: usize = 5;
const CMP_CANDIDATES: usize = 9;
/// Rounds of the compare mode (`LAB_BENCH_ROUNDS` overrides it, e.g. 1 under `strace`).
fn cmp_rounds() -> usize {
    std::env::var("LAB_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// Candidate `k`'s workflow: the five calls of `WORKFLOW`, answering the note (the expected
/// answer), the note with a suffix (never right), or the directory's first entry.
fn candidate(k: usize) -> String {
    let output = match k % 3 {
        0 => "{{steps.note.content}}".to_owned(),
        1 => format!("{{{{steps.note.content}}}} (v{k})"),
        _ => "{{steps.list.entries.0}}".to_owned(),
    };
    let head = WORKFLOW.rsplit_once("output:").unwrap().0;
    format!("{head}output: \"{output}\"\n").replace("name: bench", &format!("name: cand{k}"))
}

/// Scenario `i`: 5 steps; the identity baseline's mocked answer is right in 3 steps of 4, the
/// workflows' note file always; a step's expected answer is its note.
fn compare_scenario(i: usize) -> ScenarioBody {
    let mut steps = Vec::new();
    let mut mocks = Vec::new();
    for j in 0..CMP_STEPS {
        let u = format!("u{i}-{j}");
        let note = format!("note {i}-{j}");
        steps.push(json!({"input": u, "expected": note}));
        let identity = if (i + j).is_multiple_of(4) {
            format!("old {i}-{j}")
        } else {
            note.clone()
        };
        mocks.push(json!({"resource": u, "response": identity}));
        let p = |s: String| json!({"path": format!("{ROOT}/{s}")});
        let d = format!("d{i}-{j}");
        let list = if i.is_multiple_of(2) {
            "note.txt".to_owned()
        } else {
            note.clone()
        };
        mocks.push(
            json!({"op": "files.read", "args": p(format!("{u}.json")), "response": {"content": d}}),
        );
        mocks.push(json!({"op": "files.stat", "args": p(d.clone()), "response": {"size": 4096, "kind": "dir"}}));
        mocks.push(
            json!({"op": "files.list", "args": p(d.clone()), "response": {"entries": [list]}}),
        );
        mocks.push(json!({"op": "files.read", "args": p(format!("{d}/{list}")), "response": {"content": note}}));
        mocks.push(json!({"op": "files.stat", "args": p(format!("{u}.json")), "response": {"size": 10, "kind": "file"}}));
    }
    ScenarioBody {
        name: format!("bench {i}"),
        steps: Some(json!(steps)),
        mocks: Some(json!(mocks)),
        ..ScenarioBody::default()
    }
}

async fn compare_mode() {
    let dir = tempfile::tempdir().unwrap();
    let store = corral_store::Store::connect(&corral_store::Store::default_sqlite_url(dir.path()))
        .await
        .unwrap();
    let sqlite: Arc<dyn AuditSink> = Arc::new(corral_store::AuditWriter::spawn(store.clone()));
    // `LAB_BENCH_AUDIT=discard`: the events are dropped, so only the run records are written.
    let discard = std::env::var("LAB_BENCH_AUDIT").is_ok_and(|v| v == "discard");
    let sink: Arc<dyn AuditSink> = if discard {
        Arc::new(Discard)
    } else {
        sqlite.clone()
    };
    println!(
        "audit: {}",
        if discard {
            "discarded"
        } else {
            "SQLite (the store's writer)"
        }
    );
    let gateway = Arc::new(Gateway::new(
        deployment(),
        Arc::new(MockBackend::default()),
        vec![sink],
        "default",
    ));
    let lab = LabService::new(Arc::new(store.clone()), gateway, true);
    let olga = Caller::new(Principal::new("olga", &["operator"]));
    let mut ids = Vec::new();
    for i in 0..CMP_SCENARIOS {
        let s = lab
            .create_scenario(&olga, &format!("s{i}"), compare_scenario(i))
            .await
            .unwrap();
        ids.push(s.id);
    }
    let body = |k: usize, workers: u32| CompareBody {
        baseline: VariantBody {
            variant: "identity".to_owned(),
            workflow: None,
            program: None,
        },
        candidate: VariantBody {
            variant: format!("cand{k}"),
            workflow: Some(candidate(k)),
            program: None,
        },
        scenarios: ids.clone(),
        seed: Some(7),
        scorer: Some("exact".to_owned()),
        workers: Some(workers),
        ..CompareBody::default()
    };
    // `LAB_BENCH_WORKERS=2` runs one setting only (to profile it).
    let only: Option<u32> = std::env::var("LAB_BENCH_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut walls: Vec<(u32, Vec<f64>, Vec<f64>)> = [1, 2]
        .into_iter()
        .filter(|w| only.is_none_or(|o| o == *w))
        .map(|w| (w, vec![], vec![]))
        .collect();
    let mut verdicts: Vec<(u32, Vec<String>)> = Vec::new();
    let mut steps = 0;
    for round in 0..cmp_rounds() {
        for (workers, wall, cpus) in walls.iter_mut() {
            let (c0, t0) = (cpu(), Instant::now());
            let mut v = Vec::new();
            steps = 0;
            for k in 1..=CMP_CANDIDATES {
                let c = lab
                    .compare(&olga, &format!("c{round}-{workers}-{k}"), body(k, *workers))
                    .await
                    .unwrap();
                v.push(format!("{:?} {:+.3}", c.record.verdict, c.record.delta));
                steps += 2 * CMP_SCENARIOS * CMP_STEPS;
            }
            wall.push(t0.elapsed().as_secs_f64());
            cpus.push((cpu() - c0).as_secs_f64());
            verdicts.push((*workers, v));
        }
    }
    let first = &verdicts[0].1;
    for (w, v) in &verdicts {
        assert_eq!(v, first, "workers {w} gave other verdicts");
    }
    println!(
        "{CMP_CANDIDATES} comparisons (identity baseline vs 9 workflows) x {CMP_SCENARIOS} scenarios x {CMP_STEPS} steps: {steps} steps and {} runs per round, {} interleaved rounds, medians",
        2 * CMP_CANDIDATES * CMP_SCENARIOS,
        cmp_rounds()
    );
    println!(
        "verdicts (the same with 1 and 2 workers): {}",
        first.join(", ")
    );
    println!("| workers | wall time of the 9 comparisons | steps/s (wall) | CPU time (process) |");
    println!("|---|---|---|---|");
    let base = median(walls[0].1.clone());
    for (workers, wall, cpus) in walls {
        let w = median(wall.clone());
        println!(
            "| {workers} | {w:.2} s (rounds: {}) | {:.0} | {:.2} s |",
            wall.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
            steps as f64 / w,
            median(cpus)
        );
        if workers == 2 && only.is_none() {
            println!("speed-up of 2 workers over 1: {:.2}x", base / w);
        }
    }
    drop(lab);
    drop(sqlite);
    store.close().await;
}

async fn throughput() {
    let dir = tempfile::tempdir().unwrap();
    let store = corral_store::Store::connect(&corral_store::Store::default_sqlite_url(dir.path()))
        .await
        .unwrap();
    let sqlite: Arc<dyn AuditSink> = Arc::new(corral_store::AuditWriter::spawn(store.clone()));
    let discard: Arc<dyn AuditSink> = Arc::new(Discard);
    let base = deployment();
    let identity = Arc::new(identity_scenario());
    let flow = Arc::new(workflow_scenario());
    let wf: Arc<dyn Agent> = Arc::new(Workflow::from_yaml(WORKFLOW).unwrap());
    let id: Arc<dyn Agent> = Arc::new(Identity);

    // Building worlds: the lab once, then one world per run.
    let lab = Lab::new(&base, vec![discard.clone()], "default").unwrap();
    let t = Instant::now();
    for i in 0..10_000 {
        std::hint::black_box(
            lab.world(&identity, &format!("w{i}"), Principal::new("ada", &[]))
                .unwrap(),
        );
    }
    let per_world = t.elapsed() / 10_000;
    let t = Instant::now();
    for _ in 0..100 {
        std::hint::black_box(Lab::new(&base, vec![discard.clone()], "default").unwrap());
    }
    let per_lab = t.elapsed() / 100;
    println!("world: {per_world:?} per world (a lab: {per_lab:?}, once per deployment)");

    let calls = RUNS * STEPS;
    let mut results: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    let mut push = |name: &str, f: &Figure| {
        let wall = f.steps as f64 / f.wall.as_secs_f64();
        let core = f.steps as f64 / f.cpu.as_secs_f64().max(1e-3);
        match results.iter_mut().find(|(n, _, _)| n == name) {
            Some((_, w, c)) => {
                w.push(wall);
                c.push(core);
            }
            None => results.push((name.to_owned(), vec![wall], vec![core])),
        }
        let _ = f.calls;
    };
    for round in 0..ROUNDS {
        for (audit, sink) in [("sqlite", &sqlite), ("discard", &discard)] {
            let lab = Arc::new(Lab::new(&base, vec![sink.clone()], "default").unwrap());
            let f = lab_mode(
                lab.clone(),
                identity.clone(),
                id.clone(),
                format!("id-{audit}-{round}"),
            )
            .await;
            push(&format!("identity ({audit} audit), steps"), &f);
            let f = lab_mode(
                lab.clone(),
                flow.clone(),
                wf.clone(),
                format!("wf-{audit}-{round}"),
            )
            .await;
            push(&format!("workflow 5 calls ({audit} audit), steps"), &f);
            let g = Arc::new(Gateway::new(
                deployment(),
                Arc::new(MockBackend::default()),
                vec![sink.clone()],
                "default",
            ));
            let f = anchor_mode(g, calls, format!("anchor-{audit}-{round}")).await;
            push(&format!("anchor core.health ({audit} audit), calls"), &f);
        }
    }
    println!(
        "{RUNS} runs x {STEPS} calls per mode, {IN_FLIGHT} runs in flight, {ROUNDS} interleaved rounds, medians"
    );
    println!("| mode | per s (wall) | per CPU-second (per core) |");
    println!("|---|---|---|");
    for (name, w, c) in results {
        println!("| {name} | {:.0} | {:.0} |", median(w), median(c));
    }
    drop(sqlite);
    store.close().await;
}

/// Steps of the recording the replay mode plays back.
const REPLAY_STEPS: usize = 1000;

/// Issue 15's replay throughput: a 1,000-step lab run recorded (`sandbox.record_runs`), then,
/// in interleaved rounds through `LabService` on SQLite (the audit by the store's writer):
/// the anchor, the same scenario run again against its mocks (purpose `simulation`); the
/// recording's trajectory replayed (`replay`, no variant: 1,000 recorded calls re-issued, each
/// answered from the recording, every output compared); and the recorded task input re-run
/// under the identity variant against the recording. Steps/s of wall time and per CPU-second.
async fn replay_mode() {
    let dir = tempfile::tempdir().unwrap();
    let store = corral_store::Store::connect(&corral_store::Store::default_sqlite_url(dir.path()))
        .await
        .unwrap();
    let sink: Arc<dyn AuditSink> = Arc::new(corral_store::AuditWriter::spawn(store.clone()));
    let store = Arc::new(store);
    let gateway = Arc::new(
        Gateway::new(
            deployment(),
            Arc::new(MockBackend::default()),
            vec![sink],
            "default",
        )
        .with_recorder(Arc::new(corral_store::RecordingWriter::spawn(&store))),
    );
    let lab = LabService::new(store, gateway, true);
    let olga = Caller::new(Principal::new("olga", &["operator"]));
    let steps: Vec<_> = (0..REPLAY_STEPS)
        .map(|i| json!({"input": format!("agent:user{i}@example.test")}))
        .collect();
    let mocks: Vec<_> = (0..REPLAY_STEPS)
        .map(|i| json!({"resource": format!("agent:user{i}@example.test"), "response": format!("account {i}")}))
        .collect();
    let scenario = lab
        .create_scenario(
            &olga,
            "s",
            ScenarioBody {
                name: "recorded".to_owned(),
                steps: Some(json!(steps)),
                mocks: Some(json!(mocks)),
                ..ScenarioBody::default()
            },
        )
        .await
        .unwrap();
    let run_body = || corral_lab::service::RunBody {
        variant: "identity".to_owned(),
        workflow: None,
        program: None,
        seed: None,
        trials: None,
        scorer: None,
        isolation: None,
    };
    lab.set_record_runs(true);
    let recorded = lab
        .run(&olga, "rec", &scenario.id, run_body())
        .await
        .unwrap();
    lab.set_record_runs(false);
    let view = lab
        .get_recording(&olga, "get", &recorded.id, None)
        .await
        .unwrap();
    assert_eq!(view.events.len(), REPLAY_STEPS);
    let rounds = cmp_rounds().max(5);
    let modes = [
        "anchor: simulation run",
        "replay: trajectory",
        "replay: identity on the input",
    ];
    let mut wall = vec![Vec::new(); modes.len()];
    let mut per_cpu = vec![Vec::new(); modes.len()];
    for round in 0..rounds {
        for (m, _) in modes.iter().enumerate() {
            let (c0, t0) = (cpu(), Instant::now());
            let rid = format!("r{round}-{m}");
            let steps = match m {
                0 => {
                    lab.run(&olga, &rid, &scenario.id, run_body())
                        .await
                        .unwrap()
                        .steps_total
                }
                1 => {
                    let r = lab
                        .replay(&olga, &rid, &recorded.id, ReplayBody::default())
                        .await
                        .unwrap();
                    assert_eq!(r.identical, Some(true));
                    r.steps
                }
                _ => {
                    let body = ReplayBody {
                        variant: Some("identity".to_owned()),
                        ..ReplayBody::default()
                    };
                    let r = lab.replay(&olga, &rid, &recorded.id, body).await.unwrap();
                    assert!(r.divergences.is_empty());
                    r.steps
                }
            };
            assert_eq!(steps as usize, REPLAY_STEPS);
            let (w, c) = (t0.elapsed().as_secs_f64(), (cpu() - c0).as_secs_f64());
            wall[m].push(REPLAY_STEPS as f64 / w);
            per_cpu[m].push(REPLAY_STEPS as f64 / c);
        }
    }
    println!(
        "a {REPLAY_STEPS}-step recording, {rounds} interleaved rounds, medians (steps/s of wall time; steps per CPU-second)"
    );
    let anchor = median(wall[0].clone());
    for (m, name) in modes.iter().enumerate() {
        let w = median(wall[m].clone());
        println!(
            "{name:<32} {w:>10.0} steps/s  {:>10.0} steps/CPU-s  {:.2}x the anchor",
            median(per_cpu[m].clone()),
            w / anchor
        );
    }
}
