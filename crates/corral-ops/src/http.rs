//! `http.fetch`: fetch the url the policy admitted, and nothing else.
//!
//! **Invariants:**
//! - DNS is resolved exactly once per hop, with `tokio::net::lookup_host`. When the grant has
//!   `block_private`, every resolved address is checked with `is_private_ip` and one internal
//!   address refuses the hop before any connection is made. The client then connects only to
//!   the addresses that were checked: its resolver answers for the checked host alone and fails
//!   for any other name, so there is no second lookup to rebind.
//! - Redirects are followed by hand (at most `FetchConfig::max_redirects`). Every target is
//!   joined to the current url, re-checked through `OpCtx::url_check` (the guard's "decide the
//!   same op again with this url") and then resolved and checked like the first hop. Without a
//!   `url_check` a redirect is refused: it fails closed.
//! - No proxy from the environment is used, the response is never decompressed, the body is
//!   streamed and refused with `limit.too_large` as soon as it outgrows `max_bytes`, and the
//!   whole call (DNS, every hop, the body) is bounded by the timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use corral_exec::BoxFuture;
use corral_policy::scope::{UrlGrant, is_private_ip};
use corral_policy::{OpSpec, codes};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::{Method, StatusCode, Url};

use crate::{Op, OpCtx, OpError, OpOutput};

/// Re-checks a redirect target fetched with a method (`GET`, ...): returns the canonical url
/// the policy admits, or the refusal.
pub type UrlCheck = Arc<dyn Fn(&str, &str) -> Result<UrlGrant, OpError> + Send + Sync>;

/// Response headers passed back to the caller; every other header is dropped.
const HEADER_ALLOWLIST: [&str; 4] = ["content-type", "content-length", "last-modified", "etag"];

/// How the fetcher behaves where the grant's limits say nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchConfig {
    /// The whole call's time budget when the grant has no `timeout`.
    pub default_timeout: Duration,
    /// The longest a TCP (and TLS) connect may take, within the whole call's budget.
    pub connect_timeout: Duration,
    /// The largest response body when the grant has no `max_bytes`.
    pub default_max_bytes: u64,
    /// The most redirects followed; one more is `net.too_many_redirects`.
    pub max_redirects: usize,
    /// The `User-Agent` sent.
    pub user_agent: String,
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            default_max_bytes: 10 * 1024 * 1024,
            max_redirects: 5,
            user_agent: concat!("corral/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// The `http.fetch` op (the response in the result) and the `http.download` op (a `GET`
/// whose body is saved to a path, never in the result).
#[derive(Debug, Clone)]
pub struct HttpFetch {
    spec: OpSpec,
    config: FetchConfig,
    /// `http.download`: the body goes to the call's `path`.
    save: bool,
}

impl HttpFetch {
    /// The op, with its spec (the built-in `http.fetch` or `http.download`) and the fetcher's
    /// defaults.
    pub fn new(spec: OpSpec, client_config: FetchConfig) -> Self {
        let save = spec.id.as_str() == "http.download";
        Self {
            spec,
            config: client_config,
            save,
        }
    }
}

impl Op for HttpFetch {
    fn spec(&self) -> &OpSpec {
        &self.spec
    }

    fn call(&self, ctx: OpCtx) -> BoxFuture<'_, Result<OpOutput, OpError>> {
        Box::pin(async move {
            let timeout = ctx
                .grant
                .limits
                .timeout
                .unwrap_or(self.config.default_timeout);
            let work = async {
                if self.save {
                    self.download(&ctx, timeout).await
                } else {
                    self.fetch(&ctx, timeout).await
                }
            };
            match tokio::time::timeout(timeout, work).await {
                Ok(r) => r.map(|value| OpOutput::Json {
                    value,
                    attestation: None,
                }),
                Err(_) => Err(OpError::new(
                    codes::LIMIT_TIMEOUT,
                    format!(
                        "the fetch did not finish within {} ms; call a faster url or raise the \
                         rule's `timeout`",
                        timeout.as_millis()
                    ),
                )),
            }
        })
    }
}

fn private_refusal(host: &str) -> OpError {
    OpError::new(
        codes::POLICY_PRIVATE_ADDRESS,
        format!(
            "`{host}` resolves to a loopback, private, link-local or otherwise internal address; \
             only public addresses may be fetched"
        ),
    )
}

fn url_not_allowed(message: String) -> OpError {
    OpError::new(codes::POLICY_URL_NOT_ALLOWED, message)
}

/// The host of a url as the resolver and the client see it (IPv6 literals without brackets).
fn host_of(url: &Url) -> Result<String, OpError> {
    let host = url
        .host_str()
        .ok_or_else(|| url_not_allowed(format!("`{url}` has no host")))?;
    Ok(host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .to_ascii_lowercase())
}

/// Resolves a host once and, when `block_private`, refuses it if ANY address is internal.
pub(crate) async fn resolve_checked(
    host: &str,
    port: u16,
    block_private: bool,
) -> Result<Vec<SocketAddr>, OpError> {
    let dns_failed = |why: String| {
        OpError::new(
            codes::NET_DNS_FAILED,
            format!("cannot resolve `{host}`: {why}"),
        )
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| dns_failed(e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(dns_failed("no addresses".to_owned()));
    }
    if block_private && addrs.iter().any(|a| is_private_ip(a.ip())) {
        return Err(private_refusal(host));
    }
    Ok(addrs)
}

/// A resolver that answers for the one checked host, with the checked addresses, and refuses
/// every other name: the client cannot look anything up behind the fetcher's back.
#[derive(Debug)]
struct PinnedResolver {
    host: String,
    addrs: Vec<SocketAddr>,
}

impl Resolve for PinnedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let answer: Result<Addrs, Box<dyn std::error::Error + Send + Sync>> =
            if name.as_str().eq_ignore_ascii_case(&self.host) {
                Ok(Box::new(self.addrs.clone().into_iter()))
            } else {
                Err(format!("`{}` was not checked by the fetcher", name.as_str()).into())
            };
        Box::pin(std::future::ready(answer))
    }
}

/// The detail of a reqwest error, without the url it repeats.
fn detail(e: reqwest::Error) -> String {
    let mut out = String::new();
    let mut src: Option<&dyn std::error::Error> = std::error::Error::source(&e);
    while let Some(s) = src {
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s.to_string());
        src = s.source();
    }
    if out.is_empty() {
        e.without_url().to_string()
    } else {
        out
    }
}

fn too_large(max: u64) -> OpError {
    OpError::new(
        codes::LIMIT_TOO_LARGE,
        format!(
            "the response body is larger than {max} bytes; fetch a smaller resource or raise the \
             rule's `max_bytes`"
        ),
    )
}

impl HttpFetch {
    /// The largest body the call takes.
    fn max_bytes(&self, ctx: &OpCtx) -> u64 {
        ctx.grant
            .limits
            .max_bytes
            .unwrap_or(self.config.default_max_bytes)
    }

    async fn fetch(&self, ctx: &OpCtx, timeout: Duration) -> Result<serde_json::Value, OpError> {
        let method = match ctx.args.get_str("method") {
            None => Method::GET,
            Some(m) => Method::from_bytes(m.to_ascii_uppercase().as_bytes()).map_err(|_| {
                OpError::new(codes::ARGS_INVALID, format!("`{m}` is not an HTTP method"))
            })?,
        };
        let body = ctx.args.get_str("body").map(str::to_owned);
        let (resp, url) = self.follow(ctx, timeout, method, body).await?;
        read_response(resp, url, self.max_bytes(ctx)).await
    }

    /// `http.download`: the save target is checked and opened first (a temporary file beside
    /// the path), then a `GET` (its redirects followed through the policy) whose 2xx body is
    /// streamed into it, at most `max_bytes`, and renamed to the path once whole. A failure,
    /// a timeout or a cancelled call leaves the path as it was.
    async fn download(&self, ctx: &OpCtx, timeout: Duration) -> Result<serde_json::Value, OpError> {
        use sha2::Digest as _;
        use tokio::io::AsyncWriteExt as _;
        let max_bytes = self.max_bytes(ctx);
        let overwrite = matches!(
            ctx.args.get("overwrite"),
            Some(corral_policy::ArgValue::Bool(true))
        );
        let target = crate::files::SaveTarget::open(ctx, overwrite).await?;
        let io = |e: std::io::Error, shown: &str| {
            OpError::new(codes::FILES_IO, format!("`{shown}`: {e}"))
        };
        let (mut resp, url) = self.follow(ctx, timeout, Method::GET, None).await?;
        let status = resp.status();
        if !status.is_success() {
            return Err(OpError::new(
                codes::NET_HTTP_STATUS,
                format!("`{url}` answered {status}; nothing was saved"),
            ));
        }
        if resp.content_length().is_some_and(|n| n > max_bytes) {
            return Err(too_large(max_bytes));
        }
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let std_file = target
            .file
            .as_ref()
            .ok_or_else(|| OpError::new(codes::FILES_IO, "the download's file is gone"))?
            .try_clone()
            .map_err(|e| io(e, &target.shown))?;
        let mut file = tokio::fs::File::from_std(std_file);
        let mut hash = sha2::Sha256::new();
        let mut bytes = 0u64;
        while let Some(chunk) = resp.chunk().await.map_err(|e| {
            OpError::new(
                codes::NET_BAD_RESPONSE,
                format!("the response body broke off: {}", detail(e)),
            )
        })? {
            bytes = bytes.saturating_add(chunk.len() as u64);
            if bytes > max_bytes {
                return Err(too_large(max_bytes));
            }
            hash.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(|e| io(e, &target.shown))?;
        }
        file.flush().await.map_err(|e| io(e, &target.shown))?;
        drop(file);
        let path = tokio::task::spawn_blocking(move || target.commit())
            .await
            .map_err(|e| {
                OpError::new(codes::SERVER_INTERNAL, format!("the save task failed: {e}"))
            })??;
        let digest: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        Ok(serde_json::json!({
            "status": status.as_u16(),
            "url": url.as_str(),
            "path": path,
            "bytes": bytes,
            "sha256": digest,
            "content_type": content_type,
        }))
    }

    /// Sends `method` (with `body`) to the admitted url, following redirects through the
    /// policy (each hop judged again, with the method it is followed with); the final
    /// response and its url.
    async fn follow(
        &self,
        ctx: &OpCtx,
        timeout: Duration,
        mut method: Method,
        mut body: Option<String>,
    ) -> Result<(reqwest::Response, Url), OpError> {
        let grant = ctx.grant.url.as_ref().ok_or_else(|| {
            url_not_allowed("the policy admitted no url for this call".to_owned())
        })?;
        let mut block_private = grant.block_private;
        let mut url = Url::parse(&grant.url)
            .map_err(|e| url_not_allowed(format!("the admitted url does not parse: {e}")))?;
        let mut redirects = 0usize;

        loop {
            if !matches!(url.scheme(), "http" | "https") {
                return Err(url_not_allowed(format!(
                    "`{url}` is not an http or https url"
                )));
            }
            let host = host_of(&url)?;
            let port = url
                .port_or_known_default()
                .ok_or_else(|| url_not_allowed(format!("`{url}` has no port")))?;
            let addrs = resolve_checked(&host, port, block_private).await?;

            let resp = self
                .send(&host, addrs, &method, &url, body.as_deref(), timeout)
                .await?;

            let status = resp.status();
            let location = match status {
                StatusCode::MOVED_PERMANENTLY
                | StatusCode::FOUND
                | StatusCode::SEE_OTHER
                | StatusCode::TEMPORARY_REDIRECT
                | StatusCode::PERMANENT_REDIRECT => resp.headers().get(reqwest::header::LOCATION),
                _ => None,
            };
            let Some(location) = location else {
                return Ok((resp, url));
            };

            let bad_location = || {
                OpError::new(
                    codes::NET_BAD_RESPONSE,
                    format!("`{host}` answered {status} with a Location that is not a url"),
                )
            };
            let target = location.to_str().map_err(|_| bad_location())?;
            let next = url.join(target).map_err(|_| bad_location())?;
            if redirects >= self.config.max_redirects {
                return Err(OpError::new(
                    codes::NET_TOO_MANY_REDIRECTS,
                    format!(
                        "more than {} redirects (the last to `{next}`); call the final url \
                         directly",
                        self.config.max_redirects
                    ),
                ));
            }
            redirects += 1;
            let Some(check) = &ctx.url_check else {
                return Err(url_not_allowed(format!(
                    "`{url}` redirects to `{next}`, and redirects cannot be re-checked against \
                     the policy here; call the target directly"
                )));
            };
            // What browsers (and reqwest) do: 303 turns anything but HEAD into a body-less GET,
            // 301 and 302 turn a POST into one; 307 and 308 repeat the request as it was.
            let to_get = match status {
                StatusCode::SEE_OTHER => method != Method::HEAD,
                StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND => method == Method::POST,
                _ => false,
            };
            if to_get {
                method = Method::GET;
                body = None;
            }
            // The hop is judged with the method it is followed with.
            let admitted = check(next.as_str(), method.as_str())?;
            // A hop is never checked more loosely than the first: once any rule on the way
            // blocks private addresses, every later hop does too.
            block_private |= admitted.block_private;
            url = Url::parse(&admitted.url).map_err(|e| {
                url_not_allowed(format!("the admitted redirect url does not parse: {e}"))
            })?;
        }
    }
    /// One hop: connects only to `addrs` (the checked addresses of `host`), sends, and does not
    /// follow redirects.
    async fn send(
        &self,
        host: &str,
        addrs: Vec<SocketAddr>,
        method: &Method,
        url: &Url,
        body: Option<&str>,
        timeout: Duration,
    ) -> Result<reqwest::Response, OpError> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(PinnedResolver {
                host: host.to_owned(),
                addrs,
            }))
            .connect_timeout(self.config.connect_timeout.min(timeout))
            .timeout(timeout)
            .user_agent(self.config.user_agent.clone())
            .build()
            .map_err(|e| {
                OpError::new(
                    codes::NET_CONNECT_FAILED,
                    format!("cannot build the http client: {}", detail(e)),
                )
            })?;
        let mut req = client.request(method.clone(), url.clone());
        if let Some(b) = body {
            req = req.body(b.to_owned());
        }
        req.send().await.map_err(|e| {
            if e.is_timeout() && !e.is_connect() {
                OpError::new(
                    codes::LIMIT_TIMEOUT,
                    format!("`{host}` did not answer within {} ms", timeout.as_millis()),
                )
            } else {
                OpError::new(
                    codes::NET_CONNECT_FAILED,
                    format!("cannot fetch from `{host}`: {}", detail(e)),
                )
            }
        })
    }
}

/// Streams the body (refusing it once it outgrows `max_bytes`) and builds the result.
async fn read_response(
    mut resp: reqwest::Response,
    url: Url,
    max_bytes: u64,
) -> Result<serde_json::Value, OpError> {
    if resp.content_length().is_some_and(|n| n > max_bytes) {
        return Err(too_large(max_bytes));
    }
    let status = resp.status().as_u16();
    let mut headers = serde_json::Map::new();
    for name in HEADER_ALLOWLIST {
        if let Some(v) = resp.headers().get(name).and_then(|v| v.to_str().ok()) {
            headers.insert(name.to_owned(), serde_json::Value::String(v.to_owned()));
        }
    }
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let chunk = resp.chunk().await.map_err(|e| {
            OpError::new(
                codes::NET_BAD_RESPONSE,
                format!("the response body broke off: {}", detail(e)),
            )
        })?;
        let Some(chunk) = chunk else { break };
        if (buf.len() as u64).saturating_add(chunk.len() as u64) > max_bytes {
            return Err(too_large(max_bytes));
        }
        buf.extend_from_slice(&chunk);
    }
    let (body, encoding) = match String::from_utf8(buf) {
        Ok(text) => (text, "utf-8"),
        Err(e) => (base64(e.as_bytes()), "base64"),
    };
    Ok(serde_json::json!({
        "status": status,
        "url": url.as_str(),
        "headers": headers,
        "body": body,
        "encoding": encoding,
        "truncated": false,
    }))
}

/// Standard base64 (RFC 4648, with padding): twenty lines instead of a dependency.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (raw, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), enc);
        }
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[tokio::test]
    async fn a_redirect_hop_to_an_internal_address_is_refused_before_connecting() {
        for host in [
            "169.254.169.254",
            "10.0.0.1",
            "127.0.0.1",
            "::1",
            "localhost",
        ] {
            let r = resolve_checked(host, 80, true).await;
            assert_eq!(
                r.map_err(|e| e.code),
                Err(codes::POLICY_PRIVATE_ADDRESS),
                "{host}"
            );
        }
        assert!(resolve_checked("127.0.0.1", 80, false).await.is_ok());
    }

    #[tokio::test]
    async fn the_pinned_resolver_answers_only_for_the_checked_host() {
        let addr = SocketAddr::from(([93, 184, 216, 34], 80));
        let r = PinnedResolver {
            host: "example.com".to_owned(),
            addrs: vec![addr],
        };
        let mut ok = match "example.com".parse::<Name>() {
            Ok(n) => r.resolve(n).await.map_err(|e| e.to_string()),
            Err(_) => Err("name".to_owned()),
        };
        assert_eq!(ok.as_mut().ok().and_then(|a| a.next()), Some(addr));
        let other = match "evil.example".parse::<Name>() {
            Ok(n) => r.resolve(n).await.is_err(),
            Err(_) => false,
        };
        assert!(other);
    }
}
