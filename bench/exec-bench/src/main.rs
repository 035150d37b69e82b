//! `exec-bench`: start-to-exit latency of `/bin/true` through corral's exec backends.
//!
//! - `exec-bench process|linux`: one run through that backend, then exit. `bench/exec.sh` times
//!   this with hyperfine next to a bare `/bin/true` and `bwrap`; it pays this binary's own
//!   start-up (and a tokio runtime's), as `bwrap` pays its own exec.
//! - `exec-bench loop [N]`: in this one process, N timed runs each of a bare spawn, `bwrap`, the
//!   `process` backend and the `linux` backend, interleaved round-robin after a warm-up; prints
//!   the median, p10 and p90 of each. Here the corral backends pay no process start-up, while the
//!   bare spawn and `bwrap` are spawned from the same process like the backends' children.
//! - `exec-bench __sandbox-exec ...`: the linux backend's helper. The backend re-executes this
//!   binary, as `corral` re-executes itself.

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use corral_exec::linux::LinuxBackend;
use corral_exec::process::ProcessBackend;
use corral_exec::{Backend, ExecRequest, ResourceLimits};

/// The bwrap command the linux backend is compared with.
const BWRAP: &[&str] = &[
    "--ro-bind",
    "/",
    "/",
    "--unshare-all",
    "--die-with-parent",
    "/bin/true",
];

/// Warm-up rounds of the in-process loop (not timed).
const WARMUP: usize = 20;

fn request() -> ExecRequest {
    ExecRequest {
        argv: vec!["/bin/true".into()],
        cwd: PathBuf::from("/"),
        env: Vec::new(),
        stdin: None,
        timeout: Duration::from_secs(10),
        max_output_bytes: 64 * 1024,
        limits: ResourceLimits::default(),
        read_paths: Vec::new(),
        write_paths: Vec::new(),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))
}

/// The linux backend with `warm` warm sandboxes (`None`: the backend's default).
fn linux_backend(warm: Option<usize>) -> Result<LinuxBackend, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let backend = LinuxBackend::new(exe);
    // EXEC_BENCH_WARM=n sets the default's pool size (not linux-cold's).
    let warm = match (warm, std::env::var("EXEC_BENCH_WARM")) {
        (None, Ok(n)) => Some(n.parse().map_err(|e| format!("EXEC_BENCH_WARM={n}: {e}"))?),
        (warm, _) => warm,
    };
    Ok(match warm {
        Some(n) => backend.with_warm_pool(n),
        None => backend,
    })
}

/// One run of `req` through `backend`, which must exit 0.
fn run_backend(
    rt: &tokio::runtime::Runtime,
    backend: &dyn Backend,
    req: ExecRequest,
) -> Result<(), String> {
    let out = rt
        .block_on(backend.run(req))
        .map_err(|e| format!("{}: {e}", backend.name()))?;
    if out.exit_code != Some(0) {
        return Err(format!(
            "{}: /bin/true ended with {:?} / signal {:?}: {}",
            backend.name(),
            out.exit_code,
            out.signal,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn spawn(program: &str, args: &[&str]) -> Result<(), String> {
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("{program}: {e}"))?;
    if !status.success() {
        return Err(format!("{program} ended with {status}"));
    }
    Ok(())
}

fn once(which: &str) -> Result<(), String> {
    let rt = runtime()?;
    match which {
        "process" => run_backend(&rt, &ProcessBackend::new(), request()),
        "linux-cold" => run_backend(&rt, &linux_backend(Some(0))?, request()),
        _ => run_backend(&rt, &linux_backend(None)?, request()),
    }
}

/// Milliseconds at quantile `q` of sorted `samples`.
fn quantile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "an index into a few hundred samples"
    )]
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

fn in_process_loop(n: usize) -> Result<(), String> {
    let rt = runtime()?;
    let process = ProcessBackend::new();
    let linux = linux_backend(None)?;
    let cold = linux_backend(Some(0))?;
    for backend in [&linux, &cold] {
        backend
            .preflight()
            .map_err(|e| format!("linux preflight: {e}"))?;
    }
    let names = ["bare", "bwrap", "process", "linux", "linux-cold"];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); names.len()];
    for round in 0..WARMUP + n {
        for (i, name) in names.iter().enumerate() {
            let start = Instant::now();
            match *name {
                "bare" => spawn("/bin/true", &[])?,
                "bwrap" => spawn("bwrap", BWRAP)?,
                "process" => run_backend(&rt, &process, request())?,
                "linux" => run_backend(&rt, &linux, request())?,
                _ => run_backend(&rt, &cold, request())?,
            }
            let elapsed = start.elapsed();
            if round >= WARMUP {
                if let Some(s) = samples.get_mut(i) {
                    s.push(elapsed);
                }
            }
        }
    }
    println!("in-process loop: {n} runs each after {WARMUP} warm-up rounds, interleaved");
    println!(
        "{:<8} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "variant", "median ms", "p10 ms", "p90 ms", "p99 ms", "max ms"
    );
    let mut medians = Vec::new();
    for (name, s) in names.iter().zip(samples.iter_mut()) {
        s.sort_unstable();
        let median = quantile(s, 0.5);
        medians.push(median);
        println!(
            "{name:<8} {median:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
            quantile(s, 0.1),
            quantile(s, 0.9),
            quantile(s, 0.99),
            quantile(s, 1.0)
        );
    }
    if let [bare, bwrap, process, linux, cold] = medians[..] {
        println!("ratio linux/bwrap      {:.2}", linux / bwrap);
        println!("ratio linux-cold/bwrap {:.2}", cold / bwrap);
        println!("ratio process/bare     {:.2}", process / bare);
        println!("ratio linux/process    {:.2}", linux / process);
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(corral_exec::HELPER_ARG) {
        corral_exec::helper_main();
    }
    let result = match args.first().map(String::as_str) {
        Some(which @ ("process" | "linux" | "linux-cold")) => once(which),
        Some("loop") => match args.get(1).map(|n| n.parse::<usize>()) {
            None => in_process_loop(200),
            Some(Ok(n)) if n > 0 => in_process_loop(n),
            Some(_) => Err("the loop count must be a positive number".into()),
        },
        _ => Err("usage: exec-bench process|linux|linux-cold | exec-bench loop [N]".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("exec-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
