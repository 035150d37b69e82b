//! The authenticated caller of a request, as an extractor: [`Authed`] authenticates by the
//! request's headers (or answers 401 and audits the refusal), gives the request its id, and
//! reads the guardrail headers of an op call (`X-Corral-Run`, `X-Corral-Autonomy`,
//! `X-Corral-Dry-Run`). Every route but `/healthz` takes one.

use std::marker::PhantomData;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Path};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use corral_guard::{CallOptions, Caller, Gateway, valid_run_id};
use corral_policy::{AutonomyLevel, codes};

use crate::AppState;
use crate::error::ApiError;

/// The run header.
pub const RUN_HEADER: &str = "x-corral-run";
/// The header that lowers the autonomy level (of the run, or of the call).
pub const AUTONOMY_HEADER: &str = "x-corral-autonomy";
/// The header that asks for dry-run (of the run, or of the call).
pub const DRY_RUN_HEADER: &str = "x-corral-dry-run";
/// The header that records the call in its run's recording (`on`; operator or admin only).
pub const RECORD_HEADER: &str = "x-corral-record";

/// The code of a malformed guardrail header.
pub const INVALID_HEADER: &str = codes::RUN_INVALID_HEADER;

/// What a route's requests are audited as when they fail authentication, and whether a lab
/// program may reach it through its link.
pub(crate) trait Route {
    /// Whether the route serves a lab program's link (`GET /ops`, `POST /ops/{id}`, `/mcp`);
    /// every other route refuses a linked request, whatever router it is mounted on.
    const LINKED: bool = false;

    /// Whether the route serves an agent session turn's link (the LLM proxy only); every
    /// other route refuses a request through such a link.
    const AGENT_LINKED: bool = false;

    /// The audit event's `op` for an unauthenticated request to the route.
    fn audited_as(parts: &mut Parts) -> impl Future<Output = String> + Send;
}

/// Routes audited under a fixed name.
macro_rules! routes {
    ($($(#[$doc:meta])* $name:ident => $what:literal $(, linked = $linked:literal)? $(, agent_linked = $agent:literal)?;)*) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        pub(crate) struct $name;
        impl Route for $name {
            $(const LINKED: bool = $linked;)?
            $(const AGENT_LINKED: bool = $agent;)?
            async fn audited_as(_: &mut Parts) -> String {
                $what.to_owned()
            }
        }
    )*};
}

routes! {
    /// `GET /ops`.
    ListOps => "GET /ops", linked = true;
    /// `GET /capabilities`.
    Capabilities => "GET /capabilities";
    /// `GET /audit`.
    Audit => "GET /audit";
    /// `GET /confirmations`.
    ListConfirmations => "GET /confirmations";
    /// `POST /confirmations/{action_id}/decision`.
    Decision => "POST /confirmations";
    /// `GET /me`.
    Me => "GET /me";
    /// `POST /learning/hint` (learning mode only).
    LearningHint => "POST /learning/hint";
    /// `GET /metrics`.
    Metrics => "GET /metrics";
    /// `GET /openapi.json`.
    OpenApi => "GET /openapi.json";
    /// `/mcp`.
    Mcp => "/mcp", linked = true;
    /// `/v1/sandbox/*` (the lab).
    Sandbox => "/v1/sandbox";
    /// `/v1/agents/*` (the agents host).
    Agents => "/v1/agents";
    /// `/v1/chat/completions`, `/v1/models` (the LLM proxy), audited as its op.
    Llm => "llm.chat", agent_linked = true;
    /// A path no route has.
    UnknownRoute => "unknown route", linked = true, agent_linked = true;
    /// A route's path with a method it does not take.
    WrongMethod => "wrong method", linked = true, agent_linked = true;
}

/// `POST /ops/{id}`: audited as the op id it names.
#[derive(Debug)]
pub(crate) struct OpCall;

impl Route for OpCall {
    const LINKED: bool = true;

    async fn audited_as(parts: &mut Parts) -> String {
        Path::<String>::from_request_parts(parts, &())
            .await
            .map(|Path(id)| id)
            .unwrap_or_default()
    }
}

/// An authenticated request to the route `R`.
#[derive(Debug)]
pub(crate) struct Authed<R> {
    /// Who called.
    pub caller: Caller,
    /// The request's id (a UUIDv7), for its audit events and its answer.
    pub request_id: String,
    /// The guardrail headers, or what is wrong with one of them (the route decides when that
    /// refuses the request, so a body error found first is answered first).
    pub options: Result<CallOptions, String>,
    /// The gateway the request's calls go through: the deployment's, or for a lab program's
    /// request through its link, the run's world.
    pub gateway: Arc<Gateway>,
    route: PhantomData<fn() -> R>,
}

impl<R: Route> Authed<R> {
    /// Authenticates the request `parts` belong to, under the id `request_id`; on failure
    /// audits it (as `R`'s requests) and answers 401.
    pub(crate) async fn authenticate(
        parts: &mut Parts,
        state: &AppState,
        request_id: String,
    ) -> Result<Self, ApiError> {
        if let Some(link) = parts.extensions.get::<Linked>().cloned() {
            return Self::authenticate_linked(parts, link, request_id).await;
        }
        match crate::auth::authenticate(&state.authenticator(), &parts.headers) {
            Ok(caller) => Ok(Self {
                caller,
                options: call_options(&parts.headers),
                request_id,
                gateway: Arc::clone(state.gateway()),
                route: PhantomData,
            }),
            Err(e) => {
                let what = R::audited_as(parts).await;
                state
                    .gateway()
                    .audit_unauthenticated(&what, &request_id, e.code, 401)
                    .await;
                Err(ApiError::new(e.code, e.message, None, &request_id))
            }
        }
    }
}

impl<R: Route> Authed<R> {
    /// A lab program's request through its link: authenticated only by the step's token (no
    /// configured token, JWT or open mode counts here), made as the run's caller through the
    /// run's world, and only on a route that serves links.
    async fn authenticate_linked(
        parts: &mut Parts,
        link: Linked,
        request_id: String,
    ) -> Result<Self, ApiError> {
        let n = link
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .saturating_add(1);
        if n > MAX_LINK_REQUESTS {
            // Audited once, when the cap is reached; the requests after it write nothing.
            if n == MAX_LINK_REQUESTS + 1 {
                let what = R::audited_as(parts).await;
                link.gateway
                    .audit_rejected(&link.caller, &what, &request_id, codes::LIMIT_RATE, 429)
                    .await;
            }
            return Err(ApiError::new(
                codes::LIMIT_RATE,
                format!(
                    "this step's program made more than {MAX_LINK_REQUESTS} requests to corral; a step may make at most {MAX_LINK_REQUESTS} (each one is audited): make fewer calls per step"
                ),
                None,
                &request_id,
            ));
        }
        let agent = link.kind == LinkKind::AgentTurn;
        let presented = if agent {
            agent_credential(&parts.headers)
        } else {
            crate::auth::credential(&parts.headers)
        };
        let refused = match presented {
            Ok(Some(t)) if link.token.accepts(&t) => None,
            Ok(Some(_)) if agent => Some((
                codes::AUTH_INVALID,
                "this is not the turn's token; use the API key corral gave the agent's CLI"
                    .to_owned(),
            )),
            Ok(Some(_)) => Some((
                codes::AUTH_INVALID,
                "this is not the run's token; use `$CORRAL_TOKEN` as given to the program"
                    .to_owned(),
            )),
            Ok(None) if agent => Some((
                codes::AUTH_MISSING,
                "send the turn's token as `Authorization: Bearer <key>` or `x-api-key: <key>`"
                    .to_owned(),
            )),
            Ok(None) => Some((
                codes::AUTH_MISSING,
                "send the run's token: `Authorization: Bearer $CORRAL_TOKEN`".to_owned(),
            )),
            Err(e) => Some((e.code, e.message)),
        };
        if let Some((code, message)) = refused {
            let what = R::audited_as(parts).await;
            link.gateway
                .audit_unauthenticated(&what, &request_id, code, 401)
                .await;
            return Err(ApiError::new(code, message, None, &request_id));
        }
        if agent && !R::AGENT_LINKED {
            return Err(ApiError::new(
                codes::ROUTE_NOT_FOUND,
                "an agent's CLI reaches only corral's LLM proxy: `POST /v1/responses`, `POST /v1/chat/completions`, `POST /v1/messages` and `GET /v1/models`",
                None,
                &request_id,
            ));
        }
        if !agent && !R::LINKED {
            return Err(ApiError::new(
                codes::ROUTE_NOT_FOUND,
                "a lab program reaches only `GET /ops`, `POST /ops/{id}` and `/mcp`",
                None,
                &request_id,
            ));
        }
        Ok(Self {
            caller: link.caller,
            options: call_options(&parts.headers),
            request_id,
            gateway: link.gateway,
            route: PhantomData,
        })
    }
}

/// The link of one lab program's step, put in each of its requests' extensions by the link's
/// router (never by the deployment's): who its calls are, through which gateway, and the
/// one token that authenticates them.
#[derive(Debug, Clone)]
pub(crate) struct Linked {
    pub gateway: Arc<Gateway>,
    pub caller: Caller,
    pub token: corral_lab::program::TokenDigest,
    /// The requests the step's program made so far (every one, answered or refused).
    pub requests: Arc<std::sync::atomic::AtomicU32>,
    /// Whose link it is: a lab program's (corral's ops) or an agent turn's (the LLM proxy).
    pub kind: LinkKind,
    /// An agent turn's session model: the only model its requests may ask for (`None`: a lab
    /// program's link, or a link made without one).
    pub model: Option<Arc<str>>,
}

/// Who a link serves, and so which routes it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkKind {
    /// A lab step's program: `GET /ops`, `POST /ops/{id}`, `/mcp` ([`Route::LINKED`]).
    Program,
    /// One turn of an agent session: the LLM proxy only ([`Route::AGENT_LINKED`]).
    AgentTurn,
}

/// The key an agent's CLI sends: `x-api-key` (Anthropic's SDKs) or `Authorization: Bearer`
/// (OpenAI's); both sent must agree.
fn agent_credential(
    headers: &HeaderMap,
) -> Result<Option<String>, corral_runtime::auth::AuthError> {
    let bearer = crate::auth::credential(headers)?;
    let key = match headers.get("x-api-key") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| corral_runtime::auth::AuthError {
                    code: codes::AUTH_INVALID,
                    message: "the x-api-key header is not text".to_owned(),
                })?
                .trim()
                .to_owned(),
        ),
    };
    match (bearer, key) {
        (Some(a), Some(b)) if a != b => Err(corral_runtime::auth::AuthError {
            code: codes::AUTH_CONFLICTING_CREDENTIALS,
            message: "Authorization and x-api-key carry different keys; send one".to_owned(),
        }),
        (Some(a), _) => Ok(Some(a)),
        (None, k) => Ok(k.filter(|k| !k.is_empty())),
    }
}

/// The most requests one step's program may make through its link: each is audited, so a
/// program looping on its link must not write without bound into the audit.
pub(crate) const MAX_LINK_REQUESTS: u32 = 1_000;

impl<R: Route> FromRequestParts<AppState> for Authed<R> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Self::authenticate(parts, state, super::request_id()).await
    }
}

/// Reads the guardrail headers of an op call; the message says which one is malformed.
pub fn call_options(headers: &HeaderMap) -> Result<CallOptions, String> {
    let text = |name: &str| -> Result<Option<&str>, String> {
        match headers.get(name) {
            None => Ok(None),
            Some(v) => v
                .to_str()
                .map(|s| Some(s.trim()))
                .map_err(|_| format!("`{name}` is not text")),
        }
    };
    let run_id = match text(RUN_HEADER)? {
        None => None,
        Some(id) if valid_run_id(id) => Some(id.to_owned()),
        Some(_) => {
            return Err(format!(
                "`{RUN_HEADER}` must be 1-128 characters of letters, digits, `_`, `-`, `.` and `:`"
            ));
        }
    };
    let autonomy = match text(AUTONOMY_HEADER)? {
        None => None,
        Some(l) => Some(
            AutonomyLevel::parse(l)
                .ok_or_else(|| format!("`{AUTONOMY_HEADER}` must be one of L0, L1, L2, L3, L4"))?,
        ),
    };
    let dry_run = match text(DRY_RUN_HEADER)? {
        None => false,
        Some("true" | "1") => true,
        Some("false" | "0") => false,
        Some(_) => return Err(format!("`{DRY_RUN_HEADER}` must be `true` or `false`")),
    };
    let record = match text(RECORD_HEADER)? {
        None | Some("off") => false,
        Some("on") => true,
        Some(_) => return Err(format!("`{RECORD_HEADER}` must be `on` or `off`")),
    };
    Ok(CallOptions {
        run_id,
        autonomy,
        dry_run,
        record,
    })
}
