//! `corral explain`: decide one call offline and show every rule considered.

use std::path::PathBuf;

use serde::Serialize;

use corral_policy::{
    ArgValue, Args, Decision, Explanation, OpSpec, ParamKind, Principal, Request, TraceOutcome,
    validate_args,
};

use crate::output::print_json;
use crate::{Exit, Format};

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

#[derive(Serialize)]
struct ExplainOut {
    op: String,
    principal: String,
    decision: &'static str,
    code: Option<&'static str>,
    rule: Option<String>,
    reason: Option<String>,
    candidates: Vec<CandidateOut>,
    paths: Vec<(String, String)>,
    argv: Option<Vec<String>>,
    limits: Option<String>,
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
        decision: e.decision.kind(),
        code: e.decision.code(),
        rule: None,
        reason: None,
        candidates: Vec::new(),
        paths: Vec::new(),
        argv: None,
        limits: None,
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
        "allowed" => format!("ALLOWED by rule `{}`", o.rule.clone().unwrap_or_default()),
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
    println!("{head}");
    println!("  op: {}   principal: {}", o.op, o.principal);
    for (n, p) in &o.paths {
        println!("  {n}: {p}");
    }
    if let Some(argv) = &o.argv {
        println!("  argv: {}", argv.join(" "));
    }
    if let Some(l) = &o.limits {
        println!("  limits: {l}");
    }
    for c in &o.candidates {
        println!("  closest rule `{}`: {} [{}]", c.rule, c.clause, c.code);
    }
    for n in &o.notes {
        println!("  note: {n}");
    }
    println!("trace:");
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
        println!("  [{idx}] {} `{}` {}{detail}", t.effect, t.rule, t.outcome);
    }
}

pub fn run(
    config: Option<PathBuf>,
    op: &str,
    raw_args: &[String],
    principal: Option<String>,
    role: Option<String>,
    format: Format,
) -> Exit {
    let path = super::config_path(config);
    let loaded = match super::load(&path) {
        Ok(l) => l,
        Err(e) => {
            eprint!("{}", e.render());
            return Exit::Error;
        }
    };
    let who = match (principal, role) {
        (Some(id), _) => match loaded.tokens.iter().find(|t| t.principal.id == id) {
            Some(t) => t.principal.clone(),
            None => {
                let ids: Vec<&str> = loaded
                    .tokens
                    .iter()
                    .map(|t| t.principal.id.as_str())
                    .collect();
                let near = corral_policy::suggest::closest(&id, ids.iter().copied());
                eprintln!(
                    "error: no token has the id `{id}` (`--principal`); {}",
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
                );
                return Exit::Error;
            }
        },
        (None, Some(r)) => Principal::new(&format!("role:{r}"), &[r.as_str()]),
        (None, None) => Principal::anonymous(),
    };
    let spec = loaded.catalog.get(op);
    let near = corral_policy::suggest::closest(op, loaded.catalog.ids());
    let mut args = Args::new();
    for raw in raw_args {
        match parse_arg(spec, raw) {
            Ok((k, v)) => {
                args = args.with(&k, v);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return Exit::Error;
            }
        }
    }
    if let Some(spec) = spec
        && let Err(e) = validate_args(spec, &args)
    {
        match format {
            Format::Json => print_json(&serde_json::json!({
                "op": op, "decision": "invalid_args", "code": e.code, "param": e.param, "message": e.message,
            })),
            Format::Human => println!("INVALID ARGUMENTS [{}]: {}", e.code, e.message),
        }
        return Exit::Findings;
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
    match format {
        Format::Json => print_json(&out),
        Format::Human => print_human(&out),
    }
    if out.decision == "allowed" {
        Exit::Ok
    } else {
        Exit::Findings
    }
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
        let mut forms = vec![real_s.clone()];
        if let Ok(real_root) = std::fs::canonicalize(jp.root())
            && let Ok(rest) = real.strip_prefix(&real_root)
        {
            let rest = rest.to_string_lossy();
            let anchored = if rest.is_empty() {
                jp.root().to_owned()
            } else {
                format!("{}/{rest}", jp.root().trim_end_matches('/'))
            };
            if !forms.contains(&anchored) {
                forms.push(anchored);
            }
        }
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
