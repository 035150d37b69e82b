//! Who may call and at what autonomy: tokens, JWTs, the audit sink, autonomy pins and roles.

use corral_policy::codes;
use corral_policy::{AutonomyLevel, PrincipalKind, PrincipalSelector, Role};

use super::{Decoder, Field, Item, Stash, stash};
use crate::diag::Diagnostic;
use crate::model::{
    AuditConfig, AuditSink, AuthConfig, AutonomyConfig, AutonomyPin, JwtSpec, RolesConfig, Spanned,
    TokenConfig,
};
use crate::yaml::{Node, Value};

/// `auth:`.
pub(super) const AUTH: &[Field<AuthConfig>] = &[
    Field::new("tokens", tokens),
    Field::new("jwt", |d, e, a| a.jwt = d.jwt(e.node, &e.at)),
];

/// A token being decoded: it needs both `id` and `token_env`.
pub(super) struct TokenDraft {
    /// The id and its key path.
    id: Option<(Spanned<String>, String)>,
    roles: Vec<String>,
    kind: PrincipalKind,
    token_env: Option<Spanned<String>>,
    run: Option<Spanned<String>>,
    /// `record:`, with its key path and span (it is only valid with `run:`).
    record: Option<(bool, String, crate::yaml::Span)>,
}

/// One of `auth.tokens`.
pub(super) const TOKEN: &[Field<TokenDraft>] = &[
    Field::new("id", |d, e, t| {
        t.id = d.spanned_string(e.node, &e.at).map(|id| (id, e.at.clone()));
    }),
    Field::new("roles", |d, e, t| t.roles = d.plain_strings(e.node, &e.at)),
    Field::new("kind", |d, e, t| {
        let kinds = PrincipalKind::ALL.map(|k| (k.as_str(), k));
        t.kind = d
            .choice(e.node, &e.at, &kinds)
            .unwrap_or(PrincipalKind::Human);
    }),
    Field::new("token_env", |d, e, t| {
        t.token_env = d.spanned_string(e.node, &e.at);
    }),
    Field::new("token", |d, e, _| {
        d.err_fix(
            codes::CONFIG_INLINE_SECRET,
            "the token secret is written in the config".to_owned(),
            &e.at,
            e.node.span,
            "remove `token:`; put the secret in an environment variable and name it with `token_env:`".to_owned(),
        );
    }),
    Field::new("run", |d, e, t| {
        t.run = d.spanned_string(e.node, &e.at).filter(|r| {
            let ok = corral_policy::valid_run_id(&r.value);
            if !ok {
                d.err_fix(
                    codes::CONFIG_INVALID_VALUE,
                    format!("`{}` is not a run id", r.value),
                    &e.at,
                    r.span,
                    "use 1-128 characters of letters, digits, `_`, `-`, `.` and `:`".to_owned(),
                );
            }
            ok
        });
    }),
    Field::new("record", |d, e, t| {
        t.record = d
            .bool(e.node, &e.at)
            .map(|b| (b, e.at.clone(), e.node.span));
    }),
];

/// `auth.tokens: [...]`.
fn tokens(d: &mut Decoder, e: &Item<'_>, a: &mut AuthConfig) {
    let Value::Seq(items) = &e.node.value else {
        d.wrong_type(e.node, &e.at, "a list of tokens");
        return;
    };
    for (i, n) in items.iter().enumerate() {
        let at = format!("{}[{i}]", e.at);
        let mut t = TokenDraft {
            id: None,
            roles: Vec::new(),
            kind: PrincipalKind::Human,
            token_env: None,
            run: None,
            record: None,
        };
        if d.fields(n, &at, TOKEN, &mut t).is_none() {
            continue;
        }
        let record = match t.record {
            Some((true, record_at, span)) if t.run.is_none() => {
                d.err_fix(
                    codes::CONFIG_INVALID_VALUE,
                    "`record: true` records a run, and this token is not scoped to one".to_owned(),
                    &record_at,
                    span,
                    "add `run: <id>` to the token (a run-scoped token), or remove `record:`; an \
                     operator or admin can record a run with `X-Corral-Record: on`"
                        .to_owned(),
                );
                false
            }
            Some((b, _, _)) => b,
            None => false,
        };
        match (t.id, t.token_env) {
            (Some((id, id_at)), Some(token_env)) => {
                if id.value == "anonymous" {
                    d.err_fix(
                        codes::CONFIG_INVALID_VALUE,
                        "a token may not have the id `anonymous`".to_owned(),
                        &id_at,
                        id.span,
                        "pick another id".to_owned(),
                    );
                }
                a.tokens.push(TokenConfig {
                    id,
                    roles: t.roles,
                    kind: t.kind,
                    token_env,
                    run: t.run,
                    record,
                });
            }
            (id, _) => {
                let missing = if id.is_none() { "id" } else { "token_env" };
                d.err_fix(
                    codes::CONFIG_MISSING_KEY,
                    format!("a token needs `{missing}`"),
                    &at,
                    n.span,
                    "write `{id: grader, roles: [operator], token_env: CORRAL_GRADER_TOKEN}`"
                        .to_owned(),
                );
            }
        }
    }
}

/// `auth.jwt` being decoded.
#[derive(Default)]
pub(super) struct JwtDraft {
    hs256_secret_env: Option<Spanned<String>>,
    rs256_public_key_file: Option<Spanned<String>>,
    issuer: Option<String>,
    audience: Option<String>,
    roles_claim: Option<String>,
    tenant_claim: Option<String>,
    service_claim: Option<(String, String)>,
    run_claim: Option<String>,
    /// A `service_claim` that is not a mapping refuses the whole of `auth.jwt` with this alone.
    refused: Option<Diagnostic>,
}

/// `auth.jwt`.
pub(super) const JWT: &[Field<JwtDraft>] = &[
    Field::new("hs256_secret_env", |d, e, j| {
        j.hs256_secret_env = d.spanned_string(e.node, &e.at);
    }),
    Field::new("rs256_public_key_file", |d, e, j| {
        j.rs256_public_key_file = d.spanned_string(e.node, &e.at);
    }),
    Field::new("issuer", |d, e, j| j.issuer = d.string(e.node, &e.at)),
    Field::new("audience", |d, e, j| j.audience = d.string(e.node, &e.at)),
    Field::new("roles_claim", |d, e, j| {
        j.roles_claim = d.string(e.node, &e.at);
    }),
    Field::new("tenant_claim", |d, e, j| {
        j.tenant_claim = d.string(e.node, &e.at);
    }),
    Field::new("service_claim", service_claim),
    Field::new("run_claim", |d, e, j| j.run_claim = d.string(e.node, &e.at)),
];

/// `auth.jwt.service_claim: {name, value}`.
pub(super) const SERVICE_CLAIM: &[Field<(Option<String>, Option<String>)>] = &[
    Field::new("name", |d, e, c| c.0 = d.string(e.node, &e.at)),
    Field::new("value", |d, e, c| c.1 = d.string(e.node, &e.at)),
];

fn service_claim(d: &mut Decoder, e: &Item<'_>, j: &mut JwtDraft) {
    let mut claim = (None, None);
    if d.fields(e.node, &e.at, SERVICE_CLAIM, &mut claim).is_none() {
        // `fields` said only that this is not a mapping: keep that to report it alone.
        j.refused = d.diags.pop();
        return;
    }
    match claim {
        (Some(n), Some(v)) => j.service_claim = Some((n, v)),
        _ => d.err(
            codes::CONFIG_MISSING_KEY,
            "`service_claim` needs `name` and `value`".to_owned(),
            &e.at,
            e.node.span,
        ),
    }
}

/// `audit:` being decoded.
#[derive(Default)]
pub(super) struct AuditDraft {
    /// 0 store, 1 stderr, 2 file, 3 off.
    sink: u8,
    path: Option<String>,
}

/// `audit:`.
pub(super) const AUDIT: &[Field<AuditDraft>] = &[
    Field::new("sink", |d, e, a| {
        let sinks = [("store", 0u8), ("stderr", 1), ("file", 2), ("off", 3)];
        a.sink = d.choice(e.node, &e.at, &sinks).unwrap_or(0);
    }),
    Field::new("path", |d, e, a| a.path = d.string(e.node, &e.at)),
];

/// `autonomy:` as a mapping.
pub(super) const AUTONOMY: &[Field<AutonomyConfig>] = &[
    Field::new("level", |d, e, a| a.level = d.level(e.node, &e.at)),
    Field::new("pins", pins),
];

/// A pin being decoded: its level and principal are read once both are known to be there.
#[derive(Default)]
pub(super) struct PinDraft {
    principal: Stash,
    level: Stash,
}

/// One of `autonomy.pins`.
pub(super) const PIN: &[Field<PinDraft>] = &[
    Field::new("principal", |_, e, p| p.principal = stash(e)),
    Field::new("level", |_, e, p| p.level = stash(e)),
];

/// `autonomy.pins: [{principal, level}]`.
fn pins(d: &mut Decoder, e: &Item<'_>, a: &mut AutonomyConfig) {
    let Value::Seq(items) = &e.node.value else {
        d.wrong_type(e.node, &e.at, "a list of `{principal, level}`");
        return;
    };
    for (i, item) in items.iter().enumerate() {
        let at = format!("{}[{i}]", e.at);
        let mut p = PinDraft::default();
        if d.fields(item, &at, PIN, &mut p).is_none() {
            continue;
        }
        let (Some((pn, p_at)), Some((ln, l_at))) = (p.principal, p.level) else {
            d.err_fix(
                codes::CONFIG_MISSING_KEY,
                "a pin needs `principal` and `level`".to_owned(),
                &at,
                item.span,
                "write `{principal: \"kind:service\", level: L2}`".to_owned(),
            );
            continue;
        };
        let level = d.level(&ln, &l_at);
        let Some(who) = d.string(&pn, &p_at) else {
            continue;
        };
        let principal = match PrincipalSelector::parse(&who) {
            Ok(PrincipalSelector::AnyAuthenticated) => {
                d.err_fix(
                    codes::CONFIG_INVALID_PRINCIPAL,
                    "a pin for every caller (`*`) is a process-wide level".to_owned(),
                    &p_at,
                    pn.span,
                    "write it as `autonomy.level`".to_owned(),
                );
                continue;
            }
            Ok(p) => p,
            Err(err) => {
                d.err_fix(err.code(), err.to_string(), &p_at, pn.span, err.fix());
                continue;
            }
        };
        if let Some(level) = level {
            a.pins.push(AutonomyPin {
                principal,
                level,
                span: item.span,
            });
        }
    }
}

/// `roles:`.
pub(super) const ROLES: &[Field<RolesConfig>] = &[Field::new("overrides", |d, e, r| {
    let Some(entries) = d.map_any(e.node, &e.at) else {
        return;
    };
    let roles = Role::ALL.map(|r| (r.as_str(), r));
    for (k, v) in entries {
        if let Some(role) = d.choice(v, &format!("{}.{}", e.at, k.name), &roles) {
            r.overrides
                .push((Spanned::new(k.name.clone(), k.span), role));
        }
    }
})];

impl Decoder {
    /// `auth:`.
    pub(super) fn auth(&mut self, node: &Node, at: &str) -> AuthConfig {
        let mut a = AuthConfig::default();
        self.fields(node, at, AUTH, &mut a);
        a
    }

    fn jwt(&mut self, node: &Node, at: &str) -> Option<JwtSpec> {
        let mut j = JwtDraft::default();
        let mark = self.fields(node, at, JWT, &mut j)?;
        if let Some(refused) = j.refused {
            self.diags.truncate(mark);
            self.diags.push(refused);
            return None;
        }
        let spec = JwtSpec {
            hs256_secret_env: j.hs256_secret_env,
            rs256_public_key_file: j.rs256_public_key_file,
            issuer: j.issuer,
            audience: j.audience,
            roles_claim: j.roles_claim.unwrap_or_else(|| "roles".to_owned()),
            tenant_claim: j.tenant_claim.unwrap_or_else(|| "tenant".to_owned()),
            run_claim: j.run_claim.unwrap_or_else(|| "run".to_owned()),
            service_claim: j.service_claim,
            span: node.span,
        };
        if spec.hs256_secret_env.is_some() == spec.rs256_public_key_file.is_some() {
            self.err_fix(
                codes::CONFIG_INVALID_VALUE,
                "`auth.jwt` needs exactly one of `hs256_secret_env` and `rs256_public_key_file`"
                    .to_owned(),
                at,
                node.span,
                "name the HS256 secret's variable, or the RS256 public key file".to_owned(),
            );
            return None;
        }
        Some(spec)
    }

    /// `audit:`.
    pub(super) fn audit(&mut self, node: &Node, at: &str) -> AuditConfig {
        let mut a = AuditDraft::default();
        if self.fields(node, at, AUDIT, &mut a).is_none() {
            return AuditConfig::default();
        }
        let sink = match (a.sink, a.path) {
            (1, _) => AuditSink::Stderr,
            (2, Some(p)) => AuditSink::File(p),
            (2, None) => {
                self.err(
                    codes::CONFIG_MISSING_KEY,
                    "`sink: file` needs `path`".to_owned(),
                    at,
                    node.span,
                );
                AuditSink::Store
            }
            (3, _) => AuditSink::Off,
            _ => AuditSink::Store,
        };
        AuditConfig { sink }
    }

    fn level(&mut self, node: &Node, at: &str) -> Option<AutonomyLevel> {
        let levels = AutonomyLevel::ALL.map(|l| (l.as_str(), l));
        self.choice(node, at, &levels)
    }

    /// `autonomy: L2` or `autonomy: {level: L3, pins: [{principal: "kind:service", level: L4}]}`.
    pub(super) fn autonomy(&mut self, node: &Node, at: &str) -> Option<AutonomyConfig> {
        let mut a = AutonomyConfig {
            span: node.span,
            ..AutonomyConfig::default()
        };
        if let Value::Str(_) = node.value {
            a.level = Some(self.level(node, at)?);
            return Some(a);
        }
        self.fields(node, at, AUTONOMY, &mut a)?;
        Some(a)
    }

    /// `roles: {overrides: {op_id: viewer|operator|admin}}`; present (even empty) turns RBAC by
    /// tier on.
    pub(super) fn roles(&mut self, node: &Node, at: &str) -> Option<RolesConfig> {
        let mut r = RolesConfig {
            span: node.span,
            ..RolesConfig::default()
        };
        if matches!(node.value, Value::Null) {
            return Some(r);
        }
        self.fields(node, at, ROLES, &mut r)?;
        Some(r)
    }
}
