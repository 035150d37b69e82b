//! The lab's entities in the store (scenarios, runs, outputs, comparisons), each check run on
//! SQLite and on PostgreSQL: `lab::<check>::on_sqlite` and `lab::<check>::on_postgres`.

use std::sync::Arc;

use corral_store::Store;
use corral_store::lab::{
    ComparisonVerdict, Interval, LabStoreError, MAX_OUTPUT_BYTES, MAX_SCENARIO_BYTES, MockMiss,
    NewComparison, NewOutput, NewRun, Page, PageCursor, RunAttestation, RunError, RunResult,
    RunStatus, RunVerdict, ScenarioDraft, TrialPasses, VariantRuns, WilsonIntervals,
};
use serde_json::json;

use crate::postgres::Schema;

const A: &str = "acme";
const B: &str = "globex";

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
                let Some(schema) = Schema::create("lab").await else {
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

/// Spec 003's worked example, as a scenario.
fn worked_example() -> ScenarioDraft {
    ScenarioDraft {
        name: "synthetic accounts".to_owned(),
        description: "two generated inputs, one mocked\nsecond line kept, a NUL: \u{0}".to_owned(),
        steps: json!([
            {"input": "agent:user1@example.test", "expected": "first synthetic account"},
            {"input": "agent:user2@example.test"}
        ]),
        mocks: json!([
            {"resource": "agent:user1@example.test", "response": "first synthetic account"},
            {"op": "http.fetch", "args": {"url": "https://x.test/"}, "error": {"code": "op.error", "message": "down"}}
        ]),
    }
}

fn new_run(scenario_id: &str, scorer: Option<&str>) -> NewRun {
    NewRun {
        scenario_id: scenario_id.to_owned(),
        runner: "lab".to_owned(),
        backend: "inproc-mock".to_owned(),
        purpose: "simulation".to_owned(),
        variant: "identity".to_owned(),
        // Over i64::MAX: a u64 seed survives whole.
        seed: u64::MAX - 6,
        trials: Some(3),
        scorer_suite: scorer.map(str::to_owned),
        principal: "ada".to_owned(),
        identity: "token:ada".to_owned(),
    }
}

fn completed(score: Option<f64>, verdict: RunVerdict) -> RunResult {
    RunResult {
        status: RunStatus::Completed,
        isolated: true,
        destroyed: true,
        steps_total: 2,
        steps_ok: 1,
        steps_error: 1,
        infra_errors: 0,
        score,
        verdict,
        passes: None,
        error: None,
        mock_misses: vec![MockMiss {
            step: 2,
            op: "scenario.resource".to_owned(),
            args_hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
                .to_owned(),
        }],
        attestations: vec![RunAttestation {
            backend: "linux".to_owned(),
            isolated: true,
            destroyed: true,
            primitives: vec!["userns".to_owned(), "netns:corral-link".to_owned()],
        }],
    }
}

fn outputs() -> Vec<NewOutput> {
    vec![
        NewOutput {
            step: 1,
            trial: 1,
            input: "agent:user1@example.test".to_owned(),
            output: "first synthetic account".to_owned(),
            ok: true,
            error_code: None,
            score: Some(1.0),
            pass: Some(true),
        },
        NewOutput {
            step: 2,
            trial: 1,
            input: "agent:user2@example.test".to_owned(),
            output: "[[mock-miss:agent:user2@example.test]]".to_owned(),
            ok: false,
            error_code: Some("lab.mock_miss".to_owned()),
            // Not exactly representable: only an exact round trip gives it back.
            score: Some(0.1 + 0.2),
            pass: Some(false),
        },
        NewOutput {
            step: 1,
            trial: 2,
            input: "line one\nline two\u{0}\u{1F600}".to_owned(),
            output: String::new(),
            ok: false,
            error_code: None,
            score: None,
            pass: None,
        },
    ]
}

fn comparison(baseline: &[&str], candidate: &[&str]) -> NewComparison {
    let ids = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    NewComparison {
        baseline: VariantRuns {
            variant: "identity@1".to_owned(),
            run_ids: ids(baseline),
        },
        candidate: VariantRuns {
            variant: "workflow@2".to_owned(),
            run_ids: ids(candidate),
        },
        scenarios: vec!["s1".to_owned(), "s2".to_owned()],
        verdict: ComparisonVerdict::Inconclusive,
        delta: -0.05,
        lower: -1e-300,
        upper: 0.1 + 0.2,
        margin: 0.05,
        seed: u64::MAX,
        resamples: 10_000,
        forced_by: Some("fewer_than_10_scenarios".to_owned()),
        mcnemar_p: Some(1.0 / 3.0),
        wilson: Some(WilsonIntervals {
            baseline: Interval {
                lower: 0.2,
                upper: 0.9,
            },
            candidate: Interval {
                lower: 0.0,
                upper: 2.0_f64.sqrt() / 2.0,
            },
        }),
        details: json!({"per_scenario": [{"id": "s1", "diff": -0.1}, {"id": "s2", "diff": 0.0}]}),
        recorded_by: "admin-root".to_owned(),
        deploy: true,
    }
}

fn code(e: &LabStoreError) -> &'static str {
    e.code()
}

// ---------------------------------------------------------------------------------------------

/// Every entity comes back as it was written: a scenario (and its update), a run from start to
/// finish, its outputs, a comparison.
async fn every_entity_round_trips(store: &Store) {
    let draft = worked_example();
    let created = store.create_scenario(A, &draft, 1_000).await.unwrap();
    assert_eq!(created.version, 1);
    assert_eq!((created.created_ms, created.updated_ms), (1_000, 1_000));
    assert_eq!(
        uuid::Uuid::parse_str(&created.id)
            .unwrap()
            .get_version_num(),
        7
    );
    let got = store.get_scenario(A, &created.id).await.unwrap().unwrap();
    assert_eq!(got, created);
    assert_eq!(
        (got.steps.clone(), got.mocks.clone()),
        (draft.steps, draft.mocks)
    );

    let mut changed = worked_example();
    changed.name = "renamed".to_owned();
    changed.steps = json!([{"input": "only one"}]);
    changed.mocks = json!([]);
    let updated = store
        .update_scenario(A, &created.id, &changed, Some(1), 2_000)
        .await
        .unwrap();
    assert_eq!(updated.version, 2);
    assert_eq!((updated.created_ms, updated.updated_ms), (1_000, 2_000));
    assert_eq!(
        (updated.name.as_str(), &updated.steps),
        ("renamed", &changed.steps)
    );
    assert_eq!(
        store.get_scenario(A, &created.id).await.unwrap().unwrap(),
        updated
    );

    let run = store
        .create_run(A, &new_run(&created.id, Some("exact")), 3_000)
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.scenario_version, 2, "the version the run started on");
    assert!(
        !run.isolated && !run.destroyed,
        "nothing claimed before the attestation"
    );
    assert_eq!(run.verdict, RunVerdict::NotScored);
    assert_eq!(store.get_run(A, &run.id).await.unwrap().unwrap(), run);

    store
        .append_outputs(A, &run.id, &outputs(), 3_500)
        .await
        .unwrap();
    let stored = store.list_outputs(A, &run.id).await.unwrap();
    let want = outputs();
    assert_eq!(stored.len(), 3);
    for (got, want) in stored.iter().zip(&want) {
        assert_eq!(
            (got.run_id.as_str(), got.tenant.as_str()),
            (run.id.as_str(), A)
        );
        assert_eq!(got.created_ms, 3_500);
        assert_eq!(
            (got.step, got.trial, &got.input, &got.output, got.ok),
            (want.step, want.trial, &want.input, &want.output, want.ok)
        );
        assert_eq!(
            (&got.error_code, got.score, got.pass),
            (&want.error_code, want.score, want.pass)
        );
    }

    let mut result = completed(Some(0.5), RunVerdict::Failed);
    result.infra_errors = 1;
    result.error = Some(RunError {
        code: "store.unavailable".to_owned(),
        message: "audit sink down for one step \u{0} \"quoted\"".to_owned(),
    });
    let finished = store.finish_run(A, &run.id, &result, 4_000).await.unwrap();
    assert_eq!(finished.status, RunStatus::Completed);
    assert!(finished.isolated && finished.destroyed);
    assert_eq!(
        (
            finished.steps_total,
            finished.steps_ok,
            finished.steps_error,
            finished.infra_errors
        ),
        (2, 1, 1, 1)
    );
    assert_eq!(
        (finished.score, finished.verdict),
        (Some(0.5), RunVerdict::Failed)
    );
    assert_eq!(finished.error, result.error);
    assert_eq!(finished.mock_misses, result.mock_misses);
    assert_eq!(finished.attestations, result.attestations);
    assert_eq!(
        (finished.started_ms, finished.finished_ms),
        (3_000, Some(4_000))
    );
    assert_eq!(finished.seed, u64::MAX - 6);
    assert_eq!(finished.trials, Some(3));
    assert_eq!(finished.scorer_suite.as_deref(), Some("exact"));
    assert_eq!(store.get_run(A, &run.id).await.unwrap().unwrap(), finished);

    let other = store
        .create_run(A, &new_run(&created.id, None), 5_000)
        .await
        .unwrap();
    let other = store
        .finish_run(A, &other.id, &completed(None, RunVerdict::NotScored), 6_000)
        .await
        .unwrap();
    let new = comparison(&[&run.id], &[&other.id]);
    let recorded = store.append_comparison(A, &new, 7_000).await.unwrap();
    assert_eq!(recorded.created_ms, 7_000);
    assert_eq!(recorded.tenant, A);
    let got = store
        .get_comparison(A, &recorded.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, recorded);
    assert_eq!(got.record, new, "every field recorded comes back");
    assert_eq!(
        (got.record.delta, got.record.lower, got.record.upper),
        (-0.05, -1e-300, 0.1 + 0.2)
    );
    assert_eq!(
        (got.record.seed, got.record.mcnemar_p),
        (u64::MAX, Some(1.0 / 3.0))
    );
    assert!(got.record.deploy);
    // The wire form is one flat object: the recorded fields beside id, tenant and created_ms.
    let wire = serde_json::to_value(&got).unwrap();
    let mut keys: Vec<&str> = wire
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "baseline",
            "candidate",
            "created_ms",
            "delta",
            "deploy",
            "details",
            "forced_by",
            "id",
            "lower",
            "margin",
            "mcnemar_p",
            "recorded_by",
            "resamples",
            "scenarios",
            "seed",
            "tenant",
            "upper",
            "verdict",
            "wilson"
        ]
    );
    assert_eq!(wire["delta"], json!(-0.05));
    assert_eq!(wire["baseline"]["variant"], "identity@1");
    assert_eq!(
        serde_json::from_value::<corral_store::lab::Comparison>(wire).unwrap(),
        got,
        "and reads back as it was"
    );
    let page = store.list_comparisons(A, &Page::first(10)).await.unwrap();
    assert_eq!(page.items, vec![recorded]);
    assert_eq!(page.next, None);

    let runs = store
        .list_runs(A, Some(&created.id), &Page::first(10))
        .await
        .unwrap();
    assert_eq!(
        runs.items.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        [other.id.as_str(), run.id.as_str()]
    );
}
on_both!(every_entity_round_trips);

/// Tenant B sees none of tenant A's rows and changes none of them; A's rows are untouched.
async fn another_tenant_can_neither_read_nor_change_rows(store: &Store) {
    let scenario = store
        .create_scenario(A, &worked_example(), 1_000)
        .await
        .unwrap();
    let running = store
        .create_run(A, &new_run(&scenario.id, Some("exact")), 2_000)
        .await
        .unwrap();
    store
        .append_outputs(A, &running.id, &outputs()[..1], 2_100)
        .await
        .unwrap();
    let done = store
        .create_run(A, &new_run(&scenario.id, None), 2_500)
        .await
        .unwrap();
    let done = store
        .finish_run(A, &done.id, &completed(None, RunVerdict::NotScored), 2_600)
        .await
        .unwrap();
    let cmp = store
        .append_comparison(A, &comparison(&[&done.id], &[]), 3_000)
        .await
        .unwrap();

    // Reads.
    assert_eq!(store.get_scenario(B, &scenario.id).await.unwrap(), None);
    assert!(
        store
            .list_scenarios(B, None, &Page::first(10))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(store.get_run(B, &running.id).await.unwrap(), None);
    assert!(
        store
            .list_runs(B, None, &Page::first(10))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        store
            .list_runs(B, Some(&scenario.id), &Page::first(10))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let e = store.list_outputs(B, &running.id).await.unwrap_err();
    assert_eq!(code(&e), "lab.not_found", "{e}");
    assert_eq!(store.get_comparison(B, &cmp.id).await.unwrap(), None);
    assert!(
        store
            .list_comparisons(B, &Page::first(10))
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // Writes: each is refused as not found, never applied.
    let mut hostile = worked_example();
    hostile.name = "taken over".to_owned();
    let e = store
        .update_scenario(B, &scenario.id, &hostile, None, 9_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.not_found", "{e}");
    assert!(e.to_string().contains("globex"), "{e}");
    let e = store
        .update_scenario(B, &scenario.id, &hostile, Some(1), 9_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.not_found", "{e}");
    let e = store.delete_scenario(B, &scenario.id).await.unwrap_err();
    assert_eq!(code(&e), "lab.not_found", "{e}");
    let e = store
        .create_run(B, &new_run(&scenario.id, None), 9_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.not_found", "{e}");
    let e = store
        .finish_run(
            B,
            &running.id,
            &completed(None, RunVerdict::NotScored),
            9_000,
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.not_found", "{e}");
    let e = store.cancel_run(B, &running.id, 9_000).await.unwrap_err();
    assert_eq!(code(&e), "lab.not_found", "{e}");
    let e = store
        .append_outputs(B, &running.id, &outputs()[1..], 9_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.not_found", "{e}");
    // A comparison of B cannot cite A's runs.
    let e = store
        .append_comparison(B, &comparison(&[&done.id], &[]), 9_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.not_found", "{e}");
    assert!(
        store
            .list_comparisons(B, &Page::first(10))
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // A's rows are as they were.
    assert_eq!(
        store.get_scenario(A, &scenario.id).await.unwrap().unwrap(),
        scenario
    );
    assert_eq!(
        store.get_run(A, &running.id).await.unwrap().unwrap(),
        running
    );
    assert_eq!(store.list_outputs(A, &running.id).await.unwrap().len(), 1);
    assert_eq!(
        store.get_comparison(A, &cmp.id).await.unwrap().unwrap(),
        cmp
    );

    // The same id under B is B's own, separate row.
    let theirs = store.create_scenario(B, &hostile, 9_500).await.unwrap();
    assert_ne!(theirs.id, scenario.id);
    assert_eq!(
        store
            .list_scenarios(A, None, &Page::first(10))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
}
on_both!(another_tenant_can_neither_read_nor_change_rows);

/// A run finishes once: a second finish or a cancel is `lab.run_finished` and changes nothing;
/// of eight concurrent finishes exactly one wins.
async fn a_run_finishes_once(store: &Store) {
    let scenario = store
        .create_scenario(A, &worked_example(), 1_000)
        .await
        .unwrap();
    let run = store
        .create_run(A, &new_run(&scenario.id, Some("exact")), 2_000)
        .await
        .unwrap();
    let first = store
        .finish_run(A, &run.id, &completed(Some(1.0), RunVerdict::Passed), 3_000)
        .await
        .unwrap();
    let mut again = completed(None, RunVerdict::NotScored);
    again.status = RunStatus::Failed;
    let e = store
        .finish_run(A, &run.id, &again, 4_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.run_finished", "{e}");
    assert!(
        e.to_string().contains("already finished (completed)"),
        "{e}"
    );
    let e = store.cancel_run(A, &run.id, 4_000).await.unwrap_err();
    assert_eq!(code(&e), "lab.run_finished", "{e}");
    assert_eq!(store.get_run(A, &run.id).await.unwrap().unwrap(), first);

    // A cancel is a finish too.
    let run2 = store
        .create_run(A, &new_run(&scenario.id, None), 5_000)
        .await
        .unwrap();
    let cancelled = store.cancel_run(A, &run2.id, 6_000).await.unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert_eq!(cancelled.finished_ms, Some(6_000));
    assert!(!cancelled.isolated && !cancelled.destroyed);
    let e = store
        .finish_run(A, &run2.id, &completed(None, RunVerdict::NotScored), 7_000)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            LabStoreError::RunFinished {
                status: RunStatus::Cancelled,
                ..
            }
        ),
        "{e}"
    );

    // Races: exactly one of concurrent finishes changes the row.
    let run3 = store
        .create_run(A, &new_run(&scenario.id, None), 8_000)
        .await
        .unwrap();
    let store = Arc::new(store.clone());
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let (store, id) = (Arc::clone(&store), run3.id.clone());
        tasks.push(tokio::spawn(async move {
            let mut r = completed(None, RunVerdict::NotScored);
            r.steps_total = 10 + i;
            store.finish_run(A, &id, &r, 9_000).await
        }));
    }
    let mut won = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(run) => won.push(run),
            Err(e) => assert_eq!(code(&e), "lab.run_finished", "{e}"),
        }
    }
    assert_eq!(won.len(), 1);
    assert_eq!(store.get_run(A, &run3.id).await.unwrap().unwrap(), won[0]);
}
on_both!(a_run_finishes_once);

/// No scorer attached: the run is executed, not scored; the store refuses a pass or a fail.
async fn a_run_without_a_scorer_never_passes(store: &Store) {
    let scenario = store
        .create_scenario(A, &worked_example(), 1_000)
        .await
        .unwrap();
    let run = store
        .create_run(A, &new_run(&scenario.id, None), 2_000)
        .await
        .unwrap();
    for verdict in [RunVerdict::Passed, RunVerdict::Failed] {
        let e = store
            .finish_run(A, &run.id, &completed(Some(1.0), verdict), 3_000)
            .await
            .unwrap_err();
        assert_eq!(code(&e), "lab.invalid_record", "{e}");
        assert!(e.to_string().contains("no scorer suite"), "{e}");
    }
    // Nor a pass of a run that did not complete, with a scorer.
    let scored = store
        .create_run(A, &new_run(&scenario.id, Some("exact")), 2_000)
        .await
        .unwrap();
    let mut failed = completed(Some(1.0), RunVerdict::Passed);
    failed.status = RunStatus::Failed;
    let e = store
        .finish_run(A, &scored.id, &failed, 3_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.invalid_record", "{e}");
    assert_eq!(
        store.get_run(A, &run.id).await.unwrap().unwrap().status,
        RunStatus::Running
    );
    let done = store
        .finish_run(A, &run.id, &completed(None, RunVerdict::NotScored), 3_000)
        .await
        .unwrap();
    assert_eq!((done.verdict, done.score), (RunVerdict::NotScored, None));
}
on_both!(a_run_without_a_scorer_never_passes);

/// A scored run of 3 trials, 2 of which passed: pass@3 1, pass^3 0.
fn two_of_three() -> RunResult {
    let mut r = completed(Some(2.0 / 3.0), RunVerdict::Failed);
    r.passes = Some(TrialPasses {
        trials_passed: 2,
        pass_at_k: 1.0,
        pass_hat_k: 0.0,
    });
    r
}

/// A scored run keeps its trials passed, pass@k and pass^k; a run not scored has none of
/// them, and the store refuses them on it, or figures that cannot be (more passes than trials,
/// a probability outside [0, 1], pass^k above pass@k).
async fn a_scored_run_keeps_its_trial_passes_and_an_unscored_one_has_none(store: &Store) {
    let scenario = store
        .create_scenario(A, &worked_example(), 1_000)
        .await
        .unwrap();
    let scored = store
        .create_run(A, &new_run(&scenario.id, Some("exact")), 2_000)
        .await
        .unwrap();
    assert_eq!(
        (scored.trials_passed, scored.pass_at_k, scored.pass_hat_k),
        (None, None, None),
        "a running run has none yet"
    );
    let mut too_many = two_of_three();
    too_many.passes = Some(TrialPasses {
        trials_passed: 4,
        pass_at_k: 1.0,
        pass_hat_k: 1.0,
    });
    let e = store
        .finish_run(A, &scored.id, &too_many, 3_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.invalid_record", "{e}");
    assert!(
        e.to_string()
            .contains("has 3 trial(s), so 4 cannot have passed"),
        "{e}"
    );
    for (at, hat) in [(1.5, 0.0), (f64::NAN, 0.0), (0.5, 1.0), (1.0, -0.1)] {
        let mut bad = two_of_three();
        bad.passes = Some(TrialPasses {
            trials_passed: 2,
            pass_at_k: at,
            pass_hat_k: hat,
        });
        let e = store
            .finish_run(A, &scored.id, &bad, 3_000)
            .await
            .unwrap_err();
        assert_eq!(
            code(&e),
            "lab.invalid_record",
            "pass@k {at} pass^k {hat}: {e}"
        );
    }
    let done = store
        .finish_run(A, &scored.id, &two_of_three(), 3_000)
        .await
        .unwrap();
    assert_eq!(
        (
            done.trials,
            done.trials_passed,
            done.pass_at_k,
            done.pass_hat_k
        ),
        (Some(3), Some(2), Some(1.0), Some(0.0))
    );
    assert_eq!(store.get_run(A, &scored.id).await.unwrap().unwrap(), done);

    let unscored = store
        .create_run(A, &new_run(&scenario.id, None), 4_000)
        .await
        .unwrap();
    let mut claimed = completed(None, RunVerdict::NotScored);
    claimed.passes = two_of_three().passes;
    let e = store
        .finish_run(A, &unscored.id, &claimed, 5_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.invalid_record", "{e}");
    assert!(
        e.to_string().contains("not scored has no trials passed"),
        "{e}"
    );
    let done = store
        .finish_run(
            A,
            &unscored.id,
            &completed(None, RunVerdict::NotScored),
            5_000,
        )
        .await
        .unwrap();
    assert_eq!(
        (done.trials_passed, done.pass_at_k, done.pass_hat_k),
        (None, None, None)
    );
    let wire = serde_json::to_value(&done).unwrap();
    for k in ["trials_passed", "pass_at_k", "pass_hat_k"] {
        assert_eq!(
            wire[k],
            serde_json::Value::Null,
            "{k} of an unscored run: {wire}"
        );
    }
}
on_both!(a_scored_run_keeps_its_trial_passes_and_an_unscored_one_has_none);

/// Outputs are append-only: a duplicate (trial, step), within a batch or against a stored row,
/// refuses the whole batch; a finished run takes no more.
async fn outputs_are_append_only(store: &Store) {
    let scenario = store
        .create_scenario(A, &worked_example(), 1_000)
        .await
        .unwrap();
    let run = store
        .create_run(A, &new_run(&scenario.id, None), 2_000)
        .await
        .unwrap();
    let all = outputs();
    store
        .append_outputs(A, &run.id, &all[..1], 2_100)
        .await
        .unwrap();

    // Against a stored row: the new rows of the batch are not kept either.
    let mut rewrite = all[0].clone();
    rewrite.output = "a changed answer".to_owned();
    let batch = vec![all[1].clone(), rewrite];
    let e = store
        .append_outputs(A, &run.id, &batch, 2_200)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.duplicate_output", "{e}");
    assert!(e.to_string().contains("trial 1 step 1"), "{e}");
    // Within one batch.
    let batch = vec![all[1].clone(), all[2].clone(), all[1].clone()];
    let e = store
        .append_outputs(A, &run.id, &batch, 2_300)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.duplicate_output", "{e}");
    let kept = store.list_outputs(A, &run.id).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].output, "first synthetic account");

    // Step and trial count from 1.
    let mut zero = all[1].clone();
    zero.step = 0;
    let e = store
        .append_outputs(A, &run.id, &[zero], 2_400)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.invalid_record", "{e}");

    store
        .append_outputs(A, &run.id, &all[1..], 2_500)
        .await
        .unwrap();
    store
        .finish_run(A, &run.id, &completed(None, RunVerdict::NotScored), 3_000)
        .await
        .unwrap();
    let mut late = all[0].clone();
    late.trial = 9;
    let e = store
        .append_outputs(A, &run.id, &[late], 3_100)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.run_finished", "{e}");
    assert_eq!(store.list_outputs(A, &run.id).await.unwrap().len(), 3);

    // A run with no outputs lists none; a run that does not exist is not found.
    let empty = store
        .create_run(A, &new_run(&scenario.id, None), 4_000)
        .await
        .unwrap();
    assert!(store.list_outputs(A, &empty.id).await.unwrap().is_empty());
    let e = store.list_outputs(A, "no-such-run").await.unwrap_err();
    assert_eq!(code(&e), "lab.not_found", "{e}");
}
on_both!(outputs_are_append_only);

/// A scenario is clamped to 1 MiB as stored; one byte over is refused with its size and the
/// limit, on create and on update. An output row over 1 MiB is refused too.
async fn a_scenario_over_1_mib_is_refused(store: &Store) {
    let sized = |total: usize| {
        let mut d = ScenarioDraft {
            name: "big".to_owned(),
            description: String::new(),
            steps: json!([{"input": "x"}]),
            mocks: json!([{"resource": "x", "response": ""}]),
        };
        let fill = total - d.stored_bytes();
        d.mocks = json!([{"resource": "x", "response": "r".repeat(fill)}]);
        assert_eq!(d.stored_bytes(), total);
        d
    };
    let at_limit = store
        .create_scenario(A, &sized(MAX_SCENARIO_BYTES), 1_000)
        .await
        .unwrap();
    assert_eq!(
        store.get_scenario(A, &at_limit.id).await.unwrap().unwrap(),
        at_limit
    );

    let e = store
        .create_scenario(A, &sized(MAX_SCENARIO_BYTES + 1), 1_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.scenario_too_large");
    let msg = e.to_string();
    assert!(msg.contains("1048577 bytes"), "{msg}");
    assert!(msg.contains("the limit is 1048576 bytes"), "{msg}");
    assert_eq!(
        store
            .list_scenarios(A, None, &Page::first(10))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    // JSON escaping counts: 600 KiB of quotes are 1200 KiB as stored.
    let mut quoted = sized(1_000);
    quoted.description = String::new();
    quoted.steps = json!([{"input": "\"".repeat(600 * 1024)}]);
    let e = store.create_scenario(A, &quoted, 1_000).await.unwrap_err();
    assert_eq!(code(&e), "lab.scenario_too_large");

    let e = store
        .update_scenario(A, &at_limit.id, &sized(MAX_SCENARIO_BYTES + 1), None, 2_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.scenario_too_large");
    assert_eq!(
        store.get_scenario(A, &at_limit.id).await.unwrap().unwrap(),
        at_limit
    );

    let small = store
        .create_scenario(A, &worked_example(), 3_000)
        .await
        .unwrap();
    let run = store
        .create_run(A, &new_run(&small.id, None), 3_000)
        .await
        .unwrap();
    let mut huge = outputs()[0].clone();
    huge.output = "o".repeat(MAX_OUTPUT_BYTES + 1 - huge.input.len());
    let e = store
        .append_outputs(A, &run.id, &[outputs()[1].clone(), huge], 3_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.output_too_large");
    assert!(e.to_string().contains("1048577 bytes"), "{e}");
    assert!(store.list_outputs(A, &run.id).await.unwrap().is_empty());
}
on_both!(a_scenario_over_1_mib_is_refused);

/// A scenario with runs cannot be deleted; one without can, once.
async fn a_scenario_with_runs_cannot_be_deleted(store: &Store) {
    let used = store
        .create_scenario(A, &worked_example(), 1_000)
        .await
        .unwrap();
    store
        .create_run(A, &new_run(&used.id, None), 2_000)
        .await
        .unwrap();
    let e = store.delete_scenario(A, &used.id).await.unwrap_err();
    assert_eq!(code(&e), "lab.scenario_in_use", "{e}");
    assert!(e.to_string().contains("has 1 run(s)"), "{e}");
    assert!(store.get_scenario(A, &used.id).await.unwrap().is_some());

    let unused = store
        .create_scenario(A, &worked_example(), 3_000)
        .await
        .unwrap();
    store.delete_scenario(A, &unused.id).await.unwrap();
    assert_eq!(store.get_scenario(A, &unused.id).await.unwrap(), None);
    let e = store.delete_scenario(A, &unused.id).await.unwrap_err();
    assert_eq!(code(&e), "lab.not_found", "{e}");
    let e = store
        .create_run(A, &new_run(&unused.id, None), 4_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.not_found", "{e}");
}
on_both!(a_scenario_with_runs_cannot_be_deleted);

/// An update based on a stale version is refused and changes nothing.
async fn a_stale_update_is_a_version_conflict(store: &Store) {
    let s = store
        .create_scenario(A, &worked_example(), 1_000)
        .await
        .unwrap();
    let mut d = worked_example();
    d.name = "first writer".to_owned();
    let v2 = store
        .update_scenario(A, &s.id, &d, Some(1), 2_000)
        .await
        .unwrap();
    d.name = "second writer".to_owned();
    let e = store
        .update_scenario(A, &s.id, &d, Some(1), 3_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.version_conflict", "{e}");
    assert!(e.to_string().contains("at version 2, not 1"), "{e}");
    assert_eq!(store.get_scenario(A, &s.id).await.unwrap().unwrap(), v2);
    // Without a version, the last writer wins.
    let v3 = store
        .update_scenario(A, &s.id, &d, None, 4_000)
        .await
        .unwrap();
    assert_eq!((v3.version, v3.name.as_str()), (3, "second writer"));
}
on_both!(a_stale_update_is_a_version_conflict);

/// Listings are newest first and a cursor walks every row once, including rows created in the
/// same millisecond; the cursor's text form round-trips.
async fn listings_page_newest_first(store: &Store) {
    let mut ids = Vec::new();
    for ms in [1_000, 2_000, 2_000, 2_000, 3_000] {
        ids.push(
            store
                .create_scenario(A, &worked_example(), ms)
                .await
                .unwrap()
                .id,
        );
    }
    let mut seen = Vec::new();
    let mut page = Page::first(2);
    loop {
        let got = store.list_scenarios(A, None, &page).await.unwrap();
        assert!(got.items.len() <= 2);
        seen.extend(got.items.iter().map(|s| (s.created_ms, s.id.clone())));
        match got.next {
            Some(next) => {
                let text = next.to_string();
                assert_eq!(text.parse::<PageCursor>().unwrap(), next);
                page.after = Some(next);
            }
            None => break,
        }
    }
    let mut want: Vec<(i64, String)> = [1_000, 2_000, 2_000, 2_000, 3_000]
        .into_iter()
        .zip(ids)
        .collect();
    want.sort();
    want.reverse();
    assert_eq!(seen, want);
    assert!("garbage".parse::<PageCursor>().is_err());

    // Runs of one scenario, newest first.
    let s = &seen[0].1;
    for ms in [10, 30, 20] {
        store.create_run(A, &new_run(s, None), ms).await.unwrap();
    }
    let first = store.list_runs(A, Some(s), &Page::first(2)).await.unwrap();
    let starts: Vec<i64> = first.items.iter().map(|r| r.started_ms).collect();
    assert_eq!(starts, [30, 20]);
    let rest = store
        .list_runs(
            A,
            Some(s),
            &Page {
                limit: 2,
                after: first.next,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        rest.items.iter().map(|r| r.started_ms).collect::<Vec<_>>(),
        [10]
    );
    assert_eq!(rest.next, None);
}
on_both!(listings_page_newest_first);

/// Everything written is there after the store is closed and the same URL opened again.
async fn write_everything(store: &Store) -> (String, String, String) {
    let s = store
        .create_scenario(A, &worked_example(), 1_000)
        .await
        .unwrap();
    let run = store
        .create_run(A, &new_run(&s.id, Some("exact")), 2_000)
        .await
        .unwrap();
    store
        .append_outputs(A, &run.id, &outputs(), 2_500)
        .await
        .unwrap();
    store
        .finish_run(A, &run.id, &two_of_three(), 3_000)
        .await
        .unwrap();
    let c = store
        .append_comparison(A, &comparison(&[&run.id], &[&run.id]), 4_000)
        .await
        .unwrap();
    (s.id, run.id, c.id)
}

async fn reopened_has_everything(before: &Store, url: &str) {
    let (s, r, c) = write_everything(before).await;
    let scenario = before.get_scenario(A, &s).await.unwrap().unwrap();
    let run = before.get_run(A, &r).await.unwrap().unwrap();
    assert_eq!(
        (run.trials_passed, run.pass_at_k, run.pass_hat_k),
        (Some(2), Some(1.0), Some(0.0))
    );
    let outs = before.list_outputs(A, &r).await.unwrap();
    let cmp = before.get_comparison(A, &c).await.unwrap().unwrap();
    before.close().await;

    let after = Store::connect(url).await.unwrap();
    assert_eq!(after.get_scenario(A, &s).await.unwrap().unwrap(), scenario);
    assert_eq!(after.get_run(A, &r).await.unwrap().unwrap(), run);
    assert_eq!(after.list_outputs(A, &r).await.unwrap(), outs);
    assert_eq!(after.get_comparison(A, &c).await.unwrap().unwrap(), cmp);
    // Still finished once, still append-only.
    let e = after.cancel_run(A, &r, 5_000).await.unwrap_err();
    assert_eq!(code(&e), "lab.run_finished", "{e}");
    after.close().await;
}

mod a_reopened_store_has_everything {
    use super::*;

    #[tokio::test]
    async fn on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let url = Store::default_sqlite_url(dir.path());
        let store = Store::connect(&url).await.unwrap();
        reopened_has_everything(&store, &url).await;
    }

    #[tokio::test]
    async fn on_postgres() {
        let Some(schema) = Schema::create("labre").await else {
            return;
        };
        let store = Store::connect(&schema.url).await.unwrap();
        reopened_has_everything(&store, &schema.url).await;
        schema.drop().await;
    }
}

/// A comparison must be consistent (finite numbers, a forced verdict is inconclusive) and cite
/// only finished runs.
async fn an_inconsistent_comparison_is_refused(store: &Store) {
    let s = store
        .create_scenario(A, &worked_example(), 1_000)
        .await
        .unwrap();
    let running = store
        .create_run(A, &new_run(&s.id, None), 2_000)
        .await
        .unwrap();
    let e = store
        .append_comparison(A, &comparison(&[&running.id], &[]), 3_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.invalid_record", "{e}");
    assert!(e.to_string().contains("still running"), "{e}");

    let mut nan = comparison(&[], &[]);
    nan.delta = f64::NAN;
    let e = store.append_comparison(A, &nan, 3_000).await.unwrap_err();
    assert_eq!(code(&e), "lab.invalid_record", "{e}");
    assert!(e.to_string().contains("not a finite number"), "{e}");

    let mut forced = comparison(&[], &[]);
    forced.verdict = ComparisonVerdict::Improved;
    let e = store
        .append_comparison(A, &forced, 3_000)
        .await
        .unwrap_err();
    assert_eq!(code(&e), "lab.invalid_record", "{e}");

    assert!(
        store
            .list_comparisons(A, &Page::first(10))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // Imported logs cite no runs.
    let imported = store
        .append_comparison(A, &comparison(&[], &[]), 3_000)
        .await
        .unwrap();
    assert!(imported.record.baseline.run_ids.is_empty());
}
on_both!(an_inconsistent_comparison_is_refused);

/// Any text round-trips on both backends (PostgreSQL's TEXT cannot hold a NUL; the store keeps
/// free text as JSON); a NUL in a short identifier, or a run of 0 trials, is refused alike on
/// both.
async fn a_nul_round_trips_in_text_and_is_refused_in_identifiers(store: &Store) {
    let mut d = worked_example();
    d.name = "nul \u{0} in the name".to_owned();
    let s = store.create_scenario(A, &d, 1_000).await.unwrap();
    assert_eq!(
        store.get_scenario(A, &s.id).await.unwrap().unwrap().name,
        d.name
    );
    let listed = store
        .list_scenarios(A, None, &Page::first(1))
        .await
        .unwrap();
    assert_eq!(listed.items[0].name, d.name);

    let mut run = new_run(&s.id, None);
    run.variant = "v\u{0}1".to_owned();
    let e = store.create_run(A, &run, 2_000).await.unwrap_err();
    assert_eq!(code(&e), "lab.invalid_record", "{e}");
    assert!(e.to_string().contains("the variant contains a NUL"), "{e}");
    let mut none = new_run(&s.id, None);
    none.trials = Some(0);
    let e = store.create_run(A, &none, 2_000).await.unwrap_err();
    assert_eq!(code(&e), "lab.invalid_record", "{e}");
    assert!(
        store
            .list_runs(A, None, &Page::first(10))
            .await
            .unwrap()
            .items
            .is_empty()
    );
}
on_both!(a_nul_round_trips_in_text_and_is_refused_in_identifiers);
