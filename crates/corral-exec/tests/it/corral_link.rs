//! A run whose only network is corral's own API (`RunNetwork::Corral`, a lab run's external
//! program): the program reaches `CORRAL_LINK_URL`, served in this process by the link, and
//! nothing else, not even a server on the host's loopback; the run attests `netns:corral-link`.
//! The `process` backend cannot keep that promise and refuses the run.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use corral_exec::linux::{CORRAL_LINK_URL, LinuxBackend, MAX_LINK_CONNECTIONS, PROXY_PORT};
use corral_exec::process::ProcessBackend;
use corral_exec::{Backend, CorralLink, ExecOutput, RunNetwork};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::request;

fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_corral-sandbox-helper"))
}

/// A link answering every request `hello from corral <path>`, counting the connections.
pub(crate) fn link(served: Arc<AtomicUsize>) -> CorralLink {
    CorralLink::new(move |mut conn: tokio::net::TcpStream| {
        let served = Arc::clone(&served);
        Box::pin(async move {
            served.fetch_add(1, Ordering::SeqCst);
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let path = head.split(' ').nth(1).unwrap_or("").to_owned();
            let body = format!("hello from corral {path}");
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(reply.as_bytes()).await;
            let _ = conn.shutdown().await;
        })
    })
}

async fn run_linked(script: &str, served: Arc<AtomicUsize>) -> ExecOutput {
    let mut req = request(&["/bin/sh", "-c", script]);
    req.env.push(("CORRAL_URL".into(), CORRAL_LINK_URL.into()));
    req.network = Some(RunNetwork::Corral(link(served)));
    let backend = LinuxBackend::new(helper()).with_warm_pool(0);
    match backend.run(req).await {
        Ok(out) => out,
        Err(e) => panic!("the command should run with a corral link: {e}"),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_link_url_names_the_sandboxs_listening_port() {
    assert_eq!(CORRAL_LINK_URL, format!("http://127.0.0.1:{PROXY_PORT}"));
}

#[tokio::test]
async fn a_linked_program_reaches_corral_and_its_run_attests_the_link() {
    let served = Arc::new(AtomicUsize::new(0));
    let out = run_linked(
        "curl -sS \"$CORRAL_URL/ops\"; echo; curl -sS \"$CORRAL_URL/mcp\"",
        Arc::clone(&served),
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "hello from corral /ops\nhello from corral /mcp",
        "stderr: {}",
        text(&out.stderr)
    );
    assert_eq!(served.load(Ordering::SeqCst), 2);
    assert!(out.attestation.isolated, "{:?}", out.attestation);
    assert!(
        out.attestation
            .primitives
            .iter()
            .any(|p| p == "netns:corral-link"),
        "{:?}",
        out.attestation.primitives
    );
    assert!(
        !out.attestation
            .primitives
            .iter()
            .any(|p| p == "netns:egress-proxy"),
        "{:?}",
        out.attestation.primitives
    );
}

#[tokio::test]
async fn a_linked_program_reaches_nothing_but_corral_and_gets_no_proxy_variables() {
    // A server on the host's loopback: outside the sandbox's network namespace.
    let host = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = host.local_addr().unwrap().port();
    let served = Arc::new(AtomicUsize::new(0));
    let out = run_linked(
        &format!(
            "env | grep -ci proxy; \
             curl -sS -m 5 http://127.0.0.1:{port}/ && echo REACHED-HOST; \
             curl -sS -m 5 -x \"$CORRAL_URL\" http://example.com/ | grep -q 'hello from corral http' && echo LINK-IS-NO-PROXY; \
             curl -sS -m 5 http://1.1.1.1/ && echo REACHED-OUTSIDE; true"
        ),
        Arc::clone(&served),
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("0\n"),
        "proxy variables were set: {stdout}"
    );
    assert!(!stdout.contains("REACHED-HOST"), "{stdout}");
    assert!(!stdout.contains("REACHED-OUTSIDE"), "{stdout}");
    // Through the link a proxy-form request is just a request to corral (whose own routes
    // answer it), never a way out: here the test link echoes the absolute URI it was given.
    assert!(stdout.contains("LINK-IS-NO-PROXY"), "{stdout}");
    assert_eq!(served.load(Ordering::SeqCst), 1);
}

/// A link that holds each connection until the program closes it, counting how many it serves
/// at once (now, and at most).
fn holding_link(now: Arc<AtomicUsize>, peak: Arc<AtomicUsize>) -> CorralLink {
    CorralLink::new(move |mut conn: tokio::net::TcpStream| {
        let (now, peak) = (Arc::clone(&now), Arc::clone(&peak));
        Box::pin(async move {
            let n = now.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(n, Ordering::SeqCst);
            let mut buf = [0u8; 64];
            while let Ok(1..) = conn.read(&mut buf).await {}
            now.fetch_sub(1, Ordering::SeqCst);
        })
    })
}

#[tokio::test]
async fn a_linked_program_gets_only_a_few_connections_served_at_once_however_many_it_opens() {
    // Each connection corral serves holds buffers in corral's own memory (a request head, a
    // body up to the server's limit): a program opening hundreds must not multiply them.
    let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut req = request(&[
        "/usr/bin/python3",
        "-c",
        "import socket, time\n\
         s = [socket.create_connection(('127.0.0.1', 3128)) for _ in range(64)]\n\
         for c in s: c.sendall(b'G')\n\
         time.sleep(2)\n\
         print(len(s))",
    ]);
    req.network = Some(RunNetwork::Corral(holding_link(
        Arc::clone(&now),
        Arc::clone(&peak),
    )));
    let backend = LinuxBackend::new(helper()).with_warm_pool(0);
    let out = match backend.run(req).await {
        Ok(out) => out,
        Err(e) => panic!("the command should run with a corral link: {e}"),
    };
    // Every connection was made (the others wait in the sandbox's listen backlog).
    assert_eq!(text(&out.stdout), "64\n", "stderr: {}", text(&out.stderr));
    // A few: 16 (a program opening connections in parallel still gets its answers).
    assert_eq!(MAX_LINK_CONNECTIONS, 16);
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        (1..=16).contains(&peak),
        "{peak} connections were served at once; at most 16 may be"
    );
}

/// Set when dropped.
struct Dropped(Arc<AtomicUsize>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_connection_the_link_serves_ends_with_the_run_even_if_its_serving_never_finishes() {
    // What serves a connection holds the run's world (its gateway, its mocks): the run is
    // reported destroyed only if nothing of it outlives the run.
    let (started, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (s, d) = (Arc::clone(&started), Arc::clone(&dropped));
    let stuck = CorralLink::new(move |conn: tokio::net::TcpStream| {
        let held = Dropped(Arc::clone(&d));
        s.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let _held = (held, conn);
            std::future::pending::<()>().await;
        })
    });
    let mut req = request(&[
        "/usr/bin/python3",
        "-c",
        "import socket\ns = socket.create_connection(('127.0.0.1', 3128))\nprint('connected')",
    ]);
    req.network = Some(RunNetwork::Corral(stuck));
    let backend = LinuxBackend::new(helper()).with_warm_pool(0);
    let out = match backend.run(req).await {
        Ok(out) => out,
        Err(e) => panic!("the command should run with a corral link: {e}"),
    };
    assert_eq!(text(&out.stdout), "connected\n", "{}", text(&out.stderr));
    assert_eq!(started.load(Ordering::SeqCst), 1);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the connection's serving outlived its run"
    );
}

#[tokio::test]
async fn the_process_backend_refuses_a_run_whose_only_network_is_corral() {
    let served = Arc::new(AtomicUsize::new(0));
    let mut req = request(&["/bin/true"]);
    req.network = Some(RunNetwork::Corral(link(Arc::clone(&served))));
    let err = ProcessBackend::new().run(req).await.unwrap_err();
    assert_eq!(err.code(), "isolation.unavailable");
    assert!(err.to_string().contains("backend: linux"), "{err}");
    assert_eq!(served.load(Ordering::SeqCst), 0);
}
