//! [`LabService::tournament`]: grades a group of finished runs of one scenario (one per variant,
//! e.g. the variants of a replay group) by a command judge asked about every task and pair of
//! runs in both orders, and answers the Bradley-Terry ranking with bootstrap intervals, the
//! judge's position bias, the judge calls made (purpose `judge`, each counted against the
//! caller's ceiling), the judge errors and the pairs not judged, and the lab's comparison
//! verdict between the top two. The answer is stored (`get_tournament` reads it back); audited
//! once as `sandbox.tournament`, with its id and counts only.

use std::collections::BTreeMap;
use std::sync::Mutex;

use corral_guard::runs::RunPurpose;
use corral_guard::{Caller, now_ms};
use corral_policy::{Role, codes};
use corral_store::lab::{self as store_lab, RunStatus};
use corral_store::tournament::StoredTournament;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    Action, LabError, LabService, MAX_STEP_EXECUTIONS, PageQuery, audited_id, clip,
    forbidden_recording, is_admin, may_read_owned, not_found,
};
use crate::judge::CommandJudge;
use crate::tournament::{self, DEFAULT_BOOTSTRAP, Judgment, MAX_BOOTSTRAP, PositionBias};
use crate::verdict::{self, Interval, Observed, ScoredTrials};

/// The action, as audited.
pub(super) const TOURNAMENT: Action = Action {
    op: "sandbox.tournament",
    role: Role::Operator,
};

/// Reading a stored tournament, as audited.
pub(super) const TOURNAMENTS_GET: Action = Action {
    op: "sandbox.tournaments.get",
    role: Role::Viewer,
};

/// Listing stored tournaments, as audited.
pub(super) const TOURNAMENTS_LIST: Action = Action {
    op: "sandbox.tournaments.list",
    role: Role::Viewer,
};

/// The most runs one tournament grades.
pub const MAX_TOURNAMENT_RUNS: usize = 16;

/// A tournament to grade.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TournamentBody {
    /// The runs (2 to [`MAX_TOURNAMENT_RUNS`]): finished runs of the same scenario and version.
    pub runs: Vec<String>,
    /// `command:<name>` of a judge under `sandbox.judges`.
    pub judge: String,
    /// The bootstrap's seed (default 0).
    #[serde(default)]
    pub seed: Option<u64>,
    /// The bootstrap's resamples (1 to [`MAX_BOOTSTRAP`], default [`DEFAULT_BOOTSTRAP`]).
    #[serde(default)]
    pub bootstrap: Option<u32>,
}

/// One run's place in the ranking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankedRun {
    /// 1 for the strongest.
    pub rank: usize,
    /// The run's variant label.
    pub variant: String,
    /// The run.
    pub run_id: String,
    /// Its Bradley-Terry strength (geometric mean 1 over the runs).
    pub strength: f64,
    /// The bootstrap's 95% percentile interval of its strength.
    pub interval: Interval,
    /// Its wins in the judgments (a tie is half).
    pub wins: f64,
    /// The judgments it took part in.
    pub judgments: u64,
}

/// A judge call that did not answer `first`, `second` or `tie`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgeFailure {
    /// The task (the scenario's step).
    pub task: u32,
    /// The run in the first slot.
    pub first: String,
    /// The run in the second slot.
    pub second: String,
    /// `lab.judge_failed` or `lab.judge_answer`.
    pub code: String,
    /// What happened.
    pub message: String,
}

/// A pair of runs not judged on a task (in either order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotJudged {
    /// The task.
    pub task: u32,
    /// One run.
    pub a: String,
    /// The other.
    pub b: String,
    /// Why: `lab.judge_ceiling`.
    pub code: String,
}

/// The lab's comparison verdict between the top two runs of the ranking, over the scenario's
/// steps (each step a pair, its score the run's scorer's): the second is the baseline, the top
/// one the candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopTwo {
    /// The second run (baseline).
    pub baseline: String,
    /// The top run (candidate).
    pub candidate: String,
    /// The comparison, as `sandbox compare` computes it.
    pub comparison: verdict::Comparison,
}

/// A graded tournament.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tournament {
    /// Its id, as stored (`GET /v1/sandbox/tournaments/{id}`).
    #[serde(default)]
    pub id: String,
    /// Who graded it.
    #[serde(default)]
    pub recorded_by: String,
    /// When it was stored (ms since the epoch).
    #[serde(default)]
    pub created_ms: i64,
    /// The scenario every run ran.
    pub scenario_id: String,
    /// Its version.
    pub scenario_version: i64,
    /// The judge (`command:<name>`).
    pub judge: String,
    /// `judge`: what the judge calls are metered as.
    pub purpose: String,
    /// The runs, strongest first.
    pub ranking: Vec<RankedRun>,
    /// How much the judge favoured the first slot.
    pub position_bias: PositionBias,
    /// Judge calls made (each counts against the ceiling, errors included).
    pub judge_calls: u64,
    /// The ceiling of judge calls this tournament had.
    pub max_judge_calls: u64,
    /// Judgments the ranking rests on (calls that answered).
    pub judgments: u64,
    /// The calls that did not answer.
    pub errors: Vec<JudgeFailure>,
    /// The (task, pair) the ceiling left unjudged: every one, in the order they would have run.
    pub not_judged: Vec<NotJudged>,
    /// The bootstrap's resamples.
    pub bootstrap: u32,
    /// The bootstrap's seed.
    pub seed: u64,
    /// Every judge sandbox ran isolated (false when none ran).
    pub isolated: bool,
    /// What the isolation backend applied to the judge's sandboxes (distinct ones).
    pub attestations: Vec<store_lab::RunAttestation>,
    /// The comparison verdict between the top two.
    pub top_two: Option<TopTwo>,
}

/// A run and its first trial's outputs by step.
struct Entrant {
    run: store_lab::Run,
    outputs: BTreeMap<u32, store_lab::Output>,
    /// Every trial's step scores, by step (for the verdict).
    scores: BTreeMap<u32, Vec<Option<(f64, bool)>>>,
}

impl LabService {
    /// Grades the runs `body.runs` by the judge `body.judge` (operator), making at most
    /// `max_judge_calls` judge calls: a pair of runs is judged on a task in both orders, and
    /// when its two calls would pass the ceiling, it and every pair after it are reported in
    /// `not_judged` (never silently left out). Stores the answer; one audit event.
    pub async fn tournament(
        &self,
        caller: &Caller,
        rid: &str,
        body: TournamentBody,
        max_judge_calls: u64,
    ) -> Result<Tournament, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&TOURNAMENT, caller)?;
            let mut t = self
                .tournament_inner(caller, &tenant, &body, max_judge_calls)
                .await?;
            let details = serde_json::to_value(&t).unwrap_or(Value::Null);
            let stored = self
                .store
                .append_tournament(&tenant, &caller.principal.id, &details, now_ms())
                .await?;
            t.id = stored.id;
            t.recorded_by = stored.recorded_by;
            t.created_ms = stored.created_ms;
            Ok(t)
        }
        .await;
        let detail = r.as_ref().ok().map(|t| {
            format!(
                "tournament={} runs={} judge_calls={} errors={} not_judged={}",
                t.id,
                t.ranking.len(),
                t.judge_calls,
                t.errors.len(),
                t.not_judged.len()
            )
        });
        self.finish(&TOURNAMENT, caller, rid, r, detail, None).await
    }

    /// A page of the tenant's stored tournaments, newest first (viewer).
    pub async fn list_tournaments(
        &self,
        caller: &Caller,
        rid: &str,
        page: &PageQuery,
    ) -> Result<store_lab::Paged<Tournament>, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&TOURNAMENTS_LIST, caller)?;
            let p = self.store.list_tournaments(&tenant, &page.page()?).await?;
            // An owned scenario's tournaments are listed only to its owner or an admin (a page
            // may then be shorter than asked; `next` still goes on from its last stored row).
            let mut items = Vec::with_capacity(p.items.len());
            for stored in p.items {
                let t = read_stored(stored)?;
                if self.may_read_tournament(caller, &tenant, &t).await? {
                    items.push(t);
                }
            }
            Ok(store_lab::Paged {
                items,
                next: p.next,
            })
        }
        .await;
        self.finish(&TOURNAMENTS_LIST, caller, rid, r, None, None)
            .await
    }

    /// A stored tournament of the tenant (viewer).
    pub async fn get_tournament(
        &self,
        caller: &Caller,
        rid: &str,
        id: &str,
    ) -> Result<Tournament, LabError> {
        let tenant = self.tenant_of(caller);
        let r = async {
            self.start(&TOURNAMENTS_GET, caller)?;
            let stored = self
                .store
                .get_tournament(&tenant, id)
                .await?
                .ok_or_else(|| not_found("tournament", &tenant, id))?;
            let t = read_stored(stored)?;
            if !self.may_read_tournament(caller, &tenant, &t).await? {
                return Err(forbidden_recording(caller));
            }
            Ok(t)
        }
        .await;
        let detail = Some(format!("tournament={}", audited_id(id)));
        self.finish(&TOURNAMENTS_GET, caller, rid, r, detail, None)
            .await
    }

    /// Whether `caller` may read `t`: a tournament of an owned scenario (a recorded task's)
    /// holds its task input and outputs (in the judge's errors and the runs' outputs), so only
    /// the scenario's owner or an admin reads it, as the scenario itself.
    async fn may_read_tournament(
        &self,
        caller: &Caller,
        tenant: &str,
        t: &Tournament,
    ) -> Result<bool, LabError> {
        Ok(
            match self.store.get_scenario(tenant, &t.scenario_id).await? {
                Some(s) => may_read_owned(caller, s.owner.as_deref()),
                // Gone (its runs purged, then it deleted): whose it was is unknown; fail closed.
                None => is_admin(caller),
            },
        )
    }

    async fn tournament_inner(
        &self,
        caller: &Caller,
        tenant: &str,
        body: &TournamentBody,
        max_judge_calls: u64,
    ) -> Result<Tournament, LabError> {
        check_runs(&body.runs)?;
        let bootstrap = match body.bootstrap.unwrap_or(DEFAULT_BOOTSTRAP) {
            n @ 1..=MAX_BOOTSTRAP => n,
            n => {
                return Err(LabError::invalid(format!(
                    "`bootstrap` is {n}; ask for 1 to {MAX_BOOTSTRAP} resamples (default {DEFAULT_BOOTSTRAP})"
                )));
            }
        };
        let seed = body.seed.unwrap_or(0);
        let judge = CommandJudge::of(&body.judge, &self.programs())?;
        let entrants = self.entrants(caller, tenant, &body.runs).await?;
        let (scenario_id, scenario_version) = entrants
            .first()
            .map(|e| (e.run.scenario_id.clone(), e.run.scenario_version))
            .unwrap_or_default();
        let scenario = self.scenario(caller, tenant, &scenario_id).await.ok();
        let expected = |task: u32| -> Option<Value> {
            let s = scenario
                .as_ref()
                .filter(|s| s.version == scenario_version)?;
            s.steps
                .get(usize::try_from(task).ok()?.checked_sub(1)?)?
                .get("expected")
                .cloned()
        };
        let tasks: Vec<u32> = {
            let mut t: Vec<u32> = entrants
                .iter()
                .flat_map(|e| e.outputs.keys().copied())
                .collect();
            t.sort_unstable();
            t.dedup();
            t
        };
        let n = entrants.len();
        let pairs = n * (n - 1) / 2;
        let needed = tasks.len().saturating_mul(pairs).saturating_mul(2);
        if needed > MAX_STEP_EXECUTIONS {
            return Err(LabError::invalid(format!(
                "this tournament would make {needed} judge calls ({} tasks x {pairs} pairs x 2 orders); the limit is {MAX_STEP_EXECUTIONS}: name fewer runs, or grade a scenario with fewer steps. Nothing was judged",
                tasks.len()
            )));
        }
        let Judged {
            calls,
            judgments,
            errors,
            not_judged,
            attestations,
        } = judge_pairs(&judge, &entrants, &tasks, &expected, max_judge_calls).await;
        // A tournament is one `judge` run; its judge calls are that run's calls.
        let meter = self.gateway().meter();
        meter.run(tenant, RunPurpose::Judge);
        meter.calls(tenant, RunPurpose::Judge, calls);
        let ranking = {
            tokio::task::spawn_blocking(move || tournament::rank(n, &judgments, bootstrap, seed))
                .await
                .map_err(|e| {
                    LabError::new(
                        codes::SERVER_INTERNAL,
                        format!(
                            "the tournament's ranking stopped before it finished ({e}); retry it"
                        ),
                    )
                })?
        };
        let ranked: Vec<RankedRun> = ranking
            .ranked
            .iter()
            .enumerate()
            .filter_map(|(place, r)| {
                let e = entrants.get(r.index)?;
                Some(RankedRun {
                    rank: place + 1,
                    variant: e.run.variant.clone(),
                    run_id: e.run.id.clone(),
                    strength: r.strength,
                    interval: r.interval,
                    wins: r.wins,
                    judgments: r.judgments,
                })
            })
            .collect();
        let top_two = match (ranking.ranked.first(), ranking.ranked.get(1)) {
            (Some(top), Some(second)) => {
                top_two_verdict(entrants.get(second.index), entrants.get(top.index), seed)
            }
            _ => None,
        };
        Ok(Tournament {
            id: String::new(),
            recorded_by: String::new(),
            created_ms: 0,
            scenario_id,
            scenario_version,
            judge: judge.name().to_owned(),
            purpose: RunPurpose::Judge.as_str().to_owned(),
            ranking: ranked,
            position_bias: ranking.position_bias,
            judge_calls: calls,
            max_judge_calls,
            judgments: ranking.judgments,
            errors,
            not_judged,
            bootstrap,
            seed,
            isolated: !attestations.is_empty() && attestations.iter().all(|a| a.isolated),
            attestations,
            top_two,
        })
    }

    /// The runs, read and checked: each of the tenant, completed, and of the first one's
    /// scenario and version; with their outputs.
    /// The runs graded, with their outputs: each one the caller may read the outputs of (a
    /// replay run's are its recording's values).
    async fn entrants(
        &self,
        caller: &Caller,
        tenant: &str,
        ids: &[String],
    ) -> Result<Vec<Entrant>, LabError> {
        let mut out: Vec<Entrant> = Vec::with_capacity(ids.len());
        for id in ids {
            let run = self
                .store
                .get_run(tenant, id)
                .await?
                .ok_or_else(|| not_found("run", tenant, id))?;
            self.check_outputs_access(caller, tenant, &run).await?;
            if run.status != RunStatus::Completed {
                return Err(LabError::new(
                    codes::LAB_TOURNAMENT_RUN_INCOMPLETE,
                    format!(
                        "run {} (variant {:?}) is {}, not completed, so it has no answer to every task; wait for it to finish, or name a completed run of that variant",
                        run.id,
                        clip(&run.variant),
                        serde_json::to_value(run.status)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    ),
                ));
            }
            if let Some(first) = out.first()
                && (first.run.scenario_id != run.scenario_id
                    || first.run.scenario_version != run.scenario_version)
            {
                return Err(LabError::new(
                    codes::LAB_TOURNAMENT_MISMATCH,
                    format!(
                        "run {} ran scenario {} at version {}, but run {} ran scenario {} at version {}: a tournament grades answers to the same tasks; name runs of one scenario and version",
                        run.id,
                        run.scenario_id,
                        run.scenario_version,
                        first.run.id,
                        first.run.scenario_id,
                        first.run.scenario_version
                    ),
                ));
            }
            let mut outputs = BTreeMap::new();
            let mut scores: BTreeMap<u32, Vec<Option<(f64, bool)>>> = BTreeMap::new();
            for o in self.store.list_outputs(tenant, &run.id).await? {
                scores.entry(o.step).or_default().push(o.score.zip(o.pass));
                if o.trial == 1 {
                    outputs.insert(o.step, o);
                }
            }
            out.push(Entrant {
                run,
                outputs,
                scores,
            });
        }
        Ok(out)
    }
}

/// What the judge calls gave.
struct Judged {
    calls: u64,
    judgments: Vec<Judgment>,
    errors: Vec<JudgeFailure>,
    not_judged: Vec<NotJudged>,
    attestations: Vec<store_lab::RunAttestation>,
}

/// Judge calls in flight at once, at most: judges are sandboxed programs, so a few at a time
/// hide their start-up latency without crowding the host.
pub const JUDGE_CONCURRENCY: usize = 4;

/// One planned judge call: the task, the run in the first slot and the one in the second.
struct Planned {
    task: u32,
    first: usize,
    second: usize,
    input: String,
    one: String,
    two: String,
    expected: Option<Value>,
}

/// What one judge call answered, and what its sandbox attested.
type Answered = (
    Result<crate::tournament::Prefer, crate::judge::JudgeError>,
    Vec<corral_exec::Attestation>,
);

/// Asks `judge` about every task and pair of `entrants`, in both orders (the first run of the
/// pair in the first slot, then the other): task by task, pairs in request order. Once a
/// pair's two calls would pass `max_judge_calls`, it and every pair after it go to
/// `not_judged` and no call is made. The calls run [`JUDGE_CONCURRENCY`] at a time; their
/// answers are taken in the planned order, so the same runs and seed give the same ranking.
async fn judge_pairs(
    judge: &CommandJudge,
    entrants: &[Entrant],
    tasks: &[u32],
    expected: &(dyn Fn(u32) -> Option<Value> + Sync),
    max_judge_calls: u64,
) -> Judged {
    let n = entrants.len();
    let id = |i: usize| {
        entrants
            .get(i)
            .map(|e| e.run.id.clone())
            .unwrap_or_default()
    };
    let text = |i: usize, task: u32| {
        entrants
            .get(i)
            .and_then(|e| e.outputs.get(&task))
            .map(|o| (o.input.clone(), o.output.clone()))
            .unwrap_or_default()
    };
    // The plan: every call within the ceiling, in order; every pair past it, not judged.
    let mut plan = Vec::new();
    let mut not_judged = Vec::new();
    let mut calls = 0u64;
    for &task in tasks {
        let exp = expected(task);
        for a in 0..n {
            for b in (a + 1)..n {
                if !not_judged.is_empty() || calls.saturating_add(2) > max_judge_calls {
                    not_judged.push(NotJudged {
                        task,
                        a: id(a),
                        b: id(b),
                        code: codes::LAB_JUDGE_CEILING.to_owned(),
                    });
                    continue;
                }
                for (first, second) in [(a, b), (b, a)] {
                    let (input, one) = text(first, task);
                    let (_, two) = text(second, task);
                    calls += 1;
                    plan.push(Planned {
                        task,
                        first,
                        second,
                        input,
                        one,
                        two,
                        expected: exp.clone(),
                    });
                }
            }
        }
    }
    let answers = ask_all(judge, &plan).await;
    let mut judgments = Vec::new();
    let mut errors = Vec::new();
    let mut attestations = Vec::<store_lab::RunAttestation>::new();
    for (p, (answer, attested)) in plan.iter().zip(answers) {
        for a in attested {
            let a = store_lab::RunAttestation {
                backend: a.backend.to_owned(),
                isolated: a.isolated,
                destroyed: a.destroyed,
                primitives: a.primitives,
            };
            if !attestations.contains(&a) {
                attestations.push(a);
            }
        }
        match answer {
            Ok(prefer) => judgments.push(Judgment {
                task: p.task,
                first: p.first,
                second: p.second,
                prefer,
            }),
            Err(e) => errors.push(JudgeFailure {
                task: p.task,
                first: id(p.first),
                second: id(p.second),
                code: e.code.to_owned(),
                message: e.message,
            }),
        }
    }
    Judged {
        calls,
        judgments,
        errors,
        not_judged,
        attestations,
    }
}

/// Makes every planned call, [`JUDGE_CONCURRENCY`] at a time; the answers in `plan`'s order.
async fn ask_all(judge: &CommandJudge, plan: &[Planned]) -> Vec<Answered> {
    let mut answers: Vec<Option<Answered>> = (0..plan.len()).map(|_| None).collect();
    let mut running = tokio::task::JoinSet::new();
    let ask = |i: usize, p: &Planned, running: &mut tokio::task::JoinSet<(usize, Answered)>| {
        let judge = judge.clone();
        let (input, one, two, exp) = (
            p.input.clone(),
            p.one.clone(),
            p.two.clone(),
            p.expected.clone(),
        );
        running.spawn(async move {
            let attested = Mutex::new(Vec::new());
            let attest = |a: corral_exec::Attestation| {
                if let Ok(mut v) = attested.lock() {
                    v.push(a);
                }
            };
            let r = judge.judge(&input, &one, &two, exp.as_ref(), &attest).await;
            (i, (r, attested.into_inner().unwrap_or_default()))
        });
    };
    let mut next = 0;
    while next < plan.len() || !running.is_empty() {
        while next < plan.len() && running.len() < JUDGE_CONCURRENCY {
            if let Some(p) = plan.get(next) {
                ask(next, p, &mut running);
            }
            next += 1;
        }
        // A judge task that panicked or was cancelled answers as a failed call below.
        if let Some(Ok((i, a))) = running.join_next().await
            && let Some(slot) = answers.get_mut(i)
        {
            *slot = Some(a);
        }
    }
    answers
        .into_iter()
        .map(|a| {
            a.unwrap_or_else(|| {
                (
                    Err(crate::judge::JudgeError {
                        code: codes::LAB_JUDGE_FAILED,
                        message: "the judge call stopped before it answered".to_owned(),
                    }),
                    Vec::new(),
                )
            })
        })
        .collect()
}

/// A stored tournament as the lab answered it, with its id, grader and time.
fn read_stored(stored: StoredTournament) -> Result<Tournament, LabError> {
    let mut t: Tournament = serde_json::from_value(stored.details).map_err(|e| {
        LabError::new(
            codes::LAB_INVALID_RECORD,
            format!("stored tournament {:?} cannot be read: {e}", stored.id),
        )
    })?;
    t.id = stored.id;
    t.recorded_by = stored.recorded_by;
    t.created_ms = stored.created_ms;
    Ok(t)
}

/// Refuses a run list that is too short, too long, or names a run twice.
fn check_runs(runs: &[String]) -> Result<(), LabError> {
    if runs.len() < 2 || runs.len() > MAX_TOURNAMENT_RUNS {
        return Err(LabError::invalid(format!(
            "`runs` has {} ids; name 2 to {MAX_TOURNAMENT_RUNS} finished runs of the same scenario, one per variant",
            runs.len()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = runs.iter().find(|r| !seen.insert(r.as_str())) {
        return Err(LabError::invalid(format!(
            "run {:?} is listed twice in `runs`; list each once",
            clip(dup)
        )));
    }
    Ok(())
}

/// The lab's verdict, the top run against the second, each step a pair scored by the runs'
/// scorer (the mean over trials; a step not scored makes the side unscored, so the verdict is
/// forced `inconclusive`, never a pass).
fn top_two_verdict(second: Option<&Entrant>, top: Option<&Entrant>, seed: u64) -> Option<TopTwo> {
    let (second, top) = (second?, top?);
    let observed = |e: &Entrant| -> Vec<Observed> {
        e.scores
            .iter()
            .map(|(step, trials)| {
                let scored: Option<Vec<(f64, bool)>> = trials.iter().copied().collect();
                Observed {
                    scenario: format!("step-{step}"),
                    trials: u32::try_from(trials.len()).unwrap_or(u32::MAX).max(1),
                    infra_errors: 0,
                    scored: scored.filter(|s| !s.is_empty()).map(|s| ScoredTrials {
                        score: (s.iter().map(|x| x.0).sum::<f64>() / s.len() as f64)
                            .clamp(0.0, 1.0),
                        passes: u32::try_from(s.iter().filter(|x| x.1).count()).unwrap_or(u32::MAX),
                    }),
                }
            })
            .collect()
    };
    let input = verdict::Input::new(
        second.run.variant.clone(),
        observed(second),
        top.run.variant.clone(),
        observed(top),
        seed,
    );
    let comparison = verdict::compare(&input).ok()?;
    Some(TopTwo {
        baseline: second.run.id.clone(),
        candidate: top.run.id.clone(),
        comparison,
    })
}
