//! Principals (who calls) and the selectors rules use to target them.

use std::fmt;

use crate::error::PolicyError;

/// What kind of caller a principal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PrincipalKind {
    /// A person.
    Human,
    /// An agent acting for a person (a token with an `act` claim).
    Delegated,
    /// A machine identity acting for itself.
    Service,
}

impl PrincipalKind {
    /// Every kind.
    pub const ALL: [PrincipalKind; 3] = [
        PrincipalKind::Human,
        PrincipalKind::Delegated,
        PrincipalKind::Service,
    ];

    /// The name used in config.
    pub fn as_str(self) -> &'static str {
        match self {
            PrincipalKind::Human => "human",
            PrincipalKind::Delegated => "delegated",
            PrincipalKind::Service => "service",
        }
    }

    /// Parses a kind name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Where a principal's identity came from. Two callers with the same `id` from different
/// origins (a static token `agent` and a JWT with `sub: agent`) are different callers: whatever
/// is bound to a caller (a pending action, who may approve it) compares `Principal::identity`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PrincipalOrigin {
    /// A static token of the config (`auth.tokens`); `id` is the token's id.
    StaticToken,
    /// A verified JWT; `id` is its `sub`, `issuer` its `iss` claim (empty when it has none).
    Jwt {
        /// The token's issuer.
        issuer: String,
    },
    /// Made in the process (an embedding, a test); no credential was checked.
    Local,
    /// The caller of an open-mode server.
    Anonymous,
}

/// The caller of an op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Stable id (a token's `id`, a JWT's `sub`).
    pub id: String,
    /// Roles, e.g. `viewer`, `operator`, `admin`.
    pub roles: Vec<String>,
    /// Human, delegated or service.
    pub kind: PrincipalKind,
    /// The tenant the caller belongs to, if tenancy is on.
    pub tenant: Option<String>,
    /// False only for the anonymous caller of an open-mode server.
    pub authenticated: bool,
    /// Where the identity came from (a static token, a JWT issuer, ...).
    pub origin: PrincipalOrigin,
}

impl Principal {
    /// An authenticated human principal.
    pub fn new(id: &str, roles: &[&str]) -> Self {
        Self {
            id: id.to_owned(),
            roles: roles.iter().map(|r| (*r).to_owned()).collect(),
            kind: PrincipalKind::Human,
            tenant: None,
            authenticated: true,
            origin: PrincipalOrigin::Local,
        }
    }

    /// The caller of an open-mode server: matches only rules without principals.
    pub fn anonymous() -> Self {
        Self {
            id: "anonymous".to_owned(),
            roles: Vec::new(),
            kind: PrincipalKind::Human,
            tenant: None,
            authenticated: false,
            origin: PrincipalOrigin::Anonymous,
        }
    }

    /// Sets the kind.
    pub fn with_kind(mut self, kind: PrincipalKind) -> Self {
        self.kind = kind;
        self
    }

    /// Sets the origin.
    pub fn with_origin(mut self, origin: PrincipalOrigin) -> Self {
        self.origin = origin;
        self
    }

    /// The full identity, one string: the origin, whether the caller is a person (human, or
    /// an agent delegated by that person: the same person) or a service, and the id:
    /// `token:service:agent`, `jwt:https%3A//idp.example:person:ada`, `local:person:ada`,
    /// `anonymous`. Unambiguous: the issuer's `%` and `:` are escaped, and the id comes last.
    /// Not for display; the audit shows `id`.
    pub fn identity(&self) -> String {
        let party = match self.kind {
            PrincipalKind::Human | PrincipalKind::Delegated => "person",
            PrincipalKind::Service => "service",
        };
        match &self.origin {
            PrincipalOrigin::StaticToken => format!("token:{party}:{}", self.id),
            PrincipalOrigin::Jwt { issuer } => format!(
                "jwt:{}:{party}:{}",
                issuer.replace('%', "%25").replace(':', "%3A"),
                self.id
            ),
            PrincipalOrigin::Local => format!("local:{party}:{}", self.id),
            PrincipalOrigin::Anonymous => "anonymous".to_owned(),
        }
    }
}

/// Targets a rule at some callers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PrincipalSelector {
    /// `id:NAME`
    Id(String),
    /// `role:NAME`
    Role(String),
    /// `kind:human|delegated|service`
    Kind(PrincipalKind),
    /// `*`: any authenticated caller.
    AnyAuthenticated,
}

impl PrincipalSelector {
    /// Parses `id:x`, `role:r`, `kind:human` or `*`.
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        let bad = || PolicyError::InvalidPrincipal {
            selector: s.to_owned(),
        };
        let valid_name = |n: &str| {
            !n.is_empty()
                && n.len() <= 128
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@'))
        };
        if s == "*" {
            return Ok(Self::AnyAuthenticated);
        }
        match s.split_once(':') {
            Some(("id", n)) if valid_name(n) => Ok(Self::Id(n.to_owned())),
            Some(("role", n)) if valid_name(n) => Ok(Self::Role(n.to_owned())),
            Some(("kind", k)) => PrincipalKind::parse(k).map(Self::Kind).ok_or_else(bad),
            _ => Err(bad()),
        }
    }

    /// Whether the caller matches.
    pub fn matches(&self, p: &Principal) -> bool {
        if !p.authenticated {
            return false;
        }
        match self {
            PrincipalSelector::Id(id) => p.id == *id,
            PrincipalSelector::Role(r) => p.roles.iter().any(|x| x == r),
            PrincipalSelector::Kind(k) => p.kind == *k,
            PrincipalSelector::AnyAuthenticated => true,
        }
    }
}

impl fmt::Display for PrincipalSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrincipalSelector::Id(id) => write!(f, "id:{id}"),
            PrincipalSelector::Role(r) => write!(f, "role:{r}"),
            PrincipalSelector::Kind(k) => write!(f, "kind:{}", k.as_str()),
            PrincipalSelector::AnyAuthenticated => f.write_str("*"),
        }
    }
}
