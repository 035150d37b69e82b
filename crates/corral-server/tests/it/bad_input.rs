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
    // An empty body is no arguments at all.
    let r = raw(&s, Vec::new(), Some("application/json")).await;
    r.assert_error(400, "args.missing");
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
        r.assert_error(400, "files.not_a_file");
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
