//! `corral explain`: decide one call offline, through the guard steps in the gateway's order
//! (autonomy, RBAC, the policy with every rule considered, confirmation as a dry-run), with the
//! guard's own checks (`GuardPolicy::check_autonomy`, `check_role`, `confirmation_step`).

use std::path::PathBuf;

use serde::Serialize;

use corral_guard::guardrails::{Confirmation, GuardPolicy, tier_reason};
use corral_policy::{
    ArgValue, Args as PolicyArgs, AutonomyLevel, Decision, Explanation, OpSpec, ParamKind,
    Principal, PrincipalKind, Request, TraceOutcome, validate_args,
};

use crate::context;
use crate::output::print_json;
use crate::{CliError, CliResult, Exit, Format};

#[derive(Serialize)]
struct TraceOut {
    index: usize,
    rule: String,
    effect: &'static str,
    outcome: &'static str,
    detail: String,
}

#[derive(Serialize)]
struct CandidateOut {
    rule: String,
    code: &'static str,
    clause: String,
}

/// One guard step as `explain` shows it.
#[derive(Serialize)]
struct StepOut {
    /// `autonomy`, `rbac`, `policy` or `confirmation`.
    step: &'static str,
    /// `passed`, `off`, `refused`, `not_reached`; for the policy its decision; for the
    /// confirmation one of `Confirmation::as_str`.
    outcome: &'static str,
    code: Option<&'static str>,
    detail: String,
}

/// The flags of `corral explain`.
#[derive(Debug)]
pub struct Args {
    pub config: Option<PathBuf>,
    pub op: String,
    pub args: Vec<String>,
    pub principal: Option<String>,
    pub roles: Vec<String>,
    pub kind: Option<String>,
    pub token_env: Option<String>,
    pub autonomy: Option<String>,
    pub dry_run: bool,
    pub format: Format,
}

#[derive(Serialize)]
struct ExplainOut {
    op: String,
    principal: String,
    roles: Vec<String>,
    /// `allowed`, `refused` (by a guard step before the policy), or the policy's decision.
    decision: &'static str,
    code: Option<&'static str>,
    rule: Option<String>,
    reason: Option<String>,
    candidates: Vec<CandidateOut>,
    paths: Vec<(String, String)>,
    argv: Option<Vec<String>>,
    limits: Option<String>,
    /// What the confirmation step would do with an allowed call.
    confirmation: Option<&'static str>,
    guard: Vec<StepOut>,
    trace: Vec<TraceOut>,
    notes: Vec<String>,
}

fn parse_arg(spec: Option<&OpSpec>, raw: &str) -> Result<(String, ArgValue), String> {
    let Some((name, value)) = raw.split_once('=') else {
        return Err(format!("`--arg {raw}` is not `name=value`"));
    };
    let kind = spec.and_then(|s| s.params.iter().find(|p| p.name == name).map(|p| &p.kind));
    let v = match kind {
        Some(ParamKind::Argv) => {
            if value.trim_start().starts_with('[') {
                serde_json::from_str::<Vec<String>>(value)
                    .map(ArgValue::List)
                    .map_err(|e| format!("`{name}` is not a JSON list of strings: {e}"))?
            } else {
                ArgValue::List(
                    shlex::split(value).ok_or_else(|| format!("`{name}` has unbalanced quotes"))?,
                )
            }
        }
        Some(ParamKind::Int) => ArgValue::Int(
            value
                .parse()
                .map_err(|_| format!("`{name}` must be an integer"))?,
        ),
        Some(ParamKind::Bool) => match value {
            "true" => ArgValue::Bool(true),
            "false" => ArgValue::Bool(false),
            _ => return Err(format!("`{name}` must be `true` or `false`")),
        },
        Some(_) | None => ArgValue::Str(value.to_owned()),
    };
    Ok((name.to_owned(), v))
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

fn to_out(op: &str, principal: &Principal, e: &Explanation) -> ExplainOut {
    let mut out = ExplainOut {
        op: op.to_owned(),
        principal: principal.id.clone(),
        roles: principal.roles.clone(),
        decision: e.decision.kind(),
        code: e.decision.code(),
        rule: None,
        reason: None,
        candidates: Vec::new(),
        paths: Vec::new(),
        argv: None,
        limits: None,
        confirmation: None,
        guard: Vec::new(),
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

fn print_human(o: &ExplainOut) {
    let head = match o.decision {
        "allowed" => format!(
            "ALLOWED by rule `{}`{}",
            o.rule.clone().unwrap_or_default(),
            match o.confirmation {
                Some("required") => "; would need confirmation: a person approves it first",
                Some("dry_run") => "; dry-run: it would be described, never run",
                _ => "",
            }
        ),
        "refused" => format!(
            "REFUSED [{}]: {}",
            o.code.unwrap_or(""),
            o.reason.clone().unwrap_or_default()
        ),
        "denied" => format!(
            "DENIED [{}] by rule `{}`: {}",
            o.code.unwrap_or(""),
            o.rule.clone().unwrap_or_default(),
            o.reason.clone().unwrap_or_default()
        ),
        "not_permitted" => format!(
            "NOT PERMITTED [{}]: no allow rule admits these arguments",
            o.code.unwrap_or("")
        ),
        _ => format!(
            "NOT MOUNTED [op.not_enabled]: `{}` is not enabled for `{}` (a caller sees 404, as for an unknown op)",
            o.op, o.principal
        ),
    };
    outln!("{head}");
    let roles = if o.roles.is_empty() {
        "(none)".to_owned()
    } else {
        o.roles.join(", ")
    };
    outln!(
        "  op: {}   principal: {}   roles: {roles}",
        o.op,
        o.principal
    );
    for (n, p) in &o.paths {
        outln!("  {n}: {p}");
    }
    if let Some(argv) = &o.argv {
        outln!("  argv: {}", argv.join(" "));
    }
    if let Some(l) = &o.limits {
        outln!("  limits: {l}");
    }
    for c in &o.candidates {
        outln!("  closest rule `{}`: {} [{}]", c.rule, c.clause, c.code);
    }
    for n in &o.notes {
        outln!("  note: {n}");
    }
    outln!("guard:");
    for g in &o.guard {
        let code = g.code.map(|c| format!(" [{c}]")).unwrap_or_default();
        let detail = if g.detail.is_empty() {
            String::new()
        } else {
            format!(": {}", g.detail)
        };
        outln!("  {} {}{code}{detail}", g.step, g.outcome.replace('_', " "));
    }
    outln!("trace:");
    for t in &o.trace {
        let idx = if t.index == usize::MAX {
            "-".to_owned()
        } else {
            t.index.to_string()
        };
        let detail = if t.detail.is_empty() {
            String::new()
        } else {
            format!(": {}", t.detail)
        };
        outln!("  [{idx}] {} `{}` {}{detail}", t.effect, t.rule, t.outcome);
    }
}

/// The principal `explain` decides for: a token's (`--token-env`, or `--principal` alone), an
/// ad-hoc one (`--principal` with `--role`, or `--role` alone), or the anonymous caller.
fn principal(a: &Args, loaded: &corral_config::Loaded) -> Result<Principal, CliError> {
    if let Some(name) = &a.token_env {
        let token = std::env::var(name)
            .ok()
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| {
                CliError::usage(format!(
                    "`--token-env {name}`: the variable is not set, or empty"
                ))
            })?;
        return context::token_caller(loaded, name, &token).map(|c| c.principal);
    }
    let kind = match &a.kind {
        None => PrincipalKind::Human,
        Some(k) => PrincipalKind::parse(k).ok_or_else(|| {
            CliError::usage(format!(
                "`--kind {k}` is not a principal kind; use human, delegated or service"
            ))
        })?,
    };
    let roles: Vec<&str> = a.roles.iter().map(String::as_str).collect();
    match (&a.principal, roles.is_empty()) {
        (Some(id), false) => Ok(Principal::new(id, &roles).with_kind(kind)),
        (Some(id), true) => match loaded.tokens.iter().find(|t| &t.principal.id == id) {
            Some(t) => Ok(t.principal.clone()),
            None => {
                let ids: Vec<&str> = loaded
                    .tokens
                    .iter()
                    .map(|t| t.principal.id.as_str())
                    .collect();
                let near = corral_policy::suggest::closest(id, ids.iter().copied());
                Err(CliError::usage(format!(
                    "no token has the id `{id}` (`--principal`); {}; or add `--role ROLE` to explain a principal with this id and those roles",
                    near.first().map_or_else(
                        || format!(
                            "the token ids are: {}",
                            if ids.is_empty() {
                                "(none)".to_owned()
                            } else {
                                ids.join(", ")
                            }
                        ),
                        |n| format!("did you mean `{n}`?")
                    )
                )))
            }
        },
        (None, false) => {
            Ok(Principal::new(&format!("role:{}", roles.join("+")), &roles).with_kind(kind))
        }
        (None, true) => Ok(Principal::anonymous()),
    }
}

/// The guard steps before the policy (autonomy, then RBAC), as the gateway runs them: the
/// first refusal, if any, as (code, message); each step's line is pushed to `out.guard`.
fn steps_before_policy(
    g: &GuardPolicy,
    spec: &OpSpec,
    who: &Principal,
    run_level: Option<AutonomyLevel>,
    out: &mut ExplainOut,
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

/// `--autonomy`, parsed.
fn run_level(a: &Args) -> Result<Option<AutonomyLevel>, CliError> {
    a.autonomy
        .as_deref()
        .map(|l| {
            AutonomyLevel::parse(l).ok_or_else(|| {
                CliError::usage(format!("`--autonomy {l}` is not a level; use L0 to L4"))
            })
        })
        .transpose()
}

/// The `--arg name=value` pairs, typed by the op's params when the op is known.
fn policy_args(spec: Option<&OpSpec>, raw: &[String]) -> Result<PolicyArgs, CliError> {
    let mut args = PolicyArgs::new();
    for r in raw {
        let (k, v) = parse_arg(spec, r).map_err(CliError::usage)?;
        args = args.with(&k, v);
    }
    Ok(args)
}

/// The guard steps around the policy, in the gateway's order, pushed to `out.guard`: autonomy
/// and RBAC (a refusal there makes the answer `refused`), the policy's decision, then the
/// confirmation step of an allowed call. Returns whether the call stays allowed.
fn guard_steps(
    guard: &GuardPolicy,
    spec: &OpSpec,
    who: &Principal,
    a: &Args,
    run_level: Option<AutonomyLevel>,
    explanation: &Explanation,
    out: &mut ExplainOut,
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
            let c = guard.confirmation_step(spec, grant.rule.index, a.dry_run);
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

/// Runs `corral explain`: exit 0 when the call would be allowed, 1 when a step would refuse it.
pub fn run(a: Args) -> CliResult {
    let format = a.format;
    let loaded = context::load(a.config.clone())?;
    let who = principal(&a, &loaded)?;
    let run_level = run_level(&a)?;
    let op = a.op.as_str();
    let spec = loaded.catalog.get(op);
    let near = corral_policy::suggest::closest(op, loaded.catalog.ids());
    let args = policy_args(spec, &a.args)?;
    if let Some(spec) = spec
        && let Err(e) = validate_args(spec, &args)
    {
        match format {
            Format::Json => print_json(&serde_json::json!({
                "op": op, "decision": "invalid_args", "code": e.code, "param": e.param, "message": e.message,
            })),
            Format::Human => outln!("INVALID ARGUMENTS [{}]: {}", e.code, e.message),
        }
        return Ok(Exit::Findings);
    }
    let engine = loaded.engine();
    let explanation = engine.explain(&Request {
        op,
        principal: &who,
        args: &args,
    });
    let mut out = to_out(op, &who, &explanation);
    if let Decision::Allowed(a) = &explanation.decision
        && let Some(spec) = spec
    {
        resolved_steps(spec, a, &mut out);
    }
    if spec.is_none()
        && let Some(n) = near.first()
    {
        out.notes.push(format!("did you mean `{n}`?"));
    }
    let guard = corral_runtime::compose::guard_settings(&loaded);
    if let Some(cause) = loaded.rbac_cause() {
        out.notes.push(format!(
            "RBAC by tier is on: {cause}; every caller needs a tier role"
        ));
    }
    // A resolved path the file op would refuse (issue 11 item 9) refuses here too.
    let mut allowed = explanation.decision.is_allowed() && out.decision != "denied";
    // The gateway's order: an op the caller cannot see is a 404 before any guard step.
    if let Some(spec) = spec
        && !matches!(explanation.decision, Decision::NotMounted)
    {
        allowed &= guard_steps(&guard, spec, &who, &a, run_level, &explanation, &mut out);
    }
    match format {
        Format::Json => print_json(&out),
        Format::Human => print_human(&out),
    }
    Ok(if allowed { Exit::Ok } else { Exit::Findings })
}

/// For each granted path that exists on disk: resolves it (as the file op will, following
/// symlinks) and re-checks the resolved path against the protected locations, deny patterns
/// and deny rules, with a trace step saying where it leads and what was found (issue 11 item
/// 9). A refusal turns the answer into the one the op would give.
fn resolved_steps(spec: &OpSpec, a: &corral_policy::Allowed, out: &mut ExplainOut) {
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
