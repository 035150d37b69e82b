//! Bad input is refused with a 4xx and a stable code, and a refused `files.write` has no effect.

use serde_json::json;

use crate::common::{AGENT_TOKEN, Reply, Server, Workspace, send, token_env};

const MAX_BODY: usize = 1024;

async fn server(ws: &Workspace) -> Server {
    let yaml = ws.jail_yaml("");
    Server::start_with(&ws.load(&yaml, &token_env()), MAX_BODY)
        .await
        .with_token(AGENT_TOKEN)
}

/// `POST /ops/files.write` with a raw body and content type.
async fn raw(s: &Server, body: impl Into<reqwest::Body>, content_type: Option<&str>) -> Reply {
    let mut rb = s
        .client()
        .post(s.url("/ops/files.write"))
        .bearer_auth(AGENT_TOKEN)
        .body(body);
    if let Some(ct) = content_type {
        rb = rb.header("content-type", ct);
    }
    send(rb).await
}

#[tokio::test]
async fn malformed_bodies_are_refused_and_write_nothing() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let target = ws.at("made.txt");
    let good = json!({"path": target, "content": "x"}).to_string();
    let json_ct = Some("application/json");
    let deep = format!("{}{}", "[".repeat(400), "]".repeat(400));
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        (
            "truncated JSON",
            good.as_bytes()[..good.len() - 1].to_vec(),
            json_ct,
        ),
        (
            "trailing garbage",
            format!("{good} x").into_bytes(),
            json_ct,
        ),
        ("two objects", format!("{good}{good}").into_bytes(), json_ct),
        (
            "not UTF-8",
            b"{\"path\": \"\xff\xfe\", \"content\": \"x\"}".to_vec(),
            json_ct,
        ),
        ("a JSON array", format!("[{good}]").into_bytes(), json_ct),
        ("a JSON string", b"\"made.txt\"".to_vec(), json_ct),
        ("a JSON number", b"42".to_vec(), json_ct),
        ("deeply nested", deep.into_bytes(), json_ct),
        ("text/plain", good.clone().into_bytes(), Some("text/plain")),
        (
            "a form",
            format!("path={target}&content=x").into_bytes(),
            Some("application/x-www-form-urlencoded"),
        ),
        (
            "a look-alike JSON type",
            good.clone().into_bytes(),
            Some("application/jsonx"),
        ),
        (
            "multipart",
            good.clone().into_bytes(),
            Some("multipart/form-data; boundary=x"),
        ),
    ];
    for (what, body, ct) in cases {
        let r = raw(&s, body, ct).await;
        assert_eq!(r.status, 400, "{what}: {}", r.text);
        r.assert_error(400, "args.malformed");
        assert_eq!(r.json()["op"], "files.write", "{what}");
        assert!(!ws.root.join("made.txt").exists(), "{what} wrote the file");
    }
    // The same body, well-formed, does write: the refusals above were about the input.
    // (A charset parameter is fine.)
    raw(&s, good, Some("application/json; charset=utf-8"))
        .await
        .ok();
    assert_eq!(
        std::fs::read_to_string(ws.root.join("made.txt")).unwrap(),
        "x"
    );
}

#[tokio::test]
async fn arguments_that_do_not_fit_the_op_are_refused_and_write_nothing() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let target = ws.at("made.txt");
    let cases = [
        (
            "path is a number",
            json!({"path": 5, "content": "x"}),
            "args.invalid",
        ),
        (
            "content is a list",
            json!({"path": target, "content": ["x"]}),
            "args.invalid",
        ),
        (
            "content is null",
            json!({"path": target, "content": null}),
            "args.invalid",
        ),
        (
            "append is a string",
            json!({"path": target, "content": "x", "append": "yes"}),
            "args.invalid",
        ),
        (
            "an unknown argument",
            json!({"path": target, "content": "x", "mode": "0777"}),
            "args.unknown",
        ),
        ("content missing", json!({"path": target}), "args.missing"),
        ("path missing", json!({"content": "x"}), "args.missing"),
        ("nothing", json!({}), "args.missing"),
    ];
    for (what, args, code) in cases {
        let r = s.call("files.write", args).await;
        assert_eq!(r.status, 400, "{what}: {}", r.text);
        r.assert_error(400, code);
        assert!(!ws.root.join("made.txt").exists(), "{what} wrote the file");
    }
    // A body that is JSON but not an object is refused, `null` included.
    for body in ["null", "[]", "42", "\"x\""] {
        let r = raw(&s, body, Some("application/json")).await;
        r.assert_error(400, "args.malformed");
        assert!(r.text.contains("not a JSON object"), "{body}: {}", r.text);
    }
    // The body is required: an empty one is refused as `null` is, with the fix (`{}`).
    let r = raw(&s, Vec::new(), Some("application/json")).await;
    r.assert_error(400, "args.malformed");
    assert!(r.text.contains("the body is empty"), "{}", r.text);
    assert!(r.text.contains("send `{}` for none"), "{}", r.text);
    assert!(!ws.root.join("made.txt").exists());
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_writes_nothing() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let big = json!({"path": ws.at("made.txt"), "content": "x".repeat(MAX_BODY)});
    let r = s.call("files.write", big.clone()).await;
    r.assert_error(413, "limit.body_too_large");
    assert!(!ws.root.join("made.txt").exists());

    // Without a Content-Length (chunked), the limit holds too.
    let reader = std::io::Cursor::new(big.to_string().into_bytes());
    let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(reader, 300));
    let r = raw(&s, body, Some("application/json")).await;
    r.assert_error(413, "limit.body_too_large");
    assert!(!ws.root.join("made.txt").exists());

    // Just under the limit is fine.
    let overhead = json!({"path": ws.at("made.txt"), "content": ""})
        .to_string()
        .len();
    let fits = json!({"path": ws.at("made.txt"), "content": "y".repeat(MAX_BODY - overhead)});
    assert_eq!(fits.to_string().len(), MAX_BODY);
    s.call("files.write", fits).await.ok();
    assert_eq!(
        std::fs::read_to_string(ws.root.join("made.txt"))
            .unwrap()
            .len(),
        MAX_BODY - overhead
    );
}

#[tokio::test]
async fn a_fifo_in_the_root_is_refused_without_blocking() {
    let ws = Workspace::new();
    let s = server(&ws).await;
    let fifo = ws.at("pipe");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.map(|s| s.success()).unwrap_or(false), "mkfifo works");
    for op in ["files.read", "files.download"] {
        let r = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            s.call(op, json!({"path": fifo})),
        )
        .await
        .expect("opening a FIFO must not block a worker");
        r.assert_error(409, "files.not_a_file");
    }
}

#[tokio::test]
async fn a_path_too_long_for_the_kernel_is_a_400_that_names_the_limit() {
    // issue 11, wrong errors: a 6 KB path gave `500 files.io` "File name too long".
    let ws = Workspace::new();
    let s = Server::start(&ws.load(&ws.jail_yaml(""), &token_env()))
        .await
        .with_token(AGENT_TOKEN);
    let long = format!("{}/{}", ws.root.display(), "a/".repeat(3000));
    let r = s.call("files.read", json!({ "path": long })).await;
    r.assert_error(400, "args.path_too_long");
    assert!(r.text.contains("4095 bytes (PATH_MAX)"), "{}", r.text);
    let name = format!("{}/{}", ws.root.display(), "n".repeat(300));
    let r = s.call("files.stat", json!({ "path": name })).await;
    r.assert_error(400, "args.path_too_long");
    assert!(r.text.contains("255 bytes (NAME_MAX)"), "{}", r.text);
}

/// `POST /mcp` with a raw body and content type, as the agent.
async fn raw_mcp(s: &Server, body: impl Into<reqwest::Body>, content_type: Option<&str>) -> Reply {
    let mut rb = s
        .client()
        .post(s.url("/mcp"))
        .bearer_auth(AGENT_TOKEN)
        .header("accept", "application/json, text/event-stream")
        .body(body);
    if let Some(ct) = content_type {
        rb = rb.header("content-type", ct);
    }
    send(rb).await
}

#[tokio::test]
async fn bad_mcp_bodies_get_corrals_error_format_and_code() {
    // issue 11, wrong errors: deep JSON nesting on `/mcp` was a 415 with a plain-text body
    // (the MCP SDK's), where `/ops` gave a proper 400.
    let ws = Workspace::new();
    let s = server(&ws).await;
    let json_ct = Some("application/json");
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let deep = format!("{}{}", "[".repeat(400), "]".repeat(400));
    // (what, body, content type, status, code)
    type Case<'a> = (&'a str, Vec<u8>, Option<&'a str>, u16, &'a str);
    let cases: Vec<Case> = vec![
        (
            "deeply nested",
            deep.into_bytes(),
            json_ct,
            400,
            "args.malformed",
        ),
        (
            "truncated JSON",
            list.as_bytes()[..list.len() - 1].to_vec(),
            json_ct,
            400,
            "args.malformed",
        ),
        (
            "not UTF-8",
            b"{\"jsonrpc\": \"\xff\"}".to_vec(),
            json_ct,
            400,
            "args.malformed",
        ),
        (
            "JSON, not JSON-RPC",
            b"{\"hello\": 1}".to_vec(),
            json_ct,
            400,
            "args.malformed",
        ),
        (
            "text/plain",
            list.clone().into_bytes(),
            Some("text/plain"),
            415,
            "args.unsupported_media_type",
        ),
        (
            "no content type",
            list.clone().into_bytes(),
            None,
            415,
            "args.unsupported_media_type",
        ),
        (
            "over the limit",
            format!("{list:<2000}").into_bytes(),
            json_ct,
            413,
            "limit.body_too_large",
        ),
    ];
    for (what, body, ct, status, code) in cases {
        let r = raw_mcp(&s, body, ct).await;
        assert_eq!(r.status, status, "{what}: {}", r.text);
        r.assert_error(status, code);
    }
    // The same message, well-formed, is answered by the MCP service.
    let r = raw_mcp(&s, list, json_ct).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("files.read"), "{}", r.text);
}

/// Sends `POST <path>` with a 10 MB body over a plain socket the way simple HTTP/1.1 clients
/// do (the whole body, then read the answer), and returns what the server answered. A server
/// that closes the connection while the body is still coming makes the write or the read fail.
async fn send_ten_mb(s: &Server, path: &str, chunked: bool) -> Result<String, std::io::Error> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = s.base.trim_start_matches("http://").to_owned();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await?;
    let body = vec![b'x'; 10 * 1024 * 1024];
    let framing = if chunked {
        "transfer-encoding: chunked".to_owned()
    } else {
        format!("content-length: {}", body.len())
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {AGENT_TOKEN}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\n{framing}\r\nconnection: close\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await?;
    if chunked {
        for chunk in body.chunks(64 * 1024) {
            tcp.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                .await?;
            tcp.write_all(chunk).await?;
            tcp.write_all(b"\r\n").await?;
        }
        tcp.write_all(b"0\r\n\r\n").await?;
    } else {
        tcp.write_all(&body).await?;
    }
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test]
async fn a_client_that_sends_a_10_mb_body_whole_reads_the_413() {
    // issue 11, wrong errors: a 10 MB body got its 413, but the connection was closed while
    // the client was still sending, so a Python client saw a broken pipe instead.
    let ws = Workspace::new();
    let s = server(&ws).await;
    for path in ["/ops/files.write", "/mcp", "/confirmations/act_0/decision"] {
        for chunked in [false, true] {
            let answer = send_ten_mb(&s, path, chunked).await;
            let answer = answer.unwrap_or_else(|e| {
                panic!("{path} (chunked: {chunked}): the client could not send its body or read the answer: {e}")
            });
            assert!(
                answer.starts_with("HTTP/1.1 413"),
                "{path} (chunked: {chunked}): {answer}"
            );
            assert!(
                answer.contains("\"code\":\"limit.body_too_large\""),
                "{path} (chunked: {chunked}): {answer}"
            );
        }
    }
    // And with Python's own client, where one is installed (required in CI).
    let script = r#"
import http.client, json, sys
host, port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = http.client.HTTPConnection(host, port, timeout=60)
c.request("POST", "/ops/files.write", body=b"x" * (10 * 1024 * 1024),
          headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
r = c.getresponse()
print(r.status, json.loads(r.read())["code"])
"#;
    let addr = s.base.trim_start_matches("http://").to_owned();
    let (host, port) = addr.rsplit_once(':').unwrap();
    let out = tokio::process::Command::new("python3")
        .args(["-c", script, host, port, AGENT_TOKEN])
        .output()
        .await;
    match out {
        Ok(out) => {
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "python3: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(stdout.trim(), "413 limit.body_too_large");
        }
        Err(e) => assert!(!crate::common::in_ci(), "python3 is needed in CI: {e}"),
    }
}

/// A file's bytes are whatever a sandboxed program wrote: `files.download` of an HTML (or SVG)
/// file is served with its type, but sandboxed by CSP and not re-typed, so a browser that ever
/// renders it runs nothing and takes no origin (console attack review).
#[tokio::test]
async fn a_downloaded_html_file_is_sandboxed_and_not_sniffed() {
    let ws = Workspace::new();
    ws.write("page.html", "<script>alert(1)</script>");
    let s = server(&ws).await;
    let r = s.call("files.download", json!({"path": "page.html"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.text, "<script>alert(1)</script>");
    let h = |name: &str| {
        r.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        h("content-type").starts_with("text/html"),
        "{:?}",
        r.headers
    );
    assert_eq!(h("content-security-policy"), "sandbox; default-src 'none'");
    assert_eq!(h("x-content-type-options"), "nosniff");
}
