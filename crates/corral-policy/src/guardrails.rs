//! The guardrails' vocabulary, shared by the config and the guard chain: the roles of RBAC by
//! tier (`viewer < operator < admin`) and the autonomy levels (`L0` to `L4`). Pure: which role
//! a tier needs and which ops a level lets run are functions of the op's spec.
//! Also what a run id may look like.

use std::fmt;

use crate::op::{Effect, OpSpec, Tier};

/// A role of RBAC by tier. Ordered: `Viewer < Operator < Admin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// May call read-tier ops.
    Viewer,
    /// May also call confirm-tier ops.
    Operator,
    /// May call every tier, destructive included.
    Admin,
}

impl Role {
    /// Every role, lowest first.
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    /// The name used in config and in principals' roles.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// Parses a role name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The role a tier needs by default: read -> viewer, confirm -> operator, destructive ->
    /// admin.
    pub fn required_for(tier: Tier) -> Role {
        match tier {
            Tier::Read => Role::Viewer,
            Tier::Confirm => Role::Operator,
            Tier::Destructive => Role::Admin,
        }
    }

    /// The highest RBAC role among a principal's roles (other role names are ignored), if any.
    pub fn highest_of(roles: &[String]) -> Option<Role> {
        roles.iter().filter_map(|r| Role::parse(r)).max()
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much a process (or a principal, or a run) may do on its own. Ordered: `L0 < ... < L4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AutonomyLevel {
    /// `core.*` only.
    L0,
    /// The read tier, without `net` or `exec` effects.
    L1,
    /// All of the read tier (changes nothing).
    L2,
    /// The read and confirm tiers.
    L3,
    /// Every tier.
    L4,
}

impl AutonomyLevel {
    /// Every level, lowest first.
    pub const ALL: [AutonomyLevel; 5] = [
        AutonomyLevel::L0,
        AutonomyLevel::L1,
        AutonomyLevel::L2,
        AutonomyLevel::L3,
        AutonomyLevel::L4,
    ];

    /// `L0` to `L4`.
    pub fn as_str(self) -> &'static str {
        match self {
            AutonomyLevel::L0 => "L0",
            AutonomyLevel::L1 => "L1",
            AutonomyLevel::L2 => "L2",
            AutonomyLevel::L3 => "L3",
            AutonomyLevel::L4 => "L4",
        }
    }

    /// Parses `L0` to `L4`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// What the level lets run, in words (for refusals).
    pub fn describe(self) -> &'static str {
        match self {
            AutonomyLevel::L0 => "only `core.*` ops",
            AutonomyLevel::L1 => "read-tier ops without `net` or `exec` effects",
            AutonomyLevel::L2 => "read-tier ops",
            AutonomyLevel::L3 => "read- and confirm-tier ops",
            AutonomyLevel::L4 => "every op",
        }
    }

    /// Whether an op may run at this level.
    pub fn permits(self, op: &OpSpec) -> bool {
        let tier = op.tier();
        match self {
            AutonomyLevel::L0 => op.id.namespace() == "core",
            AutonomyLevel::L1 => {
                let e = op.effective_effects();
                tier == Tier::Read && !e.contains(Effect::Net) && !e.contains(Effect::Exec)
            }
            AutonomyLevel::L2 => tier == Tier::Read,
            AutonomyLevel::L3 => tier <= Tier::Confirm,
            AutonomyLevel::L4 => true,
        }
    }

    /// The lowest level that lets `op` run.
    pub fn lowest_for(op: &OpSpec) -> AutonomyLevel {
        Self::ALL
            .into_iter()
            .find(|l| l.permits(op))
            .unwrap_or(AutonomyLevel::L4)
    }
}

impl fmt::Display for AutonomyLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a run id is well-formed: 1-128 characters of `A-Za-z0-9_-.:` (an `X-Corral-Run`
/// header, a run-scoped token's `run`).
pub fn valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{Effect, OpId, OpSpec};

    fn op(id: &str, effects: &[Effect]) -> OpSpec {
        OpSpec::new(
            OpId::parse(id).unwrap_or_else(|_| unreachable!()),
            effects,
            "",
        )
    }

    #[test]
    fn levels_let_through_what_their_table_says() {
        let health = op("core.health", &[Effect::Read]);
        let read = op("files.read", &[Effect::Read]);
        let write = op("files.write", &[Effect::Write]);
        let delete = op("files.delete", &[Effect::Delete]);
        let net = op("http.fetch", &[Effect::Net]);
        let cases = [
            (AutonomyLevel::L0, [true, false, false, false, false]),
            (AutonomyLevel::L1, [true, true, false, false, false]),
            (AutonomyLevel::L2, [true, true, false, false, false]),
            (AutonomyLevel::L3, [true, true, true, false, true]),
            (AutonomyLevel::L4, [true, true, true, true, true]),
        ];
        for (level, expected) in cases {
            let got = [&health, &read, &write, &delete, &net].map(|o| level.permits(o));
            assert_eq!(got, expected, "{level}");
        }
        assert_eq!(AutonomyLevel::lowest_for(&delete), AutonomyLevel::L4);
        assert_eq!(AutonomyLevel::lowest_for(&read), AutonomyLevel::L1);
    }

    #[test]
    fn roles_order_and_the_highest_wins() {
        assert!(Role::Viewer < Role::Operator && Role::Operator < Role::Admin);
        let roles = ["grader", "operator", "viewer"].map(str::to_owned);
        assert_eq!(Role::highest_of(&roles), Some(Role::Operator));
        assert_eq!(Role::highest_of(&["grader".to_owned()]), None);
        assert_eq!(Role::required_for(Tier::Destructive), Role::Admin);
    }
}
