//! What an op re-checks once the kernel has resolved a path: the protected locations and the
//! deny patterns (and deny rules' path scopes) that reach the call, matched against where the
//! path really leads. The engine decides on the path as written; a symlink beneath the root
//! can lead elsewhere (`data/link-to-env` -> `.env`), so the grant carries these checks and the
//! op runs them on the real path it opened (issue 11 items 2, 3 and 9). Pure: the op does the
//! resolving.

use std::sync::Arc;

use crate::codes;
use crate::principal::Principal;
use crate::protect::{Access, Protected};
use crate::scope::path::{ALWAYS_DENIED, NormPath, PathScope};

/// Where a re-checked scope came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum From {
    /// The deny patterns of an allow rule's path scope: the deciding rule's (`true`: they hold
    /// wherever the path leads), or another reaching rule's (`false`: they hold beneath its
    /// roots, as for the path as written; deny patterns beat every allow).
    AllowPatterns(bool),
    /// A deny rule's path scope (its roots and patterns), with its reason.
    DenyRule(Option<String>),
}

#[derive(Debug, Clone)]
struct Scope {
    rule: Arc<str>,
    scope: PathScope,
    from: From,
}

/// The checks an op runs on a resolved path. Built by the engine into every grant.
#[derive(Debug, Clone)]
pub struct ResolvedCheck {
    protected: Arc<Protected>,
    scopes: Vec<Scope>,
    principal: Principal,
}

impl PartialEq for ResolvedCheck {
    fn eq(&self, other: &Self) -> bool {
        self.protected.spec() == other.protected.spec()
            && self.principal == other.principal
            && self.scopes.len() == other.scopes.len()
            && self.scopes.iter().zip(&other.scopes).all(|(a, b)| {
                a.rule == b.rule && a.from == b.from && a.scope.spec() == b.scope.spec()
            })
    }
}

impl Eq for ResolvedCheck {}

/// A resolved path that the checks refuse: the code the policy would have used, and a message
/// that says what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRefusal {
    /// `policy.path_denied` (a protected location or a deny pattern) or `policy.denied` (a
    /// deny rule).
    pub code: &'static str,
    /// What and why, safe to show the caller.
    pub message: String,
}

impl ResolvedCheck {
    /// Only the protected locations, for `principal` (no scope's patterns).
    pub fn new(protected: Arc<Protected>, principal: Principal) -> Self {
        Self {
            protected,
            scopes: Vec::new(),
            principal,
        }
    }

    /// Adds an allow rule's path scope (`deciding`: the rule that allowed the call): its deny
    /// patterns are re-checked.
    pub(crate) fn allow_patterns(&mut self, rule: Arc<str>, scope: &PathScope, deciding: bool) {
        if !scope.spec().deny.is_empty() {
            self.scopes.push(Scope {
                rule,
                scope: scope.clone(),
                from: From::AllowPatterns(deciding),
            });
        }
    }

    /// Adds a deny rule's path scope: a resolved path it covers is denied.
    pub(crate) fn deny_rule(&mut self, rule: Arc<str>, scope: &PathScope, reason: Option<String>) {
        self.scopes.push(Scope {
            rule,
            scope: scope.clone(),
            from: From::DenyRule(reason),
        });
    }

    /// The protected locations.
    pub fn protected(&self) -> &Protected {
        &self.protected
    }

    /// Checks where `shown` (the path as the caller named it) really leads. `forms` are the
    /// absolute forms of the resolved path to judge: the real path the kernel opened, and the
    /// same path re-anchored at the root as configured (so `/ws/secrets/**` still matches when
    /// `/ws` is itself a symlink). Every form must pass.
    pub fn check(
        &self,
        shown: &str,
        forms: &[&str],
        access: Access,
    ) -> Result<(), ResolvedRefusal> {
        for form in forms {
            let Some(path) = NormPath::new(form) else {
                return Err(ResolvedRefusal {
                    code: codes::POLICY_PATH_INVALID,
                    message: format!("`{shown}` resolves to a path that cannot be checked"),
                });
            };
            let via = if *form == shown {
                format!("`{shown}`")
            } else {
                format!("`{shown}` (resolved: `{form}`)")
            };
            if ALWAYS_DENIED
                .iter()
                .any(|d| path.parts.first() == d.strip_prefix('/').as_ref())
            {
                return Err(ResolvedRefusal {
                    code: codes::POLICY_PATH_DENIED,
                    message: format!("{via} is in /proc, /sys or /dev, which no op reaches"),
                });
            }
            if let Some(hit) = self.protected.hit_for(&path.absolute, access) {
                return Err(protected_refusal(&via, &hit.describe(), access));
            }
            for s in &self.scopes {
                match &s.from {
                    From::AllowPatterns(deciding)
                        if s.scope.denies(&path)
                            && (*deciding
                                || s.scope.root_len(&path, &self.principal).is_some()) =>
                    {
                        return Err(ResolvedRefusal {
                            code: codes::POLICY_PATH_DENIED,
                            message: format!(
                                "{via} matches a deny pattern of rule `{}` [{}]; deny patterns \
                                 hold for where a symlink leads too: call with another path",
                                s.rule,
                                s.scope.spec().deny.join(", ")
                            ),
                        });
                    }
                    From::DenyRule(reason) if s.scope.covers(&path, &self.principal) => {
                        return Err(ResolvedRefusal {
                            code: codes::POLICY_DENIED,
                            message: format!(
                                "{via} is covered by deny rule `{}`: {}",
                                s.rule,
                                reason
                                    .clone()
                                    .unwrap_or_else(|| "it denies this path".to_owned())
                            ),
                        });
                    }
                    From::AllowPatterns(_) | From::DenyRule(_) => {}
                }
            }
        }
        Ok(())
    }
}

/// The refusal for a protected location (the engine's, and the op's after resolving).
pub fn protected_refusal(via: &str, why: &str, access: Access) -> ResolvedRefusal {
    let message = match access {
        Access::Change => format!(
            "{via} is protected: {why}; git metadata, corral's state, config and key files and \
             the config's `protected:` list can't be changed through corral; change it outside \
             corral, or write elsewhere"
        ),
        Access::Read => format!(
            "{via} is protected: {why}; corral's state, config and key files can't be read \
             through corral; read another path"
        ),
    };
    ResolvedRefusal {
        code: codes::POLICY_PATH_DENIED,
        message,
    }
}

/// The forms a resolved path is checked in: its real path, and (when it lies beneath the root's
/// real path `real_root`) the same place anchored at the root as configured, so globs and
/// scopes written against the configured root still match when the root is reached through a
/// symlink.
pub fn resolved_forms(
    real: &std::path::Path,
    real_root: Option<&std::path::Path>,
    root: &str,
) -> Vec<String> {
    let real_s = real.to_string_lossy().into_owned();
    let mut forms = vec![real_s];
    if let Some(rest) = real_root.and_then(|r| real.strip_prefix(r).ok()) {
        let rest = rest.to_string_lossy();
        let anchored = if rest.is_empty() {
            root.to_owned()
        } else {
            format!("{}/{rest}", root.trim_end_matches('/'))
        };
        if !forms.contains(&anchored) {
            forms.push(anchored);
        }
    }
    forms
}
