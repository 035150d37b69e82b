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
    Field::key("allow")
        .doc(
            "op selector, or list of them",
            "one of `allow` and `deny` is required",
            "[files.read, files.list]",
            "The ops the rule allows: `ns.op`, `ns.*` (one level), `ns.**` (any depth), \
             `group:G`, `effect:E`, `tier:T`, `*`; only an exact id mounts an explicit-only op.",
        )
        .optional(|d, e, r| r.select(d, e, RuleEffect::Allow)),
    Field::key("deny")
        .doc(
            "op selector, or list of them",
            "one of `allow` and `deny` is required",
            "[commands.run]",
            "The ops the rule denies (with `paths:`, only for the paths it covers).",
        )
        .optional(|d, e, r| r.select(d, e, RuleEffect::Deny)),
    Field::key("name")
        .doc(
            "string",
            "`rules[i]`",
            "read-docs",
            "The rule's name in explanations and the audit.",
        )
        .optional(|d, e, r| {
            if let Some(name) = d.string(e.node, &e.at) {
                r.rule.name = name;
            }
        }),
    Field::key("principals")
        .doc(
            "list of principal selectors",
            "none: every caller, the anonymous one too",
            "[role:grader, 'kind:service']",
            "Who the rule applies to: `id:NAME`, `role:NAME`, `kind:human`/`delegated`/`service`, \
             or `*` (any authenticated caller); see Role selectors.",
        )
        .optional(|d, e, r| {
            r.rule.principals = d.strings(e.node, &e.at);
        }),
    Field::key("paths")
        .doc(
            "path scope: mapping, or list of roots",
            "none",
            "[/workspace]",
            "The directories the rule's ops may touch; see `rules[].paths`.",
        )
        .optional(|d, e, r| {
            r.rule.paths = d
                .path_scope(e.node, &e.at, r.rule.effect)
                .map(|s| Spanned::new(s, e.node.span));
        }),
    Field::key("commands")
        .doc(
            "command scope: mapping, or list of allow patterns",
            "none",
            "['pytest ...']",
            "The argv `commands.run` may run; see `rules[].commands`.",
        )
        .optional(|d, e, r| {
            if let Some(c) = d.command_scope(e.node, &e.at) {
                r.rule.commands = Some(Spanned::new(c.spec, e.node.span));
                r.rule.command_allow_spans = c.allow_spans;
            }
        }),
    Field::key("urls")
        .doc(
            "url scope: mapping, or list of hosts",
            "none",
            "[api.github.com]",
            "The urls `http.fetch` may reach; see `rules[].urls`.",
        )
        .optional(|d, e, r| {
            r.rule.urls = d
                .url_scope(e.node, &e.at)
                .map(|s| Spanned::new(s, e.node.span));
        }),
    Field::key("agents")
        .doc(
            "agent scope (mapping)",
            "none",
            "{workdir: /workspace}",
            "What hosted coding agents may do (allow rules only); see `rules[].agents`.",
        )
        .optional(|d, e, r| {
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
    Field::key("limits")
        .doc(
            "mapping",
            "none",
            "{rate: 10/min}",
            "Limits on the calls the rule allows, combined with the top-level `limits`; see \
             `limits`.",
        )
        .optional(|d, e, r| r.rule.limits = d.limits(e.node, &e.at)),
    Field::key("reason")
        .doc(
            "string",
            "none",
            "secrets stay on the host",
            "Shown to the caller when the rule denies; on an allow rule with `confirm: never`, \
             why it runs unattended on purpose (the lint is then a note, not a warning).",
        )
        .optional(|d, e, r| r.rule.reason = d.string(e.node, &e.at)),
    Field::key("confirm")
        .doc(
            "`never` or `always`",
            "`always`",
            "never",
            "`never` (allow rules): the confirm-tier calls it allows run without a person's \
             approval; destructive ops stay confirmed. Linted.",
        )
        .optional(|d, e, r| {
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
    Field::key("roots")
        .doc(
            "list of absolute directories",
            "required in an allow rule",
            "[/workspace, '/home/{principal.id}']",
            "Where the ops may reach: never `/` (without `unsafe`) nor in /proc, /sys, /dev; \
             `{principal.id}` may stand for a whole component; a relative path argument is \
             anchored at the first root.",
        )
        .required(
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
    Field::key("deny")
        .doc(
            "list of globs",
            "none",
            "['*.pem', secrets]",
            "Paths refused even under a root, and everything beneath them (glob syntax below).",
        )
        .optional(|d, e, p| p.spec.deny = d.plain_strings(e.node, &e.at)),
    Field::key("readonly")
        .doc(
            "bool",
            "`false`",
            "true",
            "Refuse ops that write or delete.",
        )
        .optional(|d, e, p| {
            p.spec.readonly = d.bool(e.node, &e.at).unwrap_or(true);
        }),
    Field::key("symlinks")
        .doc(
            "`within`, `deny` or `follow`",
            "`within`",
            "deny",
            "A symlink met while opening a path: followed while it stays beneath the root, \
             refused, or followed anywhere (`follow` needs `unsafe: true`, a lint error).",
        )
        .optional(|d, e, p| {
            let modes = [
                ("within", SymlinkMode::Within),
                ("deny", SymlinkMode::Deny),
                ("follow", SymlinkMode::Follow),
            ];
            p.spec.symlinks = d.choice(e.node, &e.at, &modes).unwrap_or(SymlinkMode::Deny);
        }),
    Field::key("max_bytes")
        .doc(
            "size",
            "none: the op's own (10MiB for file ops)",
            "1MiB",
            "The largest file an op may read or write.",
        )
        .optional(|d, e, p| {
            p.spec.max_bytes = d.size(e.node, &e.at);
        }),
    Field::key("unsafe")
        .doc(
            "bool",
            "`false`",
            "true",
            "Permits `/` as a root and `symlinks: follow`; always a lint error.",
        )
        .optional(|d, e, p| {
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
    Field::key("allow")
        .doc(
            "list of argv patterns",
            "none",
            "['pytest ...', git status]",
            "Argv a call may run: words match literally, globs (`tests/*.py`) one argument, `...` \
             any rest, `{path}` a path beneath `cwd`, `{int}`, `{word}`.",
        )
        .optional(|d, e, c| {
            c.spec.allow = d.plain_strings(e.node, &e.at);
            c.allow_spans = item_spans(e.node);
        }),
    Field::key("deny")
        .doc(
            "list of argv patterns",
            "none",
            "['git push ...']",
            "Argv refused even when an allow pattern matches.",
        )
        .optional(|d, e, c| c.spec.deny = d.plain_strings(e.node, &e.at)),
    Field::key("shell")
        .doc(
            "bool",
            "`false`",
            "true",
            "Whether a call may ask for `sh -c` (a lint error).",
        )
        .optional(|d, e, c| {
            c.spec.shell = d.bool(e.node, &e.at).unwrap_or(false);
        }),
    Field::key("cwd")
        .doc(
            "string (absolute directory, not `/`)",
            "none: `commands.run` is refused (`policy.cwd_outside_scope`)",
            "/workspace",
            "The working directory; a call's `cwd` must lie beneath it, and `{path}` arguments \
             resolve beneath it.",
        )
        .optional(|d, e, c| c.spec.cwd = d.string(e.node, &e.at)),
    Field::key("env_pass")
        .doc(
            "list of variable names",
            "none",
            "[PATH, LANG]",
            "Variables passed through from corral's environment (nothing else is).",
        )
        .optional(|d, e, c| {
            c.spec.env_pass = d.plain_strings(e.node, &e.at);
        }),
    Field::key("env_set")
        .doc(
            "mapping of name to string",
            "none",
            "{LANG: C.UTF-8}",
            "Variables set to fixed values (a number or boolean as its text).",
        )
        .optional(env_set),
    Field::key("timeout")
        .doc(
            "duration",
            "none: the call's `limits.timeout`, else `60s`",
            "10m",
            "Wall-clock limit of one command (the smaller of this and the limits applies).",
        )
        .optional(|d, e, c| c.spec.timeout = d.duration(e.node, &e.at)),
    Field::key("max_output_bytes")
        .doc(
            "size",
            "none: the call's `limits.max_output_bytes`, else `1MiB`",
            "4MiB",
            "Output kept per stream.",
        )
        .optional(|d, e, c| {
            c.spec.max_output_bytes = d.size(e.node, &e.at);
        }),
    Field::key("network")
        .doc(
            "`none`, `loopback` or mapping `{allow: [HOST:PORT, ...]}`",
            "`isolation.network`",
            "{allow: ['api.github.com:443']}",
            "The command's network; an allow-list goes through corral's egress proxy \
             (docs/egress.md).",
        )
        .optional(|d, e, c| c.spec.network = d.network(e.node, &e.at)),
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
pub(super) const NETWORK: &[Field<Option<NetworkSpec>>] = &[Field::key("allow")
    .doc(
        "list of `host:port` (`*.domain:port` for subdomains)",
        "required",
        "['api.github.com:443']",
        "What the program may reach, through corral's egress proxy: names resolved once, internal \
         addresses refused unless named by address, one audit event per connection.",
    )
    .required(
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
    Field::key("hosts")
        .doc(
            "list of hosts",
            "none",
            "[api.github.com, '*.example.com']",
            "Hosts: exactly, or `*.domain` for its subdomains (not the apex).",
        )
        .optional(|d, e, s| s.hosts = d.plain_strings(e.node, &e.at)),
    Field::key("schemes")
        .doc(
            "list of schemes",
            "`https` in an allow rule, any in a deny rule",
            "[https, http]",
            "The schemes allowed (or denied).",
        )
        .optional(|d, e, s| {
            s.schemes = Some(d.plain_strings(e.node, &e.at));
        }),
    Field::key("ports")
        .doc(
            "list of ports (1-65535)",
            "the scheme's default port in an allow rule, any in a deny rule",
            "[443, 8443]",
            "The ports allowed (or denied).",
        )
        .optional(ports),
    Field::key("paths")
        .doc(
            "list of globs",
            "`/**`",
            "['/repos/**']",
            "The url paths allowed (or denied).",
        )
        .optional(|d, e, s| {
            s.paths = Some(d.plain_strings(e.node, &e.at));
        }),
    Field::key("methods")
        .doc(
            "list of HTTP methods (`GET`, `HEAD`, `POST`, `PUT`, `PATCH`, `DELETE`, `OPTIONS`)",
            "`[GET, HEAD]` in an allow rule, any in a deny rule",
            "[GET, POST]",
            "The methods `http.fetch` may use (or that are denied); a redirect is judged again \
             with the method it is followed with.",
        )
        .optional(|d, e, s| {
            s.methods = Some(d.plain_strings(e.node, &e.at));
        }),
    Field::key("block_private")
        .doc(
            "bool",
            "`true`",
            "false",
            "Refuse loopback, private, link-local, CGNAT and other internal addresses.",
        )
        .optional(|d, e, s| {
            s.block_private = d.bool(e.node, &e.at).unwrap_or(true);
        }),
];

/// An agent scope (`agents:` of an allow rule).
pub(super) const AGENT: &[Field<AgentScopeSpec>] = &[
    Field::key("workdir")
        .doc(
            "string (absolute directory, not `/`)",
            "required",
            "/workspace",
            "The one directory the agent works in (`{principal.id}` may stand for a whole \
             component); a session's workdir must lie beneath it.",
        )
        .required(
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
    Field::key("permissions")
        .doc(
            "`read-only`, `workspace-write` or `full`",
            "`read-only`",
            "workspace-write",
            "What the agent may change: nothing, files beneath the workdir, or also the host \
             beyond it (`full`: the host's top-level directories but the system ones, as far as \
             corral's user may, through the sandbox's checked layer; corral's own files, `.git` \
             and `protected:` stay refused; needs `unconfined_ok: true`, a lint warning; see \
             docs/agents.md).",
        )
        .optional(|d, e, s| {
            let choices = AgentPermissions::ALL.map(|p| (p.as_str(), p));
            s.permissions = d.choice(e.node, &e.at, &choices);
        }),
    Field::key("commands")
        .doc(
            "list of program names or absolute paths",
            "empty: any program the sandbox shows",
            "[pytest, git]",
            "The programs the agent may execute besides its CLI and its shell (`/bin/sh`, \
             `/bin/bash`); the kernel refuses any other (landlock). A script's interpreter \
             becomes executable too.",
        )
        .optional(|d, e, s| {
            s.commands = d.plain_strings(e.node, &e.at);
        }),
    Field::key("models")
        .doc(
            "list of model names",
            "any model the LLM proxy serves",
            "[gpt-5]",
            "The models a session may ask for.",
        )
        .optional(|d, e, s| {
            s.models = d.plain_strings(e.node, &e.at);
        }),
    Field::key("max_turns")
        .doc(
            "integer",
            "none: no limit from the scope",
            "50",
            "Most model turns one session may take.",
        )
        .optional(|d, e, s| {
            s.max_turns = d.uint32(e.node, &e.at);
        }),
    Field::key("unconfined_ok")
        .doc(
            "bool",
            "`false`",
            "true",
            "The explicit opt-in `permissions: full` needs.",
        )
        .optional(|d, e, s| {
            s.unconfined_ok = d.bool(e.node, &e.at).unwrap_or(false);
        }),
    Field::key("network")
        .doc(
            "`none`, `loopback` or mapping `{allow: [HOST:PORT, ...]}`",
            "none: only corral's LLM proxy",
            "{allow: ['pypi.org:443']}",
            "Where the agent's network may reach beyond the LLM proxy.",
        )
        .optional(|d, e, s| s.network = d.network(e.node, &e.at)),
    Field::key("confirm_writes_outside")
        .doc(
            "list of directories beneath the workdir",
            "none: no write needs a confirmation",
            "[/workspace/src]",
            "With `workspace-write`: a turn's changes beneath the workdir and outside these \
             directories are held; `agents.<a>.sessions.apply_writes` applies them once a person \
             approves that call (always confirmed). See docs/agents.md.",
        )
        .optional(|d, e, s| {
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
    Field::key("max_bytes")
        .doc(
            "size",
            "none (file ops: `10MiB`)",
            "1MiB",
            "The largest file read or written (for commands: the largest file they may write).",
        )
        .optional(|d, e, l| l.max_bytes = d.size(e.node, &e.at)),
    Field::key("max_entries")
        .doc(
            "integer",
            "none (listings: `10000`)",
            "500",
            "Most directory entries listed.",
        )
        .optional(|d, e, l| {
            l.max_entries = d.uint(e.node, &e.at);
        }),
    Field::key("timeout")
        .doc(
            "duration",
            "none (commands and custom ops: `60s`)",
            "30s",
            "Wall-clock time a call may take.",
        )
        .optional(|d, e, l| l.timeout = d.duration(e.node, &e.at)),
    Field::key("max_output_bytes")
        .doc(
            "size",
            "none (commands: `1MiB`)",
            "4MiB",
            "Most bytes of command output kept.",
        )
        .optional(|d, e, l| {
            l.max_output_bytes = d.size(e.node, &e.at);
        }),
    Field::key("rate")
        .doc(
            "rate `N/unit` (unit `s`, `min`, `h` or `day`)",
            "none",
            "10/min",
            "Calls per principal and op in that window, as a token bucket (see Rates).",
        )
        .optional(|d, e, l| {
            l.rate = d.unit(e.node, &e.at, Rate::parse, "10/min");
        }),
    Field::key("concurrency")
        .doc(
            "integer",
            "none",
            "4",
            "Calls of one principal to one op in flight at once (per replica).",
        )
        .optional(|d, e, l| l.concurrency = d.uint32(e.node, &e.at)),
    Field::key("cpu_seconds")
        .doc("integer", "none", "60", "CPU seconds a command may use.")
        .optional(|d, e, l| {
            l.cpu_seconds = d.uint(e.node, &e.at);
        }),
    Field::key("memory")
        .doc(
            "size",
            "none (commands, custom ops, upstream servers: `1GiB`)",
            "2GiB",
            "Memory a command may use; raising it over the default is linted (`lint.raised_cap`).",
        )
        .optional(|d, e, l| l.memory = d.size(e.node, &e.at)),
    Field::key("processes")
        .doc(
            "integer",
            "none (the `linux` backend: `1024`)",
            "256",
            "Processes a command may run at once.",
        )
        .optional(|d, e, l| l.processes = d.uint32(e.node, &e.at)),
    Field::key("write_quota")
        .doc(
            "size",
            "`1GiB`",
            "100MiB",
            "What a command may add to its write paths, counted at each file's full size; raising \
             it is linted (`lint.raised_cap`).",
        )
        .optional(|d, e, l| {
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
