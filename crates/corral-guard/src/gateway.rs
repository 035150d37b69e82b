//! The one call path. HTTP, MCP, `corral call --local` and the lab all call `Gateway::call`.
//!
//! Order (pinned by a test): resolve the op in the caller's view (unknown and not-enabled give
//! the same 404) -> parse arguments against the op's params (400) -> policy rules and scopes
//! (403) -> limits (429) -> execute -> audit. Authentication happens before, in the surface
//! that knows the credentials; autonomy, RBAC by tier and confirmation slot in between policy
//! and execution (the guardrails milestone).

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use corral_exec::Backend;
use corral_ops::{OpCtx, OpError, OpOutput, Registry, Stream};
use corral_policy::{ArgValue, Args, Decision, Engine, Limits, Principal, Request, codes};

use crate::args::{args_hash, parse_args};
use crate::audit::{AttestationRecord, AuditEvent, AuditSink, Outcome, args_shape};
use crate::limiter::{Limited, Limiter};
use crate::metrics::Metrics;

/// What a config produces: swapped whole on reload, so a call sees one consistent version.
#[derive(Debug)]
pub struct Deployment {
    /// The compiled policy.
    pub engine: Engine,
    /// The op handlers.
    pub registry: Registry,
    /// Directories no op may touch (corral's state directory).
    pub protected: Vec<PathBuf>,
}

/// Who is calling, as authenticated by the surface.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The principal.
    pub principal: Principal,
    /// For delegated callers, the actors behind the call (outermost first).
    pub act_chain: Vec<String>,
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

/// A refusal or failure, as the surface should answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// HTTP status.
    pub status: u16,
    /// A stable code from the catalog.
    pub code: &'static str,
    /// What is wrong and what to change. Safe to show the caller.
    pub message: String,
    /// For 429s: when to retry.
    pub retry_after: Option<Duration>,
}

impl Refusal {
    fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
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
    backend: Arc<dyn Backend>,
    sinks: Vec<Arc<dyn AuditSink>>,
    limiter: Limiter,
    tenant: String,
    /// Call metrics, for `/metrics`.
    pub metrics: Metrics,
}

/// The message for 404: identical for an unknown op and an op the caller may not call, so the
/// answer does not reveal which ops exist.
fn not_enabled(op: &str) -> Refusal {
    Refusal::new(
        404,
        codes::OP_NOT_ENABLED,
        format!("op `{op}` is not enabled for you; `GET /ops` lists the ops you may call"),
    )
}

fn now_ms() -> i64 {
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
            backend,
            sinks,
            limiter: Limiter::default(),
            tenant: tenant.to_owned(),
            metrics: Metrics::default(),
        }
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
                        503,
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
            op: op.chars().take(200).collect(),
            outcome,
            code: Some(code.to_owned()),
            rule: None,
            args_hash: String::new(),
            args_shape: serde_json::Value::Null,
            status,
            duration_us: 0,
            attestation: None,
        };
        let _ = self.audit(&event).await;
        self.metrics
            .record("unknown", outcome.as_str(), Duration::ZERO);
    }

    /// Decides and runs one call, and audits it before returning.
    pub async fn call(&self, call: Call) -> Reply {
        let started = Instant::now();
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
            op: call.op.chars().take(200).collect(),
            outcome: Outcome::Ok,
            code: None,
            rule: None,
            args_hash: args_hash(&call.args),
            args_shape: args_shape(&call.args),
            status: 200,
            duration_us: 0,
            attestation: None,
        };
        let (outcome, reply) = self.decide_and_run(&d, &call, &mut event).await;
        event.outcome = outcome;
        event.duration_us = i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX);
        match &reply {
            Reply::Refused(r) => {
                event.status = r.status;
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
        event: &mut AuditEvent,
    ) -> (Outcome, Reply) {
        let principal = &call.caller.principal;
        // 1. Resolve: unknown and not-enabled are the same answer.
        let spec = match d.engine.catalog().get(&call.op) {
            Some(s) if d.engine.is_mounted(&call.op, principal) => s.clone(),
            Some(_) | None => return (Outcome::NotEnabled, Reply::Refused(not_enabled(&call.op))),
        };
        // 2. Arguments.
        let args = match parse_args(&spec, &call.args) {
            Ok(a) => a,
            Err(e) => {
                return (
                    Outcome::InvalidArgs,
                    Reply::Refused(Refusal::new(400, e.code, e.message)),
                );
            }
        };
        // 3. Policy.
        let decision = d.engine.decide(&Request {
            op: &call.op,
            principal,
            args: &args,
        });
        let grant = match decision {
            Decision::Allowed(a) => *a,
            Decision::NotMounted => {
                return (Outcome::NotEnabled, Reply::Refused(not_enabled(&call.op)));
            }
            Decision::Denied { rule, code, reason } => {
                event.rule = Some(rule.name.to_string());
                let msg = format!(
                    "{reason} (rule `{}`); call with other arguments, or change that rule",
                    rule.name
                );
                return (
                    Outcome::Denied,
                    Reply::Refused(Refusal::new(403, code, msg)),
                );
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
                return (
                    Outcome::Denied,
                    Reply::Refused(Refusal::new(403, code, msg)),
                );
            }
        };
        event.rule = Some(grant.rule.name.to_string());
        // 4. Limits.
        let _permit = match self.limiter.admit(&principal.id, &call.op, &grant.limits) {
            Ok(p) => p,
            Err(Limited::Rate { retry_after, limit }) => {
                let mut r = Refusal::new(
                    429,
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
                    429,
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
        // 5. Execute.
        let Some(handler) = d.registry.get(&call.op) else {
            tracing::error!(op = %call.op, "op is in the catalog but has no handler");
            return (
                Outcome::OpError,
                Reply::Refused(Refusal::new(
                    500,
                    codes::SERVER_INTERNAL,
                    format!(
                        "op `{}` has no handler (request {})",
                        call.op, call.request_id
                    ),
                )),
            );
        };
        let ctx = OpCtx {
            op: spec,
            principal: principal.clone(),
            args: args.clone(),
            grant,
            backend: self.backend.clone(),
            protected: d.protected.clone(),
            request_id: call.request_id.clone(),
            url_check: Some(url_check(
                d.clone(),
                call.op.clone(),
                principal.clone(),
                args,
            )),
        };
        match handler.call(ctx).await {
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

fn op_refusal(e: &OpError) -> Refusal {
    Refusal::new(e.status, e.code, e.message.clone())
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
                    403,
                    format!("redirect to `{url}` is outside the url scope"),
                )
            }),
            other => Err(OpError::new(
                other.code().unwrap_or(codes::POLICY_URL_NOT_ALLOWED),
                403,
                format!("redirect to `{url}` is refused by the policy"),
            )),
        }
    })
}
