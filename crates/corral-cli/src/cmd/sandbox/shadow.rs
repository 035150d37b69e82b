//! `corral sandbox shadow run | get | list`: shadow evaluation (issue 15 items 3-5), M recorded
//! tasks re-run under N variants with the real tools inside the isolation backend, unsafe ops
//! absent.
//!
//! `run` announces the cost first ("N variants x M tasks = N*M runs"); above
//! [`corral_lab::shadow::CONFIRM_THRESHOLD`] runs it asks on a terminal, and without one it
//! refuses (exit 1) unless `--yes` was passed. The confirmed count is sent as `expected_runs`, so
//! the server runs exactly what was announced. With `--local` the runs execute in-process and a
//! progress bar follows them; with `--server` the server runs the evaluation in the background
//! (`POST /v1/sandbox/shadows` answers 202 `running`) and the command polls
//! `GET /v1/sandbox/shadows/{id}`, drawing `ran` of `planned`, until it ends. The progress bar is
//! drawn on stderr, only when stderr is a terminal. Then the report: per run its divergence from
//! the recording, the pairs a ceiling stopped, and the metering (model tokens and spend: not
//! known). Exit 0 when every planned run ran, 1 when a ceiling stopped some or the evaluation
//! failed.

use std::io::{BufRead as _, IsTerminal as _};
use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use corral_client::sandbox::{PageRequest, Shadow, ShadowRequest, VariantSpec};
use corral_lab::shadow::{CONFIRM_THRESHOLD, Progress};
use corral_policy::codes;
use serde_json::Value;

use super::{Conn, Lab, printable, printable_text};
use crate::{CliError, CliResult, Exit, Format};

/// How often `run --server` reads the evaluation back while it runs.
const POLL_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Re-run recorded tasks under one or more variants (N variants x M tasks = N*M runs, each
    /// a lab run of purpose `replay` with the real tools, unsafe ops absent).
    ///
    /// Every variant is checked before anything runs: its first unsafe or unknown op is named
    /// and nothing runs. Above 10 runs the count is confirmed (on a terminal) or `--yes` is
    /// needed. The run ids per task and variant are in the report (`-o json`: `runs`).
    Run(RunArgs),
    /// Show a shadow evaluation: its progress while it runs, its report when it ends.
    Get {
        /// The evaluation's id.
        id: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// List the tenant's shadow evaluations, newest first.
    List {
        /// Rows per page.
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
        /// Start after this cursor (the `next` of the previous page).
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// A recorded task: the run id of a recording that kept its task input (repeatable).
    #[arg(long = "task", value_name = "RUN", required = true, num_args = 1..)]
    tasks: Vec<String>,
    /// A workflow variant: its label and its YAML file (repeatable).
    #[arg(long = "variant", value_name = "NAME=WORKFLOW.yaml")]
    variants: Vec<String>,
    /// An external program variant: its label and its name under `sandbox.programs`, whose
    /// entry declares `tools:` (repeatable).
    #[arg(long = "program-variant", value_name = "NAME=PROGRAM")]
    program_variants: Vec<String>,
    /// Run without asking, whatever the count (it is still printed first).
    #[arg(long)]
    yes: bool,
    /// The scorer of every run: exact, regex, json_path or command:NAME (default: not scored).
    #[arg(long, value_name = "S")]
    scorer: Option<String>,
    /// The seed of every run.
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// The principal whose recording of each task to re-run (its identity, or its id), when
    /// several principals recorded under a run id (an admin's pick).
    #[arg(long, value_name = "IDENTITY")]
    owner: Option<String>,
    #[command(flatten)]
    conn: Conn,
}

pub(crate) fn run(c: Command) -> CliResult {
    match c {
        Command::Run(a) => run_shadow(a),
        Command::Get { id, conn } => {
            let s = get(&Lab::open(&conn)?, &id)?;
            print_shadow(&s, conn.format);
            Ok(exit_of(&s))
        }
        Command::List { limit, after, conn } => {
            let lab = Lab::open(&conn)?;
            let page = PageRequest { limit, after };
            let page = match &lab {
                Lab::Remote { client, rt } => rt
                    .block_on(client.sandbox_list_shadows(&page))
                    .map_err(crate::context::remote_error)?,
                Lab::Local { app, caller, rt } => {
                    let q = corral_lab::service::PageQuery {
                        limit: page.limit.unwrap_or(0),
                        after: page.after.clone(),
                    };
                    let p = rt
                        .block_on(app.runtime().lab().list_shadows(caller, &rid(), &q))
                        .map_err(refused)?;
                    convert(&serde_json::json!({
                        "items": p.items,
                        "next": p.next.as_ref().map(ToString::to_string),
                    }))?
                }
            };
            match conn.format {
                Format::Json => crate::output::print_json(&page),
                Format::Human => {
                    if page.items.is_empty() {
                        outln!("no shadow evaluations");
                    }
                    for s in &page.items {
                        outln!(
                            "{}  {}  {} of {} run(s)  {} variant(s) x {} task(s)",
                            printable(&s.id),
                            printable(&s.status),
                            s.ran,
                            s.planned,
                            s.variants.len(),
                            s.tasks.len()
                        );
                    }
                    if let Some(next) = &page.next {
                        outln!("more: --after {}", printable(next));
                    }
                }
            }
            Ok(Exit::Ok)
        }
    }
}

fn rid() -> String {
    uuid::Uuid::now_v7().to_string()
}

fn refused(e: corral_lab::service::LabError) -> CliError {
    CliError::coded(e.code, e.message).with_exit(Exit::Findings)
}

fn convert<T: serde::de::DeserializeOwned>(v: &impl serde::Serialize) -> Result<T, CliError> {
    serde_json::to_value(v)
        .and_then(serde_json::from_value)
        .map_err(|e| CliError::usage(format!("the lab's shadow evaluation cannot be read: {e}")))
}

fn get(lab: &Lab, id: &str) -> Result<Shadow, CliError> {
    match lab {
        Lab::Remote { client, rt } => rt
            .block_on(client.sandbox_shadow(id))
            .map_err(crate::context::remote_error),
        Lab::Local { app, caller, rt } => convert(
            &rt.block_on(app.runtime().lab().get_shadow(caller, &rid(), id))
                .map_err(refused)?,
        ),
    }
}

/// `NAME=VALUE`, both non-empty.
fn pair<'a>(s: &'a str, flag: &str, value: &str) -> Result<(&'a str, &'a str), CliError> {
    match s.split_once('=') {
        Some((n, v)) if !n.is_empty() && !v.is_empty() => Ok((n, v)),
        _ => Err(CliError::usage(format!(
            "`{flag} {s}` is not `NAME={value}`; give the variant's label, `=`, and its {}",
            value.to_lowercase()
        ))),
    }
}

fn request(a: &RunArgs) -> Result<ShadowRequest, CliError> {
    let mut variants = Vec::new();
    for v in &a.variants {
        let (name, file) = pair(v, "--variant", "WORKFLOW.yaml")?;
        variants.push(VariantSpec {
            variant: name.to_owned(),
            workflow: Some(super::read_text(&PathBuf::from(file), "workflow")?),
            program: None,
        });
    }
    for v in &a.program_variants {
        let (name, program) = pair(v, "--program-variant", "PROGRAM")?;
        variants.push(VariantSpec {
            variant: name.to_owned(),
            workflow: None,
            program: Some(program.to_owned()),
        });
    }
    if variants.is_empty() {
        return Err(CliError::usage(
            "name at least one variant: `--variant NAME=WORKFLOW.yaml` or `--program-variant NAME=PROGRAM`",
        ));
    }
    Ok(ShadowRequest {
        tasks: a.tasks.clone(),
        variants,
        seed: a.seed,
        scorer: a.scorer.clone(),
        expected_runs: None,
        principal: a.owner.clone(),
    })
}

/// Asks on the terminal whether to run `planned` runs; `false` unless the answer is yes.
fn confirmed(planned: u64) -> bool {
    eprint!("run them? {planned} full agent runs [y/N] ");
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

fn run_shadow(a: RunArgs) -> CliResult {
    let mut req = request(&a)?;
    let (n, m) = (req.variants.len() as u64, req.tasks.len() as u64);
    let planned = n.saturating_mul(m);
    let announce = format!(
        "{n} variant{} x {m} task{} = {planned} run{}",
        if n == 1 { "" } else { "s" },
        if m == 1 { "" } else { "s" },
        if planned == 1 { "" } else { "s" },
    );
    // The cost first, before anything runs (on stderr with `-o json`, so stdout stays JSON).
    match a.conn.format {
        Format::Human => outln!("{announce}"),
        Format::Json => eprintln!("{announce}"),
    }
    if planned > CONFIRM_THRESHOLD && !a.yes {
        let tty = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
        if !tty {
            return Err(CliError::coded(
                codes::REPLAY_CONFIRM_NEEDED,
                format!(
                    "{announce}: over {CONFIRM_THRESHOLD} runs, a shadow evaluation is confirmed before it starts, and there is no terminal to ask on; pass `--yes` to run them. Nothing was run"
                ),
            )
            .with_exit(Exit::Findings));
        }
        if !confirmed(planned) {
            return Err(CliError::coded(
                codes::REPLAY_CONFIRM_NEEDED,
                format!("{announce}: not confirmed. Nothing was run"),
            )
            .with_exit(Exit::Findings));
        }
    }
    req.expected_runs = Some(planned);
    let lab = Lab::open(&a.conn)?;
    let bar = Bar::new(planned);
    let shadow = match &lab {
        Lab::Local { app, caller, rt } => {
            let body: corral_lab::shadow::ShadowBody = corral_lab::service::parse(
                "a shadow evaluation",
                serde_json::to_value(&req).unwrap_or(Value::Null),
            )
            .map_err(refused)?;
            let on_progress = |p: Progress| bar.set(p.done);
            let s = rt
                .block_on(app.runtime().lab().shadow_with_progress(
                    caller,
                    &rid(),
                    body,
                    &on_progress,
                ))
                .map_err(refused)?;
            convert(&s)?
        }
        Lab::Remote { client, rt } => {
            let mut s = rt
                .block_on(client.sandbox_start_shadow(&req))
                .map_err(crate::context::remote_error)?;
            while s.status == "running" {
                bar.set(s.ran);
                std::thread::sleep(POLL_EVERY);
                s = rt
                    .block_on(client.sandbox_shadow(&s.id))
                    .map_err(crate::context::remote_error)?;
            }
            s
        }
    };
    drop(bar);
    print_shadow(&shadow, a.conn.format);
    Ok(exit_of(&shadow))
}

fn exit_of(s: &Shadow) -> Exit {
    match s.status.as_str() {
        "completed" | "running" => Exit::Ok,
        _ => Exit::Findings,
    }
}

/// A progress bar of runs on stderr, drawn only when stderr is a terminal.
struct Bar(Option<indicatif::ProgressBar>);

impl Bar {
    fn new(planned: u64) -> Self {
        if !std::io::stderr().is_terminal() {
            return Bar(None);
        }
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(planned),
            indicatif::ProgressDrawTarget::stderr(),
        );
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} replay runs ({elapsed})")
        {
            bar.set_style(style);
        }
        Bar(Some(bar))
    }

    fn set(&self, done: u64) {
        if let Some(b) = &self.0 {
            b.set_position(done);
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            b.finish_and_clear();
        }
    }
}

fn print_shadow(s: &Shadow, format: Format) {
    if format == Format::Json {
        crate::output::print_json(s);
        return;
    }
    let not_run = s.not_run.as_array().map_or(0, Vec::len);
    outln!(
        "shadow evaluation {}: {}; planned {}, ran {}, not run {}",
        printable(&s.id),
        printable(&s.status),
        s.planned,
        s.ran,
        not_run
    );
    let report = &s.report;
    if let Some(runs) = report["runs"].as_array() {
        for r in runs {
            let text = |k: &str| printable(r[k].as_str().unwrap_or(""));
            let divergence = match (&r["divergence"], r["timeline"].as_str()) {
                (_, Some("degraded")) => format!(
                    "recording degraded: {}",
                    printable_text(r["degraded"].as_str().unwrap_or(""))
                ),
                (Value::Null, _) if r["withheld"] == Value::Bool(true) => {
                    if r["diverged"] == Value::Bool(true) {
                        "diverged (where: only the recording's principal or an admin sees it)"
                            .to_owned()
                    } else {
                        "no divergence".to_owned()
                    }
                }
                (Value::Null, _) => "no divergence".to_owned(),
                (d, _) => format!(
                    "diverged at call {}: {} (recorded: {})",
                    d["step"],
                    printable(d["op"].as_str().unwrap_or("no call")),
                    printable(d["recorded"]["op"].as_str().unwrap_or("no call"))
                ),
            };
            outln!(
                "  {} on {}  run {}  {}  {}/{} steps ok  {} call(s)  {divergence}",
                text("variant"),
                text("task"),
                text("run_id"),
                text("status"),
                r["steps_ok"],
                r["steps_total"],
                r["calls"]
            );
        }
    }
    if let Some(pairs) = s.not_run.as_array() {
        for p in pairs {
            outln!(
                "  not run: {} on {}",
                printable(p["variant"].as_str().unwrap_or("")),
                printable(p["task"].as_str().unwrap_or(""))
            );
        }
    }
    if let Some(by) = report["stopped_by"].as_str() {
        outln!(
            "stopped by the ceiling `{}` (raise it in the config's `budgets.replay` to run the rest)",
            printable(by)
        );
    }
    if let Some(msg) = report["error"]["message"].as_str() {
        outln!(
            "failed: {} {}",
            printable(report["error"]["code"].as_str().unwrap_or("")),
            printable_text(msg)
        );
    }
    let m = &report["metering"];
    if m.is_object() {
        outln!(
            "metering: replay {} run(s), {} call(s); judge {} run(s), {} call(s); model tokens and spend: not known",
            m["replay"]["runs"],
            m["replay"]["calls"],
            m["judge"]["runs"],
            m["judge"]["calls"]
        );
    }
}
