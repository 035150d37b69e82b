//! The LLM proxy's overhead on a non-streaming completion: the same request sent directly to a
//! local scripted provider and through corral (`POST /v1/chat/completions`, the guard chain,
//! the audit write to SQLite, the forward), interleaved one for one in one run, with p50, p99
//! and their difference. `cargo run --release -p llm-bench -- [ROUNDS]` (default 5000);
//! `LLM_BENCH_STATE_IN=/dev/shm` keeps the audit log on tmpfs (no disk fsync).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use serde_json::{Value, json};

const TOKEN: &str = "bench-token-0123456789abcdef";

/// A fixed completion of about 400 bytes, answered at once.
async fn complete(body: axum::body::Bytes) -> axum::Json<Value> {
    let model = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["model"].as_str().map(str::to_owned))
        .unwrap_or_default();
    axum::Json(json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "A short answer of a few words."}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28},
    }))
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    // The sandbox helper (`/proc/self/exe __sandbox-exec`, started by the exec backend's
    // probe), dispatched before a runtime starts; without it the helper would run the bench.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == corral_exec::HELPER_ARG)
    {
        corral_exec::helper_main();
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench());
}

async fn bench() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5000);
    let upstream = serve(Router::new().route("/v1/chat/completions", post(complete))).await;
    // `LLM_BENCH_STATE_IN=/dev/shm` puts the state dir (the SQLite audit log) on tmpfs: the
    // same call path without the disk's fsync, to tell corral's own cost from the disk's.
    let dir = tempfile::tempdir().unwrap();
    let state_parent = match std::env::var_os("LLM_BENCH_STATE_IN") {
        Some(parent) => tempfile::tempdir_in(parent).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let yaml = format!(
        "version: 1\npreset: workspace_jail\nroot: {}\nstate_dir: {}\nauth:\n  tokens:\n    - {{id: agent, token_env: BENCH_TOKEN}}\nllm: {{base_url_env: BENCH_LLM_URL, api_key_env: BENCH_LLM_KEY}}\nrules:\n  - allow: [llm.chat]\n",
        root.display(),
        state_parent.path().join("state").display()
    );
    let env: HashMap<String, String> = [
        ("BENCH_TOKEN", TOKEN.to_owned()),
        ("BENCH_LLM_URL", format!("{upstream}/v1")),
        ("BENCH_LLM_KEY", "sk-bench-key".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let loaded = corral_config::load_str("corral.yaml", &yaml, dir.path(), &env)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    let (state, _store) = corral_server::serve::build_state(&loaded, 1 << 20)
        .await
        .unwrap();
    let corral = serve(corral_server::app(state)).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let body = json!({"model": "bench-model", "messages": [{"role": "user", "content": "Say something short."}]});
    let direct_url = format!("{upstream}/v1/chat/completions");
    let proxy_url = format!("{corral}/v1/chat/completions");
    let once = |url: String, auth: Option<&'static str>| {
        let rb = client.post(url).json(&body);
        let rb = match auth {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        };
        async move {
            let t = Instant::now();
            let r = rb.send().await.unwrap();
            assert_eq!(r.status(), 200);
            let _ = r.bytes().await.unwrap();
            t.elapsed()
        }
    };
    // Warm-up: connections, the SQLite file, the allocator.
    for _ in 0..rounds.min(200) {
        once(direct_url.clone(), None).await;
        once(proxy_url.clone(), Some(TOKEN)).await;
    }
    let mut direct = Vec::with_capacity(rounds);
    let mut proxied = Vec::with_capacity(rounds);
    for i in 0..rounds {
        // Interleaved, alternating which goes first, so drift in machine load hits both.
        if i % 2 == 0 {
            direct.push(once(direct_url.clone(), None).await);
            proxied.push(once(proxy_url.clone(), Some(TOKEN)).await);
        } else {
            proxied.push(once(proxy_url.clone(), Some(TOKEN)).await);
            direct.push(once(direct_url.clone(), None).await);
        }
    }
    direct.sort();
    proxied.sort();
    println!(
        "rounds: {rounds} (each: one direct, one through corral, interleaved); state dir in {}",
        state_parent
            .path()
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    println!("| path | p50 | p99 |");
    println!("|---|---|---|");
    for (name, v) in [("direct", &direct), ("through corral", &proxied)] {
        println!(
            "| {name} | {:.0} us | {:.0} us |",
            us(percentile(v, 0.5)),
            us(percentile(v, 0.99))
        );
    }
    println!(
        "| overhead (corral - direct) | {:.0} us | {:.0} us |",
        us(percentile(&proxied, 0.5)) - us(percentile(&direct, 0.5)),
        us(percentile(&proxied, 0.99)) - us(percentile(&direct, 0.99))
    );
}
