//! `LabService::tournament` over stored runs: the judge asked in both orders on every task and
//! pair, the ceiling of judge calls (the pairs past it reported, never dropped), judge errors
//! counted and reported (never a tie), the refusals of runs that are not one group, and one
//! value-free audit event. The judge here is a stand-in backend answering by a rule (the real
//! command judge in the `linux` backend is tested end to end in corral-cli's `lab_program`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral_exec::mock::MockBackend;
use corral_exec::{Attestation, Backend, BoxFuture, ExecError, ExecOutput, ExecRequest};
use corral_guard::audit::AuditSink;
use corral_guard::{Caller, Gateway};
use corral_lab::program::{ProgramSpec, Programs};
use corral_lab::service::{LabService, RunBody, ScenarioBody, TournamentBody};
use corral_policy::Principal;
use corral_store::Store;
use serde_json::{Value, json};

use crate::support;

/// How the stand-in judge answers.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// The longer output; a tie when equal.
    Longer,
    /// Always `first`.
    First,
    /// `{"prefer": "maybe"}` on task 2, else the longer output.
    BadOnTask2,
    /// Exit 3 when the first slot holds the longest output, else the longer one.
    FailsSometimes,
    /// Talks instead of answering (as a model judge does), quoting the task's input.
    Chatty,
}

/// A `linux`-named backend that answers a judge's request by a rule, and keeps what it read.
#[derive(Debug)]
struct Judge {
    rule: Rule,
    seen: Mutex<Vec<Value>>,
    /// Calls in progress now, and the most at once.
    in_flight: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl Backend for Judge {
    fn name(&self) -> &'static str {
        "linux"
    }
    fn preflight(&self) -> Result<(), ExecError> {
        Ok(())
    }
    fn run(&self, req: ExecRequest) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        Box::pin(async move {
            use std::sync::atomic::Ordering::SeqCst;
            // What it was asked, in the order the calls came.
            let v: Value = serde_json::from_slice(&req.stdin.unwrap_or_default()).unwrap();
            self.seen.lock().unwrap().push(v.clone());
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.most.fetch_max(now, SeqCst);
            // Until two calls have overlapped once, hold this one until another starts (at most
            // 5 s: a judge that runs its calls one at a time is seen as such, however loaded
            // the machine); then let the others that may start, start, before it answers.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while self.most.load(SeqCst) < 2 && std::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
            self.in_flight.fetch_sub(1, SeqCst);
            let (a, b) = (v["first"].as_str().unwrap(), v["second"].as_str().unwrap());
            let longer = match a.len().cmp(&b.len()) {
                std::cmp::Ordering::Greater => "first",
                std::cmp::Ordering::Less => "second",
                std::cmp::Ordering::Equal => "tie",
            };
            let (code, out) = match self.rule {
                Rule::Longer => (0, json!({"prefer": longer}).to_string()),
                Rule::First => (0, json!({"prefer": "first"}).to_string()),
                Rule::BadOnTask2 if v["input"] == "k2" => (0, "{\"prefer\": \"maybe\"}".into()),
                Rule::BadOnTask2 => (0, json!({"prefer": longer}).to_string()),
                Rule::FailsSometimes if a.contains("at length") => (3, String::new()),
                Rule::FailsSometimes => (0, json!({"prefer": longer}).to_string()),
                Rule::Chatty => (
                    0,
                    format!("For the task {}, I prefer the first.", v["input"]),
                ),
            };
            Ok(ExecOutput {
                exit_code: Some(code),
                signal: None,
                stdout: format!("{out}\n").into_bytes(),
                stderr: Vec::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                timed_out: false,
                duration: Duration::ZERO,
                attestation: Attestation {
                    backend: "linux",
                    isolated: false,
                    destroyed: true,
                    primitives: vec!["stand-in".to_owned()],
                },
                changes: None,
            })
        })
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    lab: LabService,
    judge: Arc<Judge>,
    audit: Arc<support::Recorded>,
}

async fn fixture(rule: Rule) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        Store::connect(&Store::default_sqlite_url(dir.path()))
            .await
            .unwrap(),
    );
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let audit = Arc::new(support::Recorded::default());
    let gateway = Arc::new(Gateway::new(
        support::deployment(&support::config(&root), &root),
        Arc::new(MockBackend::default()),
        vec![audit.clone() as Arc<dyn AuditSink>],
        "default",
    ));
    let lab = LabService::new(store.clone(), gateway, true);
    let judge = Arc::new(Judge {
        rule,
        seen: Mutex::new(Vec::new()),
        in_flight: Default::default(),
        most: Default::default(),
    });
    let spec = ProgramSpec {
        name: "by-rule".to_owned(),
        argv: vec!["judge".to_owned()],
        cwd: PathBuf::from("/"),
        read_paths: Vec::new(),
        timeout: Duration::from_secs(5),
        memory: None,
        processes: None,
        protected: Vec::new(),
        tools: None,
    };
    lab.set_programs(Programs {
        judges: BTreeMap::from([("by-rule".to_owned(), Arc::new(spec))]),
        backend: Some(judge.clone() as Arc<dyn Backend>),
        ..Programs::default()
    });
    Fixture {
        _dir: dir,
        store,
        lab,
        judge,
        audit,
    }
}

fn olga() -> Caller {
    Caller::new(Principal::new("olga", &["operator"]))
}

/// A workflow whose answer is the mocked response followed by `suffix`.
fn suffixed(suffix: &str) -> String {
    format!(
        "name: s\nversion: 1\nsteps:\n  - op: scenario.resource\n    args: {{resource: \"{{{{input}}}}\"}}\n    as: r\noutput: \"{{{{steps.r.response}}}}{suffix}\"\n"
    )
}

/// A scenario of three tasks, and a run of it by each of three variants whose answers are
/// short (the identity agent), medium and long; scored `exact` against the short answer.
async fn group(lab: &LabService) -> (String, Vec<String>) {
    let s = lab
        .create_scenario(
            &olga(),
            "rid",
            ScenarioBody {
                name: "three tasks".to_owned(),
                steps: Some(json!([1, 2, 3].map(
                    |i| json!({"input": format!("k{i}"), "expected": format!("v{i}")})
                ))),
                mocks: Some(json!([1, 2, 3].map(
                    |i| json!({"resource": format!("k{i}"), "response": format!("v{i}")})
                ))),
                ..ScenarioBody::default()
            },
        )
        .await
        .unwrap();
    let mut runs = Vec::new();
    for (variant, workflow) in [
        ("medium", Some(suffixed(", briefly"))),
        ("long", Some(suffixed(", explained at length"))),
        ("short", None),
    ] {
        let r = lab
            .run(
                &olga(),
                "rid",
                &s.id,
                RunBody {
                    variant: variant.to_owned(),
                    workflow,
                    scorer: Some("exact".to_owned()),
                    ..RunBody::default()
                },
            )
            .await
            .unwrap();
        runs.push(r.id);
    }
    (s.id, runs)
}

fn body(runs: &[String]) -> TournamentBody {
    TournamentBody {
        runs: runs.to_vec(),
        judge: "command:by-rule".to_owned(),
        seed: Some(3),
        bootstrap: Some(300),
    }
}

fn variants(t: &corral_lab::service::Tournament) -> Vec<&str> {
    t.ranking.iter().map(|r| r.variant.as_str()).collect()
}

#[tokio::test]
async fn a_judge_asked_in_both_orders_ranks_the_runs_and_the_top_two_get_the_labs_verdict() {
    let f = fixture(Rule::Longer).await;
    let (scenario, runs) = group(&f.lab).await;
    let t = f
        .lab
        .tournament(&olga(), "rid-t", body(&runs), 1000)
        .await
        .unwrap();
    assert_eq!(variants(&t), ["long", "medium", "short"]);
    assert_eq!((t.judge_calls, t.judgments), (18, 18));
    assert!(t.errors.is_empty() && t.not_judged.is_empty());
    assert_eq!(t.purpose, "judge");
    assert_eq!(t.scenario_id, scenario);
    assert_eq!(t.judge, "command:by-rule");
    assert_eq!(t.position_bias.first_share, Some(0.5));
    // The stand-in attests no isolation: the answer does not claim any.
    assert!(!t.isolated);
    for r in &t.ranking {
        assert!(
            r.interval.lower <= r.strength && r.strength <= r.interval.upper,
            "{r:?}"
        );
    }
    // The judge read each task's input and expected value, and both outputs, in both orders.
    let seen = f.judge.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 18);
    assert_eq!(
        seen[0],
        json!({"input": "k1", "first": "v1, briefly", "second": "v1, explained at length", "expected": "v1"})
    );
    assert_eq!(seen[1]["first"], "v1, explained at length");
    // The verdict between the top two (long against medium), over the steps: both fail
    // `exact`, and three steps are too few for a verdict that is not forced.
    let top = t.top_two.as_ref().unwrap();
    assert_eq!(
        (top.candidate.as_str(), top.baseline.as_str()),
        (t.ranking[0].run_id.as_str(), t.ranking[1].run_id.as_str())
    );
    assert_eq!(top.comparison.verdict.as_str(), "inconclusive");
    assert_eq!(top.comparison.delta, Some(0.0));
    // Audited once, with counts and no value.
    let events: Vec<_> = f
        .audit
        .events()
        .into_iter()
        .filter(|e| e.op == "sandbox.tournament")
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].detail.as_deref(),
        Some(
            format!(
                "tournament={} runs=3 judge_calls=18 errors=0 not_judged=0",
                t.id
            )
            .as_str()
        )
    );
    // The same seed gives the same answer.
    let again = f
        .lab
        .tournament(&olga(), "rid-t2", body(&runs), 1000)
        .await
        .unwrap();
    assert_eq!(again.ranking, t.ranking);
}

#[tokio::test]
async fn a_judge_that_always_says_first_shows_its_position_bias_and_ranks_no_one_above_another() {
    let f = fixture(Rule::First).await;
    let (_, runs) = group(&f.lab).await;
    let t = f
        .lab
        .tournament(&olga(), "rid", body(&runs), 1000)
        .await
        .unwrap();
    assert_eq!(t.position_bias.first_share, Some(1.0));
    assert_eq!(t.position_bias.order_disagreement, Some(1.0));
    assert!(
        t.ranking.iter().all(|r| (r.strength - 1.0).abs() < 1e-9),
        "{t:?}"
    );
}

#[tokio::test]
async fn past_the_judge_ceiling_no_call_is_made_and_every_pair_left_is_reported() {
    let f = fixture(Rule::Longer).await;
    let (_, runs) = group(&f.lab).await;
    // 7 calls: three pairs of two fit, the seventh call would split a pair, so it is not made.
    let t = f
        .lab
        .tournament(&olga(), "rid", body(&runs), 7)
        .await
        .unwrap();
    assert_eq!(t.judge_calls, 6);
    assert_eq!(f.judge.seen.lock().unwrap().len(), 6);
    assert_eq!(t.max_judge_calls, 7);
    assert_eq!(t.not_judged.len(), 6);
    assert!(t.not_judged.iter().all(|p| p.code == "lab.judge_ceiling"));
    assert_eq!((t.not_judged[0].task, t.not_judged[5].task), (2, 3));
    assert_eq!(
        (t.not_judged[0].a.as_str(), t.not_judged[0].b.as_str()),
        (runs[0].as_str(), runs[1].as_str())
    );
    // A ceiling of 0 judges nothing and says so: every strength stays at 1.
    let none = f
        .lab
        .tournament(&olga(), "rid", body(&runs), 0)
        .await
        .unwrap();
    assert_eq!((none.judge_calls, none.not_judged.len()), (0, 9));
    assert!(none.ranking.iter().all(|r| r.strength == 1.0));
}

#[tokio::test]
async fn a_judge_that_fails_or_answers_otherwise_is_counted_as_an_error_and_never_as_a_tie() {
    let f = fixture(Rule::BadOnTask2).await;
    let (_, runs) = group(&f.lab).await;
    let t = f
        .lab
        .tournament(&olga(), "rid", body(&runs), 1000)
        .await
        .unwrap();
    assert_eq!((t.judge_calls, t.judgments, t.errors.len()), (18, 12, 6));
    assert!(
        t.errors
            .iter()
            .all(|e| e.code == "lab.judge_answer" && e.task == 2),
        "{:?}",
        t.errors
    );
    assert!(
        t.errors[0].message.contains("maybe"),
        "{}",
        t.errors[0].message
    );
    assert_eq!(t.position_bias.decisive, 12);
    let f = fixture(Rule::FailsSometimes).await;
    let (_, runs) = group(&f.lab).await;
    let t = f
        .lab
        .tournament(&olga(), "rid", body(&runs), 1000)
        .await
        .unwrap();
    // The long run in the first slot: 2 pairs x 3 tasks.
    assert_eq!(t.errors.len(), 6);
    assert!(
        t.errors
            .iter()
            .all(|e| e.code == "lab.judge_failed" && e.first == runs[1]),
        "{:?}",
        t.errors
    );
    assert!(
        t.errors[0].message.contains("exit status 3"),
        "{}",
        t.errors[0].message
    );
    assert_eq!(t.judgments, 12);
}

#[tokio::test]
async fn runs_of_another_scenario_or_version_or_unfinished_are_refused_naming_the_run() {
    let f = fixture(Rule::Longer).await;
    let (scenario, runs) = group(&f.lab).await;
    let (_, others) = group(&f.lab).await;
    let e = f
        .lab
        .tournament(
            &olga(),
            "rid",
            body(&[runs[0].clone(), others[1].clone()]),
            100,
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, "lab.tournament_mismatch");
    assert!(e.message.contains(&others[1]), "{}", e.message);
    // The same scenario at another version.
    let stored = f.lab.get_scenario(&olga(), "rid", &scenario).await.unwrap();
    f.lab
        .update_scenario(
            &olga(),
            "rid",
            &scenario,
            ScenarioBody {
                name: stored.name.clone(),
                steps: Some(stored.steps.clone()),
                mocks: Some(stored.mocks.clone()),
                ..ScenarioBody::default()
            },
        )
        .await
        .unwrap();
    let newer = f
        .lab
        .run(
            &olga(),
            "rid",
            &scenario,
            RunBody {
                variant: "short".into(),
                ..RunBody::default()
            },
        )
        .await
        .unwrap();
    let e = f
        .lab
        .tournament(
            &olga(),
            "rid",
            body(&[runs[0].clone(), newer.id.clone()]),
            100,
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, "lab.tournament_mismatch");
    assert!(
        e.message.contains(&newer.id) && e.message.contains("version 2"),
        "{}",
        e.message
    );
    for (ids, code) in [
        (vec![runs[0].clone()], "args.invalid"),
        (vec![runs[0].clone(), runs[0].clone()], "args.invalid"),
        (
            vec![runs[0].clone(), "no-such-run".to_owned()],
            "lab.not_found",
        ),
    ] {
        assert_eq!(
            f.lab
                .tournament(&olga(), "rid", body(&ids), 100)
                .await
                .unwrap_err()
                .code,
            code
        );
    }
    let mut b = body(&runs);
    b.judge = "command:undeclared".to_owned();
    assert_eq!(
        f.lab
            .tournament(&olga(), "rid", b, 100)
            .await
            .unwrap_err()
            .code,
        "lab.program_unknown"
    );
    // A run still running.
    let running = f
        .store
        .create_run(
            "default",
            &corral_store::lab::NewRun {
                scenario_id: scenario.clone(),
                runner: "inproc".to_owned(),
                backend: "inproc-mock".to_owned(),
                purpose: "simulation".to_owned(),
                variant: "late".to_owned(),
                seed: 0,
                trials: Some(1),
                scorer_suite: None,
                principal: "olga".to_owned(),
                identity: "token:olga".to_owned(),
            },
            1,
        )
        .await
        .unwrap();
    let e = f
        .lab
        .tournament(
            &olga(),
            "rid",
            body(&[newer.id.clone(), running.id.clone()]),
            100,
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, "lab.tournament_run_incomplete");
    assert!(
        e.message.contains(&running.id) && e.message.contains("running"),
        "{}",
        e.message
    );
    // Nothing was judged by any refused tournament.
    assert!(f.judge.seen.lock().unwrap().is_empty());
    // A viewer may not grade.
    let viewer = Caller::new(Principal::new("vic", &["viewer"]));
    assert_eq!(
        f.lab
            .tournament(&viewer, "rid", body(&runs), 100)
            .await
            .unwrap_err()
            .code,
        "rbac.denied"
    );
}

#[tokio::test]
async fn a_graded_tournament_is_stored_and_read_back_by_a_viewer_of_its_tenant_only() {
    let f = fixture(Rule::Longer).await;
    let (_, runs) = group(&f.lab).await;
    let t = f
        .lab
        .tournament(&olga(), "rid", body(&runs), 1000)
        .await
        .unwrap();
    assert!(!t.id.is_empty());
    assert_eq!(t.recorded_by, "olga");
    let viewer = Caller::new(Principal::new("vic", &["viewer"]));
    let got = f.lab.get_tournament(&viewer, "rid", &t.id).await.unwrap();
    assert_eq!(got, t);
    let mut stranger = Principal::new("eve", &["admin"]);
    stranger.tenant = Some("other".to_owned());
    let e = f
        .lab
        .get_tournament(&Caller::new(stranger), "rid", &t.id)
        .await
        .unwrap_err();
    assert_eq!(e.code, "lab.not_found");
}

#[tokio::test]
async fn a_tournament_is_metered_as_one_judge_run_with_its_judge_calls_apart_from_its_simulations()
{
    let f = fixture(Rule::Longer).await;
    let (_, runs) = group(&f.lab).await;
    let admin = Caller::new(Principal::new("ada", &["admin"]));
    let before = f.lab.metering(&admin, "rid-m0").await.unwrap();
    let purpose = |m: &corral_guard::metering::TenantMetering, p: &str| {
        let e = m.purposes.iter().find(|e| e.purpose.as_str() == p).unwrap();
        (
            e.metered.runs,
            e.metered.calls,
            e.metered.tokens,
            e.metered.spend,
        )
    };
    // The group's three simulation runs, and no judge run yet.
    assert_eq!(purpose(&before, "simulation").0, 3);
    assert_eq!(purpose(&before, "judge"), (0, 0, None, None));
    let t = f
        .lab
        .tournament(&olga(), "rid-t", body(&runs), 1000)
        .await
        .unwrap();
    assert_eq!(t.judge_calls, 18);
    let after = f.lab.metering(&admin, "rid-m1").await.unwrap();
    assert_eq!(purpose(&after, "judge"), (1, 18, None, None));
    assert_eq!(
        purpose(&after, "simulation"),
        purpose(&before, "simulation")
    );
    assert_eq!(purpose(&after, "live"), (0, 0, None, None));
    // An operator does not read the tenant's metering.
    let refused = f.lab.metering(&olga(), "rid-m2").await.unwrap_err();
    assert_eq!(refused.code, "rbac.denied");
}

#[tokio::test]
async fn stored_tournaments_are_listed_newest_first_page_by_page_to_their_tenant_only() {
    let f = fixture(Rule::Longer).await;
    let (_, runs) = group(&f.lab).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let t = f
            .lab
            .tournament(&olga(), &format!("rid-{i}"), body(&runs), 1000)
            .await
            .unwrap();
        ids.push(t.id);
    }
    let viewer = Caller::new(Principal::new("vic", &["viewer"]));
    let page = |after: Option<String>| corral_lab::service::PageQuery { limit: 2, after };
    let first = f
        .lab
        .list_tournaments(&viewer, "rid-l1", &page(None))
        .await
        .unwrap();
    let next = first.next.as_ref().map(ToString::to_string);
    assert!(next.is_some());
    let second = f
        .lab
        .list_tournaments(&viewer, "rid-l2", &page(next))
        .await
        .unwrap();
    assert!(second.next.is_none());
    let listed: Vec<String> = first
        .items
        .iter()
        .chain(&second.items)
        .map(|t| t.id.clone())
        .collect();
    ids.reverse();
    assert_eq!(listed, ids, "newest first, each once");
    // Each reads as `get` answers it.
    let got = f.lab.get_tournament(&viewer, "rid", &ids[0]).await.unwrap();
    assert_eq!(first.items[0], got);
    let mut stranger = Principal::new("eve", &["admin"]);
    stranger.tenant = Some("other".to_owned());
    let none = f
        .lab
        .list_tournaments(
            &Caller::new(stranger),
            "rid-l3",
            &corral_lab::service::PageQuery::default(),
        )
        .await
        .unwrap();
    assert!(none.items.is_empty() && none.next.is_none());
    assert!(
        f.audit
            .events()
            .iter()
            .any(|e| e.op == "sandbox.tournaments.list")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judge_calls_run_a_few_at_once_never_more_than_the_bound_and_rank_the_same_every_time() {
    let f = fixture(Rule::Longer).await;
    let (_, runs) = group(&f.lab).await;
    let t = f
        .lab
        .tournament(&olga(), "rid-c1", body(&runs), 1000)
        .await
        .unwrap();
    let most = f.judge.most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (2..=corral_lab::service::JUDGE_CONCURRENCY).contains(&most),
        "{most} judge calls ran at once"
    );
    assert_eq!((t.judge_calls, t.judgments), (18, 18));
    for i in 0..3 {
        let again = f
            .lab
            .tournament(&olga(), &format!("rid-c{}", i + 2), body(&runs), 1000)
            .await
            .unwrap();
        assert_eq!(again.ranking, t.ranking);
        assert_eq!(again.position_bias, t.position_bias);
    }
}

/// What: a stored tournament is read back by any viewer of the tenant (`get_tournament`,
/// `list_tournaments`, no owner check), and its `errors[].message` quotes up to 200 characters
/// of what the judge printed; a judge (a model judge above all) that talks instead of printing
/// `{"prefer": ...}` quotes the task's input, which for a scenario a replay owns is the
/// recording's value (its task input). Repro: olga's owned scenario (as a replay makes one of
/// her recording's task input), two runs of it by olga, a tournament of them by olga with a
/// judge that prints `For the task "<input>", I prefer the first.`; a viewer, who is refused the
/// scenario (`recording.forbidden`), reads the input in the stored tournament. Impact: the
/// replay access fixes (owned scenarios, outputs by the recording's access) are bypassed by the
/// grading route: a recorded session's task input (a customer's data, a key) reaches every
/// viewer of the tenant. A fix checks `may_read_owned` on the tournament's scenario when it is
/// read or listed (or withholds the judge's words from callers who may not read it).
#[tokio::test]
async fn a_viewer_can_neither_read_nor_list_the_stored_tournament_of_an_owned_scenario() {
    const SECRET: &str = "customer 4111-1111-1111-1111";
    let f = fixture(Rule::Chatty).await;
    let owner = olga().principal.identity();
    let s = f
        .store
        .create_owned_scenario(
            "default",
            &corral_store::lab::ScenarioDraft {
                name: "task of recording r1 (0123456789abcdef)".to_owned(),
                description: "the task input kept by recording r1, for replay".to_owned(),
                steps: json!([{"input": SECRET}]),
                mocks: json!([{"resource": SECRET, "response": "refund approved"}]),
            },
            Some(&owner),
            1,
        )
        .await
        .unwrap();
    let mut runs = Vec::new();
    for (variant, workflow) in [("medium", Some(suffixed(", briefly"))), ("short", None)] {
        let r = f
            .lab
            .run(
                &olga(),
                "rid",
                &s.id,
                RunBody {
                    variant: variant.to_owned(),
                    workflow,
                    ..RunBody::default()
                },
            )
            .await
            .unwrap();
        runs.push(r.id);
    }
    let t = f
        .lab
        .tournament(&olga(), "rid-t", body(&runs), 100)
        .await
        .unwrap();
    let viewer = Caller::new(Principal::new("vic", &["viewer"]));
    let refused = f.lab.get_scenario(&viewer, "rid", &s.id).await.unwrap_err();
    assert_eq!(refused.code, "recording.forbidden");
    let refused = f
        .lab
        .get_tournament(&viewer, "rid", &t.id)
        .await
        .unwrap_err();
    assert_eq!(refused.code, "recording.forbidden");
    let listed = f
        .lab
        .list_tournaments(&viewer, "rid", &corral_lab::service::PageQuery::default())
        .await
        .unwrap();
    let text = serde_json::to_string(&listed).unwrap();
    assert!(
        !text.contains(SECRET) && !text.contains(&t.id),
        "a viewer listed the owned scenario's stored tournament: {text}"
    );
    let own = f.lab.get_tournament(&olga(), "rid", &t.id).await.unwrap();
    assert_eq!(own.id, t.id);
    let listed = f
        .lab
        .list_tournaments(&olga(), "rid", &corral_lab::service::PageQuery::default())
        .await
        .unwrap();
    assert!(listed.items.iter().any(|x| x.id == t.id));
}
