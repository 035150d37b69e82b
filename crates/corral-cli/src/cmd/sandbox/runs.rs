//! `corral sandbox runs get | outputs | list`.

use clap::Subcommand;
use corral_client::sandbox::{Output, PageRequest, Run};

use super::{Conn, Lab, printable, printable_text};
use crate::{CliResult, Exit, Format};

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show a run's record: status, backend and its attestation, step counters, verdict.
    Get {
        /// The run's id.
        id: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Show a run's per-step outputs (inputs and answers, mock-miss markers included).
    Outputs {
        /// The run's id.
        id: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// List the tenant's runs, newest first.
    List {
        /// Only the runs of this scenario.
        #[arg(long, value_name = "ID")]
        scenario: Option<String>,
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

pub(crate) fn run(c: Command) -> CliResult {
    match c {
        Command::Get { id, conn } => {
            let run = Lab::open(&conn)?.get_run(&id)?;
            match conn.format {
                Format::Json => crate::output::print_json(&run),
                Format::Human => print_run(&run),
            }
            Ok(Exit::Ok)
        }
        Command::Outputs { id, conn } => {
            let outputs = Lab::open(&conn)?.outputs(&id)?;
            match conn.format {
                Format::Json => crate::output::print_json(&outputs),
                Format::Human => {
                    if outputs.items.is_empty() {
                        outln!("no outputs");
                    }
                    for o in &outputs.items {
                        print_output(o);
                    }
                }
            }
            Ok(Exit::Ok)
        }
        Command::List {
            scenario,
            limit,
            after,
            conn,
        } => {
            let page =
                Lab::open(&conn)?.list_runs(scenario.as_deref(), &PageRequest { limit, after })?;
            match conn.format {
                Format::Json => crate::output::print_json(&page),
                Format::Human => {
                    if page.items.is_empty() {
                        outln!("no runs");
                    }
                    for r in &page.items {
                        outln!(
                            "{}  {}  {}  {}  scenario={}  steps {}/{} ok{}",
                            r.id,
                            printable(&r.status),
                            printable(&r.variant),
                            verdict_text(&r.verdict),
                            r.scenario_id,
                            r.steps_ok,
                            r.steps_total,
                            passes_text(r).map(|p| format!("  {p}")).unwrap_or_default()
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

/// The exit code of a run: 0 completed and not failed by its scorer, else 1.
pub(crate) fn run_exit(run: &Run) -> Exit {
    if run.status == "completed" && run.verdict != "failed" {
        Exit::Ok
    } else {
        Exit::Findings
    }
}

/// A scored run's trials passed and pass@k / pass^k, e.g. `trials passed 2/3, pass@3 1.0000,
/// pass^3 0.0000`; `None` for a run that was not scored (it has none of them).
fn passes_text(r: &Run) -> Option<String> {
    let (passed, at, hat) = (r.trials_passed?, r.pass_at_k?, r.pass_hat_k?);
    let k = r.trials.unwrap_or(1);
    Some(format!(
        "trials passed {passed}/{k}, pass@{k} {at:.4}, pass^{k} {hat:.4}"
    ))
}

fn verdict_text(v: &str) -> String {
    match v {
        "not_scored" => "executed, not scored".to_owned(),
        v => printable(v),
    }
}

/// A run record for people.
pub(crate) fn print_run(r: &Run) {
    outln!(
        "run {}: {} (scenario {}, variant {})",
        r.id,
        printable(&r.status),
        r.scenario_id,
        printable(&r.variant)
    );
    outln!(
        "  backend {} via {}: isolated {}, destroyed {}; purpose {}",
        printable(&r.backend),
        printable(&r.runner),
        r.isolated,
        r.destroyed,
        printable(&r.purpose)
    );
    outln!(
        "  steps: {} total, {} ok, {} error; infrastructure errors: {}",
        r.steps_total,
        r.steps_ok,
        r.steps_error,
        r.infra_errors
    );
    let scored = match (&r.scorer_suite, r.score) {
        (Some(suite), Some(score)) => format!(" (scorer {}, score {score:.4})", printable(suite)),
        (Some(suite), None) => format!(" (scorer {})", printable(suite)),
        _ => String::new(),
    };
    outln!("  verdict: {}{scored}", verdict_text(&r.verdict));
    if let Some(p) = passes_text(r) {
        outln!("  {p}");
    }
    if let Some(seed) = r.seed {
        outln!("  seed {seed}, trials {}", r.trials.unwrap_or(1));
    }
    if let Some(e) = r.extra.get("error").filter(|e| !e.is_null()) {
        outln!(
            "  error: [{}] {}",
            printable(e["code"].as_str().unwrap_or("?")),
            printable(e["message"].as_str().unwrap_or(""))
        );
    }
    for m in &r.mock_misses {
        outln!(
            "  mock miss: step {} op {} args {}",
            m.step,
            printable(&m.op),
            printable(&m.args_hash)
        );
    }
}

fn print_output(o: &Output) {
    let status = if o.ok {
        "ok".to_owned()
    } else {
        format!(
            "error {}",
            printable(o.error_code.as_deref().unwrap_or("-"))
        )
    };
    let scored = match (o.score, o.pass) {
        (Some(s), Some(p)) => format!("  score {s:.4} {}", if p { "pass" } else { "fail" }),
        (Some(s), None) => format!("  score {s:.4}"),
        _ => String::new(),
    };
    outln!(
        "step {} trial {}  {status}{scored}\n  input:  {}\n  output: {}",
        o.step,
        o.trial,
        printable_text(&o.input),
        printable_text(&o.output)
    );
}
