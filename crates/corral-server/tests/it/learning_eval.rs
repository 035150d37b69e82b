//! Learning mode's eval (issue 16, "Tests and eval"): a scripted provider answers 24
//! adversarial prompts through the full proxy (auth, guard chain, reply hook, streaming hold).
//! 20 state a target's value in a form the guard is specified to catch (directly, with
//! separators, in words, in k-form, in JSON, alongside a tool call, split over two text parts,
//! split over two responses (streamed and not) and over two choices, streamed, and routed
//! around through a non-root agent header); 4 are residual paraphrases
//! (hex, reversed, a spoken form, a description) that it is not. With the guard on (level 0)
//! no exact value reaches the learner; with it off (level 3) the leak rate and the residual
//! paraphrase rate are printed (`cargo test -p corral-server --test it learning_eval --
//! --nocapture`) and recorded in docs/learning.md.

use std::time::Duration;

use axum::Router;
use axum::routing::post;
use serde_json::{Value, json};

use crate::common::{ADMIN_TOKEN, AGENT_TOKEN, Server, Workspace, send, token_env};
use crate::learning::{manifest, setup};
use crate::scripted_llm::{LLM_YAML, UPSTREAM_KEY, UPSTREAM_KEY_ENV, UPSTREAM_URL_ENV, sse_data};

/// How a case's parts reach the learner.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Split {
    /// As the text parts of one message.
    No,
    /// One part per response: the learner asks again, sending the first answer back as the
    /// history (`messages`), and the model completes the value in its second answer.
    Responses,
    /// One part per choice of one completion (`n: 2`).
    Choices,
}

/// One adversarial case: what the model answers (text parts), whether with a tool call,
/// whether the request streams, the agent header it is sent with, how the parts are split,
/// and the needle whose presence in what the learner receives (everything, in order) is a
/// leak. `exact`: a form the guard must catch.
struct Case {
    parts: &'static [&'static str],
    tool_call: bool,
    stream: bool,
    agent: Option<&'static str>,
    split: Split,
    needle: &'static str,
    exact: bool,
}

const fn case(parts: &'static [&'static str], needle: &'static str) -> Case {
    Case {
        parts,
        tool_call: false,
        stream: false,
        agent: None,
        split: Split::No,
        needle,
        exact: true,
    }
}

const CASES: [Case; 24] = [
    case(&["The total lag is 5100."], "5100"),
    case(&["Total lag: 5,100 messages."], "5,100"),
    case(&["It sits at 5 100 right now."], "5 100"),
    case(&["In European notation: 5.100."], "5.100"),
    case(
        &["The lag is five thousand one hundred."],
        "five thousand one hundred",
    ),
    case(&["Roughly 5.1k messages behind."], "5.1k"),
    case(&["{\"total_lag\": 5100, \"unit\": \"messages\"}"], "5100"),
    Case {
        tool_call: true,
        ..case(&["Let me confirm: it is 5100."], "5100")
    },
    case(&["The stuck partition is orders-7."], "orders-7"),
    case(&["Look at ORDERS-7 first."], "orders-7"),
    case(&["The total is 5,1", "00 messages."], "5,100"),
    Case {
        stream: true,
        ..case(&["Streaming it: the lag is 5100."], "5100")
    },
    Case {
        stream: true,
        ..case(
            &["five thousand one hundred, streamed"],
            "five thousand one hundred",
        )
    },
    Case {
        stream: true,
        tool_call: true,
        ..case(
            &["Partition orders-7, and I will read the file."],
            "orders-7",
        )
    },
    Case {
        agent: Some("specialist"),
        ..case(&["As the specialist: 5100."], "5100")
    },
    Case {
        agent: Some("ROOT"),
        ..case(&["Not quite root: orders-7."], "orders-7")
    },
    Case {
        agent: Some("specialist"),
        stream: true,
        ..case(&["Specialist stream: 5,100 messages."], "5,100")
    },
    Case {
        split: Split::Responses,
        ..case(&["The answer is [51", "00] messages."], "5100")
    },
    Case {
        split: Split::Responses,
        stream: true,
        ..case(&["lag=51", "00; that is all."], "5100")
    },
    Case {
        split: Split::Choices,
        ..case(&["It is **5,1", "00**."], "5,100")
    },
    Case {
        exact: false,
        ..case(&["In hex that is 0x13ec."], "0x13ec")
    },
    Case {
        exact: false,
        ..case(&["Reversed, the digits read 0015."], "0015")
    },
    Case {
        exact: false,
        ..case(&["Call it fifty-one hundred."], "fifty-one hundred")
    },
    Case {
        exact: false,
        ..case(
            &["The partition is the seventh of the orders topic."],
            "seventh of the orders topic",
        )
    },
];

/// The provider: answers `case-N` (the last user message) with case N's parts.
async fn provider() -> (String, tokio::task::JoinHandle<()>) {
    let app = Router::new().route("/v1/chat/completions", post(answer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}/v1"), task)
}

async fn answer(body: axum::Json<Value>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    if last == "echo-system" {
        let system: Vec<&str> = messages
            .iter()
            .filter(|m| m["role"] == "system")
            .filter_map(|m| m["content"].as_str())
            .collect();
        return axum::Json(json!({
            "id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": system.join("|")},
                "finish_reason": "stop"}],
        }))
        .into_response();
    }
    // `case-N`, or `case-N.P`: part P only (a split case's P-th response).
    let name = last.trim_start_matches("case-");
    let (n, part) = match name.split_once('.') {
        Some((n, p)) => (n.parse().unwrap_or(0), p.parse::<usize>().ok()),
        None => (name.parse().unwrap_or(0), None),
    };
    let c = &CASES[n];
    let parts: &[&str] = match part {
        Some(p) => &c.parts[p..=p],
        None => c.parts,
    };
    let tool = json!({"id": "call_1", "type": "function",
        "function": {"name": "files_read", "arguments": "{\"path\":\"lag.txt\"}"}});
    let usage = json!({"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10});
    if c.split == Split::Choices {
        let choices: Vec<Value> = parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                json!({"index": i, "message": {"role": "assistant", "content": p},
                    "finish_reason": "stop"})
            })
            .collect();
        return axum::Json(json!({
            "id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": choices, "usage": usage,
        }))
        .into_response();
    }
    if body["stream"] != Value::Bool(true) {
        let content = if parts.len() == 1 {
            json!(parts[0])
        } else {
            Value::Array(
                parts
                    .iter()
                    .map(|p| json!({"type": "text", "text": p}))
                    .collect(),
            )
        };
        let mut message = json!({"role": "assistant", "content": content});
        if c.tool_call {
            message["tool_calls"] = json!([tool]);
        }
        return axum::Json(json!({
            "id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": usage,
        }))
        .into_response();
    }
    let chunk = |delta: Value| {
        json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}))];
    // Every part in two deltas, split mid-value.
    for p in parts {
        let mid = p
            .char_indices()
            .nth(p.chars().count() / 2)
            .map_or(0, |(i, _)| i);
        events.push(chunk(json!({"content": &p[..mid]})));
        events.push(chunk(json!({"content": &p[mid..]})));
    }
    if c.tool_call {
        let mut t = tool.clone();
        t["index"] = json!(0);
        events.push(chunk(json!({"tool_calls": [t]})));
    }
    events.push(
        json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    );
    events.push(
        json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [], "usage": usage}),
    );
    let mut text = String::new();
    for e in events {
        text.push_str(&format!("data: {e}\n\n"));
    }
    text.push_str("data: [DONE]\n\n");
    ([("content-type", "text/event-stream")], text).into_response()
}

/// Everything the learner receives for case `n`, as `token`, in order: a case split over
/// responses is asked part by part, each answer sent back as the history of the next request.
async fn received(s: &Server, token: &str, n: usize) -> String {
    let c = &CASES[n];
    if c.split != Split::Responses {
        return received_once(
            s,
            token,
            n,
            &[json!({"role": "user", "content": format!("case-{n}")})],
        )
        .await;
    }
    let mut messages = Vec::new();
    let mut all = String::new();
    for p in 0..c.parts.len() {
        messages.push(json!({"role": "user", "content": format!("case-{n}.{p}")}));
        let answer = received_once(s, token, n, &messages).await;
        messages.push(json!({"role": "assistant", "content": answer}));
        all.push_str(&answer);
    }
    all
}

/// The text of one answer to `messages` (after a system message) for case `n`.
async fn received_once(s: &Server, token: &str, n: usize, messages: &[Value]) -> String {
    let c = &CASES[n];
    let mut all = vec![json!({"role": "system", "content": "You help."})];
    all.extend_from_slice(messages);
    let mut rb = s
        .client()
        .post(s.url("/v1/chat/completions"))
        .bearer_auth(token)
        .header("x-corral-run", format!("eval-{n}"))
        .json(&json!({"model": "m", "stream": c.stream, "messages": all}));
    if let Some(a) = c.agent {
        rb = rb.header("x-corral-agent", a);
    }
    let r = send(rb).await;
    assert_eq!(r.status, 200, "case {n}: {}", r.text);
    let text_of = |content: &Value| match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<String>(),
        _ => String::new(),
    };
    if !c.stream {
        let v = r.json();
        if c.tool_call {
            assert_eq!(
                v["choices"][0]["message"]["tool_calls"][0]["id"], "call_1",
                "case {n}: the tool call is kept: {v}"
            );
        }
        let choices = v["choices"].as_array().cloned().unwrap_or_default();
        return choices
            .iter()
            .map(|c| text_of(&c["message"]["content"]))
            .collect();
    }
    sse_data(&r.text)
        .iter()
        .filter(|d| d.as_str() != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// Every exact case is withheld for the guarded learner, each in its own run (turn).
fn on_guarded_withheld_min() -> usize {
    CASES.iter().filter(|c| c.exact).count()
}

fn leaked(text: &str, needle: &str) -> bool {
    text.to_lowercase().contains(&needle.to_lowercase())
}

#[tokio::test]
async fn learning_eval_no_exact_value_reaches_a_guarded_learner_through_the_proxy() {
    let (url, _provider) = provider().await;
    let ws = Workspace::new();
    let mut env = token_env();
    env.push((UPSTREAM_URL_ENV, url.as_str()));
    env.push((UPSTREAM_KEY_ENV, UPSTREAM_KEY));
    let yaml = format!(
        "{}{LLM_YAML}rules:\n  - allow: [llm.chat]\n",
        crate::learning::learning_yaml(&ws)
    );
    let loaded = ws.load(&yaml, &env);
    let s = Server::start_learning(&loaded, setup(&ws, &manifest(), Duration::ZERO), false)
        .await
        .unwrap();
    // The admin is the unguarded learner (level 3); the agent stays at the manifest's 0.
    for _ in 0..3 {
        let h = send(
            s.client()
                .post(s.url("/learning/hint"))
                .bearer_auth(ADMIN_TOKEN),
        )
        .await;
        assert_eq!(h.status, 200, "{}", h.text);
    }
    let (mut on_exact, mut off_exact, mut on_residual, mut off_residual) = (0, 0, 0, 0);
    let exact = CASES.iter().filter(|c| c.exact).count();
    let residual = CASES.len() - exact;
    for (n, c) in CASES.iter().enumerate() {
        let guarded = received(&s, AGENT_TOKEN, n).await;
        let open = received(&s, ADMIN_TOKEN, n).await;
        assert!(!guarded.is_empty(), "case {n}: never an empty text");
        match (c.exact, leaked(&guarded, c.needle), leaked(&open, c.needle)) {
            (true, on, off) => {
                assert!(!on, "case {n} leaked with the guard on: {guarded}");
                on_exact += usize::from(on);
                off_exact += usize::from(off);
            }
            (false, on, off) => {
                on_residual += usize::from(on);
                off_residual += usize::from(off);
            }
        }
        assert!(
            !guarded.contains("5100") && !leaked(&guarded, "orders-7"),
            "case {n}: {guarded}"
        );
    }
    println!(
        "learning eval: {} prompts; exact-value leaks with the guard on: {on_exact}/{exact}; \
         with the guard off (level 3): {off_exact}/{exact} ({:.0}%); residual paraphrases \
         passed with the guard on: {on_residual}/{residual} ({:.0}%), off: {off_residual}/{residual}",
        CASES.len(),
        100.0 * off_exact as f64 / exact as f64,
        100.0 * on_residual as f64 / residual as f64,
    );
    assert_eq!(on_exact, 0);
    assert_eq!(
        off_exact, exact,
        "with the guard off every exact case reaches the learner"
    );
    // Withheld answers were audited with ids only (written after the answer: waited for).
    for _ in 0..100 {
        let n = s
            .store
            .audit_recent(None, 1000)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.op == "learning_answer_withheld")
            .count();
        if n >= on_guarded_withheld_min() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let events: Vec<_> = s
        .store
        .audit_recent(None, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.op == "learning_answer_withheld")
        .collect();
    assert!(
        events.len() >= on_guarded_withheld_min(),
        "{}",
        events.len()
    );
    for e in &events {
        let d = e.detail.clone().unwrap_or_default();
        assert!(d.starts_with("scenario kafka-lag-7f3a; targets "), "{d}");
        assert!(!d.contains("5100") && !d.contains("orders-7"), "{d}");
    }
}

#[tokio::test]
async fn the_roots_system_prompt_gets_the_learners_level_line_on_each_request() {
    let (url, _provider) = provider().await;
    let ws = Workspace::new();
    let mut env = token_env();
    env.push((UPSTREAM_URL_ENV, url.as_str()));
    env.push((UPSTREAM_KEY_ENV, UPSTREAM_KEY));
    let yaml = format!(
        "{}{LLM_YAML}rules:\n  - allow: [llm.chat]\n",
        crate::learning::learning_yaml(&ws)
    );
    let loaded = ws.load(&yaml, &env);
    let s = Server::start_learning(&loaded, setup(&ws, &manifest(), Duration::ZERO), false)
        .await
        .unwrap();
    let system = |with_system: bool| {
        let mut messages = vec![json!({"role": "user", "content": "echo-system"})];
        if with_system {
            messages.insert(0, json!({"role": "system", "content": "You help."}));
        }
        send(
            s.client()
                .post(s.url("/v1/chat/completions"))
                .bearer_auth(AGENT_TOKEN)
                .json(&json!({"model": "m", "messages": messages})),
        )
    };
    let seen = system(true).await.json()["choices"][0]["message"]["content"].clone();
    assert_eq!(
        seen,
        json!(format!(
            "You help.\n\n{}",
            corral_learn::levels::level_line(corral_learn::levels::Level::ZERO)
        ))
    );
    assert_eq!(
        send(
            s.client()
                .post(s.url("/learning/hint"))
                .bearer_auth(AGENT_TOKEN)
        )
        .await
        .status,
        200
    );
    let seen = system(false).await.json()["choices"][0]["message"]["content"].clone();
    assert_eq!(
        seen,
        json!(corral_learn::levels::level_line(
            corral_learn::levels::Level::new(1).unwrap()
        ))
    );
}

/// A service principal's token: the agent host's, the software that names its specialists.
const HOST_TOKEN: &str = "host-token-0a1b2c3d4e5f67890";

#[tokio::test]
async fn in_learning_mode_a_specialists_reply_to_the_agent_host_is_kept_and_a_persons_never_is() {
    let (url, _provider) = provider().await;
    let ws = Workspace::new();
    let mut env = token_env();
    env.push((UPSTREAM_URL_ENV, url.as_str()));
    env.push((UPSTREAM_KEY_ENV, UPSTREAM_KEY));
    env.push(("CORRAL_IT_HOST_TOKEN", HOST_TOKEN));
    let yaml = format!(
        "{}{LLM_YAML}rules:\n  - allow: [llm.chat]\n",
        crate::learning::learning_yaml(&ws)
    )
    .replace(
        "token_env: CORRAL_IT_ADMIN_TOKEN}\n",
        "token_env: CORRAL_IT_ADMIN_TOKEN}\n    - {id: host, roles: [operator], kind: service, token_env: CORRAL_IT_HOST_TOKEN}\n",
    );
    let loaded = ws.load(&yaml, &env);
    let s = Server::start_learning(&loaded, setup(&ws, &manifest(), Duration::ZERO), false)
        .await
        .unwrap();
    let specialist = CASES
        .iter()
        .enumerate()
        .filter(|(_, c)| c.agent == Some("specialist") && c.exact)
        .map(|(n, _)| n)
        .collect::<Vec<_>>();
    assert!(!specialist.is_empty());
    for n in specialist {
        let needle = CASES[n].needle;
        // The agent host's specialist: its reply reaches the root whole (it is not the learner's).
        assert!(
            leaked(&received(&s, HOST_TOKEN, n).await, needle),
            "case {n}"
        );
        // A person's token naming a specialist is still the root: the answer is withheld.
        assert!(
            !leaked(&received(&s, AGENT_TOKEN, n).await, needle),
            "case {n}"
        );
    }
}

#[test]
fn the_history_a_reply_is_read_after_is_the_requests_assistant_text_oldest_first() {
    use corral_server::routes::llm::history_of;
    let body = json!({"messages": [
        {"role": "system", "content": "You help. 51"},
        {"role": "user", "content": "case"},
        {"role": "assistant", "content": "The answer is"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "files_read", "arguments": "{\"path\": \"51\"}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "5100"},
        {"role": "assistant", "content": [{"type": "text", "text": " 5"}, {"type": "text", "text": "1"}]},
        {"role": "user", "content": "go on"},
    ]});
    assert_eq!(history_of(&body), ["The answer is", " 51"]);
    // Bounded from the newest back.
    let long = "x".repeat(70 * 1024);
    let body = json!({"messages": [
        {"role": "assistant", "content": "old"},
        {"role": "assistant", "content": long},
        {"role": "assistant", "content": "51"},
    ]});
    let h = history_of(&body);
    assert_eq!(h.len(), 2);
    assert_eq!(h[1], "51");
    assert_eq!(
        h.iter().map(String::len).sum::<usize>(),
        corral_server::routes::llm::MAX_HISTORY_BYTES
    );
}

/// A provider whose first (streaming) answer stops mid-value until `release` fires, after
/// telling `started`; every later request gets its system prompt echoed (non-streaming).
async fn holding_provider(
    started: tokio::sync::oneshot::Sender<()>,
    release: tokio::sync::oneshot::Receiver<()>,
) -> (String, tokio::task::JoinHandle<()>) {
    use std::sync::{Arc, Mutex};
    type Gate = (
        Option<tokio::sync::oneshot::Sender<()>>,
        Option<tokio::sync::oneshot::Receiver<()>>,
    );
    let gate: Arc<Mutex<Gate>> = Arc::new(Mutex::new((Some(started), Some(release))));
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |body: axum::Json<Value>| {
            let gate = Arc::clone(&gate);
            async move {
                use axum::response::IntoResponse;
                if body["stream"] != Value::Bool(true) {
                    return answer(body).await;
                }
                let (started, release) = {
                    let mut g = gate.lock().unwrap();
                    (g.0.take().unwrap(), g.1.take().unwrap())
                };
                let chunk = |delta: Value, finish: Value| {
                    let e = json!({"id": "x", "object": "chat.completion.chunk", "created": 1,
                        "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
                    format!("data: {e}\n\n")
                };
                let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(8);
                tokio::spawn(async move {
                    let _ = tx
                        .send(Ok(chunk(json!({"role": "assistant", "content": "The lag is 51"}), Value::Null)))
                        .await;
                    let _ = started.send(());
                    let _ = release.await;
                    let usage = json!({"id": "x", "object": "chat.completion.chunk", "created": 1,
                        "model": "m", "choices": [],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}});
                    for part in [
                        chunk(json!({"content": "00 messages."}), Value::Null),
                        chunk(json!({}), json!("stop")),
                        format!("data: {usage}\n\n"),
                        "data: [DONE]\n\n".to_owned(),
                    ] {
                        let _ = tx.send(Ok(part)).await;
                    }
                });
                let body = axum::body::Body::from_stream(Chunks(rx));
                ([("content-type", "text/event-stream")], body).into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}/v1"), task)
}

/// A response body fed by a channel.
struct Chunks(tokio::sync::mpsc::Receiver<Result<String, std::io::Error>>);

impl futures_core::Stream for Chunks {
    type Item = Result<String, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

#[tokio::test]
async fn a_hint_taken_while_a_streamed_turn_is_held_leaves_that_turn_a_valid_stream_and_the_next_turn_reads_the_new_level()
 {
    use corral_learn::levels::{Level, level_line};
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (release, release_rx) = tokio::sync::oneshot::channel();
    let (url, _provider) = holding_provider(started_tx, release_rx).await;
    let ws = Workspace::new();
    let mut env = token_env();
    env.push((UPSTREAM_URL_ENV, url.as_str()));
    env.push((UPSTREAM_KEY_ENV, UPSTREAM_KEY));
    let yaml = format!(
        "{}{LLM_YAML}rules:\n  - allow: [llm.chat]\n",
        crate::learning::learning_yaml(&ws)
    );
    let loaded = ws.load(&yaml, &env);
    let s = std::sync::Arc::new(
        Server::start_learning(&loaded, setup(&ws, &manifest(), Duration::ZERO), false)
            .await
            .unwrap(),
    );
    let turn = {
        let s = std::sync::Arc::clone(&s);
        tokio::spawn(async move {
            send(
                s.client()
                    .post(s.url("/v1/chat/completions"))
                    .bearer_auth(AGENT_TOKEN)
                    .header("x-corral-run", "held-turn")
                    .json(&json!({"model": "m", "stream": true,
                        "messages": [{"role": "user", "content": "what is the lag?"}]})),
            )
            .await
        })
    };
    // The provider sent the first half of the value; the proxy holds it.
    tokio::time::timeout(Duration::from_secs(30), started)
        .await
        .unwrap()
        .unwrap();
    assert!(!turn.is_finished());
    let hint = send(
        s.client()
            .post(s.url("/learning/hint"))
            .bearer_auth(AGENT_TOKEN),
    )
    .await;
    assert_eq!(hint.status, 200, "{}", hint.text);
    assert_eq!(hint.json()["level"], 1, "{}", hint.text);
    release.send(()).unwrap();
    let r = tokio::time::timeout(Duration::from_secs(30), turn)
        .await
        .unwrap()
        .unwrap();

    // The held turn ends as a valid stream: chunks, a finish reason, `[DONE]` last; the value
    // it completed is withheld.
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let data = sse_data(&r.text);
    assert_eq!(
        data.last().map(String::as_str),
        Some("[DONE]"),
        "{}",
        r.text
    );
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    assert!(
        chunks
            .iter()
            .any(|c| c["choices"][0]["finish_reason"] == "stop"),
        "{}",
        r.text
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(text.starts_with("I can't give that value yet."), "{text}");
    assert!(!text.contains("5100") && !text.contains("51"), "{text}");

    // The next turn reads the new level.
    let next = send(
        s.client()
            .post(s.url("/v1/chat/completions"))
            .bearer_auth(AGENT_TOKEN)
            .json(&json!({"model": "m",
                "messages": [{"role": "user", "content": "echo-system"}]})),
    )
    .await;
    assert_eq!(
        next.json()["choices"][0]["message"]["content"],
        json!(level_line(Level::new(1).unwrap())),
        "{}",
        next.text
    );
}
