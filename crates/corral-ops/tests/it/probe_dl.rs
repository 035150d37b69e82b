//! PROBE (security review of http.download): to be deleted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::error::Error;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral_exec::{Backend, BoxFuture, ExecError, ExecOutput, ExecRequest};
use corral_ops::http::{FetchConfig, HttpFetch, UrlCheck};
use corral_ops::{Op, OpCtx, OpError, OpOutput};
use corral_policy::scope::{PathScope, PathScopeSpec, SymlinkMode, UrlScope, UrlScopeSpec};
use corral_policy::{
    ArgValue, Args, Catalog, Decision, Engine, Limits, Policy, Principal, Request, Rule, Selector,
    codes,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

type TestResult = Result<(), Box<dyn Error>>;

#[derive(Clone)]
struct Srv {
    addr: SocketAddr,
    go: Arc<Notify>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Srv {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let s = Srv {
            addr,
            go: Arc::new(Notify::new()),
            seen: Arc::default(),
        };
        let s2 = s.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(handle(sock, s2.clone()));
            }
        });
        s
    }
    fn url(&self, p: &str) -> String {
        format!("http://{}{p}", self.addr)
    }
}

async fn handle(mut sock: TcpStream, s: Srv) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let mut first = head.lines().next().unwrap_or_default().split(' ');
    let method = first.next().unwrap_or_default().to_owned();
    let path = first.next().unwrap_or_default().to_owned();
    s.seen.lock().unwrap().push(format!("{method} {path}"));
    let port = s.addr.port();
    match path.as_str() {
        "/small" => {
            sock.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nDOWNLOADED",
            )
            .await?;
        }
        // 10 bytes of a promised 1000, then (when told) the connection drops: a broken body.
        "/break" => {
            sock.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: close\r\n\r\nPARTIAL123",
            )
            .await?;
            sock.flush().await?;
            s.go.notified().await;
            return Ok(()); // dropped: body broke off
        }
        // 10 bytes of a promised 1000, then nothing for 30 s: the call's timeout fires.
        "/stall" => {
            sock.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: close\r\n\r\nPARTIAL123",
            )
            .await?;
            sock.flush().await?;
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        // 2 MiB, chunked, no Content-Length.
        "/chunked" => {
            sock.write_all(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            )
            .await?;
            let chunk = vec![b'c'; 64 * 1024];
            for _ in 0..32 {
                sock.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                    .await?;
                sock.write_all(&chunk).await?;
                sock.write_all(b"\r\n").await?;
            }
            sock.write_all(b"0\r\n\r\n").await?;
        }
        // Content-Length says 5; 200 000 bytes follow.
        "/cl-lie" => {
            sock.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n")
                .await?;
            let _ = sock.write_all(&vec![b'L'; 200_000]).await;
        }
        // A gzip-encoded body is saved as sent (never decompressed).
        "/gzip" => {
            sock.write_all(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
                .await?;
        }
        // To the other host name of the same server (rule B), 2 MiB there.
        "/to-b" => {
            let to = format!("http://localhost:{port}/chunked");
            sock.write_all(
                format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await?;
        }
        "/loop" => {
            sock.write_all(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /loop\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await?;
        }
        _ => {
            sock.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await?;
        }
    }
    sock.shutdown().await
}

#[derive(Debug)]
struct NoBackend;
impl Backend for NoBackend {
    fn name(&self) -> &'static str {
        "none"
    }
    fn preflight(&self) -> Result<(), ExecError> {
        Err(ExecError::Unavailable {
            backend: "none",
            missing: "no".to_owned(),
        })
    }
    fn run(&self, _req: ExecRequest) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        Box::pin(async {
            Err(ExecError::Unavailable {
                backend: "none",
                missing: "no".to_owned(),
            })
        })
    }
}

fn url_scope(hosts: &[&str], port: u16, methods: Option<Vec<String>>) -> UrlScope {
    UrlScope::compile(UrlScopeSpec {
        hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
        schemes: Some(vec!["http".to_owned()]),
        ports: Some(vec![port]),
        block_private: false,
        methods,
        ..UrlScopeSpec::default()
    })
    .unwrap()
}

fn path_scope(root: &Path, symlinks: SymlinkMode) -> PathScope {
    PathScope::compile(PathScopeSpec {
        roots: vec![root.to_string_lossy().into_owned()],
        symlinks,
        unsafe_: symlinks == SymlinkMode::Follow,
        ..PathScopeSpec::default()
    })
    .unwrap()
}

fn dl_rule(name: &str, srv: &Srv, host: &str, root: &Path, max_bytes: Option<u64>) -> Rule {
    let catalog = Catalog::builtin();
    Rule::allow(
        name,
        vec![Selector::parse("http.download", &catalog).unwrap()],
    )
    .urls(url_scope(&[host], srv.addr.port(), None))
    .paths(path_scope(root, SymlinkMode::Within))
    .limits(Limits {
        max_bytes,
        timeout: Some(Duration::from_secs(10)),
        ..Limits::NONE
    })
}

/// What the guard's `url_check` does (crates/corral-guard/src/gateway/chain.rs).
fn guard_check(engine: Arc<Engine>, args: Args) -> UrlCheck {
    Arc::new(move |url: &str, method: &str| {
        let args = args
            .clone()
            .with("url", ArgValue::Str(url.to_owned()))
            .with("method", ArgValue::Str(method.to_owned()));
        match engine.decide(&Request {
            op: "http.download",
            principal: &Principal::new("tester", &[]),
            args: &args,
        }) {
            Decision::Allowed(a) => a
                .url
                .ok_or_else(|| OpError::new(codes::POLICY_URL_NOT_ALLOWED, "no url")),
            other => Err(OpError::new(
                other.code().unwrap_or(codes::POLICY_URL_NOT_ALLOWED),
                format!("redirect to `{url}` is refused by the policy"),
            )),
        }
    })
}

/// Decides with `engine` and runs `http.download` of `url` into `dest`.
async fn run(
    engine: Arc<Engine>,
    url: &str,
    dest: &str,
    protected: Vec<PathBuf>,
) -> Result<serde_json::Value, OpError> {
    let catalog = Catalog::builtin();
    let spec = catalog.get("http.download").cloned().unwrap();
    let principal = Principal::new("tester", &[]);
    let args = Args::new().str("url", url).str("path", dest);
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
    eprintln!("grant rule={} limits={:?}", grant.rule.name, grant.limits);
    let op = HttpFetch::new(spec.clone(), FetchConfig::default());
    let ctx = OpCtx {
        op: spec,
        principal,
        act_chain: Vec::new(),
        args: args.clone(),
        grant,
        backend: Arc::new(NoBackend),
        protected,
        request_id: "probe".to_owned(),
        url_check: Some(guard_check(engine.clone(), args)),
        egress_log: None,
    };
    match op.call(ctx).await? {
        OpOutput::Json { value, .. } => Ok(value),
        OpOutput::Stream(_) => Err(OpError::new("probe", "stream")),
    }
}

fn engine1(srv: &Srv, root: &Path, max: Option<u64>) -> Arc<Engine> {
    Arc::new(Engine::new(
        Catalog::builtin(),
        Policy::new().rule(dl_rule("dl", srv, "127.0.0.1", root, max)),
    ))
}

fn code<T: std::fmt::Debug>(r: &Result<T, OpError>) -> Option<&'static str> {
    r.as_ref().err().map(|e| e.code)
}

async fn wait_for_len(p: &Path, n: u64) {
    for _ in 0..500 {
        if std::fs::metadata(p).map(|m| m.len()).unwrap_or(0) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never reached {n} bytes", p.display());
}

// ---------------------------------------------------------------------------------------------

/// A download cut by the call's timeout leaves its partial file (and an existing file it
/// replaced is truncated and partly overwritten): `discard` never runs when the future is
/// dropped by `tokio::time::timeout`.
#[tokio::test]
async fn probe_timeout_leaves_partial_file() -> TestResult {
    let srv = Srv::start().await;
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("precious.txt"),
        "ORIGINAL CONTENT THAT MATTERS",
    )?;
    let catalog = Catalog::builtin();
    let rule = Rule::allow(
        "dl",
        vec![Selector::parse("http.download", &catalog).unwrap()],
    )
    .urls(url_scope(&["127.0.0.1"], srv.addr.port(), None))
    .paths(path_scope(dir.path(), SymlinkMode::Within))
    .limits(Limits {
        timeout: Some(Duration::from_millis(700)),
        ..Limits::NONE
    });
    let engine = Arc::new(Engine::new(catalog, Policy::new().rule(rule)));
    let r = run(engine.clone(), &srv.url("/stall"), "precious.txt", vec![]).await;
    eprintln!("timeout result: {r:?}");
    assert_eq!(code(&r), Some(codes::LIMIT_TIMEOUT));
    let left = std::fs::read_to_string(dir.path().join("precious.txt"));
    eprintln!("after a timed-out download, precious.txt = {left:?}");
    let r = run(engine, &srv.url("/stall"), "new.bin", vec![]).await;
    assert_eq!(code(&r), Some(codes::LIMIT_TIMEOUT));
    eprintln!(
        "after a timed-out download, new.bin = {:?}",
        std::fs::read_to_string(dir.path().join("new.bin"))
    );
    Ok(())
}

/// A failed download (body over max_bytes, chunked) into an existing file: the original is
/// truncated, then deleted.
#[tokio::test]
async fn probe_failed_download_destroys_existing_file() -> TestResult {
    let srv = Srv::start().await;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("report.csv"), "a,b\n1,2\n")?;
    let r = run(
        engine1(&srv, dir.path(), Some(100_000)),
        &srv.url("/chunked"),
        "report.csv",
        vec![],
    )
    .await;
    eprintln!("result: {r:?}");
    assert_eq!(code(&r), Some(codes::LIMIT_TOO_LARGE));
    eprintln!(
        "report.csv exists after the failed download: {}",
        dir.path().join("report.csv").exists()
    );
    Ok(())
}

/// While the body streams, the target is renamed away and another file takes its name:
/// `discard` deletes that other file (delete by name, not by the inode it wrote).
#[tokio::test]
async fn probe_discard_deletes_a_swapped_in_file() -> TestResult {
    let srv = Srv::start().await;
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    std::fs::write(root.join("victim.txt"), "someone else's file")?;
    let target = root.join("dl.bin");
    let eng = engine1(&srv, root, None);
    let url = srv.url("/break");
    let task = tokio::spawn(async move { run(eng, &url, "dl.bin", vec![]).await });
    wait_for_len(&target, 10).await;
    // The swap: what the download wrote moves away, the victim takes its name.
    std::fs::rename(&target, root.join("moved-away.bin"))?;
    std::fs::rename(root.join("victim.txt"), &target)?;
    srv.go.notify_one();
    let r = task.await?;
    eprintln!("result: {r:?}");
    eprintln!(
        "dl.bin (the victim, renamed there) exists: {}; moved-away.bin (what was written) exists: {} = {:?}",
        target.exists(),
        root.join("moved-away.bin").exists(),
        std::fs::read_to_string(root.join("moved-away.bin"))
    );
    Ok(())
}

/// The same with an empty directory swapped in: `discard` removes a directory.
#[tokio::test]
async fn probe_discard_removes_a_swapped_in_directory() -> TestResult {
    let srv = Srv::start().await;
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    let target = root.join("dl.bin");
    let eng = engine1(&srv, root, None);
    let url = srv.url("/break");
    let task = tokio::spawn(async move { run(eng, &url, "dl.bin", vec![]).await });
    wait_for_len(&target, 10).await;
    std::fs::rename(&target, root.join("moved-away.bin"))?;
    std::fs::create_dir(&target)?;
    // A non-empty one would be refused (unlinkat REMOVEDIR), so an empty one.
    srv.go.notify_one();
    let r = task.await?;
    eprintln!("result: {r:?}");
    eprintln!(
        "dl.bin (a directory swapped in) still exists: {}",
        target.exists()
    );
    // Non-empty directory: held?
    let target2 = root.join("dl2.bin");
    let eng = engine1(&srv, root, None);
    let url = srv.url("/break");
    let task = tokio::spawn(async move { run(eng, &url, "dl2.bin", vec![]).await });
    wait_for_len(&target2, 10).await;
    std::fs::rename(&target2, root.join("moved-away2.bin"))?;
    std::fs::create_dir(&target2)?;
    std::fs::write(target2.join("important"), "tree content")?;
    srv.go.notify_one();
    let r = task.await?;
    eprintln!("result: {r:?}");
    eprintln!(
        "dl2.bin/important (a non-empty dir swapped in) still exists: {}",
        target2.join("important").exists()
    );
    Ok(())
}

/// The parent directory is swapped for a symlink to another directory beneath the root:
/// `discard` deletes the same name there.
#[tokio::test]
async fn probe_discard_follows_a_swapped_parent_symlink() -> TestResult {
    let srv = Srv::start().await;
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    std::fs::create_dir(root.join("incoming"))?;
    std::fs::create_dir(root.join("published"))?;
    std::fs::write(root.join("published/app.bin"), "the released binary")?;
    let target = root.join("incoming/app.bin");
    let eng = engine1(&srv, root, None);
    let url = srv.url("/break");
    let task = tokio::spawn(async move { run(eng, &url, "incoming/app.bin", vec![]).await });
    wait_for_len(&target, 10).await;
    std::fs::rename(root.join("incoming"), root.join("incoming.old"))?;
    std::os::unix::fs::symlink("published", root.join("incoming"))?;
    srv.go.notify_one();
    let r = task.await?;
    eprintln!("result: {r:?}");
    eprintln!(
        "published/app.bin still exists: {}; incoming.old/app.bin (what was written) exists: {}",
        root.join("published/app.bin").exists(),
        root.join("incoming.old/app.bin").exists()
    );
    Ok(())
}

/// The target is swapped for a symlink to a file after the open: `discard` must remove the
/// symlink only.
#[tokio::test]
async fn probe_discard_with_a_swapped_in_symlink_removes_only_the_link() -> TestResult {
    let srv = Srv::start().await;
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    std::fs::write(root.join("keep.txt"), "keep me")?;
    let target = root.join("dl.bin");
    let eng = engine1(&srv, root, None);
    let url = srv.url("/break");
    let task = tokio::spawn(async move { run(eng, &url, "dl.bin", vec![]).await });
    wait_for_len(&target, 10).await;
    std::fs::remove_file(&target)?;
    std::os::unix::fs::symlink("keep.txt", &target)?;
    srv.go.notify_one();
    let r = task.await?;
    eprintln!("result: {r:?}");
    assert!(root.join("keep.txt").exists());
    assert!(!target.exists() && target.symlink_metadata().is_err());
    Ok(())
}

/// Redirect to a host admitted by ANOTHER rule with a smaller max_bytes: the first grant's
/// limits apply to the whole chain.
#[tokio::test]
async fn probe_redirect_escapes_the_second_rules_max_bytes() -> TestResult {
    let srv = Srv::start().await;
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    let engine = Arc::new(Engine::new(
        Catalog::builtin(),
        Policy::new()
            .rule(dl_rule("a-big", &srv, "127.0.0.1", root, Some(50 << 20)))
            .rule(dl_rule("b-small", &srv, "localhost", root, Some(1000))),
    ));
    // Directly from b: refused by b's 1000 bytes.
    let direct = run(
        engine.clone(),
        &format!("http://localhost:{}/chunked", srv.addr.port()),
        "direct.bin",
        vec![],
    )
    .await;
    eprintln!(
        "direct from b: {:?}",
        direct.as_ref().map(|v| v["bytes"].clone())
    );
    // Through a's redirect: b's limit is not applied.
    let via = run(engine, &srv.url("/to-b"), "via.bin", vec![]).await;
    eprintln!(
        "via a's redirect: {:?}",
        via.as_ref().map(|v| (v["url"].clone(), v["bytes"].clone()))
    );
    Ok(())
}

/// A download refused by the op after the fetch (a `HEAD` name, a path inside a repository, a
/// protected directory reached through a symlink): was the GET sent anyway?
#[tokio::test]
async fn probe_refused_saves_still_fetch() -> TestResult {
    let srv = Srv::start().await;
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    let state = root.join("state");
    std::fs::create_dir(&state)?;
    std::fs::write(state.join("corral.db"), "DB")?;
    std::os::unix::fs::symlink("state", root.join("st"))?;
    std::fs::create_dir_all(root.join("repo/.git"))?;
    std::fs::write(root.join("repo/.git/HEAD"), "ref: refs/heads/main\n")?;
    std::fs::create_dir_all(root.join("bare/refs"))?;
    std::fs::create_dir_all(root.join("bare/objects"))?;
    std::fs::write(root.join("bare/HEAD"), "ref: refs/heads/main\n")?;
    for dest in [
        "st/corral.db",
        "st/new.db",
        "repo/file.txt",
        "repo/.git/config",
        "repo/.git/hooks/pre-commit",
        "bare/config",
        "sub/../HEAD",
        "HEAD",
        "../escape.txt",
        "state/../../escape.txt",
        ".git/config",
    ] {
        let before = srv.seen.lock().unwrap().len();
        let r = run(
            engine1(&srv, root, None),
            &srv.url("/small"),
            dest,
            vec![state.clone()],
        )
        .await;
        let after = srv.seen.lock().unwrap().len();
        eprintln!(
            "{dest:>28}: {:<40} fetched={}",
            format!("{:?}", r.as_ref().map(|_| "SAVED").map_err(|e| e.code)),
            after > before
        );
    }
    assert_eq!(std::fs::read_to_string(state.join("corral.db"))?, "DB");
    assert!(!state.join("new.db").exists());
    Ok(())
}

/// max_bytes with chunked encoding, a Content-Length that lies, gzip and a redirect loop.
#[tokio::test]
async fn probe_max_bytes_and_encodings() -> TestResult {
    let srv = Srv::start().await;
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    let r = run(
        engine1(&srv, root, Some(1000)),
        &srv.url("/chunked"),
        "c.bin",
        vec![],
    )
    .await;
    eprintln!("chunked 2MiB, max 1000: {:?}", code(&r));
    assert_eq!(code(&r), Some(codes::LIMIT_TOO_LARGE));
    assert!(!root.join("c.bin").exists());
    let r = run(
        engine1(&srv, root, Some(1000)),
        &srv.url("/cl-lie"),
        "l.bin",
        vec![],
    )
    .await;
    eprintln!(
        "CL 5 then 200000 bytes: {:?} file={:?}",
        r.as_ref().map(|v| v["bytes"].clone()),
        std::fs::metadata(root.join("l.bin")).map(|m| m.len())
    );
    let r = run(
        engine1(&srv, root, Some(1000)),
        &srv.url("/gzip"),
        "g.bin",
        vec![],
    )
    .await;
    eprintln!(
        "gzip: {:?} file={:?}",
        r.as_ref().map(|v| v["bytes"].clone()),
        std::fs::read(root.join("g.bin"))
    );
    let r = run(
        engine1(&srv, root, None),
        &srv.url("/loop"),
        "loop.bin",
        vec![],
    )
    .await;
    eprintln!(
        "loop: {:?} exists={}",
        code(&r),
        root.join("loop.bin").exists()
    );
    assert_eq!(code(&r), Some(codes::NET_TOO_MANY_REDIRECTS));
    Ok(())
}

/// A deny rule with `methods: [GET]` on http.download; and an http.download decision given a
/// `method` argument (the op has no such param: only the guard's args check stands between).
#[tokio::test]
async fn probe_method_argument_on_download() -> TestResult {
    let srv = Srv::start().await;
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    let catalog = Catalog::builtin();
    let deny_get = Rule::deny(
        "no-get",
        vec![Selector::parse("http.download", &catalog).unwrap()],
    )
    .urls(url_scope(
        &["127.0.0.1"],
        srv.addr.port(),
        Some(vec!["GET".into()]),
    ));
    let engine = Engine::new(
        catalog,
        Policy::new()
            .rule(dl_rule("dl", &srv, "127.0.0.1", root, None))
            .rule(deny_get),
    );
    let p = Principal::new("tester", &[]);
    for m in [None, Some("HEAD"), Some("head"), Some("PUT")] {
        let mut args = Args::new().str("url", &srv.url("/small")).str("path", "x");
        if let Some(m) = m {
            args = args.str("method", m);
        }
        let d = engine.decide(&Request {
            op: "http.download",
            principal: &p,
            args: &args,
        });
        eprintln!(
            "method {m:?}: allowed={} {:?}",
            matches!(d, Decision::Allowed(_)),
            d.code()
        );
    }
    // Non-string method on http.fetch: engine treats as GET.
    let catalog = Catalog::builtin();
    let fetch_allow = Rule::allow("f", vec![Selector::parse("http.fetch", &catalog).unwrap()])
        .urls(url_scope(
            &["127.0.0.1"],
            srv.addr.port(),
            Some(vec!["GET".into(), "DELETE".into()]),
        ));
    let fetch_deny = Rule::deny("nd", vec![Selector::parse("http.fetch", &catalog).unwrap()]).urls(
        url_scope(&["127.0.0.1"], srv.addr.port(), Some(vec!["DELETE".into()])),
    );
    let engine = Engine::new(catalog, Policy::new().rule(fetch_allow).rule(fetch_deny));
    for v in [
        ArgValue::Int(1),
        ArgValue::List(vec!["DELETE".into()]),
        ArgValue::Str("delete".into()),
        ArgValue::Str("Delete".into()),
        ArgValue::Str(" DELETE".into()),
        ArgValue::Str("DELETE\0".into()),
        ArgValue::Str("DELETE ".into()),
    ] {
        let args = Args::new()
            .str("url", &srv.url("/small"))
            .with("method", v.clone());
        let d = engine.decide(&Request {
            op: "http.fetch",
            principal: &p,
            args: &args,
        });
        let spec = Catalog::builtin().get("http.fetch").cloned().unwrap();
        let valid = corral_policy::validate_args(&spec, &args).map_err(|e| e.code);
        eprintln!(
            "fetch method {v:?}: engine allowed={} validate_args={valid:?}",
            matches!(d, Decision::Allowed(_))
        );
    }
    Ok(())
}

/// Symlinks at open time: out of the root, into a denied name; the secret must stay intact.
#[tokio::test]
async fn probe_symlinks_at_open() -> TestResult {
    let srv = Srv::start().await;
    let outside = tempfile::tempdir()?;
    std::fs::write(outside.path().join("victim"), "outside")?;
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    std::fs::write(root.join(".env"), "SECRET=1")?;
    std::os::unix::fs::symlink(".env", root.join("innocent.txt"))?;
    std::os::unix::fs::symlink(outside.path(), root.join("out"))?;
    std::os::unix::fs::symlink(outside.path().join("victim"), root.join("v"))?;
    std::os::unix::fs::symlink("nonexistent-target", root.join("dangling"))?;
    let catalog = Catalog::builtin();
    let rule = Rule::allow(
        "dl",
        vec![Selector::parse("http.download", &catalog).unwrap()],
    )
    .urls(url_scope(&["127.0.0.1"], srv.addr.port(), None))
    .paths(
        PathScope::compile(PathScopeSpec {
            roots: vec![root.to_string_lossy().into_owned()],
            deny: vec![".env".into()],
            ..PathScopeSpec::default()
        })
        .unwrap(),
    );
    let engine = Arc::new(Engine::new(catalog, Policy::new().rule(rule)));
    for dest in ["innocent.txt", "out/x.bin", "v", "dangling"] {
        let r = run(engine.clone(), &srv.url("/small"), dest, vec![]).await;
        eprintln!("{dest}: {:?}", r.as_ref().map(|_| "SAVED").map_err(|e| e.code));
    }
    eprintln!(
        ".env = {:?}, outside/victim = {:?}, outside/x.bin exists {}, nonexistent-target exists {}",
        std::fs::read_to_string(root.join(".env")),
        std::fs::read_to_string(outside.path().join("victim")),
        outside.path().join("x.bin").exists(),
        root.join("nonexistent-target").exists()
    );
    Ok(())
}
