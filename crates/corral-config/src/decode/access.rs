//! Who may call and at what autonomy: tokens, JWTs, the audit sink, autonomy pins and roles;
//! the web console's sign-in limit and trusted proxies.

use corral_policy::codes;
use corral_policy::units::Rate;
use corral_policy::{AutonomyLevel, PrincipalKind, PrincipalSelector, Role};

use super::{Decoder, Field, Item, Stash, stash};
use crate::diag::Diagnostic;
use crate::model::{
    AuditConfig, AuditSink, AuthConfig, AutonomyConfig, AutonomyPin, Cidr, ConsoleConfig, JwtSpec,
    RolesConfig, SignInRate, Spanned, TokenConfig,
};
use crate::yaml::{Node, Value};

/// `auth:`.
pub(super) const AUTH: &[Field<AuthConfig>] = &[
    Field::key("tokens")
        .doc(
            "list of tokens",
            "none",
            "[{id: ci, token_env: CI_TOKEN}]",
            "Static bearer tokens; see `auth.tokens[]`.",
        )
        .optional(tokens),
    Field::key("jwt")
        .doc(
            "mapping",
            "none",
            "{hs256_secret_env: JWT_SECRET}",
            "JWT bearer tokens; see `auth.jwt`.",
        )
        .optional(|d, e, a| a.jwt = d.jwt(e.node, &e.at)),
];

/// `console:`.
pub(super) const CONSOLE: &[Field<ConsoleConfig>] = &[
    Field::key("sign_in_rate")
        .doc(
            "rate, or `off`",
            "`10/min`",
            "30/min",
            "Web console sign-in attempts allowed from one client address (an IPv6 client by its \
             /64) and for one presented identity, right or wrong; past it `429 \
             ui.sign_in_rate_limited`. `off`: no limit (the lint warns).",
        )
        .startup()
        .optional(|d, e, c| {
            c.sign_in_rate = match &e.node.value {
                Value::Str(s) if s == "off" => Some(SignInRate::Off),
                _ => d
                    .unit(e.node, &e.at, Rate::parse, "10/min")
                    .map(SignInRate::Limit),
            };
        }),
    Field::key("trusted_proxies")
        .doc(
            "list of networks (`10.0.0.0/8`, `fd00::/8`, or one address)",
            "none: `X-Forwarded-For` is never read",
            "[10.0.0.0/8]",
            "Reverse proxies in front of corral: when a sign-in's connection comes from one of \
             these networks, the limit counts the client its `X-Forwarded-For` names (the \
             rightmost address outside these networks) instead of the proxy. A network that \
             does not parse does not load.",
        )
        .startup()
        .optional(trusted_proxies),
];

fn trusted_proxies(d: &mut Decoder, e: &Item<'_>, c: &mut ConsoleConfig) {
    for (i, net) in d.strings(e.node, &e.at).into_iter().enumerate() {
        match Cidr::parse(net.value.trim()) {
            Ok(cidr) => c.trusted_proxies.push(cidr),
            Err(why) => d.err_fix(
                codes::CONFIG_INVALID_VALUE,
                format!("`{}[{i}]` is not a network: {why}", e.at),
                &format!("{}[{i}]", e.at),
                net.span,
                "write a network as `address/prefix` (`10.0.0.0/8`, `fd00::/8`) or one address \
                 (`10.1.2.3`)"
                    .to_owned(),
            ),
        }
    }
}

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
    Field::key("id").doc(
        "string",
        "required",
        "ci",
        "The principal id (not `anonymous`).",
    ).optional(|d, e, t| {
        t.id = d.spanned_string(e.node, &e.at).map(|id| (id, e.at.clone()));
    }),
    Field::key("roles").doc(
        "list of strings",
        "none",
        "[operator, grader]",
        "Its roles: tier roles (`viewer`, `operator`, `admin`) and roles rules name.",
    ).optional(|d, e, t| t.roles = d.plain_strings(e.node, &e.at)),
    Field::key("kind").doc(
        "`human`, `delegated` or `service`",
        "`human`",
        "service",
        "The principal's kind (for `kind:` selectors and pins).",
    ).optional(|d, e, t| {
        let kinds = PrincipalKind::ALL.map(|k| (k.as_str(), k));
        t.kind = d
            .choice(e.node, &e.at, &kinds)
            .unwrap_or(PrincipalKind::Human);
    }),
    Field::key("token_env").doc(
        "environment variable name",
        "required",
        "CORRAL_CI_TOKEN",
        "The variable holding the secret (16 characters at least).",
    ).optional(|d, e, t| {
        t.token_env = d.spanned_string(e.node, &e.at);
    }),
    Field::key("token").doc(
        "refused",
        "none",
        "(refused)",
        "Refused (`config.inline_secret`): the secret is never written in the config; name \
         its variable with `token_env`.",
    ).optional(|d, e, _| {
        d.err_fix(
            codes::CONFIG_INLINE_SECRET,
            "the token secret is written in the config".to_owned(),
            &e.at,
            e.node.span,
            "remove `token:`; put the secret in an environment variable and name it with `token_env:`".to_owned(),
        );
    }),
    Field::key("run").doc(
        "run id (1-128 of letters, digits, `_ - . :`)",
        "none",
        "nightly-42",
        "A run-scoped token: every call it makes belongs to this run, whose budgets always \
         apply.",
    ).optional(|d, e, t| {
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
    Field::key("record").doc(
        "bool",
        "`false`",
        "true",
        "Record every call the token makes (only with `run`).",
    ).optional(|d, e, t| {
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
    Field::key("hs256_secret_env")
        .doc(
            "environment variable name",
            "exactly one of this and `rs256_public_key_file` is required",
            "CORRAL_JWT_SECRET",
            "The variable holding the HS256 secret (32 characters at least).",
        )
        .optional(|d, e, j| {
            j.hs256_secret_env = d.spanned_string(e.node, &e.at);
        }),
    Field::key("rs256_public_key_file")
        .doc(
            "string (path)",
            "exactly one of this and `hs256_secret_env` is required",
            "keys/jwt.pem",
            "A PEM file with the RS256 public key (relative: the config directory's).",
        )
        .optional(|d, e, j| {
            j.rs256_public_key_file = d.spanned_string(e.node, &e.at);
        }),
    Field::key("issuer")
        .doc(
            "string",
            "none: not checked",
            "https://idp.example",
            "The `iss` a token must have.",
        )
        .optional(|d, e, j| j.issuer = d.string(e.node, &e.at)),
    Field::key("audience")
        .doc(
            "string",
            "none: not checked",
            "corral",
            "The `aud` a token must have.",
        )
        .optional(|d, e, j| j.audience = d.string(e.node, &e.at)),
    Field::key("roles_claim")
        .doc(
            "string",
            "`roles`",
            "groups",
            "The claim holding the roles.",
        )
        .optional(|d, e, j| {
            j.roles_claim = d.string(e.node, &e.at);
        }),
    Field::key("tenant_claim")
        .doc("string", "`tenant`", "org", "The claim holding the tenant.")
        .optional(|d, e, j| {
            j.tenant_claim = d.string(e.node, &e.at);
        }),
    Field::key("service_claim")
        .doc(
            "mapping `{name, value}`",
            "none",
            "{name: typ, value: service}",
            "A claim and value that mark a service principal.",
        )
        .optional(service_claim),
    Field::key("run_claim")
        .doc(
            "string",
            "`run`",
            "corral_run",
            "The claim holding the run a token is scoped to.",
        )
        .optional(|d, e, j| j.run_claim = d.string(e.node, &e.at)),
];

/// `auth.jwt.service_claim: {name, value}`.
pub(super) const SERVICE_CLAIM: &[Field<(Option<String>, Option<String>)>] = &[
    Field::key("name")
        .doc("string", "required", "typ", "The claim's name.")
        .optional(|d, e, c| c.0 = d.string(e.node, &e.at)),
    Field::key("value")
        .doc(
            "string",
            "required",
            "service",
            "The value that marks a service principal.",
        )
        .optional(|d, e, c| c.1 = d.string(e.node, &e.at)),
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
    Field::key("sink")
        .doc(
            "`store`, `stderr`, `file` or `off`",
            "`store`",
            "stderr",
            "The sink added beside the store, which always keeps events: JSON Lines on stderr or \
             in a file; `store` and `off` add none (`off` fails learning mode's audit \
             precondition).",
        )
        .startup()
        .optional(|d, e, a| {
            let sinks = [("store", 0u8), ("stderr", 1), ("file", 2), ("off", 3)];
            a.sink = d.choice(e.node, &e.at, &sinks).unwrap_or(0);
        }),
    Field::key("path")
        .doc(
            "string (path)",
            "required with `sink: file`",
            "/var/log/corral/audit.jsonl",
            "The JSON Lines file (relative: the state directory's parent).",
        )
        .startup()
        .optional(|d, e, a| a.path = d.string(e.node, &e.at)),
];

/// `autonomy:` as a mapping.
pub(super) const AUTONOMY: &[Field<AutonomyConfig>] = &[
    Field::key("level")
        .doc(
            "`L0` to `L4`",
            "none: no process-wide restriction",
            "L3",
            "The process-wide level: L0 `core.*` only, L1 the read tier without `net` or `exec`, \
             L2 the read tier, L3 read and confirm tiers, L4 every tier.",
        )
        .optional(|d, e, a| a.level = d.level(e.node, &e.at)),
    Field::key("pins")
        .doc(
            "list of `{principal, level}`",
            "none",
            "[{principal: 'kind:service', level: L4}]",
            "Per-principal levels; the level in force is the lowest of the process level, the \
             lowest matching pin (a service with none: L2) and the run's.",
        )
        .optional(pins),
];

/// A pin being decoded: its level and principal are read once both are known to be there.
#[derive(Default)]
pub(super) struct PinDraft {
    principal: Stash,
    level: Stash,
}

/// One of `autonomy.pins`.
pub(super) const PIN: &[Field<PinDraft>] = &[
    Field::key("principal")
        .doc(
            "principal selector (`id:`, `role:` or `kind:`; not `*`)",
            "required",
            "kind:service",
            "Who the pin applies to.",
        )
        .optional(|_, e, p| p.principal = stash(e)),
    Field::key("level")
        .doc("`L0` to `L4`", "required", "L2", "Their level.")
        .optional(|_, e, p| p.level = stash(e)),
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
pub(super) const ROLES: &[Field<RolesConfig>] = &[Field::key("overrides")
    .doc(
        "mapping of op id to `viewer`, `operator` or `admin`",
        "none",
        "{files.write: admin}",
        "The role an op needs, instead of its tier's (read: viewer, confirm: operator, \
         destructive: admin).",
    )
    .optional(|d, e, r| {
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
