//! What a run request names, resolved: its agent (the identity agent, a workflow, or a declared
//! external program) with the backend it runs under, and its scorer (a built-in, or a declared
//! command scorer). A name the config does not declare, or a program on a host without the
//! `linux` backend, is refused before anything is created or run.

use std::sync::Arc;

use corral_policy::codes;

use crate::agent::{Agent, Identity};
use crate::program::{CommandScorer, ProgramAgent, ProgramLinks, Programs};
use crate::scenario::Scenario;
use crate::score::{Scorer, builtin};
use crate::service::LabError;
use crate::workflow::Workflow;
use crate::world::BACKEND;

/// The prefix of a command scorer's name in a request (`command:<name>`).
pub const COMMAND_PREFIX: &str = "command:";

/// The backend external programs run in.
pub const PROGRAM_BACKEND: &str = "linux";

/// A run's scorer.
#[derive(Debug)]
pub enum RunScorer {
    /// `exact`, `regex` or `json_path`.
    Builtin(Box<dyn Scorer>),
    /// A declared command scorer, run in the `linux` backend with no network.
    Command(CommandScorer),
}

impl RunScorer {
    /// The suite's name as a run records it.
    pub fn name(&self) -> &str {
        match self {
            RunScorer::Builtin(s) => s.name(),
            RunScorer::Command(c) => c.name(),
        }
    }

    /// A step's malformed expected value is the scenario's fault: refused before anything runs
    /// (a command scorer takes any JSON).
    pub fn check_expected(&self, scenario: &Scenario) -> Result<(), LabError> {
        let RunScorer::Builtin(scorer) = self else {
            return Ok(());
        };
        for (i, s) in scenario.steps().iter().enumerate() {
            if let Some(e) = &s.expected
                && let Err(err) = scorer.score(&s.input, "", e)
                && err.code() == codes::LAB_EXPECTED_INVALID
            {
                return Err(LabError::new(
                    err.code(),
                    format!("step {} of the scenario: {err}", i + 1),
                ));
            }
        }
        Ok(())
    }
}

/// An agent under test and the backend its steps run in.
pub struct Resolved {
    /// The agent.
    pub agent: Box<dyn Agent>,
    /// `inproc-mock`, or `linux` for a program.
    pub backend: &'static str,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("variant", &self.agent.variant())
            .field("backend", &self.backend)
            .finish()
    }
}

/// The programs' backend, checked: the deployment's, if it is `linux` and its preflight holds.
pub(crate) fn program_backend(
    programs: &Programs,
) -> Result<Arc<dyn corral_exec::Backend>, LabError> {
    let backend = programs
        .backend
        .as_ref()
        .filter(|b| b.name() == PROGRAM_BACKEND)
        .ok_or_else(|| {
            LabError::new(
                codes::ISOLATION_UNAVAILABLE,
                "external programs run only in the `linux` isolation backend, and this deployment's is not `linux`: set `isolation: {backend: linux}` in the config (`corral doctor` says whether this host can run it). Nothing was run or recorded",
            )
        })?;
    backend.preflight().map_err(|e| {
        LabError::new(
            e.code(),
            format!("{e}; an external program cannot run isolated here, so it does not run at all (see `corral doctor`). Nothing was run or recorded"),
        )
    })?;
    Ok(Arc::clone(backend))
}

/// The agent of a variant: `program` (a name under `sandbox.programs`), else `workflow` (YAML),
/// else the identity agent; `isolation` must be the one it runs under, when given.
pub fn agent_of(
    workflow: Option<&str>,
    program: Option<&str>,
    isolation: Option<&str>,
    programs: &Programs,
    links: Option<&Arc<dyn ProgramLinks>>,
) -> Result<Resolved, LabError> {
    let wanted = match program {
        Some(_) => PROGRAM_BACKEND,
        None => BACKEND,
    };
    match isolation {
        None => {}
        Some(i) if i == wanted => {}
        Some(i @ (BACKEND | PROGRAM_BACKEND)) => {
            return Err(LabError::new(
                codes::LAB_ISOLATION_UNSUPPORTED,
                format!(
                    "`isolation: {i}` does not fit this variant: {}; omit `isolation` (or pass `{wanted}`). Nothing was run or recorded",
                    if program.is_some() {
                        "an external program runs only in the `linux` backend"
                    } else {
                        "the identity agent and workflows run in-process against mocks (`inproc-mock`) and reach nothing real; OS-level isolation is for an external program (`program`)"
                    }
                ),
            ));
        }
        Some(other) => {
            return Err(LabError::invalid(format!(
                "`isolation` is `{}`; use `inproc-mock` or `linux` (or omit it)",
                other.chars().take(64).collect::<String>()
            )));
        }
    }
    match (program, workflow) {
        (Some(_), Some(_)) => Err(LabError::invalid(
            "a variant is a `program` or a `workflow`, not both; give one",
        )),
        (Some(name), None) => {
            let spec = programs
                .agents
                .get(name)
                .ok_or_else(|| unknown("program", name, programs.agents.keys()))?;
            let backend = program_backend(programs)?;
            let links = links.ok_or_else(|| {
                LabError::new(
                    codes::ISOLATION_UNAVAILABLE,
                    "this entry point serves no API to external programs; run it through `corral serve` or `corral sandbox --local`",
                )
            })?;
            Ok(Resolved {
                agent: Box::new(ProgramAgent::new(
                    Arc::clone(spec),
                    backend,
                    Arc::clone(links),
                )),
                backend: PROGRAM_BACKEND,
            })
        }
        (None, Some(src)) => Workflow::from_yaml(src)
            .map(|w| Resolved {
                agent: Box::new(w),
                backend: BACKEND,
            })
            .map_err(|e| LabError::new(e.code, format!("the workflow: {}", e.message))),
        (None, None) => Ok(Resolved {
            agent: Box::new(Identity),
            backend: BACKEND,
        }),
    }
}

/// The scorer a request names: `exact`, `regex`, `json_path`, or `command:<name>` of a scorer
/// under `sandbox.scorers`.
pub fn scorer_of(name: Option<&str>, programs: &Programs) -> Result<Option<RunScorer>, LabError> {
    let Some(name) = name else {
        return Ok(None);
    };
    if let Some(cmd) = name.strip_prefix(COMMAND_PREFIX) {
        let spec = programs
            .scorers
            .get(cmd)
            .ok_or_else(|| unknown("scorer", cmd, programs.scorers.keys()))?;
        let backend = program_backend(programs)?;
        return Ok(Some(RunScorer::Command(CommandScorer::new(
            Arc::clone(spec),
            backend,
        ))));
    }
    builtin(name)
        .map(|s| Some(RunScorer::Builtin(s)))
        .map_err(|e| LabError::new(e.code(), e.to_string()))
}

/// `lab.program_unknown`: no `what` (`program`, `scorer` or `judge`) named `name` is declared.
pub(crate) fn unknown<'a>(
    what: &str,
    name: &str,
    declared: impl Iterator<Item = &'a String>,
) -> LabError {
    let declared: Vec<&str> = declared.map(String::as_str).collect();
    let key = match what {
        "program" => "programs",
        "judge" => "judges",
        _ => "scorers",
    };
    LabError::new(
        codes::LAB_PROGRAM_UNKNOWN,
        format!(
            "no {what} `{}` is declared under `sandbox.{key}` ({}); declare it in the config or use a declared name",
            name.chars().take(64).collect::<String>(),
            if declared.is_empty() {
                "none is declared".to_owned()
            } else {
                format!("declared: {}", declared.join(", "))
            }
        ),
    )
}
