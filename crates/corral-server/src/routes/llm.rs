//! The LLM proxy: OpenAI-compatible `POST /v1/chat/completions` and `POST /v1/responses`
//! (streaming and not) and `GET /v1/models`, or with `llm.api: anthropic` the Messages API's
//! `POST /v1/messages`, forwarded to the provider `llm:` names.
//!
//! Each request is the op `llm.chat` to the guard chain (`Gateway::call_proxied`): resolve,
//! arguments (`{model}`), autonomy, RBAC, policy, limits and run budgets (`budgets.tokens`)
//! decide it before anything is forwarded, and its audit event is written once the answer
//! ended, value-free (model, token counts, upstream status; never a prompt or a completion).
//! The caller's corral token is never forwarded: the provider gets the key `llm.api_key_env`
//! names, and only the request body (and, to an Anthropic provider, the client's
//! `anthropic-version` and `anthropic-beta` headers).
//!
//! A reply hook (`AppState::install_reply_hook`) sees every reply of the root agent (header
//! `X-Corral-Agent` equal to `llm.root_agent`, or absent) before the client does; a streaming
//! request of the root is then held: read whole, assembled, hooked, and sent as one SSE stream.

mod forward;
mod messages;
mod reply;
mod responses;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use corral_guard::{Call, CallOptions, Caller, Gateway, ProxiedOutcome, Refusal, Reply};
use corral_policy::codes;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

pub use reply::{AssistantReply, MAX_HISTORY_BYTES, ReplyCtx, history_of};

use super::extract::{Authed, Llm};
use crate::AppState;
use crate::error::ApiError;
use forward::{Api, Forward};

/// The op every model request is decided as.
pub const LLM_OP: &str = "llm.chat";

/// The header naming the agent that makes a model request.
pub const AGENT_HEADER: &str = "x-corral-agent";

/// Sees (and may rewrite) each reply of the root agent before the client does. Installed with
/// `AppState::install_reply_hook`; without one, replies pass untouched and streams stream.
pub trait ReplyHook: Send + Sync + std::fmt::Debug {
    /// Called once per assistant message (per choice) of a root agent's reply: rewrite
    /// `reply.text` in place. Its tool calls are shown, and always forwarded as the model made
    /// them.
    fn on_root_reply(&self, ctx: &ReplyCtx, reply: &mut AssistantReply);

    /// Called once per completion with every choice of it, in order, and what the learner saw
    /// before it (`history`: the request's earlier assistant messages, oldest first, from
    /// `reply::history_of`): rewrite each `reply.text` in place. The default hooks each choice
    /// alone; the answer guard reads each in the context of the history and the choices before.
    fn on_root_replies(&self, ctx: &ReplyCtx, history: &[String], replies: &mut [AssistantReply]) {
        let _ = history;
        for r in replies {
            self.on_root_reply(ctx, r);
        }
    }
}

/// The provider, as `llm:` resolved at start-up.
pub struct Upstream {
    base_url: String,
    api_key: Option<corral_config::Secret>,
    root_agent: String,
    api: corral_config::model::LlmApi,
    client: reqwest::Client,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("root_agent", &self.root_agent)
            .finish_non_exhaustive()
    }
}

/// The `anthropic-version` sent to an Anthropic provider when the client sent none.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The client's headers passed on to an Anthropic provider (when printable and short).
/// Claude Code's `anthropic-beta` lists about ten betas.
const ANTHROPIC_HEADERS: [&str; 2] = ["anthropic-version", "anthropic-beta"];

/// How long connecting to the provider may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest wait for the next bytes of the provider's answer (a stream may be long; a
/// silence this long is a timeout).
const READ_TIMEOUT: Duration = Duration::from_secs(300);
/// The most bytes of a provider's answer read (a completion, a held stream, a model list).
const MAX_UPSTREAM_BYTES: usize = 32 * 1024 * 1024;
/// The most bytes of one SSE event, and of an error body.
const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;
const MAX_ERROR_BYTES: usize = 64 * 1024;

impl Upstream {
    /// The provider `llm:` names, or `None` without an `llm:` section.
    pub fn from_loaded(loaded: &corral_config::Loaded) -> Option<Self> {
        let l = loaded.llm.as_ref()?;
        let client = reqwest::Client::builder()
            // The url is the operator's; no proxy variable of the environment redirects it.
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .build();
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "the LLM proxy's HTTP client could not be built; its routes answer 503");
                return None;
            }
        };
        Some(Self {
            base_url: l.base_url.clone(),
            api_key: l.api_key.clone(),
            root_agent: l.root_agent.clone(),
            api: l.api,
            client,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.request_with(method, path, &[])
    }

    /// A request to the provider with its key: `Authorization: Bearer` for an OpenAI one;
    /// `x-api-key` and `anthropic-version` (the client's, from `headers`, or
    /// [`ANTHROPIC_VERSION`]) for an Anthropic one. `headers` are the client's passed on.
    fn request_with(
        &self,
        method: reqwest::Method,
        path: &str,
        headers: &[(&'static str, String)],
    ) -> reqwest::RequestBuilder {
        let mut rb = self
            .client
            .request(method, format!("{}{path}", self.base_url));
        for (k, v) in headers {
            rb = rb.header(*k, v);
        }
        match (self.api, &self.api_key) {
            (corral_config::model::LlmApi::OpenAi, Some(k)) => rb.bearer_auth(k.expose()),
            (corral_config::model::LlmApi::Anthropic, key) => {
                if !headers.iter().any(|(k, _)| *k == "anthropic-version") {
                    rb = rb.header("anthropic-version", ANTHROPIC_VERSION);
                }
                match key {
                    Some(k) => rb.header("x-api-key", k.expose()),
                    None => rb,
                }
            }
            (_, None) => rb,
        }
    }

    /// `text` with the provider's key, if it appears, replaced: an error body never carries
    /// the key to a caller.
    fn scrub(&self, text: &str) -> String {
        match &self.api_key {
            Some(k) if !k.expose().is_empty() => text.replace(k.expose(), "[redacted]"),
            _ => text.to_owned(),
        }
    }
}

/// `503 llm.not_configured`.
fn not_configured(rid: &str) -> ApiError {
    ApiError::new(
        codes::LLM_NOT_CONFIGURED,
        "this server has no model provider: add `llm: {base_url_env: OPENAI_BASE_URL, api_key_env: OPENAI_API_KEY}` to the config, export both variables, and restart",
        None,
        rid,
    )
}

/// Where a proxied request's answer goes once it is known: the route sends it after the call's
/// audit event is written, except for a passed-through stream (`streaming`), whose headers go
/// at once and whose event is written when it ends.
type Answered = oneshot::Sender<Answer>;

/// The answer a proxied request produced.
struct Answer {
    resp: Response,
    streaming: bool,
}

impl Answer {
    fn whole(resp: Response) -> Self {
        Self {
            resp,
            streaming: false,
        }
    }
}

/// Decides `args` as `llm.chat` for `caller` and runs `perform` at the chain's execute step on
/// a task of its own (so a stream is audited when it ends, after its answer left); answers
/// what `perform` sent, or the refusal.
async fn proxied<F>(
    gateway: Arc<Gateway>,
    caller: Caller,
    rid: String,
    opts: CallOptions,
    args: Value,
    perform: F,
) -> Result<Response, ApiError>
where
    F: FnOnce(Answered) -> Pin<Box<dyn Future<Output = ProxiedOutcome> + Send>>,
{
    let (tx, rx) = oneshot::channel();
    let call = Call {
        caller,
        op: LLM_OP.to_owned(),
        args,
        request_id: rid.clone(),
    };
    // Built here, polled only if the chain reaches its execute step.
    let perform = perform(tx);
    let mut task = tokio::spawn(async move { gateway.call_proxied(call, opts, perform).await });
    let mut rx = rx;
    // The answer, and the chain's end if it came first (or with it: an answer sent just before
    // the task ended is still taken).
    let (answer, ended) = tokio::select! {
        biased;
        a = &mut rx => (a.ok(), None),
        r = &mut task => (rx.try_recv().ok(), Some(r)),
    };
    let Some(answer) = answer else {
        // The chain ended without an answer: it refused, or the provider failed.
        let r = match ended {
            Some(r) => r,
            None => task.await,
        };
        return Err(reply_error(r, &rid));
    };
    if answer.streaming {
        return Ok(with_request_id(answer.resp, &rid));
    }
    // Answered only once its audit event is written: a call that cannot be audited is
    // refused (`server.audit_unavailable`), never reported as done.
    let r = match ended {
        Some(r) => r,
        None => task.await,
    };
    match r {
        Ok(Reply::Refused(r)) => Err(refusal_error(&r, &rid)),
        Ok(_) => Ok(with_request_id(answer.resp, &rid)),
        Err(e) => Err(reply_error(Err(e), &rid)),
    }
}

/// The error of a proxied call that ended without an answer.
fn reply_error(r: Result<Reply, tokio::task::JoinError>, rid: &str) -> ApiError {
    let reply = match r {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(request_id = %rid, error = %e, "the LLM proxy's task failed");
            Reply::Refused(Refusal::new(
                codes::SERVER_INTERNAL,
                "the model request failed inside corral",
            ))
        }
    };
    match reply {
        Reply::Refused(r) => refusal_error(&r, rid),
        // A simulation gateway answers from its mocks: no provider was asked.
        Reply::Json(_) | Reply::Stream(_) => ApiError::new(
            codes::LLM_NOT_CONFIGURED,
            "this gateway does not reach a model provider",
            Some(LLM_OP),
            rid,
        ),
    }
}

/// The wire error of a refusal; `llm.upstream` keeps the provider's status when it is a client
/// error the caller can act on (400-429).
fn refusal_error(r: &Refusal, rid: &str) -> ApiError {
    let e = ApiError::from_refusal(r, Some(LLM_OP), rid);
    let upstream = r
        .details
        .as_ref()
        .and_then(|d| d.get("upstream_status"))
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok());
    match upstream {
        Some(s) if r.code == codes::LLM_UPSTREAM && (400..=429).contains(&s) => e.with_status(s),
        _ => e,
    }
}

fn with_request_id(mut resp: Response, rid: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// A refused outcome, with its audit detail.
fn failed(r: Refusal, detail: String) -> ProxiedOutcome {
    ProxiedOutcome {
        result: Err(r),
        detail: Some(detail),
        tokens: 0,
    }
}

/// A model name as audited and labelled: printable ASCII, at most 100 characters.
fn audit_model(model: &str) -> String {
    let m: String = model
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(100)
        .collect();
    if m.is_empty() { "?".to_owned() } else { m }
}

/// Reads a request's body under the server's limit and parses it as a JSON object.
async fn json_body(
    state: &AppState,
    gw: &Gateway,
    caller: &Caller,
    rid: &str,
    request: axum::extract::Request,
) -> Result<serde_json::Map<String, Value>, Response> {
    let declared = crate::body::content_length(request.headers());
    let limit = state.max_body_bytes();
    let body = match crate::body::read(request.into_body(), limit, declared).await {
        Ok(b) => b,
        Err(e) => {
            let (status, code) = e.status_code();
            gw.audit_rejected(caller, LLM_OP, rid, code, status).await;
            return Err(e.response(limit, Some(LLM_OP), rid));
        }
    };
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) | Err(_) => {
            gw.audit_rejected(caller, LLM_OP, rid, codes::LLM_BAD_REQUEST, 400)
                .await;
            Err(ApiError::new(
                codes::LLM_BAD_REQUEST,
                "the body is not a JSON object; send `{\"model\": \"...\", \"messages\": [...]}` (`\"input\"` in place of `\"messages\"` for `/v1/responses`) with `Content-Type: application/json`",
                Some(LLM_OP),
                rid,
            )
            .into_response())
        }
    }
}

/// A field of a request body that could reach a model other than its `model`: a provider's
/// fallback routing (`models`, `fallbacks`, `route`, `provider`) or a tool carrying its own
/// `model` (an image-generation tool); `None` when there is none.
fn other_model_field(body: &serde_json::Map<String, Value>) -> Option<String> {
    if let Some(k) = ["models", "fallbacks", "route", "provider"]
        .into_iter()
        .find(|k| body.contains_key(*k))
    {
        return Some(format!("the field `{k}`"));
    }
    body.get("tools")
        .and_then(Value::as_array)
        .and_then(|tools| tools.iter().find(|t| t.get("model").is_some()))
        .map(|_| "a tool with its own `model`".to_owned())
}

/// Who asks: whether it is the root agent, its name, and for an agent session's turn the only
/// model it may ask for. An agent session's CLI is the root agent whatever it claims:
/// `X-Corral-Agent` from a turn's link is not read (a specialist's replies are not checked in
/// learning mode).
fn who_asks(request: &axum::extract::Request, root: &str) -> (bool, String, Option<Arc<str>>) {
    let turn = request
        .extensions()
        .get::<super::extract::Linked>()
        .filter(|l| l.kind == super::extract::LinkKind::AgentTurn);
    match turn {
        Some(l) => (true, root.to_owned(), l.model.clone()),
        None => {
            let (is_root, agent) = agent_of(request.headers(), root);
            (is_root, agent, None)
        }
    }
}

/// Whether the request is the root agent's: no `X-Corral-Agent` (fails safe), or the
/// configured root name. The agent's name, for the hook.
fn agent_of(headers: &HeaderMap, root: &str) -> (bool, String) {
    match headers.get(AGENT_HEADER).map(|v| v.to_str()) {
        None => (true, root.to_owned()),
        // Unreadable: treated as the root's, whose replies are checked.
        Some(Err(_)) => (true, root.to_owned()),
        Some(Ok(name)) => {
            let name = name.trim();
            (name == root, name.chars().take(128).collect())
        }
    }
}

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions(
    State(state): State<AppState>,
    authed: Authed<Llm>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    forward_route(state, authed, request, Api::Chat).await
}

/// `POST /v1/responses`.
pub(crate) async fn responses(
    State(state): State<AppState>,
    authed: Authed<Llm>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    forward_route(state, authed, request, Api::Responses).await
}

/// `POST /v1/messages` (the Anthropic Messages API; `llm.api: anthropic`).
pub(crate) async fn messages(
    State(state): State<AppState>,
    authed: Authed<Llm>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    forward_route(state, authed, request, Api::Messages).await
}

/// `404 llm.wrong_api`: the route speaks another API than the provider.
fn wrong_api(api: Api, rid: &str) -> ApiError {
    let msg = match api {
        Api::Messages => {
            "this server's model provider speaks the OpenAI API, not Anthropic's Messages API: send `POST /v1/chat/completions` or `POST /v1/responses`, or set `llm: {api: anthropic}` for an Anthropic provider"
        }
        Api::Chat | Api::Responses => {
            "this server's model provider speaks the Anthropic Messages API (`llm.api: anthropic`): send `POST /v1/messages`, or point `llm:` at an OpenAI-compatible provider"
        }
    };
    ApiError::new(codes::LLM_WRONG_API, msg, Some(LLM_OP), rid)
}

/// The client's Anthropic headers to pass on: printable ASCII, at most 1024 bytes each.
fn passed_headers(api: Api, headers: &HeaderMap) -> Vec<(&'static str, String)> {
    if api != Api::Messages {
        return Vec::new();
    }
    ANTHROPIC_HEADERS
        .iter()
        .filter_map(|k| {
            let v = headers.get(*k)?.to_str().ok()?;
            (v.len() <= 1024 && v.chars().all(|c| c.is_ascii_graphic() || c == ' '))
                .then(|| (*k, v.to_owned()))
        })
        .collect()
}

/// Whether the request streams, and whether the client asked for the usage. A chat stream
/// carries its usage in a last chunk only when asked: corral always asks (it meters tokens) and
/// strips that chunk when the client did not. The other APIs always send it.
fn ask_usage(api: Api, body: &mut serde_json::Map<String, Value>) -> (bool, bool) {
    let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    let usage_asked = api != Api::Chat
        || body
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            == Some(true);
    if stream && api == Api::Chat {
        let so = body.entry("stream_options").or_insert_with(|| json!({}));
        if let Some(o) = so.as_object_mut() {
            o.insert("include_usage".to_owned(), Value::Bool(true));
        } else {
            *so = json!({"include_usage": true});
        }
    }
    (stream, usage_asked)
}

/// The request's model, or what is wrong with its body.
fn model_of(api: Api, body: &serde_json::Map<String, Value>) -> Result<String, &'static str> {
    let model = match body.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => {
            return Err(
                "the body has no `model` string; name the model (`GET /v1/models` lists them)",
            );
        }
    };
    api.body_error(body).map_or(Ok(model), Err)
}

/// A hooked Responses request that names a conversation the provider keeps
/// (`previous_response_id`, `conversation`) is refused: the guard joins a reply only with the
/// history the request carries, so a value split across chained responses would get through.
fn provider_conversation(
    api: Api,
    hooked: bool,
    body: &serde_json::Map<String, Value>,
) -> Option<String> {
    let named = ["previous_response_id", "conversation"]
        .into_iter()
        .find(|k| body.get(*k).is_some_and(|v| !v.is_null()))?;
    (api == Api::Responses && hooked).then(|| {
        format!(
            "in learning mode the root agent's request may not name `{named}` (a conversation the model provider keeps): the answer guard reads each reply after the history the request carries; send the whole conversation in `input` with `store: false`"
        )
    })
}

/// A model request refused before it is decided: audited (`code`, the catalog's status), and
/// the error to answer.
async fn refused(
    gw: &corral_guard::Gateway,
    caller: &corral_guard::Caller,
    rid: &str,
    code: &'static str,
    msg: impl Into<String>,
) -> ApiError {
    let e = ApiError::new(code, msg, Some(LLM_OP), rid);
    gw.audit_rejected(caller, LLM_OP, rid, code, e.status())
        .await;
    e
}

/// A model request of any API: checked, decided as `llm.chat` (argument `model`), forwarded.
async fn forward_route(
    state: AppState,
    Authed {
        caller,
        request_id: rid,
        options,
        gateway: gw,
        ..
    }: Authed<Llm>,
    request: axum::extract::Request,
    api: Api,
) -> Result<Response, ApiError> {
    let Some(upstream) = state.llm() else {
        gw.audit_rejected(&caller, LLM_OP, &rid, codes::LLM_NOT_CONFIGURED, 503)
            .await;
        return Err(not_configured(&rid));
    };
    if api.provider() != upstream.api {
        gw.audit_rejected(&caller, LLM_OP, &rid, codes::LLM_WRONG_API, 404)
            .await;
        return Err(wrong_api(api, &rid));
    }
    let (is_root, agent, turn_model) = who_asks(&request, &upstream.root_agent);
    let passed = passed_headers(api, request.headers());
    // The Anthropic SDK's beta client posts to `/v1/messages?beta=true`: that query (and no
    // other) is passed on.
    let beta = api == Api::Messages && request.uri().query() == Some("beta=true");
    let mut body = match json_body(&state, &gw, &caller, &rid, request).await {
        Ok(b) => b,
        Err(resp) => return Ok(resp),
    };
    let model = match model_of(api, &body) {
        Ok(m) => m,
        Err(msg) => return Err(refused(&gw, &caller, &rid, codes::LLM_BAD_REQUEST, msg).await),
    };
    // An agent turn asks for its session's model only (the agent scope's `models` applies),
    // and names no other through a provider's routing fields or a tool's own model.
    if let Some(m) = turn_model {
        let other = if *m != *model {
            Some(format!("model `{model}`"))
        } else {
            other_model_field(&body)
        };
        if let Some(what) = other {
            let msg = format!(
                "this agent session runs model `{m}`; its CLI may not ask the LLM proxy for another ({what})"
            );
            return Err(refused(&gw, &caller, &rid, codes::AGENTS_MODEL_NOT_ALLOWED, msg).await);
        }
    }
    let opts = match options {
        Ok(o) => o,
        Err(msg) => {
            let code = super::extract::INVALID_HEADER;
            return Err(refused(&gw, &caller, &rid, code, msg).await);
        }
    };
    let (stream, usage_asked) = ask_usage(api, &mut body);
    // A specialist's reply goes to the root, not to the learner, so it is not rewritten. But
    // the header is the caller's to set: in learning mode only agent software (a service or a
    // delegated principal) names a specialist; a person's own token is always the root's, so a
    // learner cannot route around the answer guard by naming a specialist.
    let human = caller.principal.kind == corral_policy::PrincipalKind::Human;
    let is_root = is_root || (human && state.learning().is_some());
    let hook = state.reply_hook().filter(|_| is_root);
    // Learning mode: the root's system prompt gets the learner's level line (never a value),
    // and so does the coach's (`lab_coach`), whose hint ladder follows the level; the coach's
    // replies are not rewritten (they reach the learner only through the root, which is).
    if let Some(msg) = provider_conversation(api, hook.is_some(), &body) {
        let code = codes::LEARNING_PROVIDER_CONVERSATION;
        return Err(refused(&gw, &caller, &rid, code, msg).await);
    }
    let coach = !is_root && agent == corral_learn::levels::LAB_COACH;
    if (is_root || coach)
        && let Some(l) = state.learning()
    {
        let level = l.level_of(&caller);
        match api {
            Api::Messages => crate::learning::append_level_system(&mut body, level),
            Api::Chat | Api::Responses => crate::learning::append_level_line(&mut body, level),
        }
    }
    let ctx = ReplyCtx {
        principal: caller.principal.id.clone(),
        tenant: caller.principal.tenant.clone(),
        run: caller.run.clone().or_else(|| opts.run_id.clone()),
        agent,
        request_id: rid.clone(),
        caller: caller.principal.clone(),
    };
    let body = Value::Object(body);
    let history = if hook.is_some() {
        history_of(&body)
    } else {
        Vec::new()
    };
    let forward = Forward {
        api,
        upstream,
        metrics: state.metrics_arc(),
        model: audit_model(&model),
        body,
        hook,
        ctx,
        headers: passed,
        beta,
        history,
    };
    let args = json!({ "model": model });
    proxied(gw, caller, rid, opts, args, move |tx| {
        Box::pin(async move {
            if stream {
                forward.stream(tx, usage_asked).await
            } else {
                forward.complete(tx).await
            }
        })
    })
    .await
}
/// `GET /v1/models`: the provider's model list, decided as `llm.chat` (with no model).
pub(crate) async fn models(
    State(state): State<AppState>,
    Authed {
        caller,
        request_id: rid,
        options,
        gateway: gw,
        ..
    }: Authed<Llm>,
) -> Result<Response, ApiError> {
    let Some(upstream) = state.llm() else {
        gw.audit_rejected(&caller, LLM_OP, &rid, codes::LLM_NOT_CONFIGURED, 503)
            .await;
        return Err(not_configured(&rid));
    };
    let opts = match options {
        Ok(o) => o,
        Err(msg) => {
            let code = super::extract::INVALID_HEADER;
            gw.audit_rejected(&caller, LLM_OP, &rid, code, 400).await;
            return Err(ApiError::new(code, msg, Some(LLM_OP), &rid));
        }
    };
    let metrics = state.metrics_arc();
    proxied(gw, caller, rid, opts, json!({}), move |tx| {
        Box::pin(async move {
            let sent = upstream
                .request(reqwest::Method::GET, "/models")
                .send()
                .await;
            let resp = match sent {
                Ok(r) => r,
                Err(e) => {
                    let (r, d) = send_error(&e);
                    metrics.record_llm(outcome_of(&r), 0, 0);
                    return failed(r, d);
                }
            };
            let status = resp.status().as_u16();
            if !resp.status().is_success() {
                let r = upstream_error(&upstream, resp).await;
                metrics.record_llm("upstream_error", 0, 0);
                return failed(r, format!("models: upstream {status}"));
            }
            let v = match read_json(resp).await {
                Ok(v) => v,
                Err(r) => {
                    metrics.record_llm("upstream_error", 0, 0);
                    return failed(r, format!("models: upstream {status}, unreadable"));
                }
            };
            metrics.record_llm("ok", 0, 0);
            let _ = tx.send(Answer::whole(axum::Json(&v).into_response()));
            ProxiedOutcome {
                result: Ok(json!({"models": true})),
                detail: Some(format!("models: upstream {status}")),
                tokens: 0,
            }
        })
    })
    .await
}

/// The metrics outcome of a refusal.
fn outcome_of(r: &Refusal) -> &'static str {
    match r.code {
        codes::LLM_TIMEOUT => "timeout",
        codes::LLM_UNREACHABLE => "unreachable",
        _ => "upstream_error",
    }
}

/// A request that did not get an answer: a timeout or an unreachable provider, said without
/// the url (it may carry credentials).
fn send_error(e: &reqwest::Error) -> (Refusal, String) {
    tracing::warn!(error = %ErrorWithoutUrl(e), "the model provider could not be reached");
    if e.is_timeout() {
        (
            Refusal::new(
                codes::LLM_TIMEOUT,
                format!(
                    "the model provider did not answer within {} s; retry, or ask for fewer tokens",
                    READ_TIMEOUT.as_secs()
                ),
            ),
            "upstream timed out".to_owned(),
        )
    } else {
        let what = if e.is_connect() {
            "the connection failed"
        } else {
            "the request failed"
        };
        (
            Refusal::new(
                codes::LLM_UNREACHABLE,
                format!(
                    "the model provider could not be reached ({what}); check the url in the variable `llm.base_url_env` names, and that the provider is up"
                ),
            ),
            format!("upstream unreachable: {what}"),
        )
    }
}

/// A reqwest error, shown without its url.
struct ErrorWithoutUrl<'e>(&'e reqwest::Error);

impl std::fmt::Display for ErrorWithoutUrl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::error::Error as _;
        let mut cur: Option<&dyn std::error::Error> = self.0.source();
        write!(
            f,
            "{}",
            if self.0.is_timeout() {
                "timeout"
            } else if self.0.is_connect() {
                "connect"
            } else {
                "request"
            }
        )?;
        while let Some(e) = cur {
            write!(f, ": {e}")?;
            cur = e.source();
        }
        Ok(())
    }
}

/// `llm.upstream` from a provider's error answer: its status, and its message (the OpenAI
/// shape's `error.message`, else none), bounded, printable, without the key.
async fn upstream_error(upstream: &Upstream, resp: reqwest::Response) -> Refusal {
    let status = resp.status().as_u16();
    let body = read_bounded(resp, MAX_ERROR_BYTES)
        .await
        .unwrap_or_default();
    let message = serde_json::from_slice::<Value>(&body).ok().and_then(|v| {
        v.get("error")
            .and_then(|e| e.get("message").or(Some(e)))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let message = message.map(|m| {
        let clean: String = m
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(500)
            .collect();
        upstream.scrub(&clean)
    });
    let mut r = Refusal::new(
        codes::LLM_UPSTREAM,
        match message {
            Some(m) => format!("the model provider answered {status}: {m}"),
            None => format!("the model provider answered {status}"),
        },
    );
    r.details = Some(json!({ "upstream_status": status }));
    r
}

/// Reads at most `max` bytes of a body; `None` past it or on a read error.
async fn read_bounded(mut resp: reqwest::Response, max: usize) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    while let Some(chunk) = resp.chunk().await.ok()? {
        if chunk.len() > max.saturating_sub(buf.len()) {
            return None;
        }
        buf.extend_from_slice(&chunk);
    }
    Some(buf)
}

/// A provider's JSON answer, bounded.
async fn read_json(resp: reqwest::Response) -> Result<Value, Refusal> {
    let body = read_bounded(resp, MAX_UPSTREAM_BYTES).await.ok_or_else(|| {
        Refusal::new(
            codes::LLM_UPSTREAM,
            format!(
                "the model provider's answer could not be read, or is over {MAX_UPSTREAM_BYTES} bytes"
            ),
        )
    })?;
    serde_json::from_slice(&body).map_err(|_| {
        Refusal::new(
            codes::LLM_UPSTREAM,
            "the model provider answered with a body that is not JSON",
        )
    })
}

/// An SSE answer over `body`.
pub(super) fn sse_response(body: Body) -> Response {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::OK;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// A response body fed by the pump of a passed-through stream.
pub(super) struct ChannelBody(pub(super) mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl futures_core::Stream for ChannelBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}
