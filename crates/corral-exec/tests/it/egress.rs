//! The egress allow-list (issue 12 item 4): a run with `RunNetwork::Egress` reaches what the
//! allow-list admits through corral's proxy, and nothing else. Targets are loopback servers of
//! the host only (loopback is refused unless an entry names the address, so these rules do);
//! the program is `curl` inside the sandbox.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use corral_exec::linux::LinuxBackend;
use corral_exec::process::ProcessBackend;
use corral_exec::{Backend, Egress, EgressLog, EgressRecord, ExecOutput, ExecRequest, RunNetwork};
use corral_policy::scope::EgressAllowList;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::request;

fn helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_corral-sandbox-helper"))
}

/// A host HTTP server on 127.0.0.1: `/redirect` answers a 302 to `redirect_to`, anything else
/// `body`. Returns its port.
async fn server(body: &'static str, redirect_to: Option<String>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let redirect_to = redirect_to.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let reply = match (&redirect_to, head.starts_with("GET /redirect ")) {
                    (Some(to), true) => format!(
                        "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    ),
                    _ => format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    ),
                };
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    port
}

/// An egress network admitting `allow`, and the records it logs.
fn egress(allow: &[String]) -> (RunNetwork, Arc<Mutex<Vec<EgressRecord>>>) {
    let records = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&records);
    let net = RunNetwork::Egress(Egress {
        allow: EgressAllowList::parse(allow).unwrap(),
        log: EgressLog::new(move |r| sink.lock().unwrap().push(r)),
    });
    (net, records)
}

async fn run_with(net: RunNetwork, script: &str) -> ExecOutput {
    let mut req: ExecRequest = request(&["/bin/sh", "-c", script]);
    req.network = Some(net);
    let backend = LinuxBackend::new(helper()).with_warm_pool(0);
    match backend.run(req).await {
        Ok(out) => out,
        Err(e) => panic!("the command should run with an egress allow-list: {e}"),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn an_address_the_allow_list_names_is_reachable_by_plain_http_and_connect() {
    let port = server("hello from upstream", None).await;
    let (net, records) = egress(&[format!("127.0.0.1:{port}")]);
    let out = run_with(
        net,
        &format!(
            "curl -sS http://127.0.0.1:{port}/a; echo; curl -sS --proxytunnel http://127.0.0.1:{port}/b"
        ),
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "hello from upstream\nhello from upstream",
        "stderr: {}",
        text(&out.stderr)
    );
    assert!(
        out.attestation
            .primitives
            .iter()
            .any(|p| p == "netns:egress-proxy"),
        "{:?}",
        out.attestation.primitives
    );
    let records = records.lock().unwrap().clone();
    assert_eq!(records.len(), 2, "{records:?}");
    for r in &records {
        assert!(r.allowed, "{r:?}");
        assert_eq!((r.host.as_str(), r.port), ("127.0.0.1", port));
        assert!(r.bytes_up > 0 && r.bytes_down > 0, "{r:?}");
    }
}

#[tokio::test]
async fn a_host_outside_the_allow_list_is_refused_with_the_code_in_the_programs_stderr() {
    let allowed = server("allowed", None).await;
    let other = server("the other server's secret", None).await;
    let (net, records) = egress(&[format!("127.0.0.1:{allowed}")]);
    let out = run_with(
        net,
        &format!("curl -sS -v --proxytunnel http://127.0.0.1:{other}/; curl -sS http://127.0.0.1:{other}/"),
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!stdout.contains("secret"), "{stdout}");
    // CONNECT: curl prints the status line on stderr; plain HTTP: the body is the answer.
    assert!(stderr.contains("403 Forbidden (egress.denied"), "{stderr}");
    assert!(stdout.contains("corral: egress.denied"), "{stdout}");
    assert!(stdout.contains(&format!("127.0.0.1:{other}")), "{stdout}");
    let records = records.lock().unwrap().clone();
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(
        records.iter().all(|r| !r.allowed && r.port == other),
        "{records:?}"
    );
    assert!(records.iter().all(|r| r.bytes_up == 0 && r.bytes_down == 0));
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_unless_the_address_itself_is_named() {
    // DNS rebinding's end state: a name the rule allows resolves to an internal address.
    let port = server("internal service", None).await;
    let (net, records) = egress(&[format!("localhost:{port}")]);
    let out = run_with(
        net,
        &format!(
            "curl -sS -v --proxytunnel http://localhost:{port}/; curl -sS http://localhost:{port}/"
        ),
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!stdout.contains("internal service"), "{stdout}");
    assert!(stderr.contains("egress.denied"), "{stderr}");
    assert!(stdout.contains("internal address"), "{stdout}");
    let records = records.lock().unwrap().clone();
    assert_eq!(records.len(), 2, "{records:?}");
    for r in &records {
        assert!(!r.allowed, "{r:?}");
        assert!(r.addr.is_some_and(|a| a.is_loopback()), "{r:?}");
    }
}

#[tokio::test]
async fn a_redirect_to_an_unnamed_loopback_port_is_refused_on_the_next_request() {
    let secret = server("loopback secret", None).await;
    let port = server("unused", Some(format!("http://127.0.0.1:{secret}/secret"))).await;
    let (net, records) = egress(&[format!("127.0.0.1:{port}")]);
    let out = run_with(
        net,
        &format!("curl -sS -L http://127.0.0.1:{port}/redirect"),
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("loopback secret"), "{stdout}");
    assert!(stdout.contains("egress.denied"), "{stdout}");
    let records = records.lock().unwrap().clone();
    let summary: Vec<(u16, bool)> = records.iter().map(|r| (r.port, r.allowed)).collect();
    assert_eq!(summary, vec![(port, true), (secret, false)], "{records:?}");
}

#[tokio::test]
async fn a_program_that_ignores_the_proxy_reaches_nothing() {
    let port = server("direct secret", None).await;
    let (net, records) = egress(&[format!("127.0.0.1:{port}")]);
    // The allowed port itself, straight: the sandbox's own 127.0.0.1 has nothing there; and
    // every interface of the host is out of the namespace's reach.
    let out = run_with(
        net,
        &format!(
            "curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{port}/ 2>&1; \
             cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '"
        ),
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("direct secret"), "{stdout}");
    assert!(
        stdout.contains("Couldn't connect") || stdout.contains("refused"),
        "{stdout}"
    );
    assert!(stdout.ends_with("\nlo\n"), "only loopback inside: {stdout}");
    assert!(records.lock().unwrap().is_empty());
}

#[tokio::test]
async fn the_process_backend_refuses_an_allow_list_it_cannot_enforce() {
    let (net, _) = egress(&["127.0.0.1:1".to_owned()]);
    let mut req = request(&["/bin/true"]);
    req.network = Some(net);
    let err = ProcessBackend::new().run(req).await.unwrap_err();
    assert_eq!(err.code(), "isolation.unavailable");
    assert!(err.to_string().contains("network namespace"), "{err}");
}

/// An agent's network (`RunNetwork::CorralAndEgress`): one socket serves corral's link to the
/// requests in origin form and the egress proxy to the rest. The proxy variables exempt
/// loopback, so a call to the link goes straight to it; an allow-listed host is reached
/// through the proxy; another host, and the link's own address asked of the proxy, are refused.
#[tokio::test]
async fn one_socket_serves_the_link_to_origin_form_requests_and_the_allow_list_to_the_rest() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let allowed = server("hello from upstream", None).await;
    let other = server("the other server's secret", None).await;
    let (net, records) = egress(&[format!("127.0.0.1:{allowed}")]);
    let RunNetwork::Egress(egress) = net else {
        unreachable!()
    };
    let served = Arc::new(AtomicUsize::new(0));
    let net = RunNetwork::CorralAndEgress(crate::corral_link::link(Arc::clone(&served)), egress);
    let out = run_with(
        net,
        &format!(
            "echo \"no_proxy=$NO_PROXY\"; \
             curl -sS http://127.0.0.1:{proxy}/v1/models; echo; \
             curl -sS --noproxy '' http://127.0.0.1:{allowed}/a; echo; \
             curl -sS --noproxy '' --proxytunnel http://127.0.0.1:{allowed}/b; echo; \
             curl -sS --noproxy '' http://127.0.0.1:{other}/; echo; \
             curl -sS --noproxy '' http://127.0.0.1:{proxy}/v1/models; echo",
            proxy = corral_exec::linux::PROXY_PORT
        ),
    )
    .await;
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some("no_proxy=127.0.0.1,localhost,::1"),
        "{stdout}"
    );
    assert_eq!(
        lines.get(1..4),
        Some(
            &[
                "hello from corral /v1/models",
                "hello from upstream",
                "hello from upstream"
            ][..]
        ),
        "stdout: {stdout}\nstderr: {}",
        text(&out.stderr)
    );
    assert!(!stdout.contains("secret"), "{stdout}");
    assert_eq!(
        stdout.matches("corral: egress.denied").count(),
        2,
        "{stdout}"
    );
    assert_eq!(
        served.load(Ordering::SeqCst),
        1,
        "only the origin-form call is the link's"
    );
    assert!(
        out.attestation
            .primitives
            .iter()
            .any(|p| p == "netns:corral-link+egress-proxy"),
        "{:?}",
        out.attestation.primitives
    );
    let records = records.lock().unwrap().clone();
    let seen: Vec<(u16, bool)> = records.iter().map(|r| (r.port, r.allowed)).collect();
    assert_eq!(
        seen,
        vec![
            (allowed, true),
            (allowed, true),
            (other, false),
            (corral_exec::linux::PROXY_PORT, false)
        ],
        "{records:?}"
    );
}

/// A plain-HTTP request through the proxy reaches the allowed address with the `Host` that was
/// checked, never the one the program wrote (which could name another site served there).
#[tokio::test]
async fn a_forged_host_header_is_replaced_by_the_checked_authority() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&head).to_lowercase();
            let hosts: Vec<String> = text
                .lines()
                .filter_map(|l| l.strip_prefix("host:").map(|h| h.trim().to_owned()))
                .collect();
            let body = hosts.join(",");
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(reply.as_bytes()).await;
        }
    });
    let (net, _) = egress(&[format!("127.0.0.1:{port}")]);
    let out = run_with(
        net,
        &format!("curl -sS -H 'Host: other-tenant.example' http://127.0.0.1:{port}/"),
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        format!("127.0.0.1:{port}"),
        "stderr: {}",
        text(&out.stderr)
    );
}
