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
    SandboxConfig, Spanned, StateOnlyEntry, StorageConfig,
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

/// One key of a mapping: its name, how its value is decoded, and what its absence means.
pub(super) struct Field<T> {
    key: &'static str,
    set: Set<T>,
    missing: Option<Set<T>>,
}

impl<T> Field<T> {
    /// An optional key.
    const fn new(key: &'static str, set: Set<T>) -> Self {
        Self {
            key,
            set,
            missing: None,
        }
    }

    /// A key whose absence is handled by `missing` (called at the key's place in the table).
    const fn required(key: &'static str, set: Set<T>, missing: Set<T>) -> Self {
        Self {
            key,
            set,
            missing: Some(missing),
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
    Field::required("version", version, no_version),
    Field::new("preset", |d, e, c| c.presets = d.presets(e.node, &e.at)),
    Field::new("root", |d, e, c| c.root = d.spanned_string(e.node, &e.at)),
    Field::new("state_dir", |d, e, c| {
        c.state_dir = d.spanned_string(e.node, &e.at);
    }),
    Field::new("enable", |d, e, c| c.enable = d.strings(e.node, &e.at)),
    Field::new("disable", |d, e, c| c.disable = d.strings(e.node, &e.at)),
    Field::new("rules", |d, e, c| c.rules = d.rules(e.node, &e.at)),
    Field::new("custom", |d, e, c| c.custom = d.custom(e.node, &e.at)),
    Field::new("auth", |d, e, c| c.auth = d.auth(e.node, &e.at)),
    Field::new("audit", |d, e, c| c.audit = d.audit(e.node, &e.at)),
    Field::new("storage", |d, e, c| {
        d.fields(e.node, &e.at, STORAGE, &mut c.storage);
    }),
    Field::new("limits", |d, e, c| c.limits = d.limits(e.node, &e.at)),
    Field::new("state_only", state_only),
    Field::new("tiers", tiers),
    Field::new("isolation", |d, e, c| {
        d.fields(e.node, &e.at, ISOLATION, &mut c.isolation);
    }),
    Field::new("autonomy", |d, e, c| c.autonomy = d.autonomy(e.node, &e.at)),
    Field::new("roles", |d, e, c| c.roles = d.roles(e.node, &e.at)),
    Field::new("guardrails", |d, e, c| {
        c.guardrails = d.guardrails(e.node, &e.at);
    }),
    Field::new("budgets", |d, e, c| c.budgets = d.budgets(e.node, &e.at)),
    Field::new("disabled_ops", |d, e, c| {
        c.disabled_ops = d.strings(e.node, &e.at);
    }),
    Field::new("protected", |d, e, c| {
        c.protected = d.strings(e.node, &e.at)
    }),
    Field::new("mcp_servers", |d, e, c| {
        c.mcp_servers = d.mcp_servers(e.node, &e.at);
    }),
    Field::new("mcp", |d, e, c| {
        d.fields(e.node, &e.at, MCP, &mut c.mcp);
    }),
    Field::new("run", |d, e, c| c.run = d.run(e.node, &e.at)),
    Field::new("sandbox", |d, e, c| {
        d.fields(e.node, &e.at, SANDBOX, &mut c.sandbox);
    }),
    Field::new("recordings", |d, e, c| {
        d.fields(e.node, &e.at, RECORDINGS, &mut c.recordings);
    }),
    Field::new("agents", |d, e, c| c.agents = d.agents(e.node, &e.at)),
    Field::new("install", |d, e, c| {
        d.fields(e.node, &e.at, control::INSTALL, &mut c.install);
    }),
    Field::new("llm", |d, e, c| {
        let mut l = LlmConfig::default();
        if d.fields(e.node, &e.at, LLM, &mut l).is_some() {
            c.llm = Some(l);
        }
    }),
];

/// `llm:` the LLM proxy's upstream, by the names of the variables that hold it.
pub(super) const LLM: &[Field<LlmConfig>] = &[
    Field::required(
        "base_url_env",
        |d, e, l| l.base_url_env = d.env_name(e.node, &e.at),
        |d, e, _| {
            d.err_fix(
                codes::CONFIG_MISSING_KEY,
                "`llm:` needs `base_url_env`".to_owned(),
                e.within,
                e.key,
                "name the variable that holds the provider's url: `llm: {base_url_env: OPENAI_BASE_URL}`".to_owned(),
            );
        },
    ),
    Field::new("api_key_env", |d, e, l| {
        l.api_key_env = d.env_name(e.node, &e.at);
    }),
    Field::new("root_agent", |d, e, l| {
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
    Field::new("api", |d, e, l| {
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
    Field::new("base_url", |d, e, _| {
        d.err_fix(
            codes::CONFIG_INVALID_VALUE,
            "the provider's url is written in the config; `llm:` holds names of environment variables only".to_owned(),
            &e.at,
            e.node.span,
            "remove `base_url:`; export the url (`export OPENAI_BASE_URL=https://api.openai.com/v1`) and name it with `base_url_env: OPENAI_BASE_URL`".to_owned(),
        );
    }),
    Field::new("api_key", |d, e, _| {
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
    Field::new("retention", |d, e, r| {
        r.retention = d.duration(e.node, &e.at)
    }),
    Field::new("max_bytes", |d, e, r| r.max_bytes = d.size(e.node, &e.at)),
    Field::new("max_events", |d, e, r| r.max_events = d.uint(e.node, &e.at)),
    Field::new("max_per_tenant", |d, e, r| {
        r.max_per_tenant = d.uint(e.node, &e.at)
    }),
    Field::new("max_per_principal", |d, e, r| {
        r.max_per_principal = d.uint(e.node, &e.at)
    }),
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
pub(super) const STORAGE: &[Field<StorageConfig>] =
    &[Field::new("url", |d, e, s| s.url = d.string(e.node, &e.at))];

/// `mcp:` the `/mcp` endpoint's allow-lists.
pub(super) const MCP: &[Field<McpConfig>] = &[
    Field::new("allowed_hosts", |d, e, m| {
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
    Field::new("allowed_origins", |d, e, m| {
        m.allowed_origins = d.strings(e.node, &e.at);
    }),
];

/// `sandbox:` the lab.
pub(super) const SANDBOX: &[Field<SandboxConfig>] = &[
    Field::new("enabled", |d, e, s| {
        s.enabled = d.bool(e.node, &e.at).unwrap_or(true);
    }),
    Field::new("programs", |d, e, s| {
        s.programs = d.lab_programs(e.node, &e.at);
    }),
    Field::new("scorers", |d, e, s| {
        s.scorers = d.lab_programs(e.node, &e.at);
    }),
    Field::new("record_runs", |d, e, s| {
        s.record_runs = d.bool(e.node, &e.at).unwrap_or(false);
    }),
    Field::new("judges", |d, e, s| {
        s.judges = d.lab_programs(e.node, &e.at);
    }),
];

/// `isolation:` where commands run.
pub(super) const ISOLATION: &[Field<IsolationConfig>] = &[
    Field::new("backend", |d, e, i| {
        let kinds = [
            ("linux", BackendKind::Linux),
            ("process", BackendKind::Process),
        ];
        i.backend = d.choice(e.node, &e.at, &kinds).unwrap_or_default();
    }),
    Field::new("network", |d, e, i| {
        let modes = [
            ("none", NetworkMode::None),
            ("loopback", NetworkMode::Loopback),
        ];
        i.network = d.choice(e.node, &e.at, &modes).unwrap_or_default();
    }),
    Field::new("cgroup_parent", |d, e, i| {
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
    Field::new("host_uids", host_uids),
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

/// Every table, by the path of the mapping it decodes (the no-panic test draws documents from
/// their keys; the table test checks each one's unknown-key hint).
#[cfg(test)]
pub(crate) fn all_tables() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        ("", keys(TOP)),
        ("storage", keys(STORAGE)),
        ("mcp", keys(MCP)),
        ("isolation", keys(ISOLATION)),
        ("sandbox", keys(SANDBOX)),
        ("recordings", keys(RECORDINGS)),
        ("llm", keys(LLM)),
        ("rules[0]", keys(scopes::RULE)),
        ("rules[0].paths", keys(scopes::PATH)),
        ("rules[0].commands", keys(scopes::COMMAND)),
        ("rules[0].commands.network", keys(scopes::NETWORK)),
        ("rules[0].urls", keys(scopes::URL)),
        ("rules[0].agents", keys(scopes::AGENT)),
        ("rules[0].agents.network", keys(scopes::NETWORK)),
        ("agents", keys(control::AGENTS)),
        ("install", keys(control::INSTALL)),
        ("limits", keys(scopes::LIMIT)),
        ("custom.op", keys(ops::CUSTOM)),
        ("custom.op.params.p", keys(ops::PARAM)),
        ("mcp_servers.up", keys(ops::MCP_SERVER)),
        ("sandbox.programs.p", keys(ops::LAB_PROGRAM)),
        ("sandbox.scorers.s", keys(ops::LAB_PROGRAM)),
        ("sandbox.judges.j", keys(ops::LAB_PROGRAM)),
        ("mcp_servers.up.tools.t", keys(ops::MCP_TOOL)),
        ("auth", keys(access::AUTH)),
        ("auth.tokens[0]", keys(access::TOKEN)),
        ("auth.jwt", keys(access::JWT)),
        ("auth.jwt.service_claim", keys(access::SERVICE_CLAIM)),
        ("audit", keys(access::AUDIT)),
        ("autonomy", keys(access::AUTONOMY)),
        ("autonomy.pins[0]", keys(access::PIN)),
        ("roles", keys(access::ROLES)),
        ("guardrails", keys(control::GUARDRAILS)),
        ("budgets", keys(control::BUDGETS)),
        ("budgets.replay", keys(control::REPLAY_BUDGET)),
        ("budgets.judge", keys(control::JUDGE_BUDGET)),
        ("run", keys(control::RUN)),
        ("run.limits", keys(control::RUN_LIMITS)),
        ("preset[0]", keys(control::PRESET)),
    ]
}
