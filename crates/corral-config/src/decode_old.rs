#![allow(dead_code, clippy::all)]
//! Decodes the spanned YAML tree into the typed `Config`, collecting every error (unknown keys
//! with the closest valid key, wrong types, malformed sizes, durations and rates).

use std::time::Duration;

use corral_policy::codes;
use corral_policy::presets::{Preset, PresetOptions};
use corral_policy::scope::{
    CommandScopeSpec, EgressAllowList, EgressEntry, NetworkSpec, PathScopeSpec, SymlinkMode,
    UrlScopeSpec,
};
use corral_policy::suggest::closest;
use corral_policy::units::{Rate, parse_duration, parse_size};
use corral_policy::{
    AutonomyLevel, Effect, Limits, ParamKind, PrincipalKind, PrincipalSelector, Role, RuleEffect,
    Tier,
};

use crate::diag::Diagnostic;
use crate::model::{
    AuditConfig, AuditSink, AuthConfig, AutonomyConfig, AutonomyPin, BackendKind, BudgetsConfig,
    Config, ConfirmationBackend, CustomOpConfig, GuardrailsConfig, GuardrailsMode, JwtSpec,
    McpConfig, McpServerConfig, McpToolConfig, NetworkMode, ParamConfig, PresetUse, RolesConfig,
    RuleConfig, RunConfig, RunProfile, Spanned, StateOnlyEntry, StorageConfig, TokenConfig,
};
use crate::yaml::{Key, Node, Span, Value};

/// Every key the decoder knows, list by list (the no-panic test draws documents from them).
#[cfg(test)]
pub(crate) const ALL_KEYS: &[&[&str]] = &[
    TOP_KEYS,
    AUTONOMY_KEYS,
    PIN_KEYS,
    ROLES_KEYS,
    GUARDRAILS_KEYS,
    BUDGET_KEYS,
    RULE_KEYS,
    PATH_KEYS,
    COMMAND_KEYS,
    URL_KEYS,
    LIMIT_KEYS,
    CUSTOM_KEYS,
    MCP_KEYS,
    MCP_SERVER_KEYS,
    MCP_TOOL_KEYS,
    RUN_KEYS,
    RUN_LIMIT_KEYS,
    PARAM_KEYS,
    JWT_KEYS,
    TOKEN_KEYS,
    PRESET_KEYS,
];

const TOP_KEYS: &[&str] = &[
    "version",
    "preset",
    "root",
    "state_dir",
    "enable",
    "disable",
    "rules",
    "custom",
    "auth",
    "audit",
    "storage",
    "limits",
    "state_only",
    "tiers",
    "isolation",
    "autonomy",
    "roles",
    "guardrails",
    "budgets",
    "disabled_ops",
    "protected",
    "mcp_servers",
    "mcp",
    "run",
];
const RUN_KEYS: &[&str] = &["profile", "read", "write", "network", "env", "limits"];
const RUN_LIMIT_KEYS: &[&str] = &["memory", "processes", "timeout", "write_quota"];
const MCP_KEYS: &[&str] = &["allowed_hosts", "allowed_origins"];
const MCP_SERVER_KEYS: &[&str] = &[
    "command",
    "env_pass",
    "read_paths",
    "write_paths",
    "cwd",
    "call_timeout",
    "memory",
    "processes",
    "tools",
    "network",
];
const MCP_TOOL_KEYS: &[&str] = &["effects", "tier", "idempotent"];
const AUTONOMY_KEYS: &[&str] = &["level", "pins"];
const PIN_KEYS: &[&str] = &["principal", "level"];
const ROLES_KEYS: &[&str] = &["overrides"];
const GUARDRAILS_KEYS: &[&str] = &[
    "mode",
    "confirmation_ttl",
    "confirmations",
    "max_pending",
    "replicas",
];
const BUDGET_KEYS: &[&str] = &[
    "max_calls",
    "max_calls_per_op",
    "max_wall_time",
    "max_output_bytes",
];
const RULE_KEYS: &[&str] = &[
    "allow",
    "deny",
    "name",
    "principals",
    "paths",
    "commands",
    "urls",
    "limits",
    "reason",
    "confirm",
];
const PATH_KEYS: &[&str] = &[
    "roots",
    "deny",
    "readonly",
    "symlinks",
    "max_bytes",
    "unsafe",
];
const COMMAND_KEYS: &[&str] = &[
    "allow",
    "deny",
    "shell",
    "cwd",
    "env_pass",
    "env_set",
    "timeout",
    "max_output_bytes",
    "network",
];
const URL_KEYS: &[&str] = &["hosts", "schemes", "ports", "paths", "block_private"];
const LIMIT_KEYS: &[&str] = &[
    "max_bytes",
    "max_entries",
    "timeout",
    "max_output_bytes",
    "rate",
    "concurrency",
    "cpu_seconds",
    "memory",
    "processes",
    "write_quota",
];
const CUSTOM_KEYS: &[&str] = &[
    "argv",
    "params",
    "cwd",
    "read_paths",
    "write_paths",
    "timeout",
    "effects",
    "contained",
    "explicit_only",
    "tier",
    "summary",
    "network",
];
const PARAM_KEYS: &[&str] = &["type", "root", "values", "required", "writable"];
const JWT_KEYS: &[&str] = &[
    "hs256_secret_env",
    "rs256_public_key_file",
    "issuer",
    "audience",
    "roles_claim",
    "tenant_claim",
    "service_claim",
    "run_claim",
];
const TOKEN_KEYS: &[&str] = &["id", "roles", "kind", "token_env", "token", "run"];
const PRESET_KEYS: &[&str] = &[
    "name",
    "root",
    "commands",
    "readonly",
    "writable",
    "timeout",
    "deny",
    "max_bytes",
    "unsafe",
    "confirm",
];

/// Where each allow pattern of a command scope (a list, or a mapping with `allow:`) was written.
fn allow_spans(commands: &Node) -> Vec<Span> {
    let list = match &commands.value {
        Value::Map(entries) => entries
            .iter()
            .find(|(k, _)| k.name == "allow")
            .map(|(_, n)| n),
        Value::Seq(_) => Some(commands),
        Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Str(_) => None,
    };
    match list.map(|n| &n.value) {
        Some(Value::Seq(items)) => items.iter().map(|n| n.span).collect(),
        _ => Vec::new(),
    }
}

/// `0`, or a zero with a unit (`0s`, `0B`): a budget written as disabled.
fn is_zero_quantity(v: &Value) -> bool {
    match v {
        Value::Int(0) => true,
        Value::Str(s) => {
            let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
            !digits.is_empty()
                && digits.chars().all(|c| c == '0')
                && s[digits.len()..].chars().all(|c| c.is_ascii_alphabetic())
        }
        Value::Null
        | Value::Bool(_)
        | Value::Int(_)
        | Value::Float(_)
        | Value::Seq(_)
        | Value::Map(_) => false,
    }
}

/// The decoder: walks the tree and collects diagnostics.
pub(crate) struct Decoder {
    pub diags: Vec<Diagnostic>,
}

/// A mapping being read: its entries, its key path, and which keys were read.
struct MapView<'n> {
    entries: &'n [(Key, Node)],
    path: String,
}

impl<'n> MapView<'n> {
    fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, _)| k.name == key)
            .map(|(_, n)| n)
    }

    fn key_span(&self, key: &str) -> Option<Span> {
        self.entries
            .iter()
            .find(|(k, _)| k.name == key)
            .map(|(k, _)| k.span)
    }

    fn at(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }
}

impl Decoder {
    pub fn new() -> Self {
        Self { diags: Vec::new() }
    }

    fn err(&mut self, code: &'static str, msg: String, at: &str, span: Span) {
        self.diags
            .push(Diagnostic::error(code, msg, at, Some(span)));
    }

    fn err_fix(&mut self, code: &'static str, msg: String, at: &str, span: Span, fix: String) {
        self.diags
            .push(Diagnostic::error(code, msg, at, Some(span)).with_fix(fix));
    }

    fn wrong_type(&mut self, node: &Node, at: &str, expected: &str) {
        self.err_fix(
            codes::CONFIG_INVALID_VALUE,
            format!("expected {expected}, found {}", node.type_name()),
            at,
            node.span,
            format!("write {expected} here"),
        );
    }

    fn map<'n>(&mut self, node: &'n Node, at: &str, known: &[&str]) -> Option<MapView<'n>> {
        let Value::Map(entries) = &node.value else {
            self.wrong_type(node, at, "a mapping");
            return None;
        };
        for (k, _) in entries {
            if !known.contains(&k.name.as_str()) {
                let suggestions = closest(&k.name, known.iter().copied());
                let fix = match suggestions.first() {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!("the keys here are {}", known.join(", ")),
                };
                let loc = if at.is_empty() {
                    k.name.clone()
                } else {
                    format!("{at}.{}", k.name)
                };
                self.err_fix(
                    codes::CONFIG_UNKNOWN_KEY,
                    format!("unknown key `{}`", k.name),
                    &loc,
                    k.span,
                    fix,
                );
            }
        }
        Some(MapView {
            entries,
            path: at.to_owned(),
        })
    }

    fn string(&mut self, node: &Node, at: &str) -> Option<String> {
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            Value::Null
            | Value::Bool(_)
            | Value::Int(_)
            | Value::Float(_)
            | Value::Seq(_)
            | Value::Map(_) => {
                self.wrong_type(node, at, "a string");
                None
            }
        }
    }

    fn spanned_string(&mut self, node: &Node, at: &str) -> Option<Spanned<String>> {
        self.string(node, at).map(|s| Spanned::new(s, node.span))
    }

    fn bool(&mut self, node: &Node, at: &str) -> Option<bool> {
        match node.value {
            Value::Bool(b) => Some(b),
            Value::Null
            | Value::Int(_)
            | Value::Float(_)
            | Value::Str(_)
            | Value::Seq(_)
            | Value::Map(_) => {
                self.wrong_type(node, at, "`true` or `false`");
                None
            }
        }
    }

    fn uint(&mut self, node: &Node, at: &str) -> Option<u64> {
        match node.value {
            Value::Int(i) if i >= 0 => Some(i.unsigned_abs()),
            Value::Null
            | Value::Bool(_)
            | Value::Int(_)
            | Value::Float(_)
            | Value::Str(_)
            | Value::Seq(_)
            | Value::Map(_) => {
                self.wrong_type(node, at, "a non-negative integer");
                None
            }
        }
    }

    fn strings(&mut self, node: &Node, at: &str) -> Vec<Spanned<String>> {
        match &node.value {
            Value::Seq(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, n)| self.spanned_string(n, &format!("{at}[{i}]")))
                .collect(),
            Value::Null => Vec::new(),
            Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Str(_) | Value::Map(_) => {
                self.wrong_type(node, at, "a list of strings");
                Vec::new()
            }
        }
    }

    fn plain_strings(&mut self, node: &Node, at: &str) -> Vec<String> {
        self.strings(node, at)
            .into_iter()
            .map(|s| s.value)
            .collect()
    }

    fn unit<T>(
        &mut self,
        node: &Node,
        at: &str,
        parse: impl Fn(&str) -> Result<T, corral_policy::PolicyError>,
        example: &str,
    ) -> Option<T> {
        let Value::Str(s) = &node.value else {
            let code = match example {
                "10MB" => codes::CONFIG_INVALID_SIZE,
                "90s" => codes::CONFIG_INVALID_DURATION,
                _ => codes::CONFIG_INVALID_RATE,
            };
            self.err_fix(
                code,
                format!(
                    "expected a string such as `{example}`, found {}",
                    node.type_name()
                ),
                at,
                node.span,
                format!("write it with its unit, e.g. `{example}`"),
            );
            return None;
        };
        match parse(s) {
            Ok(v) => Some(v),
            Err(e) => {
                let code = e.code();
                let fix = codes::lookup(code)
                    .map(|c| c.fix.to_owned())
                    .unwrap_or_default();
                self.err_fix(code, e.to_string(), at, node.span, fix);
                None
            }
        }
    }

    fn size(&mut self, node: &Node, at: &str) -> Option<u64> {
        self.unit(node, at, parse_size, "10MB")
    }

    fn duration(&mut self, node: &Node, at: &str) -> Option<Duration> {
        self.unit(node, at, parse_duration, "90s")
    }

    fn choice<T: Copy>(&mut self, node: &Node, at: &str, options: &[(&str, T)]) -> Option<T> {
        let s = self.string(node, at)?;
        if let Some((_, v)) = options.iter().find(|(n, _)| *n == s) {
            return Some(*v);
        }
        let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
        let fix = match closest(&s, names.iter().copied()).first() {
            Some(m) => format!("did you mean `{m}`?"),
            None => format!("use one of {}", names.join(", ")),
        };
        self.err_fix(
            codes::CONFIG_INVALID_VALUE,
            format!("`{s}` is not one of {}", names.join(", ")),
            at,
            node.span,
            fix,
        );
        None
    }

    /// Decodes the whole document.
    pub fn config(&mut self, root: &Node) -> Config {
        let mut c = Config::default();
        if matches!(root.value, Value::Null) {
            self.err(
                codes::CONFIG_VERSION,
                "the config is empty".to_owned(),
                "",
                root.span,
            );
            return c;
        }
        let Some(m) = self.map(root, "", TOP_KEYS) else {
            return c;
        };
        match m.get("version") {
            Some(n) if n.value == Value::Int(1) => c.version = 1,
            Some(n) => self.err_fix(
                codes::CONFIG_VERSION,
                "unsupported config version".to_owned(),
                "version",
                n.span,
                "write `version: 1`".to_owned(),
            ),
            None => self.err(
                codes::CONFIG_VERSION,
                "the config has no `version`".to_owned(),
                "version",
                root.span,
            ),
        }
        if let Some(n) = m.get("root") {
            c.root = self.spanned_string(n, "root");
        }
        if let Some(n) = m.get("state_dir") {
            c.state_dir = self.spanned_string(n, "state_dir");
        }
        if let Some(n) = m.get("preset") {
            c.presets = self.presets(n);
        }
        if let Some(n) = m.get("enable") {
            c.enable = self.strings(n, "enable");
        }
        if let Some(n) = m.get("disable") {
            c.disable = self.strings(n, "disable");
        }
        if let Some(n) = m.get("rules") {
            c.rules = self.rules(n);
        }
        if let Some(n) = m.get("custom") {
            c.custom = self.custom(n);
        }
        if let Some(n) = m.get("mcp_servers") {
            c.mcp_servers = self.mcp_servers(n);
        }
        if let Some(n) = m.get("mcp")
            && let Some(mm) = self.map(n, "mcp", MCP_KEYS)
        {
            let mut mcp = McpConfig::default();
            if let Some(h) = mm.get("allowed_hosts") {
                mcp.allowed_hosts = self.strings(h, &mm.at("allowed_hosts"));
                if mcp.allowed_hosts.is_empty() {
                    self.err_fix(
                        codes::CONFIG_INVALID_VALUE,
                        "`mcp.allowed_hosts` is empty, which would let any `Host` reach `/mcp`".to_owned(),
                        "mcp.allowed_hosts",
                        h.span,
                        "list the names clients use (`[corral.example.com, \"corral.example.com:9000\"]`), or remove the key for loopback only".to_owned(),
                    );
                }
            }
            if let Some(o) = mm.get("allowed_origins") {
                mcp.allowed_origins = self.strings(o, &mm.at("allowed_origins"));
            }
            c.mcp = mcp;
        }
        if let Some(n) = m.get("auth") {
            c.auth = self.auth(n);
        }
        if let Some(n) = m.get("audit") {
            c.audit = self.audit(n);
        }
        if let Some(n) = m.get("storage")
            && let Some(sm) = self.map(n, "storage", &["url"])
            && let Some(u) = sm.get("url")
        {
            c.storage = StorageConfig {
                url: self.string(u, "storage.url"),
            };
        }
        if let Some(n) = m.get("limits") {
            c.limits = self.limits(n, "limits");
        }
        if let Some(n) = m.get("isolation")
            && let Some(im) = self.map(
                n,
                "isolation",
                &["backend", "network", "cgroup_parent", "host_uids"],
            )
        {
            if let Some(h) = im.get("host_uids")
                && let Some(v) = self.string(h, "isolation.host_uids")
            {
                let range_ok = v.split_once(':').is_some_and(|(a, b)| {
                    a.parse::<u32>().is_ok_and(|a| a > 0)
                        && b.parse::<u32>().is_ok_and(|b| b >= 65535)
                        && a.parse::<u32>()
                            .ok()
                            .zip(b.parse::<u32>().ok())
                            .is_some_and(|(a, b)| a.checked_add(b).is_some())
                });
                if v == "auto" || v == "root" || range_ok {
                    c.isolation.host_uids = Some(v);
                } else {
                    self.err_fix(
                        codes::CONFIG_INVALID_VALUE,
                        format!("`isolation.host_uids` `{v}` is not a host id mode"),
                        "isolation.host_uids",
                        h.span,
                        "write `auto` (the default), `root`, or `START:COUNT` with START above 0 and COUNT at least 65535, e.g. `1879048192:65536`".to_owned(),
                    );
                }
            }
            if let Some(p) = im.get("cgroup_parent")
                && let Some(v) = self.string(p, "isolation.cgroup_parent")
            {
                if v.starts_with('/') {
                    c.isolation.cgroup_parent = Some(std::path::PathBuf::from(v));
                } else {
                    self.err_fix(
                        codes::CONFIG_INVALID_VALUE,
                        format!("`isolation.cgroup_parent` `{v}` is not an absolute path"),
                        "isolation.cgroup_parent",
                        p.span,
                        "give the cgroup v2 directory's full path, e.g. `/sys/fs/cgroup/corral.slice`".to_owned(),
                    );
                }
            }
            if let Some(b) = im.get("backend") {
                c.isolation.backend = self
                    .choice(
                        b,
                        "isolation.backend",
                        &[
                            ("linux", BackendKind::Linux),
                            ("process", BackendKind::Process),
                        ],
                    )
                    .unwrap_or_default();
            }
            if let Some(nw) = im.get("network") {
                c.isolation.network = self
                    .choice(
                        nw,
                        "isolation.network",
                        &[
                            ("none", NetworkMode::None),
                            ("loopback", NetworkMode::Loopback),
                        ],
                    )
                    .unwrap_or_default();
            }
        }
        if let Some(n) = m.get("state_only")
            && let Some(sm) = self.map_any(n, "state_only")
        {
            for (k, v) in sm {
                let at = format!("state_only.{}", k.name);
                let reason = self.string(v, &at).unwrap_or_default();
                if reason.trim().is_empty() {
                    self.err_fix(
                        codes::CONFIG_MISSING_KEY,
                        format!("`state_only` entry `{}` has no reason", k.name),
                        &at,
                        k.span,
                        "write why the op changes nothing outside the agent's own state".to_owned(),
                    );
                }
                c.state_only.push(StateOnlyEntry {
                    op: Spanned::new(k.name.clone(), k.span),
                    reason,
                });
            }
        }
        if let Some(n) = m.get("tiers")
            && let Some(tm) = self.map_any(n, "tiers")
        {
            let tiers = Tier::ALL.map(|t| (t.as_str(), t));
            for (k, v) in tm {
                if let Some(t) = self.choice(v, &format!("tiers.{}", k.name), &tiers) {
                    c.tiers.push((Spanned::new(k.name.clone(), k.span), t));
                }
            }
        }
        if let Some(n) = m.get("autonomy") {
            c.autonomy = self.autonomy(n);
        }
        if let Some(n) = m.get("roles") {
            c.roles = self.roles(n);
        }
        if let Some(n) = m.get("guardrails") {
            c.guardrails = self.guardrails(n);
        }
        if let Some(n) = m.get("budgets") {
            c.budgets = self.budgets(n);
        }
        if let Some(n) = m.get("protected") {
            c.protected = self.strings(n, "protected");
        }
        if let Some(n) = m.get("disabled_ops") {
            c.disabled_ops = self.strings(n, "disabled_ops");
        }
        if let Some(n) = m.get("run") {
            c.run = self.run(n);
        }
        c
    }

    /// `run:` the profile of `corral run --config F`.
    fn run(&mut self, node: &Node) -> Option<RunConfig> {
        if matches!(node.value, Value::Null) {
            return Some(RunConfig {
                span: node.span,
                ..RunConfig::default()
            });
        }
        let m = self.map(node, "run", RUN_KEYS)?;
        let mut r = RunConfig {
            span: node.span,
            ..RunConfig::default()
        };
        if let Some(p) = m.get("profile") {
            r.profile = self
                .choice(
                    p,
                    "run.profile",
                    &[
                        ("workspace", RunProfile::Workspace),
                        ("readonly", RunProfile::Readonly),
                        ("none", RunProfile::None),
                    ],
                )
                .map(|v| Spanned::new(v, p.span));
        }
        if let Some(n) = m.get("read") {
            r.read = self.strings(n, "run.read");
        }
        if let Some(n) = m.get("write") {
            r.write = self.strings(n, "run.write");
        }
        if let Some(n) = m.get("network") {
            r.network = self.network(n, "run.network");
        }
        if let Some(n) = m.get("env") {
            r.env = self.strings(n, "run.env");
            for (i, e) in r.env.iter().enumerate() {
                let name = e.value.split_once('=').map_or(e.value.as_str(), |(n, _)| n);
                let valid = !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !name.starts_with(|c: char| c.is_ascii_digit());
                if !valid {
                    self.diags.push(
                        Diagnostic::error(
                            codes::CONFIG_INVALID_VALUE,
                            format!(
                                "`{}` is not `NAME` or `NAME=VALUE` with a name of letters, digits and `_`",
                                e.value
                            ),
                            format!("run.env[{i}]"),
                            Some(e.span),
                        )
                        .with_fix(
                            "write `GITHUB_TOKEN` (passes its value from corral's environment) or `LANG=C.UTF-8`",
                        ),
                    );
                }
            }
        }
        if let Some(n) = m.get("limits")
            && let Some(lm) = self.map(n, "run.limits", RUN_LIMIT_KEYS)
        {
            r.memory = lm
                .get("memory")
                .and_then(|v| self.size(v, "run.limits.memory"));
            r.processes = lm.get("processes").and_then(|v| {
                let n = self.uint(v, "run.limits.processes")?;
                match u32::try_from(n) {
                    Ok(p) if p > 0 => Some(p),
                    _ => {
                        self.err_fix(
                            codes::CONFIG_INVALID_VALUE,
                            format!("`{n}` is not a usable process limit"),
                            "run.limits.processes",
                            v.span,
                            "write a number of processes from 1 to 4294967295, e.g. `256`"
                                .to_owned(),
                        );
                        None
                    }
                }
            });
            r.timeout = lm
                .get("timeout")
                .and_then(|v| self.duration(v, "run.limits.timeout"));
            r.write_quota = lm
                .get("write_quota")
                .and_then(|v| self.size(v, "run.limits.write_quota"));
        }
        Some(r)
    }

    fn level(&mut self, node: &Node, at: &str) -> Option<AutonomyLevel> {
        let levels = AutonomyLevel::ALL.map(|l| (l.as_str(), l));
        self.choice(node, at, &levels)
    }

    /// `autonomy: L2` or `autonomy: {level: L3, pins: [{principal: "kind:service", level: L4}]}`.
    fn autonomy(&mut self, node: &Node) -> Option<AutonomyConfig> {
        let mut a = AutonomyConfig {
            span: node.span,
            ..AutonomyConfig::default()
        };
        if let Value::Str(_) = node.value {
            a.level = Some(self.level(node, "autonomy")?);
            return Some(a);
        }
        let m = self.map(node, "autonomy", AUTONOMY_KEYS)?;
        if let Some(l) = m.get("level") {
            a.level = self.level(l, "autonomy.level");
        }
        if let Some(p) = m.get("pins") {
            let Value::Seq(items) = &p.value else {
                self.wrong_type(p, "autonomy.pins", "a list of `{principal, level}`");
                return Some(a);
            };
            for (i, item) in items.iter().enumerate() {
                let at = format!("autonomy.pins[{i}]");
                let Some(pm) = self.map(item, &at, PIN_KEYS) else {
                    continue;
                };
                let (Some(pn), Some(ln)) = (pm.get("principal"), pm.get("level")) else {
                    self.err_fix(
                        codes::CONFIG_MISSING_KEY,
                        "a pin needs `principal` and `level`".to_owned(),
                        &at,
                        item.span,
                        "write `{principal: \"kind:service\", level: L2}`".to_owned(),
                    );
                    continue;
                };
                let level = self.level(ln, &pm.at("level"));
                let Some(who) = self.string(pn, &pm.at("principal")) else {
                    continue;
                };
                let principal = match PrincipalSelector::parse(&who) {
                    Ok(PrincipalSelector::AnyAuthenticated) => {
                        self.err_fix(
                            codes::CONFIG_INVALID_PRINCIPAL,
                            "a pin for every caller (`*`) is a process-wide level".to_owned(),
                            &pm.at("principal"),
                            pn.span,
                            "write it as `autonomy.level`".to_owned(),
                        );
                        continue;
                    }
                    Ok(p) => p,
                    Err(e) => {
                        self.err_fix(
                            e.code(),
                            e.to_string(),
                            &pm.at("principal"),
                            pn.span,
                            e.fix(),
                        );
                        continue;
                    }
                };
                if let Some(level) = level {
                    a.pins.push(AutonomyPin {
                        principal,
                        level,
                        span: item.span,
                    });
                }
            }
        }
        Some(a)
    }

    /// `roles: {overrides: {op_id: viewer|operator|admin}}`; present (even empty) turns RBAC by
    /// tier on.
    fn roles(&mut self, node: &Node) -> Option<RolesConfig> {
        let mut r = RolesConfig {
            span: node.span,
            ..RolesConfig::default()
        };
        if matches!(node.value, Value::Null) {
            return Some(r);
        }
        let m = self.map(node, "roles", ROLES_KEYS)?;
        if let Some(o) = m.get("overrides")
            && let Some(entries) = self.map_any(o, "roles.overrides")
        {
            let roles = Role::ALL.map(|r| (r.as_str(), r));
            for (k, v) in entries {
                if let Some(role) = self.choice(v, &format!("roles.overrides.{}", k.name), &roles) {
                    r.overrides
                        .push((Spanned::new(k.name.clone(), k.span), role));
                }
            }
        }
        Some(r)
    }

    fn guardrails(&mut self, node: &Node) -> GuardrailsConfig {
        let mut g = GuardrailsConfig::default();
        let Some(m) = self.map(node, "guardrails", GUARDRAILS_KEYS) else {
            return g;
        };
        if let Some(n) = m.get("mode") {
            g.mode = self
                .choice(
                    n,
                    "guardrails.mode",
                    &[
                        ("enforce", GuardrailsMode::Enforce),
                        ("dry_run", GuardrailsMode::DryRun),
                    ],
                )
                .unwrap_or_default();
        }
        if let Some(n) = m.get("confirmation_ttl")
            && let Some(ttl) = self.duration(n, "guardrails.confirmation_ttl")
        {
            if ttl < Duration::from_secs(1) {
                self.err_fix(
                    codes::CONFIG_INVALID_VALUE,
                    "`confirmation_ttl` is under one second, so no approval could ever be used"
                        .to_owned(),
                    "guardrails.confirmation_ttl",
                    n.span,
                    "write a duration such as `300s` (the default)".to_owned(),
                );
            } else {
                g.confirmation_ttl = ttl;
            }
        }
        let backend_node = m.get("confirmations");
        if let Some(n) = backend_node {
            g.confirmations = self
                .choice(
                    n,
                    "guardrails.confirmations",
                    &[
                        ("store", ConfirmationBackend::Store),
                        ("memory", ConfirmationBackend::Memory),
                    ],
                )
                .unwrap_or_default();
        }
        if let Some(n) = m.get("max_pending")
            && let Some(max) = self.uint(n, "guardrails.max_pending")
        {
            if max == 0 {
                self.err_fix(
                    codes::CONFIG_INVALID_VALUE,
                    "`max_pending` is 0, so no call that needs a person's approval could ever be asked"
                        .to_owned(),
                    "guardrails.max_pending",
                    n.span,
                    "write a positive number such as `20` (the default)".to_owned(),
                );
            } else {
                g.max_pending = max;
            }
        }
        if let Some(n) = m.get("replicas")
            && let Some(r) = self.uint(n, "guardrails.replicas")
        {
            if r == 0 {
                self.wrong_type(n, "guardrails.replicas", "a positive integer");
            } else {
                g.replicas = r;
            }
        }
        if g.confirmations == ConfirmationBackend::Memory && g.replicas > 1 {
            let span = backend_node.map_or(node.span, |n| n.span);
            self.err_fix(
                codes::CONFIG_INVALID_VALUE,
                format!(
                    "`confirmations: memory` keeps pending actions in one process, and `replicas` is {}: an approval given on one replica would be invisible to the others",
                    g.replicas
                ),
                "guardrails.confirmations",
                span,
                "use `confirmations: store` with `storage: {url: postgres://...}` shared by the replicas".to_owned(),
            );
        }
        g
    }

    /// A budget number: a non-negative integer (`0` disables it).
    fn budget_count(&mut self, node: &Node, at: &str) -> u64 {
        self.uint(node, at).unwrap_or(0)
    }

    fn budgets(&mut self, node: &Node) -> BudgetsConfig {
        let mut b = BudgetsConfig::default();
        let Some(m) = self.map(node, "budgets", BUDGET_KEYS) else {
            return b;
        };
        if let Some(n) = m.get("max_calls") {
            b.max_calls = self.budget_count(n, "budgets.max_calls");
        }
        if let Some(n) = m.get("max_calls_per_op")
            && let Some(entries) = self.map_any(n, "budgets.max_calls_per_op")
        {
            for (k, v) in entries {
                let at = format!("budgets.max_calls_per_op.{}", k.name);
                if let Some(count) = self.uint(v, &at) {
                    b.max_calls_per_op
                        .push((Spanned::new(k.name.clone(), k.span), count));
                }
            }
        }
        if let Some(n) = m.get("max_wall_time") {
            b.max_wall_time = match n.value {
                _ if is_zero_quantity(&n.value) => Duration::ZERO,
                _ => self
                    .duration(n, "budgets.max_wall_time")
                    .unwrap_or(Duration::ZERO),
            };
        }
        if let Some(n) = m.get("max_output_bytes") {
            b.max_output_bytes = match n.value {
                _ if is_zero_quantity(&n.value) => 0,
                _ => self.size(n, "budgets.max_output_bytes").unwrap_or(0),
            };
        }
        b
    }

    /// A mapping whose keys are free (op ids): no unknown-key check.
    fn map_any<'n>(&mut self, node: &'n Node, at: &str) -> Option<&'n [(Key, Node)]> {
        match &node.value {
            Value::Map(entries) => Some(entries),
            Value::Null => Some(&[]),
            Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Str(_) | Value::Seq(_) => {
                self.wrong_type(node, at, "a mapping");
                None
            }
        }
    }

    fn presets(&mut self, node: &Node) -> Vec<PresetUse> {
        let items: Vec<(&Node, String)> = match &node.value {
            Value::Seq(items) => items
                .iter()
                .enumerate()
                .map(|(i, n)| (n, format!("preset[{i}]")))
                .collect(),
            Value::Null
            | Value::Bool(_)
            | Value::Int(_)
            | Value::Float(_)
            | Value::Str(_)
            | Value::Map(_) => vec![(node, "preset".to_owned())],
        };
        let mut out = Vec::new();
        for (n, at) in items {
            let (name_node, opts, confirm_never) = match &n.value {
                Value::Map(_) => {
                    let Some(pm) = self.map(n, &at, PRESET_KEYS) else {
                        continue;
                    };
                    let Some(name) = pm.get("name") else {
                        self.err(
                            codes::CONFIG_MISSING_KEY,
                            "a preset mapping needs `name`".to_owned(),
                            &at,
                            n.span,
                        );
                        continue;
                    };
                    let confirm_never = pm.get("confirm").and_then(|c| {
                        self.choice(c, &pm.at("confirm"), &[("never", true), ("always", false)])?
                            .then_some(c.span)
                    });
                    (name, self.preset_options(&pm), confirm_never)
                }
                Value::Null
                | Value::Bool(_)
                | Value::Int(_)
                | Value::Float(_)
                | Value::Str(_)
                | Value::Seq(_) => (n, PresetOptions::default(), None),
            };
            let Some(name) = self.string(name_node, &at) else {
                continue;
            };
            match Preset::parse(&name) {
                Ok(preset) => out.push(PresetUse {
                    preset,
                    options: opts,
                    span: name_node.span,
                    confirm_never,
                }),
                Err(e) => self.err_fix(e.code(), e.to_string(), &at, name_node.span, e.fix()),
            }
        }
        out
    }

    fn preset_options(&mut self, pm: &MapView<'_>) -> PresetOptions {
        let mut o = PresetOptions::default();
        if let Some(n) = pm.get("root") {
            o.root = self.string(n, &pm.at("root"));
        }
        if let Some(n) = pm.get("commands") {
            o.commands = self.plain_strings(n, &pm.at("commands"));
        }
        if let Some(n) = pm.get("readonly") {
            o.readonly = self.bool(n, &pm.at("readonly")).unwrap_or(false);
        }
        if let Some(n) = pm.get("writable") {
            o.writable = self.bool(n, &pm.at("writable")).unwrap_or(false);
        }
        if let Some(n) = pm.get("timeout") {
            o.timeout = self.duration(n, &pm.at("timeout"));
        }
        if let Some(n) = pm.get("deny") {
            o.deny = self.plain_strings(n, &pm.at("deny"));
        }
        if let Some(n) = pm.get("max_bytes") {
            o.max_bytes = self.size(n, &pm.at("max_bytes"));
        }
        if let Some(n) = pm.get("unsafe") {
            o.unsafe_ = self.bool(n, &pm.at("unsafe")).unwrap_or(false);
        }
        o
    }

    fn rules(&mut self, node: &Node) -> Vec<RuleConfig> {
        let Value::Seq(items) = &node.value else {
            self.wrong_type(node, "rules", "a list of rules");
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, n) in items.iter().enumerate() {
            let at = format!("rules[{i}]");
            let Some(m) = self.map(n, &at, RULE_KEYS) else {
                continue;
            };
            let (effect, sel_node, key) = match (m.get("allow"), m.get("deny")) {
                (Some(a), None) => (RuleEffect::Allow, a, "allow"),
                (None, Some(d)) => (RuleEffect::Deny, d, "deny"),
                (Some(_), Some(_)) => {
                    let span = m.key_span("deny").unwrap_or(n.span);
                    self.err_fix(
                        codes::CONFIG_INVALID_VALUE,
                        "a rule has both `allow` and `deny`".to_owned(),
                        &at,
                        span,
                        "split it into two rules".to_owned(),
                    );
                    continue;
                }
                (None, None) => {
                    self.err_fix(
                        codes::CONFIG_MISSING_KEY,
                        "a rule needs `allow:` or `deny:` with a list of selectors".to_owned(),
                        &at,
                        n.span,
                        "add `allow: [files.read]` (or `deny:`)".to_owned(),
                    );
                    continue;
                }
            };
            let selectors = match &sel_node.value {
                Value::Str(s) => vec![Spanned::new(s.clone(), sel_node.span)],
                Value::Null
                | Value::Bool(_)
                | Value::Int(_)
                | Value::Float(_)
                | Value::Seq(_)
                | Value::Map(_) => self.strings(sel_node, &format!("{at}.{key}")),
            };
            let name = m
                .get("name")
                .and_then(|n| self.string(n, &m.at("name")))
                .unwrap_or_else(|| at.clone());
            let principals = m
                .get("principals")
                .map(|n| self.strings(n, &m.at("principals")))
                .unwrap_or_default();
            let paths = m.get("paths").and_then(|n| {
                self.path_scope(n, &m.at("paths"), effect)
                    .map(|s| Spanned::new(s, n.span))
            });
            let commands = m.get("commands").and_then(|n| {
                self.command_scope(n, &m.at("commands"))
                    .map(|s| Spanned::new(s, n.span))
            });
            let command_allow_spans = m.get("commands").map_or_else(Vec::new, allow_spans);
            let urls = m.get("urls").and_then(|n| {
                self.url_scope(n, &m.at("urls"))
                    .map(|s| Spanned::new(s, n.span))
            });
            let limits = m
                .get("limits")
                .map(|n| self.limits(n, &m.at("limits")))
                .unwrap_or_default();
            let reason = m
                .get("reason")
                .and_then(|n| self.string(n, &m.at("reason")));
            let confirm_never = m.get("confirm").and_then(|n| {
                let never =
                    self.choice(n, &m.at("confirm"), &[("never", true), ("always", false)])?;
                if never && effect == RuleEffect::Deny {
                    self.err_fix(
                        codes::CONFIG_INVALID_VALUE,
                        "`confirm: never` on a deny rule means nothing".to_owned(),
                        &m.at("confirm"),
                        n.span,
                        "put it on the allow rule whose calls should run unattended".to_owned(),
                    );
                }
                never.then_some(n.span)
            });
            out.push(RuleConfig {
                name,
                effect,
                selectors,
                principals,
                paths,
                commands,
                command_allow_spans,
                urls,
                limits,
                reason,
                confirm_never,
                span: n.span,
                location: at,
            });
        }
        out
    }

    fn path_scope(&mut self, node: &Node, at: &str, effect: RuleEffect) -> Option<PathScopeSpec> {
        if let Value::Seq(_) = node.value {
            return Some(PathScopeSpec {
                roots: self.plain_strings(node, at),
                ..PathScopeSpec::default()
            });
        }
        let m = self.map(node, at, PATH_KEYS)?;
        let mut s = PathScopeSpec::default();
        match m.get("roots") {
            Some(n) => s.roots = self.plain_strings(n, &m.at("roots")),
            None if effect == RuleEffect::Allow => self.err_fix(
                codes::CONFIG_MISSING_KEY,
                "a path scope needs `roots`".to_owned(),
                at,
                node.span,
                "add `roots: [/workspace]`".to_owned(),
            ),
            None => {}
        }
        if let Some(n) = m.get("deny") {
            s.deny = self.plain_strings(n, &m.at("deny"));
        }
        if let Some(n) = m.get("readonly") {
            s.readonly = self.bool(n, &m.at("readonly")).unwrap_or(true);
        }
        if let Some(n) = m.get("symlinks") {
            s.symlinks = self
                .choice(
                    n,
                    &m.at("symlinks"),
                    &[
                        ("within", SymlinkMode::Within),
                        ("deny", SymlinkMode::Deny),
                        ("follow", SymlinkMode::Follow),
                    ],
                )
                .unwrap_or(SymlinkMode::Deny);
        }
        if let Some(n) = m.get("max_bytes") {
            s.max_bytes = self.size(n, &m.at("max_bytes"));
        }
        if let Some(n) = m.get("unsafe") {
            s.unsafe_ = self.bool(n, &m.at("unsafe")).unwrap_or(false);
        }
        Some(s)
    }

    fn command_scope(&mut self, node: &Node, at: &str) -> Option<CommandScopeSpec> {
        if let Value::Seq(_) = node.value {
            return Some(CommandScopeSpec {
                allow: self.plain_strings(node, at),
                ..CommandScopeSpec::default()
            });
        }
        let m = self.map(node, at, COMMAND_KEYS)?;
        let mut s = CommandScopeSpec::default();
        if let Some(n) = m.get("allow") {
            s.allow = self.plain_strings(n, &m.at("allow"));
        }
        if let Some(n) = m.get("deny") {
            s.deny = self.plain_strings(n, &m.at("deny"));
        }
        if let Some(n) = m.get("shell") {
            s.shell = self.bool(n, &m.at("shell")).unwrap_or(false);
        }
        if let Some(n) = m.get("cwd") {
            s.cwd = self.string(n, &m.at("cwd"));
        }
        if let Some(n) = m.get("env_pass") {
            s.env_pass = self.plain_strings(n, &m.at("env_pass"));
        }
        if let Some(n) = m.get("env_set")
            && let Some(entries) = self.map_any(n, &m.at("env_set"))
        {
            for (k, v) in entries {
                let val = match &v.value {
                    Value::Str(s) => Some(s.clone()),
                    Value::Int(i) => Some(i.to_string()),
                    Value::Bool(b) => Some(b.to_string()),
                    Value::Null | Value::Float(_) | Value::Seq(_) | Value::Map(_) => {
                        self.wrong_type(v, &format!("{}.{}", m.at("env_set"), k.name), "a string");
                        None
                    }
                };
                if let Some(val) = val {
                    s.env_set.push((k.name.clone(), val));
                }
            }
        }
        if let Some(n) = m.get("timeout") {
            s.timeout = self.duration(n, &m.at("timeout"));
        }
        if let Some(n) = m.get("max_output_bytes") {
            s.max_output_bytes = self.size(n, &m.at("max_output_bytes"));
        }
        if let Some(n) = m.get("network") {
            s.network = self.network(n, &m.at("network"));
        }
        Some(s)
    }

    /// `network: none | loopback | {allow: ["host:port", "*.domain:port"]}`.
    fn network(&mut self, node: &Node, at: &str) -> Option<NetworkSpec> {
        match &node.value {
            Value::Str(_) => self
                .choice(node, at, &[("none", false), ("loopback", true)])
                .map(|lo| {
                    if lo {
                        NetworkSpec::Loopback
                    } else {
                        NetworkSpec::None
                    }
                }),
            Value::Map(_) => {
                let m = self.map(node, at, &["allow"])?;
                let Some(list) = m.get("allow") else {
                    self.err_fix(
                        codes::CONFIG_INVALID_EGRESS,
                        "`network` has no `allow` list".to_owned(),
                        at,
                        node.span,
                        "write `network: {allow: [\"api.github.com:443\"]}`".to_owned(),
                    );
                    return None;
                };
                let entries = self.strings(list, &m.at("allow"));
                let mut ok = true;
                for (i, e) in entries.iter().enumerate() {
                    if let Err(err) = EgressEntry::parse(&e.value) {
                        ok = false;
                        self.err_fix(
                            codes::CONFIG_INVALID_EGRESS,
                            format!("`{}` is not a valid egress entry", err.entry),
                            &format!("{}[{i}]", m.at("allow")),
                            e.span,
                            err.why,
                        );
                    }
                }
                if !ok {
                    return None;
                }
                let values: Vec<&str> = entries.iter().map(|e| e.value.as_str()).collect();
                match EgressAllowList::parse(&values) {
                    Ok(l) => Some(NetworkSpec::Allow(l)),
                    Err(errs) => {
                        for err in errs {
                            self.err_fix(
                                codes::CONFIG_INVALID_EGRESS,
                                err.to_string(),
                                &m.at("allow"),
                                list.span,
                                err.why,
                            );
                        }
                        None
                    }
                }
            }
            _ => {
                self.err_fix(
                    codes::CONFIG_INVALID_EGRESS,
                    format!("expected `none`, `loopback` or a mapping, found {}", node.type_name()),
                    at,
                    node.span,
                    "write `network: none`, `network: loopback` or `network: {allow: [\"host:port\"]}`"
                        .to_owned(),
                );
                None
            }
        }
    }

    fn url_scope(&mut self, node: &Node, at: &str) -> Option<UrlScopeSpec> {
        if let Value::Seq(_) = node.value {
            return Some(UrlScopeSpec {
                hosts: self.plain_strings(node, at),
                ..UrlScopeSpec::default()
            });
        }
        let m = self.map(node, at, URL_KEYS)?;
        let mut s = UrlScopeSpec::default();
        if let Some(n) = m.get("hosts") {
            s.hosts = self.plain_strings(n, &m.at("hosts"));
        }
        if let Some(n) = m.get("schemes") {
            s.schemes = Some(self.plain_strings(n, &m.at("schemes")));
        }
        if let Some(n) = m.get("ports") {
            let at = m.at("ports");
            match &n.value {
                Value::Seq(items) => {
                    let mut ports = Vec::new();
                    for (i, p) in items.iter().enumerate() {
                        match p.value {
                            Value::Int(x) if (1..=65535).contains(&x) => {
                                ports.push(u16::try_from(x).unwrap_or(0));
                            }
                            _ => {
                                self.wrong_type(p, &format!("{at}[{i}]"), "a port from 1 to 65535")
                            }
                        }
                    }
                    s.ports = Some(ports);
                }
                _ => self.wrong_type(n, &at, "a list of ports"),
            }
        }
        if let Some(n) = m.get("paths") {
            s.paths = Some(self.plain_strings(n, &m.at("paths")));
        }
        if let Some(n) = m.get("block_private") {
            s.block_private = self.bool(n, &m.at("block_private")).unwrap_or(true);
        }
        Some(s)
    }

    fn limits(&mut self, node: &Node, at: &str) -> Limits {
        let Some(m) = self.map(node, at, LIMIT_KEYS) else {
            return Limits::NONE;
        };
        let mut l = Limits::NONE;
        let u32_of = |v: u64| u32::try_from(v).ok();
        if let Some(n) = m.get("max_bytes") {
            l.max_bytes = self.size(n, &m.at("max_bytes"));
        }
        if let Some(n) = m.get("max_entries") {
            l.max_entries = self.uint(n, &m.at("max_entries"));
        }
        if let Some(n) = m.get("timeout") {
            l.timeout = self.duration(n, &m.at("timeout"));
        }
        if let Some(n) = m.get("max_output_bytes") {
            l.max_output_bytes = self.size(n, &m.at("max_output_bytes"));
        }
        if let Some(n) = m.get("rate") {
            l.rate = self.unit(n, &m.at("rate"), Rate::parse, "10/min");
        }
        if let Some(n) = m.get("concurrency") {
            l.concurrency = self.uint(n, &m.at("concurrency")).and_then(u32_of);
        }
        if let Some(n) = m.get("cpu_seconds") {
            l.cpu_seconds = self.uint(n, &m.at("cpu_seconds"));
        }
        if let Some(n) = m.get("memory") {
            l.memory = self.size(n, &m.at("memory"));
        }
        if let Some(n) = m.get("processes") {
            l.processes = self.uint(n, &m.at("processes")).and_then(u32_of);
        }
        if let Some(n) = m.get("write_quota") {
            l.write_quota = self.size(n, &m.at("write_quota"));
        }
        l
    }

    fn custom(&mut self, node: &Node) -> Vec<CustomOpConfig> {
        let Some(entries) = self.map_any(node, "custom") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, n) in entries {
            let at = format!("custom.{}", k.name);
            let Some(m) = self.map(n, &at, CUSTOM_KEYS) else {
                continue;
            };
            let argv = match m.get("argv") {
                Some(a) => self.strings(a, &m.at("argv")),
                None => {
                    self.err_fix(
                        codes::CONFIG_MISSING_KEY,
                        format!("custom op `{}` has no `argv`", k.name),
                        &at,
                        k.span,
                        "add `argv: [program, \"{param}\"]`".to_owned(),
                    );
                    Vec::new()
                }
            };
            let mut params = Vec::new();
            if let Some(p) = m.get("params")
                && let Some(pentries) = self.map_any(p, &m.at("params"))
            {
                for (pk, pn) in pentries {
                    let pat = format!("{at}.params.{}", pk.name);
                    if let Some(kind) = self.param(pn, &pat) {
                        let mut flag = |key: &str, default: bool| match &pn.value {
                            Value::Map(e) => e
                                .iter()
                                .find(|(k, _)| k.name == key)
                                .and_then(|(_, v)| self.bool(v, &format!("{pat}.{key}")))
                                .unwrap_or(default),
                            _ => default,
                        };
                        let required = flag("required", true);
                        let writable = flag("writable", false);
                        params.push(ParamConfig {
                            name: Spanned::new(pk.name.clone(), pk.span),
                            kind,
                            required,
                            writable,
                        });
                    }
                }
            }
            let effects = m.get("effects").map(|e| self.effects(e, &m.at("effects")));
            let tier = m.get("tier").and_then(|t| {
                let opts = Tier::ALL.map(|t| (t.as_str(), t));
                self.choice(t, &m.at("tier"), &opts)
            });
            out.push(CustomOpConfig {
                id: Spanned::new(k.name.clone(), k.span),
                argv,
                params,
                cwd: m.get("cwd").and_then(|c| self.string(c, &m.at("cwd"))),
                read_paths: m
                    .get("read_paths")
                    .map(|p| self.strings(p, &m.at("read_paths")))
                    .unwrap_or_default(),
                write_paths: m
                    .get("write_paths")
                    .map(|p| self.strings(p, &m.at("write_paths")))
                    .unwrap_or_default(),
                timeout: m
                    .get("timeout")
                    .and_then(|t| self.duration(t, &m.at("timeout"))),
                effects,
                contained: m
                    .get("contained")
                    .and_then(|b| self.bool(b, &m.at("contained")))
                    .unwrap_or(false),
                explicit_only: m
                    .get("explicit_only")
                    .and_then(|b| self.bool(b, &m.at("explicit_only")))
                    .unwrap_or(false),
                tier,
                summary: m
                    .get("summary")
                    .and_then(|s| self.string(s, &m.at("summary")))
                    .unwrap_or_default(),
                network: m
                    .get("network")
                    .and_then(|n| self.network(n, &m.at("network"))),
            });
        }
        out
    }

    /// `effects: [read, write]` (or one effect as a string).
    fn effects(&mut self, e: &Node, at: &str) -> Vec<Effect> {
        let opts = Effect::ALL.map(|e| (e.as_str(), e));
        match &e.value {
            Value::Seq(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, n)| self.choice(n, &format!("{at}[{i}]"), &opts))
                .collect(),
            Value::Str(_) => self.choice(e, at, &opts).into_iter().collect(),
            _ => {
                self.wrong_type(e, at, "a list of effects");
                Vec::new()
            }
        }
    }

    fn mcp_servers(&mut self, node: &Node) -> Vec<McpServerConfig> {
        let Some(entries) = self.map_any(node, "mcp_servers") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, n) in entries {
            let at = format!("mcp_servers.{}", k.name);
            if !is_mcp_name(&k.name) {
                self.err_fix(
                    codes::CONFIG_INVALID_VALUE,
                    format!("`{}` is not a valid upstream name", k.name),
                    &at,
                    k.span,
                    "use letters, digits, `_` and `-`, starting with a letter (it becomes the middle of op ids `mcp.<name>.<tool>`)".to_owned(),
                );
                continue;
            }
            let Some(m) = self.map(n, &at, MCP_SERVER_KEYS) else {
                continue;
            };
            let command = match m.get("command") {
                Some(c) => self.strings(c, &m.at("command")),
                None => Vec::new(),
            };
            if command.is_empty() {
                self.err_fix(
                    codes::CONFIG_MISSING_KEY,
                    format!("upstream MCP server `{}` has no `command`", k.name),
                    &at,
                    k.span,
                    "add `command: [program, arg, ...]` (run without a shell)".to_owned(),
                );
            }
            let list = |this: &mut Self, key: &str| match m.get(key) {
                Some(v) => this.strings(v, &m.at(key)),
                None => Vec::new(),
            };
            let env_pass = list(self, "env_pass");
            let read_paths = list(self, "read_paths");
            let write_paths = list(self, "write_paths");
            let mut tools = Vec::new();
            if let Some(t) = m.get("tools")
                && let Some(tentries) = self.map_any(t, &m.at("tools"))
            {
                for (tk, tn) in tentries {
                    let tat = format!("{at}.tools.{}", tk.name);
                    let (effects, tier, idempotent) = match &tn.value {
                        Value::Null => (None, None, false),
                        _ => match self.map(tn, &tat, MCP_TOOL_KEYS) {
                            Some(tm) => (
                                tm.get("effects")
                                    .map(|e| self.effects(e, &tm.at("effects"))),
                                tm.get("tier").and_then(|t| {
                                    let opts = Tier::ALL.map(|t| (t.as_str(), t));
                                    self.choice(t, &tm.at("tier"), &opts)
                                }),
                                tm.get("idempotent")
                                    .and_then(|b| self.bool(b, &tm.at("idempotent")))
                                    .unwrap_or(false),
                            ),
                            None => continue,
                        },
                    };
                    tools.push(McpToolConfig {
                        name: Spanned::new(tk.name.clone(), tk.span),
                        effects,
                        tier,
                        idempotent,
                    });
                }
            }
            out.push(McpServerConfig {
                name: Spanned::new(k.name.clone(), k.span),
                command,
                env_pass,
                read_paths,
                write_paths,
                cwd: m.get("cwd").and_then(|c| {
                    self.string(c, &m.at("cwd"))
                        .map(|v| Spanned::new(v, c.span))
                }),
                call_timeout: m
                    .get("call_timeout")
                    .and_then(|t| self.duration(t, &m.at("call_timeout"))),
                memory: m.get("memory").and_then(|n| self.size(n, &m.at("memory"))),
                processes: m
                    .get("processes")
                    .and_then(|n| self.uint(n, &m.at("processes")))
                    .and_then(|v| u32::try_from(v).ok()),
                tools,
                network: m
                    .get("network")
                    .and_then(|n| self.network(n, &m.at("network"))),
                span: k.span,
            });
        }
        out
    }

    fn param(&mut self, node: &Node, at: &str) -> Option<ParamKind> {
        let types = [
            ("path", 0u8),
            ("int", 1),
            ("word", 2),
            ("string", 3),
            ("enum", 4),
        ];
        let (type_node, m) = match &node.value {
            Value::Str(_) => (node, None),
            _ => {
                let m = self.map(node, at, PARAM_KEYS)?;
                let Some(t) = m.get("type") else {
                    self.err_fix(
                        codes::CONFIG_MISSING_KEY,
                        "a param needs `type`".to_owned(),
                        at,
                        node.span,
                        "add `type: path|int|word|string|enum`".to_owned(),
                    );
                    return None;
                };
                (t, Some(m))
            }
        };
        let kind = self.choice(type_node, &format!("{at}.type"), &types)?;
        let get = |k: &str| m.as_ref().and_then(|m| m.get(k));
        Some(match kind {
            0 => ParamKind::Path {
                root: get("root").and_then(|r| self.string(r, &format!("{at}.root"))),
            },
            1 => ParamKind::Int,
            2 => ParamKind::Word,
            3 => ParamKind::String,
            _ => {
                let values = get("values")
                    .map(|v| self.plain_strings(v, &format!("{at}.values")))
                    .unwrap_or_default();
                if values.is_empty() {
                    self.err_fix(
                        codes::CONFIG_MISSING_KEY,
                        "an enum param needs `values`".to_owned(),
                        at,
                        node.span,
                        "add `values: [a, b]`".to_owned(),
                    );
                }
                ParamKind::Enum(values)
            }
        })
    }

    fn auth(&mut self, node: &Node) -> AuthConfig {
        let mut a = AuthConfig::default();
        let Some(m) = self.map(node, "auth", &["tokens", "jwt"]) else {
            return a;
        };
        if let Some(j) = m.get("jwt") {
            a.jwt = self.jwt(j);
        }
        let Some(tokens) = m.get("tokens") else {
            return a;
        };
        let Value::Seq(items) = &tokens.value else {
            self.wrong_type(tokens, "auth.tokens", "a list of tokens");
            return a;
        };
        let kinds = PrincipalKind::ALL.map(|k| (k.as_str(), k));
        for (i, n) in items.iter().enumerate() {
            let at = format!("auth.tokens[{i}]");
            let Some(tm) = self.map(n, &at, TOKEN_KEYS) else {
                continue;
            };
            if let Some(secret) = tm.get("token") {
                self.err_fix(
                    codes::CONFIG_INLINE_SECRET,
                    "the token secret is written in the config".to_owned(),
                    &tm.at("token"),
                    secret.span,
                    "remove `token:`; put the secret in an environment variable and name it with `token_env:`".to_owned(),
                );
            }
            let id = tm
                .get("id")
                .and_then(|x| self.spanned_string(x, &tm.at("id")));
            let token_env = tm
                .get("token_env")
                .and_then(|x| self.spanned_string(x, &tm.at("token_env")));
            let roles = tm
                .get("roles")
                .map(|r| self.plain_strings(r, &tm.at("roles")))
                .unwrap_or_default();
            let kind = tm
                .get("kind")
                .and_then(|k| self.choice(k, &tm.at("kind"), &kinds))
                .unwrap_or(PrincipalKind::Human);
            let run = tm
                .get("run")
                .and_then(|r| self.spanned_string(r, &tm.at("run")))
                .filter(|r| {
                    let ok = corral_policy::valid_run_id(&r.value);
                    if !ok {
                        self.err_fix(
                            codes::CONFIG_INVALID_VALUE,
                            format!("`{}` is not a run id", r.value),
                            &tm.at("run"),
                            r.span,
                            "use 1-128 characters of letters, digits, `_`, `-`, `.` and `:`"
                                .to_owned(),
                        );
                    }
                    ok
                });
            match (id, token_env) {
                (Some(id), Some(token_env)) => {
                    if id.value == "anonymous" {
                        self.err_fix(
                            codes::CONFIG_INVALID_VALUE,
                            "a token may not have the id `anonymous`".to_owned(),
                            &tm.at("id"),
                            id.span,
                            "pick another id".to_owned(),
                        );
                    }
                    a.tokens.push(TokenConfig {
                        id,
                        roles,
                        kind,
                        token_env,
                        run,
                    });
                }
                (id, _) => {
                    let missing = if id.is_none() { "id" } else { "token_env" };
                    self.err_fix(
                        codes::CONFIG_MISSING_KEY,
                        format!("a token needs `{missing}`"),
                        &at,
                        n.span,
                        "write `{id: grader, roles: [operator], token_env: CORRAL_GRADER_TOKEN}`"
                            .to_owned(),
                    );
                }
            }
        }
        a
    }

    fn jwt(&mut self, node: &Node) -> Option<JwtSpec> {
        let m = self.map(node, "auth.jwt", JWT_KEYS)?;
        let get_s = |d: &mut Self, k: &str| m.get(k).and_then(|n| d.string(n, &m.at(k)));
        let service_claim = match m.get("service_claim") {
            None => None,
            Some(n) => {
                let sm = self.map(n, &m.at("service_claim"), &["name", "value"])?;
                let name = sm.get("name").and_then(|x| self.string(x, &sm.at("name")));
                let value = sm
                    .get("value")
                    .and_then(|x| self.string(x, &sm.at("value")));
                match (name, value) {
                    (Some(n), Some(v)) => Some((n, v)),
                    _ => {
                        self.err(
                            codes::CONFIG_MISSING_KEY,
                            "`service_claim` needs `name` and `value`".to_owned(),
                            &m.at("service_claim"),
                            n.span,
                        );
                        None
                    }
                }
            }
        };
        let spec = JwtSpec {
            hs256_secret_env: m
                .get("hs256_secret_env")
                .and_then(|n| self.spanned_string(n, &m.at("hs256_secret_env"))),
            rs256_public_key_file: m
                .get("rs256_public_key_file")
                .and_then(|n| self.spanned_string(n, &m.at("rs256_public_key_file"))),
            issuer: get_s(self, "issuer"),
            audience: get_s(self, "audience"),
            roles_claim: get_s(self, "roles_claim").unwrap_or_else(|| "roles".to_owned()),
            tenant_claim: get_s(self, "tenant_claim").unwrap_or_else(|| "tenant".to_owned()),
            run_claim: get_s(self, "run_claim").unwrap_or_else(|| "run".to_owned()),
            service_claim,
            span: node.span,
        };
        if spec.hs256_secret_env.is_some() == spec.rs256_public_key_file.is_some() {
            self.err_fix(
                codes::CONFIG_INVALID_VALUE,
                "`auth.jwt` needs exactly one of `hs256_secret_env` and `rs256_public_key_file`"
                    .to_owned(),
                "auth.jwt",
                node.span,
                "name the HS256 secret's variable, or the RS256 public key file".to_owned(),
            );
            return None;
        }
        Some(spec)
    }

    fn audit(&mut self, node: &Node) -> AuditConfig {
        let Some(m) = self.map(node, "audit", &["sink", "path"]) else {
            return AuditConfig::default();
        };
        let sinks = [("store", 0u8), ("stderr", 1), ("file", 2), ("off", 3)];
        let sink = m
            .get("sink")
            .and_then(|s| self.choice(s, "audit.sink", &sinks))
            .unwrap_or(0);
        let path = m.get("path").and_then(|p| self.string(p, "audit.path"));
        let sink = match (sink, path) {
            (1, _) => AuditSink::Stderr,
            (2, Some(p)) => AuditSink::File(p),
            (2, None) => {
                self.err(
                    codes::CONFIG_MISSING_KEY,
                    "`sink: file` needs `path`".to_owned(),
                    "audit",
                    node.span,
                );
                AuditSink::Store
            }
            (3, _) => AuditSink::Off,
            _ => AuditSink::Store,
        };
        AuditConfig { sink }
    }
}

/// An upstream's name: `[A-Za-z][A-Za-z0-9_-]*`, so `mcp.<name>.<tool>` stays one op id.
pub(crate) fn is_mcp_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
