//! Authentication over HTTP: the credential a request presents, checked by the runtime's
//! [`Authenticator`]. `Authorization: Bearer` is preferred, `X-Access-Token` accepted; both with
//! different values is refused. Tokens in URLs are never read.

use axum::http::HeaderMap;
use corral_guard::Caller;
use corral_policy::codes;
use corral_runtime::auth::{AuthError, Authenticator};
use subtle::ConstantTimeEq;

/// The presented credential, if any.
pub(crate) fn credential(headers: &HeaderMap) -> Result<Option<String>, AuthError> {
    let invalid = |m: &str| AuthError {
        code: codes::AUTH_INVALID,
        message: m.to_owned(),
    };
    let bearer = match headers.get("authorization") {
        None => None,
        Some(v) => {
            let v = v
                .to_str()
                .map_err(|_| invalid("the Authorization header is not text"))?;
            let (scheme, token) = v.split_once(' ').unwrap_or((v, ""));
            if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
                return Err(invalid("use `Authorization: Bearer <token>`"));
            }
            Some(token.trim().to_owned())
        }
    };
    let legacy = match headers.get("x-access-token") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| invalid("the X-Access-Token header is not text"))?
                .trim()
                .to_owned(),
        ),
    };
    match (bearer, legacy) {
        (Some(a), Some(b)) if a.as_bytes().ct_eq(b.as_bytes()).unwrap_u8() == 0 => Err(AuthError {
            code: codes::AUTH_CONFLICTING_CREDENTIALS,
            message: "Authorization and X-Access-Token carry different tokens; send one".to_owned(),
        }),
        (Some(a), _) => Ok(Some(a)),
        (None, b) => Ok(b),
    }
}

/// Authenticates a request by its headers.
pub fn authenticate(auth: &Authenticator, headers: &HeaderMap) -> Result<Caller, AuthError> {
    let token = credential(headers)?;
    auth.authenticate_token(token.as_deref())
}
