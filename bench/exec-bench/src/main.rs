//! `exec-bench`: start-to-exit latency of `/bin/true` through corral's exec backends.
//!
//! - `exec-bench process|linux`: one run through that backend, then exit. `bench/exec.sh` times
//!   this with hyperfine next to a bare `/bin/true` and `bwrap`; it pays this binary's own
//!   start-up (and a tokio runtime's), as `bwrap` pays its own exec.
//! - `exec-bench loop [N [variants]]`: in this one process, N timed runs each of a bare spawn,
//!   `bwrap`, the `process` backend, the `linux` backend (default warm pool) and the `linux`
//!   backend without a warm pool (`linux-cold`), interleaved round-robin after a warm-up; prints
//!   the median, p10, p90, p99 and max of each, and the CPU time (this process and its reaped
//!   children) charged per run. `variants` is a comma-separated subset, in the order to run them.
//!   Here the corral backends pay no process start-up, while the bare spawn and `bwrap` are
//!   spawned from the same process like the backends' children.
//! - `EXEC_BENCH_WARM=n` sets the `linux` variant's warm pool size; `EXEC_BENCH_GAP_MS=n` idles
//!   n ms after each run of the loop (untimed), so that background work a run leaves behind (a
//!   warm pool's refill, a network namespace's teardown) is not charged to the next variant.
//! - `linux-hostuid` and `linux-hostuid-cold`: `linux` and `linux-cold` with
//!   `isolation.host_uids` at its default range (as host root: the program runs as an
//!   unprivileged host uid, the run's paths are idmapped binds); loop variants only, not in the
//!   default set.
//! - `EXEC_BENCH_CGROUP_PARENT=dir` puts the linux backends' per-run cgroups under that cgroup
//!   v2 directory (`isolation.cgroup_parent`), e.g. a cgroup made for the measurement under the
//!   unified hierarchy.
//! - `EXEC_BENCH_WRITE_DIR=dir` gives every run `dir` as its cwd and write path (for the
//!   `linux` backend: the cost of a run's copy-on-write layer and its apply).
//! - `exec-bench __sandbox-exec ...`: the linux backend's helper. The backend re-executes this
//!   binary, as `corral` re-executes itself.

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use corral_exec::linux::{DEFAULT_HOST_RANGE, LinuxBackend};
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
    let write_dir = std::env::var_os("EXEC_BENCH_WRITE_DIR").map(PathBuf::from);
    ExecRequest {
        argv: vec!["/bin/true".into()],
        cwd: write_dir.clone().unwrap_or_else(|| PathBuf::from("/")),
        env: Vec::new(),
        stdin: None,
        timeout: Duration::from_secs(10),
        max_output_bytes: 64 * 1024,
        limits: ResourceLimits::default(),
        read_paths: Vec::new(),
        write_paths: write_dir.into_iter().collect(),
        protected: Default::default(),
        network: None,
        exec_only: None,
        hold: None,
        apply_only_if_ok: false,
        host_writes: None,
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
    let backend = LinuxBackend::new(exe)
        .with_cgroup_parent(std::env::var_os("EXEC_BENCH_CGROUP_PARENT").map(PathBuf::from));
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

/// Every variant of the loop, in its order.
const VARIANTS: &[&str] = &["bare", "bwrap", "process", "linux", "linux-cold"];

/// CPU time (user + system) of this process and of its reaped children so far, from
/// `/proc/self/stat` (in `USER_HZ` ticks, 100 per second: coarse per run, fine summed over many).
/// The linux backend's starter thread and the helpers it reaps are counted too, so the warm
/// pool's background work shows here even when it is off a run's path.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime, stime, cutime, cstime are fields 14 to 17; `rest` starts at field 3.
    let ticks: u64 = (11..15)
        .filter_map(|i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    Duration::from_millis(ticks * 10)
}

fn in_process_loop(n: usize, names: &[&str]) -> Result<(), String> {
    let rt = runtime()?;
    let process = ProcessBackend::new();
    let linux = linux_backend(None)?;
    let cold = linux_backend(Some(0))?;
    let hostuid = linux_backend(None)?.with_host_ids(Some(DEFAULT_HOST_RANGE));
    let hostuid_cold = linux_backend(Some(0))?.with_host_ids(Some(DEFAULT_HOST_RANGE));
    for backend in [&linux, &cold, &hostuid, &hostuid_cold] {
        backend
            .preflight()
            .map_err(|e| format!("linux preflight: {e}"))?;
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); names.len()];
    // CPU time charged between the start of one variant's run and the start of the next one's
    // (a warm pool refilling in the background is charged to the variants that follow it).
    let mut cpu: Vec<Duration> = vec![Duration::ZERO; names.len()];
    let gap = match std::env::var("EXEC_BENCH_GAP_MS") {
        Ok(ms) => Duration::from_millis(
            ms.parse()
                .map_err(|e| format!("EXEC_BENCH_GAP_MS={ms}: {e}"))?,
        ),
        Err(_) => Duration::ZERO,
    };
    for round in 0..WARMUP + n {
        for (i, name) in names.iter().enumerate() {
            let cpu_before = cpu_time();
            let start = Instant::now();
            match *name {
                "bare" => spawn("/bin/true", &[])?,
                "bwrap" => spawn("bwrap", BWRAP)?,
                "process" => run_backend(&rt, &process, request())?,
                "linux" => run_backend(&rt, &linux, request())?,
                "linux-cold" => run_backend(&rt, &cold, request())?,
                "linux-hostuid" => run_backend(&rt, &hostuid, request())?,
                "linux-hostuid-cold" => run_backend(&rt, &hostuid_cold, request())?,
                other => return Err(format!("no variant `{other}` ({})", VARIANTS.join(", "))),
            }
            let elapsed = start.elapsed();
            // Background work a run left (a warm pool's refill, a namespace's teardown) is
            // done in the gap, not during the next variant's run.
            std::thread::sleep(gap);
            if round >= WARMUP {
                if let Some(s) = samples.get_mut(i) {
                    s.push(elapsed);
                }
                if let Some(c) = cpu.get_mut(i) {
                    *c += cpu_time().saturating_sub(cpu_before);
                }
            }
        }
    }
    println!(
        "in-process loop: {n} runs each after {WARMUP} warm-up rounds, interleaved: {}; {} ms idle after each run",
        names.join(", "),
        gap.as_millis()
    );
    println!(
        "{:<18} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "variant", "median ms", "p10 ms", "p90 ms", "p99 ms", "max ms", "cpu ms/run"
    );
    let mut medians = std::collections::BTreeMap::new();
    for ((name, s), c) in names.iter().zip(samples.iter_mut()).zip(&cpu) {
        s.sort_unstable();
        let median = quantile(s, 0.5);
        medians.insert(*name, median);
        #[expect(clippy::cast_precision_loss, reason = "a count of a few hundred runs")]
        let per_run = c.as_secs_f64() * 1000.0 / n as f64;
        println!(
            "{name:<18} {median:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {per_run:>12.3}",
            quantile(s, 0.1),
            quantile(s, 0.9),
            quantile(s, 0.99),
            quantile(s, 1.0)
        );
    }
    let ratio = |a: &str, b: &str| {
        if let (Some(x), Some(y)) = (medians.get(a), medians.get(b)) {
            println!("ratio {:<22} {:.2}", format!("{a}/{b}"), x / y);
        }
    };
    ratio("linux", "bwrap");
    ratio("linux-cold", "bwrap");
    ratio("process", "bare");
    ratio("linux", "process");
    ratio("linux-hostuid", "linux");
    ratio("linux-hostuid-cold", "linux-cold");
    ratio("linux-hostuid", "bwrap");
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(corral_exec::HELPER_ARG) {
        corral_exec::helper_main();
    }
    let result = match args.first().map(String::as_str) {
        Some(which @ ("process" | "linux" | "linux-cold")) => once(which),
        Some("loop") => {
            let names: Vec<&str> = match args.get(2) {
                Some(list) => list.split(',').collect(),
                None => VARIANTS.to_vec(),
            };
            match args.get(1).map(|n| n.parse::<usize>()) {
                None => in_process_loop(200, &names),
                Some(Ok(n)) if n > 0 => in_process_loop(n, &names),
                Some(_) => Err("the loop count must be a positive number".into()),
            }
        }
        _ => Err(
            "usage: exec-bench process|linux|linux-cold | exec-bench loop [N [variant,...]]".into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("exec-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
