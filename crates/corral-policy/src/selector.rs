//! Op selectors: which ops a rule reaches.

use std::fmt;

use crate::error::PolicyError;
use crate::op::{Catalog, Effect, OpId, OpSpec, Tier};
use crate::suggest::closest;

/// Selects ops by id, namespace, group, effect or tier.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Selector {
    /// One op by its exact id. The only selector that mounts explicit-only ops.
    Exact(OpId),
    /// `ns.*`: ops exactly one level below `ns`.
    OneLevel(String),
    /// `ns.**`: ops at any depth below `ns`.
    AnyDepth(String),
    /// `group:NAME`
    Group(String),
    /// `effect:E`: ops that have effect `E`.
    Effect(Effect),
    /// `tier:T`: ops whose tier is `T`.
    Tier(Tier),
    /// `*`: every op.
    All,
}

impl Selector {
    /// Parses a selector and checks that exact ids and groups exist in `catalog`, with
    /// did-you-mean on a miss.
    pub fn parse(s: &str, catalog: &Catalog) -> Result<Self, PolicyError> {
        let sel = Self::parse_syntax(s)?;
        match &sel {
            Selector::Exact(id) if catalog.get(id.as_str()).is_none() => {
                Err(PolicyError::UnknownOp {
                    op: s.to_owned(),
                    suggestions: closest(s, catalog.ids()),
                })
            }
            Selector::Group(g) if !catalog.groups().contains(&g.as_str()) => {
                let groups = catalog.groups();
                Err(PolicyError::InvalidSelector {
                    selector: s.to_owned(),
                    why: format!("no op is in group `{g}`"),
                    suggestions: closest(g, groups)
                        .into_iter()
                        .map(|g| format!("group:{g}"))
                        .collect(),
                })
            }
            _ => Ok(sel),
        }
    }

    /// Parses the selector's form only.
    pub fn parse_syntax(s: &str) -> Result<Self, PolicyError> {
        let bad = |why: &str, suggestions: Vec<String>| PolicyError::InvalidSelector {
            selector: s.to_owned(),
            why: why.to_owned(),
            suggestions,
        };
        if s == "*" {
            return Ok(Selector::All);
        }
        if let Some((kind, value)) = s.split_once(':') {
            return match kind {
                "group" if !value.is_empty() => Ok(Selector::Group(value.to_owned())),
                "effect" => Effect::parse(value).map(Selector::Effect).ok_or_else(|| {
                    bad(
                        "unknown effect",
                        closest(value, Effect::ALL.map(Effect::as_str))
                            .into_iter()
                            .map(|e| format!("effect:{e}"))
                            .collect(),
                    )
                }),
                "tier" => Tier::parse(value).map(Selector::Tier).ok_or_else(|| {
                    bad(
                        "unknown tier",
                        closest(value, Tier::ALL.map(Tier::as_str))
                            .into_iter()
                            .map(|t| format!("tier:{t}"))
                            .collect(),
                    )
                }),
                _ => Err(bad(
                    "the prefixes are `group:`, `effect:` and `tier:`",
                    closest(kind, ["group", "effect", "tier"])
                        .into_iter()
                        .map(|k| format!("{k}:{value}"))
                        .collect(),
                )),
            };
        }
        if let Some(ns) = s.strip_suffix(".**") {
            return OpId::parse(ns)
                .map(|_| Selector::AnyDepth(ns.to_owned()))
                .map_err(|_| bad("the part before `.**` must be a valid op id prefix", vec![]));
        }
        if let Some(ns) = s.strip_suffix(".*") {
            return OpId::parse(ns)
                .map(|_| Selector::OneLevel(ns.to_owned()))
                .map_err(|_| bad("the part before `.*` must be a valid op id prefix", vec![]));
        }
        if s.contains('*') {
            return Err(bad(
                "`*` is only allowed alone, as `ns.*` or as `ns.**`",
                vec![],
            ));
        }
        OpId::parse(s)
            .map(Selector::Exact)
            .map_err(|e| bad(&e.to_string(), vec![]))
    }

    /// Whether the selector reaches `op`, ignoring the explicit-only rule.
    pub fn reaches(&self, op: &OpSpec) -> bool {
        let id = op.id.as_str();
        match self {
            Selector::Exact(x) => x == &op.id,
            Selector::OneLevel(ns) => id
                .strip_prefix(ns.as_str())
                .and_then(|r| r.strip_prefix('.'))
                .is_some_and(|rest| !rest.contains('.')),
            Selector::AnyDepth(ns) => id
                .strip_prefix(ns.as_str())
                .is_some_and(|r| r.starts_with('.')),
            Selector::Group(g) => op.groups.iter().any(|x| x == g),
            Selector::Effect(e) => op.effective_effects().contains(*e),
            Selector::Tier(t) => op.tier() == *t,
            Selector::All => true,
        }
    }

    /// Whether an allow rule with this selector mounts `op`: explicit-only ops are mounted only
    /// by their exact id.
    pub fn mounts(&self, op: &OpSpec) -> bool {
        match self {
            Selector::Exact(_) => self.reaches(op),
            Selector::OneLevel(_)
            | Selector::AnyDepth(_)
            | Selector::Group(_)
            | Selector::Effect(_)
            | Selector::Tier(_)
            | Selector::All => !op.explicit_only && self.reaches(op),
        }
    }

    /// Whether the selector names an op of the `agents` namespace, or the namespace itself
    /// (`agents.codex.run`, `agents.codex.*`, `agents.**`): see `Rule::mounts`.
    pub fn names_agents(&self) -> bool {
        match self {
            Selector::Exact(id) => id.namespace() == "agents",
            Selector::OneLevel(ns) | Selector::AnyDepth(ns) => {
                ns.split('.').next() == Some("agents")
            }
            Selector::Group(_) | Selector::Effect(_) | Selector::Tier(_) | Selector::All => false,
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Exact(id) => write!(f, "{id}"),
            Selector::OneLevel(ns) => write!(f, "{ns}.*"),
            Selector::AnyDepth(ns) => write!(f, "{ns}.**"),
            Selector::Group(g) => write!(f, "group:{g}"),
            Selector::Effect(e) => write!(f, "effect:{e}"),
            Selector::Tier(t) => write!(f, "tier:{t}"),
            Selector::All => f.write_str("*"),
        }
    }
}
