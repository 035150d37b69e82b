//! `corral sandbox ...`: the lab from the command line. `generate` and `compare --inspect` work
//! locally; every other command talks to a server's `/v1/sandbox/...` routes (`--server`, the
//! token from `$CORRAL_TOKEN` or `--token-env`), or works in-process with `--local` through the
//! runtime's lab, with the same checks, audit and store.

mod compare;
mod generate;
mod lab;
mod metering;
mod recordings;
mod replay;
mod runs;
mod scenarios;
mod shadow;
mod tournament;

use std::io::Read as _;
use std::path::{Path, PathBuf};

use clap::Subcommand;

use crate::{CliError, CliResult, Format};

pub(crate) use lab::Lab;

/// `corral sandbox`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate synthetic step inputs from a template (local; stores nothing).
    ///
    /// The template (`--seed-file`, `-` for stdin) takes `{{index}}` (from 1) and
    /// `{{subject_kind}}`; all other text is literal, newlines kept. Defaults: subject `agent`,
    /// count 10, template `{{subject_kind}}-sample-{{index}}`. Limits: count 1 to 100, subject
    /// 200 bytes, template and each input 8192 bytes; a request over one is refused whole.
    /// `--format json` prints `{"samples": [...]}`, which `scenarios create --steps-file` takes.
    Generate(generate::Args),
    /// Create, update, list, read and run scenarios (steps and mocks).
    #[command(subcommand)]
    Scenarios(scenarios::Command),
    /// Read runs and their per-step outputs.
    #[command(subcommand)]
    Runs(runs::Command),
    /// Compare a baseline and a candidate on the same scenarios, mocks and seeds, and record the
    /// verdict; or, with `--inspect BASE.eval CAND.eval`, compare two Inspect AI eval logs
    /// (local, nothing stored).
    ///
    /// The verdict: `improved` when the 95% interval of the mean paired difference is above 0,
    /// `regressed` when below, `unchanged` when inside +/- margin, else `inconclusive`; forced
    /// `inconclusive` with fewer than 10 scenarios, fewer than 6 discordant pairs, infrastructure
    /// errors above 5%, or an unscored run. Exit codes: 0 a verdict, 1 `regressed` or a refusal,
    /// 2 usage or connection error.
    Compare(compare::Args),
    /// Grade finished runs of one scenario (one per variant) by a command judge asked about
    /// every task and pair in both orders: a Bradley-Terry ranking with 95% bootstrap
    /// intervals, the judge's position bias, and the verdict between the top two. The answer
    /// is stored (`tournaments get ID`). Exit codes: 0 graded, 1 a refusal, a judge error or a pair not judged (the
    /// judge ceiling), 2 usage or connection error.
    Tournament(tournament::Args),
    /// Read stored tournaments.
    #[command(subcommand)]
    Tournaments(tournament::Recorded),
    /// Read recorded comparisons.
    #[command(subcommand)]
    Comparisons(compare::Recorded),
    /// Read the recorded call timelines of runs (an admin, or the run's own principal).
    #[command(subcommand)]
    Recordings(recordings::Command),
    /// Replay a recorded run deterministically: its recorded responses answer every call.
    ///
    /// Without a variant, the recorded calls are re-issued through today's guard chain and
    /// every output compared byte for byte with the recorded one; with `--variant` (and
    /// `--workflow FILE` or `--program NAME`), the recorded task input is re-run and each call
    /// the recording lacks is reported as a divergence (step, op, arguments hash, what was
    /// expected). A recording that is gapped or capped is `degraded`: zero steps. Exit codes: 0
    /// identical or without divergence, 1 otherwise or a refusal, 2 usage or connection error.
    Replay(replay::Args),
    /// Shadow evaluation: re-run recorded tasks under N variants with the real tools, unsafe
    /// ops absent (N*M runs, announced first), and read the evaluations back.
    #[command(subcommand)]
    Shadow(shadow::Command),
    /// Show the tenant's runs and calls per purpose (live, simulation, replay, judge), as the
    /// server counted them since it started (admin). Model tokens and spend print `not known`
    /// until something meters them.
    Metering(metering::Args),
}

/// Where a lab command works (a server, or in-process), as whom, and how it prints.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Conn {
    /// The server (default: $CORRAL_SERVER, else http://127.0.0.1:9000).
    #[arg(
        long,
        visible_alias = "url",
        value_name = "URL",
        conflicts_with = "local"
    )]
    pub(crate) server: Option<String>,
    /// The environment variable holding the token (default: CORRAL_TOKEN, if set).
    #[arg(long, value_name = "NAME", conflicts_with = "local")]
    pub(crate) token_env: Option<String>,
    /// Work in-process through the config's lab (same checks, audit and store), without a
    /// server.
    #[arg(long)]
    pub(crate) local: bool,
    /// The config file for `--local` (default: $CORRAL_CONFIG, else ./corral.yaml).
    #[arg(long, short = 'c', value_name = "FILE", requires = "local")]
    pub(crate) config: Option<PathBuf>,
    /// For `--local`: act as the token with this id (default: anonymous, when the config has
    /// no tokens; an anonymous caller has no role, so the lab refuses it).
    #[arg(long, value_name = "ID", requires = "local")]
    pub(crate) principal: Option<String>,
    /// Output format (`json` prints the lab's JSON answer).
    #[arg(long, short = 'o', value_enum, default_value_t)]
    pub(crate) format: Format,
}

/// Runs a `corral sandbox` command.
pub fn run(args: Args) -> CliResult {
    match args.command {
        Command::Generate(a) => generate::run(a),
        Command::Scenarios(c) => scenarios::run(c),
        Command::Runs(c) => runs::run(c),
        Command::Compare(a) => compare::run(a),
        Command::Tournament(a) => tournament::run(a),
        Command::Tournaments(c) => tournament::recorded(c),
        Command::Comparisons(c) => compare::recorded(c),
        Command::Recordings(c) => recordings::run(c),
        Command::Replay(a) => replay::run(a),
        Command::Shadow(c) => shadow::run(c),
        Command::Metering(a) => metering::run(a),
    }
}

/// The most bytes a file a lab command sends may have: the server's request limit.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The bytes of `path` (`-`: stdin), at most `max` (+1, so a longer one is seen as such).
pub(crate) fn read_input(path: &Path, max: u64, what: &str) -> Result<Vec<u8>, CliError> {
    let mut buf = Vec::new();
    let res = if path == Path::new("-") {
        std::io::stdin().lock().take(max + 1).read_to_end(&mut buf)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(max + 1).read_to_end(&mut buf))
    };
    res.map_err(|e| CliError::usage(format!("cannot read the {what} `{}`: {e}", path.display())))?;
    Ok(buf)
}

/// A JSON file a lab command sends (at most 1 MiB, the server's request limit).
pub(crate) fn read_json(path: &Path, what: &str) -> Result<serde_json::Value, CliError> {
    let bytes = read_input(path, MAX_FILE_BYTES, what)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(CliError::usage(format!(
            "the {what} `{}` is over the 1 MiB request limit; split the scenario",
            path.display()
        )));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        CliError::usage(format!(
            "the {what} `{}` is not JSON: {e}; fix the file",
            path.display()
        ))
    })
}

/// A text file a lab command sends (a workflow's YAML), at most 1 MiB.
pub(crate) fn read_text(path: &Path, what: &str) -> Result<String, CliError> {
    let bytes = read_input(path, MAX_FILE_BYTES, what)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(CliError::usage(format!(
            "the {what} `{}` is over the 1 MiB request limit; shorten it",
            path.display()
        )));
    }
    String::from_utf8(bytes).map_err(|_| {
        CliError::usage(format!(
            "the {what} `{}` is not UTF-8 text; save it as UTF-8",
            path.display()
        ))
    })
}

/// `s` as printed in a column: as is when plain, else quoted with escapes (a stored value is
/// whatever a caller or a sandboxed agent wrote: it must not forge lines or drive the terminal).
pub(crate) fn printable(s: &str) -> String {
    crate::cmd::audit::printable(s)
}

/// `s` as printed at the end of a line (an input, an output, a name): as is when it holds no
/// character that could forge a line or drive the terminal (spaces are fine), else quoted with
/// escapes.
pub(crate) fn printable_text(s: &str) -> String {
    let plain = s.chars().all(|c| {
        c == ' ' || (!c.is_whitespace() && c != '"' && c != '\\' && c.escape_debug().count() == 1)
    });
    if plain {
        s.to_owned()
    } else {
        format!("{s:?}")
    }
}

/// A spinner on stderr while a long lab call runs: drawn only when stderr is a terminal, and
/// only once the call has taken more than [`PROGRESS_AFTER`] (a quick answer draws nothing).
pub(crate) struct Progress(Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>);

/// How long a lab call runs before its spinner appears.
const PROGRESS_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

impl Progress {
    /// Starts the spinner's timer, saying `what` once it draws (nothing when stderr is not a
    /// terminal, or not `wanted`).
    pub(crate) fn start(what: String, wanted: bool) -> Progress {
        use std::io::IsTerminal as _;
        if !wanted || !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let ticker = std::thread::spawn(move || {
            if finished.recv_timeout(PROGRESS_AFTER).is_ok() {
                return;
            }
            let bar = indicatif::ProgressBar::with_draw_target(
                None,
                indicatif::ProgressDrawTarget::stderr(),
            );
            if let Ok(style) =
                indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            {
                bar.set_style(style);
            }
            bar.set_message(what);
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            // Until the call ends (or the command's end drops the sender).
            let _ = finished.recv();
            bar.finish_and_clear();
        });
        Progress(Some((done, ticker)))
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some((done, ticker)) = self.0.take() {
            let _ = done.send(());
            // The spinner is cleared before anything is printed.
            let _ = ticker.join();
        }
    }
}
