//! Who a presented token is: static tokens (compared in constant time, by SHA-256) and JWT
//! bearer tokens (HS256 or RS256). Where a token is read from (HTTP headers, an environment
//! variable) is the caller's business: corral-server reads `Authorization`/`X-Access-Token`,
//! `corral mcp` a variable.

use corral_guard::Caller;
use corral_policy::{Principal, PrincipalKind, PrincipalOrigin, codes};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// JWT verification settings.
#[derive(Clone)]
pub struct JwtConfig {
    /// The key and algorithm.
    pub key: DecodingKey,
    /// HS256 or RS256.
    pub algorithm: Algorithm,
    /// Required `iss`, if set.
    pub issuer: Option<String>,
    /// Required `aud`, if set.
    pub audience: Option<String>,
    /// The claim holding roles (a list of strings).
    pub roles_claim: String,
    /// The claim holding the tenant.
    pub tenant_claim: String,
    /// A claim and value that make the principal a `service`.
    pub service_claim: Option<(String, String)>,
    /// The claim holding the run the token is scoped to.
    pub run_claim: String,
    /// SHA-256 of the verification key's material (the HS256 secret, or the RS256 public key's
    /// PEM): a console session opened with a JWT ends when the key changes (a rotated key is
    /// one that may have leaked), as a static token's does when its secret changes.
    pub key_digest: [u8; 32],
}

impl std::fmt::Debug for JwtConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtConfig")
            .field("algorithm", &self.algorithm)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

/// Who may call.
#[derive(Debug)]
pub struct Authenticator {
    /// SHA-256 of each static token's secret, and who it authenticates (its principal, and its
    /// run if it is run-scoped).
    tokens: Vec<([u8; 32], Caller)>,
    jwt: Option<JwtConfig>,
    open: bool,
}

/// A failed authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthError {
    /// `auth.missing`, `auth.invalid` or `auth.conflicting_credentials`.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

impl Authenticator {
    /// Static tokens and optional JWT. With neither, corral is in open mode.
    pub fn new(tokens: Vec<(String, Caller)>, jwt: Option<JwtConfig>) -> Self {
        let open = tokens.is_empty() && jwt.is_none();
        Self {
            tokens: tokens.into_iter().map(|(s, p)| (digest(&s), p)).collect(),
            jwt,
            open,
        }
    }

    /// Whether no credentials are configured.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Authenticates a presented token (`None`: none presented; the anonymous caller in open
    /// mode, else `auth.missing`).
    pub fn authenticate_token(&self, token: Option<&str>) -> Result<Caller, AuthError> {
        let Some(token) = token else {
            if self.open {
                return Ok(Caller::new(Principal::anonymous()));
            }
            return Err(AuthError {
                code: codes::AUTH_MISSING,
                message: "this server needs a token: send `Authorization: Bearer <token>`"
                    .to_owned(),
            });
        };
        let presented = digest(token);
        // Compare against every token, always, so timing does not tell which one is close.
        let mut found: Option<&Caller> = None;
        for (d, c) in &self.tokens {
            if bool::from(d.ct_eq(&presented)) {
                found = Some(c);
            }
        }
        if let Some(c) = found {
            return Ok(c.clone());
        }
        if let Some(jwt) = &self.jwt
            && token.matches('.').count() == 2
        {
            return verify_jwt(jwt, token).map(|(c, _)| c);
        }
        Err(AuthError {
            code: codes::AUTH_INVALID,
            message: "the token is not valid".to_owned(),
        })
    }
}

/// What a console session keeps of the token it was opened with: never the token, only
/// enough to authenticate the session's principal again on each request (corral-server's
/// `ui` module).
#[derive(Debug, Clone)]
pub enum SessionProof {
    /// A static token's: SHA-256 over `key` (the session's own secret id, which only the
    /// cookie holds) and the token's digest. The store cannot tell the token from it, and it
    /// finds its token again only while the config still has it.
    StaticToken([u8; 32]),
    /// A JWT's: the caller it authenticated, its `exp` (seconds since the epoch), and the
    /// verification key bound to the session (SHA-256 over `key` and the key's digest, as for
    /// a static token). Valid while JWT is configured with the same issuer and the same key,
    /// and the `exp` has not passed.
    Jwt {
        /// The caller, as verified at sign-in.
        caller: Caller,
        /// The token's `exp`.
        exp: u64,
        /// The verification key, bound to the session.
        key: [u8; 32],
    },
}

fn bind(key: &[u8], digest: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"corral-ui-session-proof\0");
    h.update(key);
    h.update(digest);
    h.finalize().into()
}

impl Authenticator {
    /// Authenticates `token` for a console session keyed by `key`: the caller and the proof
    /// to keep (see [`SessionProof`]). Open mode has no token to sign in with: `auth.missing`.
    pub fn authenticate_session(
        &self,
        token: &str,
        key: &[u8],
    ) -> Result<(Caller, SessionProof), AuthError> {
        let presented = digest(token);
        let mut found: Option<&Caller> = None;
        for (d, c) in &self.tokens {
            if bool::from(d.ct_eq(&presented)) {
                found = Some(c);
            }
        }
        if let Some(c) = found {
            return Ok((c.clone(), SessionProof::StaticToken(bind(key, &presented))));
        }
        if let Some(jwt) = &self.jwt
            && token.matches('.').count() == 2
        {
            let (caller, exp) = verify_jwt(jwt, token)?;
            return Ok((
                caller.clone(),
                SessionProof::Jwt {
                    caller,
                    exp: exp.unwrap_or(0),
                    key: bind(key, &jwt.key_digest),
                },
            ));
        }
        if self.open {
            return Err(AuthError {
                code: codes::AUTH_MISSING,
                message: "this server has no tokens (open mode), so there is nobody to sign in as; configure `auth.tokens` or `auth.jwt`".to_owned(),
            });
        }
        Err(AuthError {
            code: codes::AUTH_INVALID,
            message: "the token is not valid".to_owned(),
        })
    }

    /// The caller a session's proof stands for now (`now_secs`: seconds since the epoch), or
    /// `None` when its token no longer authenticates: a static token removed from the config
    /// (or its secret changed), JWT no longer configured or with another issuer or key, or the
    /// JWT's `exp` passed. A static token's caller is the config's current one (its roles now).
    pub fn session_caller(
        &self,
        proof: &SessionProof,
        key: &[u8],
        now_secs: u64,
    ) -> Option<Caller> {
        match proof {
            SessionProof::StaticToken(kept) => {
                let mut found: Option<&Caller> = None;
                for (d, c) in &self.tokens {
                    if bool::from(bind(key, d).ct_eq(kept)) {
                        found = Some(c);
                    }
                }
                found.cloned()
            }
            SessionProof::Jwt {
                caller,
                exp,
                key: kept,
            } => {
                let jwt = self.jwt.as_ref()?;
                if !bool::from(bind(key, &jwt.key_digest).ct_eq(kept)) {
                    return None;
                }
                let issuer = match &caller.principal.origin {
                    PrincipalOrigin::Jwt { issuer } => issuer,
                    PrincipalOrigin::StaticToken
                    | PrincipalOrigin::Local
                    | PrincipalOrigin::Anonymous => return None,
                };
                let same_issuer = jwt.issuer.as_ref().is_none_or(|want| want == issuer);
                (same_issuer && now_secs < *exp).then(|| caller.clone())
            }
        }
    }
}

fn claim_strings(v: Option<&serde_json::Value>) -> Vec<String> {
    match v {
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect(),
        Some(serde_json::Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

/// The chain of actors in an RFC 8693 `act` claim, outermost first: each actor's `sub`, else
/// its `client_id`, else the claim itself when it is a string, else `?`. Every actor counts,
/// named or not: a token with an `act` claim is a delegate's, never the person's own (an
/// actor named by another claim than `sub` must not pass for no actor).
fn act_chain(mut act: Option<&serde_json::Value>) -> Vec<String> {
    let mut chain = Vec::new();
    while let Some(a) = act.filter(|a| !a.is_null()) {
        let name = ["sub", "client_id"]
            .iter()
            .find_map(|k| a.get(k).and_then(|s| s.as_str()))
            .or_else(|| a.as_str())
            .unwrap_or("?");
        chain.push(name.to_owned());
        act = a.get("act");
        if chain.len() > 16 {
            break;
        }
    }
    chain
}

/// A verified JWT's caller and its `exp` claim (seconds since the epoch).
fn verify_jwt(cfg: &JwtConfig, token: &str) -> Result<(Caller, Option<u64>), AuthError> {
    let mut v = Validation::new(cfg.algorithm);
    v.validate_exp = true;
    // A token is not valid before its `nbf` (RFC 7519 4.1.5): one minted ahead of its window,
    // or taken before it opens, must not work early (jsonwebtoken checks it only when asked).
    v.validate_nbf = true;
    v.leeway = 30;
    if let Some(iss) = &cfg.issuer {
        v.set_issuer(&[iss]);
    }
    match &cfg.audience {
        Some(aud) => v.set_audience(&[aud]),
        None => v.validate_aud = false,
    }
    v.set_required_spec_claims(&["exp", "sub"]);
    let data =
        jsonwebtoken::decode::<serde_json::Value>(token, &cfg.key, &v).map_err(|e| AuthError {
            code: codes::AUTH_INVALID,
            message: format!("the token is not valid: {e}"),
        })?;
    let claims = data.claims;
    let sub = claims
        .get("sub")
        .and_then(|s| s.as_str())
        .filter(|s| !s.is_empty() && *s != "anonymous")
        .ok_or_else(|| AuthError {
            code: codes::AUTH_INVALID,
            message: "the token has no usable `sub`".to_owned(),
        })?;
    let chain = act_chain(claims.get("act"));
    let service = cfg
        .service_claim
        .as_ref()
        .is_some_and(|(k, val)| claims.get(k).and_then(|x| x.as_str()) == Some(val.as_str()));
    let kind = if !chain.is_empty() {
        PrincipalKind::Delegated
    } else if service {
        PrincipalKind::Service
    } else {
        PrincipalKind::Human
    };
    // The issuer is part of the identity: a JWT `sub: agent` is not the static token `agent`,
    // nor the `agent` of another issuer.
    let issuer = claims
        .get("iss")
        .and_then(|i| i.as_str())
        .unwrap_or_default()
        .to_owned();
    let mut p = Principal::new(sub, &[])
        .with_kind(kind)
        .with_origin(PrincipalOrigin::Jwt { issuer });
    p.roles = claim_strings(claims.get(&cfg.roles_claim));
    // A tenant claim that is there but unusable fails the token: read as "no tenant" it would
    // put the caller in the default tenant, with its data.
    p.tenant = match claims.get(&cfg.tenant_claim) {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(t)) if !t.is_empty() => Some(t.clone()),
        Some(_) => {
            return Err(AuthError {
                code: codes::AUTH_INVALID,
                message: format!(
                    "the token's `{}` claim is not a tenant name (a non-empty string)",
                    cfg.tenant_claim
                ),
            });
        }
    };
    let run = match claims.get(&cfg.run_claim) {
        None => None,
        Some(serde_json::Value::String(r)) if corral_policy::valid_run_id(r) => Some(r.clone()),
        Some(_) => {
            return Err(AuthError {
                code: codes::AUTH_INVALID,
                message: format!(
                    "the token's `{}` claim is not a run id (1-128 characters of letters, digits, `_`, `-`, `.` and `:`)",
                    cfg.run_claim
                ),
            });
        }
    };
    // `exp` is a NumericDate: a whole number or not (the validation above read it already).
    let exp = claims
        .get("exp")
        .and_then(|e| e.as_u64().or_else(|| e.as_f64().map(|f| f.max(0.0) as u64)));
    Ok((
        Caller {
            principal: p,
            act_chain: chain,
            run,
            record: false,
        },
        exp,
    ))
}
