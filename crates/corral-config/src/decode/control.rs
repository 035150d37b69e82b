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
    Field::new("mode", |d, e, g| {
        let modes = [
            ("enforce", GuardrailsMode::Enforce),
            ("dry_run", GuardrailsMode::DryRun),
        ];
        g.g.mode = d.choice(e.node, &e.at, &modes).unwrap_or_default();
    }),
    Field::new("confirmation_ttl", |d, e, g| {
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
    Field::new("confirmations", |d, e, g| {
        let backends = [
            ("store", ConfirmationBackend::Store),
            ("memory", ConfirmationBackend::Memory),
        ];
        g.confirmations = Some((e.node.span, e.at.clone()));
        g.g.confirmations = d.choice(e.node, &e.at, &backends).unwrap_or_default();
    }),
    Field::new("max_pending", |d, e, g| {
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
    Field::new("replicas", |d, e, g| {
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
    Field::new("max_calls", |d, e, b| {
        b.max_calls = d.uint(e.node, &e.at).unwrap_or(0);
    }),
    Field::new("max_calls_per_op", |d, e, b| {
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
    Field::new("max_wall_time", |d, e, b| {
        b.max_wall_time = if is_zero_quantity(&e.node.value) {
            Duration::ZERO
        } else {
            d.duration(e.node, &e.at).unwrap_or(Duration::ZERO)
        };
    }),
    Field::new("max_output_bytes", |d, e, b| {
        b.max_output_bytes = if is_zero_quantity(&e.node.value) {
            0
        } else {
            d.size(e.node, &e.at).unwrap_or(0)
        };
    }),
    Field::new("tokens", |d, e, b| {
        b.tokens = d.uint(e.node, &e.at).unwrap_or(0);
    }),
    Field::new("replay", |d, e, b| {
        d.fields(e.node, &e.at, REPLAY_BUDGET, &mut b.replay);
    }),
    Field::new("judge", |d, e, b| {
        d.fields(e.node, &e.at, JUDGE_BUDGET, &mut b.judge);
    }),
];

/// `budgets.replay:` one shadow evaluation's ceiling.
pub(super) const REPLAY_BUDGET: &[Field<ReplayBudget>] = &[
    Field::new("max_runs", |d, e, r| {
        r.max_runs = d
            .uint(e.node, &e.at)
            .unwrap_or(ReplayBudget::DEFAULT_MAX_RUNS);
    }),
    Field::new("max_calls", |d, e, r| {
        r.max_calls = d
            .uint(e.node, &e.at)
            .unwrap_or(ReplayBudget::DEFAULT_MAX_CALLS);
    }),
];

/// `budgets.judge:` one tournament's ceiling.
pub(super) const JUDGE_BUDGET: &[Field<JudgeBudget>] = &[Field::new("max_calls", |d, e, j| {
    j.max_calls = d
        .uint(e.node, &e.at)
        .unwrap_or(JudgeBudget::DEFAULT_MAX_CALLS);
})];

/// `run:` the profile of `corral run --config F`.
pub(super) const RUN: &[Field<RunConfig>] = &[
    Field::new("profile", |d, e, r| {
        let profiles = [
            ("workspace", RunProfile::Workspace),
            ("readonly", RunProfile::Readonly),
            ("none", RunProfile::None),
        ];
        r.profile = d
            .choice(e.node, &e.at, &profiles)
            .map(|v| Spanned::new(v, e.node.span));
    }),
    Field::new("read", |d, e, r| r.read = d.strings(e.node, &e.at)),
    Field::new("write", |d, e, r| r.write = d.strings(e.node, &e.at)),
    Field::new("network", |d, e, r| r.network = d.network(e.node, &e.at)),
    Field::new("env", run_env),
    Field::new("limits", |d, e, r| {
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
    Field::new("memory", |d, e, r| r.memory = d.size(e.node, &e.at)),
    Field::new("processes", |d, e, r| {
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
    Field::new("timeout", |d, e, r| r.timeout = d.duration(e.node, &e.at)),
    Field::new("write_quota", |d, e, r| {
        r.write_quota = d.size(e.node, &e.at);
    }),
];

/// A preset written as a mapping, being decoded: its name is read last.
#[derive(Default)]
pub(super) struct PresetDraft {
    name: Option<Node>,
    options: PresetOptions,
    confirm_never: Option<Span>,
}

/// A preset written as a mapping.
pub(super) const PRESET: &[Field<PresetDraft>] = &[
    Field::new("name", |_, e, p| p.name = Some(e.node.clone())),
    Field::new("root", |d, e, p| p.options.root = d.string(e.node, &e.at)),
    Field::new("commands", |d, e, p| {
        p.options.commands = d.plain_strings(e.node, &e.at);
    }),
    Field::new("readonly", |d, e, p| {
        p.options.readonly = d.bool(e.node, &e.at).unwrap_or(false);
    }),
    Field::new("writable", |d, e, p| {
        p.options.writable = d.bool(e.node, &e.at).unwrap_or(false);
    }),
    Field::new("timeout", |d, e, p| {
        p.options.timeout = d.duration(e.node, &e.at);
    }),
    Field::new("deny", |d, e, p| {
        p.options.deny = d.plain_strings(e.node, &e.at);
    }),
    Field::new("max_bytes", |d, e, p| {
        p.options.max_bytes = d.size(e.node, &e.at);
    }),
    Field::new("unsafe", |d, e, p| {
        p.options.unsafe_ = d.bool(e.node, &e.at).unwrap_or(false);
    }),
    Field::new("agents", |d, e, p| {
        p.options.agents = d
            .adapters(e.node, &e.at)
            .into_iter()
            .map(|a| a.value)
            .collect();
    }),
    Field::new("permissions", |d, e, p| {
        let choices = AgentPermissions::ALL.map(|p| (p.as_str(), p));
        p.options.permissions = d.choice(e.node, &e.at, &choices);
    }),
    Field::new("confirm", |d, e, p| {
        p.confirm_never = d
            .choice(e.node, &e.at, &[("never", true), ("always", false)])
            .and_then(|never| never.then_some(e.node.span));
    }),
];

/// `agents:` written as a mapping.
pub(super) const AGENTS: &[Field<AgentsConfig>] = &[
    Field::required(
        "adapters",
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
    Field::new("default", |d, e, a| {
        a.default = d
            .spanned_string(e.node, &e.at)
            .filter(|s| d.adapter_ok(s, &e.at));
    }),
];

/// `install:`.
pub(super) const INSTALL: &[Field<InstallConfig>] = &[Field::new("mode", |d, e, i| {
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
                }),
                Err(e) => self.err_fix(e.code(), e.to_string(), &at, name_node.span, e.fix()),
            }
        }
        out
    }
}
