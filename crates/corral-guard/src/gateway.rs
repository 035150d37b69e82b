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

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use corral_exec::Backend;
use corral_ops::{OpCtx, OpError, OpOutput, Registry, Stream};
use corral_policy::{
    ArgValue, Args, AutonomyLevel, Decision, Engine, Limits, OpSpec, Principal, PrincipalKind,
    Request, Role, codes,
};
use serde_json::json;

use crate::args::{args_hash, parse_args};
use crate::audit::{AttestationRecord, AuditEvent, AuditSink, Outcome, args_shape};
use crate::canonical::{canonical, digest};
use crate::confirm::{
    Action, ActionState, ConfirmationError, ConfirmationStore, Cursor, MAX_ACTION_ARGS_BYTES,
    MemoryConfirmations, Raised, StoredOutcome,
};
use crate::guardrails::{Confirmation, GuardPolicy, tier_reason};
use crate::limiter::{Limited, Limiter};
use crate::metrics::Metrics;
use crate::runs::{RunKey, RunLedger, RunPurpose, RunStore, RunStoreError};

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
}

impl Caller {
    /// A caller with no actors behind it and no run scope.
    pub fn new(principal: Principal) -> Self {
        Self {
            principal,
            act_chain: Vec::new(),
            run: None,
        }
    }

    /// Scoped to `run` (a run-scoped token), or not.
    #[must_use]
    pub fn with_run(mut self, run: Option<String>) -> Self {
        self.run = run;
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
    /// Call metrics, for `/metrics`.
    pub metrics: Metrics,
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
        Self {
            deployment: RwLock::new(Arc::new(deployment)),
            replaced: tokio::sync::watch::Sender::new(0),
            backend,
            sinks,
            limiter: Limiter::default(),
            tenant: tenant.to_owned(),
            confirmations: Arc::new(MemoryConfirmations::new()),
            runs: Arc::new(RunLedger::default()),
            metrics: Metrics::default(),
        }
    }

    /// Keeps confirmations in `store` instead of this process's memory (the default).
    pub fn with_confirmations(mut self, store: Arc<dyn ConfirmationStore>) -> Self {
        self.confirmations = store;
        self
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
                    && r.selectors.iter().any(|s| s.mounts(spec))
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
        };
        let _ = self.audit(&event).await;
        self.metrics
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
        self.metrics
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
        let decided_at =
            match obj.get("decided_at_ms") {
                None => None,
                Some(v) => Some(v.as_i64().ok_or_else(|| {
                    invalid("`decided_at_ms` must be milliseconds since the epoch")
                })?),
            };
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
    pub async fn call_with(&self, call: Call, mut opts: CallOptions) -> Reply {
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
        };
        let (outcome, reply) = match scope_mismatch {
            Some(refusal) => (Outcome::Denied, Reply::Refused(refusal)),
            None => self.decide_and_run(&d, &call, &opts, &mut event).await,
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
        let reply = match self.audit(&event).await {
            Ok(()) => reply,
            Err(refusal) => Reply::Refused(refusal),
        };
        let label = if known { call.op.as_str() } else { "unknown" };
        self.metrics
            .record(label, outcome.as_str(), started.elapsed());
        reply
    }

    async fn decide_and_run(
        &self,
        d: &Arc<Deployment>,
        call: &Call,
        opts: &CallOptions,
        event: &mut AuditEvent,
    ) -> (Outcome, Reply) {
        let principal = &call.caller.principal;
        let g = &d.guard;
        // 1. Resolve: unknown and not-enabled are the same answer.
        // Borrowed from the deployment (which outlives the call); cloned once, for the handler.
        let spec: &OpSpec = match d.engine.catalog().get(&call.op) {
            Some(s) if d.engine.is_mounted(&call.op, principal) => s,
            Some(_) | None => return (Outcome::NotEnabled, Reply::Refused(not_enabled(&call.op))),
        };
        // 2. Arguments.
        let args = match parse_args(spec, &call.args) {
            Ok(a) => a,
            Err(e) => {
                return (
                    Outcome::InvalidArgs,
                    Reply::Refused(Refusal::new(e.code, e.message)),
                );
            }
        };
        // The run: what it did to itself (a lowered level, dry-run) applies from here on.
        let run = match opts.run_id.as_ref() {
            None => None,
            Some(id) => {
                let key = RunKey {
                    tenant: principal.tenant.as_deref().unwrap_or(&self.tenant),
                    principal: &principal.id,
                    purpose: RunPurpose::Live,
                    run_id: id,
                };
                match self
                    .runs
                    .enter(&key, now_ms(), opts.autonomy, opts.dry_run)
                    .await
                {
                    Ok(record) => Some((key, record)),
                    Err(e) => return run_store_failed(&e),
                }
            }
        };
        let (run_level, run_dry) = match &run {
            Some((_, r)) => (r.level, r.dry_run),
            None => (opts.autonomy, opts.dry_run),
        };
        // 3. Autonomy: what may run at all, before anyone's role is looked at.
        if let Err(r) = g.check_autonomy(spec, principal, run_level) {
            event.detail = Some(r.detail);
            return (
                Outcome::AutonomyBlocked,
                Reply::Refused(Refusal::new(r.code, r.message)),
            );
        }
        // 4. RBAC by tier: who may call it, before anyone is asked to approve it.
        if let Err(r) = g.check_role(spec, principal) {
            event.detail = Some(r.detail);
            return (
                Outcome::RbacDenied,
                Reply::Refused(Refusal::new(r.code, r.message)),
            );
        }
        // 5. Policy.
        let decision = d.engine.decide(&Request {
            op: &call.op,
            principal,
            args: &args,
        });
        // Kept boxed: it is large, and moves through the steps to the handler.
        let grant = match decision {
            Decision::Allowed(a) => a,
            Decision::NotMounted => {
                return (Outcome::NotEnabled, Reply::Refused(not_enabled(&call.op)));
            }
            Decision::Denied { rule, code, reason } => {
                event.rule = Some(rule.name.to_string());
                let msg = format!(
                    "{reason} (rule `{}`); call with other arguments, or change that rule",
                    rule.name
                );
                return (Outcome::Denied, Reply::Refused(Refusal::new(code, msg)));
            }
            Decision::NotPermitted { candidates } => {
                let (code, msg) = match candidates.first() {
                    Some(c) => {
                        event.rule = Some(c.rule.name.to_string());
                        (
                            c.code,
                            format!(
                                "{} (closest rule `{}`); call inside the rule's scope, or widen it",
                                c.clause, c.rule.name
                            ),
                        )
                    }
                    None => (
                        codes::POLICY_NOT_PERMITTED,
                        "no allow rule admits these arguments".to_owned(),
                    ),
                };
                return (Outcome::Denied, Reply::Refused(Refusal::new(code, msg)));
            }
        };
        event.rule = Some(grant.rule.name.to_string());
        // 6. Limits.
        let _permit = match self.limiter.admit(&principal.id, &call.op, &grant.limits) {
            Ok(p) => p,
            Err(Limited::Rate { retry_after, limit }) => {
                let mut r = Refusal::new(
                    codes::LIMIT_RATE,
                    format!(
                        "rate limit {limit} reached for `{}`; retry in {} ms",
                        call.op,
                        retry_after.as_millis().max(1)
                    ),
                );
                r.retry_after = Some(retry_after);
                return (Outcome::Limited, Reply::Refused(r));
            }
            Err(Limited::Concurrency { limit }) => {
                let mut r = Refusal::new(
                    codes::LIMIT_CONCURRENCY,
                    format!(
                        "{limit} call(s) to `{}` already in flight for you; retry when one finishes",
                        call.op
                    ),
                );
                r.retry_after = Some(Duration::from_secs(1));
                return (Outcome::Limited, Reply::Refused(r));
            }
        };
        // 6b. Run budgets (neutral refusals: nothing ran, nothing failed).
        let mut charged = None;
        if let Some((key, _)) = &run
            && g.budgets.any()
        {
            match self.runs.charge(key, &call.op, &g.budgets, now_ms()).await {
                Err(e) => return run_store_failed(&e),
                Ok(Ok(())) => charged = Some(key),
                Ok(Err(e)) => {
                    event.detail = Some(e.budget.clone());
                    return (
                        Outcome::BudgetRefused,
                        Reply::Refused(Refusal::new(
                            codes::BUDGET_EXHAUSTED,
                            format!(
                                "run `{}`: {} (`{}`); start a new run, or raise the budget",
                                key.run_id, e.detail, e.budget
                            ),
                        )),
                    );
                }
            }
        }
        let mut executed = false;
        let (outcome, reply) = self
            .confirm_and_run(d, call, spec, args, grant, run_dry, event, &mut executed)
            .await;
        if let Some(key) = charged {
            if executed {
                if g.budgets.max_output_bytes > 0 {
                    let bytes = match &reply {
                        Reply::Json(v) => serde_json::to_vec(v).map_or(0, |b| b.len() as u64),
                        Reply::Stream(s) => s.len,
                        Reply::Refused(_) => 0,
                    };
                    if let Err(e) = self.runs.add_output(key, bytes).await {
                        tracing::warn!(error = %e, run = key.run_id, "a run's output was not metered");
                    }
                }
            } else if let Err(e) = self.runs.refund(key, &call.op).await {
                tracing::warn!(error = %e, run = key.run_id, "a run's unused charge was not refunded");
            }
        }
        (outcome, reply)
    }

    /// Steps 7 to 9: confirmation (or dry-run), then the op itself.
    #[allow(clippy::too_many_arguments)]
    async fn confirm_and_run(
        &self,
        d: &Arc<Deployment>,
        call: &Call,
        spec: &OpSpec,
        args: Args,
        grant: Box<corral_policy::Allowed>,
        run_dry: bool,
        event: &mut AuditEvent,
        executed: &mut bool,
    ) -> (Outcome, Reply) {
        let g = &d.guard;
        let mut action = None;
        match g.confirmation_step(spec, grant.rule.index, run_dry) {
            Confirmation::NotGuarded | Confirmation::Waived => {}
            // 7. Dry-run: guarded ops are described, never run, and nobody is asked.
            Confirmation::DryRun => {
                *executed = true;
                return (Outcome::DryRun, Reply::Json(dry_run_payload(call, spec)));
            }
            // 8. Confirmation, unless a confirm-tier op's allow rule says `confirm: never`.
            Confirmation::Required => {
                // Boxed: the confirmation step's state is large and most calls never reach it,
                // so it must not grow every call's future.
                match Box::pin(self.confirmation(d, call, spec, event)).await {
                    Confirmed::Run(a) => {
                        // The consumption is on record before the op runs.
                        let mut consumed = event.clone();
                        consumed.request_id = format!("{}:consume", call.request_id);
                        consumed.outcome = Outcome::ConfirmationConsumed;
                        consumed.action_id = Some(a.action_id.clone());
                        consumed.ts_ms = now_ms();
                        if let Err(r) = self.audit(&consumed).await {
                            return (Outcome::ConfirmationConsumed, Reply::Refused(r));
                        }
                        event.action_id = Some(a.action_id.clone());
                        action = Some(a);
                    }
                    Confirmed::Answer(outcome, reply) => return (outcome, reply),
                }
            }
        }
        *executed = true;
        // If this request is dropped while the approved op runs (the client went away), the
        // action gets an outcome anyway, so retries are told instead of waiting for one.
        let mut interrupted = Interrupted {
            store: Arc::clone(&self.confirmations),
            action: action.as_ref().map(|a| (a.action_id.clone(), a.op.clone())),
        };
        let (outcome, reply) = self.execute(d, call, spec, args, grant, event).await;
        interrupted.action = None;
        if let Some(a) = action {
            let stored = match &reply {
                Reply::Json(v) => StoredOutcome::Json { value: v.clone() },
                Reply::Stream(s) => StoredOutcome::Stream {
                    content_type: s.content_type.clone(),
                    len: s.len,
                },
                Reply::Refused(r) => StoredOutcome::Refused {
                    status: r.status(),
                    code: r.code.to_owned(),
                    message: r.message.clone(),
                },
            };
            if let Err(e) = self
                .confirmations
                .finish(&a.action_id, &stored, now_ms())
                .await
            {
                // The op ran once and the caller gets its outcome; a retry finds the action
                // still `running` and is told so (it never runs again).
                tracing::error!(action_id = %a.action_id, error = %e, "the outcome of an approved call could not be stored");
            }
        }
        (outcome, reply)
    }

    /// Step 8: finds or raises the call's action, consumes its approval, or answers what the
    /// store says (pending, denied, running elsewhere, already done).
    async fn confirmation(
        &self,
        d: &Arc<Deployment>,
        call: &Call,
        spec: &OpSpec,
        event: &mut AuditEvent,
    ) -> Confirmed {
        let principal = &call.caller.principal;
        let args = match &call.args {
            serde_json::Value::Null => json!({}),
            other => other.clone(),
        };
        let op_version = d.guard.op_version(&call.op).to_owned();
        let identity = principal.identity();
        // The full identity, not the id: a JWT `sub: agent` never finds (nor consumes the
        // approval of) the action of the static token `agent`.
        let key = digest(&json!({
            "tenant": event.tenant,
            "requester": identity,
            "op": call.op,
            "op_version": op_version,
            "args": args,
        }));
        let args_canonical = canonical(&args);
        // Bounded before anything is stored or looked up: no action can hold more.
        if args_canonical.len() > MAX_ACTION_ARGS_BYTES {
            return Confirmed::Answer(
                Outcome::Limited,
                Reply::Refused(Refusal::new(
                    codes::CONFIRMATION_ARGS_TOO_LARGE,
                    format!(
                        "the arguments of this `{}` call are {} bytes as canonical JSON, over the {} bytes (64 KiB) a pending action may hold for a person to review; call with smaller arguments (put large content in a file and pass its path)",
                        call.op,
                        args_canonical.len(),
                        MAX_ACTION_ARGS_BYTES
                    ),
                )),
            );
        }
        let now = now_ms();
        let ttl_ms = i64::try_from(d.guard.confirmation_ttl.as_millis()).unwrap_or(i64::MAX);
        let proto = Action {
            action_id: uuid::Uuid::new_v4().to_string(),
            key: key.clone(),
            tenant: event.tenant.clone(),
            requester: principal.id.clone(),
            requester_identity: identity,
            requester_kind: principal.kind.as_str().to_owned(),
            op: call.op.clone(),
            op_version,
            tier: spec.tier().as_str().to_owned(),
            reason: tier_reason(spec),
            args: args_canonical,
            state: ActionState::Pending,
            created_ms: now,
            expires_ms: now.saturating_add(ttl_ms),
            decided_ms: None,
            decided_by: None,
            outcome: None,
        };
        let store = &self.confirmations;
        // Each pass either ends the step or saw the key change under it (another replica raised
        // or consumed meanwhile); a few passes always settle.
        for _ in 0..8 {
            match store.consume(&key, now_ms()).await {
                Ok(Some(a)) => return Confirmed::Run(Box::new(a)),
                Ok(None) => {}
                Err(e) => return store_failed(&e, &call.request_id),
            }
            let current = match store.current(&key, now_ms()).await {
                Ok(c) => c,
                Err(e) => return store_failed(&e, &call.request_id),
            };
            let a = match current {
                Some(a) => a,
                None => match store.raise(&proto, now_ms(), d.guard.max_pending).await {
                    Ok(Raised::Raised) => proto.clone(),
                    Ok(Raised::KeyTaken) => continue,
                    Ok(Raised::TooManyPending {
                        pending,
                        first_expiry_ms,
                    }) => {
                        return Confirmed::Answer(
                            Outcome::Limited,
                            Reply::Refused(too_many_pending(
                                &principal.id,
                                pending,
                                d.guard.max_pending,
                                first_expiry_ms,
                            )),
                        );
                    }
                    Err(e) => return store_failed(&e, &call.request_id),
                },
            };
            event.action_id = Some(a.action_id.clone());
            match a.state {
                ActionState::Pending => {
                    return Confirmed::Answer(
                        Outcome::ConfirmationRaised,
                        Reply::Refused(required(&a)),
                    );
                }
                ActionState::Approved => continue,
                ActionState::Denied => {
                    return Confirmed::Answer(
                        Outcome::Denied,
                        Reply::Refused(Refusal::new(
                            codes::CONFIRMATION_DENIED,
                            format!(
                                "{} denied this exact call to `{}` (action {}); call with other arguments, or ask again after it expires in {} s",
                                a.decided_by
                                    .as_deref()
                                    .map_or_else(|| "someone".to_owned(), |b| format!("`{b}`")),
                                a.op,
                                a.action_id,
                                (a.expires_ms - now_ms()).max(0) / 1000 + 1
                            ),
                        )),
                    );
                }
                ActionState::Running => {
                    return Box::pin(self.wait_for_outcome(a, &call.request_id)).await;
                }
                ActionState::Done => return replay(&a),
            }
        }
        Confirmed::Answer(
            Outcome::ConfirmationRaised,
            Reply::Refused(in_progress(&call.op)),
        )
    }

    /// Another request consumed the approval and runs the op: wait for its stored outcome.
    async fn wait_for_outcome(&self, a: Action, request_id: &str) -> Confirmed {
        let deadline = now_ms().saturating_add(OUTCOME_WAIT_MS).min(a.expires_ms);
        let mut pause = Duration::from_millis(5);
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
            match self.confirmations.get(&a.tenant, &a.action_id).await {
                Ok(Some(now)) if now.state == ActionState::Done => return replay(&now),
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => return store_failed(&e, request_id),
            }
            if now_ms() >= deadline {
                break;
            }
        }
        Confirmed::Answer(
            Outcome::ConfirmationRaised,
            Reply::Refused(in_progress(&a.op)),
        )
    }

    /// Step 9: runs the op.
    async fn execute(
        &self,
        d: &Arc<Deployment>,
        call: &Call,
        spec: &OpSpec,
        args: Args,
        grant: Box<corral_policy::Allowed>,
        event: &mut AuditEvent,
    ) -> (Outcome, Reply) {
        let principal = &call.caller.principal;
        let Some(handler) = d.registry.get(&call.op) else {
            tracing::error!(op = %call.op, "op is in the catalog but has no handler");
            return (
                Outcome::OpError,
                Reply::Refused(Refusal::new(
                    codes::SERVER_INTERNAL,
                    format!(
                        "op `{}` has no handler (request {})",
                        call.op, call.request_id
                    ),
                )),
            );
        };
        let spec_has_url = spec
            .params
            .iter()
            .any(|p| p.kind == corral_policy::ParamKind::Url);
        // Only an op with a url parameter reaches urls on its own (redirects); the others get
        // no re-check, which refuses every url (fails closed).
        let url_check = spec_has_url
            .then(|| url_check(d.clone(), call.op.clone(), principal.clone(), args.clone()));
        // A sandboxed program's connections (a `network: {allow: [...]}` run): collected while
        // it runs, one audit event each once it ended.
        let egress = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = Arc::clone(&egress);
        let egress_log = corral_exec::EgressLog::new(move |r| {
            if let Ok(mut records) = sink.lock() {
                records.push(r);
            }
        });
        let ctx = OpCtx {
            op: spec.clone(),
            principal: principal.clone(),
            args,
            grant: *grant,
            backend: self.backend.clone(),
            protected: d.protected.clone(),
            request_id: call.request_id.clone(),
            url_check,
            egress_log: Some(egress_log),
        };
        let result = handler.call(ctx).await;
        let records = egress
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default();
        for (i, r) in records.iter().enumerate() {
            if let Err(refusal) = self.audit(&egress_event(event, i, r)).await {
                return (Outcome::OpError, Reply::Refused(refusal));
            }
        }
        match result {
            Ok(OpOutput::Json { value, attestation }) => {
                event.attestation = attestation.as_ref().map(AttestationRecord::from);
                (Outcome::Ok, Reply::Json(value))
            }
            Ok(OpOutput::Stream(s)) => (Outcome::Ok, Reply::Stream(s)),
            Err(e) => {
                let outcome = if e.code.starts_with("limit.") {
                    Outcome::Limited
                } else {
                    Outcome::OpError
                };
                (outcome, Reply::Refused(op_refusal(&e)))
            }
        }
    }
}

/// The audit event of one connection a sandboxed program made through the egress proxy: the
/// call's event with its own request id (`<call>/egress/<n>`), the host, port and byte counts in
/// `detail`, and `egress.denied` when it was refused. Never a byte of payload.
fn egress_event(call: &AuditEvent, n: usize, r: &corral_exec::EgressRecord) -> AuditEvent {
    let target = match r.addr {
        Some(addr) => format!("{}:{} ({addr})", r.host, r.port),
        None => format!("{}:{}", r.host, r.port),
    };
    let detail = match (&r.reason, r.allowed) {
        (None, true) => format!(
            "egress {target} allowed: {} bytes up, {} bytes down",
            r.bytes_up, r.bytes_down
        ),
        (Some(why), true) => format!(
            "egress {target} allowed, then {why}: {} bytes up, {} bytes down",
            r.bytes_up, r.bytes_down
        ),
        (reason, false) => format!(
            "egress {target} refused: {}",
            reason.as_deref().unwrap_or("not admitted")
        ),
    };
    AuditEvent {
        request_id: format!("{}/egress/{n}", call.request_id),
        outcome: if r.allowed {
            Outcome::Ok
        } else {
            Outcome::Denied
        },
        code: (!r.allowed).then(|| codes::EGRESS_DENIED.to_owned()),
        status: if r.allowed { 200 } else { 403 },
        duration_us: 0,
        attestation: None,
        detail: Some(detail),
        ..call.clone()
    }
}

fn op_refusal(e: &OpError) -> Refusal {
    Refusal::new(e.code, e.message.clone())
}

/// Stores a `not replayable` outcome for a consumed action whose request was dropped before the
/// op's outcome was stored (disarmed by setting `action` to `None`).
struct Interrupted {
    store: Arc<dyn ConfirmationStore>,
    action: Option<(String, String)>,
}

impl Drop for Interrupted {
    fn drop(&mut self) {
        let Some((id, op)) = self.action.take() else {
            return;
        };
        tracing::warn!(action_id = %id, op = %op, "an approved call was interrupted");
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = Arc::clone(&self.store);
        rt.spawn(async move {
            let outcome = StoredOutcome::Refused {
                status: 409,
                code: codes::CONFIRMATION_NOT_REPLAYABLE.to_owned(),
                message: format!(
                    "the approved call to `{op}` (action {id}) was interrupted while it ran (its request was cancelled) and may have partly run; check its effects, then call again after the action expires"
                ),
            };
            if let Err(e) = store.finish(&id, &outcome, now_ms()).await {
                tracing::error!(action_id = %id, error = %e, "the outcome of an interrupted call could not be stored");
            }
        });
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

/// How long a retry waits for the outcome of an approved call another request is running.
const OUTCOME_WAIT_MS: i64 = 120_000;

/// What the confirmation step decided.
enum Confirmed {
    /// The approval was consumed: run the op.
    Run(Box<Action>),
    /// Answer this, without running.
    Answer(Outcome, Reply),
}

/// `202 confirmation.required`, with the action and how to approve it.
fn required(a: &Action) -> Refusal {
    let path = format!("/confirmations/{}/decision", a.action_id);
    let expires_in = (a.expires_ms - now_ms()).max(0) / 1000;
    let mut r = Refusal::new(
        codes::CONFIRMATION_REQUIRED,
        format!(
            "`{}` is in the {} tier and waits for a person to approve this exact call: `POST {path}` with `{{\"decision\": \"approve\"}}` as `{}` (a human token, not a delegated or service one), then retry the same call with the same arguments within {expires_in} s",
            a.op, a.tier, a.requester
        ),
    );
    r.details = Some(action_details(a, &path));
    r
}

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

/// `429 confirmation.too_many_pending`: the cap, how to clear them, and the setting.
fn too_many_pending(who: &str, pending: u64, max: u64, first_expiry_ms: Option<i64>) -> Refusal {
    let wait_s = first_expiry_ms.map(|e| (e - now_ms()).max(0) / 1000 + 1);
    let mut r = Refusal::new(
        codes::CONFIRMATION_TOO_MANY_PENDING,
        format!(
            "`{who}` already has {pending} pending actions, the most `guardrails.max_pending` ({max}) allows, so this call raised none; have a person approve or deny them (`GET /confirmations` lists them){}, or raise `guardrails.max_pending`",
            wait_s.map_or_else(String::new, |s| format!(
                ", or wait until the first expires in {s} s"
            ))
        ),
    );
    r.retry_after = wait_s.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(1)));
    r
}

fn in_progress(op: &str) -> Refusal {
    let mut r = Refusal::new(
        codes::CONFIRMATION_IN_PROGRESS,
        format!(
            "the approved call to `{op}` is running on another request and its outcome is not stored yet; retry the same call shortly"
        ),
    );
    r.retry_after = Some(Duration::from_secs(1));
    r
}

fn store_failed(e: &ConfirmationError, request_id: &str) -> Confirmed {
    tracing::error!(request_id, error = %e, "confirmation store failed");
    Confirmed::Answer(
        Outcome::OpError,
        Reply::Refused(Refusal::new(
            codes::STORE_QUERY_FAILED,
            format!("the confirmation store failed, so nothing ran (request {request_id}); retry"),
        )),
    )
}

/// The stored outcome of an approved call that already ran.
fn replay(a: &Action) -> Confirmed {
    let reply = match &a.outcome {
        Some(StoredOutcome::Json { value }) => Reply::Json(value.clone()),
        // The status comes from the code, as for every refusal (the stored one is the same).
        Some(StoredOutcome::Refused {
            status: _,
            code,
            message,
        }) => Reply::Refused(Refusal::new(
            codes::lookup(code).map_or(codes::SERVER_INTERNAL, |c| c.code),
            message.clone(),
        )),
        Some(StoredOutcome::Stream { .. }) => Reply::Refused(Refusal::new(
            codes::CONFIRMATION_NOT_REPLAYABLE,
            format!(
                "the approved call to `{}` already ran (action {}) and its bytes are not stored; call again after it expires",
                a.op, a.action_id
            ),
        )),
        None => Reply::Refused(in_progress(&a.op)),
    };
    Confirmed::Answer(Outcome::Replayed, reply)
}

/// The `dry_run` answer: what would have been called, with the canonical arguments.
fn dry_run_payload(call: &Call, spec: &OpSpec) -> serde_json::Value {
    let args = match &call.args {
        serde_json::Value::Null => json!({}),
        other => other.clone(),
    };
    let text = canonical(&args);
    json!({
        "status": "dry_run",
        "message": format!("[DRY RUN] Would have called {} with {text}", call.op),
        "op": call.op,
        "tier": spec.tier().as_str(),
        "args": args,
        "args_canonical": text,
    })
}

/// For `http.fetch` redirects: decide the same call again with the new url, so every hop
/// passes the same rules and scopes as the first.
fn url_check(
    d: Arc<Deployment>,
    op: String,
    principal: Principal,
    args: Args,
) -> corral_ops::http::UrlCheck {
    Arc::new(move |url: &str| {
        let args = args.clone().with("url", ArgValue::Str(url.to_owned()));
        match d.engine.decide(&Request {
            op: &op,
            principal: &principal,
            args: &args,
        }) {
            Decision::Allowed(a) => a.url.ok_or_else(|| {
                OpError::new(
                    codes::POLICY_URL_NOT_ALLOWED,
                    format!("redirect to `{url}` is outside the url scope"),
                )
            }),
            // A policy code (a 403): the redirect is refused by the rules, whatever the decision.
            other => Err(OpError::new(
                other
                    .code()
                    .filter(|c| c.starts_with("policy."))
                    .unwrap_or(codes::POLICY_URL_NOT_ALLOWED),
                format!("redirect to `{url}` is refused by the policy"),
            )),
        }
    })
}

/// A run store that failed refuses the call (fail closed): its budgets cannot be checked.
fn run_store_failed(e: &RunStoreError) -> (Outcome, Reply) {
    tracing::error!(error = %e, "the run store failed; refusing the call");
    (
        Outcome::OpError,
        Reply::Refused(Refusal::new(
            codes::STORE_QUERY_FAILED,
            "the run's budgets cannot be checked right now (the store failed); retry",
        )),
    )
}
