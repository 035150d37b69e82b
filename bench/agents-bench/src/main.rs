//! Session start to first event, with the real codex CLI (`CORRAL_BENCH_CODEX`: the path of
//! its native binary), its model a scripted Responses upstream answering one message:
//!
//! - `corral cold`: a corral session whose sandbox starts with the turn (no warm sandbox);
//! - `corral warm`: the same with the backend's warm sandbox ready (one is kept);
//! - `bwrap`: the same codex, same config and prompt, under `bwrap` by hand (read-only `/`,
//!   fresh `/tmp`, `/proc` and `/dev`, the workdir and home bound read-write, every namespace
//!   but the network's unshared), its upstream on a host port.
//!
//! Prints, per case, the median and min over `CORRAL_BENCH_RUNS` runs (default 7) of the time
//! to the first JSONL line (corral: the first event) and to the end of the turn.
//!
//!     cargo build --release -p agents-bench
//!     CORRAL_BENCH_CODEX=/path/to/codex target/release/agents-bench

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_agents::{
    Adapter, Installed, Permissions, ProxyLinks, Session, SessionConfig, SessionLimits,
    TokenDigest, TurnSpec,
};
use corral_exec::CorralLink;
use corral_exec::linux::LinuxBackend;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Answers every request with one streamed assistant message.
async fn serve(mut conn: tokio::net::TcpStream) {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
        let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&raw[..i]).to_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if raw.len() >= i + 4 + len {
            break;
        }
    }
    let item = serde_json::json!({"type": "message", "role": "assistant",
        "content": [{"type": "output_text", "text": "hi"}]});
    let usage = serde_json::json!({"input_tokens": 1, "output_tokens": 1, "total_tokens": 2});
    let mut body = String::new();
    for ev in [
        serde_json::json!({"type": "response.created", "response": {"id": "r"}}),
        serde_json::json!({"type": "response.output_item.done", "item": item}),
        serde_json::json!({"type": "response.completed", "response": {"id": "r", "usage": usage}}),
    ] {
        body.push_str(&format!("data: {ev}\n\n"));
    }
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(reply.as_bytes()).await;
    let _ = conn.shutdown().await;
}

#[derive(Debug)]
struct Scripted;

impl ProxyLinks for Scripted {
    fn link(&self, _session: &str, _token: TokenDigest) -> CorralLink {
        CorralLink::new(|conn| Box::pin(serve(conn)))
    }
}

/// (to first event, to the end) of one corral turn.
async fn corral_turn(
    cli: &Installed,
    backend: Arc<LinuxBackend>,
    dir: &Path,
) -> Res<(Duration, Duration)> {
    let (work, home) = (dir.join("work"), dir.join("home"));
    std::fs::create_dir_all(&work)?;
    let cfg = SessionConfig {
        id: "bench".into(),
        cli: cli.clone(),
        model: "gpt-test".into(),
        workdir: work,
        permissions: Permissions::WorkspaceWrite,
        max_turns: 1,
        max_model_turns: 1,
        home,
        limits: SessionLimits::default(),
        protected: corral_policy::Protected::default(),
        network: None,
        commands: Vec::new(),
        confirm_writes: None,
    };
    let s = Session::new(cfg, backend, Arc::new(Scripted))?;
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let start = Instant::now();
    let first = tokio::spawn(async move {
        let trace = std::env::var_os("CORRAL_BENCH_TRACE").is_some();
        let mut first = None;
        while let Some(ev) = rx.recv().await {
            first.get_or_insert_with(|| start.elapsed());
            if trace {
                eprintln!("{:>6} ms {ev:?}", start.elapsed().as_millis());
            }
        }
        first
    });
    let report = s.run_turn("say hi", tx).await?;
    let end = start.elapsed();
    let first = first.await?.ok_or("no event")?;
    if !report.ok {
        return Err(format!("the turn failed: {report:?}").into());
    }
    Ok((first, end))
}

/// (to first line, to the end) of the same codex under bwrap, its upstream at `port`.
async fn bwrap_turn(cli: &Installed, port: u16, dir: &Path) -> Res<(Duration, Duration)> {
    let (work, home) = (dir.join("work"), dir.join("home"));
    std::fs::create_dir_all(&work)?;
    std::fs::create_dir_all(&home)?;
    let launch = Adapter::Codex.launch(&TurnSpec {
        program: &cli.program,
        model: "gpt-test",
        home: &home,
        proxy_url: &format!("http://127.0.0.1:{port}"),
        token: "bench",
        resume: None,
        max_model_turns: 1,
    });
    for (p, c) in &launch.files {
        std::fs::write(p, c)?;
    }
    let mut cmd = tokio::process::Command::new("bwrap");
    cmd.args([
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]);
    // The CLI's install read-only (it may be under `/tmp`, which the tmpfs hides), then the
    // workdir and home read-write: as corral binds them.
    cmd.arg("--ro-bind").arg(&cli.dir).arg(&cli.dir);
    for d in [&work, &home] {
        cmd.arg("--bind").arg(d).arg(d);
    }
    cmd.args([
        "--unshare-all",
        "--share-net",
        "--die-with-parent",
        "--chdir",
    ])
    .arg(&work)
    .arg("--")
    .args(&launch.argv)
    .env_clear()
    .envs(launch.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::null());
    let start = Instant::now();
    let mut child = cmd.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(b"say hi").await?;
    }
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut first = None;
    while let Some(_line) = lines.next_line().await? {
        first.get_or_insert_with(|| start.elapsed());
    }
    let status = child.wait().await?;
    let end = start.elapsed();
    if !status.success() {
        return Err(format!("codex under bwrap: {status}").into());
    }
    Ok((first.ok_or("no output")?, end))
}

fn summary(name: &str, runs: &mut [(Duration, Duration)]) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut firsts: Vec<f64> = runs.iter().map(|r| ms(r.0)).collect();
    let mut ends: Vec<f64> = runs.iter().map(|r| ms(r.1)).collect();
    firsts.sort_by(f64::total_cmp);
    ends.sort_by(f64::total_cmp);
    let mid = firsts.len() / 2;
    println!(
        "| {name} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {} |",
        firsts[mid],
        firsts[0],
        ends[mid],
        ends[0],
        firsts.len()
    );
}

fn main() -> Res<()> {
    // The sandbox helper (`/proc/self/exe __sandbox-exec`), dispatched before a runtime starts.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == corral_exec::HELPER_ARG)
    {
        corral_exec::helper_main();
    }
    tokio::runtime::Runtime::new()?.block_on(bench())
}

async fn bench() -> Res<()> {
    let bin =
        PathBuf::from(std::env::var("CORRAL_BENCH_CODEX").map_err(|_| "set CORRAL_BENCH_CODEX")?);
    let runs: usize = std::env::var("CORRAL_BENCH_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(7);
    let dir = bin.ancestors().nth(4).unwrap_or(&bin).to_path_buf();
    let cli = Installed::at(
        Adapter::Codex,
        "bench",
        dir,
        vec![bin.to_string_lossy().into_owned()],
    );
    let helper = PathBuf::from("/proc/self/exe");
    let host = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = host.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((c, _)) = host.accept().await {
            tokio::spawn(serve(c));
        }
    });
    let tmp = tempfile::tempdir()?;
    let (mut cold, mut warm, mut bw) = (Vec::new(), Vec::new(), Vec::new());
    // As corral serve runs agent turns: writes through the copy-on-write layer, applied at the end.
    let cold_backend = Arc::new(
        LinuxBackend::new(helper.clone())
            .with_warm_pool(0)
            .with_attached_write_layer(),
    );
    let warm_backend = Arc::new(
        LinuxBackend::new(helper)
            .with_warm_pool(1)
            .with_attached_write_layer(),
    );
    // One untimed turn of each first: the binary in the page cache, the warm sandbox made.
    corral_turn(&cli, Arc::clone(&warm_backend), &tmp.path().join("w0")).await?;
    bwrap_turn(&cli, port, &tmp.path().join("b0")).await?;
    for i in 0..runs {
        cold.push(
            corral_turn(
                &cli,
                Arc::clone(&cold_backend),
                &tmp.path().join(format!("c{i}")),
            )
            .await?,
        );
        // Let the warm pool refill between turns, as between a server's sessions.
        tokio::time::sleep(Duration::from_millis(300)).await;
        warm.push(
            corral_turn(
                &cli,
                Arc::clone(&warm_backend),
                &tmp.path().join(format!("w{}", i + 1)),
            )
            .await?,
        );
        bw.push(bwrap_turn(&cli, port, &tmp.path().join(format!("b{}", i + 1))).await?);
    }
    println!("| case | first event, median | min | turn end, median | min | runs |");
    println!("|---|---|---|---|---|---|");
    summary("corral, cold sandbox", &mut cold);
    summary("corral, warm sandbox", &mut warm);
    summary("bwrap by hand", &mut bw);
    Ok(())
}
