//! Ops the config adds: custom ops (with their params) and upstream MCP servers (with their
//! tools).

use corral_policy::codes;
use corral_policy::{Effect, ParamKind, Tier};

use super::{Decoder, Field, Item, Stash, stash};
use crate::model::{
    CustomOpConfig, LabProgramConfig, McpServerConfig, McpToolConfig, ParamConfig, Spanned,
};
use crate::yaml::{Key, Node, Value};

/// A custom op.
pub(super) const CUSTOM: &[Field<CustomOpConfig>] = &[
    Field::key("argv")
        .doc(
            "list of strings",
            "required",
            "[ruff, check, '{path}']",
            "The program and its arguments (no shell); `{name}` is replaced by the param `name`.",
        )
        .required(
            |d, e, op| op.argv = d.strings(e.node, &e.at),
            |d, e, op| {
                d.err_fix(
                    codes::CONFIG_MISSING_KEY,
                    format!("custom op `{}` has no `argv`", op.id.value),
                    e.within,
                    op.id.span,
                    "add `argv: [program, \"{param}\"]`".to_owned(),
                );
            },
        ),
    Field::key("params")
        .doc(
            "mapping of name to type, or to a param mapping",
            "none",
            "{path: path}",
            "The params a call gives; each must appear in `argv`. See `custom.<op>.params.<name>`.",
        )
        .optional(params),
    Field::key("cwd")
        .doc(
            "string (absolute directory)",
            "`root`, else the first path param's `root`, else an empty private `/tmp`",
            "/workspace",
            "The working directory.",
        )
        .optional(|d, e, op| op.cwd = d.string(e.node, &e.at)),
    Field::key("read_paths")
        .doc(
            "list of paths",
            "none",
            "[/opt/tools]",
            "Directories or files the program may read besides its cwd.",
        )
        .optional(|d, e, op| {
            op.read_paths = d.strings(e.node, &e.at);
        }),
    Field::key("write_paths")
        .doc(
            "list of paths",
            "none (with the `write` effect, no writable path param and none listed: the cwd)",
            "[/workspace/out]",
            "Directories or files the program may write.",
        )
        .optional(|d, e, op| {
            op.write_paths = d.strings(e.node, &e.at);
        }),
    Field::key("timeout")
        .doc(
            "duration",
            "the call's `limits.timeout`, else `60s`",
            "2m",
            "How long a call may take (the smaller of this and the limits applies).",
        )
        .optional(|d, e, op| op.timeout = d.duration(e.node, &e.at)),
    Field::key("effects")
        .doc(
            "effect, or list of them (`read`, `write`, `delete`, `exec`, `net`, `admin`)",
            "none: treated as `admin` and explicit-only",
            "[read]",
            "What the op does: decides its tier.",
        )
        .optional(|d, e, op| {
            op.effects = Some(d.effects(e.node, &e.at));
        }),
    Field::key("contained")
        .doc(
            "bool",
            "`false`",
            "true",
            "Its writes land only in the run's ephemeral workspace.",
        )
        .optional(|d, e, op| {
            op.contained = d.bool(e.node, &e.at).unwrap_or(false);
        }),
    Field::key("explicit_only")
        .doc(
            "bool",
            "`false` (no effects, or `admin`: always explicit-only)",
            "true",
            "Mounted only by its exact id, never by `ns.*`, `group:`, `effect:` or `*`.",
        )
        .optional(|d, e, op| {
            op.explicit_only = d.bool(e.node, &e.at).unwrap_or(false);
        }),
    Field::key("tier")
        .doc(
            "`read`, `confirm` or `destructive`",
            "from its effects",
            "destructive",
            "Raises its tier; never lowers it.",
        )
        .optional(|d, e, op| op.tier = d.tier(e.node, &e.at)),
    Field::key("summary")
        .doc(
            "string",
            "empty",
            "lint the repo",
            "One line for `describe`.",
        )
        .optional(|d, e, op| {
            op.summary = d.string(e.node, &e.at).unwrap_or_default();
        }),
    Field::key("network")
        .doc(
            "`none`, `loopback` or mapping `{allow: [HOST:PORT, ...]}`",
            "`isolation.network`",
            "{allow: ['pypi.org:443']}",
            "The program's network.",
        )
        .optional(|d, e, op| op.network = d.network(e.node, &e.at)),
];

/// `params: {name: type}` or `{name: {type: ..., ...}}`.
fn params(d: &mut Decoder, e: &Item<'_>, op: &mut CustomOpConfig) {
    let Some(entries) = d.map_any(e.node, &e.at) else {
        return;
    };
    for (pk, pn) in entries {
        let at = format!("{}.{}", e.at, pk.name);
        if let Some((kind, required, writable)) = d.param(pn, &at) {
            op.params.push(ParamConfig {
                name: Spanned::new(pk.name.clone(), pk.span),
                kind,
                required,
                writable,
            });
        }
    }
}

/// A param's keys, kept until its `type` says which of them apply.
#[derive(Default)]
pub(super) struct ParamDraft {
    kind: Stash,
    root: Stash,
    values: Stash,
    required: Stash,
    writable: Stash,
}

/// A custom op's param written as a mapping.
pub(super) const PARAM: &[Field<ParamDraft>] = &[
    Field::key("type")
        .doc(
            "`path`, `int`, `word`, `string` or `enum`",
            "required",
            "path",
            "The param's type; `name: path` alone is short for `name: {type: path}`.",
        )
        .required(
            |_, e, p| p.kind = stash(e),
            |d, e, _| {
                d.err_fix(
                    codes::CONFIG_MISSING_KEY,
                    "a param needs `type`".to_owned(),
                    e.within,
                    e.node.span,
                    "add `type: path|int|word|string|enum`".to_owned(),
                );
            },
        ),
    Field::key("root")
        .doc(
            "string (absolute directory)",
            "none: an allow rule for the op needs a `paths:` scope",
            "/workspace",
            "A `path` param: the directory the path must lie beneath.",
        )
        .optional(|_, e, p| p.root = stash(e)),
    Field::key("values")
        .doc(
            "list of strings",
            "required with `enum`",
            "[fast, full]",
            "An `enum` param: the values it takes.",
        )
        .optional(|_, e, p| p.values = stash(e)),
    Field::key("required")
        .doc("bool", "`true`", "false", "Whether a call must give it.")
        .optional(|_, e, p| p.required = stash(e)),
    Field::key("writable")
        .doc(
            "bool",
            "`false`",
            "true",
            "A `path` param the program may write (bound read-write; needs the op's `write` \
             effect).",
        )
        .optional(|_, e, p| p.writable = stash(e)),
];

/// An upstream MCP server.
pub(super) const MCP_SERVER: &[Field<McpServerConfig>] = &[
    Field::key("command")
        .doc(
            "list of strings",
            "required",
            "[notes-mcp, --stdio]",
            "The program and its arguments (no shell), run in the isolation backend.",
        )
        .required(
            |d, e, s| {
                s.command = d.strings(e.node, &e.at);
                if s.command.is_empty() {
                    no_command(d, e, s);
                }
            },
            no_command,
        ),
    Field::key("env_pass")
        .doc(
            "list of variable names",
            "none",
            "[NOTES_TOKEN]",
            "Variables of corral's environment passed to it (nothing else is).",
        )
        .optional(|d, e, s| s.env_pass = d.strings(e.node, &e.at)),
    Field::key("read_paths")
        .doc(
            "list of paths",
            "none",
            "[/srv/notes]",
            "Directories it may read besides the sandbox's system view (relative ones: the config \
             directory's).",
        )
        .optional(|d, e, s| {
            s.read_paths = d.strings(e.node, &e.at);
        }),
    Field::key("write_paths")
        .doc(
            "list of paths",
            "none",
            "[/srv/notes/inbox]",
            "Directories it may write (relative ones: the config directory's).",
        )
        .optional(|d, e, s| {
            s.write_paths = d.strings(e.node, &e.at);
        }),
    Field::key("cwd")
        .doc(
            "string (path)",
            "the first write path, else the first read path, else `/`",
            "/srv/notes",
            "Its working directory.",
        )
        .optional(|d, e, s| s.cwd = d.spanned_string(e.node, &e.at)),
    Field::key("call_timeout")
        .doc(
            "duration",
            "`60s`",
            "2m",
            "How long one tool call may take.",
        )
        .optional(|d, e, s| {
            s.call_timeout = d.duration(e.node, &e.at);
        }),
    Field::key("memory")
        .doc(
            "size",
            "`1GiB` (corral's cap)",
            "512MiB",
            "Memory limit of the server process (a cgroup in the `linux` backend).",
        )
        .optional(|d, e, s| s.memory = d.size(e.node, &e.at)),
    Field::key("processes")
        .doc(
            "integer",
            "the backend's (`1024` in `linux`)",
            "64",
            "Process limit of the server.",
        )
        .optional(|d, e, s| s.processes = d.uint32(e.node, &e.at)),
    Field::key("tools")
        .doc(
            "mapping of tool name to tool mapping (or nothing)",
            "none",
            "{search: {effects: [read]}}",
            "The tools corral declares; one not declared here is `admin` and explicit-only.",
        )
        .optional(tools),
    Field::key("network")
        .doc(
            "`none`, `loopback` or mapping `{allow: [HOST:PORT, ...]}`",
            "`isolation.network`",
            "{allow: ['api.notion.com:443']}",
            "The server's network.",
        )
        .optional(|d, e, s| s.network = d.network(e.node, &e.at)),
];

/// `sandbox.programs.<name>` and `sandbox.scorers.<name>`.
pub(super) const LAB_PROGRAM: &[Field<LabProgramConfig>] = &[
    Field::key("command")
        .doc(
            "list of strings",
            "required",
            "[python3, agents/echo.py]",
            "The program and its arguments (no shell); a relative program path is the config \
             directory's.",
        )
        .required(
            |d, e, s| {
                s.command = d.strings(e.node, &e.at);
                if s.command.is_empty() {
                    no_lab_command(d, e, s);
                }
            },
            no_lab_command,
        ),
    Field::key("read_paths")
        .doc(
            "list of paths",
            "none",
            "[agents]",
            "Directories it may read besides the sandbox's system view (relative ones: the config \
             directory's).",
        )
        .optional(|d, e, s| {
            s.read_paths = d.strings(e.node, &e.at);
        }),
    Field::key("cwd")
        .doc(
            "string (path)",
            "the first read path, else `/`",
            "agents",
            "Its working directory.",
        )
        .optional(|d, e, s| s.cwd = d.spanned_string(e.node, &e.at)),
    Field::key("timeout")
        .doc(
            "duration",
            "`60s`",
            "5m",
            "How long one step (or one scoring, one judging) may take.",
        )
        .optional(|d, e, s| s.timeout = d.duration(e.node, &e.at)),
    Field::key("memory")
        .doc(
            "size",
            "`1GiB` (corral's cap)",
            "512MiB",
            "Its memory limit.",
        )
        .optional(|d, e, s| s.memory = d.size(e.node, &e.at)),
    Field::key("processes")
        .doc("integer", "`64`", "16", "Its process limit.")
        .optional(|d, e, s| s.processes = d.uint32(e.node, &e.at)),
    Field::key("tools")
        .doc(
            "list of op ids",
            "none: undeclared, so it is ineligible for shadow evaluation",
            "[files.read]",
            "The ops it calls, checked at load for a shadow evaluation \
             (`replay.tools_undeclared`).",
        )
        .optional(|d, e, s| s.tools = Some(d.strings(e.node, &e.at))),
];

fn no_lab_command(d: &mut Decoder, e: &Item<'_>, s: &mut LabProgramConfig) {
    d.err_fix(
        codes::CONFIG_MISSING_KEY,
        format!("lab program `{}` has no `command`", s.name.value),
        e.within,
        s.name.span,
        "add `command: [program, arg, ...]` (run without a shell), e.g. `[python3, agents/echo.py]`"
            .to_owned(),
    );
}

fn no_command(d: &mut Decoder, e: &Item<'_>, s: &mut McpServerConfig) {
    d.err_fix(
        codes::CONFIG_MISSING_KEY,
        format!("upstream MCP server `{}` has no `command`", s.name.value),
        e.within,
        s.name.span,
        "add `command: [program, arg, ...]` (run without a shell)".to_owned(),
    );
}

/// `tools: {name: {effects, tier, idempotent}}` (or `name:` alone).
fn tools(d: &mut Decoder, e: &Item<'_>, s: &mut McpServerConfig) {
    let Some(entries) = d.map_any(e.node, &e.at) else {
        return;
    };
    for (tk, tn) in entries {
        let mut tool = McpToolConfig {
            name: Spanned::new(tk.name.clone(), tk.span),
            effects: None,
            tier: None,
            idempotent: false,
        };
        if !matches!(tn.value, Value::Null)
            && d.fields(tn, &format!("{}.{}", e.at, tk.name), MCP_TOOL, &mut tool)
                .is_none()
        {
            continue;
        }
        s.tools.push(tool);
    }
}

/// An upstream tool's declared effects, tier and idempotence.
pub(super) const MCP_TOOL: &[Field<McpToolConfig>] = &[
    Field::key("effects")
        .doc(
            "effect, or list of them (`read`, `write`, `delete`, `exec`, `net`, `admin`)",
            "none: `admin`, explicit-only",
            "[read]",
            "What the tool does (never taken from the upstream).",
        )
        .optional(|d, e, t| {
            t.effects = Some(d.effects(e.node, &e.at));
        }),
    Field::key("tier")
        .doc(
            "`read`, `confirm` or `destructive`",
            "from its effects",
            "confirm",
            "Raises its tier; never lowers it.",
        )
        .optional(|d, e, t| t.tier = d.tier(e.node, &e.at)),
    Field::key("idempotent")
        .doc(
            "bool",
            "`false`",
            "true",
            "Whether calling it twice with the same arguments does what calling it once does.",
        )
        .optional(|d, e, t| {
            t.idempotent = d.bool(e.node, &e.at).unwrap_or(false);
        }),
];

impl Decoder {
    /// `custom: {op_id: {...}}`.
    pub(super) fn custom(&mut self, node: &Node, at: &str) -> Vec<CustomOpConfig> {
        let Some(entries) = self.map_any(node, at) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, n) in entries {
            let mut op = CustomOpConfig {
                id: Spanned::new(k.name.clone(), k.span),
                argv: Vec::new(),
                params: Vec::new(),
                cwd: None,
                read_paths: Vec::new(),
                write_paths: Vec::new(),
                timeout: None,
                effects: None,
                contained: false,
                explicit_only: false,
                tier: None,
                summary: String::new(),
                network: None,
            };
            if self
                .fields(n, &format!("{at}.{}", k.name), CUSTOM, &mut op)
                .is_some()
            {
                out.push(op);
            }
        }
        out
    }

    /// A param: `path` (or any type name) alone, or a mapping with `type`. Returns its kind and
    /// whether it is required and writable.
    fn param(&mut self, node: &Node, at: &str) -> Option<(ParamKind, bool, bool)> {
        let mut p = ParamDraft::default();
        match &node.value {
            // The shorthand `name: path` is the value of `type`.
            Value::Str(_) => p.kind = Some((node.clone(), format!("{at}.type"))),
            _ => {
                self.fields(node, at, PARAM, &mut p)?;
            }
        }
        let (type_node, type_at) = p.kind?;
        let types = [
            ("path", 0u8),
            ("int", 1),
            ("word", 2),
            ("string", 3),
            ("enum", 4),
        ];
        let kind = match self.choice(&type_node, &type_at, &types)? {
            0 => ParamKind::Path {
                root: p.root.and_then(|(n, at)| self.string(&n, &at)),
            },
            1 => ParamKind::Int,
            2 => ParamKind::Word,
            3 => ParamKind::String,
            _ => {
                let values = p
                    .values
                    .map(|(n, at)| self.plain_strings(&n, &at))
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
        };
        let mut flag = |stashed: Stash, default: bool| {
            stashed
                .and_then(|(n, at)| self.bool(&n, &at))
                .unwrap_or(default)
        };
        let required = flag(p.required, true);
        let writable = flag(p.writable, false);
        Some((kind, required, writable))
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

    fn tier(&mut self, node: &Node, at: &str) -> Option<Tier> {
        let opts = Tier::ALL.map(|t| (t.as_str(), t));
        self.choice(node, at, &opts)
    }

    /// `sandbox.programs: {name: {...}}` (or `scorers`): names as for upstream servers.
    pub(super) fn lab_programs(&mut self, node: &Node, at: &str) -> Vec<LabProgramConfig> {
        let mut out = Vec::new();
        for (k, n, at) in self.named(node, at, "lab program", "") {
            let mut p = LabProgramConfig {
                name: Spanned::new(k.name.clone(), k.span),
                command: Vec::new(),
                read_paths: Vec::new(),
                cwd: None,
                timeout: None,
                memory: None,
                processes: None,
                tools: None,
                span: k.span,
            };
            if self.fields(n, &at, LAB_PROGRAM, &mut p).is_some() {
                out.push(p);
            }
        }
        out
    }

    /// The entries of the mapping `node` whose names are `[A-Za-z][A-Za-z0-9_-]*`, each with its
    /// location; an entry with another name is an error (`what` names the kind, `why` is added
    /// to the fix) and is left out.
    fn named<'n>(
        &mut self,
        node: &'n Node,
        at: &str,
        what: &str,
        why: &str,
    ) -> Vec<(&'n Key, &'n Node, String)> {
        let Some(entries) = self.map_any(node, at) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, n) in entries {
            let at = format!("{at}.{}", k.name);
            if is_mcp_name(&k.name) {
                out.push((k, n, at));
            } else {
                self.err_fix(
                    codes::CONFIG_INVALID_VALUE,
                    format!("`{}` is not a valid {what} name", k.name),
                    &at,
                    k.span,
                    format!("use letters, digits, `_` and `-`, starting with a letter{why}"),
                );
            }
        }
        out
    }

    /// `mcp_servers: {name: {...}}`.
    pub(super) fn mcp_servers(&mut self, node: &Node, at: &str) -> Vec<McpServerConfig> {
        let mut out = Vec::new();
        let why = " (it becomes the middle of op ids `mcp.<name>.<tool>`)";
        for (k, n, at) in self.named(node, at, "upstream", why) {
            let mut s = McpServerConfig {
                name: Spanned::new(k.name.clone(), k.span),
                command: Vec::new(),
                env_pass: Vec::new(),
                read_paths: Vec::new(),
                write_paths: Vec::new(),
                cwd: None,
                call_timeout: None,
                memory: None,
                processes: None,
                tools: Vec::new(),
                network: None,
                span: k.span,
            };
            if self.fields(n, &at, MCP_SERVER, &mut s).is_some() {
                out.push(s);
            }
        }
        out
    }
}

/// An upstream's name: `[A-Za-z][A-Za-z0-9_-]*`, so `mcp.<name>.<tool>` stays one op id.
pub(crate) fn is_mcp_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
