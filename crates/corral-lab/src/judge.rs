//! The external command judge of a tournament: a program the config declares under
//! `sandbox.judges` (a request names it `command:<name>`, never a path), run like a command
//! scorer in a fresh sandbox of the `linux` backend with no network at all. It reads
//! `{"input", "first", "second", "expected"}` (JSON) on stdin and prints one line
//! `{"prefer": "first" | "second" | "tie"}`. Anything else, a non-zero exit, a timeout or a
//! sandbox that cannot start is a judge error ([`codes::LAB_JUDGE_FAILED`],
//! [`codes::LAB_JUDGE_ANSWER`]): counted and reported by the tournament, never read as a tie.

use std::sync::Arc;

use corral_exec::{Backend, RunNetwork};
use corral_policy::codes;
use serde_json::{Value, json};

use crate::program::{ProgramSpec, Programs, finished};
use crate::service::LabError;
use crate::tournament::Prefer;
use crate::variant::{COMMAND_PREFIX, program_backend, unknown};

/// The most characters of a judge's printout quoted in an error's message.
const QUOTED: usize = 200;

/// A judge error: its code and what happened (the judge's own words clipped and made
/// printable: they may echo an agent's hostile output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JudgeError {
    /// [`codes::LAB_JUDGE_FAILED`] or [`codes::LAB_JUDGE_ANSWER`].
    pub code: &'static str,
    /// What happened.
    pub message: String,
}

/// What a judge prints.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JudgeLine {
    prefer: Prefer,
}

/// A declared command judge, ready to run.
#[derive(Debug, Clone)]
pub struct CommandJudge {
    spec: Arc<ProgramSpec>,
    backend: Arc<dyn Backend>,
    name: String,
}

/// `text` clipped to [`QUOTED`] characters, every control or format character (a terminal's
/// escape, a bidi override) written `?`.
fn printable(text: &str) -> String {
    text.chars()
        .take(QUOTED)
        .map(|c| {
            if c.is_control() || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}') {
                '?'
            } else {
                c
            }
        })
        .collect()
}

impl CommandJudge {
    /// The judge a request names: `command:<name>` of a judge under `sandbox.judges`, in the
    /// deployment's `linux` backend.
    pub fn of(name: &str, programs: &Programs) -> Result<CommandJudge, LabError> {
        let Some(cmd) = name.strip_prefix(COMMAND_PREFIX) else {
            return Err(LabError::invalid(format!(
                "`judge` is `{}`; name a command judge declared under `sandbox.judges` as `command:<name>`",
                printable(name)
            )));
        };
        let spec = programs
            .judges
            .get(cmd)
            .ok_or_else(|| unknown("judge", cmd, programs.judges.keys()))?;
        let backend = program_backend(programs)?;
        Ok(CommandJudge {
            spec: Arc::clone(spec),
            backend,
            name: format!("{COMMAND_PREFIX}{cmd}"),
        })
    }

    /// `command:<name>`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Asks the judge once, with no network; its sandbox's attestation goes to `attest`.
    pub async fn judge(
        &self,
        input: &str,
        first: &str,
        second: &str,
        expected: Option<&Value>,
        attest: &(dyn Fn(corral_exec::Attestation) + Send + Sync),
    ) -> Result<Prefer, JudgeError> {
        let stdin = json!({"input": input, "first": first, "second": second, "expected": expected})
            .to_string();
        let req = self
            .spec
            .request(stdin.into_bytes(), Vec::new(), RunNetwork::None);
        let name = &self.spec.name;
        let failed = |why: String| JudgeError {
            code: codes::LAB_JUDGE_FAILED,
            message: format!("judge `{name}`: {why}"),
        };
        let out = self
            .backend
            .run(req)
            .await
            .map_err(|e| failed(e.to_string()))?;
        attest(out.attestation.clone());
        finished(&out, self.spec.timeout).map_err(|(_, why)| failed(printable(&why)))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.strip_suffix('\n').unwrap_or(&text);
        let bad = || JudgeError {
            code: codes::LAB_JUDGE_ANSWER,
            message: format!(
                "judge `{name}` printed {:?}, not one line `{{\"prefer\": \"first\" | \"second\" | \"tie\"}}`",
                printable(line)
            ),
        };
        if out.stdout_truncated || line.contains('\n') {
            return Err(bad());
        }
        serde_json::from_str::<JudgeLine>(line.trim())
            .map(|l| l.prefer)
            .map_err(|_| bad())
    }
}
