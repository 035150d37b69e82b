//! A comparison's workers (`workers`, 1 to 8): the runs execute on that many tasks at once and
//! the result does not depend on it; the pool under it starts jobs in order, answers in order
//! and finishes every job it started.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use corral_exec::BoxFuture;
use corral_exec::mock::MockBackend;
use corral_guard::audit::{AuditError, AuditEvent, AuditSink};
use corral_guard::{Caller, Gateway};
use corral_lab::pool;
use corral_lab::service::{CompareBody, LabService, PageQuery, ScenarioBody, VariantBody};
use corral_policy::Principal;
use corral_store::Store;
use corral_store::lab::RunStatus;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::support;

/// An audit sink that, once armed, holds every event until released.
#[derive(Debug)]
struct Gate {
    armed: AtomicBool,
    arrived: Semaphore,
    release: Semaphore,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            armed: AtomicBool::new(false),
            arrived: Semaphore::new(0),
            release: Semaphore::new(0),
        }
    }
}

impl AuditSink for Gate {
    fn append<'a>(&'a self, _event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async move {
            if self.armed.load(Ordering::Acquire) {
                self.arrived.add_permits(1);
                if let Ok(p) = self.release.acquire().await {
                    p.forget();
                }
            }
            Ok(())
        })
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    lab: LabService,
    gate: Arc<Gate>,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        Store::connect(&Store::default_sqlite_url(dir.path()))
            .await
            .unwrap(),
    );
    let gate = Arc::new(Gate::default());
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let gateway = Arc::new(Gateway::new(
        support::deployment(&support::config(&root), &root),
        Arc::new(MockBackend::default()),
        vec![gate.clone() as Arc<dyn AuditSink>],
        "default",
    ));
    let lab = LabService::new(store.clone(), gateway, true);
    Fixture {
        _dir: dir,
        store,
        lab,
        gate,
    }
}

fn olga() -> Caller {
    Caller::new(Principal::new("olga", &["operator"]))
}

/// A workflow that asks for `user:<input>`.
const PREFIXED: &str = "name: prefixed\nversion: 2\nsteps:\n  - op: scenario.resource\n    args: {resource: \"user:{{input}}\"}\n    as: r\noutput: \"{{steps.r.response}}\"\n";

/// 14 scenarios of two steps: the candidate (which asks for `user:<input>`) answers every step
/// right; the identity baseline only where the plain input is mocked right too (one scenario
/// in three, and the first step of the others).
async fn scenarios(lab: &LabService) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..14 {
        let right = |s: &str| format!("value {s}");
        let plain = if i % 3 == 0 {
            right(&format!("{i}b"))
        } else {
            "something else".to_owned()
        };
        let s = lab
            .create_scenario(
                &olga(),
                "rid",
                ScenarioBody {
                    name: format!("lookup {i}"),
                    steps: Some(json!([
                        {"input": format!("k{i}a"), "expected": right(&format!("{i}a"))},
                        {"input": format!("k{i}b"), "expected": right(&format!("{i}b"))},
                    ])),
                    mocks: Some(json!([
                        {"resource": format!("user:k{i}a"), "response": right(&format!("{i}a"))},
                        {"resource": format!("user:k{i}b"), "response": right(&format!("{i}b"))},
                        {"resource": format!("k{i}a"), "response": right(&format!("{i}a"))},
                        {"resource": format!("k{i}b"), "response": plain},
                    ])),
                    ..ScenarioBody::default()
                },
            )
            .await
            .unwrap();
        ids.push(s.id);
    }
    ids
}

fn body(ids: &[String], workers: Option<u32>) -> CompareBody {
    CompareBody {
        baseline: VariantBody {
            variant: "identity".to_owned(),
            workflow: None,
            program: None,
        },
        candidate: VariantBody {
            variant: "prefixed".to_owned(),
            workflow: Some(PREFIXED.to_owned()),
            program: None,
        },
        scenarios: ids.to_vec(),
        seed: Some(11),
        scorer: Some("exact".to_owned()),
        workers,
        ..CompareBody::default()
    }
}

/// Every output of a run, as the user reads them, without the run's id and times.
async fn outputs(lab: &LabService, run: &str) -> Value {
    let items = lab.outputs(&olga(), "rid", run).await.unwrap();
    json!(
        items
            .iter()
            .map(|o| json!([
                o.step,
                o.trial,
                o.input,
                o.output,
                o.ok,
                o.error_code,
                o.score,
                o.pass
            ]))
            .collect::<Vec<_>>()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_and_three_workers_give_the_same_verdict_statistics_and_run_outputs() {
    let f = fixture().await;
    let ids = scenarios(&f.lab).await;
    let one = f
        .lab
        .compare(&olga(), "r1", body(&ids, Some(1)))
        .await
        .unwrap();
    let three = f
        .lab
        .compare(&olga(), "r3", body(&ids, Some(3)))
        .await
        .unwrap();
    let default = f
        .lab
        .compare(&olga(), "rd", body(&ids, None))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(one.record.verdict).unwrap(),
        "improved"
    );
    assert!(one.record.forced_by.is_none(), "{:?}", one.record.forced_by);
    for other in [&three, &default] {
        assert_eq!(other.record.verdict, one.record.verdict);
        assert_eq!(other.record.delta, one.record.delta);
        assert_eq!(
            (other.record.lower, other.record.upper),
            (one.record.lower, one.record.upper)
        );
        assert_eq!(other.record.mcnemar_p, one.record.mcnemar_p);
        assert_eq!(other.record.wilson, one.record.wilson);
        assert_eq!(other.record.details, one.record.details);
        assert_eq!(other.record.scenarios, ids);
    }
    // Per scenario, in request order: each side's run is of that scenario, and its outputs are
    // byte for byte those of the same run with one worker.
    for (a, b) in [
        (&one.record.baseline, &three.record.baseline),
        (&one.record.candidate, &three.record.candidate),
    ] {
        assert_eq!(a.run_ids.len(), ids.len());
        assert_eq!(b.run_ids.len(), ids.len());
        for ((ra, rb), id) in a.run_ids.iter().zip(&b.run_ids).zip(&ids) {
            let (x, y) = (
                f.lab.get_run(&olga(), "rid", ra).await.unwrap(),
                f.lab.get_run(&olga(), "rid", rb).await.unwrap(),
            );
            assert_eq!((&x.scenario_id, &y.scenario_id), (id, id));
            assert_eq!((x.seed, x.variant.as_str()), (y.seed, y.variant.as_str()));
            assert_eq!(x.status, RunStatus::Completed);
            assert_eq!(y.status, RunStatus::Completed);
            assert_eq!(outputs(&f.lab, ra).await, outputs(&f.lab, rb).await);
        }
    }
    f.store.close().await;
}

#[tokio::test]
async fn a_workers_count_of_0_or_over_8_is_refused_and_nothing_runs() {
    let f = fixture().await;
    let ids = scenarios(&f.lab).await;
    for w in [0, 9] {
        let e = f
            .lab
            .compare(&olga(), "rid", body(&ids, Some(w)))
            .await
            .unwrap_err();
        assert_eq!(e.code, "args.invalid");
        assert!(
            e.message
                .contains(&format!("`workers` is {w}; ask for 1 to 8")),
            "{}",
            e.message
        );
    }
    let runs = f
        .lab
        .list_runs(&olga(), "rid", None, &PageQuery::default())
        .await
        .unwrap();
    assert!(runs.items.is_empty(), "{:?}", runs.items);
    f.store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comparison_dropped_mid_run_still_finishes_every_run_it_started() {
    let f = fixture().await;
    let ids = scenarios(&f.lab).await;
    // Every audited call now waits: the comparison is dropped while its first runs are on a call.
    f.gate.armed.store(true, Ordering::Release);
    let caller = olga();
    tokio::select! {
        r = f.lab.compare(&caller, "rid", body(&ids, None)) => panic!("the comparison ended while its calls were held: {r:?}"),
        p = f.gate.arrived.acquire() => p.unwrap().forget(),
    }
    f.gate.armed.store(false, Ordering::Release);
    f.gate.release.add_permits(Semaphore::MAX_PERMITS / 2);
    // The runs that started finish on their own; none is left `running` (bounded wait).
    let mut left = usize::MAX;
    for _ in 0..3000 {
        let runs = f
            .lab
            .list_runs(&olga(), "rid", None, &PageQuery::default())
            .await
            .unwrap()
            .items;
        assert!(!runs.is_empty(), "the comparison started a run");
        left = runs
            .iter()
            .filter(|r| r.status == RunStatus::Running)
            .count();
        if left == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        left, 0,
        "runs left `running` after the comparison was dropped"
    );
    f.store.close().await;
}

#[tokio::test]
async fn the_pool_answers_in_job_order_with_at_most_workers_jobs_at_once() {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let r: Result<Vec<usize>, String> = pool::in_order(
        0..20,
        3,
        |j| {
            let (in_flight, most) = (in_flight.clone(), most.clone());
            async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Later jobs finish sooner: the answer is still in job order.
                for _ in 0..(20 - j) {
                    tokio::task::yield_now().await;
                }
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok(j * 10)
            }
        },
        |e| e.to_string(),
    )
    .await;
    assert_eq!(r.unwrap(), (0..20).map(|j| j * 10).collect::<Vec<_>>());
    assert_eq!(most.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn the_pool_answers_the_first_error_in_job_order_and_finishes_what_it_started() {
    let started = Arc::new(Mutex::new(Vec::new()));
    let finished = Arc::new(Mutex::new(Vec::new()));
    let later_failed = Arc::new(tokio::sync::Notify::new());
    // Bounded: a pool that ran one job at a time would wait on job 2 forever.
    let r: Result<Vec<usize>, String> = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        pool::in_order(
            0..50,
            3,
            |j| {
                let (started, finished, later_failed) =
                    (started.clone(), finished.clone(), later_failed.clone());
                started.lock().unwrap().push(j);
                async move {
                    let r = match j {
                        // Job 2 fails only after job 4 has failed: 4 fails first in time.
                        2 => {
                            later_failed.notified().await;
                            Err("job 2 failed".to_owned())
                        }
                        4 => {
                            later_failed.notify_one();
                            Err("job 4 failed".to_owned())
                        }
                        j => Ok(j),
                    };
                    finished.lock().unwrap().push(j);
                    r
                }
            },
            |e| e.to_string(),
        ),
    )
    .await
    .expect("the jobs ran at once");
    assert_eq!(r.unwrap_err(), "job 2 failed");
    let (mut started, mut finished) = (
        started.lock().unwrap().clone(),
        finished.lock().unwrap().clone(),
    );
    // Started in order, a prefix of the jobs, and no job started after the failures.
    assert_eq!(started, (0..started.len()).collect::<Vec<_>>());
    assert!(started.len() < 50, "started {started:?}");
    started.sort_unstable();
    finished.sort_unstable();
    assert_eq!(finished, started, "every started job finished");
}
