//! `corral sandbox tournament RUN_ID RUN_ID... --judge command:NAME`: grades finished runs of
//! one scenario by a command judge asked about every task and pair in both orders, and prints
//! the Bradley-Terry ranking with its intervals, the judge's position bias, the calls made, the
//! errors and the pairs not judged, and the verdict between the top two; the answer is stored,
//! and `corral sandbox tournaments get ID` prints it again.

use corral_client::sandbox::{PageRequest, Tournament, TournamentRequest};
use serde_json::Value;

use super::{Conn, Lab, Progress, printable};
use crate::{CliResult, Exit, Format};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The runs (2 to 16): finished runs of the same scenario and version, one per variant.
    #[arg(value_name = "RUN_ID", num_args = 2.., required = true)]
    runs: Vec<String>,
    /// The judge: command:NAME of a judge declared under `sandbox.judges`.
    #[arg(long, value_name = "command:NAME")]
    judge: String,
    /// The bootstrap's seed (default 0): the same seed gives the same intervals.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// The bootstrap's resamples (default 1000).
    #[arg(long, value_name = "B")]
    bootstrap: Option<u32>,
    #[command(flatten)]
    conn: Conn,
}

pub(crate) fn run(a: Args) -> CliResult {
    let req = TournamentRequest {
        runs: a.runs.clone(),
        judge: a.judge.clone(),
        seed: a.seed,
        bootstrap: a.bootstrap,
    };
    let lab = Lab::open(&a.conn)?;
    let t = {
        let _p = Progress::start(format!("judging {} runs", req.runs.len()), true);
        lab.tournament(&req)?
    };
    match a.conn.format {
        Format::Json => crate::output::print_json(&t),
        Format::Human => print(&t),
    }
    let v = serde_json::to_value(&t).unwrap_or(Value::Null);
    let incomplete = |k: &str| v[k].as_array().is_some_and(|x| !x.is_empty());
    // A tournament with a judge error or a pair left unjudged is not a full grading.
    Ok(if incomplete("errors") || incomplete("not_judged") {
        Exit::Findings
    } else {
        Exit::Ok
    })
}

/// `corral sandbox tournaments get | list`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Recorded {
    /// List the tenant's stored tournaments, newest first.
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
    /// Show a stored tournament: its ranking, position bias, judge calls, errors and pairs not
    /// judged.
    Get {
        /// The tournament's id.
        id: String,
        #[command(flatten)]
        conn: Conn,
    },
}

pub(crate) fn recorded(c: Recorded) -> CliResult {
    match c {
        Recorded::List { limit, after, conn } => {
            let page = Lab::open(&conn)?.list_tournaments(&PageRequest { limit, after })?;
            match conn.format {
                Format::Json => crate::output::print_json(&page),
                Format::Human => {
                    if page.items.is_empty() {
                        outln!("no tournaments");
                    }
                    for t in &page.items {
                        let v = serde_json::to_value(t).unwrap_or(Value::Null);
                        let s = |k: &str| printable(v[k].as_str().unwrap_or("?"));
                        let top = t
                            .ranking
                            .first()
                            .map(|r| printable(&r.variant))
                            .unwrap_or_else(|| "-".to_owned());
                        outln!(
                            "{}  scenario {}  {} runs  judge {}  {} judge calls  top {}",
                            s("id"),
                            s("scenario_id"),
                            t.ranking.len(),
                            s("judge"),
                            t.judge_calls,
                            top
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
            let t = Lab::open(&conn)?.get_tournament(&id)?;
            match conn.format {
                Format::Json => crate::output::print_json(&t),
                Format::Human => print(&t),
            }
            Ok(Exit::Ok)
        }
    }
}

fn share(v: &Value) -> String {
    v.as_f64()
        .map_or_else(|| "-".to_owned(), |x| format!("{x:.4}"))
}

fn print(t: &Tournament) {
    let v = serde_json::to_value(t).unwrap_or(Value::Null);
    let s = |k: &str| printable(v[k].as_str().unwrap_or("?"));
    outln!(
        "tournament {} of {} runs of scenario {} (version {}), judge {}",
        s("id"),
        t.ranking.len(),
        s("scenario_id"),
        v["scenario_version"].as_i64().unwrap_or_default(),
        s("judge")
    );
    for r in &t.ranking {
        outln!(
            "  {}. {}  run {}  strength {:.4}  95% [{:.4}, {:.4}]  wins {}/{}",
            r.rank,
            printable(&r.variant),
            printable(&r.run_id),
            r.strength,
            r.interval["lower"].as_f64().unwrap_or(f64::NAN),
            r.interval["upper"].as_f64().unwrap_or(f64::NAN),
            r.extra
                .get("wins")
                .and_then(Value::as_f64)
                .unwrap_or_default(),
            r.extra
                .get("judgments")
                .and_then(Value::as_u64)
                .unwrap_or_default()
        );
    }
    let b = &v["position_bias"];
    outln!(
        "position bias: the first slot preferred in {} of {} judgments that were not a tie ({}); the two orders disagreed on {} of {} pairs ({})",
        b["first_preferred"].as_u64().unwrap_or_default(),
        b["decisive"].as_u64().unwrap_or_default(),
        share(&b["first_share"]),
        b["pairs_disagreeing"].as_u64().unwrap_or_default(),
        b["pairs_both_orders"].as_u64().unwrap_or_default(),
        share(&b["order_disagreement"])
    );
    let list = |k: &str| v[k].as_array().cloned().unwrap_or_default();
    let (errors, not_judged) = (list("errors"), list("not_judged"));
    outln!(
        "judge calls: {} of at most {} (purpose judge); errors {}; pairs not judged {}; bootstrap {} resamples, seed {}",
        t.judge_calls,
        v["max_judge_calls"].as_u64().unwrap_or_default(),
        errors.len(),
        not_judged.len(),
        v["bootstrap"].as_u64().unwrap_or_default(),
        v["seed"].as_u64().unwrap_or_default()
    );
    for e in &errors {
        let f = |k: &str| printable(e[k].as_str().unwrap_or("?"));
        outln!(
            "  error: task {}, first {}, second {}: {}: {}",
            e["task"].as_u64().unwrap_or_default(),
            f("first"),
            f("second"),
            f("code"),
            f("message")
        );
    }
    for p in &not_judged {
        let f = |k: &str| printable(p[k].as_str().unwrap_or("?"));
        outln!(
            "  not judged: task {}, {} and {} ({})",
            p["task"].as_u64().unwrap_or_default(),
            f("a"),
            f("b"),
            f("code")
        );
    }
    let top = &v["top_two"];
    if top.is_object() {
        let c = &top["comparison"];
        let forced = c["forced_by"]
            .as_str()
            .map(|r| format!(", forced by {}", printable(r)))
            .unwrap_or_default();
        outln!(
            "top two: verdict {}{} (candidate {} against baseline {}, over the scenario's steps; delta {})",
            printable(c["verdict"].as_str().unwrap_or("?")),
            forced,
            printable(top["candidate"].as_str().unwrap_or("?")),
            printable(top["baseline"].as_str().unwrap_or("?")),
            c["delta"]
                .as_f64()
                .map_or_else(|| "-".to_owned(), |d| format!("{d:+.4}"))
        );
    }
}
