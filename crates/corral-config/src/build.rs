//! Builds the catalog and the policy from a decoded config, and resolves token secrets from
//! the environment.

use std::path::{Component, Path, PathBuf};

use corral_policy::codes;
use corral_policy::presets::{self, PresetOptions};
use corral_policy::scope::path::DEFAULT_SECRET_DENY;
use corral_policy::scope::{AgentScope, CommandScope, PathScope, PathScopeSpec, UrlScope};
use corral_policy::{
    Catalog, OpId, OpSpec, ParamKind, Policy, Principal, PrincipalOrigin, PrincipalSelector, Rule,
    RuleEffect, ScopeKind, Selector, Tier,
};

use crate::diag::Diagnostic;
use crate::model::{Config, CustomOpConfig, JwtKey, JwtSpec, Secret};
use crate::yaml::Span;

/// Where a policy rule came from, aligned with `Policy::rules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleOrigin {
    /// The key path (`rules[2]`, `preset`, `enable`, `disable`).
    pub location: String,
    /// Where in the file.
    pub span: Option<Span>,
    /// The index in `Config::rules`, for rules written there.
    pub config_rule: Option<usize>,
    /// The preset that produced it, if any.
    pub preset: Option<&'static str>,
    /// `confirm: never` on the rule or its preset: the confirm-tier calls it allows run without
    /// a human's approval (destructive ones never do).
    pub confirm_never: bool,
}

/// A token whose secret was found in the environment.
#[derive(Debug, Clone)]
pub struct ResolvedToken {
    /// The principal the token authenticates as.
    pub principal: Principal,
    /// The secret.
    pub secret: Secret,
    /// The run every call with this token belongs to (`auth.tokens[].run`), if scoped.
    pub run: Option<String>,
    /// Every call with this token is recorded (`auth.tokens[].record`; only with `run`).
    pub record: bool,
}

/// The LLM proxy's upstream, resolved from the variables `llm:` names.
#[derive(Clone)]
pub struct ResolvedLlm {
    /// The provider's OpenAI-compatible base url, without a trailing `/`
    /// (`https://api.openai.com/v1`).
    pub base_url: String,
    /// The provider's API key, if `api_key_env` is set.
    pub api_key: Option<Secret>,
    /// The root agent's name (`X-Corral-Agent`).
    pub root_agent: String,
    /// The API the provider speaks (`llm.api`).
    pub api: crate::model::LlmApi,
}

impl std::fmt::Debug for ResolvedLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The url may carry credentials (`https://user:pass@...`): never printed.
        f.debug_struct("ResolvedLlm")
            .field("base_url", &"[redacted]")
            .field("api_key", &self.api_key)
            .field("root_agent", &self.root_agent)
            .field("api", &self.api)
            .finish()
    }
}

/// Reads environment variables (a trait so tests can give their own).
pub trait Env {
    /// The value of `name`, if set.
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

/// The process environment for the commands that call no provider and authenticate at most
/// the one token they are given (`check-config`, `describe`, `explain`, `mcp`, `call --local`,
/// the lab): a variable that is set reads as itself; one that is unset stands in as a placeholder
/// nobody can present (random per process and per variable, long enough for every check, and
/// an `https://` url where one is expected), and is remembered, so
/// that only the secrets a command really uses need to be in its environment.
#[derive(Debug)]
pub struct OfflineEnv {
    placeholder: String,
    stood_in: std::sync::Mutex<Vec<String>>,
}

impl Default for OfflineEnv {
    fn default() -> Self {
        Self {
            placeholder: format!(
                "https://unset.invalid/{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            ),
            stood_in: std::sync::Mutex::default(),
        }
    }
}

impl OfflineEnv {
    /// The variables read that were unset (each once, in the order read).
    pub fn stood_in(&self) -> Vec<String> {
        self.stood_in.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl Env for OfflineEnv {
    fn var(&self, name: &str) -> Option<String> {
        if let Some(v) = std::env::var(name).ok().filter(|v| !v.is_empty()) {
            return Some(v);
        }
        if let Ok(mut seen) = self.stood_in.lock()
            && !seen.iter().any(|s| s == name)
        {
            seen.push(name.to_owned());
        }
        // One per variable: two tokens never share a secret, even a stood-in one.
        Some(format!("{}/{name}", self.placeholder))
    }
}

impl Env for std::collections::HashMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

pub(crate) struct Built {
    pub jwt_key: Option<JwtKey>,
    pub catalog: Catalog,
    pub policy: Policy,
    pub origins: Vec<RuleOrigin>,
    pub tokens: Vec<ResolvedToken>,
    pub llm: Option<ResolvedLlm>,
    pub state_dir: PathBuf,
    pub own: Vec<crate::protect::OwnFile>,
}

fn err(d: &mut Vec<Diagnostic>, e: &corral_policy::PolicyError, at: &str, span: Span) {
    d.push(Diagnostic::error(e.code(), e.to_string(), at, Some(span)).with_fix(e.fix()));
}

/// Placeholders `{name}` in an argv token.
pub(crate) fn placeholders(token: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = token;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else { break };
        out.push(&after[..end]);
        rest = &after[end + 1..];
    }
    out
}

/// Checks a directory a custom op names (`cwd`, `read_paths`, `write_paths`): absolute, not `/`.
fn custom_dir(path: &str, at: &str, span: Option<crate::yaml::Span>, d: &mut Vec<Diagnostic>) {
    let normal = absolutize(Path::new("/"), path);
    if !Path::new(path).is_absolute() || normal == Path::new("/") {
        d.push(
            Diagnostic::error(
                codes::CONFIG_INVALID_VALUE,
                format!("`{path}` is not an absolute directory below `/`"),
                at.to_owned(),
                span,
            )
            .with_fix("give an absolute path such as `/workspace/tools`"),
        );
    }
}

/// A custom op's writes: `write_paths` and `writable` params need the `write` effect, and only
/// a path param can be writable.
fn check_writes(c: &CustomOpConfig, at: &str, d: &mut Vec<Diagnostic>) {
    if !c.write_paths.is_empty() && !c.writes() {
        d.push(
            Diagnostic::error(
                codes::CONFIG_INVALID_OP,
                format!(
                    "custom op `{}` declares `write_paths` but not the `write` effect",
                    c.id.value
                ),
                format!("{at}.write_paths"),
                c.write_paths.first().map(|p| p.span),
            )
            .with_fix(
                "add `write` to its `effects` (its tier rises to confirm), or drop `write_paths`",
            ),
        );
    }
    for p in c.params.iter().filter(|p| p.writable) {
        let problem = if !matches!(p.kind, ParamKind::Path { .. }) {
            Some("only a path param can be writable")
        } else if !c.writes() {
            Some("the op does not declare the `write` effect")
        } else {
            None
        };
        if let Some(problem) = problem {
            d.push(
                Diagnostic::error(
                    codes::CONFIG_INVALID_OP,
                    format!("param `{}` is `writable: true` but {problem}", p.name.value),
                    format!("{at}.params.{}.writable", p.name.value),
                    Some(p.name.span),
                )
                .with_fix("add `write` to the op's `effects`, or remove `writable`"),
            );
        }
    }
}

/// A custom op's argv: a literal program, and only declared params as placeholders.
fn check_argv(c: &CustomOpConfig, at: &str, d: &mut Vec<Diagnostic>) {
    for (i, tok) in c.argv.iter().enumerate() {
        let names = placeholders(&tok.value);
        if i == 0 && (!names.is_empty() || tok.value.is_empty()) {
            d.push(
                Diagnostic::error(
                    codes::CONFIG_INVALID_OP,
                    format!("the program of custom op `{}` is not a literal", c.id.value),
                    format!("{at}.argv[0]"),
                    Some(tok.span),
                )
                .with_fix("name the program literally; params may fill arguments only"),
            );
        }
        for n in names {
            if !c.params.iter().any(|p| p.name.value == n) {
                let names: Vec<&str> = c.params.iter().map(|p| p.name.value.as_str()).collect();
                let fix = match corral_policy::suggest::closest(n, names.iter().copied()).first() {
                    Some(m) => format!("did you mean `{{{m}}}`?"),
                    None => format!("declare it under `params: {{{n}: {{type: word}}}}`"),
                };
                d.push(
                    Diagnostic::error(
                        codes::CONFIG_INVALID_OP,
                        format!(
                            "argv uses `{{{n}}}` but custom op `{}` declares no such param",
                            c.id.value
                        ),
                        format!("{at}.argv[{i}]"),
                        Some(tok.span),
                    )
                    .with_fix(fix),
                );
            }
        }
    }
}

fn custom_op(c: &CustomOpConfig, d: &mut Vec<Diagnostic>) -> Option<OpSpec> {
    let at = format!("custom.{}", c.id.value);
    let id = match OpId::parse(&c.id.value) {
        Ok(id) => id,
        Err(e) => {
            err(d, &e, &at, c.id.span);
            return None;
        }
    };
    let effects = c.effects.clone().unwrap_or_default();
    let mut spec = OpSpec::new(id, &effects, &c.summary);
    spec.contained = c.contained;
    spec.explicit_only |= c.explicit_only;
    // Whatever its declared effects, a custom op runs a program (open mode refuses it).
    spec.runs_program = true;
    let before = d.len();
    if let Some(cwd) = &c.cwd {
        custom_dir(cwd, &format!("{at}.cwd"), Some(c.id.span), d);
    }
    for (key, list) in [
        ("read_paths", &c.read_paths),
        ("write_paths", &c.write_paths),
    ] {
        for (i, p) in list.iter().enumerate() {
            custom_dir(&p.value, &format!("{at}.{key}[{i}]"), Some(p.span), d);
        }
    }
    check_writes(c, &at, d);
    check_argv(c, &at, d);
    for p in &c.params {
        if !c
            .argv
            .iter()
            .any(|t| placeholders(&t.value).contains(&p.name.value.as_str()))
        {
            d.push(
                Diagnostic::error(
                    codes::CONFIG_INVALID_OP,
                    format!(
                        "param `{}` is declared but `argv` never uses it",
                        p.name.value
                    ),
                    format!("{at}.params.{}", p.name.value),
                    Some(p.name.span),
                )
                .with_fix(format!(
                    "use `{{{}}}` in argv or remove the param",
                    p.name.value
                )),
            );
        }
        if let ParamKind::Path { root: Some(r) } = &p.kind
            && let Err(e) = PathScope::compile(PathScopeSpec {
                roots: vec![r.clone()],
                ..PathScopeSpec::default()
            })
        {
            err(
                d,
                &e,
                &format!("{at}.params.{}.root", p.name.value),
                p.name.span,
            );
        }
        spec.params.push(corral_policy::ParamSpec::new(
            &p.name.value,
            p.kind.clone(),
            p.required,
        ));
    }
    if let Some(t) = c.tier
        && let Err(e) = spec.raise_tier(t)
    {
        err(d, &e, &format!("{at}.tier"), c.id.span);
    }
    spec.groups.push("custom".to_owned());
    (d.len() == before).then_some(spec)
}

/// The op of a declared tool of an upstream MCP server, as the config alone says it:
/// `mcp.<server>.<tool>`, the declared effects (none declared: `admin`, explicit-only), a raised
/// tier. Its params and description come from the upstream's own list once it runs.
pub fn upstream_tool_spec(
    server: &str,
    tool: &crate::model::McpToolConfig,
) -> Result<OpSpec, corral_policy::PolicyError> {
    let id = OpId::parse(&format!("mcp.{server}.{}", tool.name.value))?;
    let effects = tool.effects.clone().unwrap_or_default();
    let summary = format!(
        "tool `{}` of the upstream MCP server `{server}`",
        tool.name.value
    );
    let mut spec = OpSpec::new(id, &effects, &summary);
    if let Some(t) = tool.tier {
        spec.raise_tier(t)?;
    }
    spec.groups.push("mcp".to_owned());
    spec.idempotent = tool.idempotent;
    Ok(spec)
}

/// An op id that names no op in the catalog: a did-you-mean, or, for an op `disabled_ops`
/// removed, says so (a reference to a removed op stops start-up).
fn unknown_op(
    d: &mut Vec<Diagnostic>,
    catalog: &Catalog,
    disabled: &[&str],
    op: &str,
    at: &str,
    span: Span,
) {
    if disabled.contains(&op) {
        d.push(
            Diagnostic::error(
                codes::CONFIG_UNKNOWN_OP,
                format!("`{op}` is listed in `disabled_ops`, so nothing may refer to it"),
                at,
                Some(span),
            )
            .with_fix(format!(
                "remove this reference, or remove `{op}` from `disabled_ops`"
            )),
        );
        return;
    }
    let e = corral_policy::PolicyError::UnknownOp {
        op: op.to_owned(),
        suggestions: corral_policy::suggest::closest(op, catalog.ids()),
    };
    err(d, &e, at, span);
}

/// Lexically absolute form of `p` relative to `base`.
pub(crate) fn absolutize(base: &Path, p: &str) -> PathBuf {
    let joined = if Path::new(p).is_absolute() {
        PathBuf::from(p)
    } else {
        base.join(p)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) | Component::Normal(_) => out.push(c),
        }
    }
    out
}

pub(crate) fn build(
    c: &Config,
    base_dir: &Path,
    config_file: Option<&Path>,
    env: &dyn Env,
    d: &mut Vec<Diagnostic>,
) -> Built {
    let (catalog, disabled) = build_catalog(c, d);
    let mut policy = Policy::new();
    let mut origins = Vec::new();
    preset_rules(c, d, &mut policy, &mut origins);
    let selectors = |list: &[crate::model::Spanned<String>], at: &str, d: &mut Vec<Diagnostic>| {
        selectors(list, at, &catalog, &disabled, d)
    };
    if !c.enable.is_empty() {
        let sels = selectors(&c.enable, "enable", d);
        policy.rules.push(enable_rule(c, sels, &catalog, d));
        origins.push(RuleOrigin {
            location: "enable".to_owned(),
            span: c.enable.first().map(|s| s.span),
            config_rule: None,
            preset: None,
            confirm_never: false,
        });
    }
    for (ri, r) in c.rules.iter().enumerate() {
        let key = match r.effect {
            RuleEffect::Allow => "allow",
            RuleEffect::Deny => "deny",
        };
        let sels = selectors(&r.selectors, &format!("{}.{key}", r.location), d);
        policy.rules.push(config_rule(r, sels, &catalog, d));
        origins.push(RuleOrigin {
            location: r.location.clone(),
            span: Some(r.span),
            config_rule: Some(ri),
            preset: None,
            confirm_never: r.confirm_never.is_some() && r.effect == RuleEffect::Allow,
        });
    }
    if !c.disable.is_empty() {
        let sels = selectors(&c.disable, "disable", d);
        policy
            .rules
            .push(Rule::deny("disable", sels).reason("disabled in the config"));
        origins.push(RuleOrigin {
            location: "disable".to_owned(),
            span: c.disable.first().map(|s| s.span),
            config_rule: None,
            preset: None,
            confirm_never: false,
        });
    }
    policy.limits = c.limits;
    let (state_dir, own) = protect(c, base_dir, config_file, &catalog, &mut policy, d);
    let tokens = resolve_tokens(c, env, d);
    let llm = c.llm.as_ref().and_then(|l| resolve_llm(l, env, d));
    let jwt_key = c
        .auth
        .jwt
        .as_ref()
        .and_then(|j| resolve_jwt(j, base_dir, env, d));
    Built {
        jwt_key,
        catalog,
        policy,
        origins,
        tokens,
        llm,
        state_dir,
        own,
    }
}

/// `llm:`: the url and key from the variables it names (each must be set and non-empty; the
/// url must be `http://` or `https://`). Values are never put in a diagnostic.
fn resolve_llm(
    l: &crate::model::LlmConfig,
    env: &dyn Env,
    d: &mut Vec<Diagnostic>,
) -> Option<ResolvedLlm> {
    let var = |v: &crate::model::Spanned<String>, at: &str, example: &str, d: &mut Vec<_>| {
        let value = env.var(&v.value).filter(|s| !s.trim().is_empty());
        if value.is_none() {
            d.push(
                Diagnostic::error(
                    codes::CONFIG_TOKEN_ENV_UNSET,
                    format!("the variable `{}` is unset or empty", v.value),
                    at,
                    Some(v.span),
                )
                .with_fix(format!("export {}={example}", v.value)),
            );
        }
        value
    };
    let url_var = l.base_url_env.as_ref()?;
    let base_url = var(url_var, "llm.base_url_env", "https://api.openai.com/v1", d);
    let api_key = match &l.api_key_env {
        Some(k) => Some(var(k, "llm.api_key_env", "<the provider's key>", d)?),
        None => None,
    };
    let base_url = base_url?.trim().trim_end_matches('/').to_owned();
    let lower = base_url.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        d.push(
            Diagnostic::error(
                codes::CONFIG_INVALID_VALUE,
                format!(
                    "the variable `{}` does not hold an `http://` or `https://` url",
                    url_var.value
                ),
                "llm.base_url_env",
                Some(url_var.span),
            )
            .with_fix(format!(
                "export {}=https://api.openai.com/v1 (the provider's OpenAI-compatible base url)",
                url_var.value
            )),
        );
        return None;
    }
    Some(ResolvedLlm {
        base_url,
        api_key: api_key.map(Secret::new),
        root_agent: l.root_agent().to_owned(),
        api: l.api.unwrap_or_default(),
    })
}

/// The catalog: the built-in ops, the custom ones, the declared tools of upstream MCP servers,
/// less `disabled_ops` (returned too), with `tiers` raised; op ids in `roles.overrides` and
/// `budgets.max_calls_per_op` are checked against it.
fn build_catalog<'c>(c: &'c Config, d: &mut Vec<Diagnostic>) -> (Catalog, Vec<&'c str>) {
    let mut catalog = Catalog::builtin();
    for op in &c.custom {
        if let Some(spec) = custom_op(op, d)
            && let Err(e) = catalog.add_custom(spec)
        {
            err(d, &e, &format!("custom.{}", op.id.value), op.id.span);
        }
    }
    for server in &c.mcp_servers {
        for tool in &server.tools {
            let at = format!(
                "mcp_servers.{}.tools.{}",
                server.name.value, tool.name.value
            );
            match upstream_tool_spec(&server.name.value, tool) {
                Ok(spec) => {
                    if let Err(e) = catalog.add_upstream(spec) {
                        err(d, &e, &at, tool.name.span);
                    }
                }
                Err(e) => err(d, &e, &at, tool.name.span),
            }
        }
    }
    // `disabled_ops` removes ops before anything is built from the catalog: the engine, the
    // registry, `GET /ops`, `describe` all see the catalog without them.
    let mut disabled: Vec<&str> = Vec::new();
    for (i, op) in c.disabled_ops.iter().enumerate() {
        let at = format!("disabled_ops[{i}]");
        if disabled.contains(&op.value.as_str()) {
            continue;
        }
        if catalog.remove(&op.value).is_some() {
            disabled.push(op.value.as_str());
        } else {
            unknown_op(d, &catalog, &[], &op.value, &at, op.span);
        }
    }
    for (op, tier) in &c.tiers {
        let at = format!("tiers.{}", op.value);
        match catalog.get_mut(&op.value) {
            Some(spec) => {
                if let Err(e) = spec.raise_tier(*tier) {
                    err(d, &e, &at, op.span);
                }
            }
            None => unknown_op(d, &catalog, &disabled, &op.value, &at, op.span),
        }
    }
    if let Some(roles) = &c.roles {
        for (op, _) in &roles.overrides {
            if catalog.get(&op.value).is_none() {
                let at = format!("roles.overrides.{}", op.value);
                unknown_op(d, &catalog, &disabled, &op.value, &at, op.span);
            }
        }
    }
    for (op, _) in &c.budgets.max_calls_per_op {
        if catalog.get(&op.value).is_none() {
            let at = format!("budgets.max_calls_per_op.{}", op.value);
            unknown_op(d, &catalog, &disabled, &op.value, &at, op.span);
        }
    }
    (catalog, disabled)
}

/// The rules of the config's presets, with their origins.
fn preset_rules(
    c: &Config,
    d: &mut Vec<Diagnostic>,
    policy: &mut Policy,
    origins: &mut Vec<RuleOrigin>,
) {
    for p in &c.presets {
        let mut opts: PresetOptions = p.options.clone();
        if opts.root.is_none() {
            opts.root = c.root.as_ref().map(|r| r.value.clone());
        }
        // `{preset: agent_host, root: /workspace, agents: [codex]}`: the top-level `agents:`
        // names the adapters when the preset lists none.
        if opts.agents.is_empty()
            && let Some(a) = &c.agents
        {
            opts.agents = a.names();
        }
        match presets::build(p.preset, &opts) {
            Ok(pp) => {
                for _ in &pp.rules {
                    origins.push(RuleOrigin {
                        location: "preset".to_owned(),
                        span: Some(p.span),
                        config_rule: None,
                        preset: Some(p.preset.name()),
                        confirm_never: p.confirm_never.is_some(),
                    });
                }
                *policy = std::mem::take(policy) + pp;
            }
            Err(e) => err(d, &e, "preset", p.span),
        }
    }
}

/// The selectors of a rule's op list; a disabled op is an unknown one.
fn selectors(
    list: &[crate::model::Spanned<String>],
    at: &str,
    catalog: &Catalog,
    disabled: &[&str],
    d: &mut Vec<Diagnostic>,
) -> Vec<Selector> {
    list.iter()
        .enumerate()
        .filter_map(|(i, s)| {
            if disabled.contains(&s.value.as_str()) {
                unknown_op(
                    d,
                    catalog,
                    disabled,
                    &s.value,
                    &format!("{at}[{i}]"),
                    s.span,
                );
                return None;
            }
            match Selector::parse(&s.value, catalog) {
                Ok(sel) => Some(sel),
                Err(e) => {
                    err(d, &e, &format!("{at}[{i}]"), s.span);
                    None
                }
            }
        })
        .collect()
}

/// The rule `enable:` stands for: its ops, confined to `root` when one of them takes a path.
fn enable_rule(
    c: &Config,
    sels: Vec<Selector>,
    catalog: &Catalog,
    d: &mut Vec<Diagnostic>,
) -> Rule {
    let mut rule = Rule::allow("enable", sels.clone());
    let agent_ops: Vec<String> = catalog
        .iter()
        .filter(|op| op.agent_scoped && rule.mounts(op))
        .map(|op| format!("`{}`", op.id))
        .collect();
    if !agent_ops.is_empty() {
        d.push(
            Diagnostic::error(
                codes::POLICY_SCOPE_REQUIRED,
                format!(
                    "`enable` lists {}, which need an `agents:` scope that `enable` cannot carry",
                    agent_ops.join(", ")
                ),
                "enable",
                c.enable.first().map(|s| s.span),
            )
            .with_fix("use `preset: agent_host`, or a rule with `agents: {workdir: /workspace}`"),
        );
    }
    let needs_paths = catalog
        .iter()
        .filter(|op| sels.iter().any(|s| s.mounts(op)))
        .any(|op| op.required_scopes().contains(&ScopeKind::Paths));
    if needs_paths {
        match &c.root {
            Some(root) => match PathScope::compile(PathScopeSpec {
                roots: vec![root.value.clone()],
                deny: DEFAULT_SECRET_DENY
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect(),
                ..PathScopeSpec::default()
            }) {
                Ok(s) => rule = rule.paths(s),
                Err(e) => err(d, &e, "root", root.span),
            },
            None => d.push(
                Diagnostic::error(
                    codes::CONFIG_MISSING_KEY,
                    "`enable` lists ops that take a path, and there is no `root`",
                    "root",
                    c.enable.first().map(|s| s.span),
                )
                .with_fix("add `root: /workspace` or write a rule with `paths:`"),
            ),
        }
    }
    rule
}

/// A rule of the config's `rules:`, compiled: its selectors, principals, limits, reason and
/// scopes; `confirm: never` on destructive ops is an error.
fn config_rule(
    r: &crate::model::RuleConfig,
    sels: Vec<Selector>,
    catalog: &Catalog,
    d: &mut Vec<Diagnostic>,
) -> Rule {
    if let Some(span) = r.confirm_never {
        let destructive: Vec<String> = catalog
            .iter()
            .filter(|op| op.tier() == Tier::Destructive && sels.iter().any(|s| s.mounts(op)))
            .map(|op| format!("`{}`", op.id))
            .collect();
        if !destructive.is_empty() {
            d.push(
                Diagnostic::error(
                    codes::CONFIG_INVALID_VALUE,
                    format!(
                        "`confirm: never` on a rule that allows destructive ops ({}); destructive ops are always confirmed",
                        destructive.join(", ")
                    ),
                    format!("{}.confirm", r.location),
                    Some(span),
                )
                .with_fix("list only confirm-tier ops in this rule, and allow the destructive ones in another rule without `confirm: never`"),
            );
        }
    }
    let mut rule = match r.effect {
        RuleEffect::Allow => Rule::allow(&r.name, sels),
        RuleEffect::Deny => Rule::deny(&r.name, sels),
    };
    let mut principals = Vec::new();
    for (i, p) in r.principals.iter().enumerate() {
        match PrincipalSelector::parse(&p.value) {
            Ok(s) => principals.push(s),
            Err(e) => err(d, &e, &format!("{}.principals[{i}]", r.location), p.span),
        }
    }
    rule = rule.principals(principals).limits(r.limits);
    if let Some(reason) = &r.reason {
        rule = rule.reason(reason);
    }
    if let Some(p) = &r.paths {
        let compiled = match r.effect {
            RuleEffect::Allow => PathScope::compile(p.value.clone()),
            RuleEffect::Deny => PathScope::compile_deny(p.value.clone()),
        };
        match compiled {
            Ok(s) => rule = rule.paths(s),
            Err(e) => err(d, &e, &format!("{}.paths", r.location), p.span),
        }
    }
    if let Some(cm) = &r.commands {
        match CommandScope::compile(cm.value.clone()) {
            Ok(s) => rule = rule.commands(s),
            Err(e) => err(d, &e, &format!("{}.commands", r.location), cm.span),
        }
    }
    if let Some(u) = &r.urls {
        match UrlScope::compile(u.value.clone()) {
            Ok(s) => rule = rule.urls(s),
            Err(e) => err(d, &e, &format!("{}.urls", r.location), u.span),
        }
    }
    if let Some(a) = &r.agents {
        match AgentScope::compile(a.value.clone()) {
            Ok(s) => rule = rule.agents(s),
            Err(e) => err(d, &e, &format!("{}.agents", r.location), a.span),
        }
    }
    if r.effect == RuleEffect::Allow && rule.agents.is_none() && r.agents.is_none() {
        agents_scope_required(r, &rule, catalog, d);
    }
    rule
}

/// An allow rule that mounts an op hosting a coding agent (`agents.<a>.run`, `.sessions.create`,
/// `.sessions.send_event`) without an `agents:` scope is a load error: every call would be
/// refused, and the agent's confinement would be unstated. (Wildcards such as `*` or
/// `effect:exec` never mount those ops without the scope, see `Rule::mounts`; this catches a
/// rule that names them.)
fn agents_scope_required(
    r: &crate::model::RuleConfig,
    rule: &Rule,
    catalog: &Catalog,
    d: &mut Vec<Diagnostic>,
) {
    let ops: Vec<String> = catalog
        .iter()
        .filter(|op| op.agent_scoped && rule.mounts(op))
        .map(|op| format!("`{}`", op.id))
        .collect();
    if ops.is_empty() {
        return;
    }
    d.push(
        Diagnostic::error(
            codes::POLICY_SCOPE_REQUIRED,
            format!(
                "the rule allows {} without an `agents:` scope; a coding agent is not confined \
                 by `paths:` or `commands:`, so its scope must be stated",
                ops.join(", ")
            ),
            r.location.clone(),
            Some(r.span),
        )
        .with_fix("add `agents: {workdir: /workspace, permissions: read-only}` to the rule"),
    );
}

/// Protects corral's own files (as configured and resolved) and the `protected:` globs, and
/// checks no writable scope reaches them; returns the resolved state directory and own files.
fn protect(
    c: &Config,
    base_dir: &Path,
    config_file: Option<&Path>,
    catalog: &Catalog,
    policy: &mut Policy,
    d: &mut Vec<Diagnostic>,
) -> (PathBuf, Vec<crate::protect::OwnFile>) {
    let state_dir = absolutize(
        base_dir,
        c.state_dir.as_ref().map_or(".corral", |s| s.value.as_str()),
    );
    // Corral's own files are protected as configured and resolved (a symlinked config
    // directory must not leave the real state directory open: issue 11 item 3).
    let own = crate::protect::own_files(c, base_dir, &state_dir, config_file);
    for f in &own {
        for form in f.forms() {
            *policy = std::mem::take(policy).protect(&form.to_string_lossy());
        }
    }
    let state_dir = crate::protect::resolve_path(&state_dir);
    let globs: Vec<String> = c.protected.iter().map(|g| g.value.clone()).collect();
    match corral_policy::Protected::compile(corral_policy::ProtectedSpec {
        globs,
        ..corral_policy::ProtectedSpec::default()
    }) {
        Ok(p) => *policy = std::mem::take(policy).protect_all(&p),
        Err(e) => err(
            d,
            &e,
            "protected",
            c.protected.first().map(|g| g.span).unwrap_or_default(),
        ),
    }
    d.extend(crate::protect::check_writable(
        &own, policy, catalog, c, base_dir,
    ));
    (state_dir, own)
}

fn resolve_jwt(
    j: &JwtSpec,
    base_dir: &Path,
    env: &dyn Env,
    d: &mut Vec<Diagnostic>,
) -> Option<JwtKey> {
    if let Some(var) = &j.hs256_secret_env {
        return match env.var(&var.value).filter(|s| !s.is_empty()) {
            None => {
                d.push(
                    Diagnostic::error(
                        codes::CONFIG_TOKEN_ENV_UNSET,
                        format!("the variable `{}` is unset or empty", var.value),
                        "auth.jwt.hs256_secret_env",
                        Some(var.span),
                    )
                    .with_fix(format!("export {}=<secret of 32+ characters>", var.value)),
                );
                None
            }
            Some(s) if s.chars().count() < 32 => {
                d.push(
                    Diagnostic::error(
                        codes::CONFIG_TOKEN_TOO_SHORT,
                        format!(
                            "the HS256 secret in `{}` is shorter than 32 characters",
                            var.value
                        ),
                        "auth.jwt.hs256_secret_env",
                        Some(var.span),
                    )
                    .with_fix("use at least 32 random characters, e.g. `openssl rand -hex 32`"),
                );
                None
            }
            Some(s) => Some(JwtKey::Hs256(Secret::new(s))),
        };
    }
    let file = j.rs256_public_key_file.as_ref()?;
    let path = absolutize(base_dir, &file.value);
    match std::fs::read(&path) {
        Ok(pem) if pem.starts_with(b"-----BEGIN") => Some(JwtKey::Rs256Pem(pem)),
        Ok(_) => {
            d.push(
                Diagnostic::error(
                    codes::CONFIG_INVALID_VALUE,
                    format!("`{}` is not a PEM public key", path.display()),
                    "auth.jwt.rs256_public_key_file",
                    Some(file.span),
                )
                .with_fix("point at a PEM file starting with `-----BEGIN PUBLIC KEY-----`"),
            );
            None
        }
        Err(e) => {
            d.push(Diagnostic::error(
                codes::CONFIG_IO,
                format!("cannot read `{}`: {e}", path.display()),
                "auth.jwt.rs256_public_key_file",
                Some(file.span),
            ));
            None
        }
    }
}

fn resolve_tokens(c: &Config, env: &dyn Env, d: &mut Vec<Diagnostic>) -> Vec<ResolvedToken> {
    let mut out: Vec<ResolvedToken> = Vec::new();
    for (i, t) in c.auth.tokens.iter().enumerate() {
        let at = format!("auth.tokens[{i}]");
        if c.auth.tokens[..i].iter().any(|o| o.id.value == t.id.value) {
            d.push(
                Diagnostic::error(
                    codes::CONFIG_INVALID_VALUE,
                    format!("two tokens have the id `{}`", t.id.value),
                    format!("{at}.id"),
                    Some(t.id.span),
                )
                .with_fix("give each token its own id"),
            );
        }
        let secret = env.var(&t.token_env.value).filter(|s| !s.is_empty());
        let Some(secret) = secret else {
            d.push(
                Diagnostic::error(
                    codes::CONFIG_TOKEN_ENV_UNSET,
                    format!("the variable `{}` is unset or empty", t.token_env.value),
                    format!("{at}.token_env"),
                    Some(t.token_env.span),
                )
                .with_fix(format!(
                    "export {}=<secret of 16+ characters>, e.g. `export {}=$(openssl rand -hex 24)`",
                    t.token_env.value, t.token_env.value
                )),
            );
            continue;
        };
        if secret.chars().count() < 16 {
            d.push(Diagnostic::error(
                codes::CONFIG_TOKEN_TOO_SHORT,
                format!(
                    "the secret in `{}` is shorter than 16 characters",
                    t.token_env.value
                ),
                format!("{at}.token_env"),
                Some(t.token_env.span),
            ));
            continue;
        }
        if out.iter().any(|o| o.secret.expose() == secret) {
            d.push(
                Diagnostic::error(
                    codes::CONFIG_INVALID_VALUE,
                    format!(
                        "token `{}` has the same secret as another token",
                        t.id.value
                    ),
                    format!("{at}.token_env"),
                    Some(t.token_env.span),
                )
                .with_fix("give each token its own secret"),
            );
            continue;
        }
        let mut principal = Principal::new(&t.id.value, &[])
            .with_kind(t.kind)
            .with_origin(PrincipalOrigin::StaticToken);
        principal.roles = t.roles.clone();
        out.push(ResolvedToken {
            principal,
            run: t.run.as_ref().map(|r| r.value.clone()),
            record: t.record,
            secret: Secret::new(secret),
        });
    }
    out
}
