//! `explain`: what the guard chain would answer to one call, without running it or writing
//! anything: the steps in the gateway's order (autonomy, RBAC, the policy with every rule
//! considered, confirmation as a dry-run), with the guard's own checks
//! (`GuardPolicy::check_autonomy`, `check_role`, `confirmation_step`). A pure decision over a
//! deployment's engine and guard settings (it reads the file system only to resolve a granted
//! path, as the file op will); `corral explain` and the console's `/ui/explain` both show it.

use serde::Serialize;

use corral_policy::{
    Args, AutonomyLevel, Decision, Engine, Explanation, OpSpec, Principal, Request, TraceOutcome,
};

use crate::guardrails::{Confirmation, GuardPolicy, tier_reason};

/// One call to explain.
#[derive(Debug, Clone, Copy)]
pub struct Query<'a> {
    /// The compiled policy (and its catalog).
    pub engine: &'a Engine,
    /// Autonomy, RBAC, mode and confirmation settings.
    pub guard: &'a GuardPolicy,
    /// Who calls.
    pub principal: &'a Principal,
    /// The op id, as the caller would send it.
    pub op: &'a str,
    /// The arguments, already checked against the op's params by the caller.
    pub args: &'a Args,
    /// The level a run lowered itself to (`X-Corral-Autonomy`), if any.
    pub run_level: Option<AutonomyLevel>,
    /// Whether the call would be a dry-run (`X-Corral-Dry-Run: true`).
    pub dry_run: bool,
}

/// Explains `q`: the decision, its rule, each guard step, the policy's trace, and whether the
/// call would be allowed (`Explained::allowed`).
pub fn explain(q: &Query<'_>) -> Explained {
    let spec = q.engine.catalog().get(q.op);
    let explanation = q.engine.explain(&Request {
        op: q.op,
        principal: q.principal,
        args: q.args,
    });
    let mut out = to_out(q.op, q.principal, &explanation);
    if let Decision::Allowed(a) = &explanation.decision
        && let Some(spec) = spec
    {
        resolved_steps(spec, a, &mut out);
    }
    // A resolved path the file op would refuse (issue 11 item 9) refuses here too.
    let mut allowed = explanation.decision.is_allowed() && out.decision != "denied";
    // The gateway's order: an op the caller cannot see is a 404 before any guard step.
    if let Some(spec) = spec
        && !matches!(explanation.decision, Decision::NotMounted)
    {
        allowed &= guard_steps(
            q.guard,
            spec,
            q.principal,
            q.dry_run,
            q.run_level,
            &explanation,
            &mut out,
        );
    }
    out.allowed = allowed;
    out
}

/// One rule of the policy's trace.
#[derive(Debug, Clone, Serialize)]
pub struct TraceOut {
    /// The rule's position in the policy (`usize::MAX` for a resolved-path step).
    pub index: usize,
    /// The rule's name.
    pub rule: String,
    /// `allow` or `deny`.
    pub effect: &'static str,
    /// What the rule did with the call (`decided`, `op_not_selected`, ...).
    pub outcome: &'static str,
    /// Why, when there is more to say.
    pub detail: String,
}

/// An allow rule that came closest to admitting a call it did not.
#[derive(Debug, Clone, Serialize)]
pub struct CandidateOut {
    /// The rule's name.
    pub rule: String,
    /// The code its failed clause gives.
    pub code: &'static str,
    /// The clause the arguments did not meet.
    pub clause: String,
}

/// One guard step as `explain` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct StepOut {
    /// `autonomy`, `rbac`, `policy` or `confirmation`.
    pub step: &'static str,
    /// `passed`, `off`, `refused`, `not_reached`; for the policy its decision; for the
    /// confirmation one of `Confirmation::as_str`.
    pub outcome: &'static str,
    /// The code the step answers with, if it refuses (or asks for confirmation).
    pub code: Option<&'static str>,
    /// What the step found.
    pub detail: String,
}

/// What the guard chain would answer to one call (`corral explain --format json`'s shape).
/// `Default` is the empty answer the builders fill in.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Explained {
    /// The op id asked about.
    pub op: String,
    /// The caller's id.
    pub principal: String,
    /// The caller's roles.
    pub roles: Vec<String>,
    /// `allowed`, `refused` (by a guard step before the policy), or the policy's decision.
    pub decision: &'static str,
    /// The refusal's code, if refused.
    pub code: Option<&'static str>,
    /// The rule that decided (for `not_permitted`, none: see `candidates`).
    pub rule: Option<String>,
    /// Why it was refused.
    pub reason: Option<String>,
    /// For `not_permitted`: the allow rules that came closest.
    pub candidates: Vec<CandidateOut>,
    /// For `allowed`: each path argument, as the op would resolve it.
    pub paths: Vec<(String, String)>,
    /// For `allowed`: the command line that would run, if the op runs one.
    pub argv: Option<Vec<String>>,
    /// For `allowed`: the limits in force.
    pub limits: Option<String>,
    /// What the confirmation step would do with an allowed call.
    pub confirmation: Option<&'static str>,
    /// Each guard step, in the gateway's order.
    pub guard: Vec<StepOut>,
    /// The policy's trace, rule by rule.
    pub trace: Vec<TraceOut>,
    /// The policy's notes (and the caller's own, appended).
    pub notes: Vec<String>,
    /// Whether the call would be allowed (after confirmation, when `confirmation` is
    /// `required`).
    #[serde(skip)]
    pub allowed: bool,
}

fn outcome_text(o: &TraceOutcome) -> (&'static str, String) {
    match o {
        TraceOutcome::OpNotSelected(s) => ("op_not_selected", s.clone()),
        TraceOutcome::PrincipalNotMatched(s) => ("principal_not_matched", s.clone()),
        TraceOutcome::ScopeNotMatched { code, clause } => {
            ("scope_not_matched", format!("{clause} [{code}]"))
        }
        TraceOutcome::Decided => ("decided", String::new()),
        TraceOutcome::AlsoMatched => ("also_matched", String::new()),
        TraceOutcome::NotReached => ("not_reached", String::new()),
    }
}

fn to_out(op: &str, principal: &Principal, e: &Explanation) -> Explained {
    let mut out = Explained {
        op: op.to_owned(),
        principal: principal.id.clone(),
        roles: principal.roles.clone(),
        decision: e.decision.kind(),
        code: e.decision.code(),
        trace: e
            .trace
            .iter()
            .map(|t| {
                let (outcome, detail) = outcome_text(&t.outcome);
                TraceOut {
                    index: t.rule.index,
                    rule: t.rule.name.to_string(),
                    effect: t.effect.as_str(),
                    outcome,
                    detail,
                }
            })
            .collect(),
        notes: e.notes.clone(),
        ..Explained::default()
    };
    match &e.decision {
        Decision::Allowed(a) => {
            out.rule = Some(a.rule.name.to_string());
            out.paths = a
                .paths
                .iter()
                .map(|(n, p)| (n.clone(), p.absolute()))
                .collect();
            out.argv = a.command.as_ref().map(|c| c.argv.clone());
            out.limits = Some(a.limits.to_string());
        }
        Decision::Denied { rule, reason, .. } => {
            out.rule = Some(rule.name.to_string());
            out.reason = Some(reason.clone());
        }
        Decision::NotPermitted { candidates } => {
            out.candidates = candidates
                .iter()
                .map(|c| CandidateOut {
                    rule: c.rule.name.to_string(),
                    code: c.code,
                    clause: c.clause.clone(),
                })
                .collect();
        }
        Decision::NotMounted => {}
    }
    out
}

/// The guard steps before the policy (autonomy, then RBAC), as the gateway runs them: the
/// first refusal, if any, as (code, message); each step's line is pushed to `out.guard`.
fn steps_before_policy(
    g: &GuardPolicy,
    spec: &OpSpec,
    who: &Principal,
    run_level: Option<AutonomyLevel>,
    out: &mut Explained,
) -> Option<(&'static str, String)> {
    match g.check_autonomy(spec, who, run_level) {
        Err(r) => {
            out.guard.push(StepOut {
                step: "autonomy",
                outcome: "refused",
                code: Some(r.code),
                detail: r.message.clone(),
            });
            out.guard.push(StepOut {
                step: "rbac",
                outcome: "not_reached",
                code: None,
                detail: String::new(),
            });
            return Some((r.code, r.message));
        }
        Ok(level) => out.guard.push(StepOut {
            step: "autonomy",
            outcome: if level.is_some() { "passed" } else { "off" },
            code: None,
            detail: level.map_or_else(
                || "no autonomy level applies to this caller".to_owned(),
                |(l, source)| format!("{source} is {l}, which lets {} run", l.describe()),
            ),
        }),
    }
    match g.check_role(spec, who) {
        Err(r) => {
            out.guard.push(StepOut {
                step: "rbac",
                outcome: "refused",
                code: Some(r.code),
                detail: r.message.clone(),
            });
            Some((r.code, r.message))
        }
        Ok(need) => {
            out.guard.push(StepOut {
                step: "rbac",
                outcome: if need.is_some() { "passed" } else { "off" },
                code: None,
                detail: need.map_or_else(
                    || {
                        "RBAC by tier is off: no principal of this config can carry a tier role"
                            .to_owned()
                    },
                    |n| format!("`{}` needs the role `{n}`", spec.id),
                ),
            });
            None
        }
    }
}

/// The confirmation step's line for a call the policy allowed.
fn confirmation_line(c: Confirmation, spec: &OpSpec, rule: &str) -> StepOut {
    let detail = match c {
        Confirmation::NotGuarded => "a read-tier op: nobody is asked".to_owned(),
        Confirmation::DryRun => format!(
            "dry-run: the call would answer `dry_run` and never run ({} tier)",
            spec.tier()
        ),
        Confirmation::Waived => format!(
            "rule `{rule}` says `confirm: never`: the confirm-tier call runs without a person's approval"
        ),
        Confirmation::Required => format!(
            "would need confirmation: the call answers 202 `confirmation.required` and runs once its requester approves it (`corral confirm`); {} tier: {}",
            spec.tier(),
            tier_reason(spec)
        ),
    };
    StepOut {
        step: "confirmation",
        outcome: c.as_str(),
        code: (c == Confirmation::Required).then_some(corral_policy::codes::CONFIRMATION_REQUIRED),
        detail,
    }
}

/// The guard steps around the policy, in the gateway's order, pushed to `out.guard`: autonomy
/// and RBAC (a refusal there makes the answer `refused`), the policy's decision, then the
/// confirmation step of an allowed call. Returns whether the call stays allowed.
fn guard_steps(
    guard: &GuardPolicy,
    spec: &OpSpec,
    who: &Principal,
    dry_run: bool,
    run_level: Option<AutonomyLevel>,
    explanation: &Explanation,
    out: &mut Explained,
) -> bool {
    if let Some((code, message)) = steps_before_policy(guard, spec, who, run_level, out) {
        out.decision = "refused";
        out.code = Some(code);
        out.reason = Some(message);
        out.rule = None;
        for step in ["policy", "confirmation"] {
            out.guard.push(StepOut {
                step,
                outcome: "not_reached",
                code: None,
                detail: String::new(),
            });
        }
        return false;
    }
    out.guard.push(StepOut {
        step: "policy",
        outcome: explanation.decision.kind(),
        code: explanation.decision.code(),
        detail: out
            .rule
            .clone()
            .map(|r| format!("rule `{r}`"))
            .unwrap_or_default(),
    });
    match &explanation.decision {
        Decision::Allowed(grant) => {
            let c = guard.confirmation_step(spec, grant.rule.index, dry_run);
            out.confirmation = Some(c.as_str());
            out.guard
                .push(confirmation_line(c, spec, grant.rule.name.as_ref()));
        }
        Decision::Denied { .. } | Decision::NotPermitted { .. } | Decision::NotMounted => {
            out.guard.push(StepOut {
                step: "confirmation",
                outcome: "not_reached",
                code: None,
                detail: String::new(),
            });
        }
    }
    true
}

/// For each granted path that exists on disk: resolves it (as the file op will, following
/// symlinks) and re-checks the resolved path against the protected locations, deny patterns
/// and deny rules, with a trace step saying where it leads and what was found (issue 11 item
/// 9). A refusal turns the answer into the one the op would give.
fn resolved_steps(spec: &OpSpec, a: &corral_policy::Allowed, out: &mut Explained) {
    let access = if spec.effective_effects().mutates_files() {
        corral_policy::protect::Access::Change
    } else {
        corral_policy::protect::Access::Read
    };
    for (name, jp) in &a.paths {
        let shown = jp.absolute();
        // A new file: its parent resolved, plus its name.
        let real = std::fs::canonicalize(&shown).or_else(|e| {
            let p = std::path::Path::new(&shown);
            match (p.parent(), p.file_name()) {
                (Some(parent), Some(file)) if std::fs::symlink_metadata(p).is_err() => {
                    std::fs::canonicalize(parent).map(|r| r.join(file))
                }
                _ => Err(e),
            }
        });
        let Ok(real) = real else {
            continue;
        };
        let real_s = real.to_string_lossy().into_owned();
        let real_root = std::fs::canonicalize(jp.root()).ok();
        let forms = corral_policy::resolved::resolved_forms(&real, real_root.as_deref(), jp.root());
        let form_refs: Vec<&str> = forms.iter().map(String::as_str).collect();
        let (outcome, detail) = match a.resolved.check(&shown, &form_refs, access) {
            Ok(()) => (
                "not_matched",
                format!(
                    "`{name}` = `{shown}` resolves to `{real_s}`: no protected location, deny pattern or deny rule covers it"
                ),
            ),
            Err(r) => {
                out.decision = "denied";
                out.code = Some(r.code);
                out.rule = Some("resolved path".to_owned());
                out.reason = Some(r.message.clone());
                out.paths.clear();
                out.argv = None;
                out.limits = None;
                ("decided", format!("{} [{}]", r.message, r.code))
            }
        };
        out.trace.push(TraceOut {
            index: usize::MAX,
            rule: format!("resolved path of `{name}`"),
            effect: "deny",
            outcome,
            detail,
        });
        if out.decision == "denied" {
            return;
        }
    }
}
