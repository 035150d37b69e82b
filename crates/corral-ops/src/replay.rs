//! The ops of a sandboxed replay (issue 15 item 3): a registry that cannot hold an op whose
//! replay safety class is unsafe (`OpSpec::safety`), and the load-time check of the tools a
//! variant declares.
//!
//! [`SafeOp`] is the only way into a [`SafeRegistry`], and its only constructor refuses an
//! unsafe op; [`SafeRegistry::of`] keeps the safe part of a deployment's registry and names what
//! it left out. The registry a replay deployment runs with ([`SafeRegistry::to_registry`]) has
//! neither the spec nor the handler of an unsafe op, so the guard chain answers a call of one
//! `404 op.not_enabled` (unknown and not enabled look the same), whatever a policy or a bypassed
//! load check says.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use corral_policy::{Catalog, Safety, codes};

use crate::{Op, Registry};

/// An op whose replay safety class is safe.
#[derive(Clone)]
pub struct SafeOp(Arc<dyn Op>);

impl SafeOp {
    /// `op`, if it is replay-safe; an unsafe one is refused, naming it.
    pub fn new(op: Arc<dyn Op>) -> Result<Self, UnsafeOp> {
        match op.spec().safety() {
            Safety::Safe => Ok(Self(op)),
            Safety::Unsafe => Err(UnsafeOp {
                id: op.spec().id.to_string(),
            }),
        }
    }

    /// The handler.
    pub fn op(&self) -> &Arc<dyn Op> {
        &self.0
    }
}

impl fmt::Debug for SafeOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SafeOp").field(&self.0.spec().id).finish()
    }
}

/// An op a replay cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "op `{id}` is unsafe to replay (it changes something outside the run's ephemeral workspace); a sandboxed replay cannot call it"
)]
pub struct UnsafeOp {
    /// The op's id.
    pub id: String,
}

/// The ops a sandboxed replay may call: safe ones only, by construction.
#[derive(Debug, Clone)]
pub struct SafeRegistry {
    catalog: Catalog,
    ops: BTreeMap<String, SafeOp>,
}

impl SafeRegistry {
    /// The safe part of `registry`, and the ids of the unsafe ops it left out (sorted): neither
    /// their specs nor their handlers are kept.
    pub fn of(registry: &Registry) -> (Self, Vec<String>) {
        let mut catalog = registry.catalog().clone();
        let unsafe_ids: Vec<String> = catalog
            .iter()
            .filter(|s| s.safety() == Safety::Unsafe)
            .map(|s| s.id.to_string())
            .collect();
        for id in &unsafe_ids {
            catalog.remove(id);
        }
        let ops = registry
            .handlers()
            .filter_map(|h| SafeOp::new(Arc::clone(h)).ok())
            .filter(|h| catalog.get(h.op().spec().id.as_str()).is_some())
            .map(|h| (h.op().spec().id.to_string(), h))
            .collect();
        (Self { catalog, ops }, unsafe_ids)
    }

    /// The catalog: safe ops only.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The handler of a safe op.
    pub fn get(&self, id: &str) -> Option<&SafeOp> {
        self.ops.get(id)
    }

    /// The registry a replay deployment runs with: these ops, and no other.
    pub fn to_registry(&self) -> Registry {
        Registry::new(
            self.catalog.clone(),
            self.ops.values().map(|o| Arc::clone(o.op())).collect(),
        )
    }
}

/// Why a variant cannot be replayed: the first tool it declares that is unsafe or unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Ineligible {
    /// `replay.unsafe_op` or `replay.unknown_op`.
    pub code: &'static str,
    /// The tool, as declared.
    pub op: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// The load-time check of a variant's declared tools against the deployment's `catalog`,
/// before anything runs: every tool must resolve to an op, and every op must be replay-safe.
/// The first that is not is named.
pub fn check_tools<'a>(
    catalog: &Catalog,
    tools: impl IntoIterator<Item = &'a str>,
) -> Result<(), Ineligible> {
    for tool in tools {
        let Some(spec) = catalog.get(tool) else {
            return Err(Ineligible {
                code: codes::REPLAY_UNKNOWN_OP,
                op: tool.to_owned(),
                message: format!(
                    "the variant declares the tool `{tool}`, which is no op of this deployment; fix the name (`GET /ops` lists the ops)"
                ),
            });
        };
        if spec.safety() == Safety::Unsafe {
            return Err(Ineligible {
                code: codes::REPLAY_UNSAFE_OP,
                op: tool.to_owned(),
                message: format!(
                    "the variant declares the tool `{tool}`, which is unsafe to replay (it changes something outside the run's ephemeral workspace); remove it from the variant, or replay with a variant that only reads"
                ),
            });
        }
    }
    Ok(())
}
