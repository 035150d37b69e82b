//! What a deployment's config says about the guard steps that are not the policy: autonomy
//! levels, RBAC by tier, the guardrails mode, confirmation, budgets and op versions. Built by the
//! composition root and swapped with the deployment on reload.
//!
//! **RBAC activation.** RBAC by tier is on only when the config has a `roles:` block (even an
//! empty one). Then every caller needs a tier role (`viewer < operator < admin`, the highest of
//! its roles counts; other role names are ignored): a caller with none, the open-mode anonymous
//! caller included, is refused every op. Without `roles:`, roles matter only to the rules that
//! name them. Activation is explicit so that a config whose tokens carry roles for rules (say
//! `role:grader`) does not start refusing every call; the lint notes a token that carries a tier
//! role while RBAC is off.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use corral_policy::{AutonomyLevel, OpSpec, Principal, PrincipalKind, PrincipalSelector, Role};

/// Enforce or dry-run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Confirm- and destructive-tier calls wait for a human's approval.
    #[default]
    Enforce,
    /// Confirm- and destructive-tier calls answer `dry_run` and never run.
    DryRun,
}

/// Per-run budgets; `0` (or `Duration::ZERO`) disables one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budgets {
    /// Calls per run.
    pub max_calls: u64,
    /// Calls per run to one op.
    pub max_calls_per_op: HashMap<String, u64>,
    /// Time from a run's first call.
    pub max_wall_time: Duration,
    /// Bytes of results per run.
    pub max_output_bytes: u64,
}

impl Budgets {
    /// Whether any budget is set.
    pub fn any(&self) -> bool {
        self.max_calls > 0
            || self.max_calls_per_op.values().any(|n| *n > 0)
            || !self.max_wall_time.is_zero()
            || self.max_output_bytes > 0
    }
}

/// Where the autonomy level in force came from (named in refusals).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LevelSource {
    /// `autonomy: Lx` (process-wide).
    Process,
    /// `autonomy.pins` entry for this selector.
    Pin(String),
    /// The implicit pin of service principals (L2).
    ServiceDefault,
    /// The run lowered itself (`X-Corral-Autonomy`).
    Run,
}

impl std::fmt::Display for LevelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LevelSource::Process => f.write_str("the process-wide `autonomy` level"),
            LevelSource::Pin(sel) => write!(f, "the autonomy pin for `{sel}`"),
            LevelSource::ServiceDefault => {
                f.write_str("the default pin of service principals (L2)")
            }
            LevelSource::Run => f.write_str("the level this run lowered itself to"),
        }
    }
}

/// The guard steps' settings for one deployment.
#[derive(Debug, Clone)]
pub struct GuardPolicy {
    /// The process-wide level; `None`: no process-wide restriction.
    pub autonomy: Option<AutonomyLevel>,
    /// Per-principal pins, in config order.
    pub pins: Vec<(PrincipalSelector, AutonomyLevel)>,
    /// RBAC by tier: `None` when off; the per-op overrides when on.
    pub rbac: Option<HashMap<String, Role>>,
    /// Enforce or dry-run.
    pub mode: Mode,
    /// How long a pending action, its approval and its stored outcome live.
    pub confirmation_ttl: Duration,
    /// How many pending actions one principal may have at once (`guardrails.max_pending`).
    pub max_pending: u64,
    /// Indices (in the policy's rule list) of allow rules with `confirm: never`.
    pub confirm_never_rules: HashSet<usize>,
    /// Per-run budgets.
    pub budgets: Budgets,
    /// Each op's version (a digest of what it is and does), part of a confirmation's key.
    pub op_versions: HashMap<String, String>,
}

impl Default for GuardPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl GuardPolicy {
    /// The defaults of a config without guardrail settings: no autonomy level (service
    /// principals still pinned to L2), RBAC off, enforce, 300 s, no budgets.
    pub fn new() -> Self {
        Self {
            autonomy: None,
            pins: Vec::new(),
            rbac: None,
            mode: Mode::Enforce,
            confirmation_ttl: Duration::from_secs(300),
            max_pending: crate::confirm::DEFAULT_MAX_PENDING,
            confirm_never_rules: HashSet::new(),
            budgets: Budgets::default(),
            op_versions: HashMap::new(),
        }
    }

    /// The autonomy level in force for `principal` (lowered further by `run_level`), and where
    /// it comes from; `None` when nothing restricts the caller.
    ///
    /// The level is the lowest of: the process-wide level; the principal's pin (the lowest of
    /// the pins that match it; for a service principal without a matching pin, L2); the run's.
    pub fn effective_level(
        &self,
        principal: &Principal,
        run_level: Option<AutonomyLevel>,
    ) -> Option<(AutonomyLevel, LevelSource)> {
        let mut best: Option<(AutonomyLevel, LevelSource)> =
            self.autonomy.map(|l| (l, LevelSource::Process));
        let mut lower = |level: AutonomyLevel, source: LevelSource| match &best {
            Some((b, _)) if *b <= level => {}
            _ => best = Some((level, source)),
        };
        let mut pinned = false;
        for (sel, level) in &self.pins {
            if pin_matches(sel, principal) {
                pinned = true;
                lower(*level, LevelSource::Pin(sel.to_string()));
            }
        }
        if !pinned && principal.kind == PrincipalKind::Service {
            lower(AutonomyLevel::L2, LevelSource::ServiceDefault);
        }
        if let Some(l) = run_level {
            lower(l, LevelSource::Run);
        }
        best
    }

    /// The role `op` needs when RBAC is on: its override, or its tier's role.
    pub fn required_role(&self, op: &OpSpec) -> Option<Role> {
        let overrides = self.rbac.as_ref()?;
        Some(
            overrides
                .get(op.id.as_str())
                .copied()
                .unwrap_or_else(|| Role::required_for(op.tier())),
        )
    }

    /// The role `principal` lacks to call `op` (RBAC on and their highest tier role below the
    /// one it needs), or `None` when RBAC lets them.
    pub fn missing_role(&self, op: &OpSpec, principal: &Principal) -> Option<Role> {
        let need = self.required_role(op)?;
        let have = Role::highest_of(&principal.roles);
        have.is_none_or(|h| h < need).then_some(need)
    }

    /// The op's version (`0` for an op the composition root did not version).
    pub fn op_version(&self, op: &str) -> &str {
        self.op_versions.get(op).map_or("0", String::as_str)
    }
}

/// Whether a pin reaches a principal. Unlike a rule's principal selector, a `kind:` pin also
/// reaches the open-mode anonymous caller of that kind: pins only ever restrict.
fn pin_matches(sel: &PrincipalSelector, p: &Principal) -> bool {
    match sel {
        PrincipalSelector::Kind(k) => p.kind == *k,
        PrincipalSelector::Id(_)
        | PrincipalSelector::Role(_)
        | PrincipalSelector::AnyAuthenticated => sel.matches(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(id: &str) -> Principal {
        Principal::new(id, &[]).with_kind(PrincipalKind::Service)
    }

    #[test]
    fn the_lowest_of_process_pin_and_run_is_in_force() {
        let mut g = GuardPolicy::new();
        assert_eq!(g.effective_level(&Principal::new("ada", &[]), None), None);
        assert_eq!(
            g.effective_level(&service("ci"), None),
            Some((AutonomyLevel::L2, LevelSource::ServiceDefault))
        );
        g.pins.push((
            PrincipalSelector::Kind(PrincipalKind::Service),
            AutonomyLevel::L4,
        ));
        assert_eq!(
            g.effective_level(&service("ci"), None).map(|x| x.0),
            Some(AutonomyLevel::L4),
            "a pin says otherwise"
        );
        g.autonomy = Some(AutonomyLevel::L3);
        assert_eq!(
            g.effective_level(&service("ci"), None),
            Some((AutonomyLevel::L3, LevelSource::Process)),
            "the process level caps every pin"
        );
        g.pins
            .push((PrincipalSelector::Id("ci".to_owned()), AutonomyLevel::L1));
        assert_eq!(
            g.effective_level(&service("ci"), None).map(|x| x.0),
            Some(AutonomyLevel::L1),
            "the lowest matching pin"
        );
        assert_eq!(
            g.effective_level(&Principal::new("ada", &[]), Some(AutonomyLevel::L0)),
            Some((AutonomyLevel::L0, LevelSource::Run))
        );
        assert_eq!(
            g.effective_level(&Principal::new("ada", &[]), Some(AutonomyLevel::L4))
                .map(|x| x.0),
            Some(AutonomyLevel::L3),
            "a run never raises"
        );
    }
}
