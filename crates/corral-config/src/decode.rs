//! Decodes the spanned YAML tree into the typed `Config`, collecting every error (unknown keys
//! with the closest valid key, wrong types, malformed sizes, durations and rates).
//!
//! Every mapping with fixed keys is decoded from one table of [`Field`]s: a key is written once,
//! with its setter, and the unknown-key check and its did-you-mean come from the same table.

mod access;
mod control;
mod ops;
mod scopes;
#[cfg(test)]
mod tests;

use std::time::Duration;

use corral_policy::Tier;
use corral_policy::codes;
use corral_policy::suggest::closest;
use corral_policy::units::{parse_duration, parse_size};

use crate::diag::Diagnostic;
use crate::model::{
    BackendKind, Config, IsolationConfig, LlmConfig, McpConfig, NetworkMode, RecordingsConfig,
    SandboxConfig, Spanned, StateOnlyEntry, StorageConfig, TelemetryConfig,
};
use crate::yaml::{Key, Node, Span, Value};

/// A present key's value handed to its setter (or, for an absent required key, the mapping).
pub(super) struct Item<'n> {
    /// The value (for an absent key: the mapping).
    node: &'n Node,
    /// The key's path (`rules[0].paths`).
    at: String,
    /// Where the key was written (for an absent key: where the mapping starts).
    key: Span,
    /// The path of the mapping the key belongs to (`rules[0]`).
    within: &'n str,
}

/// Decodes one key's value into the section being built.
type Set<T> = fn(&mut Decoder, &Item<'_>, &mut T);

/// What the reference (`docs/CONFIG.md`) says of a key: written beside the key in its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyDoc {
    /// Its type (`string`, `bool`, `size`, `duration`, `list of ...`, `mapping`, ...).
    pub ty: &'static str,
    /// Its default: a value, `required`, `none`, or how it is computed.
    pub default: &'static str,
    /// A short example value.
    pub example: &'static str,
    /// Whether only start-up reads it (a SIGHUP reload leaves it as it was).
    pub startup_only: bool,
    /// One line on what it does.
    pub about: &'static str,
}

/// One key of a mapping: its name, how its value is decoded, what its absence means, and its
/// documentation. Written `Field::key("name").doc(...)` then `.optional(set)` or
/// `.required(set, missing)`: a key cannot be made without its documentation.
pub(super) struct Field<T> {
    key: &'static str,
    set: Set<T>,
    missing: Option<Set<T>>,
    doc: KeyDoc,
}

impl Field<()> {
    /// A key of a table, to be documented.
    const fn key(key: &'static str) -> NewKey {
        NewKey { key }
    }
}

/// A key not documented yet.
pub(super) struct NewKey {
    key: &'static str,
}

impl NewKey {
    /// Documents the key: its type, its default, an example value and what it does.
    const fn doc(
        self,
        ty: &'static str,
        default: &'static str,
        example: &'static str,
        about: &'static str,
    ) -> Documented {
        Documented {
            key: self.key,
            doc: KeyDoc {
                ty,
                default,
                example,
                startup_only: false,
                about,
            },
        }
    }
}

/// A documented key, to be given its setter.
pub(super) struct Documented {
    key: &'static str,
    doc: KeyDoc,
}

impl Documented {
    /// A key that only start-up reads: a SIGHUP reload does not change what it sets.
    const fn startup(self) -> Self {
        Self {
            doc: KeyDoc {
                startup_only: true,
                ..self.doc
            },
            ..self
        }
    }

    /// An optional key.
    const fn optional<T>(self, set: Set<T>) -> Field<T> {
        Field {
            key: self.key,
            set,
            missing: None,
            doc: self.doc,
        }
    }

    /// A key whose absence is handled by `missing` (called at the key's place in the table).
    const fn required<T>(self, set: Set<T>, missing: Set<T>) -> Field<T> {
        Field {
            key: self.key,
            set,
            missing: Some(missing),
            doc: self.doc,
        }
    }
}

/// The keys of a table, in its order (the order the unknown-key hint lists them in).
fn keys<T>(table: &[Field<T>]) -> Vec<&'static str> {
    table.iter().map(|f| f.key).collect()
}

/// A value kept to be decoded once its section is complete (when one key's meaning depends on
/// another's), with its key path.
type Stash = Option<(Node, String)>;

fn stash(e: &Item<'_>) -> Stash {
    Some((e.node.clone(), e.at.clone()))
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

    fn map<'n>(&mut self, node: &'n Node, at: &str, known: &[&str]) -> Option<&'n [(Key, Node)]> {
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
        Some(entries)
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

    /// The name of an environment variable (`[A-Za-z_][A-Za-z0-9_]*`). A value that is not a
    /// name (a url, a key) is refused without being repeated: it may be the secret itself.
    fn env_name(&mut self, node: &Node, at: &str) -> Option<Spanned<String>> {
        let s = self.spanned_string(node, at)?;
        let mut chars = s.value.chars();
        let ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if ok {
            return Some(s);
        }
        let key = at.rsplit('.').next().unwrap_or(at);
        self.err_fix(
            codes::CONFIG_INLINE_SECRET,
            format!("`{key}` holds a value, not the name of an environment variable"),
            at,
            s.span,
            format!(
                "export the value in a variable and write its name: `{key}: {}`",
                if key.starts_with("api_key") {
                    "OPENAI_API_KEY"
                } else {
                    "OPENAI_BASE_URL"
                }
            ),
        );
        None
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

    /// A non-negative integer that fits in 32 bits (a larger one is dropped).
    fn uint32(&mut self, node: &Node, at: &str) -> Option<u32> {
        self.uint(node, at).and_then(|v| u32::try_from(v).ok())
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

    /// `telemetry:`; `None` (with its error) when it has no usable `endpoint`.
    fn telemetry(&mut self, node: &Node, at: &str) -> Option<TelemetryConfig> {
        let mut t = TelemetryDraft::default();
        self.fields(node, at, TELEMETRY, &mut t)?;
        let Some(endpoint) = t.endpoint else {
            if !t.endpoint_given {
                self.err_fix(
                    codes::CONFIG_MISSING_KEY,
                    "`telemetry` needs `endpoint`, the collector's OTLP/HTTP address".to_owned(),
                    at,
                    node.span,
                    "add `endpoint: http://otel-collector:4318`, or remove `telemetry`".to_owned(),
                );
            }
            return None;
        };
        Some(TelemetryConfig {
            endpoint,
            service_name: t.service_name,
            sample_millionths: t.sample_millionths.unwrap_or(1_000_000),
        })
    }

    /// An OTLP/HTTP address: `http(s)://host[:port][/path]`, without credentials (a user or
    /// password in it is refused without being repeated) or a query. An `@` anywhere is taken
    /// for credentials: a password may hold a `/` (`http://ops:pa/ss@c`), which ends the
    /// authority before its `@`, and the URL would then be started with and logged whole.
    fn otlp_endpoint(&mut self, node: &Node, at: &str) -> Option<String> {
        let s = self.string(node, at)?;
        let rest = s
            .strip_prefix("http://")
            .or_else(|| s.strip_prefix("https://"));
        let authority = rest.map(|r| (r.split('/').next().unwrap_or(""), r));
        let problem = match authority {
            None => Some("is not an `http://` or `https://` URL"),
            Some((_, r)) if r.contains('@') => {
                self.err_fix(
                    codes::CONFIG_INLINE_SECRET,
                    "`telemetry.endpoint` holds credentials".to_owned(),
                    at,
                    node.span,
                    "drop them from the URL and export them as a header: \
                     `OTEL_EXPORTER_OTLP_HEADERS=authorization=...`"
                        .to_owned(),
                );
                return None;
            }
            Some(("", _)) => Some("has no host"),
            Some(_) if s.contains(|c: char| c.is_whitespace() || c == '?' || c == '#') => {
                Some("has a space, a query or a fragment")
            }
            Some(_) => None,
        };
        match problem {
            None => Some(s),
            Some(p) => {
                self.err_fix(
                    codes::CONFIG_INVALID_VALUE,
                    format!("`telemetry.endpoint` {p}"),
                    at,
                    node.span,
                    "write the collector's address, e.g. `http://otel-collector:4318`".to_owned(),
                );
                None
            }
        }
    }

    /// A number in (0, 1], in millionths (rounded; at least 1).
    fn ratio(&mut self, node: &Node, at: &str) -> Option<u32> {
        let r: f64 = match &node.value {
            Value::Float(f) => f.parse().unwrap_or(f64::NAN),
            Value::Int(i) => *i as f64,
            _ => {
                self.wrong_type(node, at, "a number in (0, 1]");
                return None;
            }
        };
        if r > 0.0 && r <= 1.0 {
            // In range, so the product is in (0, 1e6]: the cast cannot truncate.
            return Some(((r * 1e6).round() as u32).max(1));
        }
        self.err_fix(
            codes::CONFIG_INVALID_VALUE,
            format!("`{r}` is not in (0, 1]"),
            at,
            node.span,
            "write the share of traces to keep, e.g. `0.1` for one in ten; remove `telemetry` \
             to keep none"
                .to_owned(),
        );
        None
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

    /// Decodes a mapping by its table: refuses the keys the table does not have (with the
    /// closest one it has), then runs each field's setter (or, for an absent required key, its
    /// `missing`) in table order. Returns how many diagnostics there were before the setters
    /// ran, so a section refused as a whole can drop what its fields said; `None` when the node
    /// is not a mapping.
    fn fields<T>(
        &mut self,
        node: &Node,
        at: &str,
        table: &[Field<T>],
        target: &mut T,
    ) -> Option<usize> {
        let entries = self.map(node, at, &keys(table))?;
        let mark = self.diags.len();
        for f in table {
            let path = if at.is_empty() {
                f.key.to_owned()
            } else {
                format!("{at}.{}", f.key)
            };
            match entries.iter().find(|(k, _)| k.name == f.key) {
                Some((k, n)) => {
                    let item = Item {
                        node: n,
                        at: path,
                        key: k.span,
                        within: at,
                    };
                    (f.set)(self, &item, target);
                }
                None => {
                    if let Some(missing) = f.missing {
                        let item = Item {
                            node,
                            at: path,
                            key: node.span,
                            within: at,
                        };
                        missing(self, &item, target);
                    }
                }
            }
        }
        Some(mark)
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
        self.fields(root, "", TOP, &mut c);
        c
    }
}

/// The document's top level.
pub(super) const TOP: &[Field<Config>] = &[
    Field::key("version")
        .doc(
            "integer",
            "required",
            "1",
            "The config format's version; only `1` exists.",
        )
        .required(version, no_version),
    Field::key("preset")
        .doc(
            "preset name, mapping, or list of them",
            "none",
            "workspace_jail",
            "Presets, in order: their rules come first, before `enable` and `rules` (see Presets, \
             and `preset` for the mapping form).",
        )
        .optional(|d, e, c| c.presets = d.presets(e.node, &e.at)),
    Field::key("root")
        .doc(
            "string (absolute directory)",
            "none",
            "/workspace",
            "The root of presets that give none, of the path ops `enable` lists, and the working \
             directory of custom ops without `cwd`.",
        )
        .optional(|d, e, c| c.root = d.spanned_string(e.node, &e.at)),
    Field::key("state_dir")
        .doc(
            "string (directory)",
            "`.corral` in the config file's directory",
            "/var/lib/corral",
            "Corral's own state (the SQLite store, agent homes, installs); no op may read or \
             change it. A reload that moves it is refused.",
        )
        .startup()
        .optional(|d, e, c| {
            c.state_dir = d.spanned_string(e.node, &e.at);
        }),
    Field::key("enable")
        .doc(
            "list of op selectors",
            "none",
            "[files.read, files.list]",
            "Ops allowed to every caller (the anonymous one too, in open mode); the ones that \
             take a path are confined to `root` with the default secret deny patterns.",
        )
        .optional(|d, e, c| c.enable = d.strings(e.node, &e.at)),
    Field::key("disable")
        .doc(
            "list of op selectors",
            "none",
            "[commands.run]",
            "Ops denied to everyone: a deny rule after the presets, `enable` and `rules` (reason \
             `disabled in the config`).",
        )
        .optional(|d, e, c| c.disable = d.strings(e.node, &e.at)),
    Field::key("rules")
        .doc(
            "list of rules",
            "none",
            "[{allow: [files.read], paths: [/ws]}]",
            "Allow and deny rules with their scopes and limits: see `rules[]`.",
        )
        .optional(|d, e, c| c.rules = d.rules(e.node, &e.at)),
    Field::key("custom")
        .doc(
            "mapping of op id to custom op",
            "none",
            "{repo.lint: {argv: [ruff, check]}}",
            "Custom ops: programs run in the sandbox with declared params and effects; see \
             `custom.<op>`.",
        )
        .optional(|d, e, c| c.custom = d.custom(e.node, &e.at)),
    Field::key("auth")
        .doc(
            "mapping",
            "none: open mode (every caller is anonymous)",
            "{tokens: [...]}",
            "Who may call: static tokens and JWTs. Without either, `corral serve` refuses to \
             listen off loopback, or with ops that run programs, unless `--allow-open`.",
        )
        .optional(|d, e, c| c.auth = d.auth(e.node, &e.at)),
    Field::key("console")
        .doc(
            "mapping",
            "`{sign_in_rate: 10/min}`, no trusted proxy",
            "{sign_in_rate: 30/min, trusted_proxies: [10.0.0.0/8]}",
            "The web console's sign-in limit, and the reverse proxies whose `X-Forwarded-For` \
             it believes (see `console`).",
        )
        .startup()
        .optional(|d, e, c| {
            d.fields(e.node, &e.at, access::CONSOLE, &mut c.console);
        }),
    Field::key("audit")
        .doc(
            "mapping",
            "`{sink: store}`",
            "{sink: stderr}",
            "Where audit events go besides the store, which always keeps them.",
        )
        .startup()
        .optional(|d, e, c| c.audit = d.audit(e.node, &e.at)),
    Field::key("storage")
        .doc(
            "mapping",
            "SQLite in `state_dir`",
            "{url: postgres://db/corral}",
            "The database of audit events, confirmations, runs and recordings.",
        )
        .startup()
        .optional(|d, e, c| {
            d.fields(e.node, &e.at, STORAGE, &mut c.storage);
        }),
    Field::key("limits")
        .doc(
            "mapping",
            "none",
            "{timeout: 30s, rate: 60/min}",
            "Limits on every call; the rule that allows a call adds its own, and, field by \
             field, the strictest wins.",
        )
        .optional(|d, e, c| c.limits = d.limits(e.node, &e.at)),
    Field::key("state_only")
        .doc(
            "mapping of op id to reason",
            "none",
            "{notes.set_tag: tags only}",
            "Custom ops named like a change that declare only `read`, each with why it changes \
             nothing outside the caller's own state (else `lint.mutating_name`).",
        )
        .optional(state_only),
    Field::key("tiers")
        .doc(
            "mapping of op id to tier (`read`, `confirm` or `destructive`)",
            "none",
            "{http.fetch: confirm}",
            "Raises an op's tier; a tier is never lowered.",
        )
        .optional(tiers),
    Field::key("isolation")
        .doc(
            "mapping",
            "`{backend: linux, network: none}`",
            "{backend: process}",
            "Where commands, custom ops and upstream servers run.",
        )
        .startup()
        .optional(|d, e, c| {
            d.fields(e.node, &e.at, ISOLATION, &mut c.isolation);
        }),
    Field::key("autonomy")
        .doc(
            "`L0` to `L4`, or mapping",
            "none: no autonomy restriction",
            "L3",
            "The process-wide autonomy level and per-principal pins (see `autonomy`).",
        )
        .optional(|d, e, c| c.autonomy = d.autonomy(e.node, &e.at)),
    Field::key("roles")
        .doc(
            "mapping (may be empty: `{}`)",
            "none",
            "{overrides: {files.write: admin}}",
            "Present, even empty: turns RBAC by tier on, with per-op role overrides (see Role \
             selectors).",
        )
        .optional(|d, e, c| c.roles = d.roles(e.node, &e.at)),
    Field::key("guardrails")
        .doc(
            "mapping",
            "see `guardrails`",
            "{mode: dry_run}",
            "Confirmation of confirm- and destructive-tier calls, or dry-run; where pending \
             actions live.",
        )
        .optional(|d, e, c| {
            c.guardrails = d.guardrails(e.node, &e.at);
        }),
    Field::key("budgets")
        .doc(
            "mapping",
            "none: no budget",
            "{max_calls: 200}",
            "Per-run budgets (calls sharing an `X-Corral-Run` id), and the lab's replay and judge \
             ceilings.",
        )
        .optional(|d, e, c| c.budgets = d.budgets(e.node, &e.at)),
    Field::key("disabled_ops")
        .doc(
            "list of op ids",
            "none",
            "[http.fetch]",
            "Ops removed from the catalog before anything is built from it; nothing may refer to \
             them.",
        )
        .optional(|d, e, c| {
            c.disabled_ops = d.strings(e.node, &e.at);
        }),
    Field::key("protected")
        .doc(
            "list of globs",
            "none",
            "['*.lock', /ws/.github]",
            "Paths no op may create, change or delete, beside the always protected `.git`, \
             `.corral` and corral's own files (glob syntax below).",
        )
        .optional(|d, e, c| c.protected = d.strings(e.node, &e.at)),
    Field::key("mcp_servers")
        .doc(
            "mapping of name to upstream server",
            "none",
            "{notes: {command: [notes-mcp]}}",
            "Upstream MCP servers run in the sandbox; their tools become ops `mcp.<name>.<tool>`.",
        )
        .optional(|d, e, c| {
            c.mcp_servers = d.mcp_servers(e.node, &e.at);
        }),
    Field::key("mcp")
        .doc(
            "mapping",
            "loopback `Host`s only, no `Origin` check",
            "{allowed_hosts: [corral.example.com]}",
            "Which `Host` and `Origin` headers the `/mcp` endpoint answers.",
        )
        .startup()
        .optional(|d, e, c| {
            d.fields(e.node, &e.at, MCP, &mut c.mcp);
        }),
    Field::key("telemetry")
        .doc(
            "mapping",
            "none: no trace leaves the process",
            "{endpoint: http://otel-collector:4318}",
            "OpenTelemetry traces over OTLP/HTTP: a span per call with a child per guard step \
             (op, principal, outcome and code; never argument values); the audit event carries \
             the trace id.",
        )
        .startup()
        .optional(|d, e, c| c.telemetry = d.telemetry(e.node, &e.at)),
    Field::key("run")
        .doc(
            "mapping (may be empty)",
            "none",
            "{profile: readonly}",
            "The sandbox `corral run --config FILE` gives its command; `corral serve` does not \
             read it.",
        )
        .optional(|d, e, c| c.run = d.run(e.node, &e.at)),
    Field::key("sandbox")
        .doc(
            "mapping",
            "`{enabled: true}`",
            "{enabled: false}",
            "The lab: whether it answers, and the external programs, scorers and judges its runs \
             may name.",
        )
        .optional(|d, e, c| {
            d.fields(e.node, &e.at, SANDBOX, &mut c.sandbox);
        }),
    Field::key("recordings")
        .doc(
            "mapping",
            "see `recordings`",
            "{retention: 168h}",
            "How long recorded runs are kept and how large they may grow.",
        )
        .startup()
        .optional(|d, e, c| {
            d.fields(e.node, &e.at, RECORDINGS, &mut c.recordings);
        }),
    Field::key("agents")
        .doc(
            "adapter name, list of them, or mapping",
            "none",
            "[codex]",
            "The coding agents this deployment hosts (`codex`, `claude_code`); `agent_host` hosts \
             these when it lists none itself.",
        )
        .optional(|d, e, c| c.agents = d.agents(e.node, &e.at)),
    Field::key("install")
        .doc(
            "mapping",
            "`{mode: lazy}`",
            "{mode: offline}",
            "When the hosted agents' CLIs are installed.",
        )
        .optional(|d, e, c| {
            d.fields(e.node, &e.at, control::INSTALL, &mut c.install);
        }),
    Field::key("llm")
        .doc(
            "mapping",
            "none: the LLM proxy's routes answer 503 `llm.not_configured`",
            "{base_url_env: OPENAI_BASE_URL}",
            "The model provider behind the LLM proxy, by the names of the variables holding its \
             url and key.",
        )
        .startup()
        .optional(|d, e, c| {
            let mut l = LlmConfig::default();
            if d.fields(e.node, &e.at, LLM, &mut l).is_some() {
                c.llm = Some(l);
            }
        }),
];

/// `llm:` the LLM proxy's upstream, by the names of the variables that hold it.
pub(super) const LLM: &[Field<LlmConfig>] = &[
    Field::key("base_url_env").doc(
        "environment variable name",
        "required",
        "OPENAI_BASE_URL",
        "The variable holding the provider's base url (`http://` or `https://`, e.g. \
         `https://api.openai.com/v1`); it must be set and non-empty.",
    ).startup().required(|d, e, l| l.base_url_env = d.env_name(e.node, &e.at),
        |d, e, _| {
            d.err_fix(
                codes::CONFIG_MISSING_KEY,
                "`llm:` needs `base_url_env`".to_owned(),
                e.within,
                e.key,
                "name the variable that holds the provider's url: `llm: {base_url_env: OPENAI_BASE_URL}`".to_owned(),
            );
        }),
    Field::key("api_key_env").doc(
        "environment variable name",
        "none: no key is sent (a local model)",
        "OPENAI_API_KEY",
        "The variable holding the provider's API key.",
    ).startup().optional(|d, e, l| {
        l.api_key_env = d.env_name(e.node, &e.at);
    }),
    Field::key("root_agent").doc(
        "string (1-128 characters, not `lab_coach`)",
        "`root`",
        "planner",
        "The `X-Corral-Agent` name of the root agent.",
    ).startup().optional(|d, e, l| {
        l.root_agent = d.spanned_string(e.node, &e.at).filter(|r| {
            let ok = !r.value.is_empty() && r.value.len() <= 128;
            if !ok {
                d.err_fix(
                    codes::CONFIG_INVALID_VALUE,
                    "`llm.root_agent` must be 1-128 characters".to_owned(),
                    &e.at,
                    r.span,
                    "give the name the root agent sends in `X-Corral-Agent` (default `root`)"
                        .to_owned(),
                );
            }
            // Reserved for learning mode's coach (corral_learn::levels::LAB_COACH): the root
            // agent may not take its name.
            let reserved = r.value == "lab_coach";
            if ok && reserved {
                d.err_fix(
                    codes::CONFIG_INVALID_VALUE,
                    "`llm.root_agent` is `lab_coach`, a name reserved for learning mode's coach"
                        .to_owned(),
                    &e.at,
                    r.span,
                    "name the root agent anything else (default `root`)".to_owned(),
                );
            }
            ok && !reserved
        });
    }),
    Field::key("api").doc(
        "`openai` or `anthropic`",
        "`openai`",
        "anthropic",
        "The API the provider speaks: OpenAI (chat completions, Responses, models; key as a \
         bearer token) or Anthropic's Messages API (key as `x-api-key`).",
    ).startup().optional(|d, e, l| {
        let Some(a) = d.spanned_string(e.node, &e.at) else {
            return;
        };
        l.api = match a.value.as_str() {
            "openai" => Some(crate::model::LlmApi::OpenAi),
            "anthropic" => Some(crate::model::LlmApi::Anthropic),
            other => {
                d.err_fix(
                    codes::CONFIG_INVALID_VALUE,
                    format!("`llm.api` is `{other}`, which is not an API corral speaks"),
                    &e.at,
                    a.span,
                    "write `api: openai` (chat completions and Responses; the default) or `api: anthropic` (the Messages API)".to_owned(),
                );
                None
            }
        };
    }),
    Field::key("base_url").doc(
        "refused",
        "none",
        "(refused)",
        "Refused (`config.invalid_value`): the url is never written in the config; name its \
         variable with `base_url_env`.",
    ).startup().optional(|d, e, _| {
        d.err_fix(
            codes::CONFIG_INVALID_VALUE,
            "the provider's url is written in the config; `llm:` holds names of environment variables only".to_owned(),
            &e.at,
            e.node.span,
            "remove `base_url:`; export the url (`export OPENAI_BASE_URL=https://api.openai.com/v1`) and name it with `base_url_env: OPENAI_BASE_URL`".to_owned(),
        );
    }),
    Field::key("api_key").doc(
        "refused",
        "none",
        "(refused)",
        "Refused (`config.inline_secret`): the key is never written in the config; name its \
         variable with `api_key_env`.",
    ).startup().optional(|d, e, _| {
        d.err_fix(
            codes::CONFIG_INLINE_SECRET,
            "the provider's API key is written in the config".to_owned(),
            &e.at,
            e.node.span,
            "remove `api_key:`; put the key in an environment variable and name it with `api_key_env: OPENAI_API_KEY`".to_owned(),
        );
    }),
];

/// `recordings:` the limits of recorded runs.
pub(super) const RECORDINGS: &[Field<RecordingsConfig>] = &[
    Field::key("retention")
        .doc(
            "duration",
            "`720h` (30 days)",
            "168h",
            "How long a recording is kept after its first event.",
        )
        .startup()
        .optional(|d, e, r| r.retention = d.duration(e.node, &e.at)),
    Field::key("max_bytes")
        .doc(
            "size",
            "`16MiB`",
            "64MiB",
            "Stored bytes of events per recording; raising it is linted (`lint.raised_cap`).",
        )
        .startup()
        .optional(|d, e, r| r.max_bytes = d.size(e.node, &e.at)),
    Field::key("max_events")
        .doc(
            "integer",
            "`10000`",
            "50000",
            "Events per recording; raising it is linted (`lint.raised_cap`).",
        )
        .startup()
        .optional(|d, e, r| r.max_events = d.uint(e.node, &e.at)),
    Field::key("max_per_tenant")
        .doc(
            "integer",
            "`10000`",
            "500",
            "Live recordings per tenant; a call that would start one more is refused \
             (`recording.limit`).",
        )
        .startup()
        .optional(|d, e, r| r.max_per_tenant = d.uint(e.node, &e.at)),
    Field::key("max_per_principal")
        .doc(
            "integer",
            "`1000`",
            "100",
            "Live recordings per principal (by identity) in a tenant.",
        )
        .startup()
        .optional(|d, e, r| r.max_per_principal = d.uint(e.node, &e.at)),
];

fn version(d: &mut Decoder, e: &Item<'_>, c: &mut Config) {
    if e.node.value == Value::Int(1) {
        c.version = 1;
    } else {
        d.err_fix(
            codes::CONFIG_VERSION,
            "unsupported config version".to_owned(),
            &e.at,
            e.node.span,
            "write `version: 1`".to_owned(),
        );
    }
}

fn no_version(d: &mut Decoder, e: &Item<'_>, _: &mut Config) {
    d.err(
        codes::CONFIG_VERSION,
        "the config has no `version`".to_owned(),
        &e.at,
        e.node.span,
    );
}

/// `state_only: {op_id: reason}`.
fn state_only(d: &mut Decoder, e: &Item<'_>, c: &mut Config) {
    let Some(entries) = d.map_any(e.node, &e.at) else {
        return;
    };
    for (k, v) in entries {
        let at = format!("{}.{}", e.at, k.name);
        let reason = d.string(v, &at).unwrap_or_default();
        if reason.trim().is_empty() {
            d.err_fix(
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

/// `tiers: {op_id: tier}`.
fn tiers(d: &mut Decoder, e: &Item<'_>, c: &mut Config) {
    let Some(entries) = d.map_any(e.node, &e.at) else {
        return;
    };
    let tiers = Tier::ALL.map(|t| (t.as_str(), t));
    for (k, v) in entries {
        if let Some(t) = d.choice(v, &format!("{}.{}", e.at, k.name), &tiers) {
            c.tiers.push((Spanned::new(k.name.clone(), k.span), t));
        }
    }
}

/// `storage:`.
pub(super) const STORAGE: &[Field<StorageConfig>] = &[Field::key("url")
    .doc(
        "string (`sqlite://PATH` or `postgres://...`)",
        "`sqlite://` + `state_dir`/`corral.db`",
        "postgres://corral@db/corral",
        "The store's database; replicas share one Postgres (run budgets and confirmations are \
         then shared).",
    )
    .startup()
    .optional(|d, e, s| s.url = d.string(e.node, &e.at))];

/// `telemetry:` being decoded.
#[derive(Default)]
pub(super) struct TelemetryDraft {
    endpoint: Option<String>,
    /// `endpoint` was written (a bad one has its own error; no "missing" one after it).
    endpoint_given: bool,
    service_name: Option<String>,
    sample_millionths: Option<u32>,
}

/// `telemetry:`.
pub(super) const TELEMETRY: &[Field<TelemetryDraft>] = &[
    Field::key("endpoint")
        .doc(
            "string (`http://` or `https://` URL)",
            "required",
            "http://otel-collector:4318",
            "The collector's OTLP/HTTP address: a base (spans go to its `/v1/traces`) or, with \
             a path, the traces URL itself. No credentials in it: put them in \
             `OTEL_EXPORTER_OTLP_HEADERS`.",
        )
        .startup()
        .optional(|d, e, t| {
            t.endpoint_given = true;
            t.endpoint = d.otlp_endpoint(e.node, &e.at);
        }),
    Field::key("service_name")
        .doc(
            "string",
            "`corral`",
            "corral-eu-1",
            "The `service.name` of the spans.",
        )
        .startup()
        .optional(|d, e, t| t.service_name = d.string(e.node, &e.at)),
    Field::key("sample_ratio")
        .doc(
            "number in (0, 1]",
            "`1`: every call",
            "0.1",
            "The share of new traces kept; a call whose caller sent a sampled `traceparent` \
             is kept whatever this is.",
        )
        .startup()
        .optional(|d, e, t| t.sample_millionths = d.ratio(e.node, &e.at)),
];

/// `mcp:` the `/mcp` endpoint's allow-lists.
pub(super) const MCP: &[Field<McpConfig>] = &[
    Field::key("allowed_hosts").doc(
        "list of `name` or `name:port`",
        "`localhost`, `127.0.0.1`, `::1`",
        "[corral.example.com]",
        "The `Host` values `/mcp` answers (DNS-rebinding protection); an empty list is \
         refused.",
    ).startup().optional(|d, e, m| {
        m.allowed_hosts = d.strings(e.node, &e.at);
        if m.allowed_hosts.is_empty() {
            d.err_fix(
                codes::CONFIG_INVALID_VALUE,
                "`mcp.allowed_hosts` is empty, which would let any `Host` reach `/mcp`".to_owned(),
                &e.at,
                e.node.span,
                "list the names clients use (`[corral.example.com, \"corral.example.com:9000\"]`), or remove the key for loopback only".to_owned(),
            );
        }
    }),
    Field::key("allowed_origins").doc(
        "list of `scheme://host[:port]`",
        "none: no `Origin` check",
        "['https://app.example.com']",
        "The browser `Origin`s `/mcp` answers.",
    ).startup().optional(|d, e, m| {
        m.allowed_origins = d.strings(e.node, &e.at);
    }),
    Field::key("tool_names").doc(
        "`dotted` or `underscored`",
        "`dotted`",
        "underscored",
        "How MCP tools are named (`/mcp` and `corral mcp`): `dotted`, the op ids as they are \
         (`files.read`); `underscored`, `__` for each `.` (`files__read`), for hosts that take \
         only `^[a-zA-Z0-9_-]{1,64}$` (an op whose id already holds `__`, or whose name would \
         pass 64 characters, is not offered then).",
    ).startup().optional(|d, e, m| {
        m.underscored_tool_names = d
            .choice(e.node, &e.at, &[("dotted", false), ("underscored", true)])
            .unwrap_or(false);
    }),
];

/// `sandbox:` the lab.
pub(super) const SANDBOX: &[Field<SandboxConfig>] = &[
    Field::key("enabled")
        .doc(
            "bool",
            "`true`",
            "false",
            "Whether the lab answers; `false` closes its routes, CLI commands and MCP tools \
             without deleting what it stored.",
        )
        .optional(|d, e, s| {
            s.enabled = d.bool(e.node, &e.at).unwrap_or(true);
        }),
    Field::key("programs")
        .doc(
            "mapping of name to lab program",
            "none",
            "{echo: {command: [python3, echo.py]}}",
            "External programs a run may name as its variant (run in the `linux` backend, \
             reaching only corral's API for their run).",
        )
        .optional(|d, e, s| {
            s.programs = d.lab_programs(e.node, &e.at);
        }),
    Field::key("scorers")
        .doc(
            "mapping of name to lab program",
            "none",
            "{exact: {command: [./score]}}",
            "External command scorers a run may name (`command:<name>`; run in the `linux` \
             backend, no network).",
        )
        .optional(|d, e, s| {
            s.scorers = d.lab_programs(e.node, &e.at);
        }),
    Field::key("record_runs")
        .doc(
            "bool",
            "`false`",
            "true",
            "Record every lab run (its calls and its task input, under the run's id): what \
             deterministic replay starts from.",
        )
        .optional(|d, e, s| {
            s.record_runs = d.bool(e.node, &e.at).unwrap_or(false);
        }),
    Field::key("judges")
        .doc(
            "mapping of name to lab program",
            "none",
            "{pairwise: {command: [./judge]}}",
            "External command judges a tournament may name (`command:<name>`): each reads \
             `{input, first, second, expected}` and answers which it prefers.",
        )
        .optional(|d, e, s| {
            s.judges = d.lab_programs(e.node, &e.at);
        }),
];

/// `isolation:` where commands run.
pub(super) const ISOLATION: &[Field<IsolationConfig>] = &[
    Field::key("backend")
        .doc(
            "`linux` or `process`",
            "`linux`",
            "process",
            "`linux`: namespaces, landlock and seccomp; `process`: a plain child process, and \
             every result says `isolated: false`.",
        )
        .startup()
        .optional(|d, e, i| {
            let kinds = [
                ("linux", BackendKind::Linux),
                ("process", BackendKind::Process),
            ];
            i.backend = d.choice(e.node, &e.at, &kinds).unwrap_or_default();
        }),
    Field::key("network")
        .doc(
            "`none` or `loopback`",
            "`none`",
            "loopback",
            "The sandbox's network where nothing sets another: an empty namespace, or one with \
             only loopback up.",
        )
        .startup()
        .optional(|d, e, i| {
            let modes = [
                ("none", NetworkMode::None),
                ("loopback", NetworkMode::Loopback),
            ];
            i.network = d.choice(e.node, &e.at, &modes).unwrap_or_default();
        }),
    Field::key("cgroup_parent")
        .doc(
            "string (absolute path)",
            "none: corral's own cgroup",
            "/sys/fs/cgroup/corral.slice",
            "The cgroup v2 directory per-run cgroups go under.",
        )
        .startup()
        .optional(|d, e, i| {
            let Some(v) = d.string(e.node, &e.at) else {
                return;
            };
            if v.starts_with('/') {
                i.cgroup_parent = Some(std::path::PathBuf::from(v));
            } else {
                d.err_fix(
                    codes::CONFIG_INVALID_VALUE,
                    format!("`isolation.cgroup_parent` `{v}` is not an absolute path"),
                    &e.at,
                    e.node.span,
                    "give the cgroup v2 directory's full path, e.g. `/sys/fs/cgroup/corral.slice`"
                        .to_owned(),
                );
            }
        }),
    Field::key("host_uids")
        .doc(
            "`auto`, `root` or `START:COUNT`",
            "`auto`",
            "1879048192:65536",
            "The host ids a sandbox runs as when corral is host root: `auto` is corral's \
             `/etc/subuid` range, else a fixed unused one; COUNT at least 65535.",
        )
        .startup()
        .optional(host_uids),
];

/// `isolation.host_uids`: `auto`, `root` or `START:COUNT`.
fn host_uids(d: &mut Decoder, e: &Item<'_>, i: &mut IsolationConfig) {
    let Some(v) = d.string(e.node, &e.at) else {
        return;
    };
    let range_ok = v.split_once(':').is_some_and(|(a, b)| {
        a.parse::<u32>().is_ok_and(|a| a > 0)
            && b.parse::<u32>().is_ok_and(|b| b >= 65535)
            && a.parse::<u32>()
                .ok()
                .zip(b.parse::<u32>().ok())
                .is_some_and(|(a, b)| a.checked_add(b).is_some())
    });
    if v == "auto" || v == "root" || range_ok {
        i.host_uids = Some(v);
    } else {
        d.err_fix(
            codes::CONFIG_INVALID_VALUE,
            format!("`isolation.host_uids` `{v}` is not a host id mode"),
            &e.at,
            e.node.span,
            "write `auto` (the default), `root`, or `START:COUNT` with START above 0 and COUNT at least 65535, e.g. `1879048192:65536`".to_owned(),
        );
    }
}

/// A documented key: its name and what the reference says of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyRow {
    /// The key.
    pub key: &'static str,
    /// Its documentation.
    pub doc: KeyDoc,
}

fn rows<T>(table: &[Field<T>]) -> Vec<KeyRow> {
    table
        .iter()
        .map(|f| KeyRow {
            key: f.key,
            doc: f.doc,
        })
        .collect()
}

/// A table of the decoder, as the reference (`docs/CONFIG.md`) shows it.
pub(crate) struct Table {
    /// The name of its const in the decoder (`TOP`, `RULE`, ...).
    pub name: &'static str,
    /// Where its mapping is written (`rules[].paths`; `[]` an item of a list, `<op>` a key the
    /// config chooses); the first names the section.
    pub paths: &'static [&'static str],
    /// What the mapping is, and its short forms.
    pub about: &'static str,
    keys: fn() -> Vec<KeyRow>,
}

impl Table {
    /// Its keys, in the decoder's order.
    pub fn keys(&self) -> Vec<KeyRow> {
        (self.keys)()
    }
}

/// A [`Table`] of the const `$t`, written at `$paths`.
macro_rules! table {
    ($t:path, [$($p:literal),+ $(,)?], $about:literal $(,)?) => {
        Table {
            name: stringify!($t),
            paths: &[$($p),+],
            about: $about,
            keys: || rows($t),
        }
    };
}

/// Every table the decoder reads, in the reference's order.
pub(crate) const REGISTRY: &[Table] = &[
    table!(
        TOP,
        [""],
        "The document's top level. Only `version` is required."
    ),
    table!(
        control::PRESET,
        ["preset", "preset[]"],
        "A preset written as a mapping; `preset: NAME` alone is short for `{name: NAME}`, and \
         `preset:` may list several. What each preset allows is under Presets below."
    ),
    table!(
        scopes::RULE,
        ["rules[]"],
        "One rule: exactly one of `allow` and `deny`, with the ops it selects. An allow rule \
         carries the scopes its ops' params need: `paths` for a path, `commands` for an argv \
         or a cwd, `urls` for a url, `agents` for the agent ops."
    ),
    table!(
        scopes::PATH,
        ["rules[].paths"],
        "A path scope; a list is short for `{roots: [...]}`. In a deny rule `roots` may be `/`, \
         and may be left out when `deny` patterns are given (then only the patterns match)."
    ),
    table!(
        scopes::COMMAND,
        ["rules[].commands"],
        "A command scope (`commands.run`); a list is short for `{allow: [...]}`."
    ),
    table!(
        scopes::URL,
        ["rules[].urls"],
        "A url scope (`http.fetch`); a list is short for `{hosts: [...]}`."
    ),
    table!(
        scopes::AGENT,
        ["rules[].agents"],
        "What hosted coding agents may do (docs/agents.md); allow rules only."
    ),
    table!(
        scopes::NETWORK,
        [
            "rules[].commands.network",
            "rules[].agents.network",
            "custom.<op>.network",
            "mcp_servers.<name>.network",
            "run.network",
        ],
        "A network written as a mapping (docs/egress.md); `none` and `loopback` are written as \
         plain strings."
    ),
    table!(
        scopes::LIMIT,
        ["limits", "rules[].limits"],
        "Limits on a call. The limit in force is, field by field, the strictest of the \
         top-level `limits`, the `limits` of the rule that allows the call, and its scopes' \
         `max_bytes`, `timeout` and `max_output_bytes`; a field nobody sets falls back to the \
         op's own default, shown in parentheses."
    ),
    table!(
        ops::CUSTOM,
        ["custom.<op>"],
        "One custom op; `<op>` is its op id. Whatever its effects, it runs a program (open mode \
         refuses it)."
    ),
    table!(
        ops::PARAM,
        ["custom.<op>.params.<name>"],
        "One param of a custom op as a mapping; `name: TYPE` alone is short for `{type: TYPE}`."
    ),
    table!(
        ops::MCP_SERVER,
        ["mcp_servers.<name>"],
        "One upstream MCP server. `<name>` (letters, digits, `_` and `-`, starting with a \
         letter) is the middle of its tools' op ids, `mcp.<name>.<tool>`."
    ),
    table!(
        ops::MCP_TOOL,
        ["mcp_servers.<name>.tools.<tool>"],
        "One declared tool of an upstream server; `<tool>:` with no value declares it with \
         the defaults."
    ),
    table!(
        access::AUTH,
        ["auth"],
        "Who may call. With neither tokens nor a JWT the server is in open mode."
    ),
    table!(
        access::CONSOLE,
        ["console"],
        "The web console (docs/console.md): how many sign-ins one client and one identity may \
         try, and which reverse proxies name the client. Read only at start-up."
    ),
    table!(
        access::TOKEN,
        ["auth.tokens[]"],
        "One static token; its secret lives in the environment. `id` and `token_env` are \
         required."
    ),
    table!(
        access::JWT,
        ["auth.jwt"],
        "How bearer JWTs are verified and mapped to principals."
    ),
    table!(
        access::SERVICE_CLAIM,
        ["auth.jwt.service_claim"],
        "The claim that marks a service principal; both keys are required."
    ),
    table!(
        access::ROLES,
        ["roles"],
        "RBAC by tier: present (even `roles: {}`, or `roles:` with no value) turns it on."
    ),
    table!(
        access::AUTONOMY,
        ["autonomy"],
        "Autonomy written as a mapping; `autonomy: L2` is short for `{level: L2}`."
    ),
    table!(
        access::PIN,
        ["autonomy.pins[]"],
        "One pin: a principal and its level; both keys are required."
    ),
    table!(
        control::GUARDRAILS,
        ["guardrails"],
        "Confirmation and dry-run (docs/guardrails.md)."
    ),
    table!(
        control::BUDGETS,
        ["budgets"],
        "Per-run budgets: a run is the calls carrying one `X-Corral-Run` id, or made by a \
         run-scoped token. `0` (or absent) disables one."
    ),
    table!(
        control::REPLAY_BUDGET,
        ["budgets.replay"],
        "The ceiling of one shadow evaluation's replay runs (docs/lab.md)."
    ),
    table!(
        control::JUDGE_BUDGET,
        ["budgets.judge"],
        "The ceiling of one tournament's judge calls (docs/lab.md)."
    ),
    table!(
        access::AUDIT,
        ["audit"],
        "Where audit events go. Read only at start-up."
    ),
    table!(
        STORAGE,
        ["storage"],
        "Where corral keeps its state. Read only at start-up."
    ),
    table!(
        ISOLATION,
        ["isolation"],
        "Where commands run (docs/isolation.md). Read only at start-up."
    ),
    table!(
        TELEMETRY,
        ["telemetry"],
        "OpenTelemetry traces (docs/DEPLOY.md, Observability). Read only at start-up. The \
         exporter also reads the standard `OTEL_EXPORTER_OTLP_HEADERS` (e.g. a collector's \
         credentials, which stay out of the config) and `OTEL_EXPORTER_OTLP_TIMEOUT`."
    ),
    table!(
        MCP,
        ["mcp"],
        "The `/mcp` endpoint's allow-lists. Read only at start-up."
    ),
    table!(
        ops::LAB_PROGRAM,
        [
            "sandbox.programs.<name>",
            "sandbox.scorers.<name>",
            "sandbox.judges.<name>",
        ],
        "One external program of the lab (docs/lab.md); `<name>` is letters, digits, `_` and \
         `-`, starting with a letter."
    ),
    table!(SANDBOX, ["sandbox"], "The lab (docs/lab.md)."),
    table!(
        RECORDINGS,
        ["recordings"],
        "The limits of recorded runs, set when the store opens: at start-up."
    ),
    table!(
        control::AGENTS,
        ["agents"],
        "The hosted coding agents as a mapping; `agents: [codex]` (or `agents: codex`) is short \
         for `{adapters: [codex]}`."
    ),
    table!(
        control::INSTALL,
        ["install"],
        "When the hosted agents' CLIs are installed (docs/agents.md)."
    ),
    table!(
        LLM,
        ["llm"],
        "The LLM proxy's provider (docs/llm-proxy.md), by the names of the environment \
         variables holding its url and key, never the values. Read at start-up."
    ),
    table!(
        control::RUN,
        ["run"],
        "The sandbox of `corral run --config FILE`: flags win over keys, and `read`, `write` \
         and `env` add to the flags' lists. `run:` with no value is the defaults."
    ),
    table!(
        control::RUN_LIMITS,
        ["run.limits"],
        "The limits of `corral run --config FILE`."
    ),
];

/// Every table with each path it is written at, made concrete (`rules[0].paths`,
/// `custom.x`): the no-panic test draws documents from their keys, and the table test checks
/// each one's unknown-key hint.
#[cfg(test)]
pub(crate) fn all_tables() -> Vec<(String, Vec<&'static str>)> {
    REGISTRY
        .iter()
        .flat_map(|t| {
            let keys: Vec<&'static str> = t.keys().iter().map(|r| r.key).collect();
            t.paths.iter().map(move |p| (concrete(p), keys.clone()))
        })
        .collect()
}

/// A registry path made concrete: `[]` is `[0]`, `<...>` is `x`.
#[cfg(test)]
fn concrete(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path.replace("[]", "[0]");
    while let Some(open) = rest.find('<') {
        let close = rest[open..].find('>').map_or(rest.len(), |c| open + c + 1);
        out.push_str(&rest[..open]);
        out.push('x');
        rest = rest[close..].to_owned();
    }
    out.push_str(&rest);
    out
}
