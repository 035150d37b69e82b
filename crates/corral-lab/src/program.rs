//! External programs, run in the `linux` backend: the external-program variant (an agent in any
//! language) and the external command scorer. Only programs the config declares run
//! (`sandbox.programs`, `sandbox.scorers`): a request names one, never a path.
//!
//! **A variant's program** gets, per step, a fresh sandbox whose only network is corral's own
//! API for its run ([`corral_exec::RunNetwork::Corral`]): `CORRAL_URL` answers `GET /ops`,
//! `POST /ops/{id}` and `/mcp` over the run's world (its calls are the run's, answered from the
//! scenario's mocks, audited, metered under purpose `simulation`), authenticated by
//! `CORRAL_TOKEN`, a token minted for that step that nothing else accepts (the link compares it;
//! it is worthless on corral's listener). The step's input is on its stdin; what it prints on
//! stdout (one trailing newline dropped) is its answer. The surface is served by the HTTP crate,
//! which this crate cannot name: it hands the lab a [`ProgramLinks`] when it starts.
//!
//! **A command scorer** gets a sandbox with no network at all, reads `{input, output, expected}`
//! (JSON) on stdin, and prints `{"score": <0..1>, "pass": <bool>}`.
//!
//! Every sandbox's attestation goes to the run's world, and the run is recorded isolated only if
//! every one was isolated.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use corral_exec::CorralLink;
use corral_exec::linux::CORRAL_LINK_URL;
use corral_exec::{Backend, BoxFuture, ExecError, ExecOutput, ExecRequest, ResourceLimits};
use corral_exec::{DEFAULT_MEMORY, RunNetwork};
use corral_guard::{Caller, Gateway};
use corral_policy::codes;
use serde_json::{Value, json};

use crate::agent::{Agent, StepCtx, StepOutcome};
use crate::score::{ScoreError, Scored};
use crate::world::World;

/// The most bytes of an answer (or a scorer's line) kept; more is `lab.program_output`.
pub const MAX_ANSWER_BYTES: u64 = 1024 * 1024;
/// How long a program may take per step (or a scorer per output) when its entry sets nothing.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The process limit of a program whose entry sets none.
pub const DEFAULT_PROCESSES: u32 = 64;
/// The most bytes of a program's stderr quoted in a failure's message.
const STDERR_QUOTED: usize = 500;

/// A program the config declares, with its paths made absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramSpec {
    /// Its name under `sandbox.programs` (or `sandbox.scorers`).
    pub name: String,
    /// The program and its arguments (no shell).
    pub argv: Vec<String>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Directories it may read, besides the sandbox's system view.
    pub read_paths: Vec<PathBuf>,
    /// How long one step (or one scoring) may take.
    pub timeout: Duration,
    /// Its memory limit, bytes (`None`: corral's default cap).
    pub memory: Option<u64>,
    /// Its process limit (`None`: [`DEFAULT_PROCESSES`]).
    pub processes: Option<u32>,
    /// Corral's own files (its config, its state directory: the store, the audit), hidden from
    /// the program even under one of its `read_paths`, as from every other sandbox of corral.
    pub protected: Vec<PathBuf>,
    /// The ops it calls, as its entry's `tools:` declares them: what a shadow evaluation checks
    /// before it runs (`None`: undeclared, so it is ineligible for shadow evaluation; its calls
    /// would be limited to the replay's safe ops anyway).
    pub tools: Option<Vec<String>>,
}

impl ProgramSpec {
    /// The request that runs it once, reading `stdin`, with the extra variables `env`.
    pub(crate) fn request(
        &self,
        stdin: Vec<u8>,
        env: Vec<(String, String)>,
        net: RunNetwork,
    ) -> ExecRequest {
        let mut vars = vec![
            ("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()),
            ("HOME".to_owned(), "/tmp".to_owned()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ];
        vars.extend(env);
        ExecRequest {
            argv: self.argv.clone(),
            cwd: self.cwd.clone(),
            env: vars,
            stdin: Some(stdin),
            timeout: self.timeout,
            max_output_bytes: MAX_ANSWER_BYTES,
            limits: ResourceLimits {
                memory: self.memory,
                default_memory: Some(DEFAULT_MEMORY),
                processes: Some(self.processes.unwrap_or(DEFAULT_PROCESSES)),
                ..ResourceLimits::default()
            },
            read_paths: self.read_paths.clone(),
            write_paths: Vec::new(),
            protected: {
                let mut p = corral_policy::Protected::default();
                for own in &self.protected {
                    p.add_path(&own.to_string_lossy());
                }
                p
            },
            network: Some(net),
            exec_only: None,
            hold: None,
            apply_only_if_ok: false,
            host_writes: None,
        }
    }
}

/// The digest of a token: corral-exec's, beside the link that uses it.
pub use corral_exec::TokenDigest;

/// Serves corral's API to one step's program (implemented by the HTTP crate).
pub trait ProgramLinks: Send + Sync + fmt::Debug {
    /// A link whose requests are authenticated by the token `token` accepts (and by nothing
    /// else), made as `caller`, through `gateway` (the run's world).
    fn link(&self, gateway: Arc<Gateway>, caller: Caller, token: TokenDigest) -> CorralLink;
}

/// The declared programs and scorers, and what runs them.
#[derive(Debug, Clone, Default)]
pub struct Programs {
    /// `sandbox.programs`, by name.
    pub agents: BTreeMap<String, Arc<ProgramSpec>>,
    /// `sandbox.scorers`, by name.
    pub scorers: BTreeMap<String, Arc<ProgramSpec>>,
    /// `sandbox.judges`, by name.
    pub judges: BTreeMap<String, Arc<ProgramSpec>>,
    /// The deployment's isolation backend (programs run only if it is `linux`).
    pub backend: Option<Arc<dyn Backend>>,
}

/// A fresh token for one step's program (244 random bits: two v4 UUIDs), and its digest.
fn mint() -> (String, TokenDigest) {
    let token = format!(
        "corral-run-{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let digest = TokenDigest::of(&token);
    (token, digest)
}

/// The end of a program's stderr, as printable text, for a failure's message.
fn stderr_tail(out: &ExecOutput) -> String {
    let text = String::from_utf8_lossy(&out.stderr);
    let tail: String = text
        .chars()
        .rev()
        .take(STDERR_QUOTED)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .map(|c| if c.is_control() && c != '\n' { '?' } else { c })
        .collect();
    tail.trim().to_owned()
}

/// How a program's run ended, as text: `exit status 3`, `signal 9`.
fn ending(out: &ExecOutput) -> String {
    match (out.exit_code, out.signal) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("signal {s}"),
        (None, None) => "no exit status".to_owned(),
    }
}

/// How a program that did not finish well ended: killed at its `timeout` (`Err(true, ..)`), or
/// a non-zero exit or a signal (`Err(false, ..)`), each with the words that say so.
pub(crate) fn finished(out: &ExecOutput, timeout: Duration) -> Result<(), (bool, String)> {
    if out.timed_out {
        return Err((
            true,
            format!("killed after its timeout of {} s", timeout.as_secs_f64()),
        ));
    }
    if out.exit_code != Some(0) {
        return Err((
            false,
            format!("{}; stderr ends: {:?}", ending(out), stderr_tail(out)),
        ));
    }
    Ok(())
}

/// The external-program variant.
#[derive(Debug, Clone)]
pub struct ProgramAgent {
    spec: Arc<ProgramSpec>,
    backend: Arc<dyn Backend>,
    links: Arc<dyn ProgramLinks>,
}

impl ProgramAgent {
    /// The program `spec`, run by `backend`, its API served by `links`.
    pub fn new(
        spec: Arc<ProgramSpec>,
        backend: Arc<dyn Backend>,
        links: Arc<dyn ProgramLinks>,
    ) -> Self {
        Self {
            spec,
            backend,
            links,
        }
    }

    fn outcome(&self, r: Result<ExecOutput, ExecError>, world: &World) -> StepOutcome {
        let out = match r {
            Ok(out) => out,
            Err(e) => {
                return StepOutcome::Failed {
                    output: String::new(),
                    code: e.code(),
                    message: format!("program `{}`: {e}", self.spec.name),
                };
            }
        };
        world.attest(out.attestation.clone());
        let failed = |code, message: String| StepOutcome::Failed {
            output: String::new(),
            code,
            message: format!("program `{}`: {message}", self.spec.name),
        };
        if let Err((timed_out, why)) = finished(&out, self.spec.timeout) {
            let code = if timed_out {
                codes::LAB_PROGRAM_TIMEOUT
            } else {
                codes::LAB_PROGRAM_FAILED
            };
            return failed(code, why);
        }
        if out.stdout_truncated {
            return failed(
                codes::LAB_PROGRAM_OUTPUT,
                format!("its answer is over {MAX_ANSWER_BYTES} bytes"),
            );
        }
        match String::from_utf8(out.stdout) {
            Ok(mut s) => {
                if s.ends_with('\n') {
                    s.pop();
                }
                StepOutcome::Ok(s)
            }
            Err(_) => failed(
                codes::LAB_PROGRAM_OUTPUT,
                "its answer is not UTF-8 text".to_owned(),
            ),
        }
    }
}

impl Agent for ProgramAgent {
    fn variant(&self) -> String {
        format!("program:{}", self.spec.name)
    }

    fn step<'a>(
        &'a self,
        world: &'a World,
        ctx: StepCtx,
        input: &'a str,
    ) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move {
            let (token, hash) = mint();
            let link = self
                .links
                .link(Arc::clone(world.gateway()), world.caller().clone(), hash);
            let env = vec![
                ("CORRAL_URL".to_owned(), CORRAL_LINK_URL.to_owned()),
                ("CORRAL_TOKEN".to_owned(), token),
                ("CORRAL_RUN".to_owned(), world.run_id().to_owned()),
                ("CORRAL_TRIAL".to_owned(), ctx.trial.to_string()),
                ("CORRAL_STEP".to_owned(), ctx.step.to_string()),
                ("CORRAL_SEED".to_owned(), ctx.seed.to_string()),
            ];
            let req = self
                .spec
                .request(input.as_bytes().to_vec(), env, RunNetwork::Corral(link));
            let r = self.backend.run(req).await;
            self.outcome(r, world)
        })
    }
}

/// The external command scorer.
#[derive(Debug, Clone)]
pub struct CommandScorer {
    spec: Arc<ProgramSpec>,
    backend: Arc<dyn Backend>,
    suite: String,
}

/// What a command scorer prints.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ScorerLine {
    score: f64,
    pass: bool,
}

impl CommandScorer {
    /// The scorer `spec`, run by `backend`.
    pub fn new(spec: Arc<ProgramSpec>, backend: Arc<dyn Backend>) -> Self {
        let suite = format!("command:{}", spec.name);
        Self {
            spec,
            backend,
            suite,
        }
    }

    /// The suite's name as a run records it (`command:<name>`).
    pub fn name(&self) -> &str {
        &self.suite
    }

    /// Scores one output: runs the scorer with no network on `{input, output, expected}`; its
    /// sandbox's attestation goes to `attest`. A scorer that fails is `lab.scorer_failed`
    /// (corral's side), one that prints something else `lab.program_output`.
    pub async fn score(
        &self,
        input: &str,
        output: &str,
        expected: &Value,
        attest: &(dyn Fn(corral_exec::Attestation) + Send + Sync),
    ) -> Result<Scored, ScoreError> {
        let stdin = json!({"input": input, "output": output, "expected": expected}).to_string();
        let req = self
            .spec
            .request(stdin.into_bytes(), Vec::new(), RunNetwork::None);
        let name = &self.spec.name;
        let failed = |why: String| {
            ScoreError::Program(codes::LAB_SCORER_FAILED, format!("scorer `{name}`: {why}"))
        };
        let out = self
            .backend
            .run(req)
            .await
            .map_err(|e| failed(e.to_string()))?;
        attest(out.attestation.clone());
        finished(&out, self.spec.timeout).map_err(|(_, why)| failed(why))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line: ScorerLine = serde_json::from_str(text.trim()).map_err(|e| {
            ScoreError::Program(
                codes::LAB_PROGRAM_OUTPUT,
                format!(
                    "scorer `{name}` printed {:?}, not `{{\"score\": <0..1>, \"pass\": <bool>}}`: {e}",
                    text.chars().take(200).collect::<String>()
                ),
            )
        })?;
        Scored::new(line.score, line.pass).ok_or_else(|| {
            ScoreError::Program(
                codes::LAB_PROGRAM_OUTPUT,
                format!(
                    "scorer `{name}` printed the score {:?}; give a number from 0 to 1",
                    line.score
                ),
            )
        })
    }
}
