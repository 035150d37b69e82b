//! Attacks on the LLM proxy (task Z): each test is a finding, written to fail on the code it
//! was found in. A provider of their own (`Hostile`) scripts what the attacks need: requests held
//! until several are in flight, a stream that goes on after the client hung up, a stream whose
//! held rendering grows with its number of choices.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};

use corral_server::routes::llm::{AssistantReply, ReplyCtx, ReplyHook};
use serde_json::{Value, json};
use tokio::sync::{Barrier, Notify, mpsc};

use crate::common::{AGENT_TOKEN, Reply, Server, Workspace, send, token_env};

const URL_ENV: &str = "CORRAL_IT_Z_LLM_URL";
const KEY_ENV: &str = "CORRAL_IT_Z_LLM_KEY";
const KEY: &str = "sk-hostile-provider-key-0123456789";
const LLM: &str = "llm: {base_url_env: CORRAL_IT_Z_LLM_URL, api_key_env: CORRAL_IT_Z_LLM_KEY}\nrules:\n  - allow: [llm.chat]\n";

#[derive(Clone)]
struct Script {
    /// `barrier`: each request waits here (at most 5 s) for the others before answering.
    barrier: Arc<Barrier>,
    /// `drip`: the stream's rest is sent once the test says the client hung up.
    hung_up: Arc<Notify>,
}

/// A running provider that does what the attacks need.
struct Hostile {
    url: String,
    hung_up: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Hostile {
    async fn start(barrier: usize) -> Self {
        let script = Script {
            barrier: Arc::new(Barrier::new(barrier)),
            hung_up: Arc::new(Notify::new()),
        };
        let hung_up = Arc::clone(&script.hung_up);
        let app = Router::new()
            .route("/v1/chat/completions", axum::routing::post(chat))
            .with_state(script);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url: format!("http://{addr}/v1"),
            hung_up,
            task,
        }
    }
}

/// A response body fed from a channel.
struct Fed(mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl futures_core::Stream for Fed {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

fn event(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

fn content(text: &str) -> Value {
    json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "drip",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
}

async fn chat(State(s): State<Script>, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match body["model"].as_str().unwrap_or_default() {
        // Answers once every request of the barrier is in flight: 100 tokens each.
        "barrier" => {
            let _ = tokio::time::timeout(Duration::from_secs(5), s.barrier.wait()).await;
            axum::Json(json!({
                "id": "b", "object": "chat.completion", "created": 1, "model": "barrier",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 0, "total_tokens": 100},
            }))
            .into_response()
        }
        // A long completion: its first delta, then (once the client hung up) 400 more, the
        // finish and a usage chunk of 1000 tokens.
        "drip" => {
            let (tx, rx) = mpsc::channel(8);
            let hung_up = Arc::clone(&s.hung_up);
            tokio::spawn(async move {
                let _ = tx.send(Ok(event(&content("Once upon a time")))).await;
                let _ = tokio::time::timeout(Duration::from_secs(10), hung_up.notified()).await;
                for i in 0..400 {
                    if tx.send(Ok(event(&content(&format!(" word{i}"))))).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                let usage = json!({"id": "c", "object": "chat.completion.chunk", "created": 1,
                    "model": "drip", "choices": [],
                    "usage": {"prompt_tokens": 500, "completion_tokens": 500, "total_tokens": 1000}});
                let _ = tx.send(Ok(event(&usage))).await;
                let _ = tx.send(Ok(Bytes::from("data: [DONE]\n\n"))).await;
            });
            ([("content-type", "text/event-stream")], Body::from_stream(Fed(rx))).into_response()
        }
        // A small completion: 2 tokens.
        "small" => axum::Json(json!({
            "id": "s", "object": "chat.completion", "created": 1, "model": "small",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }))
        .into_response(),
        // A stream of ~110 KB: one chunk with a 100 KB `id`, then 200 chunks each opening a new
        // (empty) choice index.
        "amplify" => {
            let mut text = String::new();
            let id = "i".repeat(100 * 1024);
            let first = json!({"id": id, "object": "chat.completion.chunk", "created": 1,
                "model": "amplify", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "x"}}]});
            text.push_str(&format!("data: {first}\n\n"));
            for k in 1..200 {
                text.push_str(&format!("data: {{\"choices\":[{{\"index\":{k},\"delta\":{{}}}}]}}\n\n"));
            }
            text.push_str("data: [DONE]\n\n");
            ([("content-type", "text/event-stream")], text).into_response()
        }
        // One choice in two chunks, each with a 100 KB `id`, `model` and `system_fingerprint`.
        "long-header" => {
            let long = "i".repeat(100 * 1024);
            let mut text = String::new();
            for delta in [json!({"role": "assistant", "content": "fine"}), json!({})] {
                let chunk = json!({"id": long, "object": "chat.completion.chunk", "created": 1,
                    "model": long, "system_fingerprint": long,
                    "choices": [{"index": 0, "delta": delta}]});
                text.push_str(&format!("data: {chunk}\n\n"));
            }
            text.push_str("data: [DONE]\n\n");
            ([("content-type", "text/event-stream")], text).into_response()
        }
        _ => (axum::http::StatusCode::NOT_FOUND, "no such model").into_response(),
    }
}

/// A hook that changes nothing (it makes a root's stream held).
#[derive(Debug)]
struct Noop;

impl ReplyHook for Noop {
    fn on_root_reply(&self, _ctx: &ReplyCtx, _reply: &mut AssistantReply) {}
}

async fn server(p: &Hostile, extra: &str, hook: Option<Arc<dyn ReplyHook>>) -> (Server, Workspace) {
    let ws = Workspace::new();
    let mut env = token_env();
    env.push((URL_ENV, p.url.as_str()));
    env.push((KEY_ENV, KEY));
    let loaded = ws.load(&ws.jail_yaml(&format!("{LLM}{extra}")), &env);
    let server = Server::start_hooked(&loaded, 1 << 20, hook)
        .await
        .with_token(AGENT_TOKEN);
    (server, ws)
}

fn chat_body(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Tell me a story"}]})
}

async fn ask(s: &Server, body: Value, run: &str) -> Reply {
    send(
        s.client()
            .post(s.url("/v1/chat/completions"))
            .bearer_auth(AGENT_TOKEN)
            .header("x-corral-run", run)
            .json(&body),
    )
    .await
}

/// What: `budgets.tokens` is checked before a model call and charged only after it ended, with
/// nothing reserved in between, so every model call of a run that starts before the first one
/// ends passes the check. Repro: `budgets: {tokens: 100}`; three concurrent
/// `POST /v1/chat/completions` with the same `X-Corral-Run`, each answered with 100 tokens once
/// all three are in flight: all three are forwarded and answered 200, and the run spent 300
/// tokens of its 100. Impact: an agent (or anyone holding a token allowed `llm.chat`) spends a
/// run's token budget as many times over as it can open requests at once (no `llm.chat`
/// concurrency limit by default): the budget bounds nothing against a parallel caller. A fix
/// reserves (or serialises) a run's model calls while one is in flight.
#[tokio::test]
async fn a_second_concurrent_model_call_of_a_run_with_a_token_budget_is_refused() {
    let p = Hostile::start(3).await;
    let (s, _ws) = server(&p, "budgets: {tokens: 100}\n", None).await;
    let (a, b, c) = tokio::join!(
        ask(&s, chat_body("barrier"), "race"),
        ask(&s, chat_body("barrier"), "race"),
        ask(&s, chat_body("barrier"), "race"),
    );
    let statuses = [a.status, b.status, c.status];
    let answered = statuses.iter().filter(|s| **s == 200).count();
    assert!(
        answered <= 1,
        "{answered} model calls of run `race` were answered with a budget of 100 tokens \
         ({} tokens spent); statuses {statuses:?}",
        answered * 100
    );
}

/// What: a passed-through stream is metered from its usage chunk, which comes last; when the
/// client hangs up mid-stream, corral stops reading the provider and charges the run 0 tokens
/// (the audit detail says `0 prompt + 0 completion tokens ..., client went away`), though the
/// provider generated (and bills) the completion. Repro: `budgets: {tokens: 100}`; a streaming
/// request in run `hangup` whose provider streams a 1000-token completion; the client reads
/// the first delta and closes the connection; the run's next model call is still answered 200.
/// Impact: a caller reads as much of each completion as it wants and hangs up before the usage
/// chunk: `budgets.tokens` (and the token metering per purpose) never sees its spend, so the
/// budget is bypassed without limit. A fix keeps reading the provider after the client left
/// (bounded) to meter the usage, or charges an estimate (e.g. the request's `max_tokens`).
#[tokio::test]
async fn a_stream_the_client_hangs_up_on_is_still_charged_its_tokens() {
    let p = Hostile::start(1).await;
    let (s, _ws) = server(&p, "budgets: {tokens: 100}\n", None).await;
    let mut body = chat_body("drip");
    body["stream"] = json!(true);
    let mut resp = s
        .client()
        .post(s.url("/v1/chat/completions"))
        .bearer_auth(AGENT_TOKEN)
        .header("x-corral-run", "hangup")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("Once upon a time"));
    drop(resp);
    p.hung_up.notify_one();
    // The stream's audit event is written when corral stops pumping it.
    let mut detail = None;
    for _ in 0..200 {
        let events = s.store.audit_recent(None, 100).await.unwrap();
        if let Some(e) = events.iter().find(|e| e.op == "llm.chat") {
            detail = e.detail.clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = ask(&s, chat_body("small"), "hangup").await;
    assert_eq!(
        after.status, 429,
        "the run's next model call was answered after a 1000-token stream on a 100-token \
         budget; the stream was audited as {detail:?}; answer: {}",
        after.text
    );
}

/// What: the streaming hold renders two chunks per choice index the provider's stream opened,
/// each repeating the stream's `id` (and `model`, `system_fingerprint`), with no bound on the
/// rendered size: the 32 MiB limit counts only what was read. Repro: with a reply hook
/// installed, a root's streaming request whose provider sends one chunk with a 100 KB `id`
/// then 199 tiny chunks each naming a new choice `index` (~110 KB in all): corral builds and
/// sends a ~40 MB answer in one allocation. Impact: a hostile or compromised provider (or one
/// behind a proxy that can be made to echo) makes corral allocate `choices x id` bytes: a 4 MB
/// id and a few thousand indexes in a 32 MB stream ask for terabytes, and the server is killed
/// out of memory, taking every session down. A fix bounds the rendered answer (and the number
/// of choices) by the same limits as the input, or refuses such a stream.
#[tokio::test]
async fn a_held_stream_of_more_choices_than_corral_holds_is_refused_as_an_upstream_error() {
    let p = Hostile::start(1).await;
    let (s, _ws) = server(&p, "", Some(Arc::new(Noop))).await;
    let mut body = chat_body("amplify");
    body["stream"] = json!(true);
    let r = ask(&s, body, "amplify").await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert!(
        r.text.contains("llm.upstream") && r.text.contains("more than 16 choices"),
        "{}",
        r.text
    );
    assert!(r.text.len() < 4096, "{} bytes", r.text.len());
}

/// The header strings a held stream repeats in every chunk it renders are clipped, so a
/// provider's 100 KB `id` does not multiply the answer.
#[tokio::test]
async fn a_held_stream_echoes_the_providers_header_strings_clipped_to_256_bytes() {
    let p = Hostile::start(1).await;
    let (s, _ws) = server(&p, "", Some(Arc::new(Noop))).await;
    let mut body = chat_body("long-header");
    body["stream"] = json!(true);
    let r = ask(&s, body, "long-header").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("fine"), "{}", r.text);
    assert!(r.text.contains(&"i".repeat(256)), "{}", r.text);
    assert!(!r.text.contains(&"i".repeat(257)), "{} bytes", r.text.len());
    assert!(r.text.len() < 4096, "{} bytes", r.text.len());
}
