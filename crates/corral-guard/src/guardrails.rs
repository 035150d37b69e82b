//! What a deployment's config says about the guard steps that are not the policy: autonomy
//! levels, RBAC by tier, the guardrails mode, confirmation, budgets and op versions. Built by the
//! composition root and swapped with the deployment on reload. The steps' checks live here
//! (`check_autonomy`, `check_role`, `confirmation_step`), so the gateway and `corral explain`
//! run one implementation.
//!
//! **RBAC activation.** RBAC by tier is on whenever any principal can carry a tier role: the
//! config has a `roles:` block (even an empty one), a static token has `viewer`, `operator` or
//! `admin` among its roles, or `auth.jwt` is configured (a JWT's roles claim can carry them).
//! A tier role then means what it says (issue 11 item 7: a `viewer` token could delete files
//! while RBAC was off), and every caller needs one (`viewer < operator < admin`, the highest of
//! its roles counts; other role names are ignored): a caller with none is refused every op, as
//! spec 002 enforces RBAC in every mode and a missing role must not fail open. RBAC stays off
//! only in configs where no principal can carry a tier role (no `roles:`, no JWT, no static
//! token with a tier role): there roles matter only to the rules that name them, so tokens that
//! carry rule roles (say `role:grader`) keep working. The lint warns about a static token
//! without a tier role while RBAC is on (`lint.rbac_no_tier_role`).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

pub use corral_ports::runs::Budgets;

use corral_policy::{
    AutonomyLevel, OpSpec, Principal, PrincipalKind, PrincipalSelector, Role, Tier, codes,
};

/// Enforce or dry-run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Confirm- and destructive-tier calls wait for a human's approval.
    #[default]
    Enforce,
    /// Confirm- and destructive-tier calls answer `dry_run` and never run.
    DryRun,
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

    /// The autonomy step: `Err` with the refusal when the level in force for `principal` (run
    /// level `run_level`) does not let `op` run; else the level in force, if any.
    pub fn check_autonomy(
        &self,
        op: &OpSpec,
        principal: &Principal,
        run_level: Option<AutonomyLevel>,
    ) -> Result<Option<(AutonomyLevel, LevelSource)>, StepRefusal> {
        match self.effective_level(principal, run_level) {
            Some((level, source)) if !level.permits(op) => {
                let needed = AutonomyLevel::lowest_for(op);
                Err(StepRefusal {
                    code: codes::AUTONOMY_BLOCKED,
                    detail: level.as_str().to_owned(),
                    message: format!(
                        "`{}` ({} tier, effects {}) needs autonomy {needed} or higher; {source} is {level}, which lets {} run",
                        op.id,
                        op.tier(),
                        op.effective_effects(),
                        level.describe()
                    ),
                })
            }
            other => Ok(other),
        }
    }

    /// The RBAC step: `Err` with the refusal when RBAC is on and `principal`'s highest tier
    /// role is below the one `op` needs; else the role it needs (`None`: RBAC is off).
    pub fn check_role(
        &self,
        op: &OpSpec,
        principal: &Principal,
    ) -> Result<Option<Role>, StepRefusal> {
        let Some(need) = self.missing_role(op, principal) else {
            return Ok(self.required_role(op));
        };
        let why = if self
            .rbac
            .as_ref()
            .is_some_and(|o| o.contains_key(op.id.as_str()))
        {
            "`roles.overrides`".to_owned()
        } else {
            format!("its {} tier: {}", op.tier(), tier_reason(op))
        };
        let have = Role::highest_of(&principal.roles).map_or_else(
            || "no tier role (`viewer`, `operator` or `admin`)".to_owned(),
            |h| format!("the role `{h}`"),
        );
        Err(StepRefusal {
            code: codes::RBAC_DENIED,
            detail: need.as_str().to_owned(),
            message: format!(
                "`{}` needs the role `{need}` ({why}); you have {have}; call as a principal with the role `{need}` or higher",
                op.id
            ),
        })
    }

    /// The confirmation step for a call of `op` that the allow rule at `rule_index` decided
    /// (`run_dry`: the run or the call asked for dry-run).
    pub fn confirmation_step(&self, op: &OpSpec, rule_index: usize, run_dry: bool) -> Confirmation {
        let tier = op.tier();
        match tier {
            Tier::Read => Confirmation::NotGuarded,
            Tier::Confirm | Tier::Destructive => {
                if self.mode == Mode::DryRun || run_dry {
                    Confirmation::DryRun
                } else if tier == Tier::Confirm
                    && !op.always_confirmed
                    && self.confirm_never_rules.contains(&rule_index)
                {
                    Confirmation::Waived
                } else {
                    Confirmation::Required
                }
            }
        }
    }

    /// The op's version (`0` for an op the composition root did not version).
    pub fn op_version(&self, op: &str) -> &str {
        self.op_versions.get(op).map_or("0", String::as_str)
    }
}

/// A guard step's refusal: its code, the message the caller sees, and the audit detail (the
/// level in force, or the role needed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRefusal {
    /// The stable code (`autonomy.blocked`, `rbac.denied`).
    pub code: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
    /// The audit event's detail.
    pub detail: String,
}

/// What the confirmation step does with a call the policy allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// A read-tier op: nobody is asked.
    NotGuarded,
    /// Guarded, but dry-run (the mode, the run or the call): described, never run.
    DryRun,
    /// A confirm-tier op whose allow rule says `confirm: never`.
    Waived,
    /// A person must approve it (`202 confirmation.required`).
    Required,
}

impl Confirmation {
    /// The name used in `corral explain`'s output.
    pub fn as_str(self) -> &'static str {
        match self {
            Confirmation::NotGuarded => "not_guarded",
            Confirmation::DryRun => "dry_run",
            Confirmation::Waived => "waived",
            Confirmation::Required => "required",
        }
    }
}

/// Why an op of a guarded tier needs a person: its summary, tier and effects.
pub fn tier_reason(spec: &OpSpec) -> String {
    let what = match spec.tier() {
        Tier::Read => "reads only",
        Tier::Confirm => "changes something",
        Tier::Destructive => "is irreversible or administrative",
    };
    let summary = spec.summary.trim().trim_end_matches('.');
    if summary.is_empty() {
        format!(
            "`{}` {what} (effects: {})",
            spec.id,
            spec.effective_effects()
        )
    } else {
        format!(
            "{summary}: `{}` {what} (effects: {})",
            spec.id,
            spec.effective_effects()
        )
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
