//! The one call path. HTTP, MCP, `corral call --local` and the lab all call `Gateway::call`.
//!
//! Order (pinned by a test; a call that fails several steps is refused by the earliest):
//! resolve the op in the caller's view (unknown, disabled and not-enabled give the same 404)
//! -> parse arguments against the op's params (400) -> autonomy level (403 `autonomy.blocked`)
//! -> RBAC by tier (403 `rbac.denied`) -> policy rules and scopes (403) -> limits (429) and run
//! budgets (429 `budget.exhausted`) -> confirmation for confirm and destructive tiers (202
//! `confirmation.required`; dry-run answers instead and never runs) -> execute -> audit.
//! Authentication happens before, in the surface that knows the credentials.
//!
//! Every step that ends a call is audited with its own outcome; a retry that consumes an
//! approval writes a `confirmation_consumed` event before the op runs, then the call's own.

/// Awaits `$fut` inside `$span`: built in place and awaited as is while the span is disabled
/// (no exporter: no `Instrumented` wrapper, no move of the large future into one), instrumented
/// otherwise. (`$fut` is written twice; only one branch runs.)
macro_rules! in_span {
    ($span:expr, $fut:expr) => {
        if $span.is_disabled() {
            $fut.await
        } else {
            tracing::Instrument::instrument($fut, $span.clone()).await
        }
    };
}

mod chain;
mod lease;
mod recording;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use corral_exec::Backend;
use corral_ops::{Registry, Stream};
use corral_policy::{AutonomyLevel, Engine, Limits, OpSpec, Principal, PrincipalKind, Role, codes};
use serde_json::json;

use crate::args::args_hash;
use crate::audit::{AuditEvent, AuditSink, Outcome, args_shape};
use crate::confirm::{
    Action, ActionState, ConfirmationError, ConfirmationStore, Cursor, MemoryConfirmations,
};
use crate::guardrails::GuardPolicy;
use crate::limiter::Limiter;
use crate::metering::Meter;
use crate::metrics::{CallObserver, NoObserver};
use crate::recording::Recorder;
use crate::runs::{RunLedger, RunPurpose, RunStore};

/// What a config produces: swapped whole on reload, so a call sees one consistent version.
#[derive(Debug)]
pub struct Deployment {
    /// The compiled policy.
    pub engine: Engine,
    /// The op handlers.
    pub registry: Registry,
    /// Directories no op may touch (corral's state directory).
    pub protected: Vec<PathBuf>,
    /// Autonomy, RBAC, mode, confirmation, budgets and op versions.
    pub guard: GuardPolicy,
}

impl Deployment {
    /// The ops `principal` may call, as `GET /ops` and MCP's `tools/list` show them: mounted
    /// for them by the policy, permitted by their autonomy level (process-wide and pins), and
    /// within their role's tier when RBAC is on. (Arguments, scopes, limits, budgets and
    /// confirmation are still decided per call.)
    pub fn callable_ops(&self, principal: &Principal) -> Vec<&OpSpec> {
        let level = self.guard.effective_level(principal, None).map(|(l, _)| l);
        self.engine
            .mounted_ops(principal)
            .into_iter()
            .filter(|op| level.is_none_or(|l| l.permits(op)))
            .filter(|op| self.guard.missing_role(op, principal).is_none())
            .collect()
    }
}

/// Who is calling, as authenticated by the surface.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The principal.
    pub principal: Principal,
    /// For delegated callers, the actors behind the call (outermost first).
    pub act_chain: Vec<String>,
    /// The run every call of this caller belongs to (a run-scoped token): its budgets apply
    /// whether or not `X-Corral-Run` is sent, and the header may only repeat it.
    pub run: Option<String>,
    /// Every call of this caller is recorded (a run-scoped token with `record: true`).
    pub record: bool,
}

impl Caller {
    /// A caller with no actors behind it and no run scope.
    pub fn new(principal: Principal) -> Self {
        Self {
            principal,
            act_chain: Vec::new(),
            run: None,
            record: false,
        }
    }

    /// Scoped to `run` (a run-scoped token), or not.
    #[must_use]
    pub fn with_run(mut self, run: Option<String>) -> Self {
        self.run = run;
        self
    }

    /// Every call recorded (a run-scoped token with `record: true`), or not.
    #[must_use]
    pub fn with_record(mut self, record: bool) -> Self {
        self.record = record;
        self
    }
}

/// One call.
#[derive(Debug, Clone)]
pub struct Call {
    /// The caller.
    pub caller: Caller,
    /// The op id, as the caller wrote it.
    pub op: String,
    /// The JSON arguments.
    pub args: serde_json::Value,
    /// A unique id for this call.
    pub request_id: String,
}

/// What a surface passes along with a call besides the call itself (HTTP: headers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// The run the call belongs to (`X-Corral-Run`): budgets and the run's own settings.
    pub run_id: Option<String>,
    /// Lower the autonomy level (`X-Corral-Autonomy`): for the run when there is one (it never
    /// goes back up), else for this call. Never raises anything.
    pub autonomy: Option<AutonomyLevel>,
    /// Dry-run (`X-Corral-Dry-Run: true`): for the run when there is one (it stays), else for
    /// this call.
    pub dry_run: bool,
    /// Record the call in its run's recording (`X-Corral-Record: on`): only a caller with the
    /// `operator` or `admin` role may ask (`recording.not_allowed`), and only with a run.
    pub record: bool,
}

pub use corral_policy::valid_run_id;

/// A refusal or failure, as the surface should answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// A stable code from the catalog; the HTTP status is the catalog's (`status()`).
    pub code: &'static str,
    /// What is wrong and what to change. Safe to show the caller.
    pub message: String,
    /// For 429s: when to retry.
    pub retry_after: Option<Duration>,
    /// Fields the wire answer carries besides `{error, type, code, op, request_id}` (a JSON
    /// object): for `confirmation.required`, the action, its canonical arguments, its tier and
    /// reason, and how to approve it.
    pub details: Option<serde_json::Value>,
}

impl Refusal {
    /// A refusal with a code and a message; its status is the code's in the catalog.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retry_after: None,
            details: None,
        }
    }

    /// The HTTP status: the catalog's for the code (500 for a code it does not know).
    pub fn status(&self) -> u16 {
        codes::status(self.code)
    }

    /// The error family shown as `type` (`op`, `policy`, `args`, `limit`, ...).
    pub fn kind(&self) -> &'static str {
        self.code.split('.').next().unwrap_or("error")
    }
}

/// The answer to a call.
#[derive(Debug)]
pub enum Reply {
    /// The op's JSON result.
    Json(serde_json::Value),
    /// A byte stream (downloads).
    Stream(Stream),
    /// A refusal or failure.
    Refused(Refusal),
}

/// The execute step of a call the surface performs itself (the LLM proxy forwarding a model
/// request, whose answer may stream for minutes): every step before it (resolve, arguments,
/// autonomy, RBAC, policy, limits, budgets, confirmation) decides the call as for any op, and
/// only then is this future polled (a boxed future does nothing until then); its outcome is
/// audited as the op's, and its tokens are charged to the run. See [`Gateway::call_proxied`].
pub type Proxied = std::pin::Pin<Box<dyn std::future::Future<Output = ProxiedOutcome> + Send>>;

/// What a proxied call ended with.
#[derive(Debug)]
pub struct ProxiedOutcome {
    /// A value-free summary (the answer of the call), or the refusal.
    pub result: Result<serde_json::Value, Refusal>,
    /// The audit event's detail: value-free (a model name, token counts, a status), never a
    /// prompt or a completion.
    pub detail: Option<String>,
    /// Model tokens used, charged to the call's run (`budgets.tokens`).
    pub tokens: u64,
}

/// Answers every op of a simulation gateway in place of the deployment's handlers (the lab's
/// mock world): called at the execute step, after every check of the chain passed, with the
/// op's spec and the call's JSON arguments as the caller sent them. It answers from what it
/// holds (a table of mocks) and reaches nothing real.
pub trait SimulatedOps: Send + Sync + std::fmt::Debug {
    /// The op's answer, or its failure (a mock miss, a mocked error).
    fn answer(
        &self,
        spec: &OpSpec,
        args: &serde_json::Value,
    ) -> Result<corral_ops::OpOutput, corral_ops::OpError>;
}

/// The guard chain and everything it needs.
#[derive(Debug)]
pub struct Gateway {
    deployment: RwLock<Arc<Deployment>>,
    /// Bumped each time the deployment is replaced (a reload, an upstream's new tool list).
    replaced: tokio::sync::watch::Sender<u64>,
    backend: Arc<dyn Backend>,
    sinks: Vec<Arc<dyn AuditSink>>,
    limiter: Limiter,
    tenant: String,
    confirmations: Arc<dyn ConfirmationStore>,
    runs: Arc<dyn RunStore>,
    /// Told of every decided call (metrics); `NoObserver` unless `with_observer` is used.
    observer: Arc<dyn CallObserver>,
    /// Runs and calls per (tenant, purpose); a fresh one unless `with_meter` shares one.
    meter: Arc<Meter>,
    /// The purpose of the runs this gateway's calls belong to: `Live` unless the composition
    /// root says otherwise (`with_purpose`); no surface or header can change it.
    purpose: RunPurpose,
    /// When set, ops are answered by it instead of the deployment's handlers (`simulated`).
    simulated: Option<Arc<dyn SimulatedOps>>,
    /// Where the calls of runs marked for recording go (`with_recorder`); without one, a call
    /// asked to be recorded is refused (`recording.unavailable`), never answered unrecorded.
    recorder: Option<Arc<dyn Recorder>>,
}

/// The message for 404: identical for an unknown op and an op the caller may not call, so the
/// answer does not reveal which ops exist.
fn not_enabled(op: &str) -> Refusal {
    Refusal::new(
        codes::OP_NOT_ENABLED,
        format!("op `{op}` is not enabled for you; `GET /ops` lists the ops you may call"),
    )
}

/// An op id as audited: at most 200 characters (an unknown id is whatever the caller sent).
fn truncated_op(op: &str) -> String {
    match op.char_indices().nth(200) {
        None => op.to_owned(),
        Some((end, _)) => op[..end].to_owned(),
    }
}

/// The exported trace the current span belongs to (`AuditEvent::trace_id`): for the events a
/// surface writes itself, inside the request's span.
pub fn current_trace_id() -> Option<String> {
    corral_telemetry::trace_id(&tracing::Span::current())
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Gateway {
    /// A gateway over a deployment, a backend and audit sinks (the first sink is the store).
    pub fn new(
        deployment: Deployment,
        backend: Arc<dyn Backend>,
        sinks: Vec<Arc<dyn AuditSink>>,
        tenant: &str,
    ) -> Self {
        Self::shared(Arc::new(deployment), backend, sinks, tenant)
    }

    /// A gateway over a deployment other gateways share (the lab builds one deployment per
    /// running deployment and one gateway per run over it).
    pub fn shared(
        deployment: Arc<Deployment>,
        backend: Arc<dyn Backend>,
        sinks: Vec<Arc<dyn AuditSink>>,
        tenant: &str,
    ) -> Self {
        Self {
            deployment: RwLock::new(deployment),
            replaced: tokio::sync::watch::Sender::new(0),
            backend,
            sinks,
            limiter: Limiter::default(),
            tenant: tenant.to_owned(),
            confirmations: Arc::new(MemoryConfirmations::new()),
            runs: Arc::new(RunLedger::default()),
            observer: Arc::new(NoObserver),
            meter: Arc::new(Meter::default()),
            purpose: RunPurpose::Live,
            simulated: None,
            recorder: None,
        }
    }

    /// Meters the runs of this gateway's calls under `purpose` (a lab gateway: `Simulation`),
    /// apart from the `Live` runs of the same ids. Set by the composition root only.
    pub fn with_purpose(mut self, purpose: RunPurpose) -> Self {
        self.purpose = purpose;
        self
    }

    /// The purpose of this gateway's runs.
    pub fn purpose(&self) -> RunPurpose {
        self.purpose
    }

    /// Answers every op with `ops` instead of the deployment's handlers: each call still passes
    /// every step of the chain (resolve, arguments, autonomy, RBAC, policy, limits, budgets,
    /// confirmation) and is audited; only the execute step asks `ops`. The lab's worlds.
    pub fn simulated(mut self, ops: Arc<dyn SimulatedOps>) -> Self {
        self.simulated = Some(ops);
        self
    }

    /// Reports every decided call to `observer` (the server's `/metrics`).
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// Keeps confirmations in `store` instead of this process's memory (the default).
    pub fn with_confirmations(mut self, store: Arc<dyn ConfirmationStore>) -> Self {
        self.confirmations = store;
        self
    }

    /// Writes the calls of runs marked for recording to `recorder` (the store). Set by the
    /// runtime.
    pub fn with_recorder(mut self, recorder: Arc<dyn Recorder>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// Where this gateway records the calls of recorded runs, if anywhere (the lab's worlds
    /// record to the same writer).
    pub fn recorder(&self) -> Option<&Arc<dyn Recorder>> {
        self.recorder.as_ref()
    }

    /// Meters this gateway's calls (and the `live` runs it opens) in `meter`: the runtime's,
    /// shared with the lab's gateways and `/metrics`.
    pub fn with_meter(mut self, meter: Arc<Meter>) -> Self {
        self.meter = meter;
        self
    }

    /// Where this gateway's calls are metered.
    pub fn meter(&self) -> &Arc<Meter> {
        &self.meter
    }

    /// Keeps run records in `store` instead of this process's memory (the default): replicas
    /// sharing the store then share each run's budgets.
    pub fn with_runs(mut self, store: Arc<dyn RunStore>) -> Self {
        self.runs = store;
        self
    }

    /// Where run records live: `memory`, `sqlite` or `postgres`.
    pub fn runs_backend(&self) -> &'static str {
        self.runs.backend()
    }

    /// Where confirmations live: `memory`, `sqlite` or `postgres`.
    pub fn confirmations_backend(&self) -> &'static str {
        self.confirmations.backend()
    }

    /// The tenant of callers whose principal names none.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The current deployment.
    pub fn deployment(&self) -> Arc<Deployment> {
        match self.deployment.read() {
            Ok(d) => d.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces the deployment (config reload). Calls in flight finish on the old one.
    pub fn replace(&self, d: Deployment) {
        match self.deployment.write() {
            Ok(mut g) => *g = Arc::new(d),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(d),
        }
        self.replaced.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Changes each time the deployment is replaced: what callers are offered may have changed
    /// (MCP sessions tell their clients `tools/list_changed`).
    pub fn deployment_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.replaced.subscribe()
    }

    /// The audit sinks (the first one's failure is a call's failure): the lab's worlds audit
    /// to the same ones.
    pub fn sinks(&self) -> &[Arc<dyn AuditSink>] {
        &self.sinks
    }

    /// Records an event the surface made itself (a lab action) to every sink, as a call's
    /// event is: the first sink's failure is `server.audit_unavailable`.
    pub async fn record(&self, event: &AuditEvent) -> Result<(), Refusal> {
        self.audit(event).await
    }

    /// The backend commands run in.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The limits that apply when `principal` calls `op` with no arguments narrowing them:
    /// the global limits and those of the first allow rule that mounts it for them.
    pub fn base_limits(d: &Deployment, op: &str, principal: &Principal) -> Limits {
        let policy = d.engine.policy();
        let mut l = policy.limits;
        if let Some(spec) = d.engine.catalog().get(op)
            && let Some(r) = policy.rules.iter().find(|r| {
                r.effect == corral_policy::RuleEffect::Allow
                    && r.reaches_principal(principal)
                    && r.mounts(spec)
            })
        {
            l = l.min(&r.limits);
        }
        l
    }

    /// Records an event to every sink; the first sink's failure is the call's failure.
    async fn audit(&self, event: &AuditEvent) -> Result<(), Refusal> {
        let mut first = true;
        for sink in &self.sinks {
            let r = sink.append(event).await;
            if let Err(e) = r {
                tracing::error!(request_id = %event.request_id, error = %e, "audit append failed");
                if first {
                    return Err(Refusal::new(
                        codes::SERVER_AUDIT_UNAVAILABLE,
                        format!(
                            "the call could not be audited, so it is not reported as done (request {})",
                            event.request_id
                        ),
                    ));
                }
            }
            first = false;
        }
        Ok(())
    }

    /// Audits a request that failed authentication (the surface calls this before answering).
    pub async fn audit_unauthenticated(
        &self,
        op: &str,
        request_id: &str,
        code: &'static str,
        status: u16,
    ) {
        self.audit_refusal(None, op, request_id, Outcome::Unauthenticated, code, status)
            .await;
    }

    /// Audits a call the surface refused before it reached the chain (an unreadable body).
    pub async fn audit_rejected(
        &self,
        caller: &Caller,
        op: &str,
        request_id: &str,
        code: &'static str,
        status: u16,
    ) {
        let outcome = if code.starts_with("limit.") {
            Outcome::Limited
        } else {
            Outcome::InvalidArgs
        };
        self.audit_refusal(Some(caller), op, request_id, outcome, code, status)
            .await;
    }

    async fn audit_refusal(
        &self,
        caller: Option<&Caller>,
        op: &str,
        request_id: &str,
        outcome: Outcome,
        code: &'static str,
        status: u16,
    ) {
        let event = AuditEvent {
            request_id: request_id.to_owned(),
            tenant: caller
                .and_then(|c| c.principal.tenant.clone())
                .unwrap_or_else(|| self.tenant.clone()),
            ts_ms: now_ms(),
            principal_id: caller.map(|c| c.principal.id.clone()).unwrap_or_default(),
            principal_kind: caller
                .map(|c| c.principal.kind.as_str().to_owned())
                .unwrap_or_default(),
            act_chain: caller.map(|c| c.act_chain.clone()).unwrap_or_default(),
            op: truncated_op(op),
            outcome,
            code: Some(code.to_owned()),
            rule: None,
            args_hash: String::new(),
            args_shape: serde_json::Value::Null,
            status,
            duration_us: 0,
            attestation: None,
            action_id: None,
            run_id: caller.and_then(|c| c.run.clone()),
            detail: None,
            purpose: self.purpose,
            trace_id: current_trace_id(),
        };
        let _ = self.audit(&event).await;
        self.observer
            .record("unknown", outcome.as_str(), Duration::ZERO);
    }

    /// `GET /confirmations`: the caller's live actions (its full identity's), or, for a caller
    /// with the role `admin`, every live action of its tenant; newest first, one page of at
    /// most `limit` (1 to `LIST_MAX_LIMIT`) actions after `after`, and at most `LIST_MAX_BYTES`.
    pub async fn list_confirmations(
        &self,
        caller: &Caller,
        request_id: &str,
        after: Option<&Cursor>,
        limit: u32,
    ) -> Result<ConfirmationsPage, Refusal> {
        let p = &caller.principal;
        let tenant = p.tenant.clone().unwrap_or_else(|| self.tenant.clone());
        let admin = p.roles.iter().any(|r| r == Role::Admin.as_str());
        let identity = p.identity();
        let requester = (!admin).then_some(identity.as_str());
        let limit = limit.clamp(1, LIST_MAX_LIMIT);
        // One more than the page, to know whether there is a next one.
        let listed = self
            .confirmations
            .list(&tenant, requester, now_ms(), after, limit + 1)
            .await;
        match listed {
            Ok(v) => {
                let mut page = ConfirmationsPage {
                    confirmations: Vec::new(),
                    next: None,
                };
                let mut bytes = 0usize;
                for (i, a) in v.iter().enumerate() {
                    let view = action_view(a);
                    let size = serde_json::to_string(&view).map_or(0, |s| s.len());
                    let full = i >= usize::try_from(limit).unwrap_or(usize::MAX)
                        || (!page.confirmations.is_empty()
                            && bytes.saturating_add(size) > LIST_MAX_BYTES);
                    if full {
                        page.next = v
                            .get(i.wrapping_sub(1))
                            .map(|l| Cursor::after(l).to_string());
                        break;
                    }
                    bytes = bytes.saturating_add(size);
                    page.confirmations.push(view);
                }
                Ok(page)
            }
            Err(e) => {
                tracing::error!(request_id, error = %e, "confirmation store failed");
                Err(Refusal::new(
                    codes::STORE_QUERY_FAILED,
                    format!("the confirmation store failed (request {request_id}); retry"),
                ))
            }
        }
    }

    /// `POST /confirmations/{action_id}/decision`: a person approves (the requester only) or
    /// anyone in the tenant denies a pending action. Audited either way.
    pub async fn decide_confirmation(
        &self,
        caller: &Caller,
        action_id: &str,
        body: &serde_json::Value,
        request_id: &str,
    ) -> Result<serde_json::Value, Refusal> {
        let started = Instant::now();
        let p = &caller.principal;
        let tenant = p.tenant.clone().unwrap_or_else(|| self.tenant.clone());
        let mut event = AuditEvent {
            request_id: request_id.to_owned(),
            tenant: tenant.clone(),
            ts_ms: now_ms(),
            principal_id: p.id.clone(),
            principal_kind: p.kind.as_str().to_owned(),
            act_chain: caller.act_chain.clone(),
            op: "POST /confirmations".to_owned(),
            outcome: Outcome::ConfirmationDecided,
            code: None,
            rule: None,
            args_hash: String::new(),
            args_shape: serde_json::Value::Null,
            status: 200,
            duration_us: 0,
            attestation: None,
            action_id: Some(action_id.chars().take(64).collect()),
            run_id: None,
            detail: None,
            purpose: self.purpose,
            trace_id: current_trace_id(),
        };
        let result = self
            .decide_inner(caller, &tenant, action_id, body, &mut event)
            .await;
        event.duration_us = i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX);
        if let Err(r) = &result {
            event.status = r.status();
            event.code = Some(r.code.to_owned());
            event.outcome = if r.code == codes::CONFIRMATION_INVALID_DECISION {
                Outcome::InvalidArgs
            } else {
                Outcome::Denied
            };
        }
        self.audit(&event).await?;
        self.observer
            .record("confirmations", event.outcome.as_str(), started.elapsed());
        result
    }

    async fn decide_inner(
        &self,
        caller: &Caller,
        tenant: &str,
        action_id: &str,
        body: &serde_json::Value,
        event: &mut AuditEvent,
    ) -> Result<serde_json::Value, Refusal> {
        let p = &caller.principal;
        let (approve, decided_at) = parse_decision(body, event)?;
        let not_found = || {
            Refusal::new(
                codes::CONFIRMATION_NOT_FOUND,
                format!(
                    "no pending action `{}` for you; `GET /confirmations` lists yours",
                    action_id.chars().take(64).collect::<String>()
                ),
            )
        };
        let store_err = |e: ConfirmationError| {
            tracing::error!(error = %e, "confirmation store failed");
            Refusal::new(
                codes::STORE_QUERY_FAILED,
                "the confirmation store failed; retry".to_owned(),
            )
        };
        let now = now_ms();
        let a = match self.confirmations.get(tenant, action_id).await {
            Ok(Some(a)) if a.expires_ms > now => a,
            Ok(_) => return Err(not_found()),
            Err(e) => return Err(store_err(e)),
        };
        event.op = a.op.clone();
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&a.args) {
            event.args_hash = args_hash(&v);
            event.args_shape = args_shape(&v);
        }
        if approve {
            // Someone else's action is not theirs to see: the same answer as an unknown one.
            // "Someone else" is decided on the full identity (origin, person or service, id):
            // a JWT with `sub: agent` is not the static token `agent`. An action stored
            // without an identity matches nobody.
            if a.requester_identity.is_empty() || a.requester_identity != p.identity() {
                return Err(not_found());
            }
            if p.kind != PrincipalKind::Human || !caller.act_chain.is_empty() {
                return Err(Refusal::new(
                    codes::CONFIRMATION_APPROVER_REFUSED,
                    format!(
                        "a {} principal cannot approve; only the person who raised it can, with their own token (kind human, no `act` claim)",
                        p.kind.as_str()
                    ),
                ));
            }
        }
        if a.state != ActionState::Pending {
            return Err(Refusal::new(
                codes::CONFIRMATION_ALREADY_DECIDED,
                format!("action {} is already {}", a.action_id, a.state.as_str()),
            ));
        }
        let at = decided_at.unwrap_or(now);
        if at > now.saturating_add(DECISION_CLOCK_SKEW_MS) {
            return Err(Refusal::new(
                codes::CONFIRMATION_FUTURE_DECISION,
                format!(
                    "the decision is dated {at} ms, more than {} s after the server's clock ({now} ms); send it without `decided_at_ms`, or fix the client's clock",
                    DECISION_CLOCK_SKEW_MS / 1000
                ),
            ));
        }
        if at < a.created_ms {
            return Err(Refusal::new(
                codes::CONFIRMATION_STALE_DECISION,
                format!(
                    "the decision is dated {at} ms, before action {} was raised ({} ms), so it cannot be about it; look at the action and decide again",
                    a.action_id, a.created_ms
                ),
            ));
        }
        match self
            .confirmations
            .decide(&a.action_id, approve, &p.id, at)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                return Err(Refusal::new(
                    codes::CONFIRMATION_ALREADY_DECIDED,
                    format!("action {} was decided meanwhile", a.action_id),
                ));
            }
            Err(e) => return Err(store_err(e)),
        }
        let mut decided = a;
        decided.state = if approve {
            ActionState::Approved
        } else {
            ActionState::Denied
        };
        decided.decided_ms = Some(at);
        decided.decided_by = Some(p.id.clone());
        Ok(action_view(&decided))
    }

    /// Decides and runs one call, and audits it before returning.
    pub async fn call(&self, call: Call) -> Reply {
        self.call_with(call, CallOptions::default()).await
    }

    /// Decides and runs one call with the surface's options (run, level, dry-run), and audits
    /// it before returning.
    pub async fn call_with(&self, call: Call, opts: CallOptions) -> Reply {
        self.call_inner(call, opts, None).await.0
    }

    /// As [`Gateway::call_with`], with how the call ended as the audit has it
    /// ([`Outcome::Replayed`]: an approved call that had run already, answered with its stored
    /// outcome; it did not run again).
    pub async fn call_traced(&self, call: Call, opts: CallOptions) -> (Reply, Outcome) {
        self.call_inner(call, opts, None).await
    }

    /// Decides a call through the whole chain like `call_with`, but at the execute step awaits
    /// `proxied` (the surface's own performing of the op) in place of the op's handler; the
    /// call's audit event is written once `proxied` ended, with its detail.
    pub async fn call_proxied(&self, call: Call, opts: CallOptions, proxied: Proxied) -> Reply {
        self.call_inner(call, opts, Some(proxied)).await.0
    }

    /// The call in its span (`corral.call`, exported when `telemetry:` is set): the op and
    /// who called, then how it ended; the guard steps are its children (`chain`).
    async fn call_inner(
        &self,
        call: Call,
        opts: CallOptions,
        proxied: Option<Proxied>,
    ) -> (Reply, Outcome) {
        let p = &call.caller.principal;
        let span = tracing::info_span!(
            target: corral_telemetry::TARGET,
            "corral.call",
            otel.kind = "server",
            otel.status_code = tracing::field::Empty,
            corral.op = %truncated_op(&call.op),
            corral.principal.id = %p.id,
            corral.principal.kind = p.kind.as_str(),
            corral.tenant = p.tenant.as_deref().unwrap_or(&self.tenant),
            corral.request_id = %call.request_id,
            corral.outcome = tracing::field::Empty,
            corral.code = tracing::field::Empty,
            corral.status = tracing::field::Empty,
        );
        let (reply, outcome) = in_span!(span, self.call_in_span(call, opts, proxied));
        if !span.is_disabled() {
            span.record("corral.outcome", outcome.as_str());
            if let Reply::Refused(r) = &reply {
                span.record("corral.code", r.code);
                span.record("corral.status", r.status());
                if r.status() >= 500 {
                    span.record("otel.status_code", "ERROR");
                }
            } else {
                span.record("corral.status", 200);
            }
        }
        (reply, outcome)
    }

    async fn call_in_span(
        &self,
        call: Call,
        mut opts: CallOptions,
        proxied: Option<Proxied>,
    ) -> (Reply, Outcome) {
        let started = Instant::now();
        // A run-scoped caller's run applies to every call it makes; `X-Corral-Run` may only
        // repeat it (naming another run would step outside the run's budgets).
        let scope_mismatch = match (&call.caller.run, &opts.run_id) {
            (Some(bound), Some(named)) if bound != named => Some(Refusal::new(
                codes::RUN_SCOPE_MISMATCH,
                format!(
                    "this token is scoped to run `{bound}`, and `X-Corral-Run` names `{named}`; drop the header (the token's run applies), or use a token of run `{named}`"
                ),
            )),
            _ => None,
        };
        if let Some(bound) = &call.caller.run {
            opts.run_id = Some(bound.clone());
        }
        // Whether the call is recorded, or the refusal of a caller who may not ask for it.
        let recording = self.recording_wanted(&call, &opts);
        let d = self.deployment();
        let known = d.engine.catalog().get(&call.op).is_some();
        let mut event = AuditEvent {
            request_id: call.request_id.clone(),
            tenant: call
                .caller
                .principal
                .tenant
                .clone()
                .unwrap_or_else(|| self.tenant.clone()),
            ts_ms: now_ms(),
            principal_id: call.caller.principal.id.clone(),
            principal_kind: call.caller.principal.kind.as_str().to_owned(),
            act_chain: call.caller.act_chain.clone(),
            op: truncated_op(&call.op),
            outcome: Outcome::Ok,
            code: None,
            rule: None,
            args_hash: args_hash(&call.args),
            args_shape: args_shape(&call.args),
            status: 200,
            duration_us: 0,
            attestation: None,
            action_id: None,
            run_id: opts.run_id.clone(),
            detail: None,
            purpose: self.purpose,
            // Inside `call_inner`'s span: the call's own trace.
            trace_id: current_trace_id(),
        };
        // A call marked for recording runs only if its event can be recorded.
        let recording = match (recording, &opts.run_id) {
            (Ok(true), Some(run_id)) if scope_mismatch.is_none() => {
                self.admit_recording(&call, run_id, &event.tenant).await
            }
            (other, _) => other,
        };
        let (outcome, reply) = match (scope_mismatch, &recording) {
            (Some(refusal), _) => (Outcome::Denied, Reply::Refused(refusal)),
            (None, Err((outcome, refusal))) => (*outcome, Reply::Refused(refusal.clone())),
            (None, Ok(_)) => {
                let answer = self
                    .decide_and_run(&d, &call, &opts, &mut event, proxied)
                    .await;
                (answer.outcome, answer.reply)
            }
        };
        event.outcome = outcome;
        event.duration_us = i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX);
        match &reply {
            Reply::Refused(r) => {
                event.status = r.status();
                event.code = Some(r.code.to_owned());
            }
            Reply::Json(_) | Reply::Stream(_) => event.status = 200,
        }
        let audit_span = chain::step_span("guard.audit");
        let audited = in_span!(audit_span, self.audit(&event));
        let reply = match audited {
            Ok(()) => reply,
            Err(refusal) => Reply::Refused(refusal),
        };
        if let (Ok(true), Some(run_id)) = (&recording, &opts.run_id) {
            let (key, recorded) = self.recorded_call(&call, run_id, &event, &reply);
            self.write_recording(&call.request_id, key, recorded).await;
        }
        let label = if known { call.op.as_str() } else { "unknown" };
        self.observer
            .record(label, outcome.as_str(), started.elapsed());
        self.meter.calls(&event.tenant, self.purpose, 1);
        (reply, outcome)
    }
}

/// How far in the future a decision's `decided_at_ms` may be: clocks of clients and replicas
/// differ a little, never by years.
const DECISION_CLOCK_SKEW_MS: i64 = 5 * 60 * 1000;

/// The most actions one `GET /confirmations` page holds, and the default.
pub const LIST_MAX_LIMIT: u32 = 200;
/// The page size when `limit` is not given.
pub const LIST_DEFAULT_LIMIT: u32 = 50;
/// A page stops before its answer would pass this many bytes of JSON (with at least one
/// action), whatever the `limit`: a page is bounded even when every action holds the most
/// arguments it may.
const LIST_MAX_BYTES: usize = 4 * 1024 * 1024;

/// One page of `GET /confirmations`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfirmationsPage {
    /// The actions, as `action_view` shows them, newest first.
    pub confirmations: Vec<serde_json::Value>,
    /// The cursor of the next page (`?after=`), when there are more.
    pub next: Option<String>,
}

/// The body of a decision: `{"decision": "approve"|"deny"}`, with an optional `decided_at_ms`.
/// Whether it approves (also the audit event's detail, once known), and when it was decided (if
/// it says).
fn parse_decision(
    body: &serde_json::Value,
    event: &mut AuditEvent,
) -> Result<(bool, Option<i64>), Refusal> {
    let invalid = |why: &str| {
        Refusal::new(
            codes::CONFIRMATION_INVALID_DECISION,
            format!(
                "{why}; send `{{\"decision\": \"approve\"}}` or `{{\"decision\": \"deny\"}}` (optionally with `decided_at_ms`)"
            ),
        )
    };
    let Some(obj) = body.as_object() else {
        return Err(invalid("the body is not a JSON object"));
    };
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "decision" | "decided_at_ms"))
    {
        return Err(invalid(&format!("unknown field `{k}`")));
    }
    let approve = match obj.get("decision").and_then(|v| v.as_str()) {
        Some("approve") => true,
        Some("deny") => false,
        _ => return Err(invalid("`decision` must be `approve` or `deny`")),
    };
    event.detail = Some(if approve { "approve" } else { "deny" }.to_owned());
    let decided_at = match obj.get("decided_at_ms") {
        None => None,
        // An integer, `5.0` included (JSON Schema's `integer`; exact within 2^53).
        Some(v) => Some(
            v.as_number()
                .and_then(crate::args::integer_of)
                .ok_or_else(|| invalid("`decided_at_ms` must be milliseconds since the epoch"))?,
        ),
    };
    Ok((approve, decided_at))
}

/// The fields of a `confirmation.required` answer: the action, and how to approve it.
fn action_details(a: &Action, path: &str) -> serde_json::Value {
    let args: serde_json::Value = serde_json::from_str(&a.args).unwrap_or(serde_json::Value::Null);
    json!({
        "action_id": a.action_id,
        "tier": a.tier,
        "reason": a.reason,
        "args": args,
        "args_canonical": a.args,
        "op_version": a.op_version,
        "requester": a.requester,
        "created_at_ms": a.created_ms,
        "expires_at_ms": a.expires_ms,
        "approve": {
            "method": "POST",
            "path": path,
            "body": {"decision": "approve"},
            "who": format!("`{}`, as a person (not a delegated or service token)", a.requester),
        },
        "deny": {"method": "POST", "path": path, "body": {"decision": "deny"}},
    })
}

/// An action as `GET /confirmations` and a decision show it.
pub fn action_view(a: &Action) -> serde_json::Value {
    let args: serde_json::Value = serde_json::from_str(&a.args).unwrap_or(serde_json::Value::Null);
    json!({
        "action_id": a.action_id,
        "op": a.op,
        "op_version": a.op_version,
        "tier": a.tier,
        "reason": a.reason,
        "state": a.state.as_str(),
        "requester": a.requester,
        "requester_identity": a.requester_identity,
        "requester_kind": a.requester_kind,
        "args": args,
        "args_canonical": a.args,
        "created_at_ms": a.created_ms,
        "expires_at_ms": a.expires_ms,
        "decided_at_ms": a.decided_ms,
        "decided_by": a.decided_by,
    })
}
