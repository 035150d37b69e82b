//! `corral sandbox compare`: a baseline against a candidate on the lab's scenarios (recorded by
//! the lab), or two Inspect AI eval logs (`--inspect BASE.eval CAND.eval`, local: nothing is
//! stored and no server is asked).

use std::path::PathBuf;

use clap::Subcommand;
use corral_client::sandbox::{Comparison, ComparisonRequest, PageRequest, VariantSpec};
use serde_json::Value;

use super::{Conn, Lab, Progress, printable};
use crate::{CliError, CliResult, Exit, Format};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Compare two Inspect AI eval logs, paired by sample id and epoch: BASE.eval CAND.eval.
    #[arg(
        long,
        num_args = 2,
        value_names = ["BASE", "CAND"],
        conflicts_with_all = ["baseline", "candidate", "scenarios", "deploy", "trials", "margin", "workers"]
    )]
    inspect: Option<Vec<PathBuf>>,
    /// The baseline variant's label.
    #[arg(long, value_name = "V", required_unless_present = "inspect")]
    baseline: Option<String>,
    /// The baseline's declarative workflow (YAML file); default: the identity agent.
    #[arg(
        long,
        value_name = "FILE",
        requires = "baseline",
        conflicts_with = "baseline_program"
    )]
    baseline_workflow: Option<PathBuf>,
    /// The baseline's external program (declared under `sandbox.programs`).
    #[arg(long, value_name = "NAME", requires = "baseline")]
    baseline_program: Option<String>,
    /// The candidate variant's label.
    #[arg(long, value_name = "V", required_unless_present = "inspect")]
    candidate: Option<String>,
    /// The candidate's declarative workflow (YAML file); default: the identity agent.
    #[arg(
        long,
        value_name = "FILE",
        requires = "candidate",
        conflicts_with = "candidate_program"
    )]
    candidate_workflow: Option<PathBuf>,
    /// The candidate's external program (declared under `sandbox.programs`).
    #[arg(long, value_name = "NAME", requires = "candidate")]
    candidate_program: Option<String>,
    /// A scenario both run (repeatable; at least 10 for a verdict that is not forced).
    #[arg(long = "scenario", value_name = "ID", required_unless_present = "inspect", num_args = 1..)]
    scenarios: Vec<String>,
    /// Trials per scenario.
    #[arg(long, value_name = "K")]
    trials: Option<u32>,
    /// The seed of the runs and of the bootstrap (stored in the record).
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// The scorer: exact, regex, json_path or command:NAME; with `--inspect`, the Inspect scorer whose
    /// values are read (needed when a log has several).
    #[arg(long, value_name = "S")]
    scorer: Option<String>,
    /// The margin of `unchanged` (default 0.05).
    #[arg(long, value_name = "M")]
    margin: Option<f64>,
    /// Record a deploy comparison (an admin's decision).
    #[arg(long)]
    deploy: bool,
    /// How many runs execute at once, 1 to 8 (default: the CPUs of the server, or of this
    /// machine with `--local`, at most 8). The verdict does not depend on it.
    #[arg(long, value_name = "W")]
    workers: Option<u32>,
    #[command(flatten)]
    conn: Conn,
}

pub(crate) fn run(a: Args) -> CliResult {
    if let Some(paths) = &a.inspect {
        return inspect(paths, &a);
    }
    let workflow = |p: &Option<PathBuf>| {
        p.as_deref()
            .map(|p| super::read_text(p, "workflow"))
            .transpose()
    };
    let req = ComparisonRequest {
        baseline: VariantSpec {
            variant: a.baseline.clone().unwrap_or_default(),
            workflow: workflow(&a.baseline_workflow)?,
            program: a.baseline_program.clone(),
        },
        candidate: VariantSpec {
            variant: a.candidate.clone().unwrap_or_default(),
            workflow: workflow(&a.candidate_workflow)?,
            program: a.candidate_program.clone(),
        },
        scenarios: a.scenarios.clone(),
        trials: a.trials,
        seed: a.seed,
        scorer: a.scorer.clone(),
        margin: a.margin,
        deploy: a.deploy,
        workers: a.workers,
    };
    let lab = Lab::open(&a.conn)?;
    let c = {
        let _p = Progress::start(
            format!(
                "comparing {} and {} on {} scenarios",
                req.baseline.variant,
                req.candidate.variant,
                req.scenarios.len()
            ),
            true,
        );
        lab.compare(&req)?
    };
    print_recorded(&c, a.conn.format);
    Ok(verdict_exit(&c.verdict))
}

/// `corral sandbox comparisons list | get`.
#[derive(Debug, Subcommand)]
pub(crate) enum Recorded {
    /// List the tenant's recorded comparisons, newest first.
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
    /// Show one recorded comparison: its verdict and statistics.
    Get {
        /// The comparison's id.
        id: String,
        #[command(flatten)]
        conn: Conn,
    },
}

pub(crate) fn recorded(c: Recorded) -> CliResult {
    match c {
        Recorded::List { limit, after, conn } => {
            let page = Lab::open(&conn)?.list_comparisons(&PageRequest { limit, after })?;
            match conn.format {
                Format::Json => crate::output::print_json(&page),
                Format::Human => {
                    if page.items.is_empty() {
                        outln!("no comparisons");
                    }
                    for c in &page.items {
                        let side =
                            |k: &str| printable(c.extra[k]["variant"].as_str().unwrap_or("?"));
                        outln!(
                            "{}  {}  {} -> {}  delta {}{}",
                            c.id,
                            printable(&c.verdict),
                            side("baseline"),
                            side("candidate"),
                            c.delta
                                .map_or_else(|| "-".to_owned(), |d| format!("{d:+.4}")),
                            if c.deploy { "  deploy" } else { "" }
                        );
                    }
                    if let Some(next) = &page.next {
                        outln!("more: --after {}", printable(next));
                    }
                }
            }
            Ok(Exit::Ok)
        }
        Recorded::Get { id, conn } => {
            let c = Lab::open(&conn)?.comparison(&id)?;
            print_recorded(&c, conn.format);
            Ok(Exit::Ok)
        }
    }
}

fn print_recorded(c: &Comparison, format: Format) {
    match format {
        Format::Json => crate::output::print_json(c),
        Format::Human => {
            outln!(
                "comparison {}{}",
                c.id,
                if c.deploy { " (deploy)" } else { "" }
            );
            print_verdict(&serde_json::to_value(c).unwrap_or(Value::Null));
        }
    }
}

/// `--inspect BASE.eval CAND.eval`: the verdict over two Inspect logs.
fn inspect(paths: &[PathBuf], a: &Args) -> CliResult {
    let [base, cand] = paths else {
        return Err(CliError::usage(
            "`--inspect` takes two logs: BASE.eval CAND.eval",
        ));
    };
    let c = corral_lab::inspect::compare(base, cand, a.scorer.as_deref(), a.seed.unwrap_or(0))
        .map_err(|e| CliError::coded(e.code(), &e))?;
    match a.conn.format {
        Format::Json => crate::output::print_json(&c),
        Format::Human => print_verdict(&serde_json::to_value(&c).unwrap_or(Value::Null)),
    }
    Ok(verdict_exit(c.verdict.as_str()))
}

/// 1 for `regressed` (a finding), else 0.
fn verdict_exit(verdict: &str) -> Exit {
    if verdict == "regressed" {
        Exit::Findings
    } else {
        Exit::Ok
    }
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn interval(v: &Value) -> Option<String> {
    Some(format!(
        "[{:+.4}, {:+.4}]",
        num(&v["lower"])?,
        num(&v["upper"])?
    ))
}

/// The verdict, delta, interval, forcing rules, Wilson intervals and McNemar p, for people,
/// from the comparison's JSON (a recorded comparison keeps the statistics in `details`).
fn print_verdict(v: &Value) {
    let s = v.get("details").filter(|d| d.is_object()).unwrap_or(v);
    let verdict = v["verdict"]
        .as_str()
        .or(s["verdict"].as_str())
        .unwrap_or("?");
    outln!("verdict: {}", printable(verdict));
    let forced = v["forced_by"].as_str().or(s["forced_by"].as_str());
    if let Some(rule) = forced {
        outln!(
            "  forced inconclusive by: {} ({})",
            printable(rule),
            rule_text(rule)
        );
        if let Some(rules) = s["forced_rules"].as_array().filter(|r| r.len() > 1) {
            let all: Vec<String> = rules
                .iter()
                .filter_map(Value::as_str)
                .map(printable)
                .collect();
            outln!("  every rule that applies: {}", all.join(", "));
        }
    }
    let delta = num(&s["delta"]).or(num(&v["delta"]));
    match delta {
        Some(d) => outln!(
            "  delta (candidate - baseline): {d:+.4} over {} scenarios",
            s["scenarios"].as_u64().unwrap_or_default()
        ),
        None => outln!("  delta: none (no usable pairs)"),
    }
    if let Some(i) = interval(&s["interval"]) {
        outln!(
            "  95% interval: {i} (paired bootstrap, {} resamples, seed {}); margin +/-{}",
            s["resamples"].as_u64().unwrap_or_default(),
            s["seed"].as_u64().unwrap_or_default(),
            num(&s["margin"]).unwrap_or(0.05)
        );
    }
    match s.get("mcnemar").filter(|m| m.is_object()) {
        Some(m) => outln!(
            "  McNemar exact p: {:.4} (baseline only {}, candidate only {})",
            num(&m["p_value"]).unwrap_or(f64::NAN),
            m["baseline_only"].as_u64().unwrap_or_default(),
            m["candidate_only"].as_u64().unwrap_or_default()
        ),
        None => outln!("  McNemar: not applicable (not single-trial pass/fail data)"),
    }
    for side in ["baseline", "candidate"] {
        let b = &s[side];
        if !b.is_object() {
            continue;
        }
        let rate = num(&b["pass_rate"])
            .map(|r| format!("{r:.4}"))
            .unwrap_or_else(|| "-".to_owned());
        let wilson = interval(&b["wilson"]).unwrap_or_else(|| "-".to_owned());
        outln!(
            "  {side} {}: pass rate {rate} ({}/{} trials), Wilson 95% {wilson}, infrastructure errors {}",
            printable(b["name"].as_str().unwrap_or("?")),
            b["passes"].as_u64().unwrap_or_default(),
            b["trials_scored"].as_u64().unwrap_or_default(),
            b["infra_errors"].as_u64().unwrap_or_default()
        );
    }
}

fn rule_text(rule: &str) -> &'static str {
    match rule {
        "infra_errors" => "infrastructure errors on more than 5% of the trials",
        "unscored_run" => "a run was executed but not scored",
        "too_few_scenarios" => "fewer than 10 scenarios",
        "too_few_discordant" => "fewer than 6 discordant pairs",
        _ => "see docs/lab.md",
    }
}
