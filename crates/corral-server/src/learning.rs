//! Learning mode in the server (spec 000, issue 16): activation by `corral serve` only, the
//! preconditions, and the state the routes read when it is on (the manifest watcher, the answer
//! guard, the disclosure levels and their metrics). Nothing here is built when it is off.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use corral_config::Loaded;
use corral_config::model::AuditSink;
use corral_guard::Caller;
use corral_guard::audit::{AuditEvent, Outcome};
use corral_learn::gate::{self, EnvError, Facts, Precondition};
use corral_learn::guard::Guard;
use corral_learn::levels::{self, Level, Levels};
use corral_learn::manifest::{self, ManifestError};
use corral_learn::watch::{self, Clock, Watcher};
use corral_policy::AutonomyLevel;

/// How `corral serve` activates learning mode: read from the environment by the CLI, or built
/// by a test.
#[derive(Debug, Clone)]
pub struct LearningSetup {
    /// `CORRAL_SCENARIO_MANIFEST`.
    pub manifest_path: PathBuf,
    /// `CORRAL_LEARNING_GRACE_SECONDS` (3600 s by default).
    pub grace: Duration,
    /// The least time between two hints of one subject.
    pub hint_interval: Duration,
    /// The clock of the grace period and the hint rate limit.
    pub clock: Arc<dyn Clock>,
}

impl LearningSetup {
    /// The setup of a manifest at `path`, with every default.
    pub fn new(manifest_path: impl Into<PathBuf>) -> Self {
        Self {
            manifest_path: manifest_path.into(),
            grace: watch::DEFAULT_GRACE,
            hint_interval: levels::DEFAULT_HINT_INTERVAL,
            clock: Arc::new(watch::SystemClock),
        }
    }

    /// `None` when `CORRAL_LEARNING_MODE` is unset or `false`; the setup it names when `true`;
    /// an error for any other value (or an unreadable grace period).
    pub fn from_env() -> Result<Option<Self>, EnvError> {
        if !gate::flag_from_env()? {
            return Ok(None);
        }
        let mut setup = Self::new(std::env::var_os(manifest::MANIFEST_ENV).unwrap_or_default());
        setup.grace = gate::grace_from_env()?;
        Ok(Some(setup))
    }
}

/// Learning mode refused to start: every precondition that does not hold.
#[derive(Debug)]
pub struct Refused {
    /// The unmet preconditions, in a fixed order (never empty).
    pub missing: Vec<Precondition>,
    /// The manifest's error, when it is one of them (paths and kinds, never values).
    pub manifest_error: Option<ManifestError>,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lines: Vec<String> = self.missing.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("\n"))?;
        if let Some(e) = &self.manifest_error {
            write!(f, "\nthe manifest: {e}")?;
        }
        Ok(())
    }
}

impl Refused {
    /// The first unmet precondition's code.
    pub fn code(&self) -> &'static str {
        self.missing
            .first()
            .map_or(corral_policy::codes::LEARNING_PRECONDITION_MANIFEST, |p| {
                p.code()
            })
    }
}

/// The autonomy learning mode would run at: the process-wide level (none: L4), raised by any
/// pin above it (fail closed: a pin is never assumed to lower it).
fn autonomy(loaded: &Loaded) -> AutonomyLevel {
    match &loaded.config.autonomy {
        None => AutonomyLevel::L4,
        Some(a) => a
            .pins
            .iter()
            .map(|p| p.level)
            .fold(a.level.unwrap_or(AutonomyLevel::L4), Ord::max),
    }
}

/// What the server knows of `loaded` (and `--allow-open`) for [`gate::missing`]. Without auth
/// only the auth precondition is named (it is the fix); `--allow-open` is open mode even with
/// tokens configured, and is refused on its own.
pub fn facts(loaded: &Loaded, allow_open: bool, manifest_valid: bool) -> Facts {
    let auth = &loaded.config.auth;
    let auth_configured = !auth.tokens.is_empty() || auth.jwt.is_some();
    Facts {
        auth_configured,
        open_mode: allow_open,
        manifest_valid,
        autonomy: autonomy(loaded),
        audit_on: loaded.config.audit.sink != AuditSink::Off,
    }
}

/// Learning mode's state in a running server.
#[derive(Debug)]
pub struct Learning {
    watcher: Arc<Watcher>,
    guard: Guard,
    levels: Levels,
}

impl Learning {
    /// Checks every precondition and opens the manifest: learning mode's state, or every reason
    /// it cannot start.
    pub fn start(
        loaded: &Loaded,
        setup: &LearningSetup,
        allow_open: bool,
    ) -> Result<Self, Refused> {
        let watcher = Watcher::open(&setup.manifest_path, setup.grace, setup.clock.clone());
        let missing = gate::missing(&facts(loaded, allow_open, watcher.is_ok()));
        match watcher {
            Ok(w) if missing.is_empty() => {
                let watcher = Arc::new(w);
                Ok(Self {
                    guard: Guard::new(watcher.clone()),
                    watcher,
                    levels: Levels::new(setup.hint_interval, setup.clock.clone()),
                })
            }
            Ok(_) => Err(Refused {
                missing,
                manifest_error: None,
            }),
            Err(e) => Err(Refused {
                missing,
                manifest_error: Some(e),
            }),
        }
    }

    /// The manifest watcher.
    pub fn watcher(&self) -> &Arc<Watcher> {
        &self.watcher
    }

    /// The answer guard.
    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// The disclosure levels.
    pub fn levels(&self) -> &Levels {
        &self.levels
    }

    /// The scenario in force and its default level (the manifest is refreshed first, so a
    /// swapped file is read here too).
    pub fn scenario(&self) -> (String, Level) {
        let refresh = self.guard.watcher().check();
        if let Some(e) = &refresh.error {
            tracing::error!(error = %e, "learning mode: the scenario manifest changed and does not load; keeping the last good one");
        }
        let m = refresh.snapshot.manifest();
        let default = Level::new(m.default_disclosure).unwrap_or(Level::ZERO);
        (m.scenario_id.clone(), default)
    }

    /// The level `caller` reads at now (a delegated caller: its human's).
    pub fn level_of(&self, caller: &Caller) -> Level {
        let (scenario, default) = self.scenario();
        self.levels.level(&caller.principal, &scenario, default)
    }

    /// Whether what `caller` reads is narrowed (level below 3).
    pub fn narrows_for(&self, caller: &Caller) -> bool {
        !self.level_of(caller).is_unguarded()
    }
}

/// A learning-mode audit event (`op` is its name: `learning_hint`, `learning_answer_withheld`):
/// who, and a `detail` of ids and levels only, never a value.
pub fn audit_event(
    caller: &Caller,
    tenant: &str,
    request_id: &str,
    op: &str,
    detail: String,
) -> AuditEvent {
    AuditEvent {
        request_id: request_id.to_owned(),
        tenant: caller
            .principal
            .tenant
            .clone()
            .unwrap_or_else(|| tenant.to_owned()),
        ts_ms: corral_guard::now_ms(),
        principal_id: caller.principal.id.clone(),
        principal_kind: caller.principal.kind.as_str().to_owned(),
        act_chain: caller.act_chain.clone(),
        op: op.to_owned(),
        outcome: Outcome::Ok,
        code: None,
        rule: None,
        args_hash: String::new(),
        args_shape: serde_json::Value::Null,
        status: 200,
        duration_us: 0,
        attestation: None,
        action_id: None,
        run_id: caller.run.clone(),
        detail: Some(detail),
        purpose: corral_guard::runs::RunPurpose::Live,
        trace_id: corral_guard::gateway::current_trace_id(),
    }
}

/// Appends the level line to an Anthropic Messages request's `system` (a string, or a list of
/// text blocks; set when absent): its messages have no `system` role.
pub fn append_level_system(body: &mut serde_json::Map<String, serde_json::Value>, level: Level) {
    use serde_json::Value;
    let line = levels::level_line(level);
    match body.get_mut("system") {
        Some(Value::String(s)) if !s.is_empty() => {
            s.push_str("\n\n");
            s.push_str(line);
        }
        Some(Value::Array(blocks)) => {
            blocks.push(serde_json::json!({"type": "text", "text": line}));
        }
        _ => {
            body.insert("system".to_owned(), Value::String(line.to_owned()));
        }
    }
}

/// Appends the level line to the request's system message (the first `system` message; one is
/// put first when there is none), or for a Responses request (no `messages`) to its
/// `instructions`.
pub fn append_level_line(body: &mut serde_json::Map<String, serde_json::Value>, level: Level) {
    use serde_json::Value;
    let line = levels::level_line(level);
    if !body.contains_key("messages") {
        // A Responses request: its system prompt is `instructions`.
        match body.get_mut("instructions") {
            Some(Value::String(s)) if !s.is_empty() => {
                s.push_str("\n\n");
                s.push_str(line);
            }
            _ => {
                body.insert("instructions".to_owned(), Value::String(line.to_owned()));
            }
        }
        return;
    }
    let Some(Value::Array(messages)) = body.get_mut("messages") else {
        return;
    };
    let system = messages
        .iter_mut()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("system"));
    match system {
        Some(m) => match m.get_mut("content") {
            Some(Value::String(s)) => {
                s.push_str("\n\n");
                s.push_str(line);
            }
            Some(Value::Array(parts)) => {
                parts.push(serde_json::json!({"type": "text", "text": line}));
            }
            _ => {
                m["content"] = Value::String(line.to_owned());
            }
        },
        None => messages.insert(0, serde_json::json!({"role": "system", "content": line})),
    }
}

/// Learning mode's reply hook: the answer guard on each root reply, at the caller's level, with
/// one nudge per (identity, run) turn; a withheld answer is audited as
/// `learning_answer_withheld` (target ids and scenario id only).
#[derive(Debug)]
pub struct AnswerHook {
    learning: Arc<Learning>,
    sinks: Vec<Arc<dyn corral_guard::audit::AuditSink>>,
    tenant: String,
    turns: std::sync::Mutex<std::collections::HashMap<(String, String), TurnState>>,
}

/// The most turns remembered; past it the table is cleared (a new turn nudges again: more
/// withholding, never less).
const MAX_TURNS: usize = 10_000;

impl AnswerHook {
    /// The hook over `learning`, auditing to `sinks`.
    pub fn new(
        learning: Arc<Learning>,
        sinks: Vec<Arc<dyn corral_guard::audit::AuditSink>>,
        tenant: &str,
    ) -> Self {
        Self {
            learning,
            sinks,
            tenant: tenant.to_owned(),
            turns: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }
}

use corral_learn::guard::{Outcome as GuardOutcome, TurnState};

impl crate::routes::llm::ReplyHook for AnswerHook {
    fn on_root_reply(
        &self,
        ctx: &crate::routes::llm::ReplyCtx,
        reply: &mut crate::routes::llm::AssistantReply,
    ) {
        self.on_root_replies(ctx, &[], std::slice::from_mut(reply));
    }

    /// Each choice in order, after the history and the choices before it as the learner reads
    /// them (a choice already replaced is read as its replacement).
    fn on_root_replies(
        &self,
        ctx: &crate::routes::llm::ReplyCtx,
        history: &[String],
        replies: &mut [crate::routes::llm::AssistantReply],
    ) {
        let mut seen: Vec<String> = history.to_vec();
        for reply in replies {
            self.check_one(ctx, &seen, reply);
            if !reply.text.is_empty() {
                seen.push(reply.text.concat());
            }
        }
    }
}

impl AnswerHook {
    /// The guard on one choice after `seen`; a withheld answer is audited.
    fn check_one(
        &self,
        ctx: &crate::routes::llm::ReplyCtx,
        seen: &[String],
        reply: &mut crate::routes::llm::AssistantReply,
    ) {
        let (scenario, default) = self.learning.scenario();
        let level = self.learning.levels.level(&ctx.caller, &scenario, default);
        if reply.text.is_empty() {
            return;
        }
        let key = (
            levels::subject(&ctx.caller),
            ctx.run.clone().unwrap_or_default(),
        );
        let seen: Vec<&str> = seen.iter().map(String::as_str).collect();
        let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        if turns.len() >= MAX_TURNS && !turns.contains_key(&key) {
            turns.clear();
        }
        let turn = turns.entry(key).or_default();
        let checked = self.learning.guard.check_after(
            level,
            turn,
            &seen,
            &mut reply.text,
            !reply.tool_calls.is_empty(),
        );
        drop(turns);
        if let Some(e) = &checked.manifest_error {
            tracing::error!(error = %e, "learning mode: the scenario manifest changed and does not load; keeping the last good one");
        }
        if let GuardOutcome::Withheld {
            scenario_id,
            targets,
            ..
        } = checked.outcome
        {
            let ids: Vec<String> = targets.iter().map(|t| t.target_id.clone()).collect();
            let caller = corral_guard::Caller::new(ctx.caller.clone());
            let mut event = audit_event(
                &caller,
                &self.tenant,
                // Its own id (an event's id is unique; the model request's event has that one).
                &crate::routes::request_id(),
                "learning_answer_withheld",
                format!(
                    "scenario {scenario_id}; targets {}; request {}",
                    ids.join(", "),
                    ctx.request_id
                ),
            );
            event.run_id = ctx.run.clone();
            let sinks = self.sinks.clone();
            tokio::spawn(async move {
                for sink in &sinks {
                    if let Err(e) = sink.append(&event).await {
                        tracing::error!(request_id = %event.request_id, error = %e, "learning_answer_withheld: audit append failed");
                    }
                }
            });
        }
    }
}
