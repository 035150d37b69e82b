//! `corral describe`: the op catalog; with `--effective`, what the policy mounts for whom.

use std::path::PathBuf;

use serde::Serialize;

use corral_policy::{Catalog, Engine, OpSpec, Principal, RuleEffect};

use crate::context;
use crate::output::print_json;
use crate::{CliResult, Exit, Format};

#[derive(Serialize)]
struct OpOut {
    id: String,
    effects: Vec<&'static str>,
    tier: &'static str,
    safety: &'static str,
    explicit_only: bool,
    params: Vec<ParamOut>,
    summary: String,
}

#[derive(Serialize)]
struct ParamOut {
    name: String,
    r#type: &'static str,
    required: bool,
}

#[derive(Serialize)]
struct MountOut {
    id: String,
    tier: &'static str,
    rule: String,
    scopes: String,
}

#[derive(Serialize)]
struct PrincipalOut {
    principal: String,
    roles: Vec<String>,
    kind: &'static str,
    authenticated: bool,
    ops: Vec<MountOut>,
}

fn op_out(op: &OpSpec) -> OpOut {
    OpOut {
        id: op.id.to_string(),
        effects: op.effective_effects().iter().map(|e| e.as_str()).collect(),
        tier: op.tier().as_str(),
        safety: op.safety().as_str(),
        explicit_only: op.explicit_only,
        params: op
            .params
            .iter()
            .map(|p| ParamOut {
                name: p.name.clone(),
                r#type: p.kind.name(),
                required: p.required,
            })
            .collect(),
        summary: op.summary.clone(),
    }
}

fn scopes_text(engine: &Engine, op: &OpSpec, p: &Principal) -> (String, String) {
    let rule = engine
        .policy()
        .rules
        .iter()
        .find(|r| r.effect == RuleEffect::Allow && r.reaches_principal(p) && r.mounts(op));
    let Some(r) = rule else {
        return ("implicit:core.health".to_owned(), String::new());
    };
    let mut parts = Vec::new();
    if let Some(s) = &r.paths {
        let s = s.spec();
        parts.push(format!(
            "paths [{}]{}",
            s.roots.join(", "),
            if s.readonly { " read-only" } else { "" }
        ));
    }
    if let Some(c) = &r.commands {
        parts.push(format!("commands [{}]", c.spec().allow.join(", ")));
    }
    if let Some(u) = &r.urls {
        parts.push(format!("urls [{}]", u.spec().hosts.join(", ")));
    }
    if let Some(a) = &r.agents {
        parts.push(format!(
            "agents workdir {} {}",
            a.spec().workdir,
            a.permissions()
        ));
    }
    (r.name.to_string(), parts.join("; "))
}

/// Runs `corral describe`: the catalog, or with `effective` what each caller may call.
pub fn run(config: Option<PathBuf>, effective: bool, format: Format) -> CliResult {
    let loaded = context::load_if_any(config, effective)?;
    let catalog = loaded
        .as_ref()
        .map_or_else(Catalog::builtin, |l| l.catalog.clone());
    if !effective {
        let ops: Vec<OpOut> = catalog.iter().map(op_out).collect();
        match format {
            Format::Json => print_json(&ops),
            Format::Human => {
                outln!(
                    "{:<20} {:<14} {:<12} {:<7} PARAMS",
                    "OP",
                    "EFFECTS",
                    "TIER",
                    "SAFETY"
                );
                for o in &ops {
                    let params: Vec<String> = o
                        .params
                        .iter()
                        .map(|p| {
                            format!(
                                "{}: {}{}",
                                p.name,
                                p.r#type,
                                if p.required { "" } else { "?" }
                            )
                        })
                        .collect();
                    outln!(
                        "{:<20} {:<14} {:<12} {:<7} {}{}",
                        o.id,
                        o.effects.join(","),
                        o.tier,
                        o.safety,
                        params.join(", "),
                        if o.explicit_only {
                            "  [explicit-only]"
                        } else {
                            ""
                        }
                    );
                }
            }
        }
        return Ok(Exit::Ok);
    }
    let Some(loaded) = loaded else {
        return Ok(Exit::Error);
    };
    let engine = loaded.engine();
    // What the gateway offers a caller (`Deployment::callable_ops`): mounted, and let through
    // by its autonomy level and its tier role when RBAC is on (issue 11 item 7).
    let guard = corral_runtime::compose::guard_settings(&loaded);
    let mut principals: Vec<Principal> =
        loaded.tokens.iter().map(|t| t.principal.clone()).collect();
    if loaded.config.auth.tokens.is_empty() {
        principals.push(Principal::anonymous());
    }
    let out: Vec<PrincipalOut> = principals
        .iter()
        .map(|p| PrincipalOut {
            principal: p.id.clone(),
            roles: p.roles.clone(),
            kind: p.kind.as_str(),
            authenticated: p.authenticated,
            ops: engine
                .mounted_ops(p)
                .into_iter()
                .filter(|op| {
                    let level = guard.effective_level(p, None).map(|(l, _)| l);
                    level.is_none_or(|l| l.permits(op)) && guard.missing_role(op, p).is_none()
                })
                .map(|op| {
                    let (rule, scopes) = scopes_text(&engine, op, p);
                    MountOut {
                        id: op.id.to_string(),
                        tier: op.tier().as_str(),
                        rule,
                        scopes,
                    }
                })
                .collect(),
        })
        .collect();
    match format {
        Format::Json => print_json(&out),
        Format::Human => {
            for p in &out {
                let who = if p.authenticated {
                    format!(
                        "principal `{}` (roles: {})",
                        p.principal,
                        p.roles.join(", ")
                    )
                } else {
                    "open-mode callers (no token)".to_owned()
                };
                outln!("{who} may call:");
                if p.ops.is_empty() {
                    outln!("  (nothing)");
                }
                for o in &p.ops {
                    outln!("  {:<20} {:<12} via {}  {}", o.id, o.tier, o.rule, o.scopes);
                }
            }
        }
    }
    Ok(Exit::Ok)
}
