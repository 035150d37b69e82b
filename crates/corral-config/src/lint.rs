//! The lint behind `corral check-config`: the anti-patterns of a policy that loads but should
//! not ship. Each finding has a code, a severity, a span and a fix.

use corral_policy::scope::{ArgPattern, NormPath, SymlinkMode};
use corral_policy::{
    Effect, OpSpec, ParamKind, Principal, PrincipalKind, PrincipalSelector, Role, Rule, RuleEffect,
    ScopeKind, Selector, Tier, codes,
};

use crate::Loaded;
use crate::diag::{Diagnostic, Severity};
use crate::model::{CustomOpConfig, RuleConfig};
use crate::yaml::Span;

/// Programs that can run arbitrary code or reach outside their arguments' intent.
const ESCAPE_CAPABLE: &[&str] = &[
    "python",
    "python2",
    "python3",
    "node",
    "nodejs",
    "deno",
    "bun",
    "ruby",
    "perl",
    "php",
    "lua",
    "sh",
    "bash",
    "zsh",
    "dash",
    "ksh",
    "fish",
    "csh",
    "tcsh",
    "env",
    "find",
    "git",
    "xargs",
    "sudo",
    "su",
    "doas",
    "nohup",
    "timeout",
    "nice",
    "ionice",
    "strace",
    "gdb",
    "ssh",
    "scp",
    "rsync",
    "curl",
    "wget",
    "make",
    "npm",
    "npx",
    "pip",
    "pip3",
    "cargo",
    "docker",
    "kubectl",
    "awk",
    "gawk",
    "sed",
    "vim",
    "vi",
    "less",
    "man",
    "tar",
    "busybox",
    "chroot",
    "setsid",
    "watch",
    "script",
    "expect",
    "osascript",
    "pwsh",
];

/// Verbs that mark an op name as mutating (spec 002's `looks_mutating`).
const MUTATING_VERBS: &[&str] = &[
    "delete",
    "remove",
    "rm",
    "create",
    "write",
    "update",
    "put",
    "post",
    "patch",
    "set",
    "scale",
    "restart",
    "stop",
    "start",
    "kill",
    "drop",
    "alter",
    "exec",
    "execute",
    "run",
    "apply",
    "deploy",
    "install",
    "uninstall",
    "push",
    "reset",
    "truncate",
    "purge",
    "move",
    "mv",
    "rename",
    "grant",
    "revoke",
    "send",
    "upload",
    "insert",
    "modify",
    "edit",
    "add",
    "terminate",
    "destroy",
    "reboot",
    "shutdown",
    "enable",
    "disable",
    "commit",
    "merge",
    "publish",
    "approve",
    "cancel",
    "rollback",
    "restore",
    "migrate",
    "rotate",
    "suspend",
    "resume",
    "pause",
    "evict",
    "cordon",
    "drain",
    "wipe",
    "clear",
    "flush",
];

/// Verbs that mark an op name as a read; a name whose last segment starts with one is never
/// flagged.
const READ_VERBS: &[&str] = &[
    "get", "list", "describe", "read", "show", "query", "search", "count", "check", "view",
    "inspect", "stat", "status", "health", "watch", "find", "lookup", "fetch", "explain", "diff",
    "preview", "validate",
];

const PATH_LIKE: &[&str] = &[
    "path",
    "file",
    "filename",
    "dir",
    "directory",
    "folder",
    "dest",
    "destination",
    "src",
    "source",
    "output",
    "out",
    "input",
    "target",
    "script",
];

/// Splits an op id into lowercase word tokens (`kafka.deleteTopic_now` -> kafka, delete, topic,
/// now).
fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in s.chars() {
        if matches!(c, '.' | '_' | '-') {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Whether an op name carries a mutating verb (and does not start its last segment with a read
/// verb).
pub fn looks_mutating(id: &str) -> bool {
    let last = id.rsplit('.').next().unwrap_or(id);
    if words(last)
        .first()
        .is_some_and(|w| READ_VERBS.contains(&w.as_str()))
    {
        return false;
    }
    words(id)
        .iter()
        .any(|w| MUTATING_VERBS.contains(&w.as_str()))
}

struct Linter<'a> {
    l: &'a Loaded,
    out: Vec<Diagnostic>,
}

fn principals_overlap(a: &Rule, b: &Rule) -> bool {
    a.principals.is_empty()
        || b.principals.is_empty()
        || a.principals
            .iter()
            .any(|p| b.principals.contains(p) || matches!(p, PrincipalSelector::AnyAuthenticated))
        || b.principals.contains(&PrincipalSelector::AnyAuthenticated)
}

impl<'a> Linter<'a> {
    fn rule_place(&self, i: usize) -> (String, Option<Span>) {
        self.l
            .origins
            .get(i)
            .map(|o| (o.location.clone(), o.span))
            .unwrap_or_default()
    }

    fn config_rule(&self, i: usize) -> Option<&'a RuleConfig> {
        self.l
            .origins
            .get(i)
            .and_then(|o| o.config_rule)
            .and_then(|ci| self.l.config.rules.get(ci))
    }

    fn push(&mut self, d: Diagnostic) {
        self.out.push(d);
    }

    fn ops_mounted_by(&self, r: &Rule) -> Vec<&'a OpSpec> {
        self.l.catalog.iter().filter(|op| r.mounts(op)).collect()
    }

    fn run(mut self) -> Vec<Diagnostic> {
        let rules = &self.l.policy.rules;
        for (i, r) in rules.iter().enumerate() {
            self.selectors(i, r);
            if r.effect == RuleEffect::Allow {
                self.allow_rule(i, r);
            }
        }
        self.agents();
        self.shadowed();
        self.writable_scripts();
        for c in &self.l.config.custom {
            self.custom_op(c);
        }
        for s in &self.l.config.mcp_servers {
            self.mcp_server(s);
        }
        self.lab_programs();
        self.state_only();
        self.raised_caps();
        self.raised_ceilings();
        self.auth();
        self.console();
        self.guardrails();
        self.secrets();
        self.missing_roots();
        for p in &self.l.config.presets {
            if p.preset == corral_policy::presets::Preset::FullAccess {
                self.push(Diagnostic::error(
                    codes::LINT_FULL_ACCESS,
                    "the full_access preset turns off corral's protections",
                    "preset",
                    Some(p.span),
                ));
            }
        }
        self.out.sort_by_key(|d| {
            (
                d.span.map_or((usize::MAX, 0), |s| (s.line, s.col)),
                d.severity,
            )
        });
        self.out.dedup();
        self.out
    }

    /// The agent scopes: `lint.agent_unconfined` for `permissions: full`, and
    /// `lint.agent_permissions_implicit` for an agent scope that leaves `permissions` unstated
    /// while file ops are allowed under a `paths:` scope (a reader could think the path scope
    /// confines the agent; it does not).
    fn agents(&mut self) {
        let rules = &self.l.policy.rules;
        let file_scoped = rules.iter().any(|r| {
            r.effect == RuleEffect::Allow
                && r.paths.is_some()
                && self
                    .ops_mounted_by(r)
                    .iter()
                    .any(|op| op.groups.iter().any(|g| g == "file_ops"))
        });
        for (i, r) in rules.iter().enumerate() {
            let Some(scope) = r.agents.as_ref().filter(|_| r.effect == RuleEffect::Allow) else {
                continue;
            };
            let (loc, span) = self.rule_place(i);
            let span = self
                .config_rule(i)
                .and_then(|c| c.agents.as_ref().map(|a| a.span))
                .or(span);
            if scope.unconfined() {
                self.push(
                    Diagnostic::warning(
                        codes::LINT_AGENT_UNCONFINED,
                        format!(
                            "the agent scope of `{}` has `permissions: full`: the agent may \
                             change the host beyond its workdir, as far as corral's user may \
                             (corral's own files, `.git` and `protected:` stay refused)",
                            r.name
                        ),
                        format!("{loc}.agents.permissions"),
                        span,
                    )
                    .with_fix("use `permissions: workspace-write` unless the agent really needs the whole machine"),
                );
            }
            if !scope.spec().confirm_writes_outside.is_empty() {
                self.holds_unapplied(i, r, span);
            }
            if file_scoped && scope.spec().permissions.is_none() {
                self.push(
                    Diagnostic::warning(
                        codes::LINT_AGENT_PERMISSIONS_IMPLICIT,
                        format!(
                            "`{}` allows coding agents and the policy allows file ops under a \
                             `paths:` scope, but the agent scope does not state `permissions`: \
                             path scopes do not confine agents (the agent gets `read-only`)",
                            r.name
                        ),
                        format!("{loc}.agents"),
                        span,
                    )
                    .with_fix("write `permissions: read-only` (or `workspace-write`) in the rule's `agents:` scope"),
                );
            }
        }
    }

    /// `lint.agent_holds_unapplied`: rule `r` (the `i`-th) holds an agent's writes for a
    /// person, and for an adapter it hosts no allow rule mounts `apply_writes`.
    fn holds_unapplied(&mut self, i: usize, r: &Rule, span: Option<Span>) {
        let apply_mounted = |a: &str| {
            let id = format!("agents.{a}.sessions.apply_writes");
            self.l.policy.rules.iter().any(|x| {
                x.effect == RuleEffect::Allow
                    && self.ops_mounted_by(x).iter().any(|op| op.id.as_str() == id)
            })
        };
        let missing: Vec<&str> = corral_policy::scope::agent::ADAPTERS
            .iter()
            .copied()
            .filter(|a| {
                self.ops_mounted_by(r)
                    .iter()
                    .any(|op| op.id.as_str().starts_with(&format!("agents.{a}.")))
                    && !apply_mounted(a)
            })
            .collect();
        if missing.is_empty() {
            return;
        }
        let (loc, _) = self.rule_place(i);
        let ops: Vec<String> = missing
            .iter()
            .map(|a| format!("`agents.{a}.sessions.apply_writes`"))
            .collect();
        self.push(
            Diagnostic::warning(
                codes::LINT_AGENT_HOLDS_UNAPPLIED,
                format!(
                    "the agent scope of `{}` holds writes outside its `confirm_writes_outside` directories for a person, and no allow rule mounts {}: what it holds can never be applied",
                    r.name,
                    ops.join(", ")
                ),
                format!("{loc}.agents.confirm_writes_outside"),
                span,
            )
            .with_fix(format!("allow {} (a person confirms each call)", ops.join(", "))),
        );
    }

    /// `lint.lab_program_unisolated`: lab programs declared where none can run.
    fn lab_programs(&mut self) {
        let c = &self.l.config;
        if c.isolation.backend == crate::model::BackendKind::Linux {
            return;
        }
        let declared = c
            .sandbox
            .programs
            .iter()
            .map(|p| ("programs", p))
            .chain(c.sandbox.scorers.iter().map(|p| ("scorers", p)))
            .chain(c.sandbox.judges.iter().map(|p| ("judges", p)));
        for (key, p) in declared {
            self.push(
                Diagnostic::warning(
                    codes::LINT_LAB_PROGRAM_UNISOLATED,
                    format!(
                        "lab program `{}` will not run: external programs run only in the `linux` isolation backend, and `isolation.backend` is `process`",
                        p.name.value
                    ),
                    format!("sandbox.{key}.{}", p.name.value),
                    Some(p.name.span),
                )
                .with_fix("set `isolation: {backend: linux}`, or remove the entry"),
            );
        }
    }

    /// `lint.raised_cap`: a shadow evaluation's replay ceiling or a tournament's judge ceiling
    /// above corral's safe default.
    fn raised_ceilings(&mut self) {
        let c = &self.l.config;
        let (replay, judge) = (&c.budgets.replay, &c.budgets.judge);
        for (at, value, default) in [
            (
                "budgets.replay.max_runs",
                replay.max_runs,
                crate::model::ReplayBudget::DEFAULT_MAX_RUNS,
            ),
            (
                "budgets.replay.max_calls",
                replay.max_calls,
                crate::model::ReplayBudget::DEFAULT_MAX_CALLS,
            ),
            (
                "budgets.judge.max_calls",
                judge.max_calls,
                crate::model::JudgeBudget::DEFAULT_MAX_CALLS,
            ),
        ] {
            if value > default {
                self.push(Diagnostic::warning(
                    codes::LINT_RAISED_CAP,
                    format!(
                        "`{at}` raises the ceiling from the safe default {default} to {value}: every unit of it is paid for"
                    ),
                    at,
                    None,
                ));
            }
        }
    }

    /// `lint.raised_cap`: a memory cap or write quota above corral's safe default, in the
    /// global limits, a rule's, an upstream MCP server's, or a lab program's.
    fn raised_caps(&mut self) {
        use corral_policy::limits::{DEFAULT_MEMORY, DEFAULT_RECORDING_BYTES, DEFAULT_WRITE_QUOTA};
        use corral_policy::units::format_size;
        let c = &self.l.config;
        let mut places: Vec<(String, Option<Span>, &corral_policy::Limits)> =
            vec![("limits".to_owned(), None, &c.limits)];
        for r in &c.rules {
            places.push((format!("{}.limits", r.location), Some(r.span), &r.limits));
        }
        let mut found = Vec::new();
        for (at, span, l) in places {
            if let Some(m) = l.memory.filter(|m| *m > DEFAULT_MEMORY) {
                found.push((
                    format!("{at}.memory"),
                    span,
                    "memory cap",
                    m,
                    DEFAULT_MEMORY,
                ));
            }
            if let Some(q) = l.write_quota.filter(|q| *q > DEFAULT_WRITE_QUOTA) {
                found.push((
                    format!("{at}.write_quota"),
                    span,
                    "write quota",
                    q,
                    DEFAULT_WRITE_QUOTA,
                ));
            }
        }
        for (key, p) in c
            .sandbox
            .programs
            .iter()
            .map(|p| ("programs", p))
            .chain(c.sandbox.scorers.iter().map(|p| ("scorers", p)))
            .chain(c.sandbox.judges.iter().map(|p| ("judges", p)))
        {
            if let Some(m) = p.memory.filter(|m| *m > DEFAULT_MEMORY) {
                found.push((
                    format!("sandbox.{key}.{}.memory", p.name.value),
                    Some(p.name.span),
                    "memory cap",
                    m,
                    DEFAULT_MEMORY,
                ));
            }
        }
        for s in &c.mcp_servers {
            if let Some(m) = s.memory.filter(|m| *m > DEFAULT_MEMORY) {
                found.push((
                    format!("mcp_servers.{}.memory", s.name.value),
                    Some(s.name.span),
                    "memory cap",
                    m,
                    DEFAULT_MEMORY,
                ));
            }
        }
        let rec = &c.recordings;
        if let Some(b) = rec.max_bytes.filter(|b| *b > DEFAULT_RECORDING_BYTES) {
            found.push((
                "recordings.max_bytes".to_owned(),
                None,
                "recording size cap",
                b,
                DEFAULT_RECORDING_BYTES,
            ));
        }
        self.raised_recording_counts();
        for (at, span, what, value, default) in found {
            self.push(Diagnostic::warning(
                codes::LINT_RAISED_CAP,
                format!(
                    "`{at}` raises the {what} from the safe default {} to {}",
                    format_size(default),
                    format_size(value)
                ),
                at,
                span,
            ));
        }
    }

    /// The recording counts raised past their safe defaults (events per recording, live
    /// recordings per tenant and per principal).
    fn raised_recording_counts(&mut self) {
        use corral_policy::limits::{
            DEFAULT_RECORDING_EVENTS, DEFAULT_RECORDINGS_PER_PRINCIPAL,
            DEFAULT_RECORDINGS_PER_TENANT,
        };
        let rec = &self.l.config.recordings;
        let (events, tenant, principal) =
            (rec.max_events, rec.max_per_tenant, rec.max_per_principal);
        if let Some(n) = events.filter(|n| *n > DEFAULT_RECORDING_EVENTS) {
            self.push(Diagnostic::warning(
                codes::LINT_RAISED_CAP,
                format!(
                    "`recordings.max_events` raises the recording event cap from the safe default {DEFAULT_RECORDING_EVENTS} to {n}"
                ),
                "recordings.max_events",
                None,
            ));
        }
        if let Some(n) = tenant.filter(|n| *n > DEFAULT_RECORDINGS_PER_TENANT) {
            self.push(Diagnostic::warning(
                codes::LINT_RAISED_CAP,
                format!(
                    "`recordings.max_per_tenant` raises the live recordings a tenant may keep from the safe default {DEFAULT_RECORDINGS_PER_TENANT} to {n}"
                ),
                "recordings.max_per_tenant",
                None,
            ));
        }
        if let Some(n) = principal.filter(|n| *n > DEFAULT_RECORDINGS_PER_PRINCIPAL) {
            self.push(Diagnostic::warning(
                codes::LINT_RAISED_CAP,
                format!(
                    "`recordings.max_per_principal` raises the live recordings one principal may keep in a tenant from the safe default {DEFAULT_RECORDINGS_PER_PRINCIPAL} to {n}: one principal can then take more of the tenant's share"
                ),
                "recordings.max_per_principal",
                None,
            ));
        }
    }

    fn selectors(&mut self, i: usize, r: &Rule) {
        let Some(cr) = self.config_rule(i) else {
            return;
        };
        for (si, (sel, written)) in r.selectors.iter().zip(&cr.selectors).enumerate() {
            let key = match r.effect {
                RuleEffect::Allow => "allow",
                RuleEffect::Deny => "deny",
            };
            let at = format!("{}.{key}[{si}]", cr.location);
            let reaches = self.l.catalog.iter().filter(|op| sel.reaches(op)).count();
            // A coding agent's op is mounted only by a rule with an `agents:` scope (or one
            // naming the `agents` namespace): see `Rule::mounts`.
            let mounts = self
                .l
                .catalog
                .iter()
                .filter(|op| {
                    sel.mounts(op) && (!op.agent_scoped || r.agents.is_some() || sel.names_agents())
                })
                .count();
            if reaches == 0 {
                self.push(Diagnostic::warning(
                    codes::LINT_MATCHES_NOTHING,
                    format!("selector `{sel}` matches no op"),
                    at,
                    Some(written.span),
                ));
            } else if r.effect == RuleEffect::Allow && mounts == 0 {
                self.push(
                    Diagnostic::warning(
                        codes::LINT_MATCHES_NOTHING,
                        format!("selector `{sel}` reaches only explicit-only ops, which an allow mounts only by exact id, and coding agents' ops, which only a rule with an `agents:` scope mounts"),
                        at,
                        Some(written.span),
                    )
                    .with_fix("name each op by its exact id, and give a rule allowing agents an `agents:` scope"),
                );
            }
            if r.effect == RuleEffect::Allow && *sel == Selector::All {
                self.push(Diagnostic::error(
                    codes::LINT_ALLOW_ALL,
                    "a rule allows every op (`*`)",
                    format!("{}.allow[{si}]", cr.location),
                    Some(written.span),
                ));
            }
        }
    }

    /// `policy.scope_required`: one error per kind of scope the rule's ops need and it lacks
    /// (every call of those ops is refused).
    fn missing_scopes(&mut self, r: &Rule, loc: &str, span: Option<Span>) {
        let mut missing: Vec<(ScopeKind, String)> = Vec::new();
        for op in self.ops_mounted_by(r) {
            for k in op.required_scopes() {
                let present = match k {
                    ScopeKind::Paths => r.paths.is_some(),
                    ScopeKind::Commands => r.commands.is_some(),
                    ScopeKind::Urls => r.urls.is_some(),
                    ScopeKind::Agents => r.agents.is_some(),
                };
                if !present {
                    missing.push((k, op.id.to_string()));
                }
            }
        }
        for k in [
            ScopeKind::Paths,
            ScopeKind::Commands,
            ScopeKind::Urls,
            ScopeKind::Agents,
        ] {
            let ops: Vec<&str> = missing
                .iter()
                .filter(|(m, _)| *m == k)
                .map(|(_, o)| o.as_str())
                .collect();
            if !ops.is_empty() {
                self.push(
                    Diagnostic::error(
                        codes::POLICY_SCOPE_REQUIRED,
                        format!(
                            "the rule allows {} without a `{}:` scope, so every call is refused",
                            ops.iter()
                                .map(|o| format!("`{o}`"))
                                .collect::<Vec<_>>()
                                .join(", "),
                            k.key()
                        ),
                        loc,
                        span,
                    )
                    .with_fix(match k {
                        ScopeKind::Paths => "add `paths: {roots: [/workspace]}`",
                        ScopeKind::Commands => {
                            "add `commands: {allow: [\"pytest ...\"], cwd: /workspace}`"
                        }
                        ScopeKind::Urls => "add `urls: {hosts: [api.example.com]}`",
                        ScopeKind::Agents => "add `agents: {workdir: /workspace}`",
                    }),
                );
            }
        }
    }

    fn allow_rule(&mut self, i: usize, r: &Rule) {
        let (loc, span) = self.rule_place(i);
        let cr = self.config_rule(i);
        let scope_span = |k: ScopeKind| {
            cr.and_then(|c| match k {
                ScopeKind::Paths => c.paths.as_ref().map(|s| s.span),
                ScopeKind::Commands => c.commands.as_ref().map(|s| s.span),
                ScopeKind::Urls => c.urls.as_ref().map(|s| s.span),
                ScopeKind::Agents => c.agents.as_ref().map(|s| s.span),
            })
            .or(span)
        };
        self.missing_scopes(r, &loc, span);
        let is_full_access = self
            .l
            .origins
            .get(i)
            .is_some_and(|o| o.preset == Some("full_access"));
        if let Some(p) = &r.paths {
            let s = p.spec();
            if !is_full_access
                && s.roots
                    .iter()
                    .any(|root| NormPath::new(root).is_some_and(|n| n.parts.is_empty()))
            {
                self.push(Diagnostic::error(
                    codes::LINT_ROOT_IS_SLASH,
                    "a path scope has `/` as a root",
                    format!("{loc}.paths"),
                    scope_span(ScopeKind::Paths),
                ));
            }
            if s.symlinks == SymlinkMode::Follow {
                self.push(Diagnostic::error(
                    codes::LINT_SYMLINKS_FOLLOW,
                    "the path scope follows symlinks out of its roots",
                    format!("{loc}.paths.symlinks"),
                    scope_span(ScopeKind::Paths),
                ));
            }
            if s.unsafe_ && !is_full_access {
                self.push(Diagnostic::error(
                    codes::LINT_FULL_ACCESS,
                    "a path scope sets `unsafe: true`",
                    format!("{loc}.paths.unsafe"),
                    scope_span(ScopeKind::Paths),
                ));
            }
        }
        if let Some(c) = &r.commands {
            let s = c.spec();
            if s.shell {
                self.push(Diagnostic::error(
                    codes::LINT_SHELL,
                    "the command scope enables the shell",
                    format!("{loc}.commands.shell"),
                    scope_span(ScopeKind::Commands),
                ));
            }
            for (pi, pat) in c.allow_patterns().iter().enumerate() {
                let pattern_span = cr
                    .and_then(|c| c.command_allow_spans.get(pi).copied())
                    .or_else(|| scope_span(ScopeKind::Commands));
                let program = pat.program().rsplit('/').next().unwrap_or("");
                let free = pat.tokens().iter().skip(1).any(|t| {
                    matches!(t, ArgPattern::Rest | ArgPattern::Glob(..))
                        || (matches!(t, ArgPattern::Path) && is_interpreter(program))
                });
                if !is_full_access && is_escape_capable(program) && (free || program == "env") {
                    self.push(Diagnostic::error(
                        codes::LINT_ESCAPE_CAPABLE_COMMAND,
                        format!(
                            "`{}` lets the caller run anything `{program}` can",
                            pat.as_written()
                        ),
                        format!("{loc}.commands.allow[{pi}]"),
                        pattern_span,
                    ));
                }
                if s.cwd.is_none() && pat.tokens().iter().any(|t| matches!(t, ArgPattern::Path)) {
                    self.push(Diagnostic::warning(
                        codes::LINT_PATH_WITHOUT_CWD,
                        format!("`{}` has `{{path}}` but the scope has no cwd to jail it, so it never matches", pat.as_written()),
                        format!("{loc}.commands.allow[{pi}]"),
                        pattern_span,
                    ));
                }
            }
            for (k, v) in &s.env_set {
                if looks_secret_name(k) && !v.is_empty() {
                    self.push(Diagnostic::error(
                        codes::LINT_LITERAL_SECRET,
                        format!("`env_set` writes the value of `{k}` into the config"),
                        format!("{loc}.commands.env_set.{k}"),
                        scope_span(ScopeKind::Commands),
                    ));
                }
            }
        }
        if let Some(u) = &r.urls
            && !u.spec().block_private
        {
            self.push(Diagnostic::error(
                codes::LINT_BLOCK_PRIVATE_OFF,
                "the url scope can reach loopback, private and metadata addresses",
                format!("{loc}.urls.block_private"),
                scope_span(ScopeKind::Urls),
            ));
        }
    }

    fn shadowed(&mut self) {
        let rules = &self.l.policy.rules;
        for (i, r) in rules.iter().enumerate() {
            if r.effect != RuleEffect::Allow {
                continue;
            }
            let ops = self.ops_mounted_by(r);
            if ops.is_empty() {
                continue;
            }
            let by_deny = rules.iter().enumerate().find(|(_, d)| {
                d.effect == RuleEffect::Deny
                    && !d.is_scoped()
                    && (d.principals.is_empty()
                        || (!r.principals.is_empty()
                            && r.principals.iter().all(|p| d.principals.contains(p))))
                    && ops
                        .iter()
                        .all(|op| d.selectors.iter().any(|s| s.reaches(op)))
            });
            let by_allow = rules[..i].iter().enumerate().find(|(_, e)| {
                e.effect == RuleEffect::Allow
                    && e.selectors == r.selectors
                    && e.principals == r.principals
                    && e.paths.as_ref().map(|p| p.spec()) == r.paths.as_ref().map(|p| p.spec())
                    && e.commands.as_ref().map(|c| c.spec())
                        == r.commands.as_ref().map(|c| c.spec())
                    && e.urls.as_ref().map(|u| u.spec()) == r.urls.as_ref().map(|u| u.spec())
            });
            let (loc, span) = self.rule_place(i);
            if let Some((j, d)) = by_deny {
                self.push(Diagnostic::warning(
                    codes::LINT_SHADOWED_RULE,
                    format!("the rule can never allow anything: deny rule `{}` refuses every op it mounts", d.name),
                    loc,
                    span,
                ).with_fix(format!("remove this rule, or narrow `{}` (at {})", d.name, self.rule_place(j).0)));
            } else if let Some((_, e)) = by_allow {
                self.push(Diagnostic::warning(
                    codes::LINT_SHADOWED_RULE,
                    format!("the rule repeats `{}`, which always decides first", e.name),
                    loc,
                    span,
                ));
            }
        }
    }

    fn writable_scripts(&mut self) {
        let rules = &self.l.policy.rules;
        let writers: Vec<(&Rule, Vec<&OpSpec>)> = rules
            .iter()
            .filter(|w| w.effect == RuleEffect::Allow)
            .map(|w| {
                let ops = self
                    .ops_mounted_by(w)
                    .into_iter()
                    .filter(|op| {
                        op.effective_effects().contains(Effect::Write)
                            && op
                                .params
                                .iter()
                                .any(|p| matches!(p.kind, ParamKind::Path { root: None }))
                    })
                    .collect();
                (w, ops)
            })
            .filter(|(_, ops): &(&Rule, Vec<&OpSpec>)| !ops.is_empty())
            .collect();
        for (i, r) in rules.iter().enumerate() {
            let Some(c) = r
                .commands
                .as_ref()
                .filter(|_| r.effect == RuleEffect::Allow)
            else {
                continue;
            };
            let cwd = c.spec().cwd.clone();
            for pat in c.allow_patterns() {
                for tok in pat.tokens() {
                    let ArgPattern::Literal(t) = tok else {
                        continue;
                    };
                    if !looks_like_file(t) {
                        continue;
                    }
                    let abs = if t.starts_with('/') {
                        t.clone()
                    } else if let Some(cwd) = &cwd {
                        format!("{cwd}/{t}")
                    } else {
                        continue;
                    };
                    let Some(path) = NormPath::new(&abs) else {
                        continue;
                    };
                    let hit = writers.iter().find(|(w, _)| {
                        principals_overlap(r, w)
                            && w.paths.as_ref().is_some_and(|p| {
                                !p.spec().readonly
                                    && p.may_contain(&path.parts)
                                    && p.admit(&path, &Principal::new("*", &[]))
                                        != Err(corral_policy::scope::PathRefusal::Denied)
                            })
                    });
                    if let Some((w, ops)) = hit {
                        let (loc, rule_span) = self.rule_place(i);
                        let span = self
                            .config_rule(i)
                            .and_then(|c| c.commands.as_ref().map(|s| s.span))
                            .or(rule_span);
                        self.push(Diagnostic::error(
                            codes::LINT_WRITABLE_SCRIPT,
                            format!(
                                "`{}` runs `{}`, which rule `{}` lets callers write with {}",
                                pat.as_written(),
                                path.absolute,
                                w.name,
                                ops.iter()
                                    .map(|o| format!("`{}`", o.id))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                            format!("{loc}.commands"),
                            span,
                        ));
                    }
                }
            }
        }
    }

    /// `contained: true` vouches that the op's writes stay in the run's workspace: a claim the
    /// lint names (what it makes replay-safe, or that it has no effect).
    fn contained_op(&mut self, c: &CustomOpConfig, at: &str) {
        let read_write = c.effects.as_ref().is_some_and(|e| {
            !e.is_empty() && e.iter().all(|x| matches!(x, Effect::Read | Effect::Write))
        });
        let what = if read_write {
            "it vouches that the op's writes land only in the run's ephemeral workspace, which makes it replay-safe: shadow evaluations (replays with the real tools) run it for real, so a wrong claim lets a replay write for real wherever the op writes"
        } else {
            "it vouches only that the op's writes land in the run's ephemeral workspace, and the op declares effects beyond reading and writing (or none), so it stays unsafe for replay and the claim has no effect"
        };
        self.push(
            Diagnostic::warning(
                codes::LINT_OP_CONTAINED,
                format!("custom op `{}` declares `contained: true`: {what}", c.id.value),
                at.to_owned(),
                Some(c.id.span),
            )
            .with_fix(
                "keep it only if the program writes nowhere but the run's workspace (its `write_paths:`); otherwise remove `contained: true`",
            ),
        );
    }

    fn custom_op(&mut self, c: &CustomOpConfig) {
        let at = format!("custom.{}", c.id.value);
        if c.effects.as_ref().is_none_or(Vec::is_empty) {
            self.push(Diagnostic::warning(
                codes::LINT_CUSTOM_OP_WITHOUT_EFFECTS,
                format!("custom op `{}` declares no effects, so it is treated as admin and explicit-only", c.id.value),
                at.clone(),
                Some(c.id.span),
            ));
        }
        if c.contained {
            self.contained_op(c, &at);
        }
        let root = self.l.config.root.as_ref().map(|r| r.value.as_str());
        if c.writes() && c.write_paths.is_empty() && !c.params.iter().any(|p| p.writable) {
            let (what, fix) = match c.workdir(root) {
                Some(cwd) => (
                    format!("so its cwd `{cwd}` is writable"),
                    format!("declare `write_paths: [{cwd}]` or a narrower directory"),
                ),
                None => (
                    "and has no cwd, so it can write nowhere but its private `/tmp`".to_owned(),
                    "declare `write_paths:` (or `cwd:`) for where it writes".to_owned(),
                ),
            };
            self.push(
                Diagnostic::warning(
                    codes::LINT_CUSTOM_WRITE_IMPLICIT,
                    format!(
                        "custom op `{}` has the write effect and declares no write path, {what}",
                        c.id.value
                    ),
                    at.clone(),
                    Some(c.id.span),
                )
                .with_fix(fix),
            );
        }
        let mut visible: Vec<String> = c.workdir(root).into_iter().collect();
        visible.extend(c.read_paths.iter().map(|p| p.value.clone()));
        visible.extend(c.write_paths.iter().map(|p| p.value.clone()));
        for p in &c.params {
            if let ParamKind::Path { root: Some(r) } = &p.kind
                && !visible
                    .iter()
                    .any(|v| std::path::Path::new(r).starts_with(v))
            {
                self.push(
                    Diagnostic::warning(
                        codes::LINT_CUSTOM_PARAM_OUTSIDE_PATHS,
                        format!(
                            "param `{}` of `{}` has root `{r}`, outside its cwd and declared paths: the program sees only the file each call passes",
                            p.name.value, c.id.value
                        ),
                        format!("{at}.params.{}.root", p.name.value),
                        Some(p.name.span),
                    )
                    .with_fix(format!("add `{r}` to `read_paths:` if the program needs the rest of it")),
                );
            }
            let typed_path = matches!(p.kind, ParamKind::Path { .. });
            if typed_path {
                continue;
            }
            let name_like = words(&p.name.value)
                .iter()
                .any(|w| PATH_LIKE.contains(&w.as_str()));
            let placed_in_path = c.argv.iter().any(|t| {
                let ph = format!("{{{}}}", p.name.value);
                t.value.contains(&ph)
                    && (t.value.contains(&format!("/{ph}"))
                        || t.value.contains(&format!("{ph}/"))
                        || t.value.contains(&format!("={ph}")) && name_like)
            });
            if name_like || placed_in_path {
                self.push(Diagnostic::error(
                    codes::LINT_UNDECLARED_PATH_PARAM,
                    format!(
                        "param `{}` of `{}` looks like a path but is typed `{}`",
                        p.name.value,
                        c.id.value,
                        p.kind.name()
                    ),
                    format!("{at}.params.{}", p.name.value),
                    Some(p.name.span),
                ));
            }
        }
        let mounted = self.l.policy.rules.iter().any(|r| {
            r.effect == RuleEffect::Allow
                && self
                    .l
                    .catalog
                    .get(&c.id.value)
                    .is_some_and(|op| r.selectors.iter().any(|s| s.mounts(op)))
        });
        if !mounted {
            self.push(Diagnostic::warning(
                codes::LINT_UNMOUNTED_CUSTOM_OP,
                format!(
                    "custom op `{}` is defined but no rule mounts it",
                    c.id.value
                ),
                at,
                Some(c.id.span),
            ));
        }
    }

    /// Upstream tools without declared effects are `admin` and explicit-only, and a server
    /// with no declared tool offers nothing any rule can name.
    fn mcp_server(&mut self, s: &crate::model::McpServerConfig) {
        let at = format!("mcp_servers.{}", s.name.value);
        if s.tools.is_empty() {
            self.push(
                Diagnostic::warning(
                    codes::LINT_UPSTREAM_TOOL_UNDECLARED,
                    format!(
                        "upstream MCP server `{}` declares no tools: every tool it lists is treated as admin and explicit-only, and no rule can name one",
                        s.name.value
                    ),
                    at.clone(),
                    Some(s.name.span),
                )
                .with_fix(format!(
                    "declare each tool you want under `{at}.tools.<tool>: {{effects: [read]}}` and allow `mcp.{}.<tool>` in a rule",
                    s.name.value
                )),
            );
        }
        for t in &s.tools {
            if t.effects.as_ref().is_none_or(Vec::is_empty) {
                self.push(
                    Diagnostic::warning(
                        codes::LINT_UPSTREAM_TOOL_UNDECLARED,
                        format!(
                            "tool `{}` of upstream MCP server `{}` declares no effects, so it is treated as admin and explicit-only",
                            t.name.value, s.name.value
                        ),
                        format!("{at}.tools.{}", t.name.value),
                        Some(t.name.span),
                    )
                    .with_fix("declare what it does: `effects: [read]`, `[write]`, `[net]`, ... (corral never takes them from the upstream)"),
                );
            }
        }
    }

    fn state_only(&mut self) {
        let listed = |id: &str| self.l.config.state_only.iter().any(|s| s.op.value == id);
        let mut found = Vec::new();
        for c in &self.l.config.custom {
            let read_only = c
                .effects
                .as_ref()
                .is_some_and(|e| !e.is_empty() && e.iter().all(|x| *x == Effect::Read));
            if read_only && looks_mutating(&c.id.value) && !listed(&c.id.value) {
                found.push(Diagnostic::error(
                    codes::LINT_MUTATING_NAME,
                    format!("`{}` is named like a change but declares only `read`; every gate would treat it as a lookup", c.id.value),
                    format!("custom.{}.effects", c.id.value),
                    Some(c.id.span),
                ));
            }
        }
        for s in &self.l.config.state_only {
            let needed = self.l.config.custom.iter().any(|c| {
                c.id.value == s.op.value
                    && looks_mutating(&c.id.value)
                    && c.effects
                        .as_ref()
                        .is_some_and(|e| !e.is_empty() && e.iter().all(|x| *x == Effect::Read))
            });
            if !needed {
                found.push(Diagnostic::error(
                    codes::LINT_STALE_STATE_ONLY,
                    format!(
                        "`state_only` lists `{}`, which is not a read-only op with a mutating name",
                        s.op.value
                    ),
                    format!("state_only.{}", s.op.value),
                    Some(s.op.span),
                ));
            }
        }
        self.out.extend(found);
    }

    /// `confirm: never` (a warning on every rule that sets it) and a token without a tier role
    /// while RBAC by tier is on (a warning).
    fn guardrails(&mut self) {
        let mut preset_ops: Vec<Vec<String>> = vec![Vec::new(); self.l.config.presets.len()];
        for (i, r) in self.l.policy.rules.iter().enumerate() {
            let confirm_tier: Vec<String> = self
                .ops_mounted_by(r)
                .into_iter()
                .filter(|op| op.tier() == Tier::Confirm)
                .map(|op| format!("`{}`", op.id))
                .collect();
            if let Some(o) = self.l.origins.get(i)
                && o.confirm_never
                && o.preset.is_some()
                && let Some(pi) = self
                    .l
                    .config
                    .presets
                    .iter()
                    .position(|p| Some(p.span) == o.span)
                && let Some(ops) = preset_ops.get_mut(pi)
            {
                ops.extend(confirm_tier.iter().cloned());
            }
            let Some(cr) = self.config_rule(i) else {
                continue;
            };
            let Some(span) = cr.confirm_never else {
                continue;
            };
            let message = if confirm_tier.is_empty() {
                "`confirm: never` has no effect: the rule allows no confirm-tier op".to_owned()
            } else {
                format!(
                    "`confirm: never`: {} run without a human's approval when this rule allows them",
                    confirm_tier.join(", ")
                )
            };
            let at = format!("{}.confirm", cr.location);
            self.push(unattended(message, cr.reason.as_deref(), at, span));
        }
        for (p, mut ops) in self.l.config.presets.iter().zip(preset_ops) {
            let Some(span) = p.confirm_never else {
                continue;
            };
            ops.sort();
            ops.dedup();
            let message = if ops.is_empty() {
                format!(
                    "`confirm: never` has no effect: preset `{}` allows no confirm-tier op",
                    p.preset.name()
                )
            } else {
                format!(
                    "`confirm: never`: {} run without a human's approval when preset `{}` allows them (its destructive ops stay confirmed)",
                    ops.join(", "),
                    p.preset.name()
                )
            };
            self.push(unattended(
                message,
                p.reason.as_deref(),
                "preset.confirm".to_owned(),
                span,
            ));
        }
        // issue 11 item 7: RBAC by tier is on whenever a principal can carry a tier role, and
        // then a token without one is refused every call.
        if let Some(cause) = self.l.rbac_cause() {
            for (i, t) in self.l.config.auth.tokens.iter().enumerate() {
                if Role::highest_of(&t.roles).is_none() {
                    self.push(Diagnostic::warning(
                        codes::LINT_RBAC_NO_TIER_ROLE,
                        format!(
                            "token `{}` has no tier role, and RBAC by tier is on ({cause}), so every call it makes is refused with `rbac.denied`",
                            t.id.value
                        ),
                        format!("auth.tokens[{i}]"),
                        Some(t.id.span),
                    ));
                }
            }
        }
    }

    /// `console.sign_in_rate: off` leaves the console's sign-in unlimited.
    fn console(&mut self) {
        if self.l.config.console.sign_in_limit().is_none() {
            self.push(Diagnostic::warning(
                codes::LINT_CONSOLE_SIGN_IN_UNLIMITED,
                "`console.sign_in_rate: off`: nothing limits how many tokens one client may try \
                 at the web console's sign-in",
                "console.sign_in_rate",
                None,
            ));
        }
    }

    fn auth(&mut self) {
        let tokens = &self.l.config.auth.tokens;
        let jwt = self.l.config.auth.jwt.is_some();
        if tokens.is_empty() && !jwt {
            let risky = self.l.open_mode_risky_ops();
            if risky.is_empty() {
                self.push(Diagnostic::note(
                    codes::LINT_OPEN_MODE,
                    "no auth tokens: open mode, so `corral serve` accepts any local caller on loopback only",
                    "auth",
                    None,
                ));
            } else {
                self.push(Diagnostic::error(
                    codes::LINT_OPEN_MODE,
                    format!(
                        "no auth tokens while {} can run programs: the server refuses to start",
                        risky.join(", ")
                    ),
                    "auth",
                    None,
                ));
            }
        }
        for (i, t) in tokens.iter().enumerate() {
            if let Some(run) = &t.run
                && t.kind == PrincipalKind::Human
            {
                self.push(
                    Diagnostic::warning(
                        codes::LINT_RUN_TOKEN_HUMAN,
                        format!(
                            "token `{}` is scoped to run `{}`, so an agent calls with it; as kind `human` it may approve its own confirmations",
                            t.id.value, run.value
                        ),
                        format!("auth.tokens[{i}]"),
                        Some(t.id.span),
                    )
                    .with_fix("add `kind: service` (or `delegated`) to the token"),
                );
            }
        }
        let rules: Vec<&RuleConfig> = self.l.config.rules.iter().collect();
        for r in rules {
            for (pi, p) in r.principals.iter().enumerate() {
                let Ok(sel) = PrincipalSelector::parse(&p.value) else {
                    continue;
                };
                let reachable = match &sel {
                    PrincipalSelector::Id(id) => tokens.iter().any(|t| &t.id.value == id),
                    PrincipalSelector::Role(role) => tokens.iter().any(|t| t.roles.contains(role)),
                    PrincipalSelector::Kind(k) => tokens.iter().any(|t| t.kind == *k),
                    PrincipalSelector::AnyAuthenticated => !tokens.is_empty(),
                };
                if !reachable && !jwt {
                    self.push(Diagnostic::warning(
                        codes::LINT_UNREACHABLE_PRINCIPAL,
                        format!(
                            "no token produces `{sel}`, so this part of the rule never matches"
                        ),
                        format!("{}.principals[{pi}]", r.location),
                        Some(p.span),
                    ));
                }
            }
        }
    }

    fn secrets(&mut self) {
        let mut strings = Vec::new();
        self.l.tree.strings(&mut strings);
        for (s, span) in strings {
            if looks_like_secret_value(&s) {
                self.push(Diagnostic::error(
                    codes::LINT_LITERAL_SECRET,
                    "a value looks like a credential written into the config",
                    "",
                    Some(span),
                ));
            }
        }
    }
}

/// A program name without a version suffix (`python3.11` -> `python`, `node18` -> `node`).
fn unversioned(p: &str) -> &str {
    p.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.')
}

fn is_escape_capable(p: &str) -> bool {
    ESCAPE_CAPABLE.contains(&p) || ESCAPE_CAPABLE.contains(&unversioned(p))
}

fn is_interpreter(p: &str) -> bool {
    is_interpreter_name(p) || is_interpreter_name(unversioned(p))
}

fn is_interpreter_name(p: &str) -> bool {
    matches!(
        p,
        "python"
            | "python2"
            | "python3"
            | "node"
            | "nodejs"
            | "deno"
            | "bun"
            | "ruby"
            | "perl"
            | "php"
            | "lua"
            | "sh"
            | "bash"
            | "zsh"
            | "dash"
            | "ksh"
            | "fish"
    )
}

fn looks_like_file(t: &str) -> bool {
    t.contains('/')
        || [
            ".py", ".sh", ".js", ".mjs", ".ts", ".rb", ".pl", ".php", ".lua", ".bash",
        ]
        .iter()
        .any(|ext| t.ends_with(ext))
        || t == "Makefile"
}

fn looks_secret_name(k: &str) -> bool {
    let u = k.to_ascii_uppercase();
    [
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "API_KEY",
        "APIKEY",
        "PRIVATE_KEY",
        "CREDENTIAL",
    ]
    .iter()
    .any(|w| u.contains(w))
}

/// Whether a string looks like a credential (well-known token prefixes, PEM blocks, JWTs), on
/// its own or as one word of a longer value (`--token=ghp_...`, `Bearer sk-...`).
pub fn looks_like_secret_value(s: &str) -> bool {
    (s.contains("-----BEGIN ") && s.contains("PRIVATE KEY"))
        || looks_like_secret_word(s)
        || s.split(|c: char| {
            c.is_whitespace() || matches!(c, '=' | ':' | ',' | ';' | '"' | '\'' | '@' | '/')
        })
        .any(|w| w.len() < s.len() && looks_like_secret_word(w))
}

fn looks_like_secret_word(s: &str) -> bool {
    let alnum_tail = |prefix: &str, min: usize| {
        s.strip_prefix(prefix).is_some_and(|rest| {
            rest.len() >= min
                && rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
    };
    alnum_tail("sk-", 20)
        || alnum_tail("ghp_", 30)
        || alnum_tail("gho_", 30)
        || alnum_tail("ghs_", 30)
        || alnum_tail("github_pat_", 30)
        || alnum_tail("glpat-", 20)
        || alnum_tail("xoxb-", 20)
        || alnum_tail("xoxp-", 20)
        || (s.len() == 20
            && s.starts_with("AKIA")
            && s.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()))
        || (s.starts_with("eyJ") && s.len() > 40 && s.matches('.').count() == 2 && !s.contains(' '))
}

/// Lints a loaded config. Findings are sorted by position.
pub fn lint(loaded: &Loaded) -> Vec<Diagnostic> {
    Linter {
        l: loaded,
        out: Vec::new(),
    }
    .run()
}

/// Whether the findings hold a config error rather than a lint finding: an error whose code is
/// not a `lint.*` code (such as `policy.scope_required`: the config loads, but a rule refuses
/// every call). `check-config` exits 2 for these, as for a file that does not load.
pub fn has_config_error(findings: &[Diagnostic]) -> bool {
    findings
        .iter()
        .any(|d| d.severity == Severity::Error && !d.code.starts_with("lint."))
}

/// Whether findings fail the check: any error, or any warning under `--strict`.
pub fn fails(findings: &[Diagnostic], strict: bool) -> bool {
    findings.iter().any(|d| match d.severity {
        Severity::Error => true,
        Severity::Warning => strict,
        Severity::Note => false,
    })
}

impl Linter<'_> {
    /// A note for each root (the top-level `root`, a preset's, a rule's `paths.roots`) that does
    /// not exist on this host; for a `{principal.id}` root, its fixed part. A note, not a
    /// warning: the config is right, the host (maybe another one than the serving host) is not
    /// ready yet.
    fn missing_roots(&mut self) {
        let c = &self.l.config;
        let mut roots: Vec<(String, String, Option<Span>)> = Vec::new();
        if let Some(r) = &c.root {
            roots.push((r.value.clone(), "root".to_owned(), Some(r.span)));
        }
        for p in &c.presets {
            if let Some(r) = &p.options.root {
                roots.push((r.clone(), "preset.root".to_owned(), Some(p.span)));
            }
        }
        for r in &c.rules {
            if let Some(paths) = &r.paths {
                for root in &paths.value.roots {
                    roots.push((
                        root.clone(),
                        format!("{}.paths", r.location),
                        Some(paths.span),
                    ));
                }
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for (root, at, span) in roots {
            // The fixed part of a templated root (`/home/{principal.id}` -> `/home`).
            let fixed: Vec<&str> = root.split('/').take_while(|c| !c.contains('{')).collect();
            let fixed = fixed.join("/");
            if fixed.is_empty() || !seen.insert(fixed.clone()) {
                continue;
            }
            if std::path::Path::new(&fixed).exists() {
                continue;
            }
            self.push(
                Diagnostic::note(
                    codes::LINT_ROOT_MISSING,
                    format!(
                        "`{fixed}` does not exist on this host: every call under it fails `files.not_found` until it does"
                    ),
                    at,
                    span,
                )
                .with_fix(format!("create it (`mkdir -p {fixed}`) where corral serves, or fix the path")),
            );
        }
    }
}

/// The finding of a `confirm: never`: a warning, or, when `reason` says why it runs unattended
/// on purpose, a note quoting it (`check-config --strict` passes).
fn unattended(message: String, reason: Option<&str>, at: String, span: Span) -> Diagnostic {
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(why) => Diagnostic::note(
            codes::LINT_CONFIRM_NEVER,
            format!("{message}; unattended on purpose: {why:?}"),
            at,
            Some(span),
        ),
        None => Diagnostic::warning(codes::LINT_CONFIRM_NEVER, message, at, Some(span))
            .with_fix(
                "if this runs unattended on purpose, say why with `reason:` beside `confirm: never` (the finding becomes a note); else remove `confirm: never` so that a person approves each call",
            ),
    }
}

#[cfg(test)]
mod tests {
    use super::looks_mutating;

    #[test]
    fn versioned_interpreters_are_interpreters() {
        for p in ["python3.11", "node18", "bash5", "perl5.36", "ruby3.2"] {
            assert!(super::is_escape_capable(p), "{p}");
            assert!(super::is_interpreter(p), "{p}");
        }
        for p in ["pytest", "cargo-nextest", "x2", "7z"] {
            assert!(!super::is_escape_capable(p), "{p}");
        }
    }

    #[test]
    fn secrets_are_found_inside_longer_values() {
        use super::looks_like_secret_value as secret;
        let ghp = "ghp_0123456789abcdefghijklmnopqrstuvwxyz";
        assert!(secret(ghp));
        assert!(secret(&format!("--token={ghp}")));
        assert!(secret(
            "Authorization: Bearer sk-abcdefghijklmnopqrstuvwxyz"
        ));
        assert!(secret(&format!("https://x:{ghp}@github.com/o/r")));
        assert!(!secret("sk-learn and ghp_short are words"));
        assert!(!secret("--token=$GITHUB_TOKEN"));
    }

    #[test]
    fn mutating_names_are_recognised_and_read_verbs_win() {
        for m in [
            "kafka.delete_topic",
            "deploy.scale",
            "db.dropTable",
            "svc.restart",
            "jobs.run",
        ] {
            assert!(looks_mutating(m), "{m}");
        }
        for r in [
            "kafka.list_topics",
            "deploy.status",
            "db.describe_drop_policy",
            "runner.get_runs",
            "files.read",
        ] {
            assert!(!looks_mutating(r), "{r}");
        }
    }
}
