//! `corral sandbox replay RUN_ID [--variant V (--workflow FILE | --program NAME)]`:
//! deterministic replay of a recorded run (issue 15). The recording's responses answer every
//! call: without a variant its trajectory is re-issued and every output compared byte for byte
//! with the recorded one; with a variant the recorded task input is re-run, and each call the
//! recording lacks is a divergence. A history that cannot be put in order is `degraded`.
//!
//! Exit codes: 0 replayed identical (a trajectory) or without divergence (a variant); 1
//! degraded, a differing step, a divergence, or a refusal; 2 a usage, file or connection error.

use std::path::PathBuf;

use corral_client::sandbox::{ReplayReport, ReplayRequest};

use super::{Conn, Lab, printable, read_text};
use crate::{CliResult, Exit, Format};

/// `corral sandbox replay`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The recorded run's id (`corral sandbox recordings list`).
    run: String,
    /// Re-run the recorded task input under this variant label (default `identity` when
    /// `--workflow` or `--program` is given); absent: replay the recorded calls themselves.
    #[arg(long, value_name = "LABEL")]
    variant: Option<String>,
    /// The variant's declarative workflow (YAML file).
    #[arg(long, value_name = "FILE", conflicts_with = "program")]
    workflow: Option<PathBuf>,
    /// The variant's external program (a name under the config's `sandbox.programs`).
    #[arg(long, value_name = "NAME")]
    program: Option<String>,
    /// The seed.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    #[command(flatten)]
    conn: Conn,
}

pub(crate) fn run(a: Args) -> CliResult {
    let workflow = match &a.workflow {
        Some(p) => Some(read_text(p, "the workflow")?),
        None => None,
    };
    let req = ReplayRequest {
        variant: a.variant.clone(),
        workflow,
        program: a.program.clone(),
        seed: a.seed,
    };
    let report = Lab::open(&a.conn)?.replay(&a.run, &req)?;
    match a.conn.format {
        Format::Json => crate::output::print_json(&report),
        Format::Human => print_report(&report),
    }
    Ok(exit(&report))
}

fn exit(r: &ReplayReport) -> Exit {
    let clean = r.status == "replayed"
        && r.divergences.is_empty()
        && r.differing_steps.is_empty()
        && r.identical != Some(false);
    if clean { Exit::Ok } else { Exit::Findings }
}

fn print_report(r: &ReplayReport) {
    if r.status != "replayed" {
        outln!(
            "recording {}: {}, 0 steps: {}",
            printable(&r.recording),
            printable(&r.status),
            printable(r.reason.as_deref().unwrap_or(""))
        );
        return;
    }
    let run = r.run.as_ref().map_or("-", |run| run.id.as_str());
    outln!(
        "recording {}: replayed, {} step(s), run {run}",
        printable(&r.recording),
        r.steps
    );
    match r.identical {
        Some(true) => outln!("  every output is the recorded one, byte for byte"),
        Some(false) => outln!(
            "  outputs differ from the recording at step(s) {}",
            r.differing_steps
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => {}
    }
    if r.divergences.is_empty() && r.identical.is_none() {
        outln!("  no divergence: every call was one the recording holds");
    }
    for d in &r.divergences {
        let expected = match &d.expected {
            Some(e) => format!(
                "the recording expected call {} {} ({})",
                e.seq,
                printable(&e.op),
                short(&e.args_hash)
            ),
            None => "the recording had no call left".to_owned(),
        };
        outln!(
            "  divergence at step {}: {} ({}); {expected}",
            d.step,
            printable(&d.op),
            short(&d.args_hash)
        );
    }
}

/// The first 12 characters of a hash.
fn short(h: &str) -> String {
    printable(&h.chars().take(12).collect::<String>())
}
