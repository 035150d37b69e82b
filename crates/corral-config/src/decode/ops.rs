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
    Field::required(
        "argv",
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
    Field::new("params", params),
    Field::new("cwd", |d, e, op| op.cwd = d.string(e.node, &e.at)),
    Field::new("read_paths", |d, e, op| {
        op.read_paths = d.strings(e.node, &e.at);
    }),
    Field::new("write_paths", |d, e, op| {
        op.write_paths = d.strings(e.node, &e.at);
    }),
    Field::new("timeout", |d, e, op| op.timeout = d.duration(e.node, &e.at)),
    Field::new("effects", |d, e, op| {
        op.effects = Some(d.effects(e.node, &e.at));
    }),
    Field::new("contained", |d, e, op| {
        op.contained = d.bool(e.node, &e.at).unwrap_or(false);
    }),
    Field::new("explicit_only", |d, e, op| {
        op.explicit_only = d.bool(e.node, &e.at).unwrap_or(false);
    }),
    Field::new("tier", |d, e, op| op.tier = d.tier(e.node, &e.at)),
    Field::new("summary", |d, e, op| {
        op.summary = d.string(e.node, &e.at).unwrap_or_default();
    }),
    Field::new("network", |d, e, op| op.network = d.network(e.node, &e.at)),
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
    Field::required(
        "type",
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
    Field::new("root", |_, e, p| p.root = stash(e)),
    Field::new("values", |_, e, p| p.values = stash(e)),
    Field::new("required", |_, e, p| p.required = stash(e)),
    Field::new("writable", |_, e, p| p.writable = stash(e)),
];

/// An upstream MCP server.
pub(super) const MCP_SERVER: &[Field<McpServerConfig>] = &[
    Field::required(
        "command",
        |d, e, s| {
            s.command = d.strings(e.node, &e.at);
            if s.command.is_empty() {
                no_command(d, e, s);
            }
        },
        no_command,
    ),
    Field::new("env_pass", |d, e, s| s.env_pass = d.strings(e.node, &e.at)),
    Field::new("read_paths", |d, e, s| {
        s.read_paths = d.strings(e.node, &e.at);
    }),
    Field::new("write_paths", |d, e, s| {
        s.write_paths = d.strings(e.node, &e.at);
    }),
    Field::new("cwd", |d, e, s| s.cwd = d.spanned_string(e.node, &e.at)),
    Field::new("call_timeout", |d, e, s| {
        s.call_timeout = d.duration(e.node, &e.at);
    }),
    Field::new("memory", |d, e, s| s.memory = d.size(e.node, &e.at)),
    Field::new("processes", |d, e, s| s.processes = d.uint32(e.node, &e.at)),
    Field::new("tools", tools),
    Field::new("network", |d, e, s| s.network = d.network(e.node, &e.at)),
];

/// `sandbox.programs.<name>` and `sandbox.scorers.<name>`.
pub(super) const LAB_PROGRAM: &[Field<LabProgramConfig>] = &[
    Field::required(
        "command",
        |d, e, s| {
            s.command = d.strings(e.node, &e.at);
            if s.command.is_empty() {
                no_lab_command(d, e, s);
            }
        },
        no_lab_command,
    ),
    Field::new("read_paths", |d, e, s| {
        s.read_paths = d.strings(e.node, &e.at);
    }),
    Field::new("cwd", |d, e, s| s.cwd = d.spanned_string(e.node, &e.at)),
    Field::new("timeout", |d, e, s| s.timeout = d.duration(e.node, &e.at)),
    Field::new("memory", |d, e, s| s.memory = d.size(e.node, &e.at)),
    Field::new("processes", |d, e, s| s.processes = d.uint32(e.node, &e.at)),
    Field::new("tools", |d, e, s| s.tools = Some(d.strings(e.node, &e.at))),
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
    Field::new("effects", |d, e, t| {
        t.effects = Some(d.effects(e.node, &e.at));
    }),
    Field::new("tier", |d, e, t| t.tier = d.tier(e.node, &e.at)),
    Field::new("idempotent", |d, e, t| {
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
