//! How calls are governed and run: presets, guardrails, budgets and `corral run`'s profile.

use std::time::Duration;

use corral_policy::codes;
use corral_policy::presets::{Preset, PresetOptions};
use corral_policy::scope::{AgentPermissions, parse_adapter};

use super::{Decoder, Field, Item, is_zero_quantity};
use crate::diag::Diagnostic;
use crate::model::{
    AgentsConfig, BudgetsConfig, ConfirmationBackend, GuardrailsConfig, GuardrailsMode,
    InstallConfig, InstallMode, JudgeBudget, PresetUse, ReplayBudget, RunConfig, RunProfile,
    Spanned,
};
use crate::yaml::{Node, Span, Value};

/// `guardrails:` being decoded, with where `confirmations` was written and its key path.
#[derive(Default)]
pub(super) struct GuardrailsDraft {
    g: GuardrailsConfig,
    confirmations: Option<(Span, String)>,
}

/// `guardrails:`.
pub(super) const GUARDRAILS: &[Field<GuardrailsDraft>] = &[
    Field::key("mode")
        .doc(
            "`enforce` or `dry_run`",
            "`enforce`",
            "dry_run",
            "`enforce`: confirm- and destructive-tier calls wait for a person's approval; \
             `dry_run`: they answer `dry_run` and never run.",
        )
        .optional(|d, e, g| {
            let modes = [
                ("enforce", GuardrailsMode::Enforce),
                ("dry_run", GuardrailsMode::DryRun),
            ];
            g.g.mode = d.choice(e.node, &e.at, &modes).unwrap_or_default();
        }),
    Field::key("confirmation_ttl")
        .doc(
            "duration (1s at least)",
            "`300s`",
            "10m",
            "How long a pending action, its approval and its stored outcome live.",
        )
        .optional(|d, e, g| {
            let Some(ttl) = d.duration(e.node, &e.at) else {
                return;
            };
            if ttl < Duration::from_secs(1) {
                d.err_fix(
                    codes::CONFIG_INVALID_VALUE,
                    "`confirmation_ttl` is under one second, so no approval could ever be used"
                        .to_owned(),
                    &e.at,
                    e.node.span,
                    "write a duration such as `300s` (the default)".to_owned(),
                );
            } else {
                g.g.confirmation_ttl = ttl;
            }
        }),
    Field::key("confirmations")
        .doc(
            "`store` or `memory`",
            "`store`",
            "memory",
            "Where pending actions and approvals live: the store (survives restarts) or this \
             process (refused with `replicas` above 1).",
        )
        .startup()
        .optional(|d, e, g| {
            let backends = [
                ("store", ConfirmationBackend::Store),
                ("memory", ConfirmationBackend::Memory),
            ];
            g.confirmations = Some((e.node.span, e.at.clone()));
            g.g.confirmations = d.choice(e.node, &e.at, &backends).unwrap_or_default();
        }),
    Field::key("max_pending")
        .doc(
            "integer (1 at least)",
            "`20`",
            "50",
            "Pending actions one principal may have at once.",
        )
        .optional(|d, e, g| {
            let Some(max) = d.uint(e.node, &e.at) else {
                return;
            };
            if max == 0 {
                d.err_fix(
                codes::CONFIG_INVALID_VALUE,
                "`max_pending` is 0, so no call that needs a person's approval could ever be asked"
                    .to_owned(),
                &e.at,
                e.node.span,
                "write a positive number such as `20` (the default)".to_owned(),
            );
            } else {
                g.g.max_pending = max;
            }
        }),
    Field::key("replicas")
        .doc(
            "integer (1 at least)",
            "`1`",
            "3",
            "How many `corral serve` replicas share this config (declared, so `confirmations: \
             memory` with several is refused).",
        )
        .optional(|d, e, g| {
            let Some(r) = d.uint(e.node, &e.at) else {
                return;
            };
            if r == 0 {
                d.wrong_type(e.node, &e.at, "a positive integer");
            } else {
                g.g.replicas = r;
            }
        }),
];

/// `budgets:`.
pub(super) const BUDGETS: &[Field<BudgetsConfig>] = &[
    Field::key("max_calls")
        .doc("integer", "`0`: none", "200", "Calls per run.")
        .optional(|d, e, b| {
            b.max_calls = d.uint(e.node, &e.at).unwrap_or(0);
        }),
    Field::key("max_calls_per_op")
        .doc(
            "mapping of op id to integer",
            "none",
            "{commands.run: 50}",
            "Calls per run to one op.",
        )
        .optional(|d, e, b| {
            let Some(entries) = d.map_any(e.node, &e.at) else {
                return;
            };
            for (k, v) in entries {
                if let Some(count) = d.uint(v, &format!("{}.{}", e.at, k.name)) {
                    b.max_calls_per_op
                        .push((Spanned::new(k.name.clone(), k.span), count));
                }
            }
        }),
    Field::key("max_wall_time")
        .doc(
            "duration (`0` for none)",
            "`0`: none",
            "30m",
            "Time from a run's first call.",
        )
        .optional(|d, e, b| {
            b.max_wall_time = if is_zero_quantity(&e.node.value) {
                Duration::ZERO
            } else {
                d.duration(e.node, &e.at).unwrap_or(Duration::ZERO)
            };
        }),
    Field::key("max_output_bytes")
        .doc(
            "size (`0` for none)",
            "`0`: none",
            "50MB",
            "Bytes of results per run.",
        )
        .optional(|d, e, b| {
            b.max_output_bytes = if is_zero_quantity(&e.node.value) {
                0
            } else {
                d.size(e.node, &e.at).unwrap_or(0)
            };
        }),
    Field::key("tokens")
        .doc(
            "integer",
            "`0`: none",
            "200000",
            "Model tokens (prompt plus completion) per run, metered by the LLM proxy.",
        )
        .optional(|d, e, b| {
            b.tokens = d.uint(e.node, &e.at).unwrap_or(0);
        }),
    Field::key("replay")
        .doc(
            "mapping",
            "`{max_runs: 100, max_calls: 10000}`",
            "{max_runs: 20}",
            "The ceiling of one shadow evaluation's replay runs; see `budgets.replay`.",
        )
        .optional(|d, e, b| {
            d.fields(e.node, &e.at, REPLAY_BUDGET, &mut b.replay);
        }),
    Field::key("judge")
        .doc(
            "mapping",
            "`{max_calls: 1000}`",
            "{max_calls: 200}",
            "The ceiling of one tournament's judge calls; see `budgets.judge`.",
        )
        .optional(|d, e, b| {
            d.fields(e.node, &e.at, JUDGE_BUDGET, &mut b.judge);
        }),
];

/// `budgets.replay:` one shadow evaluation's ceiling.
pub(super) const REPLAY_BUDGET: &[Field<ReplayBudget>] = &[
    Field::key("max_runs")
        .doc(
            "integer",
            "`100`",
            "20",
            "Replay runs per shadow evaluation; raising it is linted.",
        )
        .optional(|d, e, r| {
            r.max_runs = d
                .uint(e.node, &e.at)
                .unwrap_or(ReplayBudget::DEFAULT_MAX_RUNS);
        }),
    Field::key("max_calls")
        .doc(
            "integer",
            "`10000`",
            "2000",
            "Gateway calls summed over one shadow evaluation's replay runs; raising it is linted.",
        )
        .optional(|d, e, r| {
            r.max_calls = d
                .uint(e.node, &e.at)
                .unwrap_or(ReplayBudget::DEFAULT_MAX_CALLS);
        }),
];

/// `budgets.judge:` one tournament's ceiling.
pub(super) const JUDGE_BUDGET: &[Field<JudgeBudget>] = &[Field::key("max_calls")
    .doc(
        "integer",
        "`1000`",
        "200",
        "Judge calls per tournament; raising it is linted.",
    )
    .optional(|d, e, j| {
        j.max_calls = d
            .uint(e.node, &e.at)
            .unwrap_or(JudgeBudget::DEFAULT_MAX_CALLS);
    })];

/// `run:` the profile of `corral run --config F`.
pub(super) const RUN: &[Field<RunConfig>] = &[
    Field::key("profile")
        .doc(
            "`workspace`, `readonly` or `none`",
            "`workspace`",
            "readonly",
            "What of the host the sandbox shows: the current directory read-write \
             (copy-on-write), read-only, or nothing (`--profile`).",
        )
        .optional(|d, e, r| {
            let profiles = [
                ("workspace", RunProfile::Workspace),
                ("readonly", RunProfile::Readonly),
                ("none", RunProfile::None),
            ];
            r.profile = d
                .choice(e.node, &e.at, &profiles)
                .map(|v| Spanned::new(v, e.node.span));
        }),
    Field::key("read")
        .doc(
            "list of paths",
            "none",
            "[../shared]",
            "More directories or files shown read-only (relative: the config directory's; \
             `--read` adds).",
        )
        .optional(|d, e, r| r.read = d.strings(e.node, &e.at)),
    Field::key("write")
        .doc(
            "list of paths",
            "none",
            "[build]",
            "More directories or files shown read-write (relative: the config directory's; \
             `--write` adds).",
        )
        .optional(|d, e, r| r.write = d.strings(e.node, &e.at)),
    Field::key("network")
        .doc(
            "`none`, `loopback` or mapping `{allow: [HOST:PORT, ...]}`",
            "`isolation.network`",
            "loopback",
            "The sandbox's network (`--net`).",
        )
        .optional(|d, e, r| r.network = d.network(e.node, &e.at)),
    Field::key("env")
        .doc(
            "list of `NAME` or `NAME=VALUE`",
            "none",
            "[GITHUB_TOKEN, LANG=C.UTF-8]",
            "Variables passed: `NAME` takes corral's value (`--env` adds).",
        )
        .optional(run_env),
    Field::key("limits")
        .doc(
            "mapping",
            "none",
            "{memory: 2GiB, timeout: 10m}",
            "The run's limits; see `run.limits`.",
        )
        .optional(|d, e, r| {
            d.fields(e.node, &e.at, RUN_LIMITS, r);
        }),
];

/// `run.env: [NAME, NAME=VALUE]`.
fn run_env(d: &mut Decoder, e: &Item<'_>, r: &mut RunConfig) {
    r.env = d.strings(e.node, &e.at);
    for (i, v) in r.env.iter().enumerate() {
        let name = v.value.split_once('=').map_or(v.value.as_str(), |(n, _)| n);
        let valid = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            d.diags.push(
                Diagnostic::error(
                    codes::CONFIG_INVALID_VALUE,
                    format!(
                        "`{}` is not `NAME` or `NAME=VALUE` with a name of letters, digits and `_`",
                        v.value
                    ),
                    format!("{}[{i}]", e.at),
                    Some(v.span),
                )
                .with_fix(
                    "write `GITHUB_TOKEN` (passes its value from corral's environment) or `LANG=C.UTF-8`",
                ),
            );
        }
    }
}

/// `run.limits:`.
pub(super) const RUN_LIMITS: &[Field<RunConfig>] = &[
    Field::key("memory")
        .doc(
            "size",
            "`1GiB`",
            "2GiB",
            "Memory of the whole sandbox (`--memory`).",
        )
        .optional(|d, e, r| r.memory = d.size(e.node, &e.at)),
    Field::key("processes")
        .doc(
            "integer (1 at least)",
            "the backend's (`1024`)",
            "256",
            "The run's process limit (no flag).",
        )
        .optional(|d, e, r| {
            let Some(n) = d.uint(e.node, &e.at) else {
                return;
            };
            match u32::try_from(n) {
                Ok(p) if p > 0 => r.processes = Some(p),
                _ => d.err_fix(
                    codes::CONFIG_INVALID_VALUE,
                    format!("`{n}` is not a usable process limit"),
                    &e.at,
                    e.node.span,
                    "write a number of processes from 1 to 4294967295, e.g. `256`".to_owned(),
                ),
            }
        }),
    Field::key("timeout")
        .doc(
            "duration",
            "none: no time limit",
            "10m",
            "Kill the sandbox after this long, exit code 124 (`--timeout`).",
        )
        .optional(|d, e, r| r.timeout = d.duration(e.node, &e.at)),
    Field::key("write_quota")
        .doc(
            "size",
            "`1GiB`",
            "64MiB",
            "What the run may add to the host through its write paths (`--write-quota`).",
        )
        .optional(|d, e, r| {
            r.write_quota = d.size(e.node, &e.at);
        }),
];

/// A preset written as a mapping, being decoded: its name is read last.
#[derive(Default)]
pub(super) struct PresetDraft {
    name: Option<Node>,
    options: PresetOptions,
    confirm_never: Option<Span>,
    reason: Option<String>,
}

/// A preset written as a mapping.
pub(super) const PRESET: &[Field<PresetDraft>] = &[
    Field::key("name")
        .doc(
            "preset name",
            "required",
            "ci_runner",
            "Which preset (see Presets; `-` may stand for `_`).",
        )
        .optional(|_, e, p| p.name = Some(e.node.clone())),
    Field::key("root")
        .doc(
            "string (absolute directory)",
            "the top-level `root`",
            "/workspace",
            "The directory the preset scopes to (every preset but `minimal` needs one).",
        )
        .optional(|d, e, p| p.options.root = d.string(e.node, &e.at)),
    Field::key("commands")
        .doc(
            "list of argv patterns",
            "none (required by `commands_only` and `ci_runner`)",
            "['pytest ...']",
            "The commands `commands.run` may run, in `root`.",
        )
        .optional(|d, e, p| {
            p.options.commands = d.plain_strings(e.node, &e.at);
        }),
    Field::key("urls")
        .doc(
            "list of hosts (`example.com`, `*.example.com`)",
            "none: nothing is fetched",
            "[pypi.org, files.pythonhosted.org]",
            "`download_only`: `http.download` may save what it `GET`s from these hosts (https) \
             beneath `root`.",
        )
        .optional(|d, e, p| {
            p.options.urls = d.plain_strings(e.node, &e.at);
        }),
    Field::key("readonly")
        .doc(
            "bool",
            "`false`",
            "true",
            "`workspace_jail`: the files are read-only.",
        )
        .optional(|d, e, p| {
            p.options.readonly = d.bool(e.node, &e.at).unwrap_or(false);
        }),
    Field::key("writable")
        .doc(
            "bool",
            "`false`",
            "true",
            "`ci_runner`: commands and file ops may write the workspace.",
        )
        .optional(|d, e, p| {
            p.options.writable = d.bool(e.node, &e.at).unwrap_or(false);
        }),
    Field::key("timeout")
        .doc(
            "duration",
            "none (`ci_runner`: `600s`)",
            "15m",
            "The command timeout (`workspace_jail`, `ci_runner`).",
        )
        .optional(|d, e, p| {
            p.options.timeout = d.duration(e.node, &e.at);
        }),
    Field::key("deny")
        .doc(
            "list of globs",
            "none",
            "['*.sqlite']",
            "Deny patterns added to the default secret ones (`.env`, `.env.*`, `.ssh`, `*.pem`, \
             `*.key`, `id_rsa*`).",
        )
        .optional(|d, e, p| {
            p.options.deny = d.plain_strings(e.node, &e.at);
        }),
    Field::key("max_bytes")
        .doc(
            "size",
            "none",
            "5MiB",
            "The largest file the file ops may read or write.",
        )
        .optional(|d, e, p| {
            p.options.max_bytes = d.size(e.node, &e.at);
        }),
    Field::key("unsafe")
        .doc(
            "bool",
            "`false`",
            "true",
            "`full_access`'s explicit opt-in.",
        )
        .optional(|d, e, p| {
            p.options.unsafe_ = d.bool(e.node, &e.at).unwrap_or(false);
        }),
    Field::key("agents")
        .doc(
            "adapter name, or list of them",
            "the top-level `agents`, else `codex`",
            "[codex, claude_code]",
            "`agent_host`: the adapters hosted.",
        )
        .optional(|d, e, p| {
            p.options.agents = d
                .adapters(e.node, &e.at)
                .into_iter()
                .map(|a| a.value)
                .collect();
        }),
    Field::key("permissions")
        .doc(
            "`read-only` or `workspace-write` (`full` is refused)",
            "`read-only`",
            "workspace-write",
            "`agent_host`: what the agents may change in `root`.",
        )
        .optional(|d, e, p| {
            let choices = AgentPermissions::ALL.map(|p| (p.as_str(), p));
            p.options.permissions = d.choice(e.node, &e.at, &choices);
        }),
    Field::key("confirm")
        .doc(
            "`never` or `always`",
            "`always`",
            "never",
            "`never`: the confirm-tier calls the preset's rules allow run without a person's \
             approval; destructive ops stay confirmed.",
        )
        .optional(|d, e, p| {
            p.confirm_never = d
                .choice(e.node, &e.at, &[("never", true), ("always", false)])
                .and_then(|never| never.then_some(e.node.span));
        }),
    Field::key("reason")
        .doc(
            "string",
            "none",
            "nightly CI runs unattended",
            "Why the preset runs unattended on purpose: with `confirm: never`, the lint is a \
             note instead of a warning (`check-config --strict` passes).",
        )
        .optional(|d, e, p| p.reason = d.string(e.node, &e.at)),
];

/// `agents:` written as a mapping.
pub(super) const AGENTS: &[Field<AgentsConfig>] = &[
    Field::key("adapters")
        .doc(
            "adapter name, or list of them (`codex`, `claude_code`)",
            "required",
            "[codex, claude_code]",
            "The adapters hosted.",
        )
        .required(
            |d, e, a| a.adapters = d.adapters(e.node, &e.at),
            |d, e, _| {
                d.err_fix(
                    codes::CONFIG_MISSING_KEY,
                    "`agents` needs `adapters`".to_owned(),
                    e.within,
                    e.node.span,
                    "write `agents: {adapters: [codex], default: codex}`, or `agents: [codex]`"
                        .to_owned(),
                );
            },
        ),
    Field::key("default")
        .doc(
            "adapter name",
            "none",
            "codex",
            "The adapter a request that names none gets; must be one of `adapters`.",
        )
        .optional(|d, e, a| {
            a.default = d
                .spanned_string(e.node, &e.at)
                .filter(|s| d.adapter_ok(s, &e.at));
        }),
];

/// `install:`.
pub(super) const INSTALL: &[Field<InstallConfig>] = &[Field::key("mode")
    .doc(
        "`lazy`, `build`, `offline` or `off`",
        "`lazy`",
        "offline",
        "`lazy`: on first use, into the state directory; `build`: only by `corral agents \
         prepare`; `offline`: never from the network; `off`: never.",
    )
    .optional(|d, e, i| {
        let modes = InstallMode::ALL.map(|m| (m.as_str(), m));
        i.mode = d.choice(e.node, &e.at, &modes).unwrap_or_default();
    })];

impl Decoder {
    /// Whether `name` is a known adapter; else an error with did-you-mean.
    fn adapter_ok(&mut self, name: &Spanned<String>, at: &str) -> bool {
        match parse_adapter(&name.value) {
            Ok(_) => true,
            Err(e) => {
                self.err_fix(e.code(), e.to_string(), at, name.span, e.fix());
                false
            }
        }
    }

    /// A list of adapter names; unknown ones are refused with did-you-mean.
    pub(super) fn adapters(&mut self, node: &Node, at: &str) -> Vec<Spanned<String>> {
        let names = match &node.value {
            Value::Str(s) => vec![Spanned::new(s.clone(), node.span)],
            Value::Null
            | Value::Bool(_)
            | Value::Int(_)
            | Value::Float(_)
            | Value::Seq(_)
            | Value::Map(_) => self.strings(node, at),
        };
        names
            .into_iter()
            .enumerate()
            .filter(|(i, n)| self.adapter_ok(n, &format!("{at}[{i}]")))
            .map(|(_, n)| n)
            .collect()
    }

    /// `agents: [codex]` or `agents: {adapters: [codex, claude_code], default: codex}`.
    pub(super) fn agents(&mut self, node: &Node, at: &str) -> Option<AgentsConfig> {
        let a = match &node.value {
            Value::Map(_) => {
                let mut a = AgentsConfig::default();
                self.fields(node, at, AGENTS, &mut a)?;
                a
            }
            Value::Null
            | Value::Bool(_)
            | Value::Int(_)
            | Value::Float(_)
            | Value::Str(_)
            | Value::Seq(_) => AgentsConfig {
                adapters: self.adapters(node, at),
                default: None,
            },
        };
        if let Some(def) = &a.default
            && !a.adapters.iter().any(|x| x.value == def.value)
        {
            self.err_fix(
                codes::CONFIG_INVALID_VALUE,
                format!("the default adapter `{}` is not in `adapters`", def.value),
                &format!("{at}.default"),
                def.span,
                format!("add `{}` to `adapters`, or pick one of them", def.value),
            );
        }
        Some(a)
    }

    /// `guardrails:`.
    pub(super) fn guardrails(&mut self, node: &Node, at: &str) -> GuardrailsConfig {
        let mut g = GuardrailsDraft::default();
        if self.fields(node, at, GUARDRAILS, &mut g).is_none() {
            return GuardrailsConfig::default();
        }
        if g.g.confirmations == ConfirmationBackend::Memory
            && g.g.replicas > 1
            && let Some((span, c_at)) = g.confirmations
        {
            self.err_fix(
                codes::CONFIG_INVALID_VALUE,
                format!(
                    "`confirmations: memory` keeps pending actions in one process, and `replicas` is {}: an approval given on one replica would be invisible to the others",
                    g.g.replicas
                ),
                &c_at,
                span,
                "use `confirmations: store` with `storage: {url: postgres://...}` shared by the replicas".to_owned(),
            );
        }
        g.g
    }

    /// `budgets:`.
    pub(super) fn budgets(&mut self, node: &Node, at: &str) -> BudgetsConfig {
        let mut b = BudgetsConfig::default();
        match self.fields(node, at, BUDGETS, &mut b) {
            Some(_) => b,
            None => BudgetsConfig::default(),
        }
    }

    /// `run:` (present but empty: the defaults).
    pub(super) fn run(&mut self, node: &Node, at: &str) -> Option<RunConfig> {
        let mut r = RunConfig {
            span: node.span,
            ..RunConfig::default()
        };
        if !matches!(node.value, Value::Null) {
            self.fields(node, at, RUN, &mut r)?;
        }
        Some(r)
    }

    /// `preset: name`, `preset: {name, ...options}`, or a list of those.
    pub(super) fn presets(&mut self, node: &Node, at: &str) -> Vec<PresetUse> {
        let items: Vec<(&Node, String)> = match &node.value {
            Value::Seq(items) => items
                .iter()
                .enumerate()
                .map(|(i, n)| (n, format!("{at}[{i}]")))
                .collect(),
            Value::Null
            | Value::Bool(_)
            | Value::Int(_)
            | Value::Float(_)
            | Value::Str(_)
            | Value::Map(_) => vec![(node, at.to_owned())],
        };
        let mut out = Vec::new();
        for (n, at) in items {
            let mut p = PresetDraft::default();
            if let Value::Map(_) = n.value {
                let Some(mark) = self.fields(n, &at, PRESET, &mut p) else {
                    continue;
                };
                if p.name.is_none() {
                    // Without a name the options mean nothing: report the name alone.
                    self.diags.truncate(mark);
                    self.err(
                        codes::CONFIG_MISSING_KEY,
                        "a preset mapping needs `name`".to_owned(),
                        &at,
                        n.span,
                    );
                    continue;
                }
            } else {
                p.name = Some(n.clone());
            }
            let Some(name_node) = p.name else {
                continue;
            };
            let Some(name) = self.string(&name_node, &at) else {
                continue;
            };
            match Preset::parse(&name) {
                Ok(preset) => out.push(PresetUse {
                    preset,
                    options: p.options,
                    span: name_node.span,
                    confirm_never: p.confirm_never,
                    reason: p.reason,
                }),
                Err(e) => self.err_fix(e.code(), e.to_string(), &at, name_node.span, e.fix()),
            }
        }
        out
    }
}
