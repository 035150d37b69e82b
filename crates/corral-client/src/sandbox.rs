//! The lab's routes (`/v1/sandbox/...`): request and answer types, and the [`Client`] methods
//! that send them. The types mirror the wire JSON; every answer type keeps the fields it does
//! not name in `extra`, so printing an answer again (`--format json`) loses nothing the server
//! sent.

use reqwest::Method;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::{Client, ClientError, decode_json, encode_segment};

/// `POST /v1/sandbox/synthetic-data`: every field optional (spec 003's defaults: subject kind
/// `agent`, count 10, template `{{subject_kind}}-sample-{{index}}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyntheticRequest {
    /// `{{subject_kind}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_kind: Option<String>,
    /// How many samples (1 to 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// The template (spec 003 calls it the seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
}

/// One generated input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// `sample-<index>`.
    pub key: String,
    /// The input.
    pub input: String,
}

/// A generated batch: `{"samples": [{key, input}]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyntheticBatch {
    /// The samples, in index order.
    pub samples: Vec<Sample>,
}

/// One step of a scenario: the input, and the expected output when the step is scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The step's input (for the identity agent: the resource it asks for).
    pub input: String,
    /// The expected output (a string, or any JSON for the `json_path` scorer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Value>,
}

/// `POST /v1/sandbox/scenarios` (and, with `version`, `PUT /v1/sandbox/scenarios/{id}`).
/// Steps come as `steps` or as a synthetic batch's `samples`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScenarioRequest {
    /// A short name (at most 200 bytes).
    pub name: String,
    /// What the scenario checks (at most 4096 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<Step>>,
    /// The steps as a synthetic batch's samples (each sample's input is a step's input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<Vec<Sample>>,
    /// The mocks: `{resource, response}`, `{op, args, response}` or `{op, args, error}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mocks: Option<Vec<Value>>,
    /// For an update: the version the change is based on (a stale one is 409
    /// `lab.version_conflict`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
}

/// A stored scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its description.
    #[serde(default)]
    pub description: String,
    /// Its steps.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// Its mocks.
    #[serde(default)]
    pub mocks: Vec<Value>,
    /// 1 when created, +1 at each update.
    #[serde(default)]
    pub version: i64,
    /// When it was created (ms since the epoch).
    #[serde(default)]
    pub created_ms: i64,
    /// When it was last changed.
    #[serde(default)]
    pub updated_ms: i64,
    /// The fields this type does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A scenario in a listing (no steps or mocks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioSummary {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its description.
    #[serde(default)]
    pub description: String,
    /// Its version.
    #[serde(default)]
    pub version: i64,
    /// When it was created.
    #[serde(default)]
    pub created_ms: i64,
    /// When it was last changed.
    #[serde(default)]
    pub updated_ms: i64,
    /// The fields this type does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A page of a listing, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page<T> {
    /// The rows.
    pub items: Vec<T>,
    /// The cursor of the next page (pass it as `after`); `None` on the last page.
    #[serde(default, deserialize_with = "cursor")]
    pub next: Option<String>,
}

/// A page cursor as text: the server's string, or a `{created_ms, id}` object as `<ms>.<id>`.
fn cursor<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        Value::Object(o) => match (o.get("created_ms"), o.get("id")) {
            (Some(ms), Some(Value::String(id))) => Some(format!("{ms}.{id}")),
            _ => None,
        },
        _ => None,
    })
}

/// Where a listing starts and how long a page is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageRequest {
    /// Rows per page (the server's default when `None`).
    pub limit: Option<u32>,
    /// The `next` cursor of the previous page.
    pub after: Option<String>,
}

/// `POST /v1/sandbox/scenarios/{id}/runs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The variant's label (e.g. `candidate`).
    pub variant: String,
    /// A declarative workflow (YAML text); without it (and `program`) the agent is the
    /// identity agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// An external program declared under the server's `sandbox.programs`, run in the `linux`
    /// backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// The seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Trials per step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trials: Option<u32>,
    /// The scorer: `exact`, `regex`, `json_path` or `command:<name>` (declared under
    /// `sandbox.scorers`); none: "executed, not scored".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scorer: Option<String>,
    /// `inproc-mock` (the default) or `linux`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
}

/// A step that asked for something the scenario does not mock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MockMiss {
    /// The step, from 1.
    pub step: u32,
    /// The op it called (`scenario.resource` for the identity agent).
    pub op: String,
    /// The hash of the call's canonical arguments.
    pub args_hash: String,
}

/// A run record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Its id (also the run id of its calls in the audit).
    pub id: String,
    /// The scenario it ran.
    pub scenario_id: String,
    /// `running`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// The runner that executed it.
    #[serde(default)]
    pub runner: String,
    /// The backend the steps ran in (`inproc-mock`, `linux`).
    #[serde(default)]
    pub backend: String,
    /// Attested: the steps ran isolated.
    #[serde(default)]
    pub isolated: bool,
    /// Attested: the run's ephemeral state was destroyed.
    #[serde(default)]
    pub destroyed: bool,
    /// Steps executed (over all trials).
    #[serde(default)]
    pub steps_total: u64,
    /// Steps that answered.
    #[serde(default)]
    pub steps_ok: u64,
    /// Steps that ended in an agent failure (refusal, mock miss, error).
    #[serde(default)]
    pub steps_error: u64,
    /// Infrastructure errors met (server, audit, store), apart from the agent's failures.
    #[serde(default)]
    pub infra_errors: u64,
    /// The purpose its calls were metered under (`simulation`).
    #[serde(default)]
    pub purpose: String,
    /// The variant.
    #[serde(default)]
    pub variant: String,
    /// The seed.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Trials per step.
    #[serde(default)]
    pub trials: Option<u32>,
    /// The scorer suite, if one was attached.
    #[serde(default)]
    pub scorer_suite: Option<String>,
    /// The suite's score, when scored.
    #[serde(default)]
    pub score: Option<f64>,
    /// `passed`, `failed` or `not_scored` ("executed, not scored").
    #[serde(default)]
    pub verdict: String,
    /// Of a scored run: the trials that passed; `None` when not scored.
    #[serde(default)]
    pub trials_passed: Option<u32>,
    /// Of a scored run: pass@k (k = `trials`): at least one of the k trials passed.
    #[serde(default)]
    pub pass_at_k: Option<f64>,
    /// Of a scored run: pass^k (k = `trials`): all k trials passed.
    #[serde(default)]
    pub pass_hat_k: Option<f64>,
    /// The steps that missed the mocks.
    #[serde(default)]
    pub mock_misses: Vec<MockMiss>,
    /// The fields this type does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One step's recorded output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// The step, from 1.
    pub step: u32,
    /// The trial, from 1.
    #[serde(default)]
    pub trial: u32,
    /// The step's input.
    pub input: String,
    /// What the agent answered (a `[[mock-miss:...]]` marker included).
    pub output: String,
    /// Whether the step answered.
    pub ok: bool,
    /// The code of the step's failure.
    #[serde(default)]
    pub error_code: Option<String>,
    /// The scorer's score.
    #[serde(default)]
    pub score: Option<f64>,
    /// The scorer's pass.
    #[serde(default)]
    pub pass: Option<bool>,
    /// The fields this type does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `GET /v1/sandbox/runs/{id}/outputs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outputs {
    /// The outputs, by step and trial.
    pub items: Vec<Output>,
    /// The fields this type does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A recording (`GET /v1/sandbox/recordings`): the call timeline of a run marked for
/// recording, without its events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    /// The run id.
    pub run_id: String,
    /// The principal whose calls it holds.
    pub principal: String,
    /// That principal's full identity (`token:service:bot`, ...), which owns the recording.
    #[serde(default)]
    pub identity: String,
    /// The run's purpose.
    #[serde(default)]
    pub purpose: String,
    /// Events stored.
    pub events: u64,
    /// Bytes of stored event text.
    #[serde(default)]
    pub bytes: u64,
    /// The size cap stopped it: later calls were not recorded.
    #[serde(default)]
    pub capped: bool,
    /// An event could not be written: its timeline has a hole.
    #[serde(default)]
    pub gapped: bool,
    /// When its first event was written (ms since the epoch).
    #[serde(default)]
    pub created_ms: i64,
    /// When retention deletes it.
    #[serde(default)]
    pub expires_ms: i64,
    /// The task input the run was given, when it was kept.
    #[serde(default)]
    pub input: Option<Value>,
    /// The fields this type does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordingEvent {
    /// Its place in the timeline, from 1.
    pub seq: u64,
    /// The op id.
    pub op: String,
    /// The canonical arguments.
    #[serde(default)]
    pub args: Value,
    /// The response (`null` for a refusal or an error).
    #[serde(default)]
    pub response: Option<Value>,
    /// The code of a refusal or an op error.
    #[serde(default)]
    pub error_code: Option<String>,
    /// How long the call took, in microseconds.
    #[serde(default)]
    pub duration_us: i64,
    /// The fields this type does not name (attestation, started_ms).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `GET /v1/sandbox/recordings/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordingDetail {
    /// The recording.
    pub recording: Recording,
    /// Its events, by `seq`.
    pub events: Vec<RecordingEvent>,
}

/// A deterministic replay to make (`POST /v1/sandbox/recordings/{id}/replay`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayRequest {
    /// The variant's label; none (and no `workflow` or `program`): the recording's trajectory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The variant's declarative workflow (YAML text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// An external program declared under the server's `sandbox.programs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// The seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// What the recording expected where a replay diverged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expected {
    /// The recorded call's place, from 1.
    pub seq: u64,
    /// Its op.
    pub op: String,
    /// The hash of its canonical arguments.
    pub args_hash: String,
}

/// A call a replay made that its recording lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The step, from 1.
    pub step: u32,
    /// The op called.
    pub op: String,
    /// The hash of its canonical arguments.
    pub args_hash: String,
    /// The recording's next call not yet taken there; none when it was used up.
    #[serde(default)]
    pub expected: Option<Expected>,
}

/// A deterministic replay's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The recorded run's id.
    pub recording: String,
    /// `replayed` or `degraded`.
    pub status: String,
    /// Why it is degraded.
    #[serde(default)]
    pub reason: Option<String>,
    /// Steps executed (0 when degraded).
    pub steps: u64,
    /// The replay's run (purpose `replay`); none when degraded.
    #[serde(default)]
    pub run: Option<Run>,
    /// The calls the recording lacked.
    #[serde(default)]
    pub divergences: Vec<Divergence>,
    /// A trajectory replay: whether every output equals the recorded one byte for byte.
    #[serde(default)]
    pub identical: Option<bool>,
    /// A trajectory replay: the steps whose output differs.
    #[serde(default)]
    pub differing_steps: Vec<u32>,
}

/// One side of a comparison.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VariantSpec {
    /// The variant's label.
    pub variant: String,
    /// Its declarative workflow (YAML text); none (and no `program`): the identity agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// An external program declared under the server's `sandbox.programs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
}

/// `POST /v1/sandbox/comparisons`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ComparisonRequest {
    /// The baseline.
    pub baseline: VariantSpec,
    /// The candidate.
    pub candidate: VariantSpec,
    /// The scenarios both run.
    pub scenarios: Vec<String>,
    /// Trials per scenario.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trials: Option<u32>,
    /// The seed of the runs and of the bootstrap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The scorer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scorer: Option<String>,
    /// The margin of `unchanged` (default 0.05).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub margin: Option<f64>,
    /// A deploy comparison (an admin's decision).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deploy: bool,
    /// How many runs execute at once (1-8; default: the server's CPUs, at most 8). The
    /// verdict does not depend on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<u32>,
}

/// A recorded comparison. Its statistics (interval, McNemar, Wilson intervals, pairs) are in
/// `extra` as the server sent them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Its id.
    pub id: String,
    /// `improved`, `regressed`, `unchanged` or `inconclusive`.
    pub verdict: String,
    /// The mean paired difference, candidate - baseline.
    #[serde(default)]
    pub delta: Option<f64>,
    /// The rule that forced `inconclusive`, if one did.
    #[serde(default)]
    pub forced_by: Option<String>,
    /// Whether it is a deploy comparison.
    #[serde(default)]
    pub deploy: bool,
    /// The fields this type does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `POST /v1/sandbox/tournaments`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TournamentRequest {
    /// Finished runs of the same scenario and version, one per variant (2 to 16).
    pub runs: Vec<String>,
    /// `command:<name>` of a judge declared under the server's `sandbox.judges`.
    pub judge: String,
    /// The bootstrap's seed (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The bootstrap's resamples (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<u32>,
}

/// A run's place in a tournament's ranking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TournamentEntry {
    /// 1 for the strongest.
    pub rank: usize,
    /// The run's variant label.
    pub variant: String,
    /// The run.
    pub run_id: String,
    /// Its Bradley-Terry strength (geometric mean 1).
    pub strength: f64,
    /// Its 95% bootstrap interval: `{lower, upper}`.
    pub interval: Value,
    /// The fields this type does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A graded tournament. Its position bias, errors, pairs not judged and the top two's verdict
/// are in `extra` as the server sent them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tournament {
    /// The runs, strongest first.
    pub ranking: Vec<TournamentEntry>,
    /// Judge calls made.
    pub judge_calls: u64,
    /// The fields this type does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `POST /v1/sandbox/shadows`: a shadow evaluation, M recorded tasks under N variants.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShadowRequest {
    /// The recorded tasks (run ids of recordings that kept their task input).
    pub tasks: Vec<String>,
    /// The variants (each a workflow or a declared program).
    pub variants: Vec<VariantSpec>,
    /// The seed of every run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The scorer of every run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scorer: Option<String>,
    /// N*M as announced: required over 10 runs, and exact when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_runs: Option<u64>,
    /// Whose recording of each task (its identity, or the principal's id), when several
    /// principals recorded under a run id (an admin's pick).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

/// A shadow evaluation: its status, its progress (`ran` of `planned`), the run ids per task and
/// variant, the pairs not run and the report; the other fields are in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shadow {
    /// Its id.
    pub id: String,
    /// `running`, `completed`, `stopped_by_ceiling` or `failed`.
    pub status: String,
    /// N variants x M tasks.
    pub planned: u64,
    /// Runs finished so far.
    pub ran: u64,
    /// The tasks, in request order.
    #[serde(default)]
    pub tasks: Vec<String>,
    /// The variant labels, in request order.
    #[serde(default)]
    pub variants: Vec<String>,
    /// Per task: `{scenario_id, runs: {variant: run_id | null}}`.
    #[serde(default)]
    pub runs: Value,
    /// The `{variant, task}` pairs a ceiling stopped.
    #[serde(default)]
    pub not_run: Value,
    /// The runs' divergences, the metering and the ceilings.
    #[serde(default)]
    pub report: Value,
    /// The fields this type does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Client {
    async fn send_json<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        let body = serde_json::to_vec(body).map_err(|e| ClientError::Protocol {
            status: None,
            message: format!("the request cannot be encoded as JSON: {e}"),
        })?;
        let rb = self
            .request(method, self.url(path)?)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json")
            .body(body);
        let resp = self.send(rb).await?;
        decode_json(resp).await
    }

    async fn get_query<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, ClientError> {
        self.query_json(Method::GET, path, query).await
    }

    async fn query_json<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, ClientError> {
        let mut url = self.url(path)?;
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        let rb = self.request(method, url).header(ACCEPT, "application/json");
        let resp = self.send(rb).await?;
        decode_json(resp).await
    }

    /// `POST /v1/sandbox/synthetic-data`: generates inputs (stores nothing; role operator).
    pub async fn sandbox_generate(
        &self,
        req: &SyntheticRequest,
    ) -> Result<SyntheticBatch, ClientError> {
        self.send_json(Method::POST, "v1/sandbox/synthetic-data", req)
            .await
    }

    /// `POST /v1/sandbox/scenarios`: stores a scenario (role operator).
    pub async fn sandbox_create_scenario(
        &self,
        req: &ScenarioRequest,
    ) -> Result<Scenario, ClientError> {
        self.send_json(Method::POST, "v1/sandbox/scenarios", req)
            .await
    }

    /// `PUT /v1/sandbox/scenarios/{id}`: replaces a scenario; `req.version` is the version the
    /// change is based on (role operator).
    pub async fn sandbox_update_scenario(
        &self,
        id: &str,
        req: &ScenarioRequest,
    ) -> Result<Scenario, ClientError> {
        let path = format!("v1/sandbox/scenarios/{}", encode_segment(id));
        self.send_json(Method::PUT, &path, req).await
    }

    /// `GET /v1/sandbox/scenarios?limit=&after=`: a page of the tenant's scenarios.
    pub async fn sandbox_list_scenarios(
        &self,
        page: &PageRequest,
    ) -> Result<Page<ScenarioSummary>, ClientError> {
        self.get_query("v1/sandbox/scenarios", &page_query(page, None))
            .await
    }

    /// `GET /v1/sandbox/scenarios/{id}`.
    pub async fn sandbox_scenario(&self, id: &str) -> Result<Scenario, ClientError> {
        let path = format!("v1/sandbox/scenarios/{}", encode_segment(id));
        self.get_query(&path, &[]).await
    }

    /// `POST /v1/sandbox/scenarios/{id}/runs`: runs the scenario and answers its record once it
    /// has finished (role operator).
    pub async fn sandbox_run(
        &self,
        scenario_id: &str,
        req: &RunRequest,
    ) -> Result<Run, ClientError> {
        let path = format!("v1/sandbox/scenarios/{}/runs", encode_segment(scenario_id));
        self.send_json(Method::POST, &path, req).await
    }

    /// `GET /v1/sandbox/runs?scenario=&limit=&after=`: a page of the tenant's runs.
    pub async fn sandbox_list_runs(
        &self,
        scenario: Option<&str>,
        page: &PageRequest,
    ) -> Result<Page<Run>, ClientError> {
        self.get_query("v1/sandbox/runs", &page_query(page, scenario))
            .await
    }

    /// `GET /v1/sandbox/runs/{id}`.
    pub async fn sandbox_get_run(&self, id: &str) -> Result<Run, ClientError> {
        let path = format!("v1/sandbox/runs/{}", encode_segment(id));
        self.get_query(&path, &[]).await
    }

    /// `GET /v1/sandbox/runs/{id}/outputs`.
    pub async fn sandbox_run_outputs(&self, id: &str) -> Result<Outputs, ClientError> {
        let path = format!("v1/sandbox/runs/{}/outputs", encode_segment(id));
        self.get_query(&path, &[]).await
    }

    /// `POST /v1/sandbox/comparisons`: runs both variants on the scenarios and records the
    /// verdict (role operator; admin with `deploy`).
    pub async fn sandbox_compare(
        &self,
        req: &ComparisonRequest,
    ) -> Result<Comparison, ClientError> {
        self.send_json(Method::POST, "v1/sandbox/comparisons", req)
            .await
    }

    /// `POST /v1/sandbox/tournaments`: grades finished runs of one scenario by a command judge
    /// and stores the answer (role operator).
    pub async fn sandbox_tournament(
        &self,
        req: &TournamentRequest,
    ) -> Result<Tournament, ClientError> {
        self.send_json(Method::POST, "v1/sandbox/tournaments", req)
            .await
    }

    /// `GET /v1/sandbox/tournaments/{id}`: a stored tournament (role viewer).
    pub async fn sandbox_tournament_get(&self, id: &str) -> Result<Tournament, ClientError> {
        let path = format!("v1/sandbox/tournaments/{}", encode_segment(id));
        self.get_query(&path, &[]).await
    }

    /// `GET /v1/sandbox/comparisons?limit=&after=`.
    pub async fn sandbox_list_comparisons(
        &self,
        page: &PageRequest,
    ) -> Result<Page<Comparison>, ClientError> {
        self.get_query("v1/sandbox/comparisons", &page_query(page, None))
            .await
    }

    /// `GET /v1/sandbox/comparisons/{id}`.
    pub async fn sandbox_comparison(&self, id: &str) -> Result<Comparison, ClientError> {
        let path = format!("v1/sandbox/comparisons/{}", encode_segment(id));
        self.get_query(&path, &[]).await
    }

    /// `POST /v1/sandbox/shadows`: starts a shadow evaluation (answered `running`; poll
    /// [`Client::sandbox_shadow`]).
    pub async fn sandbox_start_shadow(&self, req: &ShadowRequest) -> Result<Shadow, ClientError> {
        self.send_json(Method::POST, "v1/sandbox/shadows", req)
            .await
    }

    /// `GET /v1/sandbox/shadows?limit=&after=`.
    pub async fn sandbox_list_shadows(
        &self,
        page: &PageRequest,
    ) -> Result<Page<Shadow>, ClientError> {
        self.get_query("v1/sandbox/shadows", &page_query(page, None))
            .await
    }

    /// `GET /v1/sandbox/shadows/{id}`.
    pub async fn sandbox_shadow(&self, id: &str) -> Result<Shadow, ClientError> {
        let path = format!("v1/sandbox/shadows/{}", encode_segment(id));
        self.get_query(&path, &[]).await
    }

    /// `GET /v1/sandbox/recordings?limit=&after=`: a page of the tenant's recordings (every
    /// one for an admin, the caller's own runs for anyone else).
    pub async fn sandbox_list_recordings(
        &self,
        page: &PageRequest,
    ) -> Result<Page<Recording>, ClientError> {
        self.get_query("v1/sandbox/recordings", &page_query(page, None))
            .await
    }

    /// `GET /v1/sandbox/recordings/{id}`: a recording and its events (admin, or the run's own
    /// principal).
    /// `owner` names the principal (identity or id) when several recorded under `run_id`.
    pub async fn sandbox_recording(
        &self,
        run_id: &str,
        owner: Option<&str>,
    ) -> Result<RecordingDetail, ClientError> {
        let path = format!("v1/sandbox/recordings/{}", encode_segment(run_id));
        let query: Vec<(&str, String)> = owner
            .map(|o| ("principal", o.to_owned()))
            .into_iter()
            .collect();
        self.get_query(&path, &query).await
    }

    /// `DELETE /v1/sandbox/recordings/{id}?principal=`: deletes a recording and its events
    /// (admin); the recording as it was.
    pub async fn sandbox_delete_recording(
        &self,
        run_id: &str,
        owner: Option<&str>,
    ) -> Result<Recording, ClientError> {
        let path = format!("v1/sandbox/recordings/{}", encode_segment(run_id));
        let query: Vec<(&str, String)> = owner
            .map(|o| ("principal", o.to_owned()))
            .into_iter()
            .collect();
        self.query_json(Method::DELETE, &path, &query).await
    }

    /// `POST /v1/sandbox/recordings/{id}/replay`: replays the recording deterministically (its
    /// responses answer every call).
    pub async fn sandbox_replay(
        &self,
        run_id: &str,
        req: &ReplayRequest,
    ) -> Result<ReplayReport, ClientError> {
        let path = format!("v1/sandbox/recordings/{}/replay", encode_segment(run_id));
        self.send_json(Method::POST, &path, req).await
    }

    /// `PUT /v1/sandbox/recordings/{id}/input`: keeps a live session's task input (`steps`:
    /// `[{input, expected?}]`), once.
    pub async fn sandbox_set_recording_input(
        &self,
        run_id: &str,
        steps: &Value,
    ) -> Result<Recording, ClientError> {
        let path = format!("v1/sandbox/recordings/{}/input", encode_segment(run_id));
        self.send_json(Method::PUT, &path, &serde_json::json!({ "steps": steps }))
            .await
    }

    /// `GET /v1/sandbox/recordings/{id}/export`: the recording as JSON lines, as the server
    /// sent them.
    pub async fn sandbox_export_recording(
        &self,
        run_id: &str,
        owner: Option<&str>,
    ) -> Result<String, ClientError> {
        let path = format!("v1/sandbox/recordings/{}/export", encode_segment(run_id));
        let mut url = self.url(&path)?;
        if let Some(o) = owner {
            url.query_pairs_mut().append_pair("principal", o);
        }
        let rb = self
            .request(Method::GET, url)
            .header(ACCEPT, "application/x-ndjson");
        let resp = self.send(rb).await?;
        resp.text().await.map_err(|e| ClientError::Transport {
            message: crate::transport_message(&e),
        })
    }
}

fn page_query(page: &PageRequest, scenario: Option<&str>) -> Vec<(&'static str, String)> {
    let mut q = Vec::new();
    if let Some(s) = scenario {
        q.push(("scenario", s.to_owned()));
    }
    if let Some(l) = page.limit {
        q.push(("limit", l.to_string()));
    }
    if let Some(a) = &page.after {
        q.push(("after", a.clone()));
    }
    q
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_run_record_prints_back_every_field_the_server_sent() {
        let wire = serde_json::json!({
            "id": "r1", "scenario_id": "s1", "status": "completed", "runner": "lab",
            "backend": "inproc-mock", "isolated": true, "destroyed": true, "steps_total": 2,
            "steps_ok": 1, "steps_error": 1, "infra_errors": 0, "purpose": "simulation",
            "variant": "candidate", "seed": 0, "trials": null, "scorer_suite": null,
            "score": null, "verdict": "not_scored", "trials_passed": null, "pass_at_k": null,
            "pass_hat_k": null,
            "mock_misses": [{"step": 2, "op": "scenario.resource", "args_hash": "ab"}],
            "started_ms": 5, "tenant": "default"
        });
        let run: Run = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(run.extra["started_ms"], 5);
        assert_eq!(serde_json::to_value(&run).unwrap(), wire);
    }

    #[test]
    fn a_page_cursor_reads_as_text_whether_sent_as_text_or_as_an_object() {
        let p: Page<Value> =
            serde_json::from_value(serde_json::json!({"items": [], "next": "5.abc"})).unwrap();
        assert_eq!(p.next.as_deref(), Some("5.abc"));
        let p: Page<Value> = serde_json::from_value(
            serde_json::json!({"items": [], "next": {"created_ms": 5, "id": "abc"}}),
        )
        .unwrap();
        assert_eq!(p.next.as_deref(), Some("5.abc"));
        let p: Page<Value> = serde_json::from_value(serde_json::json!({"items": []})).unwrap();
        assert_eq!(p.next, None);
    }

    #[test]
    fn ids_in_sandbox_paths_stay_in_their_segment() {
        let c = Client::new("http://127.0.0.1:9000", None).unwrap();
        let path = format!("v1/sandbox/runs/{}/outputs", encode_segment("../../ops"));
        assert_eq!(
            c.url(&path).unwrap().as_str(),
            "http://127.0.0.1:9000/v1/sandbox/runs/..%2F..%2Fops/outputs"
        );
    }
}
