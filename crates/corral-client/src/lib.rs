//! Corral's typed async Rust client (reqwest).
//!
//! ```no_run
//! # async fn demo() -> Result<(), corral_client::ClientError> {
//! use corral_client::Client;
//! use serde_json::json;
//!
//! let client = Client::new("http://127.0.0.1:9000", std::env::var("CORRAL_TOKEN").ok())?;
//! let listing = client.call("files.list", json!({"path": "."})).await?;
//! println!("{listing}");
//! # Ok(())
//! # }
//! ```
//!
//! Every method maps a refusal to [`ClientError::Api`], which mirrors the wire error
//! (`{error, type, code, op, request_id}` plus the status and `Retry-After`), and a network or
//! protocol failure to [`ClientError::Transport`] or [`ClientError::Protocol`].
//!
//! The token is only ever sent in the `Authorization: Bearer` header (marked sensitive, so
//! reqwest never logs it), never in a URL, and [`Client`]'s `Debug` output redacts it.

pub mod error;
pub mod sandbox;
pub mod types;

use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{Method, Url};

pub use error::{ClientError, WireError};
pub use types::{Capabilities, CapabilityOp, Health, Me, OpInfo, OpLimits, ParamInfo};

/// The answer to an op call, with the envelope the server wraps it in.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A JSON result (`{"ok": true, "op", "request_id", "result"}` on the wire).
    Json {
        /// The op, as the server echoed it.
        op: String,
        /// The request id (also in the server's audit log).
        request_id: String,
        /// The op's result.
        result: serde_json::Value,
        /// Whether this is the stored outcome of an approved call that had run already (the
        /// server's `"replayed": true`): it did not run again.
        replayed: bool,
    },
    /// A byte stream (e.g. `files.download`).
    Bytes {
        /// The `Content-Type` the server sent.
        content_type: Option<String>,
        /// The `x-request-id` header, when present.
        request_id: Option<String>,
        /// The body.
        bytes: Vec<u8>,
    },
}

/// A client for one corral server.
#[derive(Clone)]
pub struct Client {
    base: Url,
    auth: Option<HeaderValue>,
    http: reqwest::Client,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("token", &self.auth.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// Percent-encodes an op id for one path segment, so no id can name another route.
pub(crate) fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    // `.` and `..` alone are path navigation, not names.
    match out.as_str() {
        "." => "%2E".to_owned(),
        ".." => "%2E%2E".to_owned(),
        _ => out,
    }
}

impl Client {
    /// A client for the server at `base_url` (e.g. `http://127.0.0.1:9000`), sending `token`
    /// as `Authorization: Bearer` when given.
    ///
    /// The URL must be `http` or `https`, without credentials, query or fragment: a token
    /// belongs in the header, never in a URL.
    pub fn new(base_url: &str, token: Option<String>) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ClientError::Transport {
                message: format!("cannot build the HTTP client: {e}"),
            })?;
        Self::with_http(base_url, token, http)
    }

    /// Like [`Client::new`], with a reqwest client of your own (timeouts, proxies, TLS roots).
    pub fn with_http(
        base_url: &str,
        token: Option<String>,
        http: reqwest::Client,
    ) -> Result<Self, ClientError> {
        let bad = |why: &str| ClientError::InvalidUrl {
            url: base_url.to_owned(),
            reason: why.to_owned(),
        };
        let mut base = Url::parse(base_url).map_err(|e| bad(&e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(bad("the scheme must be http or https"));
        }
        if !base.username().is_empty() || base.password().is_some() {
            return Err(bad(
                "credentials do not belong in the URL; pass the token separately",
            ));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(bad(
                "the URL must not have a query or fragment (a token belongs in the header)",
            ));
        }
        if !base.path().ends_with('/') {
            let p = format!("{}/", base.path());
            base.set_path(&p);
        }
        let auth = match token.filter(|t| !t.is_empty()) {
            None => None,
            Some(t) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
                    ClientError::InvalidToken {
                        reason: "the token holds characters an HTTP header cannot carry".to_owned(),
                    }
                })?;
                v.set_sensitive(true);
                Some(v)
            }
        };
        Ok(Self { base, auth, http })
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    fn url(&self, path: &str) -> Result<Url, ClientError> {
        self.base.join(path).map_err(|e| ClientError::InvalidUrl {
            url: format!("{}{path}", self.base),
            reason: e.to_string(),
        })
    }

    fn request(&self, method: Method, url: Url) -> reqwest::RequestBuilder {
        let mut headers = HeaderMap::new();
        if let Some(a) = &self.auth {
            headers.insert(AUTHORIZATION, a.clone());
        }
        self.http.request(method, url).headers(headers)
    }

    async fn send(&self, rb: reqwest::RequestBuilder) -> Result<reqwest::Response, ClientError> {
        let resp = rb.send().await.map_err(|e| ClientError::Transport {
            message: transport_message(&e),
        })?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            Err(error_from(resp).await)
        }
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let rb = self
            .request(Method::GET, self.url(path)?)
            .header(ACCEPT, "application/json");
        let resp = self.send(rb).await?;
        decode_json(resp).await
    }

    /// Calls `op` with `args` and returns the whole reply: the JSON result with its envelope,
    /// or the bytes of a stream.
    pub async fn call_reply(
        &self,
        op: &str,
        args: serde_json::Value,
    ) -> Result<Reply, ClientError> {
        let url = self.url(&format!("ops/{}", encode_segment(op)))?;
        let body = serde_json::to_vec(&args).map_err(|e| ClientError::Protocol {
            status: None,
            message: format!("the arguments cannot be encoded as JSON: {e}"),
        })?;
        let rb = self
            .request(Method::POST, url)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        let resp = self.send(rb).await?;
        let status = resp.status();
        if !is_json(resp.headers()) {
            let content_type = header_str(resp.headers(), CONTENT_TYPE.as_str());
            let request_id = header_str(resp.headers(), "x-request-id");
            let bytes = resp.bytes().await.map_err(|e| ClientError::Transport {
                message: transport_message(&e),
            })?;
            return Ok(Reply::Bytes {
                content_type,
                request_id,
                bytes: bytes.to_vec(),
            });
        }
        let retry_after = retry_after(resp.headers());
        let header_rid = header_str(resp.headers(), "x-request-id");
        let body: serde_json::Value = decode_json(resp).await?;
        if body.get("ok") == Some(&serde_json::Value::Bool(true)) {
            let env: types::Envelope =
                serde_json::from_value(body).map_err(|e| ClientError::Protocol {
                    status: Some(status.as_u16()),
                    message: format!("the server's answer is not the expected JSON: {e}"),
                })?;
            return Ok(Reply::Json {
                op: env.op,
                request_id: env.request_id,
                result: env.result,
                replayed: env.replayed,
            });
        }
        // A 2xx that is not a result: a wire error such as `202 confirmation.required` (the
        // call waits for a person's approval; the message says how).
        match serde_json::from_value::<WireError>(body) {
            Ok(w) => Err(ClientError::Api {
                status: status.as_u16(),
                code: w.code,
                message: w.error,
                request_id: w.request_id.or(header_rid),
                retry_after,
                details: w.details,
            }),
            Err(_) => Err(ClientError::Protocol {
                status: Some(status.as_u16()),
                message: "the server answered 2xx with neither `ok: true` nor an error".to_owned(),
            }),
        }
    }

    /// Calls `op` with `args` (a JSON object) and returns the op's `result`.
    ///
    /// An op that answers with a byte stream (`files.download`) is a
    /// [`ClientError::Protocol`] here: use [`Client::download`].
    pub async fn call(
        &self,
        op: &str,
        args: serde_json::Value,
    ) -> Result<serde_json::Value, ClientError> {
        match self.call_reply(op, args).await? {
            Reply::Json { result, .. } => Ok(result),
            Reply::Bytes { content_type, .. } => Err(ClientError::Protocol {
                status: Some(200),
                message: format!(
                    "`{op}` answered with a byte stream ({}); use `download`",
                    content_type.as_deref().unwrap_or("no content type")
                ),
            }),
        }
    }

    /// Calls a streaming op (e.g. `files.download` with `{"path": ...}`) and returns its bytes.
    /// A JSON answer is returned as its encoded bytes.
    pub async fn download(
        &self,
        op: &str,
        args: serde_json::Value,
    ) -> Result<Vec<u8>, ClientError> {
        match self.call_reply(op, args).await? {
            Reply::Bytes { bytes, .. } => Ok(bytes),
            Reply::Json { result, .. } => {
                serde_json::to_vec(&result).map_err(|e| ClientError::Protocol {
                    status: Some(200),
                    message: format!("cannot encode the result: {e}"),
                })
            }
        }
    }

    /// `GET /ops`: the ops this caller may call.
    pub async fn ops(&self) -> Result<Vec<OpInfo>, ClientError> {
        let list: types::OpList = self.get_json("ops").await?;
        Ok(list.ops)
    }

    /// `GET /capabilities`: the ops this caller may call, with the limits that apply.
    pub async fn capabilities(&self) -> Result<Capabilities, ClientError> {
        self.get_json("capabilities").await
    }

    /// `GET /audit?limit=N&run=..&op=..&principal=..&purpose=..`: the most recent audit events of the
    /// caller's tenant, newest first, those `filters` (name, value) match (role admin only).
    /// Returns the server's answer: `{"tenant", "events": [...]}`.
    pub async fn audit(
        &self,
        limit: u32,
        filters: &[(&str, &str)],
    ) -> Result<serde_json::Value, ClientError> {
        let mut url = self.url("audit")?;
        url.query_pairs_mut()
            .append_pair("limit", &limit.to_string())
            .extend_pairs(filters);
        let rb = self
            .request(Method::GET, url)
            .header(ACCEPT, "application/json");
        let resp = self.send(rb).await?;
        decode_json(resp).await
    }

    /// `GET /me`: who the server thinks this caller is.
    pub async fn me(&self) -> Result<Me, ClientError> {
        self.get_json("me").await
    }

    /// `POST /confirmations/{action_id}/decision`: approves (or denies) a pending action; only
    /// the human who raised it may approve. Returns the server's answer (the action's state).
    pub async fn decide(
        &self,
        action_id: &str,
        approve: bool,
    ) -> Result<serde_json::Value, ClientError> {
        let url = self.url(&format!(
            "confirmations/{}/decision",
            encode_segment(action_id)
        ))?;
        let decision = if approve { "approve" } else { "deny" };
        let rb = self
            .request(Method::POST, url)
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::json!({ "decision": decision }).to_string());
        let resp = self.send(rb).await?;
        decode_json(resp).await
    }

    /// `GET /healthz` (needs no token): the server's status, version and mode.
    pub async fn healthz(&self) -> Result<Health, ClientError> {
        self.get_json("healthz").await
    }
}

fn header_str(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// `Retry-After` in seconds (the form corral sends).
fn retry_after(h: &HeaderMap) -> Option<Duration> {
    h.get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

fn is_json(h: &HeaderMap) -> bool {
    h.get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            let ct = ct.to_ascii_lowercase();
            ct.starts_with("application/json") || ct.contains("+json")
        })
}

/// The error's text with its causes (reqwest's `Display` stops at the top level).
fn transport_message(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        let s_text = s.to_string();
        if !msg.contains(&s_text) {
            msg.push_str(": ");
            msg.push_str(&s_text);
        }
        src = s.source();
    }
    msg
}

pub(crate) async fn decode_json<T: serde::de::DeserializeOwned>(
    resp: reqwest::Response,
) -> Result<T, ClientError> {
    let status = resp.status();
    let bytes = resp.bytes().await.map_err(|e| ClientError::Transport {
        message: transport_message(&e),
    })?;
    serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol {
        status: Some(status.as_u16()),
        message: format!("the server's answer is not the expected JSON: {e}"),
    })
}

/// Turns a non-2xx answer into `ClientError::Api` (or `Protocol` when it is not a wire error).
async fn error_from(resp: reqwest::Response) -> ClientError {
    let status = resp.status();
    let retry_after = retry_after(resp.headers());
    let header_rid = header_str(resp.headers(), "x-request-id");
    let bytes = match resp.bytes().await {
        Ok(b) => b,
        Err(e) => {
            return ClientError::Transport {
                message: transport_message(&e),
            };
        }
    };
    match serde_json::from_slice::<WireError>(&bytes) {
        Ok(w) => ClientError::Api {
            status: status.as_u16(),
            code: w.code,
            message: w.error,
            request_id: w.request_id.or(header_rid),
            retry_after,
            details: w.details,
        },
        Err(_) => ClientError::Protocol {
            status: Some(status.as_u16()),
            message: format!(
                "{} {} with a body that is not a corral error: {}",
                status.as_u16(),
                status.canonical_reason().unwrap_or(""),
                snippet(&bytes)
            ),
        },
    }
}

fn snippet(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let s: String = s.chars().take(200).collect();
    if s.is_empty() {
        "(empty)".to_owned()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn op_ids_cannot_escape_their_path_segment() {
        assert_eq!(encode_segment("files.read"), "files.read");
        assert_eq!(encode_segment("../metrics"), "..%2Fmetrics");
        assert_eq!(encode_segment(".."), "%2E%2E");
        assert_eq!(encode_segment("a b?c#d"), "a%20b%3Fc%23d");
    }

    #[test]
    fn urls_with_credentials_or_queries_are_refused() {
        assert!(Client::new("http://u:p@127.0.0.1:9000", None).is_err());
        assert!(Client::new("http://127.0.0.1:9000/?token=x", None).is_err());
        assert!(Client::new("ftp://127.0.0.1", None).is_err());
        let c = Client::new(
            "http://127.0.0.1:9000/corral",
            Some("s3cret-token-123456".into()),
        )
        .unwrap();
        assert_eq!(
            c.url("ops/x").unwrap().as_str(),
            "http://127.0.0.1:9000/corral/ops/x"
        );
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
