//! The guard chain, one function per step, in the order of the `gateway` module doc (pinned by
//! the `guard_order` tests): resolve, arguments, (entering the run), autonomy, RBAC, policy,
//! limits, budgets, confirmation, execute. A step passes the call on (`Ok`) or stops it with its
//! answer (`Err`), so the first step that refuses answers, and `?` joins them.

use std::sync::Arc;
use std::time::Duration;

use corral_ops::{OpCtx, OpError, OpOutput};
use corral_policy::{
    Allowed, ArgValue, Args, AutonomyLevel, Decision, OpSpec, Principal, Request, codes,
};
use serde_json::json;

use super::lease::RunLease;
use super::{
    Call, CallOptions, Deployment, Gateway, Proxied, Refusal, Reply, action_details, not_enabled,
    now_ms,
};
use crate::args::parse_args;
use crate::audit::{AttestationRecord, AuditEvent, Outcome};
use crate::canonical::{canonical, digest};
use crate::confirm::{
    Action, ActionState, ConfirmationError, ConfirmationStore, MAX_ACTION_ARGS_BYTES,
    RUNNING_LEASE_MS, Raised, StoredOutcome,
};
use crate::guardrails::{Confirmation, GuardPolicy, tier_reason};
use crate::limiter::{Limited, Permit};
use crate::runs::{RunKey, RunPurpose, RunStoreError, RunView, TOKEN_METERED_NS};

/// How a call ended: the outcome its audit event records, and the answer.
pub(super) struct Answer {
    pub(super) outcome: Outcome,
    pub(super) reply: Reply,
    /// Model tokens the call used (a proxied model call), charged to its run.
    pub(super) tokens: u64,
}

impl Answer {
    fn refused(outcome: Outcome, refusal: Refusal) -> Self {
        Self::of(outcome, Reply::Refused(refusal))
    }

    fn of(outcome: Outcome, reply: Reply) -> Self {
        Self {
            outcome,
            reply,
            tokens: 0,
        }
    }
}

/// A step's result: the call goes on with `T`, or ends with the answer.
type Step<T> = Result<T, Answer>;

/// A guard step's span (`guard.resolve`, `guard.policy`, ...): a child of the call's, with the
/// outcome and code of the step that refused, nothing else (never an argument value).
pub(super) fn step_span(step: &'static str) -> tracing::Span {
    tracing::info_span!(
        target: corral_telemetry::TARGET,
        "guard.step",
        otel.name = step,
        corral.outcome = tracing::field::Empty,
        corral.code = tracing::field::Empty,
    )
}

/// Records on a step's span how the call ended there (nothing for a call that went on).
fn mark(span: &tracing::Span, answer: &Answer) {
    if span.is_disabled() {
        return;
    }
    span.record("corral.outcome", answer.outcome.as_str());
    if let Reply::Refused(r) = &answer.reply {
        span.record("corral.code", r.code);
    }
}

/// Runs a synchronous step in its span.
fn traced<T>(step: &'static str, f: impl FnOnce() -> Step<T>) -> Step<T> {
    let span = step_span(step);
    let r = span.in_scope(f);
    if let Err(a) = &r {
        mark(&span, a);
    }
    r
}

/// Runs an asynchronous step (a future built in place) in its span.
macro_rules! traced_async {
    ($step:literal, $fut:expr) => {{
        let span = step_span($step);
        let r = in_span!(span, $fut);
        if let Err(a) = &r {
            mark(&span, a);
        }
        r
    }};
}

impl Gateway {
    /// Runs the call through the chain; the answer of the step that ended it.
    pub(super) async fn decide_and_run(
        &self,
        d: &Arc<Deployment>,
        call: &Call,
        opts: &CallOptions,
        event: &mut AuditEvent,
        proxied: Option<Proxied>,
    ) -> Answer {
        match self.chain(d, call, opts, event, proxied).await {
            Ok(answer) | Err(answer) => answer,
        }
    }

    /// The steps in order, joined with `?`; after the op (or the answer instead of it), a run
    /// that was charged settles its budgets.
    async fn chain(
        &self,
        d: &Arc<Deployment>,
        call: &Call,
        opts: &CallOptions,
        event: &mut AuditEvent,
        proxied: Option<Proxied>,
    ) -> Step<Answer> {
        let principal = &call.caller.principal;
        let g = &d.guard;
        // Each step in its own span (`guard.<step>`, a child of the call's): see `traced`.
        // Borrowed from the deployment (which outlives the call); cloned once, for the handler.
        let spec = traced("guard.resolve", || resolve(d, call))?;
        let args = traced("guard.arguments", || arguments(spec, call))?;
        // The run: what it did to itself (a lowered level, dry-run) applies from here on.
        let run = traced_async!("guard.run", self.enter_run(principal, opts))?;
        let (run_level, run_dry) = match &run {
            Some((_, r)) => (r.level, r.dry_run),
            None => (opts.autonomy, opts.dry_run),
        };
        traced("guard.autonomy", || {
            autonomy(g, spec, principal, run_level, event)
        })?;
        traced("guard.rbac", || rbac(g, spec, principal, event))?;
        // Kept boxed: it is large, and moves through the steps to the handler.
        let grant = traced("guard.policy", || policy(d, call, &args, event))?;
        let _permit = traced("guard.limits", || self.limits(call, &grant))?;
        let run_key = run.as_ref().map(|(k, _)| k);
        // Held until the call's tokens are charged below: taken before the budget check, so
        // the check sees what every earlier model call of the run used.
        let (lease, charged) = traced_async!("guard.budgets", async {
            let lease = self.model_call_lease(run_key, call, g).await?;
            Ok((lease, self.budgets(run_key, call, g, event).await?))
        })?;
        let approved = traced_async!(
            "guard.confirmation",
            self.confirmation(d, call, spec, grant.rule.index, run_dry, event)
        );
        // A dry-run answer counts as run: its budget charge stands, and its output is metered.
        let executed = match &approved {
            Ok(_) => true,
            Err(a) => a.outcome == Outcome::DryRun,
        };
        let answer = match approved {
            Ok(action) => {
                let span = step_span("guard.execute");
                let answer = in_span!(
                    span,
                    self.execute(d, call, spec, args, grant, event, action, proxied)
                );
                mark(&span, &answer);
                answer
            }
            Err(answer) => answer,
        };
        if let Some(key) = charged {
            let metered = (g.budgets.max_output_bytes > 0).then(|| output_bytes(&answer.reply));
            self.settle_budgets(key, &call.op, executed, metered).await;
            if answer.tokens > 0
                && let Err(e) = self.runs.charge_tokens(key, answer.tokens).await
            {
                tracing::warn!(error = %e, run = key.run_id, "a run's model tokens were not metered");
            }
        }
        if let Some(l) = lease {
            l.release().await;
        }
        if answer.tokens > 0 {
            // The metering per purpose counts model tokens too, a run or not (spend: not known).
            self.meter.charge_tokens(
                principal.tenant.as_deref().unwrap_or(&self.tenant),
                self.purpose,
                answer.tokens,
                None,
            );
        }
        Ok(answer)
    }

    /// Between arguments and autonomy: enters the call's run (`X-Corral-Run`, or the token's).
    async fn enter_run<'a>(
        &'a self,
        principal: &'a Principal,
        opts: &'a CallOptions,
    ) -> Step<Option<(RunKey<'a>, RunView)>> {
        let Some(id) = opts.run_id.as_ref() else {
            return Ok(None);
        };
        let key = RunKey {
            tenant: principal.tenant.as_deref().unwrap_or(&self.tenant),
            principal: &principal.id,
            purpose: self.purpose,
            run_id: id,
        };
        match self
            .runs
            .enter(&key, now_ms(), opts.autonomy, opts.dry_run)
            .await
        {
            Ok(record) => {
                // A live run exists only through its calls: its first one counts it. The lab
                // counts the runs it starts itself (a lab run may make no call).
                if record.opened && self.purpose == RunPurpose::Live {
                    self.meter.run(key.tenant, RunPurpose::Live);
                }
                Ok(Some((key, record)))
            }
            Err(e) => Err(run_store_failed(&e)),
        }
    }

    /// Step 6: the rate and concurrency limits; the permit is held while the call runs.
    fn limits(&self, call: &Call, grant: &Allowed) -> Step<Permit> {
        let principal = &call.caller.principal.id;
        self.limiter
            .admit(principal, &call.op, &grant.limits)
            .map_err(|limited| {
                let r = match limited {
                    Limited::Rate { retry_after, limit } => {
                        let mut r = Refusal::new(
                            codes::LIMIT_RATE,
                            format!(
                                "rate limit {limit} reached for `{}`; retry in {} ms",
                                call.op,
                                retry_after.as_millis().max(1)
                            ),
                        );
                        r.retry_after = Some(retry_after);
                        r
                    }
                    Limited::Concurrency { limit } => {
                        let mut r = Refusal::new(
                            codes::LIMIT_CONCURRENCY,
                            format!(
                                "{limit} call(s) to `{}` already in flight for you; retry when one finishes",
                                call.op
                            ),
                        );
                        r.retry_after = Some(Duration::from_secs(1));
                        r
                    }
                };
                Answer::refused(Outcome::Limited, r)
            })
    }

    /// Step 7, first: a run with a token budget makes one model call at a time (its tokens are
    /// known only once a call ended, so a call checked while another is in flight would pass on
    /// a stale count); a second concurrent one is refused, never queued. The lease is the run
    /// store's, so replicas sharing it admit one call between them.
    async fn model_call_lease(
        &self,
        run: Option<&RunKey<'_>>,
        call: &Call,
        g: &GuardPolicy,
    ) -> Step<Option<RunLease>> {
        let Some(key) = run else {
            return Ok(None);
        };
        if g.budgets.max_tokens == 0 || !call.op.starts_with(TOKEN_METERED_NS) {
            return Ok(None);
        }
        match RunLease::take(&self.runs, key, now_ms()).await {
            Err(e) => Err(run_store_failed(&e)),
            Ok(Some(lease)) => Ok(Some(lease)),
            Ok(None) => {
                let mut r = Refusal::new(
                    codes::BUDGET_TOKENS_IN_FLIGHT,
                    format!(
                        "run `{}` has a model call in flight, and its token budget (`budgets.tokens`) lets it make one at a time; retry when that call ends",
                        key.run_id
                    ),
                );
                r.retry_after = Some(Duration::from_secs(1));
                Err(Answer::refused(Outcome::BudgetRefused, r))
            }
        }
    }

    /// Step 7: charges the run's budgets (neutral refusals: nothing ran, nothing failed). The
    /// key when a charge was made, to settle once the call ended.
    async fn budgets<'k>(
        &self,
        run: Option<&'k RunKey<'k>>,
        call: &Call,
        g: &GuardPolicy,
        event: &mut AuditEvent,
    ) -> Step<Option<&'k RunKey<'k>>> {
        let Some(key) = run.filter(|_| g.budgets.any()) else {
            return Ok(None);
        };
        match self.runs.charge(key, &call.op, &g.budgets, now_ms()).await {
            Err(e) => Err(run_store_failed(&e)),
            Ok(Ok(())) => Ok(Some(key)),
            Ok(Err(e)) => {
                event.detail = Some(e.budget.clone());
                let code = if e.budget == "budgets.tokens" {
                    codes::BUDGET_TOKENS_EXHAUSTED
                } else {
                    codes::BUDGET_EXHAUSTED
                };
                Err(Answer::refused(
                    Outcome::BudgetRefused,
                    Refusal::new(
                        code,
                        format!(
                            "run `{}`: {} (`{}`); start a new run, or raise the budget",
                            key.run_id, e.detail, e.budget
                        ),
                    ),
                ))
            }
        }
    }

    /// After the call: a run charged for a call that ran meters its output (`metered`, when
    /// the run has an output budget); one charged for a call that never ran gets the charge back.
    async fn settle_budgets(
        &self,
        key: &RunKey<'_>,
        op: &str,
        executed: bool,
        metered: Option<u64>,
    ) {
        if !executed {
            if let Err(e) = self.runs.refund(key, op).await {
                tracing::warn!(error = %e, run = key.run_id, "a run's unused charge was not refunded");
            }
        } else if let Some(bytes) = metered
            && let Err(e) = self.runs.add_output(key, bytes).await
        {
            tracing::warn!(error = %e, run = key.run_id, "a run's output was not metered");
        }
    }

    /// Step 8: confirmation for the confirm and destructive tiers, unless a confirm-tier op's
    /// allow rule says `confirm: never`; in dry-run, a guarded op is described instead, never
    /// run, and nobody is asked. `Ok` with the consumed approval, if one was needed.
    async fn confirmation(
        &self,
        d: &Arc<Deployment>,
        call: &Call,
        spec: &OpSpec,
        rule_index: usize,
        run_dry: bool,
        event: &mut AuditEvent,
    ) -> Step<Option<Box<Action>>> {
        match d.guard.confirmation_step(spec, rule_index, run_dry) {
            Confirmation::NotGuarded | Confirmation::Waived => Ok(None),
            Confirmation::DryRun => Err(Answer::of(
                Outcome::DryRun,
                Reply::Json(dry_run_payload(call, spec)),
            )),
            Confirmation::Required => {
                // Boxed: the confirmation step's state is large and most calls never reach it,
                // so it must not grow every call's future.
                let a = Box::pin(self.approval(d, call, spec, event)).await?;
                // The consumption is on record before the op runs.
                let mut consumed = event.clone();
                consumed.request_id = format!("{}:consume", call.request_id);
                consumed.outcome = Outcome::ConfirmationConsumed;
                consumed.action_id = Some(a.action_id.clone());
                consumed.ts_ms = now_ms();
                self.audit(&consumed)
                    .await
                    .map_err(|r| Answer::refused(Outcome::ConfirmationConsumed, r))?;
                event.action_id = Some(a.action_id.clone());
                Ok(Some(a))
            }
        }
    }

    /// Finds or raises the call's action and consumes its approval, or answers what the store
    /// says (pending, denied, running elsewhere, already done).
    async fn approval(
        &self,
        d: &Arc<Deployment>,
        call: &Call,
        spec: &OpSpec,
        event: &mut AuditEvent,
    ) -> Step<Box<Action>> {
        let proto = pending_action(d, call, spec, &event.tenant)?;
        let key = proto.key.clone();
        let store = &self.confirmations;
        // Each pass either ends the step or saw the key change under it (another replica raised
        // or consumed meanwhile); a few passes always settle.
        for _ in 0..8 {
            match store.consume(&key, now_ms()).await {
                Ok(Some(a)) => return Ok(Box::new(a)),
                Ok(None) => {}
                Err(e) => return Err(store_failed(&e, &call.request_id)),
            }
            let current = match store.current(&key, now_ms()).await {
                Ok(c) => c,
                Err(e) => return Err(store_failed(&e, &call.request_id)),
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
                        return Err(Answer::refused(
                            Outcome::Limited,
                            too_many_pending(
                                &call.caller.principal.id,
                                pending,
                                d.guard.max_pending,
                                first_expiry_ms,
                            ),
                        ));
                    }
                    Err(e) => return Err(store_failed(&e, &call.request_id)),
                },
            };
            event.action_id = Some(a.action_id.clone());
            match a.state {
                ActionState::Pending => {
                    return Err(Answer::refused(Outcome::ConfirmationRaised, required(&a)));
                }
                ActionState::Approved => continue,
                ActionState::Denied => {
                    return Err(Answer::refused(Outcome::Denied, denied(&a)));
                }
                ActionState::Running => {
                    return Err(Box::pin(self.wait_for_outcome(a, &call.request_id)).await);
                }
                ActionState::Done => return Err(replay(&a)),
            }
        }
        Err(Answer::refused(
            Outcome::ConfirmationRaised,
            in_progress(&call.op),
        ))
    }

    /// Another request consumed the approval and runs the op: wait for its stored outcome. If
    /// that request's process died first (its lease ran out: `kill -9`, a crash, a lost host),
    /// the action is given the outcome "cut off, may have partly run" (never run again).
    async fn wait_for_outcome(&self, a: Action, request_id: &str) -> Answer {
        let deadline = now_ms().saturating_add(OUTCOME_WAIT_MS).min(a.expires_ms);
        let mut pause = Duration::from_millis(5);
        let mut next_abandon_ms = 0;
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
            match self.confirmations.get(&a.tenant, &a.action_id).await {
                Ok(Some(now)) if now.state == ActionState::Done => return replay(&now),
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => return store_failed(&e, request_id),
            }
            let t = now_ms();
            if t >= next_abandon_ms {
                next_abandon_ms = t.saturating_add(1000);
                match self
                    .confirmations
                    .abandon(&a.action_id, &cut_off(&a), t)
                    .await
                {
                    // The next `get` sees it done, with that outcome.
                    Ok(_) => {}
                    Err(e) => return store_failed(&e, request_id),
                }
            }
            if t >= deadline {
                break;
            }
        }
        Answer::refused(Outcome::ConfirmationRaised, in_progress(&a.op))
    }

    /// Step 9: runs the op; for a consumed approval, stores the outcome on the action (or, if
    /// this request is dropped while the op runs, that it was interrupted), so retries are told
    /// instead of running it again.
    #[allow(clippy::too_many_arguments)]
    async fn execute(
        &self,
        d: &Arc<Deployment>,
        call: &Call,
        spec: &OpSpec,
        args: Args,
        grant: Box<Allowed>,
        event: &mut AuditEvent,
        action: Option<Box<Action>>,
        proxied: Option<Proxied>,
    ) -> Answer {
        // If this request is dropped while the approved op runs (the client went away), the
        // action gets an outcome anyway, so retries are told instead of waiting for one.
        let mut interrupted = Interrupted {
            store: Arc::clone(&self.confirmations),
            action: action.as_ref().map(|a| (a.action_id.clone(), a.op.clone())),
        };
        // While the op runs, this process keeps the action's lease alive: should it die, a
        // retry sees the lease run out and stores that the call was cut off.
        let _lease = action
            .as_ref()
            .map(|a| Lease::keep(Arc::clone(&self.confirmations), a.action_id.clone()));
        let answer = match proxied {
            // The surface performs the op itself (the LLM proxy forwards the model request):
            // every step before this one decided it as for any call. A simulation answers from
            // its mocks instead, as for every op: nothing real is reached.
            Some(p) if self.simulated.is_none() => {
                let out = p.await;
                event.detail = out.detail;
                let mut a = match out.result {
                    Ok(v) => Answer::of(Outcome::Ok, Reply::Json(v)),
                    Err(r) => {
                        let outcome = if r.code.starts_with("limit.") {
                            Outcome::Limited
                        } else {
                            Outcome::OpError
                        };
                        Answer::refused(outcome, r)
                    }
                };
                a.tokens = out.tokens;
                a
            }
            _ => self.run_op(d, call, spec, args, grant, event).await,
        };
        // The guard stays armed until the action's outcome (or its release) is written: a
        // request dropped meanwhile still leaves the action an outcome (writing one only
        // changes a `running` action, so a release or finish that completed is kept).
        let mut answer = answer;
        if let Some(a) = action {
            // Nothing ran (the backend could not start the program): the approval is given
            // back, so the same call runs once the cause is fixed, within the action's life.
            if let Reply::Refused(r) = &mut answer.reply
                && codes::before_start(r.code)
            {
                match self.confirmations.release(&a.action_id, now_ms()).await {
                    Ok(true) => {
                        r.message.push_str(&format!(
                            "; nothing ran, so the approval of action {} still holds: fix this, then retry the same call before it expires",
                            a.action_id
                        ));
                        interrupted.action = None;
                        return answer;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::error!(action_id = %a.action_id, error = %e, "an approval could not be given back");
                    }
                }
            }
            let stored = match &answer.reply {
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
        interrupted.action = None;
        answer
    }

    /// The op's handler, with the call's grant, and one audit event per connection its
    /// sandboxed program made.
    async fn run_op(
        &self,
        d: &Arc<Deployment>,
        call: &Call,
        spec: &OpSpec,
        args: Args,
        grant: Box<Allowed>,
        event: &mut AuditEvent,
    ) -> Answer {
        let principal = &call.caller.principal;
        if let Some(sim) = &self.simulated {
            // A simulation: the mocks answer; no handler, backend, url or connection is used.
            return op_answer(sim.answer(spec, &call.args), event);
        }
        let Some(handler) = d.registry.get(&call.op) else {
            tracing::error!(op = %call.op, "op is in the catalog but has no handler");
            return Answer::refused(
                Outcome::OpError,
                Refusal::new(
                    codes::SERVER_INTERNAL,
                    format!(
                        "op `{}` has no handler (request {})",
                        call.op, call.request_id
                    ),
                ),
            );
        };
        let spec_has_url = spec
            .params
            .iter()
            .any(|p| p.kind == corral_policy::ParamKind::Url);
        // Only an op with a url parameter reaches urls on its own (redirects); the others get
        // no re-check, which refuses every url (fails closed).
        let url_check = spec_has_url.then(|| {
            url_check(
                d.clone(),
                call.op.clone(),
                principal.clone(),
                args.clone(),
                grant.rule.clone(),
            )
        });
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
            act_chain: call.caller.act_chain.clone(),
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
                return Answer::refused(Outcome::OpError, refusal);
            }
        }
        op_answer(result, event)
    }
}

/// What an op's (or a simulation's) result answers; its attestation goes to the audit event.
fn op_answer(result: Result<OpOutput, OpError>, event: &mut AuditEvent) -> Answer {
    match result {
        Ok(OpOutput::Json { value, attestation }) => {
            event.attestation = attestation.as_ref().map(AttestationRecord::from);
            Answer::of(Outcome::Ok, Reply::Json(value))
        }
        Ok(OpOutput::Stream(s)) => Answer::of(Outcome::Ok, Reply::Stream(s)),
        Err(e) => {
            let outcome = if e.code.starts_with("limit.") {
                Outcome::Limited
            } else {
                Outcome::OpError
            };
            Answer::refused(outcome, op_refusal(&e))
        }
    }
}

/// Step 1: resolves the op in the caller's view; unknown and not-enabled are the same answer.
fn resolve<'d>(d: &'d Deployment, call: &Call) -> Step<&'d OpSpec> {
    match d.engine.catalog().get(&call.op) {
        Some(s)
            if d.engine
                .is_mounted_before_gate(&call.op, &call.caller.principal) =>
        {
            Ok(s)
        }
        Some(_) | None => Err(Answer::refused(Outcome::NotEnabled, not_enabled(&call.op))),
    }
}

/// Step 2: parses the arguments against the op's params.
fn arguments(spec: &OpSpec, call: &Call) -> Step<Args> {
    parse_args(spec, &call.args)
        .map_err(|e| Answer::refused(Outcome::InvalidArgs, Refusal::new(e.code, e.message)))
}

/// Step 3: the autonomy level in force decides what may run at all, before anyone's role is
/// looked at.
fn autonomy(
    g: &GuardPolicy,
    spec: &OpSpec,
    principal: &Principal,
    run_level: Option<AutonomyLevel>,
    event: &mut AuditEvent,
) -> Step<()> {
    match g.check_autonomy(spec, principal, run_level) {
        Ok(_) => Ok(()),
        Err(r) => {
            event.detail = Some(r.detail);
            Err(Answer::refused(
                Outcome::AutonomyBlocked,
                Refusal::new(r.code, r.message),
            ))
        }
    }
}

/// Step 4: RBAC by tier decides who may call it, before anyone is asked to approve it.
fn rbac(g: &GuardPolicy, spec: &OpSpec, principal: &Principal, event: &mut AuditEvent) -> Step<()> {
    match g.check_role(spec, principal) {
        Ok(_) => Ok(()),
        Err(r) => {
            event.detail = Some(r.detail);
            Err(Answer::refused(
                Outcome::RbacDenied,
                Refusal::new(r.code, r.message),
            ))
        }
    }
}

/// Step 5: the policy's rules and scopes. The grant of the deciding allow rule.
fn policy(d: &Deployment, call: &Call, args: &Args, event: &mut AuditEvent) -> Step<Box<Allowed>> {
    let decision = d.engine.decide(&Request {
        op: &call.op,
        principal: &call.caller.principal,
        args,
    });
    let refusal = match decision {
        Decision::Allowed(grant) => {
            event.rule = Some(grant.rule.name.to_string());
            return Ok(grant);
        }
        Decision::NotMounted => {
            return Err(Answer::refused(Outcome::NotEnabled, not_enabled(&call.op)));
        }
        Decision::Denied { rule, code, reason } => {
            event.rule = Some(rule.name.to_string());
            Refusal::new(
                code,
                format!(
                    "{reason} (rule `{}`); call with other arguments, or change that rule",
                    rule.name
                ),
            )
        }
        Decision::NotPermitted { candidates } => match candidates.first() {
            Some(c) => {
                event.rule = Some(c.rule.name.to_string());
                // A deny pattern or a protected location is not something to widen past.
                let fix = if c.code == codes::POLICY_PATH_DENIED {
                    "call with another path: a deny pattern or a protected location wins over \
                     every allow"
                } else {
                    "call inside the rule's scope, or widen it"
                };
                Refusal::new(
                    c.code,
                    format!("{} (closest rule `{}`); {fix}", c.clause, c.rule.name),
                )
            }
            None => Refusal::new(
                codes::POLICY_NOT_PERMITTED,
                "no allow rule admits these arguments",
            ),
        },
    };
    Err(Answer::refused(Outcome::Denied, refusal))
}

/// The action a call of a guarded op raises (or finds, by its key: the tenant, the requester's
/// full identity, the op, its version and the canonical arguments). Its arguments are bounded
/// before anything is stored or looked up: no action can hold more.
fn pending_action(d: &Deployment, call: &Call, spec: &OpSpec, tenant: &str) -> Step<Action> {
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
        "tenant": tenant,
        "requester": identity,
        "op": call.op,
        "op_version": op_version,
        "args": args,
    }));
    let args_canonical = canonical(&args);
    if args_canonical.len() > MAX_ACTION_ARGS_BYTES {
        return Err(Answer::refused(
            Outcome::Limited,
            Refusal::new(
                codes::CONFIRMATION_ARGS_TOO_LARGE,
                format!(
                    "the arguments of this `{}` call are {} bytes as canonical JSON, over the {} bytes (64 KiB) a pending action may hold for a person to review; call with smaller arguments (put large content in a file and pass its path)",
                    call.op,
                    args_canonical.len(),
                    MAX_ACTION_ARGS_BYTES
                ),
            ),
        ));
    }
    let now = now_ms();
    let ttl_ms = i64::try_from(d.guard.confirmation_ttl.as_millis()).unwrap_or(i64::MAX);
    Ok(Action {
        action_id: uuid::Uuid::new_v4().to_string(),
        key,
        tenant: tenant.to_owned(),
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
    })
}

/// The bytes of an answer, as a run's output budget counts them.
fn output_bytes(reply: &Reply) -> u64 {
    match reply {
        Reply::Json(v) => serde_json::to_vec(v).map_or(0, |b| b.len() as u64),
        Reply::Stream(s) => s.len,
        Reply::Refused(_) => 0,
    }
}

/// `403 confirmation.denied`: who denied this exact call, and when it may be asked again.
fn denied(a: &Action) -> Refusal {
    Refusal::new(
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
    )
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
                status: codes::status(codes::CONFIRMATION_NOT_REPLAYABLE),
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

/// The outcome of an approved call whose runner died before storing its own: it may have partly
/// run, so it is never run again.
fn cut_off(a: &Action) -> StoredOutcome {
    StoredOutcome::Refused {
        status: codes::status(codes::CONFIRMATION_NOT_REPLAYABLE),
        code: codes::CONFIRMATION_NOT_REPLAYABLE.to_owned(),
        message: format!(
            "the approved call to `{}` (action {}) was cut off while it ran: the server running it stopped (a crash, a kill or a lost host) before storing its outcome, so it may have partly run; check its effects, then call again after the action expires",
            a.op, a.action_id
        ),
    }
}

/// Renews a running action's lease every third of [`RUNNING_LEASE_MS`] until dropped (when the
/// op's outcome is stored, or the request is dropped).
struct Lease(tokio::task::JoinHandle<()>);

impl Lease {
    fn keep(store: Arc<dyn ConfirmationStore>, action_id: String) -> Self {
        Self(tokio::spawn(async move {
            let every = Duration::from_millis(u64::try_from(RUNNING_LEASE_MS / 3).unwrap_or(5000));
            let mut pause = every;
            loop {
                tokio::time::sleep(pause).await;
                match store
                    .renew(&action_id, now_ms().saturating_add(RUNNING_LEASE_MS))
                    .await
                {
                    Ok(true) => pause = every,
                    Ok(false) => return,
                    // Tried again within a second: a store that failed a renew or two must not
                    // let the lease of a live runner run out.
                    Err(e) => {
                        tracing::warn!(action_id = %action_id, error = %e, "a running action's lease could not be renewed");
                        pause = Duration::from_secs(1);
                    }
                }
            }
        }))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How long a retry waits for the outcome of an approved call another request is running.
const OUTCOME_WAIT_MS: i64 = 120_000;

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

fn store_failed(e: &ConfirmationError, request_id: &str) -> Answer {
    tracing::error!(request_id, error = %e, "confirmation store failed");
    Answer::refused(
        Outcome::OpError,
        Refusal::new(
            codes::STORE_QUERY_FAILED,
            format!("the confirmation store failed, so nothing ran (request {request_id}); retry"),
        ),
    )
}

/// The stored outcome of an approved call that already ran.
fn replay(a: &Action) -> Answer {
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
    Answer::of(Outcome::Replayed, reply)
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

/// For `http.fetch` and `http.download` redirects: decide the same call again with the new url
/// (and the method it is followed with), so every hop passes the same rules and scopes as the
/// first; a hop another rule decides is refused, since the call has the limits and the
/// confirmation of its own rule (`rule`), never that one's.
fn url_check(
    d: Arc<Deployment>,
    op: String,
    principal: Principal,
    args: Args,
    rule: corral_policy::RuleRef,
) -> corral_ops::http::UrlCheck {
    Arc::new(move |url: &str, method: &str| {
        let args = args
            .clone()
            .with("url", ArgValue::Str(url.to_owned()))
            .with("method", ArgValue::Str(method.to_owned()));
        match d.engine.decide(&Request {
            op: &op,
            principal: &principal,
            args: &args,
        }) {
            Decision::Allowed(a) if a.rule.index != rule.index => Err(OpError::new(
                codes::POLICY_URL_NOT_ALLOWED,
                format!(
                    "redirect to `{url}` is allowed by rule `{}`, not by `{}` that allowed this call (whose limits and confirmation the call has); call `{url}` directly",
                    a.rule.name, rule.name
                ),
            )),
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
fn run_store_failed(e: &RunStoreError) -> Answer {
    tracing::error!(error = %e, "the run store failed; refusing the call");
    Answer::refused(
        Outcome::OpError,
        Refusal::new(
            codes::STORE_QUERY_FAILED,
            "the run's budgets cannot be checked right now (the store failed); retry",
        ),
    )
}
