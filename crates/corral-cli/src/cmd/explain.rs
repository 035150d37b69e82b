//! `corral explain`: decide one call offline, through the guard steps in the gateway's order
//! (autonomy, RBAC, the policy with every rule considered, confirmation as a dry-run): the
//! decision is `corral_guard::explain` (the console's `/ui/explain` shows the same); this
//! module reads the flags, picks the principal, and prints it.

use std::path::PathBuf;

use corral_guard::explain::{Explained, Query, explain};
use corral_policy::{
    ArgValue, Args as PolicyArgs, AutonomyLevel, OpSpec, ParamKind, Principal, PrincipalKind,
    validate_args,
};

use crate::context;
use crate::output::print_json;
use crate::{CliError, CliResult, Exit, Format};

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

fn print_human(o: &Explained) {
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
    let guard = corral_runtime::compose::guard_settings(&loaded);
    let mut out = explain(&Query {
        engine: &engine,
        guard: &guard,
        principal: &who,
        op,
        args: &args,
        run_level,
        dry_run: a.dry_run,
    });
    if spec.is_none()
        && let Some(n) = near.first()
    {
        out.notes.push(format!("did you mean `{n}`?"));
    }
    if let Some(cause) = loaded.rbac_cause() {
        out.notes.push(format!(
            "RBAC by tier is on: {cause}; every caller needs a tier role"
        ));
    }
    match format {
        Format::Json => print_json(&out),
        Format::Human => print_human(&out),
    }
    Ok(if out.allowed {
        Exit::Ok
    } else {
        Exit::Findings
    })
}
