//! `http.fetch` against a real local HTTP/1.1 server.
//!
//! The server is on loopback, so a fetch that must succeed uses a grant with
//! `block_private: false`; the refusal tests turn it on and check that the server saw no
//! connection at all.

use std::error::Error;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral_exec::{Backend, BoxFuture, ExecError, ExecOutput, ExecRequest};
use corral_ops::http::{FetchConfig, HttpFetch, UrlCheck};
use corral_ops::{Op, OpCtx, OpError, OpOutput};
use corral_policy::scope::{SymlinkMode, UrlGrant, UrlScope, UrlScopeSpec};
use corral_policy::{Allowed, Args, Catalog, Limits, Principal, ResolvedCheck, RuleRef, codes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type TestResult = Result<(), Box<dyn Error>>;

// ---------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 server: one request per connection, `Connection: close`.

struct Server {
    addr: SocketAddr,
    /// Connections accepted.
    conns: Arc<AtomicUsize>,
    /// `METHOD /path` of every request read.
    seen: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start() -> Result<Self, Box<dyn Error>> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let conns = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (c, s) = (conns.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(handle(sock, s.clone()));
            }
        });
        Ok(Self { addr, conns, seen })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn conns(&self) -> usize {
        self.conns.load(Ordering::SeqCst)
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

async fn respond(
    sock: &mut TcpStream,
    status: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status}\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    sock.write_all(head.as_bytes()).await?;
    sock.write_all(body).await?;
    sock.shutdown().await
}

async fn redirect(sock: &mut TcpStream, status: &str, to: &str) -> std::io::Result<()> {
    respond(sock, status, &[("Location", to)], b"").await
}

async fn handle(mut sock: TcpStream, seen: Arc<Mutex<Vec<String>>>) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.lines();
    let mut first = lines.next().unwrap_or_default().split(' ');
    let method = first.next().unwrap_or_default().to_owned();
    let path = first.next().unwrap_or_default().to_owned();
    let len: usize = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..]).into_owned();
    if let Ok(mut s) = seen.lock() {
        s.push(format!("{method} {path}"));
    }

    match path.as_str() {
        "/ok" => {
            respond(
                &mut sock,
                "200 OK",
                &[
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("ETag", "\"v1\""),
                    ("X-Internal-Secret", "s3cret"),
                ],
                b"hello",
            )
            .await
        }
        "/echo" => {
            let text = format!("{method} {body}");
            respond(&mut sock, "200 OK", &[], text.as_bytes()).await
        }
        "/bin" => respond(&mut sock, "200 OK", &[], &[0xff, 0xfe, 0x00]).await,
        "/to-metadata" => {
            redirect(
                &mut sock,
                "302 Found",
                "http://169.254.169.254/latest/meta-data/",
            )
            .await
        }
        "/loop" => redirect(&mut sock, "302 Found", "/loop").await,
        "/see-other" => redirect(&mut sock, "303 See Other", "/echo").await,
        "/keep-method" => redirect(&mut sock, "307 Temporary Redirect", "/echo").await,
        "/bad-location" => redirect(&mut sock, "302 Found", "http://[::1").await,
        "/big" => respond(&mut sock, "200 OK", &[], &vec![b'x'; 2 * 1024 * 1024]).await,
        "/endless" => {
            // No Content-Length: the body runs until the client hangs up.
            sock.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                .await?;
            let chunk = vec![b'x'; 64 * 1024];
            loop {
                sock.write_all(&chunk).await?;
            }
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(10)).await;
            respond(&mut sock, "200 OK", &[], b"late").await
        }
        p => match p.strip_prefix("/hop/").and_then(|n| n.parse::<u32>().ok()) {
            Some(0) => respond(&mut sock, "200 OK", &[], b"landed").await,
            Some(n) => redirect(&mut sock, "302 Found", &format!("/hop/{}", n - 1)).await,
            None => respond(&mut sock, "404 Not Found", &[], b"").await,
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Building the context by hand.

#[derive(Debug)]
struct NoBackend;

impl Backend for NoBackend {
    fn name(&self) -> &'static str {
        "none"
    }

    fn preflight(&self) -> Result<(), ExecError> {
        Err(self.unavailable())
    }

    fn run(&self, _req: ExecRequest) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        Box::pin(async { Err(self.unavailable()) })
    }
}

impl NoBackend {
    fn unavailable(&self) -> ExecError {
        ExecError::Unavailable {
            backend: "none",
            missing: "the http tests run no commands".to_owned(),
        }
    }
}

fn op() -> Result<HttpFetch, Box<dyn Error>> {
    let spec = Catalog::builtin()
        .get("http.fetch")
        .cloned()
        .ok_or("http.fetch is a built-in op")?;
    Ok(HttpFetch::new(spec, FetchConfig::default()))
}

struct Call {
    url: String,
    block_private: bool,
    limits: Limits,
    url_check: Option<UrlCheck>,
    method: Option<&'static str>,
    body: Option<&'static str>,
}

impl Call {
    fn new(url: &str, block_private: bool) -> Self {
        Self {
            url: url.to_owned(),
            block_private,
            limits: Limits {
                timeout: Some(Duration::from_secs(10)),
                ..Limits::NONE
            },
            url_check: None,
            method: None,
            body: None,
        }
    }

    fn check(mut self, c: UrlCheck) -> Self {
        self.url_check = Some(c);
        self
    }

    async fn run(self) -> Result<serde_json::Value, OpError> {
        let mut args = Args::new().str("url", &self.url);
        if let Some(m) = self.method {
            args = args.str("method", m);
        }
        if let Some(b) = self.body {
            args = args.str("body", b);
        }
        let op = op().map_err(|e| OpError::new("test.setup", e.to_string()))?;
        let ctx = OpCtx {
            op: op.spec().clone(),
            principal: Principal::new("tester", &[]),
            act_chain: Vec::new(),
            args,
            grant: Allowed {
                rule: RuleRef {
                    index: 0,
                    name: Arc::from("fetch"),
                },
                paths: Vec::new(),
                command: None,
                url: Some(UrlGrant {
                    url: self.url,
                    block_private: self.block_private,
                }),
                agent: None,
                limits: self.limits,
                symlinks: SymlinkMode::default(),
                roots: Vec::new(),
                readonly: false,
                resolved: ResolvedCheck::new(Arc::default(), Principal::new("tester", &[])),
            },
            backend: Arc::new(NoBackend),
            protected: Vec::new(),
            request_id: "test".to_owned(),
            url_check: self.url_check,
            egress_log: None,
        };
        match op.call(ctx).await? {
            OpOutput::Json { value, .. } => Ok(value),
            OpOutput::Stream(_) => Err(OpError::new("test.stream", "unexpected stream")),
        }
    }
}

/// What the guard does: the url scope of a rule decides the redirect target again.
fn scope_check(hosts: &[&str], port: u16, block_private: bool) -> Result<UrlCheck, Box<dyn Error>> {
    let scope = UrlScope::compile(UrlScopeSpec {
        hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
        schemes: Some(vec!["http".to_owned()]),
        ports: Some(vec![80, port]),
        paths: None,
        block_private,
        methods: Some(vec![
            "GET".into(),
            "HEAD".into(),
            "PUT".into(),
            "POST".into(),
        ]),
    })?;
    Ok(Arc::new(move |url: &str, method: &str| {
        scope
            .check(url, method)
            .map_err(|r| OpError::new(r.code(), format!("`{url}` is refused")))
    }))
}

fn code<T>(r: &Result<T, OpError>) -> Option<&'static str> {
    r.as_ref().err().map(|e| e.code)
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_allowed_fetch_returns_status_body_and_allowlisted_headers() -> TestResult {
    let srv = Server::start().await?;
    let v = Call::new(&srv.url("/ok"), false).run().await?;
    assert_eq!(v["status"], 200);
    assert_eq!(v["body"], "hello");
    assert_eq!(v["encoding"], "utf-8");
    assert_eq!(v["truncated"], false);
    assert_eq!(v["url"], srv.url("/ok"));
    assert_eq!(v["headers"]["content-type"], "text/plain; charset=utf-8");
    assert_eq!(v["headers"]["etag"], "\"v1\"");
    assert_eq!(v["headers"]["content-length"], "5");
    assert!(v["headers"].get("x-internal-secret").is_none());
    assert_eq!(srv.seen(), ["GET /ok"]);
    Ok(())
}

#[tokio::test]
async fn method_and_body_are_sent() -> TestResult {
    let srv = Server::start().await?;
    let mut call = Call::new(&srv.url("/echo"), false);
    call.method = Some("PUT");
    call.body = Some("payload");
    let v = call.run().await?;
    assert_eq!(v["body"], "PUT payload");
    Ok(())
}

#[tokio::test]
async fn a_body_that_is_not_utf8_comes_back_in_base64() -> TestResult {
    let srv = Server::start().await?;
    let v = Call::new(&srv.url("/bin"), false).run().await?;
    assert_eq!(v["encoding"], "base64");
    assert_eq!(v["body"], "//4A");
    Ok(())
}

#[tokio::test]
async fn a_call_without_an_admitted_url_is_refused() -> TestResult {
    let op = op()?;
    let ctx = OpCtx {
        op: op.spec().clone(),
        principal: Principal::new("tester", &[]),
        act_chain: Vec::new(),
        args: Args::new().str("url", "https://example.com/"),
        grant: Allowed {
            rule: RuleRef {
                index: 0,
                name: Arc::from("fetch"),
            },
            paths: Vec::new(),
            command: None,
            url: None,
            agent: None,
            limits: Limits::NONE,
            symlinks: SymlinkMode::default(),
            roots: Vec::new(),
            readonly: false,
            resolved: ResolvedCheck::new(Arc::default(), Principal::new("tester", &[])),
        },
        backend: Arc::new(NoBackend),
        protected: Vec::new(),
        request_id: "test".to_owned(),
        url_check: None,
        egress_log: None,
    };
    let r = op.call(ctx).await;
    assert_eq!(
        r.as_ref().err().map(|e| (e.code, e.status())),
        Some((codes::POLICY_URL_NOT_ALLOWED, 403))
    );
    Ok(())
}

#[tokio::test]
async fn internal_addresses_are_refused_without_connecting() -> TestResult {
    let srv = Server::start().await?;
    let port = srv.addr.port();
    for url in [
        srv.url("/ok"),
        format!("http://localhost:{port}/ok"),
        format!("http://[::1]:{port}/ok"),
        "http://10.0.0.1/".to_owned(),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let started = Instant::now();
        let r = Call::new(&url, true).run().await;
        let e = r.as_ref().err();
        assert_eq!(
            e.map(|e| (e.code, e.status())),
            Some((codes::POLICY_PRIVATE_ADDRESS, 403)),
            "{url}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{url}: no connect attempt"
        );
        // The host is named; the message is about the host, not the resolved addresses.
        let host = url.split('/').nth(2).unwrap_or_default();
        let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
        assert!(
            e.is_some_and(|e| e.message.contains(host.trim_matches(['[', ']']))),
            "{url}"
        );
    }
    assert_eq!(srv.conns(), 0, "the server must see no connection");
    Ok(())
}

#[tokio::test]
async fn a_redirect_to_the_metadata_address_is_refused_by_the_recheck() -> TestResult {
    // The rule that would decide the redirect blocks private addresses.
    let srv = Server::start().await?;
    let check = scope_check(&["127.0.0.1", "169.254.169.254"], srv.addr.port(), true)?;
    let r = Call::new(&srv.url("/to-metadata"), false)
        .check(check)
        .run()
        .await;
    assert_eq!(code(&r), Some(codes::POLICY_PRIVATE_ADDRESS));
    assert_eq!(srv.seen(), ["GET /to-metadata"]);

    // A scope that lists only the server's host refuses the target outright.
    let check = scope_check(&["127.0.0.1"], srv.addr.port(), false)?;
    let r = Call::new(&srv.url("/to-metadata"), false)
        .check(check)
        .run()
        .await;
    assert_eq!(code(&r), Some(codes::POLICY_URL_NOT_ALLOWED));
    Ok(())
}

#[tokio::test]
async fn redirects_are_refused_when_they_cannot_be_rechecked() -> TestResult {
    let srv = Server::start().await?;
    let r = Call::new(&srv.url("/hop/1"), false).run().await;
    let e = r.as_ref().err();
    assert_eq!(
        e.map(|e| (e.code, e.status())),
        Some((codes::POLICY_URL_NOT_ALLOWED, 403))
    );
    assert_eq!(srv.seen(), ["GET /hop/1"]);
    Ok(())
}

#[tokio::test]
async fn redirects_are_followed_through_the_check_up_to_five() -> TestResult {
    let srv = Server::start().await?;
    let calls = Arc::new(Mutex::new(Vec::<String>::new()));
    let inner = scope_check(&["127.0.0.1"], srv.addr.port(), false)?;
    let rec = calls.clone();
    let check: UrlCheck = Arc::new(move |u: &str, m: &str| {
        if let Ok(mut c) = rec.lock() {
            c.push(u.to_owned());
        }
        inner(u, m)
    });

    let v = Call::new(&srv.url("/hop/5"), false)
        .check(check.clone())
        .run()
        .await?;
    assert_eq!(v["status"], 200);
    assert_eq!(v["body"], "landed");
    assert_eq!(v["url"], srv.url("/hop/0"));
    // Every target is joined to the current url before it is checked.
    let checked = calls.lock().map(|c| c.clone()).unwrap_or_default();
    assert_eq!(checked.len(), 5);
    assert_eq!(checked[0], srv.url("/hop/4"));

    let r = Call::new(&srv.url("/hop/6"), false)
        .check(check)
        .run()
        .await;
    let e = r.as_ref().err();
    assert_eq!(
        e.map(|e| (e.code, e.status())),
        Some((codes::NET_TOO_MANY_REDIRECTS, 502))
    );
    Ok(())
}

#[tokio::test]
async fn a_redirect_loop_stops() -> TestResult {
    let srv = Server::start().await?;
    let check = scope_check(&["127.0.0.1"], srv.addr.port(), false)?;
    let r = Call::new(&srv.url("/loop"), false).check(check).run().await;
    assert_eq!(code(&r), Some(codes::NET_TOO_MANY_REDIRECTS));
    assert_eq!(srv.seen().len(), 6, "the first request and five redirects");
    Ok(())
}

#[tokio::test]
async fn see_other_turns_into_a_get_and_307_keeps_the_method() -> TestResult {
    let srv = Server::start().await?;
    let check = scope_check(&["127.0.0.1"], srv.addr.port(), false)?;
    let mut call = Call::new(&srv.url("/see-other"), false).check(check.clone());
    call.method = Some("POST");
    call.body = Some("data");
    assert_eq!(call.run().await?["body"], "GET ");

    let mut call = Call::new(&srv.url("/keep-method"), false).check(check);
    call.method = Some("POST");
    call.body = Some("data");
    assert_eq!(call.run().await?["body"], "POST data");
    Ok(())
}

#[tokio::test]
async fn a_redirect_hop_is_judged_with_the_method_it_is_followed_with() -> TestResult {
    let srv = Server::start().await?;
    // Redirect targets admit reads only.
    let reads = UrlScope::compile(UrlScopeSpec {
        hosts: vec!["127.0.0.1".to_owned()],
        schemes: Some(vec!["http".to_owned()]),
        ports: Some(vec![srv.addr.port()]),
        block_private: false,
        ..UrlScopeSpec::default()
    })?;
    let check: UrlCheck = Arc::new(move |url: &str, method: &str| {
        reads
            .check(url, method)
            .map_err(|r| OpError::new(r.code(), format!("`{url}` is refused")))
    });
    // 303: followed as a GET, which the target admits.
    let mut call = Call::new(&srv.url("/see-other"), false).check(check.clone());
    call.method = Some("POST");
    call.body = Some("data");
    assert_eq!(call.run().await?["body"], "GET ");
    // 307: the POST goes on, and the target does not admit it.
    let mut call = Call::new(&srv.url("/keep-method"), false).check(check);
    call.method = Some("POST");
    call.body = Some("data");
    let r = call.run().await;
    assert_eq!(code(&r), Some("policy.method_not_allowed"), "{r:?}");
    assert!(
        !srv.seen().contains(&"POST /echo".to_owned()),
        "{:?}",
        srv.seen()
    );
    Ok(())
}

#[tokio::test]
async fn a_bad_location_is_a_bad_response() -> TestResult {
    let srv = Server::start().await?;
    let check = scope_check(&["127.0.0.1"], srv.addr.port(), false)?;
    let r = Call::new(&srv.url("/bad-location"), false)
        .check(check)
        .run()
        .await;
    assert_eq!(code(&r), Some(codes::NET_BAD_RESPONSE));
    Ok(())
}

#[tokio::test]
async fn a_response_over_max_bytes_is_too_large() -> TestResult {
    let srv = Server::start().await?;
    for path in ["/big", "/endless"] {
        let mut call = Call::new(&srv.url(path), false);
        call.limits.max_bytes = Some(1024 * 1024);
        let r = call.run().await;
        let e = r.as_ref().err();
        assert_eq!(
            e.map(|e| (e.code, e.status())),
            Some((codes::LIMIT_TOO_LARGE, 413)),
            "{path}"
        );
    }
    // Exactly at the limit is fine.
    let mut call = Call::new(&srv.url("/ok"), false);
    call.limits.max_bytes = Some(5);
    assert_eq!(call.run().await?["body"], "hello");
    Ok(())
}

#[tokio::test]
async fn a_slow_server_hits_the_timeout() -> TestResult {
    let srv = Server::start().await?;
    let mut call = Call::new(&srv.url("/slow"), false);
    call.limits.timeout = Some(Duration::from_millis(300));
    let started = Instant::now();
    let r = call.run().await;
    let e = r.as_ref().err();
    assert_eq!(
        e.map(|e| (e.code, e.status())),
        Some((codes::LIMIT_TIMEOUT, 504))
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    Ok(())
}

#[tokio::test]
async fn a_closed_port_is_a_connect_failure() -> TestResult {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    drop(listener);
    let r = Call::new(&format!("http://{addr}/"), false).run().await;
    let e = r.as_ref().err();
    assert_eq!(
        e.map(|e| (e.code, e.status())),
        Some((codes::NET_CONNECT_FAILED, 502))
    );
    Ok(())
}

#[tokio::test]
async fn an_unresolvable_host_is_a_dns_failure() -> TestResult {
    let r = Call::new("http://no-such-host.invalid/", false).run().await;
    let e = r.as_ref().err();
    assert_eq!(
        e.map(|e| (e.code, e.status())),
        Some((codes::NET_DNS_FAILED, 502))
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// `http.download`: through a real decision (a url scope and a path scope).

/// Decides `http.download` of `srv`'s `path` into `dest` (beneath `root`) and runs it.
async fn download(
    srv: &Server,
    path: &str,
    root: &std::path::Path,
    dest: &str,
    max_bytes: Option<u64>,
) -> Result<serde_json::Value, OpError> {
    download_with(srv, path, root, dest, max_bytes, false).await
}

/// [`download`], replacing an existing file when `overwrite`.
async fn download_with(
    srv: &Server,
    path: &str,
    root: &std::path::Path,
    dest: &str,
    max_bytes: Option<u64>,
    overwrite: bool,
) -> Result<serde_json::Value, OpError> {
    use corral_policy::scope::{PathScope, PathScopeSpec};
    use corral_policy::{Decision, Engine, Policy, Request, Rule, Selector};
    let setup = |e: &dyn std::fmt::Display| OpError::new("test.setup", e.to_string());
    let catalog = Catalog::builtin();
    let urls = UrlScope::compile(UrlScopeSpec {
        hosts: vec!["127.0.0.1".to_owned()],
        schemes: Some(vec!["http".to_owned()]),
        ports: Some(vec![srv.addr.port()]),
        block_private: false,
        ..UrlScopeSpec::default()
    })
    .map_err(|e| setup(&e))?;
    let paths = PathScope::compile(PathScopeSpec {
        roots: vec![root.to_string_lossy().into_owned()],
        ..PathScopeSpec::default()
    })
    .map_err(|e| setup(&e))?;
    let rule = Rule::allow(
        "dl",
        vec![Selector::parse("http.download", &catalog).map_err(|e| setup(&e))?],
    )
    .urls(urls)
    .paths(paths)
    .limits(Limits {
        max_bytes,
        timeout: Some(Duration::from_secs(10)),
        ..Limits::NONE
    });
    let spec = catalog
        .get("http.download")
        .cloned()
        .ok_or_else(|| setup(&"no op"))?;
    let engine = Engine::new(catalog, Policy::new().rule(rule));
    let principal = Principal::new("tester", &[]);
    let mut args = Args::new().str("url", &srv.url(path)).str("path", dest);
    if overwrite {
        args = args.with("overwrite", corral_policy::ArgValue::Bool(true));
    }
    let grant = match engine.decide(&Request {
        op: "http.download",
        principal: &principal,
        args: &args,
    }) {
        Decision::Allowed(a) => *a,
        other => {
            return Err(OpError::new(
                other.code().unwrap_or("?"),
                format!("{other:?}"),
            ));
        }
    };
    let op = HttpFetch::new(spec.clone(), FetchConfig::default());
    let ctx = OpCtx {
        op: spec,
        principal,
        act_chain: Vec::new(),
        args,
        grant,
        backend: Arc::new(NoBackend),
        protected: Vec::new(),
        request_id: "test".to_owned(),
        url_check: None,
        egress_log: None,
    };
    match op.call(ctx).await? {
        OpOutput::Json { value, .. } => Ok(value),
        OpOutput::Stream(_) => Err(OpError::new("test.stream", "unexpected stream")),
    }
}

#[tokio::test]
async fn a_download_saves_the_body_beneath_the_path_scope_never_in_the_result() -> TestResult {
    let srv = Server::start().await?;
    let dir = tempfile::tempdir()?;
    let v = download(&srv, "/bin", dir.path(), "out/data.bin", None).await;
    // A missing parent directory is the caller's to make.
    assert_eq!(code(&v), Some(codes::FILES_NOT_FOUND), "{v:?}");
    std::fs::create_dir(dir.path().join("out"))?;
    let v = download(&srv, "/bin", dir.path(), "out/data.bin", None).await?;
    assert_eq!(
        std::fs::read(dir.path().join("out/data.bin"))?,
        [0xff, 0xfe, 0x00]
    );
    assert_eq!(v["bytes"], 3);
    assert_eq!(v["status"], 200);
    assert_eq!(
        v["sha256"],
        "ba778c0261008c8f71ae4061ad0162ffcbe63b52c91f89f236738131d1217ec7"
    );
    assert!(v.get("body").is_none(), "{v}");
    assert_eq!(
        v["path"],
        dir.path().join("out/data.bin").to_string_lossy().as_ref()
    );
    Ok(())
}

#[tokio::test]
async fn a_failed_download_leaves_no_file() -> TestResult {
    let srv = Server::start().await?;
    let dir = tempfile::tempdir()?;
    // Over `max_bytes` (no Content-Length: cut while streaming).
    let r = download(&srv, "/endless", dir.path(), "big.bin", Some(100_000)).await;
    assert_eq!(code(&r), Some(codes::LIMIT_TOO_LARGE), "{r:?}");
    assert!(!dir.path().join("big.bin").exists());
    // Not a 2xx.
    let r = download(&srv, "/nowhere", dir.path(), "missing.html", None).await;
    assert_eq!(code(&r), Some(codes::NET_HTTP_STATUS), "{r:?}");
    assert!(!dir.path().join("missing.html").exists());
    // A path outside the scope is refused by the policy, a file named `HEAD` by the op:
    // both before anything is fetched.
    let before = srv.seen().len();
    let r = download(&srv, "/ok", dir.path(), "/etc/passwd", None).await;
    assert_eq!(code(&r), Some(codes::POLICY_PATH_OUTSIDE_SCOPE), "{r:?}");
    let r = download(&srv, "/ok", dir.path(), "HEAD", None).await;
    assert_eq!(code(&r), Some(codes::POLICY_PATH_DENIED), "{r:?}");
    assert!(!dir.path().join("HEAD").exists());
    assert_eq!(
        srv.seen().len(),
        before,
        "refused before fetching: {:?}",
        srv.seen()
    );
    // Nothing of a failed download is left beside the path either.
    let left: Vec<_> = std::fs::read_dir(dir.path())?
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    Ok(())
}

#[tokio::test]
async fn a_failed_or_timed_out_download_leaves_an_existing_file_as_it_was() -> TestResult {
    let srv = Server::start().await?;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("report.csv"), "ORIGINAL")?;
    // Too large, with `overwrite`: the original stays.
    let r = download_with(
        &srv,
        "/endless",
        dir.path(),
        "report.csv",
        Some(100_000),
        true,
    )
    .await;
    assert_eq!(code(&r), Some(codes::LIMIT_TOO_LARGE), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("report.csv"))?,
        "ORIGINAL"
    );
    // Cut by the call's timeout (the body never ends): the same.
    let r = tokio::time::timeout(
        Duration::from_millis(500),
        download_with(&srv, "/slow", dir.path(), "report.csv", None, true),
    )
    .await;
    assert!(r.is_err(), "cancelled");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("report.csv"))?,
        "ORIGINAL"
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["report.csv"], "no temporary file is left");
    // Without `overwrite` an existing file is refused; with it, replaced whole.
    let r = download(&srv, "/ok", dir.path(), "report.csv", None).await;
    assert_eq!(code(&r), Some(codes::FILES_EXISTS), "{r:?}");
    download_with(&srv, "/ok", dir.path(), "report.csv", None, true).await?;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("report.csv"))?,
        "hello"
    );
    Ok(())
}
