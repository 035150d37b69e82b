//! Rules and what they carry: path, command and URL scopes, egress, limits.

use corral_policy::codes;
use corral_policy::scope::{
    AgentPermissions, AgentScopeSpec, CommandScopeSpec, EgressAllowList, EgressEntry, NetworkSpec,
    PathScopeSpec, SymlinkMode, UrlScopeSpec,
};
use corral_policy::units::Rate;
use corral_policy::{Limits, RuleEffect};

use super::{Decoder, Field, Item};
use crate::model::{RuleConfig, Spanned};
use crate::yaml::{Node, Span, Value};

/// A rule being decoded: `allow:` or `deny:` (exactly one) decides what the rest means.
pub(super) struct RuleDraft {
    rule: RuleConfig,
    effect: Option<RuleEffect>,
    /// Where the second of `allow` and `deny` was written, when a rule has both.
    both: Option<Span>,
}

impl RuleDraft {
    fn select(&mut self, d: &mut Decoder, e: &Item<'_>, effect: RuleEffect) {
        if self.effect.is_some() {
            self.both = Some(e.key);
            return;
        }
        self.effect = Some(effect);
        self.rule.effect = effect;
        self.rule.selectors = match &e.node.value {
            Value::Str(s) => vec![Spanned::new(s.clone(), e.node.span)],
            Value::Null
            | Value::Bool(_)
            | Value::Int(_)
            | Value::Float(_)
            | Value::Seq(_)
            | Value::Map(_) => d.strings(e.node, &e.at),
        };
    }
}

/// A rule.
pub(super) const RULE: &[Field<RuleDraft>] = &[
    Field::new("allow", |d, e, r| r.select(d, e, RuleEffect::Allow)),
    Field::new("deny", |d, e, r| r.select(d, e, RuleEffect::Deny)),
    Field::new("name", |d, e, r| {
        if let Some(name) = d.string(e.node, &e.at) {
            r.rule.name = name;
        }
    }),
    Field::new("principals", |d, e, r| {
        r.rule.principals = d.strings(e.node, &e.at);
    }),
    Field::new("paths", |d, e, r| {
        r.rule.paths = d
            .path_scope(e.node, &e.at, r.rule.effect)
            .map(|s| Spanned::new(s, e.node.span));
    }),
    Field::new("commands", |d, e, r| {
        if let Some(c) = d.command_scope(e.node, &e.at) {
            r.rule.commands = Some(Spanned::new(c.spec, e.node.span));
            r.rule.command_allow_spans = c.allow_spans;
        }
    }),
    Field::new("urls", |d, e, r| {
        r.rule.urls = d
            .url_scope(e.node, &e.at)
            .map(|s| Spanned::new(s, e.node.span));
    }),
    Field::new("agents", |d, e, r| {
        if r.rule.effect == RuleEffect::Deny {
            d.err_fix(
                codes::CONFIG_INVALID_VALUE,
                "a deny rule has no `agents:` scope".to_owned(),
                &e.at,
                e.node.span,
                "deny the agent ops outright (`deny: [agents.codex.run]`), or with `paths:` \
                 covering the workdirs to refuse"
                    .to_owned(),
            );
            return;
        }
        r.rule.agents = d
            .agent_scope(e.node, &e.at)
            .map(|s| Spanned::new(s, e.node.span));
    }),
    Field::new("limits", |d, e, r| r.rule.limits = d.limits(e.node, &e.at)),
    Field::new("reason", |d, e, r| r.rule.reason = d.string(e.node, &e.at)),
    Field::new("confirm", |d, e, r| {
        let Some(never) = d.choice(e.node, &e.at, &[("never", true), ("always", false)]) else {
            return;
        };
        if never && r.rule.effect == RuleEffect::Deny {
            d.err_fix(
                codes::CONFIG_INVALID_VALUE,
                "`confirm: never` on a deny rule means nothing".to_owned(),
                &e.at,
                e.node.span,
                "put it on the allow rule whose calls should run unattended".to_owned(),
            );
        }
        r.rule.confirm_never = never.then_some(e.node.span);
    }),
];

/// A path scope given as a mapping, and the effect of its rule (an allow rule needs `roots`).
pub(super) struct PathDraft {
    spec: PathScopeSpec,
    effect: RuleEffect,
}

/// A path scope.
pub(super) const PATH: &[Field<PathDraft>] = &[
    Field::required(
        "roots",
        |d, e, p| p.spec.roots = d.plain_strings(e.node, &e.at),
        |d, e, p| {
            if p.effect == RuleEffect::Allow {
                d.err_fix(
                    codes::CONFIG_MISSING_KEY,
                    "a path scope needs `roots`".to_owned(),
                    e.within,
                    e.node.span,
                    "add `roots: [/workspace]`".to_owned(),
                );
            }
        },
    ),
    Field::new("deny", |d, e, p| {
        p.spec.deny = d.plain_strings(e.node, &e.at)
    }),
    Field::new("readonly", |d, e, p| {
        p.spec.readonly = d.bool(e.node, &e.at).unwrap_or(true);
    }),
    Field::new("symlinks", |d, e, p| {
        let modes = [
            ("within", SymlinkMode::Within),
            ("deny", SymlinkMode::Deny),
            ("follow", SymlinkMode::Follow),
        ];
        p.spec.symlinks = d.choice(e.node, &e.at, &modes).unwrap_or(SymlinkMode::Deny);
    }),
    Field::new("max_bytes", |d, e, p| {
        p.spec.max_bytes = d.size(e.node, &e.at);
    }),
    Field::new("unsafe", |d, e, p| {
        p.spec.unsafe_ = d.bool(e.node, &e.at).unwrap_or(false);
    }),
];

/// A command scope, and where each of its allow patterns was written (for the lint).
#[derive(Default)]
pub(super) struct CommandDraft {
    spec: CommandScopeSpec,
    allow_spans: Vec<Span>,
}

/// The spans of a list's items (none when it is not a list).
fn item_spans(node: &Node) -> Vec<Span> {
    match &node.value {
        Value::Seq(items) => items.iter().map(|n| n.span).collect(),
        Value::Null
        | Value::Bool(_)
        | Value::Int(_)
        | Value::Float(_)
        | Value::Str(_)
        | Value::Map(_) => Vec::new(),
    }
}

/// A command scope.
pub(super) const COMMAND: &[Field<CommandDraft>] = &[
    Field::new("allow", |d, e, c| {
        c.spec.allow = d.plain_strings(e.node, &e.at);
        c.allow_spans = item_spans(e.node);
    }),
    Field::new("deny", |d, e, c| {
        c.spec.deny = d.plain_strings(e.node, &e.at)
    }),
    Field::new("shell", |d, e, c| {
        c.spec.shell = d.bool(e.node, &e.at).unwrap_or(false);
    }),
    Field::new("cwd", |d, e, c| c.spec.cwd = d.string(e.node, &e.at)),
    Field::new("env_pass", |d, e, c| {
        c.spec.env_pass = d.plain_strings(e.node, &e.at);
    }),
    Field::new("env_set", env_set),
    Field::new("timeout", |d, e, c| {
        c.spec.timeout = d.duration(e.node, &e.at)
    }),
    Field::new("max_output_bytes", |d, e, c| {
        c.spec.max_output_bytes = d.size(e.node, &e.at);
    }),
    Field::new("network", |d, e, c| {
        c.spec.network = d.network(e.node, &e.at)
    }),
];

/// `env_set: {NAME: value}` (a number or boolean is written as its text).
fn env_set(d: &mut Decoder, e: &Item<'_>, c: &mut CommandDraft) {
    let Some(entries) = d.map_any(e.node, &e.at) else {
        return;
    };
    for (k, v) in entries {
        let val = match &v.value {
            Value::Str(s) => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            Value::Null | Value::Float(_) | Value::Seq(_) | Value::Map(_) => {
                d.wrong_type(v, &format!("{}.{}", e.at, k.name), "a string");
                None
            }
        };
        if let Some(val) = val {
            c.spec.env_set.push((k.name.clone(), val));
        }
    }
}

/// `network: {allow: [...]}`.
pub(super) const NETWORK: &[Field<Option<NetworkSpec>>] = &[Field::required(
    "allow",
    |d, e, n| *n = d.egress(e.node, &e.at),
    |d, e, _| {
        d.err_fix(
            codes::CONFIG_INVALID_EGRESS,
            "`network` has no `allow` list".to_owned(),
            e.within,
            e.node.span,
            "write `network: {allow: [\"api.github.com:443\"]}`".to_owned(),
        );
    },
)];

/// A URL scope.
pub(super) const URL: &[Field<UrlScopeSpec>] = &[
    Field::new("hosts", |d, e, s| s.hosts = d.plain_strings(e.node, &e.at)),
    Field::new("schemes", |d, e, s| {
        s.schemes = Some(d.plain_strings(e.node, &e.at));
    }),
    Field::new("ports", ports),
    Field::new("paths", |d, e, s| {
        s.paths = Some(d.plain_strings(e.node, &e.at));
    }),
    Field::new("block_private", |d, e, s| {
        s.block_private = d.bool(e.node, &e.at).unwrap_or(true);
    }),
];

/// An agent scope (`agents:` of an allow rule).
pub(super) const AGENT: &[Field<AgentScopeSpec>] = &[
    Field::required(
        "workdir",
        |d, e, s| {
            if let Some(w) = d.string(e.node, &e.at) {
                s.workdir = w;
            }
        },
        |d, e, _| {
            d.err_fix(
                codes::CONFIG_MISSING_KEY,
                "an agent scope needs `workdir`".to_owned(),
                e.within,
                e.node.span,
                "add `workdir: /workspace` (the one directory the agent works in)".to_owned(),
            );
        },
    ),
    Field::new("permissions", |d, e, s| {
        let choices = AgentPermissions::ALL.map(|p| (p.as_str(), p));
        s.permissions = d.choice(e.node, &e.at, &choices);
    }),
    Field::new("commands", |d, e, s| {
        s.commands = d.plain_strings(e.node, &e.at);
    }),
    Field::new("models", |d, e, s| {
        s.models = d.plain_strings(e.node, &e.at);
    }),
    Field::new("max_turns", |d, e, s| {
        s.max_turns = d.uint32(e.node, &e.at);
    }),
    Field::new("unconfined_ok", |d, e, s| {
        s.unconfined_ok = d.bool(e.node, &e.at).unwrap_or(false);
    }),
    Field::new("network", |d, e, s| s.network = d.network(e.node, &e.at)),
    Field::new("confirm_writes_outside", |d, e, s| {
        s.confirm_writes_outside = d.plain_strings(e.node, &e.at);
    }),
];

/// `ports: [443, 8443]`.
fn ports(d: &mut Decoder, e: &Item<'_>, s: &mut UrlScopeSpec) {
    let Value::Seq(items) = &e.node.value else {
        d.wrong_type(e.node, &e.at, "a list of ports");
        return;
    };
    let mut ports = Vec::new();
    for (i, p) in items.iter().enumerate() {
        match p.value {
            Value::Int(x) if (1..=65535).contains(&x) => {
                ports.push(u16::try_from(x).unwrap_or(0));
            }
            _ => d.wrong_type(p, &format!("{}[{i}]", e.at), "a port from 1 to 65535"),
        }
    }
    s.ports = Some(ports);
}

/// Limits (of a rule, or of every call).
pub(super) const LIMIT: &[Field<Limits>] = &[
    Field::new("max_bytes", |d, e, l| l.max_bytes = d.size(e.node, &e.at)),
    Field::new("max_entries", |d, e, l| {
        l.max_entries = d.uint(e.node, &e.at);
    }),
    Field::new("timeout", |d, e, l| l.timeout = d.duration(e.node, &e.at)),
    Field::new("max_output_bytes", |d, e, l| {
        l.max_output_bytes = d.size(e.node, &e.at);
    }),
    Field::new("rate", |d, e, l| {
        l.rate = d.unit(e.node, &e.at, Rate::parse, "10/min");
    }),
    Field::new("concurrency", |d, e, l| {
        l.concurrency = d.uint32(e.node, &e.at)
    }),
    Field::new("cpu_seconds", |d, e, l| {
        l.cpu_seconds = d.uint(e.node, &e.at);
    }),
    Field::new("memory", |d, e, l| l.memory = d.size(e.node, &e.at)),
    Field::new("processes", |d, e, l| l.processes = d.uint32(e.node, &e.at)),
    Field::new("write_quota", |d, e, l| {
        l.write_quota = d.size(e.node, &e.at);
    }),
];

impl Decoder {
    /// `rules: [...]`.
    pub(super) fn rules(&mut self, node: &Node, at: &str) -> Vec<RuleConfig> {
        let Value::Seq(items) = &node.value else {
            self.wrong_type(node, at, "a list of rules");
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, n) in items.iter().enumerate() {
            let at = format!("{at}[{i}]");
            let mut r = RuleDraft {
                rule: RuleConfig {
                    name: at.clone(),
                    effect: RuleEffect::Allow,
                    selectors: Vec::new(),
                    principals: Vec::new(),
                    paths: None,
                    commands: None,
                    command_allow_spans: Vec::new(),
                    urls: None,
                    agents: None,
                    limits: Limits::NONE,
                    reason: None,
                    confirm_never: None,
                    span: n.span,
                    location: at.clone(),
                },
                effect: None,
                both: None,
            };
            let Some(mark) = self.fields(n, &at, RULE, &mut r) else {
                continue;
            };
            // A rule without exactly one effect is refused as a whole: what its other keys
            // said is dropped with it.
            match (r.effect, r.both) {
                (_, Some(span)) => {
                    self.diags.truncate(mark);
                    self.err_fix(
                        codes::CONFIG_INVALID_VALUE,
                        "a rule has both `allow` and `deny`".to_owned(),
                        &at,
                        span,
                        "split it into two rules".to_owned(),
                    );
                }
                (None, None) => {
                    self.diags.truncate(mark);
                    self.err_fix(
                        codes::CONFIG_MISSING_KEY,
                        "a rule needs `allow:` or `deny:` with a list of selectors".to_owned(),
                        &at,
                        n.span,
                        "add `allow: [files.read]` (or `deny:`)".to_owned(),
                    );
                }
                (Some(_), None) => out.push(r.rule),
            }
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
        let mut p = PathDraft {
            spec: PathScopeSpec::default(),
            effect,
        };
        self.fields(node, at, PATH, &mut p)?;
        Some(p.spec)
    }

    fn command_scope(&mut self, node: &Node, at: &str) -> Option<CommandDraft> {
        if let Value::Seq(_) = node.value {
            return Some(CommandDraft {
                spec: CommandScopeSpec {
                    allow: self.plain_strings(node, at),
                    ..CommandScopeSpec::default()
                },
                allow_spans: item_spans(node),
            });
        }
        let mut c = CommandDraft::default();
        self.fields(node, at, COMMAND, &mut c)?;
        Some(c)
    }

    fn url_scope(&mut self, node: &Node, at: &str) -> Option<UrlScopeSpec> {
        if let Value::Seq(_) = node.value {
            return Some(UrlScopeSpec {
                hosts: self.plain_strings(node, at),
                ..UrlScopeSpec::default()
            });
        }
        let mut s = UrlScopeSpec::default();
        self.fields(node, at, URL, &mut s)?;
        Some(s)
    }

    fn agent_scope(&mut self, node: &Node, at: &str) -> Option<AgentScopeSpec> {
        let mut s = AgentScopeSpec::default();
        self.fields(node, at, AGENT, &mut s)?;
        Some(s)
    }

    /// Limits; `Limits::NONE` when the node is not a mapping.
    pub(super) fn limits(&mut self, node: &Node, at: &str) -> Limits {
        let mut l = Limits::NONE;
        match self.fields(node, at, LIMIT, &mut l) {
            Some(_) => l,
            None => Limits::NONE,
        }
    }

    /// `network: none | loopback | {allow: ["host:port", "*.domain:port"]}`.
    pub(super) fn network(&mut self, node: &Node, at: &str) -> Option<NetworkSpec> {
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
                let mut spec = None;
                self.fields(node, at, NETWORK, &mut spec)?;
                spec
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

    /// An egress allow-list: every entry valid, and the entries consistent together.
    fn egress(&mut self, list: &Node, at: &str) -> Option<NetworkSpec> {
        let entries = self.strings(list, at);
        let mut ok = true;
        for (i, e) in entries.iter().enumerate() {
            if let Err(err) = EgressEntry::parse(&e.value) {
                ok = false;
                self.err_fix(
                    codes::CONFIG_INVALID_EGRESS,
                    format!("`{}` is not a valid egress entry", err.entry),
                    &format!("{at}[{i}]"),
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
                        at,
                        list.span,
                        err.why,
                    );
                }
                None
            }
        }
    }
}
